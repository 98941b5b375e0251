//! lowcon's C ABI, shaped like NCCL's, for C and C++ trainers. The header is
//! `include/lowcon.h` (generated from this crate by cbindgen; `tests/header.rs` fails when
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
use std::collections::BTreeMap;
use std::ffi::{CStr, CString, c_char, c_int, c_uint, c_ulonglong, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use lowcon::cuda::Stream;
use lowcon::{
    AllGatherAlgorithm, Call, DType, Error, GpuGroup, GpuGroupOptions, Group, HostGroup, HostGroupOptions, Memory,
    RawBuf, ReduceOp, ReduceScatterAlgorithm, Registry, SyncMethod,
};

// In this order, which is the header's (cbindgen follows the declarations).
mod comm;

mod collectives;

mod info;

mod per_piece;

mod plan;

pub use collectives::*;
pub use comm::*;
pub use info::*;
pub use per_piece::*;
pub use plan::*;

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
/// 32-bit signed integer (reductions: sum, which wraps, min and max).
pub const lowconInt32: lowconDataType_t = 3;
/// Byte (reductions: sum, which wraps, min and max).
pub const lowconUint8: lowconDataType_t = 4;
/// 64-bit signed integer (reductions: sum, which wraps, min and max).
pub const lowconInt64: lowconDataType_t = 5;

/// A reduction operator (`lowconSum`, ...). Float reductions accumulate in f32 in rank
/// order; integer ones run in the type (no `lowconAvg`).
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
/// (Since 0.3.0, the default) the planner's choice for the call (NOTE [one planner]):
/// kernel waits unless the communicator's tuning table says otherwise.
pub const lowconSyncAuto: lowconSync_t = 2;

/// What runs beside a call (`lowconCollOptions.context`): a hint the planner reads.
pub type lowconContext_t = c_int;
/// Nothing in particular (the default).
pub const lowconContextAlone: lowconContext_t = 0;
/// FSDP2-style parameter all-gathers and gradient reduce-scatters beside GEMMs.
pub const lowconContextFsdp: lowconContext_t = 1;
/// Tensor parallelism's collectives beside their matmuls.
pub const lowconContextTp: lowconContext_t = 2;

/// Opaque communicator (never defined: handles are ids, see `lowconComm_t`).
pub struct lowconComm {
    _private: (),
}

/// A communicator handle. It is an id checked against lowcon's registry on every call,
/// never dereferenced.
pub type lowconComm_t = *mut lowconComm;

/// `lowconCollOptions.magic` once `lowconCollOptionsInit` filled the struct.
pub const lowconCollOptionsMagic: c_uint = 0x4C43_4F50;

/// `lowconCollOptions.wire` and `.recv_type`: the send type (`datatype`).
pub const lowconTypeDefault: lowconDataType_t = -1;

/// Per-call options of `lowconAllGatherEx` / `lowconReduceScatterEx`. Fill with
/// `lowconCollOptionsInit` first (a macro that passes `sizeof` the struct as this
/// header declares it), then change what you need. Every rank must pass the same
/// options.
///
/// ABI: the struct begins with its size and a magic number (as NCCL's `ncclConfig_t`
/// does). A library reads only the fields inside `size` and takes the defaults for
/// the rest, so a program built against an older `lowcon.h` keeps working with a newer
/// library; a `size` larger than the library knows (a newer header) is refused, as is
/// a struct `lowconCollOptionsInit` did not fill. Fields are only ever added at the
/// end. (Before 0.2.0 the struct had neither field: such programs must be rebuilt.)
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct lowconCollOptions {
    /// Bytes of the struct as the caller's header declares it (set by
    /// `lowconCollOptionsInit`).
    pub size: usize,
    /// `lowconCollOptionsMagic` (set by `lowconCollOptionsInit`).
    pub magic: c_uint,
    /// The version of the library that filled the struct (`lowconGetVersion`'s number).
    pub version: c_uint,
    /// Algorithm name: NULL or "auto" for automatic; all-gather "ce-pull", "ce-push",
    /// "sm-oneshot", "ll"; reduce-scatter "ce-reduce", "sm-direct", "tma-reduce",
    /// "tma-reduce-evict", "tma-push-reduce" (sum only, not deterministic), "ll".
    pub algorithm: *const c_char,
    /// `lowconSyncAuto` (the default since 0.3.0: the planner's choice),
    /// `lowconSyncKernel` or `lowconSyncMemop` (GPU backend).
    pub sync: lowconSync_t,
    /// CTAs of the SM parts; 0 for the default.
    pub ctas: c_int,
    /// ce-reduce pieces; 0 for the default.
    pub pipeline: c_int,
    /// Signal-pad channel, 0 to 15: calls that may run at the same time (two streams,
    /// two threads) must use different channels.
    pub channel: c_int,
    /// Nonzero: ordinary buffers may be staged through the communicator's workspace
    /// where the algorithm needs symmetric memory. Zero: such a call is refused.
    pub allow_staging: c_int,
    /// Positive (GPU, "ce-pull" and "ce-reduce"): peers read an ordinary `cudaMalloc`
    /// input in place through IPC instead of a staging copy; the call then exchanges
    /// addresses with the peers' hosts. If a rank's input cannot be shared (VMM or
    /// stream-ordered memory), every rank stages the call, or, with `allow_staging`
    /// zero, refuses it. Negative: staged. Zero (the default): the planner's choice
    /// (since 0.3.0; staged unless `context` names a framework whose rules read in place).
    pub map_ordinary: c_int,
    /// Reduce-scatter (since 0.2.0): the type that crosses the peer links, when it differs
    /// from `datatype`. `lowconBfloat16` with `lowconFloat32` data sends the top half of
    /// each float through the copy engines and reads the bottom half only for pieces
    /// where it is nonzero: the result equals the float reduce-scatter's bit for bit
    /// ("ce-reduce" or automatic only). `lowconTypeDefault` (the default): `datatype`.
    /// Refused on all-gathers, integers, and any wire but bf16 for f32.
    pub wire: lowconDataType_t,
    /// Reduce-scatter (since 0.2.0): the type of `recvbuff`. `lowconFloat32` with
    /// `lowconBfloat16` data reduces bf16 in f32 and writes f32 (bf16 crosses the
    /// links). `lowconTypeDefault` (the default): `datatype`; nothing else is accepted.
    pub recv_type: lowconDataType_t,
    /// Reduce-scatter, "ce-reduce" (since 0.2.1): how the reduction is launched.
    /// `lowconReduceLaunchAuto` (0, the default): the library's choice;
    /// `lowconReduceLaunchPieces` (1): one launch per pipeline piece;
    /// `lowconReduceLaunchOnce` (2): one launch per call, whose CTAs wait for each
    /// piece's copies (beside a GEMM that holds every SM it waits for an SM once, not
    /// once per piece; stages the whole chunk; floats without a wire, at most 64
    /// pieces, else refused). A struct of 0.2.0's size leaves it at the default.
    pub reduce_launch: c_int,
    /// (Since 0.2.2) the sync of a call captured into a CUDA graph: `lowconSyncAuto` (the
    /// default since 0.3.0: the planner's choice, kernel waits unless the tuning table
    /// says otherwise, whatever `sync` says), `lowconSyncKernel` (a kernel node costs the
    /// host almost nothing at each replay) or `lowconSyncMemop` (waits that hold no SM,
    /// each barrier a stream-memop node that costs the driver 1.3-4.5 us of host time at
    /// every replay). It took the padding at the end of 0.2.1's struct, whose size it
    /// keeps: `lowconCollOptionsInit` sets it, as every field, to its default.
    pub graph_sync: lowconSync_t,
    /// (Since 0.3.0) what runs beside the call, a hint the planner reads:
    /// `lowconContextAlone` (the default), `lowconContextFsdp` or `lowconContextTp`.
    pub context: lowconContext_t,
    /// (Since 0.3.0) reduce-scatter, nonzero: the float input holds bf16 values upcast
    /// (FSDP2's bf16 gradients reduced in f32), so the planner may send the bf16 wire
    /// (exact for any data; half the bytes for such data). Zero (the default): no hint.
    pub bf16_exact: c_int,
    /// (Since 0.3.1) all-gather, "ce-pull": what each peer's copy waits for (NOTE
    /// [arrival-driven all-gather]): `lowconArrivalAuto` (0, the default: the planner's
    /// choice), `lowconArrivalBarrier` (1: one barrier on every peer, then every copy),
    /// `lowconArrivalInOrder` (2: each peer's copy after that peer alone, in rotated
    /// order) or `lowconArrivalAnyOrder` (3: each on a stream of its own). The planner
    /// keeps a per-peer arrival only for eager calls with memop sync (the host backend:
    /// in order); elsewhere it plans a barrier. Reduce-scatters ignore it (a value out of
    /// range is refused on any call).
    pub arrival: c_int,
}

/// `lowconCollOptions.arrival`: the planner's choice.
pub const lowconArrivalAuto: c_int = 0;
/// `lowconCollOptions.arrival`: one barrier on every peer, then every copy.
pub const lowconArrivalBarrier: c_int = 1;
/// `lowconCollOptions.arrival`: each peer's copy waits for that peer alone, in order.
pub const lowconArrivalInOrder: c_int = 2;
/// `lowconCollOptions.arrival`: each peer's wait and copy on a stream of its own.
pub const lowconArrivalAnyOrder: c_int = 3;

/// `lowconCollOptions.reduce_launch`: the library's choice.
pub const lowconReduceLaunchAuto: c_int = 0;
/// `lowconCollOptions.reduce_launch`: one reduction launch per piece.
pub const lowconReduceLaunchPieces: c_int = 1;
/// `lowconCollOptions.reduce_launch`: one reduction launch per call.
pub const lowconReduceLaunchOnce: c_int = 2;

/// The size of a `lowconCollOptions` before `wire` was added (the smallest `size`
/// accepted).
const OPTIONS_MIN: usize = std::mem::offset_of!(lowconCollOptions, wire);

/// The bytes moved to and from peers by a communicator's calls since it was made
/// (`lowconCommGetStats`): what this rank's copies and kernels read from or wrote to
/// other ranks' memory. Calls count as they are enqueued (a call captured into a CUDA
/// graph counts once, not per replay), except the bf16 wire's fallbacks, which the GPU
/// counts as its reductions run.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct lowconCollStats {
    /// Set to `sizeof(lowconCollStats)` before the call: the library writes the fields
    /// inside it.
    pub size: usize,
    /// All-gathers.
    pub all_gather_bytes: c_ulonglong,
    /// Reduce-scatters that send their data's type.
    pub reduce_scatter_bytes: c_ulonglong,
    /// Float reduce-scatters over the bf16 wire: the top halves.
    pub wire_bytes: c_ulonglong,
    /// The bottom halves read for pieces that were not bf16-exact.
    pub fallback_bytes: c_ulonglong,
    /// Wire pieces received (pieces x peers).
    pub wire_pieces: c_ulonglong,
    /// Of those, the pieces whose bottom halves were read.
    pub fallback_pieces: c_ulonglong,
    /// Host rendezvous this rank made (blocking exchanges with the other ranks through
    /// the host: the store, the address mailbox), the communicator's creation included.
    pub host_rendezvous: c_ulonglong,
    /// Calls reading peers' ordinary memory in place whose addresses were predicted
    /// from the same call before, and of those the ones fixed by a copy.
    pub predicted_calls: c_ulonglong,
    pub mispredicted_calls: c_ulonglong,
    /// Collective calls this rank made, the host nanoseconds they took from entry to
    /// return, and of those the nanoseconds spent in host rendezvous (the communicator's
    /// creation included): what is left is the library's own work, mostly the launches
    /// and copies it enqueues.
    pub host_calls: c_ulonglong,
    pub host_call_ns: c_ulonglong,
    pub host_rendezvous_ns: c_ulonglong,
    /// Of the host rendezvous, the address mailbox's posts that waited for a peer to
    /// read the entry they replace (this rank 8 calls of a channel ahead of that peer's
    /// host), and their nanoseconds.
    pub mailbox_waits: c_ulonglong,
    pub mailbox_wait_ns: c_ulonglong,
}

