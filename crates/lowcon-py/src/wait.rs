//! Waiting without blocking the interpreter: calls that can wait run with the GIL
//! released while the caller's thread checks for signals (Ctrl-C) every 50 ms.

use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::Duration;

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;

/// Waits for `rx` with the GIL released, checking for signals every 50 ms. On a signal
/// (Ctrl-C), returns its error with the receiver, whose sender is still running.
pub(crate) fn recv_or_signal<T: Send>(py: Python<'_>, mut rx: Receiver<T>) -> Result<T, (PyErr, Option<Receiver<T>>)> {
    loop {
        let (got, back) = py.detach(move || (rx.recv_timeout(Duration::from_millis(50)), rx));
        rx = back;
        match got {
            Ok(v) => return Ok(v),
            Err(RecvTimeoutError::Disconnected) => {
                return Err((PyRuntimeError::new_err("lowcon: internal error: a call panicked"), None));
            }
            Err(RecvTimeoutError::Timeout) => {
                if let Err(e) = py.check_signals() {
                    return Err((e, Some(rx)));
                }
            }
        }
    }
}

/// Runs `f` on a helper thread with the GIL released (`recv_or_signal`); on a signal
/// (Ctrl-C) calls `abort`, waits for `f` to give up, and raises.
pub(crate) fn interruptible<T: Send>(py: Python<'_>, abort: impl Fn(), f: impl FnOnce() -> T + Send) -> PyResult<T> {
    std::thread::scope(|s| {
        let (tx, rx) = std::sync::mpsc::channel();
        s.spawn(move || {
            // A panic stays in this thread (the scope would re-raise it as a panic).
            if let Ok(v) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
                let _ = tx.send(v);
            }
        });
        recv_or_signal(py, rx).map_err(|(e, rx)| {
            if let Some(rx) = rx {
                abort();
                let _ = py.detach(move || rx.recv());
            }
            e
        })
    })
}
