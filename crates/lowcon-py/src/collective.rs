//! A collective call from Python: the pool's agreement check, the views of the
//! tensors, and the native call with the GIL released (`Group::collective`).

use pyo3::prelude::*;

use crate::Group;
use crate::backend::Backend;
use crate::call::{Raw, Which};
use crate::dlpack::{self, Place};
use crate::errors::{invalid, to_py};
use crate::pool::Found;
use crate::wait::interruptible;
use lowcon::cuda::Stream;
use lowcon::{DeviceBuf, HostInput};

impl Group {
    /// Every N-th collective on pool memory (`LOWCON_POOL_CHECK_EVERY`, default 64):
    /// publishes this rank's pool fingerprint without waiting and compares every rank's
    /// fingerprint of the previous check, published N collectives ago, so it waits only
    /// for a rank N calls behind; a disagreement is named within 2N calls. With N = 1 the
    /// check is strict instead: the ranks compare before every call (a host rendezvous
    /// per call), so no call ever runs on disagreeing offsets. A mismatch aborts the group.
    pub(crate) fn check_pool(&self, py: Python<'_>, b: &Backend) -> PyResult<()> {
        let Some((fp, n)) = self.pool.note_collective() else { return Ok(()) };
        let rank = self.rank;
        let strict = self.pool.check_every() == 1;
        let prev = if strict { None } else { self.last_check.lock().unwrap_or_else(|p| p.into_inner()).replace(n) };
        let run = move || -> lowcon::Result<()> {
            let blob = fp.to_bytes();
            let all = if strict {
                b.all_gather_bytes(&format!("pool-strict/{n}"), &blob)?
            } else {
                b.publish(&format!("pool-check/{n}"), &blob)?;
                match prev {
                    Some(p) => b.published(&format!("pool-check/{p}"))?,
                    None => return Ok(()),
                }
            };
            lowcon::memory::pool::compare_fingerprints(rank, "at a collective on pool memory", &all)
        };
        interruptible(py, || b.abort(), run)?.map_err(|e| {
            b.abort();
            to_py(e)
        })
    }

