//! lowcon's C ABI, shaped like NCCL's, for C and C++ trainers. The header is
//! `include/lowcon.h` (generated from this file by cbindgen; `tests/header.rs` fails when
//! it is stale), and its comments are the API reference.
//!
//! The rules every function here keeps:
//!
//! - **Return codes, never a crash.** Every function returns a [`lowconResult_t`] (or a
//!   string); no Rust panic crosses the boundary (each body runs under
//!   `catch_unwind`, a panic becomes `lowconInternalError`).
//! - **Checked handles.** A `lowconComm_t` is an id looked up in a registry, never a
//!   pointer that is dereferenced: a destroyed, foreign or null communicator is
//!   `lowconInvalidArgument`, not undefined behaviour.
//! - **Messages.** After a failing call, `lowconGetLastError` returns what went wrong on
//!   this thread, naming the rank, the peer or the sizes.
//! - **Enumerations travel as `int`.** Data types, operators, backends and sync methods
//!   are `int` constants, so an out-of-range value from C is an error code, not an
//!   invalid Rust enum.

#![allow(non_camel_case_types, non_upper_case_globals, non_snake_case)]

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use lowcon::cuda::Stream;
use lowcon::{
    AllGatherAlgorithm, DType, DeviceBuf, Error, GpuGroup, GpuGroupOptions, HostBuffer, HostGroup, HostGroupOptions,
    HostInput, ReduceOp, ReduceScatterAlgorithm, SymmetricBuffer, SyncMethod,
};

/// Result codes (the values of NCCL's `ncclResult_t` where the meaning is the same).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum lowconResult_t {
    /// The call succeeded.
    lowconSuccess = 0,
    /// A CUDA driver call failed, or there is no driver or no such device.
    lowconUnhandledCudaError = 1,
    /// An operating-system call or the store (TCP rendezvous) failed.
    lowconSystemError = 2,
    /// A bug in lowcon (a panic was caught at the boundary).
    lowconInternalError = 3,
    /// An argument is wrong: a null pointer, an unknown communicator, a size, a dtype,
    /// an option. Nothing was enqueued.
    lowconInvalidArgument = 4,
    /// The ranks disagree (different sizes or settings on different ranks), or the
    /// world does not fit lowcon (GPUs without peer access, ranks on several hosts).
    lowconInvalidUsage = 5,
    /// A peer died or timed out, or the communicator was aborted: the communicator has
    /// failed and refuses further work.
    lowconRemoteError = 6,
}

use lowconResult_t::*;

/// An element type (`lowconFloat32`, ...).
pub type lowconDataType_t = c_int;
/// 32-bit float.
pub const lowconFloat32: lowconDataType_t = 0;
/// IEEE half.
pub const lowconFloat16: lowconDataType_t = 1;
/// bfloat16.
pub const lowconBfloat16: lowconDataType_t = 2;
/// 32-bit signed integer (all-gather only).
pub const lowconInt32: lowconDataType_t = 3;
/// Byte (all-gather only).
pub const lowconUint8: lowconDataType_t = 4;

/// A reduction operator (`lowconSum`, ...). Reductions accumulate in f32 in rank order.
pub type lowconRedOp_t = c_int;
/// Sum.
pub const lowconSum: lowconRedOp_t = 0;
/// Average (the sum divided by the number of ranks).
pub const lowconAvg: lowconRedOp_t = 1;
/// Minimum.
pub const lowconMin: lowconRedOp_t = 2;
/// Maximum.
pub const lowconMax: lowconRedOp_t = 3;

/// Where a communicator's collectives run (`lowconBackendGpu`, ...).
pub type lowconBackend_t = c_int;
/// One GPU per rank, NVLink-mapped symmetric memory; buffers are device pointers and
/// calls are asynchronous on the given stream.
pub const lowconBackendGpu: lowconBackend_t = 0;
/// CPU shared memory; buffers are host pointers, calls are synchronous and the stream
/// is ignored (for tests and machines without GPUs).
pub const lowconBackendHost: lowconBackend_t = 1;

