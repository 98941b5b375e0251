//! lowcon's errors as Python exceptions. The classes live in `lowcon/_errors.py` (so
//! that `InvalidArgument` can also be a `ValueError`); the message is the Rust error's,
//! which names the rank, the peer or the sizes.

use pyo3::prelude::*;
use pyo3::types::PyType;

use lowcon::Error;

/// Looks up `lowcon._errors.<name>` and makes an exception of it.
fn raise(name: &str, msg: String) -> PyErr {
    Python::attach(|py| {
        let cls = py
            .import("lowcon._errors")
            .and_then(|m| m.getattr(name))
            .and_then(|c| c.cast_into::<PyType>().map_err(PyErr::from));
        match cls {
            Ok(c) => PyErr::from_type(c, msg),
            Err(e) => e,
        }
    })
}

/// `lowcon.InvalidArgument` (also a `ValueError`).
pub(crate) fn invalid(msg: String) -> PyErr {
    raise("InvalidArgument", msg)
}

/// The Python exception for a lowcon error.
pub(crate) fn to_py(e: Error) -> PyErr {
    let name = match &e {
        Error::InvalidArgument(_) => "InvalidArgument",
        Error::PeerTimeout { .. } | Error::PeerGone { .. } | Error::DeviceTimeout(_) | Error::GroupFailed(_) => {
            "PeerError"
        }
        Error::NoDriver | Error::Driver { .. } | Error::NoSuchDevice { .. } | Error::MissingKernel { .. } => {
            "CudaError"
        }
        _ => "Error",
    };
    // The class says "invalid argument": the message does not repeat it.
    let msg = match e {
        Error::InvalidArgument(m) => m,
        e => e.to_string(),
    };
    raise(name, msg)
}
