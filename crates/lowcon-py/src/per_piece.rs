//! Per-piece signals for Python (`lowcon.tp`): the arrivals of an all-gather (NOTE
//! [per-piece arrivals] in `host/src/coll/gpu/per_piece/arrivals.rs`).

use std::sync::Arc;

use pyo3::prelude::*;

use crate::errors::to_py;
use lowcon::cuda::{Device, Stream};

/// One CUDA event per rank, recorded by `Group.all_gather(..., arrivals=...)` as each
/// rank's piece lands in the output. Make it with `Group.arrivals()`.
#[pyclass(module = "lowcon._native", frozen, name = "Arrivals")]
pub(crate) struct PyArrivals {
    pub(crate) inner: Arc<lowcon::Arrivals>,
    device: Device,
}

impl PyArrivals {
    pub(crate) fn new(inner: lowcon::Arrivals, device: Device) -> Self {
        Self { inner: Arc::new(inner), device }
    }

    /// The caller's raw stream (0: the legacy default stream) of the arrivals' device.
    fn stream(&self, raw: isize) -> PyResult<Stream> {
        // SAFETY: the caller's stream of this device, alive while the caller uses it.
        unsafe { Stream::wrap_borrowed(&self.device, raw as usize as _) }.map_err(to_py)
    }
}

#[pymethods]
impl PyArrivals {
    /// Work enqueued on `stream` (a raw CUDA stream of the group's device; 0: the legacy
    /// default stream) after this waits for piece `piece` of the last all-gather given
    /// these arrivals. Enqueue it before the next all-gather that reuses them.
    #[pyo3(signature = (piece, stream))]
    fn wait(&self, piece: usize, stream: isize) -> PyResult<()> {
        let s = self.stream(stream)?;
        self.inner.wait(&s, piece).map_err(to_py)
    }

    /// Work enqueued on `stream` after this waits until the last all-gather given these
    /// arrivals has started (ce-pull: passed its entry barrier; else landed every piece).
    #[pyo3(signature = (stream))]
    fn wait_started(&self, stream: isize) -> PyResult<()> {
        let s = self.stream(stream)?;
        self.inner.wait_started(&s).map_err(to_py)
    }

    /// The order in which ce-pull lands the pieces: this rank's first, then rank + 1, ...
    #[getter]
    fn order(&self) -> Vec<usize> {
        self.inner.order()
    }

    /// The number of pieces (ranks).
    #[getter]
    fn pieces(&self) -> usize {
        self.inner.pieces()
    }
}
