//! A Python store as a [`lowcon_store::Store`]: torch.distributed's (`TCPStore`,
//! `PrefixStore`, ...) or any object with torch's store methods (`set(key, value)`,
//! `get(key) -> bytes`, `add(key, delta) -> int`, `wait(keys, timedelta)`), so a group
//! can meet through the framework's store with no second port.
//!
//! Each call takes the GIL (the caller has released it: group creation and collectives
//! run with the GIL released). torch's store methods release it again while they block.

use std::time::Duration;

use lowcon_store::{Store, StoreError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

pub(crate) struct PyStore {
    obj: Py<PyAny>,
}

impl PyStore {
    pub(crate) fn new(obj: Py<PyAny>) -> Self {
        Self { obj }
    }
}

const WHERE: &str = "the Python store";

fn server_error(py: Python<'_>, op: &'static str, key: &str, e: PyErr) -> StoreError {
    StoreError::Server { addr: WHERE.into(), op, keys: key.into(), message: e.value(py).to_string() }
}

impl Store for PyStore {
    fn set(&mut self, key: &str, value: &[u8]) -> Result<(), StoreError> {
        Python::attach(|py| {
            self.obj
                .call_method1(py, "set", (key, PyBytes::new(py, value)))
                .map(|_| ())
                .map_err(|e| server_error(py, "set", key, e))
        })
    }

    fn get_timeout(&mut self, key: &str, timeout: Duration) -> Result<Vec<u8>, StoreError> {
        Python::attach(|py| {
            let td = py
                .import("datetime")
                .and_then(|m| m.getattr("timedelta"))
                // At least 1 ms: torch reads a zero timeout as "wait forever".
                .and_then(|t| t.call1((0, timeout.as_secs_f64().max(1e-3))))
                .map_err(|e| server_error(py, "get", key, e))?;
            if let Err(e) = self.obj.call_method1(py, "wait", (vec![key], td)) {
                // torch raises DistStoreError (a RuntimeError) on a wait that runs out.
                let msg = e.value(py).to_string();
                if msg.to_lowercase().contains("timeout") || msg.to_lowercase().contains("timed out") {
                    return Err(StoreError::Timeout {
                        addr: WHERE.into(),
                        op: "get",
                        keys: key.into(),
                        secs: timeout.as_secs_f64(),
                    });
                }
                return Err(server_error(py, "wait", key, e));
            }
            let v = self.obj.call_method1(py, "get", (key,)).map_err(|e| server_error(py, "get", key, e))?;
            let b = v.bind(py);
            match b.cast::<PyBytes>() {
                Ok(bytes) => Ok(bytes.as_bytes().to_vec()),
                Err(_) => Err(StoreError::Protocol {
                    addr: WHERE.into(),
                    op: "get",
                    message: format!(
                        "get({key:?}) returned a {}, not bytes",
                        b.get_type().name().map(|n| n.to_string()).unwrap_or_default()
                    ),
                }),
            }
        })
    }

    fn add(&mut self, key: &str, delta: i64) -> Result<i64, StoreError> {
        Python::attach(|py| {
            let v = self.obj.call_method1(py, "add", (key, delta)).map_err(|e| server_error(py, "add", key, e))?;
            v.extract::<i64>(py).map_err(|e| server_error(py, "add", key, e))
        })
    }
}
