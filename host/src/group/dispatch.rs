//! A collective call as a binding hands it to a [`Group`]: what it does ([`Call`]), its
//! two buffers as this rank's addresses ([`RawBuf`]), where they live ([`Memory`]), and
//! the symmetric allocations the binding keeps ([`Symmetric`]).
//!
//! NOTE [one dispatch]: the C ABI and the Python binding convert their arguments (C's
//! pointers and counts, DLPack views) into one [`Call`] and two [`RawBuf`]s, and make
//! one library call, [`Group::call`]. Everything after the conversion happens here,
//! once, for both: the refusal of a call the group's backend cannot run, the lookup of
//! symmetric memory (C's `lowconMemAlloc` buffers in a [`Registry`], Python's pool: one
//! lookup, [`Symmetric::find`]), the device or host buffers the collective takes, and
//! the dispatch to the collective. The checks of sizes, types and options are the
//! collective's own (`coll::check`), made once; a binding makes none of them again.

use std::sync::{Arc, RwLock};

use super::either::{Buffer, CollBufs, Group};
use crate::coll::{AllGatherOptions, Arrivals, DType, DeviceBuf, HostInput, ReduceOp, ReduceScatterOptions};
use crate::cuda::Stream;
use crate::error::{Error, Result};
use crate::memory::pool::{Pool, holds};

/// What a collective call does. The options are the call's own (a binding fills them
/// from its arguments; the planner decides what they leave open).
pub enum Call<'a> {
    /// All-gather: `output[p * n ..]` receives rank `p`'s input. With arrivals (GPU
    /// groups), each piece records its event as it lands (NOTE [per-piece arrivals]).
    AllGather(AllGatherOptions, Option<&'a Arrivals>),
    /// Reduce-scatter: the output receives `op` over every rank's chunk of its input.
    ReduceScatter(ReduceOp, ReduceScatterOptions),
    /// A released reduce-scatter (GPU groups, NOTE [release rounds]): `produce(d)`
    /// enqueues the writes of the input's chunk for destination `d` on the call's stream.
    Released(ReduceOp, ReduceScatterOptions, Box<dyn FnMut(usize) -> Result<()> + Send + 'a>),
    /// The traffic floor of an all-gather (`true`) or a reduce-scatter (`false`), GPU
    /// groups: the bytes alone, no sync, garbage results
    /// ([`crate::group::gpu::GpuGroup::all_gather_traffic`]).
    Traffic(bool),
}

impl Call<'_> {
    /// The call's channel, where it has one (the traffic floor has none: no barrier).
    pub fn channel_mut(&mut self) -> Option<&mut u32> {
        match self {
            Call::AllGather(o, _) => Some(&mut o.channel),
            Call::ReduceScatter(_, o) | Call::Released(_, o, _) => Some(&mut o.channel),
            Call::Traffic(_) => None,
        }
    }

    /// Whether the input is one rank's share (all-gathers) rather than every rank's.
    pub fn gathers(&self) -> bool {
        matches!(self, Call::AllGather(..) | Call::Traffic(true))
    }

    /// What a host group says refusing this call: `None` where both backends run it.
    fn gpu_only(&self) -> Option<&'static str> {
        match self {
            Call::AllGather(_, Some(_)) => Some(
                "an all-gather with arrivals (CUDA events) runs on GPU groups only (GPU communicators in C): a host \
                 group's all-gather returns with every piece in place",
            ),
            Call::Released(..) => Some(
                "a released reduce-scatter runs on GPU groups only (GPU communicators in C): a host group's calls are \
                 synchronous (produce the whole input, then reduce-scatter it)",
            ),
            Call::Traffic(_) => Some("the traffic floor measures bytes between GPUs: it runs on GPU groups only"),
            _ => None,
        }
    }
}

/// One buffer of a call: this rank's address (device memory for a GPU group, host
/// memory for a host group), its elements and their type.
#[derive(Clone, Copy, Debug)]
pub struct RawBuf {
    /// This rank's address of the first element.
    pub ptr: u64,
    /// Elements.
    pub count: usize,
    /// Their type.
    pub dtype: DType,
}

impl RawBuf {
    /// Its bytes, or the refusal of a size that overflows.
    fn bytes(&self, rank: usize, what: &str) -> Result<usize> {
        self.count.checked_mul(self.dtype.size()).ok_or_else(|| {
            Error::InvalidArgument(format!("rank {rank}: the {what}'s {} {} elements overflow", self.count, self.dtype))
        })
    }
}

