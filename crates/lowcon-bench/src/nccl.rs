//! NCCL as the benchmark's baseline, loaded at run time through cudarc's NCCL bindings
//! (never a build-time dependency of the library). Two communicators:
//! - `default`: NCCL as most users run it (SM kernels);
//! - `ce`: NCCL ≥ 2.28's copy-engine collectives: zero-CTA policy, buffers from
//!   `ncclMemAlloc` registered as symmetric windows, on a created (non-legacy) stream.
//!
//! When the library is missing or a mode is refused, the caller is told why and the
//! benchmark goes on without it.

use std::ffi::{CStr, c_void};

use cudarc::nccl::sys;
use lowcon::{DType, GpuGroup, ReduceOp};

/// `NCCL_CTA_POLICY_ZERO` (nccl.h, 2.28): collectives that use no CTAs where possible.
const CTA_POLICY_ZERO: i32 = 0x02;
/// `NCCL_WIN_COLL_SYMMETRIC` (nccl.h, 2.27+).
const WIN_COLL_SYMMETRIC: i32 = 0x01;
/// `NCCL_CONFIG_UNDEF_INT`.
const UNDEF_INT: i32 = i32::MIN;

fn check(call: &str, r: sys::ncclResult_t) -> Result<(), String> {
    if r == sys::ncclResult_t::ncclSuccess {
        return Ok(());
    }
    // SAFETY: ncclGetErrorString returns a static C string for any result code.
    let msg = unsafe { CStr::from_ptr(sys::ncclGetErrorString(r)) }.to_string_lossy().into_owned();
    Err(format!("{call}: {msg} ({r:?})"))
}

/// Whether libnccl can be loaded, and its version (e.g. 22809).
pub fn version() -> Result<i32, String> {
    // SAFETY: only probes for the shared library.
    if !unsafe { sys::is_culib_present() } {
        return Err("libnccl.so is not on the library path".into());
    }
    let mut v = 0;
    // SAFETY: valid out-pointer; the library is present.
    check("ncclGetVersion", unsafe { sys::ncclGetVersion(&mut v) })?;
    Ok(v)
}

/// The file NCCL's INIT log goes to when [`crate::nccl_debug_to_file`] set it up, for
/// this process (`%p` in `NCCL_DEBUG_FILE` is NCCL's pid placeholder).
pub fn debug_file() -> Option<std::path::PathBuf> {
    let pattern = std::env::var("NCCL_DEBUG_FILE").ok()?;
    Some(pattern.replace("%p", &std::process::id().to_string()).into())
}

/// The channel count NCCL's INIT log reports for the newest communicator (the last
/// `N coll channels` line): NCCL runs one CTA per channel, so a large collective on
/// the default communicator uses this many CTAs.
pub fn parse_coll_channels(log: &str) -> Option<u32> {
    log.lines().rev().find_map(|l| {
        let i = l.find(" coll channels")?;
        l[..i].split_whitespace().last()?.parse().ok()
    })
}

/// `NCCL_MIN_NCHANNELS` when it equals `NCCL_MAX_NCHANNELS` (the channels are pinned).
pub fn pinned_channels(min: Option<&str>, max: Option<&str>) -> Option<u32> {
    let (a, b) = (min?.trim().parse::<u32>().ok()?, max?.trim().parse::<u32>().ok()?);
    (a == b).then_some(a)
}

/// The CTAs of NCCL's default collectives and where the number came from: `pinned`
/// (`NCCL_MIN_NCHANNELS` = `NCCL_MAX_NCHANNELS`), `debug` (the INIT log of the newest
/// communicator), or `unknown`. Call it right after making the communicator.
pub fn cta_count() -> (Option<u32>, String) {
    let env = |k| std::env::var(k).ok();
    if let Some(n) = pinned_channels(env("NCCL_MIN_NCHANNELS").as_deref(), env("NCCL_MAX_NCHANNELS").as_deref()) {
        return (Some(n), "pinned".into());
    }
    match debug_file().and_then(|p| std::fs::read_to_string(p).ok()).and_then(|t| parse_coll_channels(&t)) {
        Some(n) => (Some(n), "debug".into()),
        None => (None, "unknown".into()),
    }
}

/// One NCCL communicator over the group's ranks.
pub struct Comm {
    comm: sys::ncclComm_t,
    /// Windows registered on it (deregistered on drop).
    windows: Vec<sys::ncclWindow_t>,
}

impl Comm {
    /// Collective over `g`'s ranks: rank 0 makes the unique id, the store carries it.
    pub fn new(g: &GpuGroup, name: &str, copy_engine: bool) -> Result<Self, String> {
        let mut id = sys::ncclUniqueId { internal: [0; 128] };
        if g.rank() == 0 {
            // SAFETY: valid out-pointer.
            check("ncclGetUniqueId", unsafe { sys::ncclGetUniqueId(&mut id) })?;
        }
        let bytes: Vec<u8> = id.internal.iter().map(|&c| c as u8).collect();
        let all = g.all_gather_bytes(&format!("nccl-id/{name}"), &bytes).map_err(|e| e.to_string())?;
        for (d, s) in id.internal.iter_mut().zip(&all[0]) {
            *d = *s as _;
        }
        // NCCL_CONFIG_INITIALIZER for the 2.28 layout.
        // SAFETY: an all-zero config is a valid bit pattern (integers and null pointers).
        let mut config: sys::ncclConfig_t = unsafe { std::mem::zeroed() };
        config.size = size_of::<sys::ncclConfig_t>();
        config.magic = 0xcafe_beef;
        config.version = 22800;
        for f in [
            &mut config.blocking,
            &mut config.cgaClusterSize,
            &mut config.minCTAs,
            &mut config.maxCTAs,
            &mut config.splitShare,
            &mut config.trafficClass,
            &mut config.collnetEnable,
            &mut config.CTAPolicy,
            &mut config.shrinkShare,
            &mut config.nvlsCTAs,
            &mut config.nChannelsPerNetPeer,
            &mut config.nvlinkCentricSched,
        ] {
            *f = UNDEF_INT;
        }
        if copy_engine {
            config.CTAPolicy = CTA_POLICY_ZERO;
        }
        g.device().bind_to_thread().map_err(|e| e.to_string())?;
        let mut comm: sys::ncclComm_t = std::ptr::null_mut();
        // SAFETY: valid out-pointer, id and config; the group's device is current.
        check("ncclCommInitRankConfig", unsafe {
            sys::ncclCommInitRankConfig(&mut comm, g.world_size() as i32, id, g.rank() as i32, &mut config)
        })?;
        Ok(Self { comm, windows: Vec::new() })
    }

