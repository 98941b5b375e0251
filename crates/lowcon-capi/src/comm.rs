//! Communicators: creation, destruction, abort, errors, queries, symmetric memory.

use super::*;

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
            Group::from(GpuGroup::from_env(GpuGroupOptions::default())?)
        } else {
            Group::from(HostGroup::from_env(HostGroupOptions::default())?)
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
            Group::from(GpuGroup::new(store, rank, world, GpuGroupOptions::default())?)
        } else {
            Group::from(HostGroup::new(store, rank, world, HostGroupOptions::default())?)
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
        // Dropped after the registry's lock is released (`Handles::remove`).
        let c = COMMS.remove(comm as usize);
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
        c.group.abort();
        let removed = COMMS.remove(comm as usize);
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
        let r = c.group.check();
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
        let s = match c.group.as_gpu() {
            // SAFETY: forwarded from the caller.
            Some(g) => Some(unsafe { Stream::wrap_borrowed(g.device(), stream.cast()) }?),
            None => None,
        };
        Ok(c.group.synchronize(s.as_ref())?)
    })
}

/// Collective: sets up channel `channel`'s workspace (at least `bytes`) and its LL
/// buffer now, on every rank alike. Call it before capturing collectives into a CUDA
/// graph (`cudaStreamBeginCapture`): a captured call cannot grow a workspace (that
/// allocates and meets the peers), and is refused with `lowconInvalidArgument` naming
/// the bytes to reserve. Also useful before starting threads that use different
/// channels. Host backend: nothing to do.
///
/// # Safety
/// None beyond a valid `comm`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lowconCommReserveWorkspace(
    comm: lowconComm_t,
    channel: c_int,
    bytes: usize,
) -> lowconResult_t {
    guard(|| {
        let c = lookup(comm)?;
        let channel = u32::try_from(channel)
            .map_err(|_| lowcon::Error::InvalidArgument(format!("channel {channel}: must not be negative")))?;
        Ok(c.group.reserve_workspace(channel, bytes)?)
    })
}

/// Registers the work enqueued on `stream` so far with the communicator's watchdog:
/// call it after each `cudaGraphLaunch` of a graph that holds lowcon calls. A dead or
/// late peer is then named while the replay waits for it (`lowconStreamSynchronize`,
/// `lowconCommGetAsyncError`), as for eager calls; without it, kernel waits still time
/// out on the device, but stream-memop waits would wait for ever. Never waits.
///
/// # Safety
/// `stream` is NULL (the legacy default stream) or a live CUDA stream of the
/// communicator's device.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lowconCommTrackReplay(comm: lowconComm_t, stream: *mut c_void) -> lowconResult_t {
    guard(|| {
        let c = lookup(comm)?;
        let g = c.group.gpu("lowconCommTrackReplay (the host backend has no CUDA graphs)")?;
        // SAFETY: forwarded from the caller.
        let s = unsafe { Stream::wrap_borrowed(g.device(), stream.cast()) }?;
        Ok(g.track_replay(&s)?)
    })
}

/// Collective among the survivors of a failed communicator (every live rank calls it):
/// `*newcomm` becomes a communicator of the ranks still alive, renumbered in order of
/// their old ranks. The ranks agree through the store within the communicator's
/// timeout; a rank that arrives after the member list was made is left out
/// (`lowconInvalidUsage`, the message says so, again on every later call). A rank that
/// dies during the shrink fails it on every survivor at once, naming it: the coordinator
/// (`lowconInvalidUsage`) or a member while the new communicator is made
/// (`lowconRemoteError`); call it again.
/// `comm` is failed: its calls in flight are discarded; destroy it. Its
/// `lowconMemAlloc` buffers must be allocated again from the new communicator.
///
/// # Safety
/// `newcomm` points to writable storage.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lowconCommShrink(comm: lowconComm_t, newcomm: *mut lowconComm_t) -> lowconResult_t {
    guard(|| {
        let c = lookup(comm)?;
        out_ptr(newcomm, "newcomm")?;
        let group = c.group.shrink()?;
        write_out(newcomm, "newcomm", register(make_comm(group)))
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
        let d = c.group.device_index().map_or(-1, |i| i as c_int);
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
        let base = c.mem.add(c.group.alloc(size)?) as *mut c_void;
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
        match c.mem.remove(ptr as usize) {
            None => {
                Err(invalid(format!("rank {}: {ptr:p} is not a lowconMemAlloc buffer of this communicator", c.rank())))
            }
            Some(Ok(buffer)) => Ok(buffer.close()?),
            // Against the contract: released when that call drops it.
            Some(Err(_)) => Err(invalid(format!(
                "rank {}: {ptr:p} is in use by a collective on another thread; it is released when that call returns",
                c.rank()
            ))),
        }
    })
}