/// Where a call's buffers live, as the binding found them.
#[derive(Clone, Copy)]
pub enum Memory<'a> {
    /// Device memory, the call enqueued on this stream (of the group's device).
    Device(&'a Stream),
    /// Host memory: the call is synchronous.
    Host,
}

/// The group's symmetric allocations a binding keeps (NOTE [one dispatch]): memory inside
/// one is read by the peers in place, without staging.
pub trait Symmetric {
    /// The allocation holding `bytes` at this rank's address `ptr`, and the offset in it.
    fn find(&self, ptr: u64, bytes: usize) -> Option<(Arc<Buffer>, usize)>;
}

/// No symmetric allocation: every buffer is ordinary memory.
pub struct NoSymmetric;

impl Symmetric for NoSymmetric {
    fn find(&self, _: u64, _: usize) -> Option<(Arc<Buffer>, usize)> {
        None
    }
}

impl<E: Clone> Symmetric for Pool<Arc<Buffer>, E> {
    fn find(&self, ptr: u64, bytes: usize) -> Option<(Arc<Buffer>, usize)> {
        Pool::find(self, ptr, bytes)
    }
}

/// Whole symmetric allocations a caller made ([`Group::alloc`]) and registered, as C's
/// `lowconMemAlloc` does: collectives on memory inside one run without staging.
#[derive(Default)]
pub struct Registry {
    buffers: RwLock<Vec<Arc<Buffer>>>,
}

impl Registry {
    /// Registers `buffer`; returns this rank's address of it.
    pub fn add(&self, buffer: Buffer) -> usize {
        let base = buffer.base_addr();
        self.buffers.write().unwrap_or_else(|p| p.into_inner()).push(Arc::new(buffer));
        base
    }

    /// Takes out the buffer at this rank's address `base`: `None` when none starts there.
    /// A call still using it (on another thread, against the caller's contract) keeps it
    /// alive until it returns; the buffer is then released when that call drops it.
    pub fn remove(&self, base: usize) -> Option<std::result::Result<Buffer, Arc<Buffer>>> {
        let mut all = self.buffers.write().unwrap_or_else(|p| p.into_inner());
        let i = all.iter().position(|b| b.base_addr() == base)?;
        Some(Arc::try_unwrap(all.remove(i)))
    }
}

impl Symmetric for Registry {
    fn find(&self, ptr: u64, bytes: usize) -> Option<(Arc<Buffer>, usize)> {
        let all = self.buffers.read().unwrap_or_else(|p| p.into_inner());
        all.iter().find_map(|b| holds(b.as_ref(), ptr, bytes).map(|off| (b.clone(), off)))
    }
}

