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
use lowcon::{CollBufs, DeviceBuf, HostInput};

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
            // The tensors' memory says which kind of buffers the call takes; the group
            // refuses the other backend's (NOTE [either backend]).
            match (out.place, inp.place) {
                (Place::Cuda(od), Place::Cuda(id)) => {
                    let g = b.gpu("a collective on CUDA memory").map_err(to_py)?;
                    let dev = g.device().index() as i32;
                    for (d, what) in [(od, "output"), (id, "input")] {
                        if d != dev {
                            return Err(invalid(format!(
                                "rank {rank}: the {what} is on CUDA device {d}, but this group uses CUDA device {dev}"
                            )));
                        }
                    }
                    // A released call's producer is Python: its exception is kept here and
                    // raised as it is, not as the library's error.
                    let raised: std::sync::Mutex<Option<PyErr>> = std::sync::Mutex::new(None);
                    let raised_ref = &raised;
                    let done = py.detach(move || {
                        // SAFETY: the caller's stream (0: the legacy default stream) of this
                        // group's device, alive while the caller uses it.
                        let s = unsafe { Stream::wrap_borrowed(g.device(), raw_stream as usize as _) }?;
                        fn buf(r: Raw, found: &Option<Found>) -> lowcon::Result<DeviceBuf<'_>> {
                            match found.as_ref().and_then(|f| f.gpu()) {
                                Some((seg, off)) => DeviceBuf::symmetric(seg, off, r.count, r.dtype),
                                // SAFETY: the views' memory stays valid while the caller holds
                                // its tensors (until the enqueued call has run, as with NCCL);
                                // the library checks it is device memory of this GPU.
                                None => Ok(unsafe { DeviceBuf::from_raw(r.ptr, r.count, r.dtype) }),
                            }
                        }
                        let (input, output) = (buf(i, &ifound)?, buf(o, &ofound)?);
                        match &which {
                            Which::AllGather(opts, None) => {
                                b.all_gather(CollBufs::Gpu { input, output, stream: &s }, opts)
                            }
                            Which::AllGather(opts, Some(a)) => g.all_gather_arrivals(input, output, &s, opts, a),
                            Which::ReduceScatter(op, opts) => {
                                b.reduce_scatter(CollBufs::Gpu { input, output, stream: &s }, *op, opts)
                            }
                            Which::Released(op, opts, produce) => {
                                let mut call = |d: usize| -> lowcon::Result<()> {
                                    Python::attach(|py| produce.bind(py).call1((d,)).map(|_| ())).map_err(|e| {
                                        let msg = format!("rank {rank}: the producer of chunk {d} raised: {e}");
                                        *raised_ref.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                                        lowcon::Error::InvalidArgument(msg)
                                    })
                                };
                                g.reduce_scatter_released(input, output, *op, &s, opts, &mut call)
                            }
                            Which::Traffic(true, _) => g.all_gather_traffic(input, output, &s),
                            Which::Traffic(false, _) => g.reduce_scatter_traffic(input, output, &s),
                        }
                    });
                    match (done, raised.into_inner().unwrap_or_else(|p| p.into_inner())) {
                        (Err(_), Some(e)) => Err(e),
                        (r, _) => r.map_err(to_py),
                    }
                }
                (Place::Cpu, Place::Cpu) => {
                    if matches!(which, Which::Released(..)) {
                        return Err(invalid(format!(
                            "rank {rank}: a released reduce-scatter is for GPU groups on CUDA tensors (a host group's \
                             calls are synchronous: produce the whole input, then reduce_scatter)"
                        )));
                    }
                    if matches!(which, Which::Traffic(..)) {
                        // A host group is refused naming the operation; a GPU group, for
                        // tensors that are not in its device's memory.
                        b.gpu("the traffic floor (bytes between GPUs)").map_err(to_py)?;
                        return Err(invalid(format!(
                            "rank {rank}: the traffic floor measures bytes between GPUs: its tensors are in CPU \
                             memory, not on this group's CUDA device"
                        )));
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
                    let staged = ifound.as_ref().and_then(|f| f.host());
                    let copied = if overlaps && staged.is_none() { Some(input_bytes.to_vec()) } else { None };
                    // SAFETY: as above; nothing else in this process writes the output now.
                    let output = unsafe { std::slice::from_raw_parts_mut(optr, ob) };
                    let input = match staged {
                        Some((buf, offset)) => HostInput::Symmetric { buf, offset, len: ib },
                        None => HostInput::Plain(copied.as_deref().unwrap_or(input_bytes)),
                    };
                    let dtypes = (i.dtype, o.dtype);
                    interruptible(
                        py,
                        || b.abort(),
                        move || match &which {
                            // A host call is synchronous: every piece has arrived when it returns.
                            Which::AllGather(opts, _) => b.all_gather(CollBufs::Host { input, output, dtypes }, opts),
                            Which::ReduceScatter(op, opts) => {
                                b.reduce_scatter(CollBufs::Host { input, output, dtypes }, *op, opts)
                            }
                            Which::Traffic(..) | Which::Released(..) => unreachable!("refused above"),
                        },
                    )?
                    .map_err(to_py)
                }
                (op, ip) => Err(invalid(format!(
                    "rank {rank}: the output is in {op:?} memory and the input in {ip:?}: a collective takes \
                     both on the group's device (CUDA memory for a GPU group, CPU memory for a host group)"
                ))),
            }
        })
    }
}
