//! A collective call from Python: the pool's agreement check, the views of the
//! tensors, and the native call with the GIL released (`Group::collective`).

use pyo3::prelude::*;

use crate::Group;
use crate::backend::Backend;
use crate::dlpack::{self, Place};
use crate::errors::{invalid, to_py};
use crate::wait::interruptible;
use lowcon::cuda::Stream;
use lowcon::cuda::enqueued::{Phase, phase};
use lowcon::{Call, Memory, RawBuf};

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
    /// Converts the tensors into the library's call (NOTE [one dispatch] in
    /// `lowcon::group::dispatch`), which checks and runs it; `Err` with the library's error.
    pub(crate) fn collective<'py>(
        &self,
        py: Python<'py>,
        output: &Bound<'py, PyAny>,
        input: &Bound<'py, PyAny>,
        mut call: Call<'_>,
        stream: Option<isize>,
        on_current: bool,
    ) -> PyResult<()> {
        // NOTE [host phases]: the conversion below, until the library's call.
        let binding = phase(Phase::Binding);
        let view = |obj: &Bound<'py, PyAny>, what: &str| -> PyResult<dlpack::View<'py>> {
            if on_current && let Some(v) = dlpack::torch_view(obj, what)? {
                return Ok(v);
            }
            dlpack::view(obj, what, stream)
        };
        let out = view(output, "output")?;
        let inp = view(input, "input")?;
        let raw = |v: &dlpack::View<'_>| RawBuf { ptr: v.ptr, count: v.count, dtype: v.dtype };
        let (o, i) = (raw(&out), raw(&inp));
        let rank = self.rank;
        if o.count == 0 && i.count == 0 {
            // Nothing to move (an empty tensor may have no data pointer at all), and every
            // rank makes the same call, so no peer waits for this one.
            return self.with(|_| Ok(()));
        }
        let raw_stream = stream.unwrap_or(0);
        if let Some(c) = call.channel_mut()
            && *c == u32::MAX
        {
            *c = self.channels.for_stream(self.rank, raw_stream as u64)?;
        }
        // Pool memory is symmetric: peers reach it in place, with no staging copy.
        let pool = self.pool.symmetric();
        let in_pool = pool.find(i.ptr, inp.bytes()).is_some() || pool.find(o.ptr, out.bytes()).is_some();
        drop(binding);
        self.with(|b| {
            if in_pool {
                self.check_pool(py, b)?;
            }
            // The tensors' memory says which kind of buffers the call takes; the group
            // refuses the other backend's (NOTE [either backend]).
            match (out.place, inp.place) {
                (Place::Cuda(_), Place::Cuda(_)) => {
                    let g = b.gpu("a collective on CUDA memory").map_err(to_py)?;
                    py.detach(move || {
                        // SAFETY: the caller's stream (0: the legacy default stream) of this
                        // group's device, alive while the caller uses it.
                        let s = unsafe { Stream::wrap_borrowed(g.device(), raw_stream as usize as _) }?;
                        // SAFETY: the views' memory stays valid while the caller holds its
                        // tensors (until the enqueued call has run, as with NCCL); the
                        // library checks it is device memory of this GPU.
                        unsafe { b.call(call, i, o, Memory::Device(&s), pool) }
                    })
                    .map_err(to_py)
                }
                (Place::Cpu, Place::Cpu) => {
                    let run = move || {
                        // SAFETY: the views are live, contiguous host memory of these sizes
                        // for the call (the caller's arrays), which nothing else in this
                        // process writes meanwhile; a host call is synchronous.
                        unsafe { b.call(call, i, o, Memory::Host, pool) }
                    };
                    interruptible(py, || b.abort(), run)?.map_err(to_py)
                }
                (op, ip) => Err(invalid(format!(
                    "rank {rank}: the output is in {op:?} memory and the input in {ip:?}: a collective takes \
                     both on the group's device (CUDA memory for a GPU group, CPU memory for a host group)"
                ))),
            }
        })
    }
}