/// How the GPU backend synchronises (`lowconSyncKernel`, `lowconSyncMemop`).
pub type lowconSync_t = c_int;
/// Small Rust barrier kernels (the default).
pub const lowconSyncKernel: lowconSync_t = 0;
/// Stream memory operations: no SM at all.
pub const lowconSyncMemop: lowconSync_t = 1;

/// Opaque communicator (never defined: handles are ids, see `lowconComm_t`).
pub struct lowconComm {
    _private: (),
}

/// A communicator handle. It is an id checked against lowcon's registry on every call,
/// never dereferenced.
pub type lowconComm_t = *mut lowconComm;

/// Per-call options of `lowconAllGatherEx` / `lowconReduceScatterEx`. Fill with
/// `lowconCollOptionsInit` first, then change what you need. Every rank must pass the
/// same options.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct lowconCollOptions {
    /// Algorithm name: NULL or "auto" for automatic; all-gather "ce-pull", "ce-push",
    /// "sm-oneshot", "ll"; reduce-scatter "ce-reduce", "sm-direct", "tma-reduce",
    /// "tma-reduce-evict", "tma-push-reduce" (sum only, not deterministic), "ll".
    pub algorithm: *const c_char,
    /// `lowconSyncKernel` or `lowconSyncMemop` (GPU backend).
    pub sync: lowconSync_t,
    /// CTAs of the SM parts; 0 for the default.
    pub ctas: c_int,
    /// ce-reduce pieces; 0 for the default.
    pub pipeline: c_int,
    /// Signal-pad channel, 0..15: calls that may run at the same time (two streams,
    /// two threads) must use different channels.
    pub channel: c_int,
    /// Nonzero: ordinary buffers may be staged through the communicator's workspace
    /// where the algorithm needs symmetric memory. Zero: such a call is refused.
    pub allow_staging: c_int,
}

enum Group {
    Gpu(GpuGroup),
    Host(Box<HostGroup>),
}

enum Region {
    Gpu(SymmetricBuffer),
    Host(HostBuffer),
}

impl Region {
    fn base(&self) -> usize {
        match self {
            Region::Gpu(b) => b.local_ptr() as usize,
            Region::Host(b) => b.local_ptr() as usize,
        }
    }
    fn len(&self) -> usize {
        match self {
            Region::Gpu(b) => b.len(),
            Region::Host(b) => b.len(),
        }
    }
}

struct Comm {
    group: Group,
    /// Symmetric allocations (`lowconMemAlloc`); collectives hold the read side while
    /// they use one.
    mem: RwLock<Vec<Region>>,
}

impl Comm {
    fn rank(&self) -> usize {
        match &self.group {
            Group::Gpu(g) => g.rank(),
            Group::Host(g) => g.rank(),
        }
    }
    fn world(&self) -> usize {
        match &self.group {
            Group::Gpu(g) => g.world_size(),
            Group::Host(g) => g.world_size(),
        }
    }
}

/// Why a call failed: the code and the message for `lowconGetLastError`.
struct Failure(lowconResult_t, String);

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        let code = match &e {
            Error::InvalidArgument(_) => lowconInvalidArgument,
            Error::NoDriver | Error::Driver { .. } | Error::NoSuchDevice { .. } | Error::MissingKernel { .. } => {
                lowconUnhandledCudaError
            }
            Error::PeerTimeout { .. } | Error::PeerGone { .. } | Error::DeviceTimeout(_) | Error::GroupFailed(_) => {
                lowconRemoteError
            }
            Error::Rendezvous(_) => lowconInvalidUsage,
            Error::Store(_) | Error::Os { .. } => lowconSystemError,
            _ => lowconInternalError,
        };
        Failure(code, e.to_string())
    }
}

fn invalid(msg: impl Into<String>) -> Failure {
    Failure(lowconInvalidArgument, msg.into())
}

type R<T> = Result<T, Failure>;

thread_local! {
    static LAST: RefCell<CString> = RefCell::new(CString::default());
}