struct Comm {
    group: Group,
    /// Symmetric allocations (`lowconMemAlloc`): collectives on memory inside one run
    /// without staging (the library's lookup, NOTE [one dispatch]).
    mem: Registry,
}

impl Comm {
    fn rank(&self) -> usize {
        self.group.rank()
    }
    fn world(&self) -> usize {
        self.group.world_size()
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
        // The code's name is lowconGetErrorString's: the message does not repeat it.
        let msg = match e {
            Error::InvalidArgument(m) => m,
            e => e.to_string(),
        };
        Failure(code, msg)
    }
}

fn invalid(msg: impl Into<String>) -> Failure {
    Failure(lowconInvalidArgument, msg.into())
}

type R<T> = Result<T, Failure>;

thread_local! {
    static LAST: RefCell<CString> = RefCell::new(CString::default());
    /// The rank of the communicator the current call looked up, if any: its failures
    /// name it (`guard`).
    static RANK: std::cell::Cell<Option<usize>> = const { std::cell::Cell::new(None) };
}

fn set_last(msg: &str) {
    let c = CString::new(msg.replace('\0', " ")).unwrap_or_default();
    LAST.with(|l| *l.borrow_mut() = c);
}

/// Runs `f` at the boundary: its error (or a panic) becomes a code and this thread's
/// last-error message. Messages never begin with the code's name (a program printing
/// `lowconGetErrorString` then `lowconGetLastError` says each once); once the call has
/// found its communicator, they begin with "rank N: ".
fn guard(f: impl FnOnce() -> R<()>) -> lowconResult_t {
    RANK.with(|r| r.set(None));
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => lowconSuccess,
        Ok(Err(Failure(code, msg))) => {
            match RANK.with(|r| r.get()) {
                Some(rank) if !msg.starts_with("rank ") => set_last(&format!("rank {rank}: {msg}")),
                _ => set_last(&msg),
            }
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

/// Live handles of one kind by id, as C holds them: ids start at a kind's own high base
/// and step by 16, so that small integers, typical pointers and the other kind's handles
/// are never live ones; every call looks its handle up, none is dereferenced.
struct Handles<T> {
    live: Mutex<BTreeMap<usize, Arc<T>>>,
    next: AtomicUsize,
}

impl<T> Handles<T> {
    const fn new(first: usize) -> Self {
        Self { live: Mutex::new(BTreeMap::new()), next: AtomicUsize::new(first) }
    }

    fn live(&self) -> std::sync::MutexGuard<'_, BTreeMap<usize, Arc<T>>> {
        self.live.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn insert(&self, v: T) -> usize {
        let id = self.next.fetch_add(16, Ordering::Relaxed);
        self.live().insert(id, Arc::new(v));
        id
    }

    fn get(&self, id: usize) -> Option<Arc<T>> {
        self.live().get(&id).cloned()
    }

    /// Takes the handle out; the caller drops it after the lock is released (tearing a
    /// communicator down waits for its GPU, and no other handle's calls may wait for that).
    fn remove(&self, id: usize) -> Option<Arc<T>> {
        self.live().remove(&id)
    }
}

/// The communicators.
static COMMS: Handles<Comm> = Handles::new(0x1c0_0000);

fn register(c: Comm) -> lowconComm_t {
    COMMS.insert(c) as lowconComm_t
}

fn lookup(comm: lowconComm_t) -> R<Arc<Comm>> {
    if comm.is_null() {
        return Err(invalid("comm is NULL"));
    }
    COMMS
        .get(comm as usize)
        .ok_or_else(|| invalid(format!("comm {comm:p} is not a live lowcon communicator (destroyed, or never made)")))
        .inspect(|c| RANK.with(|r| r.set(Some(c.rank()))))
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
        lowconInt64 => DType::I64,
        _ => return Err(invalid(format!("datatype {d}: expected lowconFloat32 .. lowconInt64 (0 to 5)"))),
    })
}