    /// `on_current`: the caller took `stream` from torch's current stream, so torch
    /// tensors need no DLPack export (no stream can need to wait): `dlpack::torch_view`.
    pub(crate) fn collective<'py>(
        &self,
        py: Python<'py>,
        output: &Bound<'py, PyAny>,
        input: &Bound<'py, PyAny>,
        mut which: Which,
        stream: Option<isize>,
        on_current: bool,
    ) -> PyResult<()> {
        let view = |obj: &Bound<'py, PyAny>, what: &str| -> PyResult<dlpack::View<'py>> {
            if on_current && let Some(v) = dlpack::torch_view(obj, what)? {
                return Ok(v);
            }
            dlpack::view(obj, what, stream)
        };
        let out = view(output, "output")?;
        let inp = view(input, "input")?;
        let (o, i) = (Raw::from(&out), Raw::from(&inp));
        let rank = self.rank;
        if o.count == 0 && i.count == 0 {
            // Nothing to move (an empty tensor may have no data pointer at all), and every
            // rank makes the same call, so no peer waits for this one.
            return self.with(|_| Ok(()));
        }
        let raw_stream = stream.unwrap_or(0);
        if *which.channel_mut() == u32::MAX {
            *which.channel_mut() = self.channels.for_stream(self.rank, raw_stream as u64)?;
        }
        // Pool memory is symmetric: peers reach it in place, with no staging copy.
        let (ifound, ofound) = (self.pool.find(i.ptr, inp.bytes()), self.pool.find(o.ptr, out.bytes()));
        self.with(|b| {
            if ifound.is_some() || ofound.is_some() {
                self.check_pool(py, b)?;
            }
            match b {
                Backend::Gpu(g) => {
                    let dev = g.device().index() as i32;
                    for (v, what) in [(&out, "output"), (&inp, "input")] {
                        if v.place != Place::Cuda(dev) {
                            return Err(invalid(format!(
                                "rank {rank}: the {what} is in {:?} memory, but this group uses CUDA device {dev}",
                                v.place
                            )));
                        }
                    }
                    py.detach(move || {
                        // SAFETY: the caller's stream (0: the legacy default stream) of this
                        // group's device, alive while the caller uses it.
                        let s = unsafe { Stream::wrap_borrowed(g.device(), raw_stream as usize as _) }?;
                        fn buf(r: Raw, found: &Option<Found>) -> lowcon::Result<DeviceBuf<'_>> {
                            match found {
                                Some(Found::Gpu(seg, off)) => DeviceBuf::symmetric(seg, *off, r.count, r.dtype),
                                // SAFETY: the views' memory stays valid while the caller holds
                                // its tensors (until the enqueued call has run, as with NCCL);
                                // the library checks it is device memory of this GPU.
                                _ => Ok(unsafe { DeviceBuf::from_raw(r.ptr, r.count, r.dtype) }),
                            }
                        }
                        let (ib, ob) = (buf(i, &ifound)?, buf(o, &ofound)?);
                        match &which {
                            Which::AllGather(opts) => g.all_gather(ib, ob, &s, opts),
                            Which::ReduceScatter(op, opts) => g.reduce_scatter(ib, ob, *op, &s, opts),
                            Which::Traffic(true, _) => g.all_gather_traffic(ib, ob, &s),
                            Which::Traffic(false, _) => g.reduce_scatter_traffic(ib, ob, &s),
                        }
                    })
                    .map_err(to_py)
                }
                Backend::Host(_) if matches!(which, Which::Traffic(..)) => Err(invalid(format!(
                    "rank {rank}: the traffic floor measures bytes between GPUs: the host backend has none"
                ))),
                Backend::Host(g) => {
                    for (v, what) in [(&out, "output"), (&inp, "input")] {
                        if v.place != Place::Cpu {
                            return Err(invalid(format!(
                                "rank {rank}: the {what} is in {:?} memory, but this group is on the host backend",
                                v.place
                            )));
                        }
                    }
                    if o.dtype != i.dtype && !matches!(which, Which::ReduceScatter(..)) {
                        return Err(invalid(format!("rank {rank}: input is {} but output is {}", i.dtype, o.dtype)));
                    }
                    let (ib, ob) = (inp.bytes(), out.bytes());
                    let overlaps = i.ptr < o.ptr + ob as u64 && o.ptr < i.ptr + ib as u64;
                    // An empty tensor may have a null data pointer: use a dangling one.
                    let iptr = if ib == 0 { std::ptr::NonNull::<u8>::dangling().as_ptr() } else { i.ptr as *mut u8 };
                    let optr = if ob == 0 { std::ptr::NonNull::<u8>::dangling().as_ptr() } else { o.ptr as *mut u8 };
                    // SAFETY: the views are live, contiguous host memory of these sizes for
                    // the call (the caller's arrays), or zero bytes at a dangling pointer;
                    // an ordinary input overlapping the output is copied first, so the
                    // shared and the mutable slice never alias (an input in the pool is
                    // read through the pool's mapping, and the library handles an in-place
                    // all-gather there).
                    let input_bytes = unsafe { std::slice::from_raw_parts(iptr as *const u8, ib) };
                    let copied = if overlaps && ifound.is_none() { Some(input_bytes.to_vec()) } else { None };
                    // SAFETY: as above; nothing else in this process writes the output now.
                    let output_bytes = unsafe { std::slice::from_raw_parts_mut(optr, ob) };
                    let input = match &ifound {
                        Some(Found::Host(buf, offset)) => HostInput::Symmetric { buf, offset: *offset, len: ib },
                        _ => HostInput::Plain(copied.as_deref().unwrap_or(input_bytes)),
                    };
                    let (dtype, in_dtype) = (o.dtype, i.dtype);
                    interruptible(
                        py,
                        || b.abort(),
                        move || match &which {
                            Which::AllGather(opts) => g.all_gather(input, output_bytes, dtype, opts),
                            Which::ReduceScatter(op, opts) => {
                                g.reduce_scatter_typed(input, output_bytes, (in_dtype, dtype), *op, opts)
                            }
                            Which::Traffic(..) => unreachable!("refused above"),
                        },
                    )?
                    .map_err(to_py)
                }
            }
        })
    }
}