fn set_last(msg: &str) {
    let c = CString::new(msg.replace('\0', " ")).unwrap_or_default();
    LAST.with(|l| *l.borrow_mut() = c);
}

/// Runs `f` at the boundary: its error (or a panic) becomes a code and this thread's
/// last-error message.
fn guard(f: impl FnOnce() -> R<()>) -> lowconResult_t {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => lowconSuccess,
        Ok(Err(Failure(code, msg))) => {
            set_last(&msg);
            code
        }
        Err(p) => {
            let what = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".into());
            set_last(&format!("internal error in lowcon (a bug, please report it): {what}"));
            lowconInternalError
        }
    }
}

/// Communicators by id. Ids start high and step by 16 so that small integers and
/// typical pointers are never live handles.
fn registry() -> &'static Mutex<HashMap<usize, Arc<Comm>>> {
    static R: std::sync::OnceLock<Mutex<HashMap<usize, Arc<Comm>>>> = std::sync::OnceLock::new();
    R.get_or_init(|| Mutex::new(HashMap::new()))
}

static NEXT_ID: AtomicUsize = AtomicUsize::new(0x1c0_0000);

fn register(c: Comm) -> lowconComm_t {
    let id = NEXT_ID.fetch_add(16, Ordering::Relaxed);
    registry().lock().unwrap_or_else(|p| p.into_inner()).insert(id, Arc::new(c));
    id as lowconComm_t
}

fn lookup(comm: lowconComm_t) -> R<Arc<Comm>> {
    if comm.is_null() {
        return Err(invalid("comm is NULL"));
    }
    registry()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&(comm as usize))
        .cloned()
        .ok_or_else(|| invalid(format!("comm {comm:p} is not a live lowcon communicator (destroyed, or never made)")))
}

fn backend_name(b: lowconBackend_t) -> R<bool> {
    match b {
        lowconBackendGpu => Ok(true),
        lowconBackendHost => Ok(false),
        _ => Err(invalid(format!("backend {b}: expected lowconBackendGpu (0) or lowconBackendHost (1)"))),
    }
}

fn dtype(d: lowconDataType_t) -> R<DType> {
    Ok(match d {
        lowconFloat32 => DType::F32,
        lowconFloat16 => DType::F16,
        lowconBfloat16 => DType::Bf16,
        lowconInt32 => DType::I32,
        lowconUint8 => DType::U8,
        _ => return Err(invalid(format!("datatype {d}: expected lowconFloat32 .. lowconUint8 (0..4)"))),
    })
}

fn red_op(o: lowconRedOp_t) -> R<ReduceOp> {
    Ok(match o {
        lowconSum => ReduceOp::Sum,
        lowconAvg => ReduceOp::Avg,
        lowconMin => ReduceOp::Min,
        lowconMax => ReduceOp::Max,
        _ => return Err(invalid(format!("op {o}: expected lowconSum, lowconAvg, lowconMin or lowconMax (0..3)"))),
    })
}

fn out_ptr<T>(p: *mut T, what: &str) -> R<*mut T> {
    if p.is_null() { Err(invalid(format!("{what} is NULL"))) } else { Ok(p) }
}

fn write_out<T>(p: *mut T, what: &str, v: T) -> R<()> {
    let p = out_ptr(p, what)?;
    // SAFETY: non-null; the caller passes a writable `T` (the function's contract).
    unsafe { p.write(v) };
    Ok(())
}