fn red_op(o: lowconRedOp_t) -> R<ReduceOp> {
    Ok(match o {
        lowconSum => ReduceOp::Sum,
        lowconAvg => ReduceOp::Avg,
        lowconMin => ReduceOp::Min,
        lowconMax => ReduceOp::Max,
        _ => return Err(invalid(format!("op {o}: expected lowconSum, lowconAvg, lowconMin or lowconMax (0 to 3)"))),
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

/// The options as the caller passed them: the fields inside its `size`, the defaults
/// after (`lowconCollOptions`'s ABI note). NULL: the defaults.
fn read_options(o: *const lowconCollOptions) -> R<lowconCollOptions> {
    let mut out = default_options(std::mem::size_of::<lowconCollOptions>());
    if o.is_null() {
        return Ok(out);
    }
    // SAFETY: non-null; every version of the struct starts with `size` and `magic`
    // (since 0.2.0), which the caller's struct holds (its contract).
    let (size, magic) =
        unsafe { (std::ptr::addr_of!((*o).size).read_unaligned(), std::ptr::addr_of!((*o).magic).read_unaligned()) };
    if magic != lowconCollOptionsMagic {
        return Err(invalid(format!(
            "lowconCollOptions at {o:p} has magic {magic:#x}, not {lowconCollOptionsMagic:#x}: fill it with \
             lowconCollOptionsInit first (a program built against a lowcon.h older than 0.2.0 must be rebuilt)"
        )));
    }
    check_options_size(size)?;
    // SAFETY: the caller's struct holds `size` bytes (it says so, and Init wrote them),
    // no more than ours (checked); a byte copy over our defaults.
    unsafe { std::ptr::copy_nonoverlapping(o.cast::<u8>(), std::ptr::addr_of_mut!(out).cast::<u8>(), size) };
    Ok(out)
}

fn check_options_size(size: usize) -> R<()> {
    let ours = std::mem::size_of::<lowconCollOptions>();
    if size < OPTIONS_MIN {
        return Err(invalid(format!(
            "lowconCollOptions.size is {size}, below the smallest the ABI has ({OPTIONS_MIN}): fill it with \
             lowconCollOptionsInit"
        )));
    }
    if size > ours {
        return Err(invalid(format!(
            "lowconCollOptions.size is {size}, but this library knows {ours} bytes of it: the program was built \
             against a newer lowcon.h than this library"
        )));
    }
    Ok(())
}

/// The defaults, with `size` as given.
fn default_options(size: usize) -> lowconCollOptions {
    lowconCollOptions {
        size,
        magic: lowconCollOptionsMagic,
        version: info::version() as c_uint,
        algorithm: std::ptr::null(),
        sync: lowconSyncAuto,
        ctas: 0,
        pipeline: 0,
        channel: 0,
        allow_staging: 1,
        map_ordinary: 0,
        wire: lowconTypeDefault,
        recv_type: lowconTypeDefault,
        reduce_launch: lowconReduceLaunchAuto,
        graph_sync: lowconSyncAuto,
        context: lowconContextAlone,
        bf16_exact: 0,
        arrival: lowconArrivalAuto,
    }
}

/// A data-type field that may be `lowconTypeDefault`.
fn optional_dtype(d: lowconDataType_t) -> R<Option<DType>> {
    if d == lowconTypeDefault { Ok(None) } else { dtype(d).map(Some) }
}

/// Options as the library takes them, from C's (NULL: defaults), and the receive type.
fn options<A: std::str::FromStr<Err = Error> + Default>(
    o: *const lowconCollOptions,
) -> R<(lowcon::CollOptions<A>, Option<DType>)> {
    let o = read_options(o)?;
    let mut out = lowcon::CollOptions::<A>::default();
    if !o.algorithm.is_null() {
        // SAFETY: the caller passes a NUL-terminated string.
        let name = unsafe { CStr::from_ptr(o.algorithm) }.to_str().map_err(|_| invalid("algorithm is not UTF-8"))?;
        out.algorithm = name.parse()?;
    }
    let sync = |s: lowconSync_t, what: &str| match s {
        lowconSyncKernel => Ok(Some(SyncMethod::Kernel)),
        lowconSyncMemop => Ok(Some(SyncMethod::StreamMemop)),
        lowconSyncAuto => Ok(None),
        s => Err(invalid(format!(
            "{what} {s}: expected lowconSyncKernel (0), lowconSyncMemop (1) or lowconSyncAuto (2)"
        ))),
    };
    out.sync = sync(o.sync, "sync")?;
    out.graph_sync = sync(o.graph_sync, "graph_sync")?;
    let nonneg = |v: c_int, what: &str| -> R<u32> {
        u32::try_from(v).map_err(|_| invalid(format!("{what} {v}: must not be negative")))
    };
    out.ctas = Some(nonneg(o.ctas, "ctas")?).filter(|&c| c != 0);
    out.pipeline = Some(nonneg(o.pipeline, "pipeline")?).filter(|&p| p != 0);
    out.channel = nonneg(o.channel, "channel")?;
    out.allow_staging = o.allow_staging != 0;
    out.map_ordinary = match o.map_ordinary {
        0 => None,
        v => Some(v > 0),
    };
    out.context = match o.context {
        lowconContextAlone => lowcon::Context::Alone,
        lowconContextFsdp => lowcon::Context::Fsdp,
        lowconContextTp => lowcon::Context::Tp,
        c => {
            return Err(invalid(format!(
                "context {c}: expected lowconContextAlone (0), lowconContextFsdp (1) or lowconContextTp (2)"
            )));
        }
    };
    out.bf16_exact = o.bf16_exact != 0;
    out.arrival =
        usize::try_from(o.arrival).ok().and_then(|i| lowcon::Arrival::ALL.get(i).copied()).ok_or_else(|| {
            invalid(format!(
                "arrival {}: expected lowconArrivalAuto (0), lowconArrivalBarrier (1), lowconArrivalInOrder (2) or \
             lowconArrivalAnyOrder (3)",
                o.arrival
            ))
        })?;
    out.wire = optional_dtype(o.wire).map_err(|f| invalid(format!("wire: {}", f.1)))?;
    let recv = optional_dtype(o.recv_type).map_err(|f| invalid(format!("recv_type: {}", f.1)))?;
    out.reduce_launch = u32::try_from(o.reduce_launch)
        .map_err(|_| ())
        .and_then(|c| lowcon::ReduceLaunch::from_code(c).map_err(|_| ()))
        .map_err(|()| {
            invalid(format!("reduce_launch {}: expected 0 (auto), 1 (pieces) or 2 (once)", o.reduce_launch))
        })?;
    Ok((out, recv))
}

fn make_comm(group: Group) -> Comm {
    Comm { group, mem: Registry::default() }
}
