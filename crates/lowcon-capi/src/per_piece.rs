//! Per-piece signals: all-gather arrivals and the released reduce-scatter,
//! the building blocks of fused tensor-parallel ops (docs/algorithms.md, "Fused tensor
//! parallelism").

use super::collectives::{all_gather, collective};
use super::*;

/// Opaque arrivals (never defined: handles are ids, as communicators are).
pub struct lowconArrivals {
    _private: (),
}

/// An arrivals handle: one CUDA event per rank, recorded by `lowconAllGatherArrivals`
/// as each rank's piece lands. An id checked on every call, never dereferenced.
pub type lowconArrivals_t = *mut lowconArrivals;

/// The producer of a released reduce-scatter: enqueues, on the call's stream, the work
/// that writes chunk `dest` of the send buffer, and returns `lowconSuccess` (anything
/// else aborts the communicator). `user` is the pointer given to the call.
pub type lowconProduceFn = unsafe extern "C" fn(dest: c_int, user: *mut c_void) -> lowconResult_t;

pub(crate) struct ArrivalsHandle {
    pub(crate) inner: lowcon::Arrivals,
    device: lowcon::cuda::Device,
}

/// The arrivals handles.
static ARRIVALS: Handles<ArrivalsHandle> = Handles::new(0x2c0_0000);

fn arrivals_of(a: lowconArrivals_t) -> R<Arc<ArrivalsHandle>> {
    if a.is_null() {
        return Err(invalid("arrivals is NULL"));
    }
    ARRIVALS.get(a as usize).ok_or_else(|| {
        invalid(format!("arrivals {a:p} is not a live lowcon arrivals handle (destroyed, or never made)"))
    })
}

/// Makes arrivals for `comm` (GPU backend): one event per rank.
///
/// # Safety
/// `arrivals` is a valid pointer to write the handle to.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lowconArrivalsCreate(comm: lowconComm_t, arrivals: *mut lowconArrivals_t) -> lowconResult_t {
    guard(|| {
        let c = lookup(comm)?;
        if arrivals.is_null() {
            return Err(invalid("arrivals is NULL"));
        }
        let g = c.group.gpu("arrivals (CUDA events per piece)")?;
        let h = ArrivalsHandle { inner: g.arrivals()?, device: g.device().clone() };
        let id = ARRIVALS.insert(h);
        // SAFETY: checked non-null; valid (contract).
        unsafe { *arrivals = id as lowconArrivals_t };
        Ok(())
    })
}

/// Destroys arrivals (their events go once no call uses them).
///
/// # Safety
/// `arrivals` is a handle from `lowconArrivalsCreate`, or anything (refused).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lowconArrivalsDestroy(arrivals: lowconArrivals_t) -> lowconResult_t {
    guard(|| {
        arrivals_of(arrivals)?;
        drop(ARRIVALS.remove(arrivals as usize));
        Ok(())
    })
}

/// `lowconAllGatherEx` that records `arrivals`' event `p` once rank `p`'s piece is in
/// `recvbuff`: with "ce-pull" (and automatic where it picks ce-pull) one by one, this
/// rank's first, then rank + 1, rank + 2, ...; other algorithms all at the end.
/// `lowconArrivalsWait` then makes another stream wait for one piece. GPU backend.
///
/// # Safety
/// As `lowconAllGatherEx`; `arrivals` from `lowconArrivalsCreate` on this communicator.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn lowconAllGatherArrivals(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    sendcount: usize,
    datatype: lowconDataType_t,
    comm: lowconComm_t,
    stream: *mut c_void,
    opts: *const lowconCollOptions,
    arrivals: lowconArrivals_t,
) -> lowconResult_t {
    guard(|| {
        lookup(comm)?;
        let a = arrivals_of(arrivals)?;
        // SAFETY: forwarded from the caller.
        unsafe { all_gather(sendbuff, recvbuff, sendcount, datatype, comm, stream, opts, Some(&a.inner)) }
    })
}

