//! Where this process's GPU group goes: the functions Python asks before it builds one.

use pyo3::prelude::*;

use crate::errors;

/// The number of CUDA devices this process sees (0 without a driver).
#[pyfunction]
pub(crate) fn device_count() -> usize {
    lowcon::cuda::device_count().unwrap_or(0)
}

/// The CUDA device a GPU group of this process would use (LOWCON_DEVICE, else
/// LOCAL_RANK, else RANK; round-robin over the visible devices with LOWCON_SHARE_GPU=1):
/// set torch's device from it so that torch and lowcon agree.
#[pyfunction]
pub(crate) fn device_index() -> PyResult<usize> {
    let rank = std::env::var("RANK").ok().and_then(|v| v.trim().parse().ok()).unwrap_or(0);
    lowcon::cuda::rank_device(rank).map_err(errors::to_py)
}

/// Whether LOWCON_SHARE_GPU lets ranks share a GPU (an error for a malformed value).
#[pyfunction]
pub(crate) fn share_gpu() -> PyResult<bool> {
    lowcon::config::share_gpu().map_err(errors::to_py)
}