impl Group {
    /// Runs one collective call as a binding hands it over (NOTE [one dispatch]): refuses
    /// a call this group's backend cannot run, finds the buffers in `symmetric` (in
    /// place, no staging) or takes them as ordinary memory, and runs the collective,
    /// which checks the sizes, types and options.
    ///
    /// # Safety
    /// `input` and `output` are valid for their sizes until the call has run: device
    /// memory of the group's GPU with `Memory::Device` (the stream a live stream of that
    /// device), or host memory with `Memory::Host` (the call is synchronous; no other
    /// thread writes the output meanwhile). An empty buffer's address is never read.
    pub unsafe fn call(
        &self,
        call: Call<'_>,
        input: RawBuf,
        output: RawBuf,
        memory: Memory<'_>,
        symmetric: &dyn Symmetric,
    ) -> Result<()> {
        let rank = self.rank();
        let (ib, ob) = (input.bytes(rank, "input")?, output.bytes(rank, "output")?);
        let (ifound, ofound) = (symmetric.find(input.ptr, ib), symmetric.find(output.ptr, ob));
        let copied;
        let bufs = match (self, memory) {
            (Group::Gpu(_), Memory::Device(stream)) => {
                fn buf(r: RawBuf, found: &Option<(Arc<Buffer>, usize)>) -> Result<DeviceBuf<'_>> {
                    match found.as_ref().and_then(|(b, off)| Some((b.as_gpu()?, *off))) {
                        Some((seg, off)) => DeviceBuf::symmetric(seg, off, r.count, r.dtype),
                        // SAFETY: valid until the call has run (this function's contract);
                        // the collective checks that it is device memory of its GPU.
                        None => Ok(unsafe { DeviceBuf::from_raw(r.ptr, r.count, r.dtype) }),
                    }
                }
                CollBufs::Gpu { input: buf(input, &ifound)?, output: buf(output, &ofound)?, stream }
            }
            (Group::Host(_), Memory::Host) => {
                if let Some(what) = call.gpu_only() {
                    return Err(Error::InvalidArgument(format!(
                        "rank {rank}: {what}; this group is on the host backend"
                    )));
                }
                // An empty buffer may have a null address: a dangling one is never read.
                let at = |r: RawBuf, bytes: usize| {
                    if bytes == 0 { std::ptr::NonNull::<u8>::dangling().as_ptr() } else { r.ptr as *mut u8 }
                };
                let staged = ifound.as_ref().and_then(|(b, off)| Some((b.as_host()?, *off)));
                // An ordinary input overlapping the output (in-place calls) is copied
                // first: a shared and a mutable slice must not alias (a symmetric input
                // is read through the buffer's mapping, and the collective handles an
                // in-place all-gather there).
                let overlaps = input.ptr < output.ptr.saturating_add(ob as u64)
                    && output.ptr < input.ptr.saturating_add(ib as u64);
                // SAFETY: live host memory of `ib` bytes (contract), or a dangling pointer
                // for none.
                let input_bytes = unsafe { std::slice::from_raw_parts(at(input, ib) as *const u8, ib) };
                copied = (overlaps && staged.is_none()).then(|| input_bytes.to_vec());
                // SAFETY: as above, `ob` bytes no other reference aliases (an overlapping
                // input was copied, a symmetric one is read through raw pointers).
                let out = unsafe { std::slice::from_raw_parts_mut(at(output, ob), ob) };
                let inp = match staged {
                    Some((buf, offset)) => HostInput::Symmetric { buf, offset, len: ib },
                    None => HostInput::Plain(copied.as_deref().unwrap_or(input_bytes)),
                };
                CollBufs::Host { input: inp, output: out, dtypes: (input.dtype, output.dtype) }
            }
            (_, memory) => return Err(self.mismatched(matches!(memory, Memory::Device(_)))),
        };
        // Straight to the collective (binding, dispatch, collective: NOTE [one dispatch]),
        // with no forwarder between.
        match (self, call, bufs) {
            (Group::Gpu(g), call, CollBufs::Gpu { input, output, stream }) => match call {
                Call::AllGather(opts, arrivals) => g.coll.all_gather(input, output, stream, &opts, arrivals),
                Call::ReduceScatter(op, opts) => g.coll.reduce_scatter(input, output, op, stream, &opts),
                Call::Released(op, opts, mut produce) => {
                    g.coll.reduce_scatter_released(input, output, op, stream, &opts, &mut *produce)
                }
                Call::Traffic(true) => g.coll.all_gather_traffic(input, output, stream),
                Call::Traffic(false) => g.coll.reduce_scatter_traffic(input, output, stream),
            },
            (Group::Host(g), call, CollBufs::Host { input, output, dtypes }) => match call {
                Call::AllGather(opts, None) => g.coll.all_gather(input, output, dtypes, &opts),
                Call::ReduceScatter(op, opts) => g.coll.reduce_scatter(input, output, dtypes, op, &opts),
                _ => unreachable!("GPU-only calls are refused on host groups (above)"),
            },
            _ => unreachable!("buffers of the group's backend (above)"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::pool::Segment;

    struct Seg(u64, usize);
    impl Segment for Seg {
        fn base(&self) -> u64 {
            self.0
        }
        fn len(&self) -> usize {
            self.1
        }
    }

    /// A group of one rank on the host backend, meeting through an in-process store.
    fn one_rank() -> (Group, lowcon_store::StoreServer) {
        let server = lowcon_store::StoreServer::start("127.0.0.1:0", Default::default()).expect("a store");
        let client =
            lowcon_store::StoreClient::connect(server.local_addr().to_string(), Default::default()).expect("connect");
        let g = crate::group::host::HostGroup::new(client, 0, 1, crate::group::host::HostGroupOptions::default())
            .expect("a group of one");
        (g.into(), server)
    }

    fn raw(v: &[f32]) -> RawBuf {
        RawBuf { ptr: v.as_ptr() as u64, count: v.len(), dtype: DType::F32 }
    }

    #[test]
    fn one_call_runs_plain_symmetric_and_in_place_buffers_and_refuses_what_the_backend_cannot() {
        let (g, _server) = one_rank();
        let input: Vec<f32> = (0..64).map(|i| (i as f32 * 0.37).sin()).collect();
        let ag = || Call::AllGather(AllGatherOptions::default(), None);
        // Ordinary memory.
        let out = vec![f32::NAN; 64];
        // SAFETY: live vectors of these sizes; the call is synchronous.
        unsafe { g.call(ag(), raw(&input), raw(&out), Memory::Host, &NoSymmetric) }.unwrap();
        assert_eq!(out, input);
        // A registered symmetric allocation, found by address inside it (offset 256).
        let registry = Registry::default();
        let base = registry.add(g.alloc(4096).unwrap());
        let sym = (base + 256) as *mut f32;
        // SAFETY: 64 floats at byte 256 of the 4096-byte allocation this test owns.
        unsafe { std::ptr::copy_nonoverlapping(input.as_ptr(), sym, 64) };
        let found = registry.find(sym as u64, 256).expect("inside the registered allocation");
        assert_eq!(found.1, 256);
        drop(found);
        assert!(registry.find(base as u64 + 4000, 256).is_none(), "past its end");
        let out = vec![f32::NAN; 64];
        let sym_in = RawBuf { ptr: sym as u64, count: 64, dtype: DType::F32 };
        // SAFETY: as above.
        unsafe { g.call(ag(), sym_in, raw(&out), Memory::Host, &registry) }.unwrap();
        assert_eq!(out, input);
        // In place: the input is the output (one rank), copied before the call.
        let inplace = input.clone();
        // SAFETY: as above; the library copies an overlapping ordinary input first.
        unsafe { g.call(ag(), raw(&inplace), raw(&inplace), Memory::Host, &NoSymmetric) }.unwrap();
        assert_eq!(inplace, input);
        // A reduce-scatter through the same entry.
        let out = vec![f32::NAN; 64];
        let rs = Call::ReduceScatter(ReduceOp::Sum, ReduceScatterOptions::default());
        // SAFETY: as above.
        unsafe { g.call(rs, raw(&input), raw(&out), Memory::Host, &NoSymmetric) }.unwrap();
        assert_eq!(out, input);
        // What only GPU groups run is refused once, naming the rank and the backend.
        let produce: Box<dyn FnMut(usize) -> Result<()> + Send> = Box::new(|_| Ok(()));
        let refused = [Call::Released(ReduceOp::Sum, ReduceScatterOptions::default(), produce), Call::Traffic(true)];
        for (call, what) in refused.into_iter().zip(["released reduce-scatter", "traffic floor"]) {
            // SAFETY: as above (refused before any byte is touched).
            let e = unsafe { g.call(call, raw(&input), raw(&out), Memory::Host, &NoSymmetric) }.unwrap_err();
            let e = e.to_string();
            assert!(e.contains("rank 0: ") && e.contains(what) && e.contains("host backend"), "{e}");
        }
        // The collective's own checks, made once: an all-gather's types must agree.
        let halves = [0u16; 64];
        let bf16 = RawBuf { ptr: halves.as_ptr() as u64, count: 64, dtype: DType::Bf16 };
        // SAFETY: as above.
        let e = unsafe { g.call(ag(), raw(&input), bf16, Memory::Host, &NoSymmetric) }.unwrap_err().to_string();
        assert!(e.contains("all-gather input is f32 but output is bf16"), "{e}");
        // A registered allocation is taken out once; one a call still holds is taken out
        // and released when that call lets it go.
        assert!(matches!(registry.remove(base), Some(Ok(_))));
        assert!(registry.remove(base).is_none());
        let other = registry.add(g.alloc(4096).unwrap());
        let held = registry.find(other as u64, 8).expect("registered");
        assert!(matches!(registry.remove(other), Some(Err(_))));
        assert!(registry.find(other as u64, 8).is_none() && held.0.len() == 4096);
    }

    #[test]
    fn a_range_is_held_only_inside_the_segment() {
        let s = Seg(0x1000, 0x100);
        assert_eq!(holds(&s, 0x1000, 0x100), Some(0));
        assert_eq!(holds(&s, 0x1080, 0x80), Some(0x80));
        assert_eq!(holds(&s, 0x1080, 0x81), None);
        assert_eq!(holds(&s, 0xfff, 1), None);
        assert_eq!(holds(&s, 0x1100, 0), Some(0x100));
        assert_eq!(holds(&s, u64::MAX, 2), None, "an overflowing end is not held");
    }
}