/// Options as the library takes them, from C's (NULL: defaults).
fn options<A: std::str::FromStr<Err = Error> + Default>(o: *const lowconCollOptions) -> R<lowcon::CollOptions<A>> {
    let mut out = lowcon::CollOptions::<A>::default();
    if o.is_null() {
        return Ok(out);
    }
    // SAFETY: non-null; the caller passes a valid lowconCollOptions.
    let o = unsafe { &*o };
    if !o.algorithm.is_null() {
        // SAFETY: the caller passes a NUL-terminated string.
        let name = unsafe { CStr::from_ptr(o.algorithm) }.to_str().map_err(|_| invalid("algorithm is not UTF-8"))?;
        out.algorithm = name.parse()?;
    }
    out.sync = match o.sync {
        lowconSyncKernel => SyncMethod::Kernel,
        lowconSyncMemop => SyncMethod::StreamMemop,
        s => return Err(invalid(format!("sync {s}: expected lowconSyncKernel (0) or lowconSyncMemop (1)"))),
    };
    let nonneg = |v: c_int, what: &str| -> R<u32> {
        u32::try_from(v).map_err(|_| invalid(format!("{what} {v}: must not be negative")))
    };
    out.ctas = Some(nonneg(o.ctas, "ctas")?).filter(|&c| c != 0);
    out.pipeline = Some(nonneg(o.pipeline, "pipeline")?).filter(|&p| p != 0);
    out.channel = nonneg(o.channel, "channel")?;
    out.allow_staging = o.allow_staging != 0;
    Ok(out)
}

fn make_comm(group: Group) -> Comm {
    Comm { group, mem: RwLock::new(Vec::new()) }
}

/// Creates a communicator from the environment that `lowcon launch` or torchrun sets
/// (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT; LOWCON_STORE_ADDR under
/// `lowcon launch`; without it rank 0 hosts the store at MASTER_PORT + 1 for as long
/// as its communicator lives). Collective: every rank calls it. `backend` is
/// `lowconBackendGpu` (the rank's GPU is LOWCON_DEVICE, else LOCAL_RANK) or
/// `lowconBackendHost`.
///
/// # Safety
/// `comm` is NULL or points to writable storage for a handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lowconCommInitFromEnv(comm: *mut lowconComm_t, backend: lowconBackend_t) -> lowconResult_t {
    guard(|| {
        out_ptr(comm, "comm (the output handle)")?;
        let group = if backend_name(backend)? {
            Group::Gpu(GpuGroup::from_env(GpuGroupOptions::default())?)
        } else {
            Group::Host(Box::new(HostGroup::from_env(HostGroupOptions::default())?))
        };
        write_out(comm, "comm", register(make_comm(group)))
    })
}

/// Creates a communicator of `nranks` ranks meeting at the lowcon store `store_addr`
/// ("host:port", e.g. started with `lowcon store serve`; LOWCON_STORE_TOKEN if it
/// needs one). Collective: every rank calls it with its own `rank`.
///
/// # Safety
/// `comm` points to writable storage for a handle; `store_addr` is NULL or a
/// NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lowconCommInitRank(
    comm: *mut lowconComm_t,
    store_addr: *const c_char,
    rank: c_int,
    nranks: c_int,
    backend: lowconBackend_t,
) -> lowconResult_t {
    guard(|| {
        out_ptr(comm, "comm (the output handle)")?;
        if store_addr.is_null() {
            return Err(invalid("store_addr is NULL"));
        }
        // SAFETY: non-null, NUL-terminated (contract).
        let addr = unsafe { CStr::from_ptr(store_addr) }.to_str().map_err(|_| invalid("store_addr is not UTF-8"))?;
        let (rank, world) = match (usize::try_from(rank), usize::try_from(nranks)) {
            (Ok(r), Ok(w)) if r < w => (r, w),
            _ => return Err(invalid(format!("rank {rank} is not within a world of {nranks}"))),
        };
        let gpu = backend_name(backend)?;
        let opts = lowcon_store::ClientOptions {
            connect_timeout: lowcon::config::setup_timeout().max(lowcon::config::timeout()),
            ..lowcon_store::ClientOptions::from_env()
        };
        let store = lowcon_store::StoreClient::connect(addr, opts).map_err(Error::from)?;
        let group = if gpu {
            Group::Gpu(GpuGroup::new(store, rank, world, GpuGroupOptions::default())?)
        } else {
            Group::Host(Box::new(HostGroup::new(store, rank, world, HostGroupOptions::default())?))
        };
        write_out(comm, "comm", register(make_comm(group)))
    })
}

