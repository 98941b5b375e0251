//! The collectives: all-gather and reduce-scatter, plain and with options.

use super::*;

/// The symmetric region holding `[ptr, ptr + bytes)`, with the offset, if any.
fn find(mem: &[Buffer], ptr: usize, bytes: usize) -> Option<(&Buffer, usize)> {
    mem.iter()
        .find(|r| ptr >= r.base_addr() && ptr + bytes <= r.base_addr() + r.len())
        .map(|r| (r, ptr - r.base_addr()))
}

fn gpu_buf<'a>(mem: &'a [Buffer], ptr: *const c_void, count: usize, dt: DType) -> R<DeviceBuf<'a>> {
    let bytes = count.checked_mul(dt.size()).ok_or_else(|| invalid("size overflow"))?;
    Ok(match find(mem, ptr as usize, bytes).and_then(|(r, off)| Some((r.as_gpu()?, off))) {
        Some((b, off)) => DeviceBuf::symmetric(b, off, count, dt)?,
        // SAFETY: the caller of the collective guarantees the buffer (contract); the
        // library checks that it is device memory of the group's GPU.
        _ => unsafe { DeviceBuf::from_raw(ptr as u64, count, dt) },
    })
}

pub(crate) enum Which {
    AllGather,
    ReduceScatter(ReduceOp),
    /// An all-gather recording these arrivals (GPU).
    AllGatherArrivals(Arc<ArrivalsHandle>),
    /// A released reduce-scatter (GPU): the producer callback and its user pointer.
    Released(ReduceOp, lowconProduceFn, *mut c_void),
}

/// The shared body of the four collective entry points.
///
/// # Safety
/// As the entry points: `send` and `recv` valid for their sizes on the backend's side.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn collective(
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
    // The options first: the receive type decides the output's size.
    let (ag, rs, recv_type) = match which {
        Which::AllGather | Which::AllGatherArrivals(_) => {
            let (o, recv) = options::<AllGatherAlgorithm>(opts)?;
            (Some(o), None, recv)
        }
        Which::ReduceScatter(_) | Which::Released(..) => {
            let (o, recv) = options::<ReduceScatterAlgorithm>(opts)?;
            (None, Some(o), recv)
        }
    };
    let ag_call = matches!(which, Which::AllGather | Which::AllGatherArrivals(_));
    let rdt = match (ag_call, recv_type) {
        (_, None) => dt,
        (false, Some(r)) => r,
        (true, Some(r)) if r == dt => dt,
        (true, Some(r)) => {
            return Err(invalid(format!(
                "rank {}: an all-gather of {dt} receives {dt}, not {r} (recv_type is for reduce-scatters)",
                c.rank()
            )));
        }
    };
    let world = c.world();
    let big = count.checked_mul(world).ok_or_else(|| invalid(format!("count {count} x {world} ranks overflows")))?;
    // All-gather: send `count`, receive `world * count`; reduce-scatter the reverse.
    let (n_send, n_recv) = if ag_call { (count, big) } else { (big, count) };
    if matches!(which, Which::Released(..)) && c.group.as_gpu().is_none() {
        return Err(invalid(format!(
            "rank {}: a released reduce-scatter is for GPU communicators (a host communicator's calls are \
             synchronous: produce the whole input, then lowconReduceScatter)",
            c.rank()
        )));
    }
    if matches!(which, Which::AllGatherArrivals(_)) && c.group.as_gpu().is_none() {
        return Err(invalid(format!(
            "rank {}: arrivals are CUDA events, for GPU communicators (a host communicator's all-gather returns \
             with every piece in place: use lowconAllGatherEx)",
            c.rank()
        )));
    }
    let mem = c.mem.read().unwrap_or_else(|p| p.into_inner());
    // The buffers follow the communicator's backend (NOTE [either backend]).
    let stream_of;
    let copied;
    let bufs = match c.group.as_gpu() {
        Some(g) => {
            // SAFETY: forwarded from the caller (a live stream of this device, or NULL).
            stream_of = unsafe { Stream::wrap_borrowed(g.device(), stream.cast()) }?;
            let input = gpu_buf(&mem, send, n_send, dt)?;
            let output = gpu_buf(&mem, recv, n_recv, rdt)?;
            CollBufs::Gpu { input, output, stream: &stream_of }
        }
        None => {
            let (sb, rb) = (n_send * dt.size(), n_recv * rdt.size());
            let (s0, r0) = (send as usize, recv as usize);
            // The input is copied when it overlaps the output (in-place calls): a shared
            // and a mutable Rust slice must not alias.
            let overlaps = s0 < r0 + rb && r0 < s0 + sb;
            // SAFETY: `send` is valid for `sb` bytes (contract).
            let send_bytes = unsafe { std::slice::from_raw_parts(send.cast::<u8>(), sb) };
            let input = match find(&mem, s0, sb).and_then(|(r, off)| Some((r.as_host()?, off))) {
                Some((b, off)) => HostInput::Symmetric { buf: b, offset: off, len: sb },
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
            CollBufs::Host { input, output, dtypes: (dt, rdt) }
        }
    };
    match (which, ag, rs, bufs) {
        (Which::ReduceScatter(op), _, Some(o), bufs) => c.group.reduce_scatter(bufs, op, &o)?,
        (Which::AllGatherArrivals(a), Some(o), _, CollBufs::Gpu { input, output, stream }) => {
            c.group.gpu("an all-gather with arrivals")?.all_gather_arrivals(input, output, stream, &o, &a.inner)?
        }
        (Which::Released(op, produce, user), _, Some(o), CollBufs::Gpu { input, output, stream }) => {
            let rank = c.rank();
            let mut call = |d: usize| -> lowcon::Result<()> {
                // SAFETY: the caller's callback and its pointer (contract of the entry point).
                match unsafe { produce(d as c_int, user) } {
                    lowconSuccess => Ok(()),
                    code => Err(Error::InvalidArgument(format!(
                        "rank {rank}: the producer of chunk {d} returned {code:?}; the communicator is aborted \
                         (peers wait for this rank's chunks)"
                    ))),
                }
            };
            c.group
                .gpu("a released reduce-scatter")?
                .reduce_scatter_released(input, output, op, stream, &o, &mut call)?
        }
        // A host all-gather is synchronous: every piece is in place when it returns.
        (_, Some(o), _, bufs) => c.group.all_gather(bufs, &o)?,
        _ => return Err(invalid("internal: a call without its options")),
    }
    Ok(())
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
    guard(|| {
        // The communicator first, so that a bad operator's message names the rank.
        lookup(comm)?;
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
        // The communicator first, so that a bad operator's message names the rank.
        lookup(comm)?;
        let which = Which::ReduceScatter(red_op(op)?);
        // SAFETY: forwarded from the caller.
        unsafe { collective(sendbuff, recvbuff, recvcount, datatype, which, comm, stream, opts) }
    })
}