/// Fills the first `size` bytes of `opts` with the defaults (automatic algorithm, kernel
/// sync, default CTAs and pipeline, channel 0, staging allowed, no wire, the send type
/// as the receive type) and sets `opts->size = size`, `opts->magic`. Call it through
/// the `lowconCollOptionsInit(opts)` macro, which passes `sizeof(*(opts))`: a program
/// built against an older header then gets a struct of its own size. `size` below the
/// smallest version of the struct, or above what this library knows, is refused.
///
/// # Safety
/// `opts` points to `size` writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lowconCollOptionsInitSized(opts: *mut lowconCollOptions, size: usize) -> lowconResult_t {
    guard(|| {
        let p = out_ptr(opts, "opts")?;
        check_options_size(size)?;
        let d = default_options(size);
        // SAFETY: the caller's struct holds `size` bytes (contract), no more than `d`.
        unsafe { std::ptr::copy_nonoverlapping(std::ptr::addr_of!(d).cast::<u8>(), p.cast::<u8>(), size) };
        Ok(())
    })
}

/// The bytes this communicator's calls moved to and from peers since it was made
/// (`lowconCollStats`). Set `stats->size = sizeof(lowconCollStats)` first; the fields
/// inside it are written. On the GPU backend the bf16 wire's fallbacks are the
/// reductions run so far: synchronise the stream first for the calls just enqueued.
///
/// # Safety
/// `stats` points to `stats->size` writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lowconCommGetStats(comm: lowconComm_t, stats: *mut lowconCollStats) -> lowconResult_t {
    guard(|| {
        let c = lookup(comm)?;
        let p = out_ptr(stats, "stats")?;
        // SAFETY: non-null; every version of the struct starts with `size`.
        let size = unsafe { std::ptr::addr_of!((*p).size).read_unaligned() };
        let min = std::mem::size_of::<usize>() + std::mem::size_of::<c_ulonglong>();
        let ours = std::mem::size_of::<lowconCollStats>();
        if !(min..=ours).contains(&size) {
            return Err(invalid(format!(
                "rank {}: lowconCollStats.size is {size}: set it to sizeof(lowconCollStats) ({ours} in this \
                 library's header)",
                c.rank()
            )));
        }
        let s = c.group.stats()?;
        let out = lowconCollStats {
            size,
            all_gather_bytes: s.all_gather_bytes,
            reduce_scatter_bytes: s.reduce_scatter_bytes,
            wire_bytes: s.wire_bytes,
            fallback_bytes: s.fallback_bytes,
            wire_pieces: s.wire_pieces,
            fallback_pieces: s.fallback_pieces,
            host_rendezvous: s.host_rendezvous,
            predicted_calls: s.predicted_calls,
            mispredicted_calls: s.mispredicted_calls,
            host_calls: s.host_calls,
            host_call_ns: s.host_call_ns,
            host_rendezvous_ns: s.host_rendezvous_ns,
            mailbox_waits: s.mailbox_waits,
            mailbox_wait_ns: s.mailbox_wait_ns,
        };
        // SAFETY: the caller's struct holds `size` bytes (contract), no more than `out`.
        unsafe { std::ptr::copy_nonoverlapping(std::ptr::addr_of!(out).cast::<u8>(), p.cast::<u8>(), size) };
        Ok(())
    })
}