/// Destroys `comm`: releases its memory and its watchdog. Any `lowconMemAlloc`
/// buffers still held are freed. The handle is invalid afterwards.
///
/// # Safety
/// No other thread may use `comm` at the same time as it is destroyed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lowconCommDestroy(comm: lowconComm_t) -> lowconResult_t {
    guard(|| {
        lookup(comm)?;
        // Dropped after the registry's lock is released: tearing a communicator down
        // waits for its GPU, and no other communicator's calls may wait for that.
        let c = registry().lock().unwrap_or_else(|p| p.into_inner()).remove(&(comm as usize));
        drop(c);
        Ok(())
    })
}

/// Fails `comm` at once (work in flight gives up its waits, so streams drain) and
/// destroys it, like `ncclCommAbort`. Peers notice through their own timeouts, or at
/// once when this process exits.
///
/// # Safety
/// As `lowconCommDestroy`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lowconCommAbort(comm: lowconComm_t) -> lowconResult_t {
    guard(|| {
        let c = lookup(comm)?;
        match &c.group {
            Group::Gpu(g) => g.abort(),
            Group::Host(g) => g.abort(),
        }
        let removed = registry().lock().unwrap_or_else(|p| p.into_inner()).remove(&(comm as usize));
        drop((removed, c));
        Ok(())
    })
}

/// The communicator's failure, without waiting (like `ncclCommGetAsyncError`):
/// `*asyncError` is `lowconSuccess` while it is healthy, else the failure's code
/// (`lowconRemoteError` for a dead or late peer), with the message (naming the rank)
/// in `lowconGetLastError`. The call itself returns `lowconSuccess` unless its
/// arguments are wrong.
///
/// # Safety
/// `asyncError` points to writable storage.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lowconCommGetAsyncError(
    comm: lowconComm_t,
    asyncError: *mut lowconResult_t,
) -> lowconResult_t {
    guard(|| {
        let c = lookup(comm)?;
        out_ptr(asyncError, "asyncError")?;
        let r = match &c.group {
            Group::Gpu(g) => g.check(),
            Group::Host(g) => g.check(),
        };
        let code = match r {
            Ok(()) => lowconSuccess,
            Err(e) => {
                let Failure(code, msg) = Failure::from(e);
                set_last(&msg);
                code
            }
        };
        write_out(asyncError, "asyncError", code)
    })
}

/// Waits until the work enqueued on `stream` so far has finished, or `comm` has failed
/// (then returns the failure). Unlike `cudaStreamSynchronize`, a dead peer cannot
/// make it wait forever. Host backend: returns the communicator's state.
///
/// # Safety
/// `stream` is NULL (the legacy default stream) or a live CUDA stream of the
/// communicator's device.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lowconStreamSynchronize(comm: lowconComm_t, stream: *mut c_void) -> lowconResult_t {
    guard(|| {
        let c = lookup(comm)?;
        match &c.group {
            Group::Gpu(g) => {
                // SAFETY: forwarded from the caller.
                let s = unsafe { Stream::wrap_borrowed(g.device(), stream.cast()) }?;
                Ok(g.synchronize(&s)?)
            }
            Group::Host(g) => Ok(g.check()?),
        }
    })
}

/// The number of ranks.
///
/// # Safety
/// `count` points to writable storage.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lowconCommCount(comm: lowconComm_t, count: *mut c_int) -> lowconResult_t {
    guard(|| write_out(count, "count", lookup(comm)?.world() as c_int))
}

/// This rank.
///
/// # Safety
/// `rank` points to writable storage.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lowconCommUserRank(comm: lowconComm_t, rank: *mut c_int) -> lowconResult_t {
    guard(|| write_out(rank, "rank", lookup(comm)?.rank() as c_int))
}

/// The CUDA device index of this rank's GPU (-1 on the host backend).
///
/// # Safety
/// `device` points to writable storage.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lowconCommCuDevice(comm: lowconComm_t, device: *mut c_int) -> lowconResult_t {
    guard(|| {
        let c = lookup(comm)?;
        let d = match &c.group {
            Group::Gpu(g) => g.device().index() as c_int,
            Group::Host(_) => -1,
        };
        write_out(device, "device", d)
    })
}

