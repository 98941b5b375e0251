//! The two backends behind a Python `Group`, and the operations they share.

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;

use crate::Group;
use crate::errors::{invalid, to_py};
use crate::wait::recv_or_signal;

/// The group behind a Python `Group`: lowcon's either-backend handle (NOTE [either
/// backend]), which dispatches what both backends share.
pub(crate) type Backend = lowcon::Group;

/// `"gpu"` or `"host"` as whether the group is on GPUs.
pub(crate) fn is_gpu(backend: &str) -> PyResult<bool> {
    match backend {
        "gpu" => Ok(true),
        "host" => Ok(false),
        other => Err(invalid(format!("backend {other:?}: expected \"gpu\" or \"host\""))),
    }
}

/// Makes a group with `make` on a thread of its own (the rendezvous) while this thread
/// watches for signals. On Ctrl-C this returns at once, leaving that thread to finish by
/// itself (it cannot be interrupted; it ends at the set-up timeout).
pub(crate) fn join(py: Python<'_>, make: impl FnOnce() -> lowcon::Result<Backend> + Send + 'static) -> PyResult<Group> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("lowcon-init".into())
        .spawn(move || {
            let _ = tx.send(make());
        })
        .map_err(|e| PyRuntimeError::new_err(format!("lowcon: cannot start a thread: {e}")))?;
    recv_or_signal(py, rx).map_err(|(e, _)| e)?.map(Group::wrap).map_err(to_py)
}
