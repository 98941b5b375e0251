//! The one error type of the `lowcon` crate.
//!
//! Variants carry what a caller needs to act: the CUDA call and its error name, the
//! device index, the kernel, the rank or peer. Driver errors keep their numeric code.

use cudarc::driver::DriverError;
use lowcon_abi::ErrorRecord;

/// Everything that can go wrong in lowcon.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// `libcuda.so.1` could not be loaded: no NVIDIA driver on this machine.
    #[error(
        "no CUDA driver (libcuda.so.1) found: install the NVIDIA driver (or add its directory to \
         LD_LIBRARY_PATH)"
    )]
    NoDriver,

    /// A CUDA driver call returned an error.
    #[error("CUDA call {call} failed: {name} (code {code}): {description}")]
    Driver {
        /// The driver API function (or lowcon operation) that failed.
        call: &'static str,
        /// The numeric `CUresult`.
        code: u32,
        /// The `CUresult` name, e.g. `CUDA_ERROR_INVALID_VALUE`.
        name: String,
        /// The driver's description of the error.
        description: String,
    },

    /// A device index past the number of visible devices.
    #[error("CUDA device {index} does not exist: {count} device(s) visible (check CUDA_VISIBLE_DEVICES)")]
    NoSuchDevice {
        /// The index asked for.
        index: usize,
        /// How many devices the driver reports.
        count: usize,
    },

    /// A kernel that the host expects is not in the embedded PTX (a build mismatch).
    #[error("kernel {name} is missing from lowcon's embedded PTX: {source}")]
    MissingKernel {
        /// The kernel's exported name.
        name: &'static str,
        /// The driver's error.
        source: Box<Error>,
    },

    /// A caller passed something that cannot work; the message names the argument.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// Setting up a group or an allocation failed a check; the message names the ranks,
    /// devices or sizes involved.
    #[error("{0}")]
    Rendezvous(String),

    /// A peer did not do its part in time.
    #[error("rank {rank}: timed out after {secs:.1} s waiting for peer rank {peer}: {what}")]
    PeerTimeout {
        /// This rank.
        rank: usize,
        /// The peer that did not arrive.
        peer: usize,
        /// What this rank was waiting for.
        what: String,
        /// The timeout that expired.
        secs: f64,
    },

    /// A peer's process is gone (its sockets closed).
    #[error("rank {rank}: peer rank {peer} is gone (its process exited or was killed) while {what}")]
    PeerGone {
        /// This rank.
        rank: usize,
        /// The peer that disappeared.
        peer: usize,
        /// What this rank was doing.
        what: String,
    },

    /// The group saw an error earlier and refuses further work; the message is the
    /// original error.
    #[error("the group is unusable after an earlier error: {0}")]
    GroupFailed(String),

    /// The store failed (connect, timeout, ...).
    #[error(transparent)]
    Store(#[from] lowcon_store::StoreError),

    /// An operating-system call failed.
    #[error("{call} failed: {source}")]
    Os {
        /// The call, with what it was for.
        call: String,
        /// The errno.
        source: nix::errno::Errno,
    },

    /// A kernel's bounded wait expired; the record names the waiting rank and the peer.
    #[error("{}", describe_timeout(.0))]
    DeviceTimeout(ErrorRecord),
}

/// A kernel's timeout in words: the peer it waited for, or, for the waits that no single
/// peer's signal ends (`ErrorRecord::NO_PEER`: the address verifier's release of a
/// predicted call, written by this rank's host; a reduction's wait for its own piece's
/// copies; a wire piece wait whose word showed no missing peer), what they waited for.
fn describe_timeout(r: &ErrorRecord) -> String {
    let whom = match r.peer {
        ErrorRecord::NO_PEER => "a word no single peer's signal ends (the address verifier's release of a \
                                 predicted call, a piece's own copies, or a wire piece whose late peer could not be \
                                 told)"
            .to_string(),
        p => format!("peer {p}"),
    };
    format!(
        "GPU wait timed out on rank {} waiting for {whom} (channel {}, expected epoch {}, saw {}, after {:.3} s)",
        r.rank,
        r.channel,
        r.expected,
        r.observed,
        r.waited_ns as f64 * 1e-9
    )
}

/// `Result` with lowcon's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Wraps a cudarc driver error with the call that produced it.
    pub(crate) fn driver(call: &'static str, e: DriverError) -> Self {
        let name =
            e.error_name().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|_| "CUDA_ERROR_UNKNOWN".into());
        let description = e.error_string().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
        Error::Driver { call, code: e.0 as u32, name, description }
    }

    /// This error with the set-up step it happened in (`step`, e.g. "creating group x:
    /// the socket mesh"), so that a wait that ran out says which wait it was. Errors of
    /// other kinds (a bad argument, a driver failure) are returned as they are.
    pub(crate) fn during(self, step: impl std::fmt::Display) -> Self {
        match self {
            Error::PeerTimeout { rank, peer, what, secs } => {
                Error::PeerTimeout { rank, peer, what: format!("{step}: {what}"), secs }
            }
            Error::PeerGone { rank, peer, what } => Error::PeerGone { rank, peer, what: format!("{step}: {what}") },
            Error::Rendezvous(m) => Error::Rendezvous(format!("{step}: {m}")),
            Error::Store(e) => Error::Rendezvous(format!("{step}: {e}")),
            other => other,
        }
    }

    /// A copy of a group failure as it was first reported (a dead or late peer, a
    /// device-side timeout), for reporting it again; any other error as
    /// [`Error::GroupFailed`] with its message.
    pub(crate) fn failure_copy(&self) -> Error {
        match self {
            Error::PeerTimeout { rank, peer, what, secs } => {
                Error::PeerTimeout { rank: *rank, peer: *peer, what: what.clone(), secs: *secs }
            }
            Error::PeerGone { rank, peer, what } => Error::PeerGone { rank: *rank, peer: *peer, what: what.clone() },
            Error::DeviceTimeout(rec) => Error::DeviceTimeout(*rec),
            Error::GroupFailed(m) => Error::GroupFailed(m.clone()),
            other => Error::GroupFailed(other.to_string()),
        }
    }

    /// The driver's `CUresult` name, when this is a driver error.
    pub fn driver_error_name(&self) -> Option<&str> {
        match self {
            Error::Driver { name, .. } => Some(name),
            _ => None,
        }
    }
}

/// `.map_err(drv("cuXxx"))`: attach the call name to a cudarc error.
pub(crate) fn drv(call: &'static str) -> impl FnOnce(DriverError) -> Error {
    move |e| Error::driver(call, e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_device_timeout_names_the_peer_or_what_it_waited_for() {
        let r = ErrorRecord {
            code: 1,
            rank: 2,
            peer: 3,
            channel: 5,
            expected: 48,
            observed: 47,
            waited_ns: 60_000_000_000,
        };
        let s = Error::DeviceTimeout(r).to_string();
        assert!(
            s.contains("on rank 2 waiting for peer 3 (channel 5, expected epoch 48, saw 47, after 60.000 s)"),
            "{s}"
        );
        let s = Error::DeviceTimeout(ErrorRecord { peer: ErrorRecord::NO_PEER, ..r }).to_string();
        assert!(s.contains("waiting for a word no single peer's signal ends") && !s.contains("4294967295"), "{s}");
    }
}