/// Collective: allocates `size` bytes of symmetric memory on every rank (every rank
/// must ask for the same size, in the same order), zero-filled, mapped on every peer.
/// Collectives on buffers inside it run without staging (recognised by address).
/// GPU backend: device memory of this rank's GPU; host backend: shared host memory.
///
/// # Safety
/// `ptr` points to writable storage for a pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lowconMemAlloc(comm: lowconComm_t, size: usize, ptr: *mut *mut c_void) -> lowconResult_t {
    guard(|| {
        let c = lookup(comm)?;
        out_ptr(ptr, "ptr")?;
        let region = match &c.group {
            Group::Gpu(g) => Region::Gpu(g.alloc(size)?),
            Group::Host(g) => Region::Host(g.alloc(size)?),
        };
        let base = region.base() as *mut c_void;
        c.mem.write().unwrap_or_else(|p| p.into_inner()).push(region);
        write_out(ptr, "ptr", base)
    })
}

/// Frees a `lowconMemAlloc` buffer of `comm`. Every rank frees its buffers in the same
/// order, after the last collective using them has completed on every rank (a barrier
/// or a collective after it is enough). Waits (bounded) for this GPU to finish work
/// that may still use it.
///
/// # Safety
/// No collective that uses the buffer may still be enqueued on another thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lowconMemFree(comm: lowconComm_t, ptr: *mut c_void) -> lowconResult_t {
    guard(|| {
        let c = lookup(comm)?;
        let mut mem = c.mem.write().unwrap_or_else(|p| p.into_inner());
        let i = mem.iter().position(|r| r.base() == ptr as usize).ok_or_else(|| {
            invalid(format!("rank {}: {ptr:p} is not a lowconMemAlloc buffer of this communicator", c.rank()))
        })?;
        match mem.remove(i) {
            Region::Gpu(b) => b.close()?,
            Region::Host(b) => drop(b),
        }
        Ok(())
    })
}

/// Fills `opts` with the defaults: automatic algorithm, kernel sync, default CTAs and
/// pipeline, channel 0, staging allowed.
///
/// # Safety
/// `opts` points to writable storage.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lowconCollOptionsInit(opts: *mut lowconCollOptions) -> lowconResult_t {
    guard(|| {
        let d = lowconCollOptions {
            algorithm: std::ptr::null(),
            sync: lowconSyncKernel,
            ctas: 0,
            pipeline: 0,
            channel: 0,
            allow_staging: 1,
        };
        write_out(opts, "opts", d)
    })
}

/// The symmetric region holding `[ptr, ptr + bytes)`, with the offset, if any.
fn find(mem: &[Region], ptr: usize, bytes: usize) -> Option<(&Region, usize)> {
    mem.iter().find(|r| ptr >= r.base() && ptr + bytes <= r.base() + r.len()).map(|r| (r, ptr - r.base()))
}

fn gpu_buf<'a>(mem: &'a [Region], ptr: *const c_void, count: usize, dt: DType) -> R<DeviceBuf<'a>> {
    let bytes = count.checked_mul(dt.size()).ok_or_else(|| invalid("size overflow"))?;
    Ok(match find(mem, ptr as usize, bytes) {
        Some((Region::Gpu(b), off)) => DeviceBuf::symmetric(b, off, count, dt)?,
        // SAFETY: the caller of the collective guarantees the buffer (contract); the
        // library checks that it is device memory of the group's GPU.
        _ => unsafe { DeviceBuf::from_raw(ptr as u64, count, dt) },
    })
}

enum Which {
    AllGather,
    ReduceScatter(ReduceOp),
}