    /// `bytes` from `ncclMemAlloc`, registered as a symmetric window (collective).
    pub fn alloc_window(&mut self, bytes: usize) -> Result<NcclMem, String> {
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: valid out-pointer.
        check("ncclMemAlloc", unsafe { sys::ncclMemAlloc(&mut p, bytes) })?;
        let mut win: sys::ncclWindow_t = std::ptr::null_mut();
        // SAFETY: `p` is a live ncclMemAlloc allocation of `bytes`.
        check("ncclCommWindowRegister", unsafe {
            sys::ncclCommWindowRegister(self.comm, p, bytes, &mut win, WIN_COLL_SYMMETRIC)
        })?;
        self.windows.push(win);
        Ok(NcclMem { ptr: p })
    }

    /// Enqueues an all-gather of `bytes` per rank.
    ///
    /// # Safety
    /// `send` valid for `bytes`, `recv` for `world * bytes`, on this rank's GPU.
    pub unsafe fn all_gather(
        &self,
        send: u64,
        recv: u64,
        bytes: usize,
        stream: sys::cudaStream_t,
    ) -> Result<(), String> {
        // SAFETY: forwarded from the caller.
        check("ncclAllGather", unsafe {
            sys::ncclAllGather(
                send as *const c_void,
                recv as *mut c_void,
                bytes,
                sys::ncclDataType_t::ncclUint8,
                self.comm,
                stream,
            )
        })
    }

    /// Enqueues a reduce-scatter with `count` output elements.
    ///
    /// # Safety
    /// `send` valid for `world * count` elements, `recv` for `count`.
    pub unsafe fn reduce_scatter(
        &self,
        send: u64,
        recv: u64,
        count: usize,
        dtype: DType,
        op: ReduceOp,
        stream: sys::cudaStream_t,
    ) -> Result<(), String> {
        let dt = match dtype {
            DType::F32 => sys::ncclDataType_t::ncclFloat32,
            DType::F16 => sys::ncclDataType_t::ncclFloat16,
            DType::Bf16 => sys::ncclDataType_t::ncclBfloat16,
            DType::I32 => sys::ncclDataType_t::ncclInt32,
            DType::U8 => sys::ncclDataType_t::ncclUint8,
            DType::I64 => sys::ncclDataType_t::ncclInt64,
        };
        let op = match op {
            ReduceOp::Sum => sys::ncclRedOp_t::ncclSum,
            ReduceOp::Avg => sys::ncclRedOp_t::ncclAvg,
            ReduceOp::Min => sys::ncclRedOp_t::ncclMin,
            ReduceOp::Max => sys::ncclRedOp_t::ncclMax,
        };
        // SAFETY: forwarded from the caller.
        check("ncclReduceScatter", unsafe {
            sys::ncclReduceScatter(send as *const c_void, recv as *mut c_void, count, dt, op, self.comm, stream)
        })
    }
}

impl Drop for Comm {
    fn drop(&mut self) {
        for w in self.windows.drain(..) {
            // SAFETY: registered on this communicator, deregistered once.
            let _ = unsafe { sys::ncclCommWindowDeregister(self.comm, w) };
        }
        // SAFETY: created by ncclCommInitRankConfig, destroyed once.
        let _ = unsafe { sys::ncclCommDestroy(self.comm) };
    }
}

/// Memory from `ncclMemAlloc` (freed on drop; drop it after its communicator's windows).
pub struct NcclMem {
    ptr: *mut c_void,
}

impl NcclMem {
    /// Its device address.
    pub fn ptr(&self) -> u64 {
        self.ptr as u64
    }
}

impl Drop for NcclMem {
    fn drop(&mut self) {
        // SAFETY: allocated by ncclMemAlloc, freed once.
        let _ = unsafe { sys::ncclMemFree(self.ptr) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channel_counts_come_from_the_newest_init_line_or_a_pin() {
        let log = "host:1:1 [0] NCCL INFO 24 coll channels, 24 collnet channels, 0 nvls channels, 32 p2p channels\n\
                   host:1:1 [0] NCCL INFO Channel 00/24 : 0 1\n\
                   host:1:9 [0] NCCL INFO 16 coll channels, 0 collnet channels, 0 nvls channels, 32 p2p channels\n";
        assert_eq!(parse_coll_channels(log), Some(16));
        assert_eq!(parse_coll_channels("NCCL INFO Channel 00/24 : 0 1"), None);
        assert_eq!(pinned_channels(Some("8"), Some("8")), Some(8));
        assert_eq!(pinned_channels(Some("8"), Some("16")), None);
        assert_eq!(pinned_channels(Some("8"), None), None);
        assert_eq!(pinned_channels(Some("x"), Some("x")), None);
    }
}
