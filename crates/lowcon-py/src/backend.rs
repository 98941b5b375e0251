//! The two backends behind a Python `Group`, and the operations they share.

use lowcon::{GpuGroup, HostGroup};

pub(crate) enum Backend {
    Gpu(GpuGroup),
    Host(Box<HostGroup>),
}

/// The group operations both backends share, so callers need not match on the backend.
impl Backend {
    pub(crate) fn abort(&self) {
        match self {
            Backend::Gpu(g) => g.abort(),
            Backend::Host(g) => g.abort(),
        }
    }

    pub(crate) fn all_gather_bytes(&self, name: &str, data: &[u8]) -> lowcon::Result<Vec<Vec<u8>>> {
        match self {
            Backend::Gpu(g) => g.all_gather_bytes(name, data),
            Backend::Host(g) => g.all_gather_bytes(name, data),
        }
    }

    pub(crate) fn publish(&self, name: &str, data: &[u8]) -> lowcon::Result<()> {
        match self {
            Backend::Gpu(g) => g.publish(name, data),
            Backend::Host(g) => g.publish(name, data),
        }
    }

    pub(crate) fn published(&self, name: &str) -> lowcon::Result<Vec<Vec<u8>>> {
        match self {
            Backend::Gpu(g) => g.published(name),
            Backend::Host(g) => g.published(name),
        }
    }
}