/// The shared body of the four collective entry points.
///
/// # Safety
/// As the entry points: `send` and `recv` valid for their sizes on the backend's side.
#[allow(clippy::too_many_arguments)]
unsafe fn collective(
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    datatype: lowconDataType_t,
    which: Which,
    comm: lowconComm_t,
    stream: *mut c_void,
    opts: *const lowconCollOptions,
) -> R<()> {
    let c = lookup(comm)?;
    if send.is_null() {
        return Err(invalid(format!("rank {}: sendbuff is NULL", c.rank())));
    }
    if recv.is_null() {
        return Err(invalid(format!("rank {}: recvbuff is NULL", c.rank())));
    }
    let dt = dtype(datatype)?;
    let world = c.world();
    let big = count.checked_mul(world).ok_or_else(|| invalid(format!("count {count} x {world} ranks overflows")))?;
    // All-gather: send `count`, receive `world * count`; reduce-scatter the reverse.
    let (n_send, n_recv) = match which {
        Which::AllGather => (count, big),
        Which::ReduceScatter(_) => (big, count),
    };
    let mem = c.mem.read().unwrap_or_else(|p| p.into_inner());
    match &c.group {
        Group::Gpu(g) => {
            // SAFETY: forwarded from the caller (a live stream of this device, or NULL).
            let s = unsafe { Stream::wrap_borrowed(g.device(), stream.cast()) }?;
            let input = gpu_buf(&mem, send, n_send, dt)?;
            let output = gpu_buf(&mem, recv, n_recv, dt)?;
            match which {
                Which::AllGather => g.all_gather(input, output, &s, &options::<AllGatherAlgorithm>(opts)?)?,
                Which::ReduceScatter(op) => {
                    g.reduce_scatter(input, output, op, &s, &options::<ReduceScatterAlgorithm>(opts)?)?
                }
            }
        }
        Group::Host(g) => {
            let (sb, rb) = (n_send * dt.size(), n_recv * dt.size());
            let (s0, r0) = (send as usize, recv as usize);
            // The input is copied when it overlaps the output (in-place calls): a shared
            // and a mutable Rust slice must not alias.
            let overlaps = s0 < r0 + rb && r0 < s0 + sb;
            // SAFETY: `send` is valid for `sb` bytes (contract).
            let send_bytes = unsafe { std::slice::from_raw_parts(send.cast::<u8>(), sb) };
            let copied;
            let input = match find(&mem, s0, sb) {
                Some((Region::Host(b), off)) => HostInput::Symmetric { buf: b, offset: off, len: sb },
                _ if overlaps => {
                    copied = send_bytes.to_vec();
                    HostInput::Plain(&copied)
                }
                _ => HostInput::Plain(send_bytes),
            };
            // SAFETY: `recv` is valid for `rb` bytes (contract); no Rust reference
            // aliases it (an overlapping input was copied, a symmetric one is read
            // through raw pointers).
            let output = unsafe { std::slice::from_raw_parts_mut(recv.cast::<u8>(), rb) };
            match which {
                Which::AllGather => g.all_gather(input, output, dt, &options::<AllGatherAlgorithm>(opts)?)?,
                Which::ReduceScatter(op) => {
                    g.reduce_scatter(input, output, dt, op, &options::<ReduceScatterAlgorithm>(opts)?)?
                }
            }
        }
    }
    Ok(())
}

/// All-gather: `recvbuff[p * sendcount ..]` receives rank `p`'s `sendbuff`
/// (`sendcount` elements), on every rank. In place when `sendbuff` is
/// `recvbuff + rank * sendcount`. GPU backend: enqueued on `stream` (a `cudaStream_t`,
/// NULL for the legacy default stream) and returns at once.
///
/// # Safety
/// `sendbuff` holds `sendcount` and `recvbuff` `nranks * sendcount` elements, on this
/// rank's GPU (or host memory on the host backend), until the call has run; `stream` is
/// NULL or a live stream of this rank's GPU.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lowconAllGather(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    sendcount: usize,
    datatype: lowconDataType_t,
    comm: lowconComm_t,
    stream: *mut c_void,
) -> lowconResult_t {
    // SAFETY: forwarded from the caller.
    guard(|| unsafe {
        collective(sendbuff, recvbuff, sendcount, datatype, Which::AllGather, comm, stream, std::ptr::null())
    })
}

