//! The collectives: all-gather and reduce-scatter, plain and with options.

use super::*;

/// The shared body of the collective entry points: converts the C arguments into the
/// library's call (NOTE [one dispatch] in `lowcon::group::dispatch`), which checks and runs
/// it. `count` is the send count of an all-gather, the receive count of a
/// reduce-scatter; `recv_type` the options' receive type.
///
/// # Safety
/// As the entry points: `send` and `recv` valid for their sizes on the backend's side.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn collective(
    c: &Comm,
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    datatype: lowconDataType_t,
    recv_type: Option<DType>,
    call: Call<'_>,
    stream: *mut c_void,
) -> R<()> {
    let rank = c.rank();
    if send.is_null() {
        return Err(invalid(format!("rank {rank}: sendbuff is NULL")));
    }
    if recv.is_null() {
        return Err(invalid(format!("rank {rank}: recvbuff is NULL")));
    }
    let dt = dtype(datatype)?;
    // The receive type is the options' field for reduce-scatters: an all-gather receives
    // what it sends, and the buffer sizes below follow from it.
    let rdt = match (call.gathers(), recv_type) {
        (_, None) => dt,
        (false, Some(r)) => r,
        (true, Some(r)) if r == dt => dt,
        (true, Some(r)) => {
            return Err(invalid(format!(
                "rank {rank}: an all-gather of {dt} receives {dt}, not {r} (recv_type is for reduce-scatters)"
            )));
        }
    };
    let world = c.world();
    let big = count.checked_mul(world).ok_or_else(|| invalid(format!("count {count} x {world} ranks overflows")))?;
    // All-gather: send `count`, receive `world * count`; reduce-scatter the reverse.
    let (n_send, n_recv) = if call.gathers() { (count, big) } else { (big, count) };
    let input = RawBuf { ptr: send as u64, count: n_send, dtype: dt };
    let output = RawBuf { ptr: recv as u64, count: n_recv, dtype: rdt };
    // The buffers follow the communicator's backend (NOTE [either backend]).
    let stream_of = match c.group.as_gpu() {
        // SAFETY: forwarded from the caller (a live stream of this device, or NULL).
        Some(g) => Some(unsafe { Stream::wrap_borrowed(g.device(), stream.cast()) }?),
        None => None,
    };
    let memory = stream_of.as_ref().map_or(Memory::Host, Memory::Device);
    // SAFETY: the buffers are valid for these sizes until the call has run (the entry
    // points' contract), on the communicator's side.
    Ok(unsafe { c.group.call(call, input, output, memory, &c.mem) }?)
}

/// All-gather: `recvbuff[p * sendcount ..]` receives rank `p`'s `sendbuff`
/// (`sendcount` elements), on every rank. In place when `sendbuff` is
/// `recvbuff + rank * sendcount`. GPU backend: enqueued on `stream` (a `cudaStream_t`,
/// NULL for the legacy default stream) and returns at once. It can be captured into a
/// CUDA graph (`cudaStreamBeginCapture`): reserve the channel's workspace before
/// (`lowconCommReserveWorkspace`; a captured call that would grow it is refused with
/// `lowconInvalidArgument`, the capture still valid) and call `lowconCommTrackReplay`
/// after each `cudaGraphLaunch` (docs/graphs.md).
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
    guard(|| unsafe { all_gather(sendbuff, recvbuff, sendcount, datatype, comm, stream, std::ptr::null(), None) })
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
    guard(|| unsafe { all_gather(sendbuff, recvbuff, sendcount, datatype, comm, stream, opts, None) })
}

/// Reduce-scatter: `recvbuff` (`recvcount` elements) receives `op` over all ranks of
/// their `sendbuff[rank * recvcount ..]`. f32, f16 and bf16, accumulated in f32 in rank
/// order. GPU backend: enqueued on `stream`, and capturable into CUDA graphs, as
/// `lowconAllGather`.
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
    // SAFETY: forwarded from the caller.
    guard(|| unsafe { reduce_scatter(sendbuff, recvbuff, recvcount, datatype, op, comm, stream, std::ptr::null()) })
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
    // SAFETY: forwarded from the caller.
    guard(|| unsafe { reduce_scatter(sendbuff, recvbuff, recvcount, datatype, op, comm, stream, opts) })
}

/// An all-gather with its options (NULL: defaults), recording `arrivals` if given.
///
/// # Safety
/// As `lowconAllGatherEx`.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn all_gather(
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    datatype: lowconDataType_t,
    comm: lowconComm_t,
    stream: *mut c_void,
    opts: *const lowconCollOptions,
    arrivals: Option<&lowcon::Arrivals>,
) -> R<()> {
    let c = lookup(comm)?;
    let (o, recv_type) = options::<AllGatherAlgorithm>(opts)?;
    // SAFETY: forwarded from the caller.
    unsafe { collective(&c, send, recv, count, datatype, recv_type, Call::AllGather(o, arrivals), stream) }
}

/// A reduce-scatter with its options (NULL: defaults).
///
/// # Safety
/// As `lowconReduceScatterEx`.
#[allow(clippy::too_many_arguments)]
unsafe fn reduce_scatter(
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    datatype: lowconDataType_t,
    op: lowconRedOp_t,
    comm: lowconComm_t,
    stream: *mut c_void,
    opts: *const lowconCollOptions,
) -> R<()> {
    // The communicator first, so that a bad operator's message names the rank.
    let c = lookup(comm)?;
    let op = red_op(op)?;
    let (o, recv_type) = options::<ReduceScatterAlgorithm>(opts)?;
    // SAFETY: forwarded from the caller.
    unsafe { collective(&c, send, recv, count, datatype, recv_type, Call::ReduceScatter(op, o), stream) }
}