/// Makes work enqueued on `stream` after this wait for piece `piece` (rank `piece`'s
/// shard) of the last `lowconAllGatherArrivals` given `arrivals`. Enqueue it before the
/// next all-gather that reuses them. A captured all-gather's pieces are waited for in
/// the same capture.
///
/// # Safety
/// `stream` is NULL or a live stream of the communicator's GPU.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lowconArrivalsWait(
    arrivals: lowconArrivals_t,
    piece: c_int,
    stream: *mut c_void,
) -> lowconResult_t {
    guard(|| {
        let a = arrivals_of(arrivals)?;
        let piece = usize::try_from(piece).map_err(|_| invalid(format!("arrivals: piece {piece} is negative")))?;
        // SAFETY: forwarded from the caller.
        let s = unsafe { lowcon::cuda::Stream::wrap_borrowed(&a.device, stream.cast()) }?;
        a.inner.wait(&s, piece)?;
        Ok(())
    })
}

/// Makes work enqueued on `stream` after this wait until the last
/// `lowconAllGatherArrivals` given `arrivals` has started: with "ce-pull", passed its
/// entry barrier (every peer's piece can be read); with the other algorithms, landed every
/// piece. A consumer that waits for it before its first GEMM lets the barrier run before
/// that GEMM holds every SM.
///
/// # Safety
/// `stream` is NULL or a live stream of the communicator's GPU.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lowconArrivalsWaitStarted(arrivals: lowconArrivals_t, stream: *mut c_void) -> lowconResult_t {
    guard(|| {
        let a = arrivals_of(arrivals)?;
        // SAFETY: forwarded from the caller.
        let s = unsafe { lowcon::cuda::Stream::wrap_borrowed(&a.device, stream.cast()) }?;
        a.inner.wait_started(&s)?;
        Ok(())
    })
}

/// Released reduce-scatter (GPU backend): `sendbuff` (`nranks * recvcount` elements, from
/// `lowconMemAlloc`: peers read it in place) is written chunk by chunk by `produce`,
/// which is called for every destination `d` in the order rank + 1, rank + 2, ..., rank
/// (modulo the world) and enqueues on `stream` the work that writes chunk `d`; each
/// chunk is copied to its owner as soon as it is written. Then `recvbuff` receives `op`
/// over every rank's chunk `rank`, as `lowconReduceScatterEx` gives it (floats;
/// "ce-reduce" or automatic). `produce` must not call lowcon on this communicator; a
/// producer that fails aborts the communicator. Its waits are kernels whose rounds live
/// on the GPU, so the call can be captured into a CUDA graph.
///
/// # Safety
/// As `lowconReduceScatterEx`; `produce` is a valid function, called with `user`.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn lowconReduceScatterReleased(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    recvcount: usize,
    datatype: lowconDataType_t,
    op: lowconRedOp_t,
    comm: lowconComm_t,
    stream: *mut c_void,
    opts: *const lowconCollOptions,
    produce: Option<unsafe extern "C" fn(dest: c_int, user: *mut c_void) -> lowconResult_t>,
    user: *mut c_void,
) -> lowconResult_t {
    guard(|| {
        let c = lookup(comm)?;
        let produce = produce.ok_or_else(|| invalid("produce is NULL"))?;
        let op = red_op(op)?;
        let (o, recv_type) = options::<ReduceScatterAlgorithm>(opts)?;
        let (rank, user) = (c.rank(), User(user));
        let call = move |d: usize| -> lowcon::Result<()> {
            let user = &user;
            // SAFETY: the caller's callback and its pointer (contract of the entry point).
            match unsafe { produce(d as c_int, user.0) } {
                lowconSuccess => Ok(()),
                code => Err(Error::InvalidArgument(format!(
                    "rank {rank}: the producer of chunk {d} returned {code:?}; the communicator is aborted (peers \
                     wait for this rank's chunks)"
                ))),
            }
        };
        let call = Call::Released(op, o, Box::new(call));
        // SAFETY: forwarded from the caller.
        unsafe { collective(&c, sendbuff, recvbuff, recvcount, datatype, recv_type, call, stream) }
    })
}

/// The producer's user pointer, handed to the library's call (which calls the producer
/// on the calling thread, during the call).
struct User(*mut c_void);

// SAFETY: the library calls the producer only during `lowconReduceScatterReleased`, on
// the caller's thread; the pointer is the caller's, passed back as it came.
unsafe impl Send for User {}