/// `lowconAllGather` with per-call options (NULL: defaults).
///
/// # Safety
/// As `lowconAllGather`; `opts` is NULL or a valid `lowconCollOptions`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lowconAllGatherEx(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    sendcount: usize,
    datatype: lowconDataType_t,
    comm: lowconComm_t,
    stream: *mut c_void,
    opts: *const lowconCollOptions,
) -> lowconResult_t {
    // SAFETY: forwarded from the caller.
    guard(|| unsafe { collective(sendbuff, recvbuff, sendcount, datatype, Which::AllGather, comm, stream, opts) })
}

/// Reduce-scatter: `recvbuff` (`recvcount` elements) receives `op` over all ranks of
/// their `sendbuff[rank * recvcount ..]`. f32, f16 and bf16, accumulated in f32 in rank
/// order. GPU backend: enqueued on `stream`.
///
/// # Safety
/// `sendbuff` holds `nranks * recvcount` and `recvbuff` `recvcount` elements (see
/// `lowconAllGather`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lowconReduceScatter(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    recvcount: usize,
    datatype: lowconDataType_t,
    op: lowconRedOp_t,
    comm: lowconComm_t,
    stream: *mut c_void,
) -> lowconResult_t {
    guard(|| {
        let which = Which::ReduceScatter(red_op(op)?);
        // SAFETY: forwarded from the caller.
        unsafe { collective(sendbuff, recvbuff, recvcount, datatype, which, comm, stream, std::ptr::null()) }
    })
}

/// `lowconReduceScatter` with per-call options (NULL: defaults).
///
/// # Safety
/// As `lowconReduceScatter`; `opts` is NULL or a valid `lowconCollOptions`.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn lowconReduceScatterEx(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    recvcount: usize,
    datatype: lowconDataType_t,
    op: lowconRedOp_t,
    comm: lowconComm_t,
    stream: *mut c_void,
    opts: *const lowconCollOptions,
) -> lowconResult_t {
    guard(|| {
        let which = Which::ReduceScatter(red_op(op)?);
        // SAFETY: forwarded from the caller.
        unsafe { collective(sendbuff, recvbuff, recvcount, datatype, which, comm, stream, opts) }
    })
}

/// A short, static description of a result code (taken as an `int`, so that any value,
/// a foreign code included, is safe to pass).
#[unsafe(no_mangle)]
pub extern "C" fn lowconGetErrorString(result: c_int) -> *const c_char {
    let s: &'static CStr = match result {
        0 => c"no error",
        1 => c"unhandled CUDA error",
        2 => c"system or store error",
        3 => c"internal error in lowcon",
        4 => c"invalid argument",
        5 => c"invalid usage (ranks disagree, or the world does not fit)",
        6 => c"remote error: a peer died or timed out, or the communicator was aborted",
        _ => c"unknown result code",
    };
    s.as_ptr()
}

/// The message of the last failing lowcon call on this thread, naming the rank, peer or
/// sizes ("" if none). `comm` may be NULL; the message is per thread. Valid until the
/// next lowcon call on this thread.
#[unsafe(no_mangle)]
pub extern "C" fn lowconGetLastError(comm: lowconComm_t) -> *const c_char {
    let _ = comm;
    LAST.with(|l| l.borrow().as_ptr())
}

/// lowcon's version as MAJOR * 10000 + MINOR * 100 + PATCH.
///
/// # Safety
/// `version` points to writable storage.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lowconGetVersion(version: *mut c_int) -> lowconResult_t {
    guard(|| {
        let v = |s: &str| s.parse::<c_int>().unwrap_or(0);
        let n = v(env!("CARGO_PKG_VERSION_MAJOR")) * 10000
            + v(env!("CARGO_PKG_VERSION_MINOR")) * 100
            + v(env!("CARGO_PKG_VERSION_PATCH"));
        write_out(version, "version", n)
    })
}
