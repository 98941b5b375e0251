//! The CUDA host core: the driver (loaded at run time), devices, streams, events, the
//! embedded PTX module and kernel launches.
//!
//! Built on cudarc's safe driver layer with `dynamic-loading`: nothing CUDA is needed
//! to build lowcon, and a machine without a driver gets [`Error::NoDriver`] from the
//! first call instead of a panic. Areas cudarc does not wrap (VMM export/import, IPC,
//! stream memory operations) get thin `result`-style modules of their own next to this
//! one, as the symmetric-memory layer needs them. Those raw calls stay inside the crate
//! (`raw`); callers outside it get safe types: [`Stream`]'s copies, fills and memory
//! operations at raw addresses (`unsafe` where the caller vouches for an address),
//! [`DeviceAlloc`] and [`MappedHostAlloc`] for memory no peer maps.

mod alloc;
mod device;
pub mod enqueued;
pub(crate) mod kernels;
pub(crate) mod raw;
mod stream;

pub use alloc::{DeviceAlloc, MappedHostAlloc};
pub use device::{Device, DeviceInfo};
pub use kernels::{Kernels, PTX, RoundTripBuffers};
pub use raw::capture::Status as CaptureStatus;
pub use raw::graph::NodeCounts;
pub(crate) use stream::Exec;
pub use stream::{DeviceRecord, Event, Graph, Stream, StreamPriority, device_ptr};

use std::sync::OnceLock;

use crate::error::{Error, Result, drv};
use cudarc::driver::{DriverError, result, sys};

/// Loads the driver library and calls `cuInit` once per process.
///
/// Returns [`Error::NoDriver`] when `libcuda.so.1` cannot be loaded: cudarc panics if
/// asked to load a missing library, so this check must precede every other driver call.
pub fn init() -> Result<()> {
    // `None`: no driver library; `Some(Err)`: cuInit failed.
    static INIT: OnceLock<Option<std::result::Result<(), DriverError>>> = OnceLock::new();
    let r = INIT.get_or_init(|| {
        // SAFETY: `is_culib_present` only tries `dlopen` on the candidate names.
        if !unsafe { sys::is_culib_present() } {
            return None;
        }
        Some(result::init())
    });
    match r {
        None => Err(Error::NoDriver),
        Some(Ok(())) => Ok(()),
        Some(Err(e)) => Err(Error::driver("cuInit", *e)),
    }
}

/// Whether a CUDA driver library is present (without initialising it).
pub fn driver_present() -> bool {
    // SAFETY: only tries `dlopen` on the candidate library names.
    unsafe { sys::is_culib_present() }
}

/// The number of CUDA devices visible to this process (0 when `cuInit` reports
/// `CUDA_ERROR_NO_DEVICE`). Errors with [`Error::NoDriver`] when there is no driver.
pub fn device_count() -> Result<usize> {
    match init() {
        Ok(()) => {}
        Err(Error::Driver { name, .. }) if name == "CUDA_ERROR_NO_DEVICE" => return Ok(0),
        Err(e) => return Err(e),
    }
    let n = result::device::get_count().map_err(drv("cuDeviceGetCount"))?;
    Ok(n.max(0) as usize)
}

/// The CUDA device index of a rank that names none in code: `LOWCON_DEVICE` if set, else
/// `LOCAL_RANK`, else `rank`. With [`crate::config::share_gpu`] on and no `LOWCON_DEVICE`,
/// the local rank is taken modulo the number of visible devices, so that N ranks land
/// round-robin on fewer GPUs (torchrun with `LOWCON_SHARE_GPU=1` alone puts every rank on
/// the one GPU of a 1-GPU machine). A malformed variable is an error naming it.
pub fn rank_device(rank: usize) -> Result<usize> {
    use crate::config::{DEVICE_ENV, pick_device, share_gpu};
    let get = |k: &str| std::env::var(k).ok();
    let share = share_gpu()?;
    let count = if share && get(DEVICE_ENV).is_none() { Some(device_count()?) } else { None };
    pick_device(get(DEVICE_ENV).as_deref(), get("LOCAL_RANK").as_deref(), rank, share, count)
}

/// The CUDA driver version as (major, minor), e.g. (13, 0).
pub fn driver_version() -> Result<(u32, u32)> {
    init()?;
    let mut v = 0i32;
    // SAFETY: `v` is a valid out-pointer; the driver is initialised.
    unsafe { sys::cuDriverGetVersion(&mut v) }.result().map_err(drv("cuDriverGetVersion"))?;
    Ok(((v / 1000) as u32, ((v % 1000) / 10) as u32))
}
