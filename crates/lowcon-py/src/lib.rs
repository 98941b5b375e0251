//! `lowcon._native`: the native half of the `lowcon` Python package (the rest,
//! `python/lowcon/`, is Python). PyO3 with the stable ABI (abi3, Python 3.9 and later).
//!
//! - Tensors come in through DLPack (`dlpack.rs`): numpy, torch, CuPy, anything with
//!   `__dlpack__`. They are used in place for the call, never copied.
//! - Errors are Python exceptions that keep the Rust message (`errors.rs`).
//! - Calls that can wait (group creation, host-backend collectives, `synchronize`)
//!   release the GIL and run on a helper thread while this thread watches for signals:
//!   Ctrl-C aborts the group (its waits give up) and raises `KeyboardInterrupt`.
//!   GPU collectives only enqueue, like NCCL's.

mod backend;
mod channels;
mod collective;
mod dlpack;
mod errors;
mod keywords;
mod per_piece;
mod placement;
mod pool;
mod pystore;
mod trace;
mod wait;

use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use pyo3::prelude::*;

use crate::backend::{Backend, is_gpu, join};
use crate::channels::Channels;

use errors::{invalid, to_py};
use keywords::{Hints, options};
use lowcon::cuda::Stream;
use lowcon::{DType, GpuGroup, GpuGroupOptions, HostGroup, HostGroupOptions, ReduceOp};
use per_piece::PyArrivals;
use pool::GroupPool;
use wait::interruptible;

/// A group of ranks: lowcon's collectives for this process.
#[pyclass(module = "lowcon._native", frozen)]
struct Group {
    inner: RwLock<Option<Backend>>,
    /// The symmetric pool; its blocks may outlive the group (their deleters keep it).
    pool: Arc<GroupPool>,
    /// Stream → channel, by first use, for calls that name no channel; named claims.
    channels: Channels,
    /// The number of the last lagged pool check (`check_pool`).
    last_check: Mutex<Option<u64>>,
    rank: usize,
    world: usize,
    backend: &'static str,
}

fn timeout_of(ms: Option<u64>) -> Duration {
    ms.map_or_else(lowcon::config::timeout, Duration::from_millis)
}

impl Group {
    fn wrap(b: Backend) -> Self {
        let (rank, world, backend) = (b.rank(), b.world_size(), b.backend());
        let pool = Arc::new(GroupPool::new(&b));
        Group {
            inner: RwLock::new(Some(b)),
            pool,
            channels: Channels::default(),
            last_check: Mutex::new(None),
            rank,
            world,
            backend,
        }
    }

    fn with<T>(&self, f: impl FnOnce(&Backend) -> PyResult<T>) -> PyResult<T> {
        let g = self.inner.read().unwrap_or_else(|p| p.into_inner());
        match g.as_ref() {
            Some(b) => f(b),
            None => Err(to_py(lowcon::Error::GroupFailed(format!("rank {}: the group is closed", self.rank)))),
        }
    }
}

#[pymethods]
impl Group {
    /// Collective: joins the job's group from the environment that `lowcon launch` or
    /// torchrun sets. `backend` is "gpu" or "host"; without `lowcon launch`, rank 0
    /// hosts the store for as long as its group lives.
    #[staticmethod]
    #[pyo3(signature = (backend, name = "default", timeout_ms = None))]
    fn from_env(py: Python<'_>, backend: &str, name: &str, timeout_ms: Option<u64>) -> PyResult<Self> {
        let (timeout, name, gpu) = (timeout_of(timeout_ms), name.to_string(), is_gpu(backend)?);
        join(py, move || {
            if gpu {
                GpuGroup::from_env(GpuGroupOptions { name, timeout, ..Default::default() }).map(Backend::from)
            } else {
                HostGroup::from_env(HostGroupOptions { name, timeout }).map(Backend::from)
            }
        })
    }

    /// Collective: joins a group of `world` ranks as `rank`, meeting through `store`, a
    /// Python store with torch.distributed's methods (e.g. a `PrefixStore` over torch's
    /// default store): no second port. `device`: the CUDA device (GPU backend; default
    /// LOWCON_DEVICE, else LOCAL_RANK, else the rank).
    #[staticmethod]
    #[pyo3(signature = (store, rank, world, backend, name = "default", timeout_ms = None, device = None))]
    #[allow(clippy::too_many_arguments)]
    fn from_store(
        py: Python<'_>,
        store: Py<PyAny>,
        rank: usize,
        world: usize,
        backend: &str,
        name: &str,
        timeout_ms: Option<u64>,
        device: Option<usize>,
    ) -> PyResult<Self> {
        let (timeout, name, gpu) = (timeout_of(timeout_ms), name.to_string(), is_gpu(backend)?);
        let store = pystore::PyStore::new(store);
        join(py, move || {
            if gpu {
                GpuGroup::new(store, rank, world, GpuGroupOptions { name, timeout, device, ..Default::default() })
                    .map(Backend::from)
            } else {
                HostGroup::new(store, rank, world, HostGroupOptions { name, timeout }).map(Backend::from)
            }
        })
    }

    /// This rank.
    #[getter]
    fn rank(&self) -> usize {
        self.rank
    }

    /// Number of ranks.
    #[getter]
    fn world_size(&self) -> usize {
        self.world
    }

    /// "gpu" or "host".
    #[getter]
    fn backend(&self) -> &'static str {
        self.backend
    }

    /// The CUDA device index (None on the host backend).
    #[getter]
    fn device(&self) -> PyResult<Option<usize>> {
        self.with(|b| Ok(b.device_index()))
    }

    /// All-gather into `output` (world x input elements) from `input`. `on_current`: `stream` is torch's current stream (see `collective`).
    /// `arrivals` (from `arrivals()`): record each rank's piece as it lands (NOTE [per-piece arrivals]).
    /// `context` ("alone", "fsdp", "tp") hints the planner what runs beside the call.
    /// `traffic`: a benchmark instrument, the call's copies without its sync (NOTE [honest floor]).
    #[pyo3(signature = (output, input, *, algorithm = "auto", sync = "auto", graph_sync = "auto", ctas = None, pipeline = None, channel = None, allow_staging = true, map_ordinary = None, stream = None, on_current = false, arrivals = None, context = "alone", traffic = false, arrival = "auto"))]
    #[allow(clippy::too_many_arguments)]
    fn all_gather<'py>(
        &self,
        py: Python<'py>,
        output: &Bound<'py, PyAny>,
        input: &Bound<'py, PyAny>,
        algorithm: &str,
        sync: &str,
        graph_sync: &str,
        ctas: Option<u32>,
        pipeline: Option<u32>,
        channel: Option<u32>,
        allow_staging: bool,
        map_ordinary: Option<bool>,
        stream: Option<isize>,
        on_current: bool,
        arrivals: Option<PyRef<'py, PyArrivals>>,
        context: &str,
        traffic: bool,
        arrival: &str,
    ) -> PyResult<()> {
        let mut opts = options(
            self.rank,
            algorithm,
            (sync, graph_sync),
            ctas,
            pipeline,
            channel,
            allow_staging,
            map_ordinary,
            (None, "auto"),
            Hints { context, bf16_exact: false },
        )?;
        opts.traffic = traffic;
        opts.arrival = arrival.parse().map_err(to_py)?;
        let arrivals = arrivals.map(|a| a.inner.clone());
        self.collective(py, output, input, lowcon::Call::AllGather(opts, arrivals.as_deref()), stream, on_current)
    }

    /// Events an all-gather records as each rank's piece lands (GPU backend).
    fn arrivals(&self) -> PyResult<PyArrivals> {
        self.with(|b| {
            let g = b.gpu("arrivals (CUDA events per piece)").map_err(to_py)?;
            Ok(PyArrivals::new(g.arrivals().map_err(to_py)?, g.device().clone()))
        })
    }

    /// Released reduce-scatter (NOTE [release rounds]): `produce(d)` is called for every
    /// destination `d` in the order rank + 1, ..., rank and enqueues, on `stream`, the work
    /// that writes chunk `d` of `input` (pool memory); each chunk goes to its owner once
    /// written. Then `output` receives `op` over every rank's chunk `rank`. GPU backend.
    #[pyo3(signature = (output, input, produce, op = "sum", *, ctas = None, channel = None, stream = None, on_current = false))]
    #[allow(clippy::too_many_arguments)]
    fn reduce_scatter_released<'py>(
        &self,
        py: Python<'py>,
        output: &Bound<'py, PyAny>,
        input: &Bound<'py, PyAny>,
        produce: Py<PyAny>,
        op: &str,
        ctas: Option<u32>,
        channel: Option<u32>,
        stream: Option<isize>,
        on_current: bool,
    ) -> PyResult<()> {
        let op: ReduceOp = op.parse().map_err(to_py)?;
        let hints = Hints { context: "tp", bf16_exact: false };
        let opts = options(
            self.rank,
            "auto",
            ("auto", "auto"),
            ctas,
            None,
            channel,
            false,
            Some(false),
            (None, "auto"),
            hints,
        )?;
        // The producer is Python: its exception is kept here and raised as it is, not as
        // the library's error.
        let raised: Arc<Mutex<Option<PyErr>>> = Arc::new(Mutex::new(None));
        let (rank, kept) = (self.rank, raised.clone());
        let call = move |d: usize| -> lowcon::Result<()> {
            Python::attach(|py| produce.bind(py).call1((d,)).map(|_| ())).map_err(|e| {
                let msg = format!("rank {rank}: the producer of chunk {d} raised: {e}");
                *kept.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                lowcon::Error::InvalidArgument(msg)
            })
        };
        let call = lowcon::Call::Released(op, opts, Box::new(call));
        let done = self.collective(py, output, input, call, stream, on_current);
        match (done, raised.lock().unwrap_or_else(|p| p.into_inner()).take()) {
            (Err(_), Some(e)) => Err(e),
            (r, _) => r,
        }
    }

    /// Reduce-scatter into `output` from `input` (world x output elements), with `op`
    /// ("sum", "avg", "min", "max"). `wire`: "bf16" sends an f32 input's top halves
    /// (NOTE [bf16 wire]); a bf16 input may reduce into an f32 output. `reduce_launch`:
    /// "auto", "pieces" or "once" (NOTE [one launch per call]). `context` and
    /// `bf16_exact` are hints for the planner (NOTE [one planner]). `traffic`: a benchmark
    /// instrument, the call's copies without its sync and reduction (NOTE [honest floor]).
    #[pyo3(signature = (output, input, op = "sum", *, algorithm = "auto", sync = "auto", graph_sync = "auto", ctas = None, pipeline = None, channel = None, allow_staging = true, map_ordinary = None, wire = None, reduce_launch = "auto", stream = None, on_current = false, context = "alone", bf16_exact = false, traffic = false))]
    #[allow(clippy::too_many_arguments)]
    fn reduce_scatter<'py>(
        &self,
        py: Python<'py>,
        output: &Bound<'py, PyAny>,
        input: &Bound<'py, PyAny>,
        op: &str,
        algorithm: &str,
        sync: &str,
        graph_sync: &str,
        ctas: Option<u32>,
        pipeline: Option<u32>,
        channel: Option<u32>,
        allow_staging: bool,
        map_ordinary: Option<bool>,
        wire: Option<&str>,
        reduce_launch: &str,
        stream: Option<isize>,
        on_current: bool,
        context: &str,
        bf16_exact: bool,
        traffic: bool,
    ) -> PyResult<()> {
        let op: ReduceOp = op.parse().map_err(to_py)?;
        let mut opts = options(
            self.rank,
            algorithm,
            (sync, graph_sync),
            ctas,
            pipeline,
            channel,
            allow_staging,
            map_ordinary,
            (wire, reduce_launch),
            Hints { context, bf16_exact },
        )?;
        opts.traffic = traffic;
        self.collective(py, output, input, lowcon::Call::ReduceScatter(op, opts), stream, on_current)
    }

    /// The traffic floor of a collective (`kind` "all-gather" or "reduce-scatter"): the
    /// bytes it moves between GPUs, through the pool, with no sync and no reduction, so
    /// `output` is garbage. A benchmark instrument (GPU backend; the symmetric side, the
    /// all-gather's output or the reduce-scatter's input, from the pool).
    #[pyo3(signature = (output, input, kind, *, stream = None, on_current = false))]
    fn traffic<'py>(
        &self,
        py: Python<'py>,
        output: &Bound<'py, PyAny>,
        input: &Bound<'py, PyAny>,
        kind: &str,
        stream: Option<isize>,
        on_current: bool,
    ) -> PyResult<()> {
        let ag = match kind {
            "all-gather" => true,
            "reduce-scatter" => false,
            k => {
                return Err(invalid(format!(
                    "rank {}: traffic kind {k:?}: expected all-gather or reduce-scatter",
                    self.rank
                )));
            }
        };
        self.collective(py, output, input, lowcon::Call::Traffic(ag), stream, on_current)
    }

    /// Raises the group's failure (a dead or late peer, naming the rank), if any,
    /// without waiting (like NCCL's ncclCommGetAsyncError).
    fn check(&self) -> PyResult<()> {
        self.with(|b| b.check().map_err(to_py))
    }

    /// Waits for the work enqueued on `stream` (GPU backend; 0 or None: the legacy
    /// default stream) or the group's failure. Ctrl-C works while it waits.
    #[pyo3(signature = (stream = None))]
    fn synchronize(&self, py: Python<'_>, stream: Option<isize>) -> PyResult<()> {
        self.with(|b| {
            let raw = stream.unwrap_or(0);
            interruptible(
                py,
                || b.abort(),
                move || {
                    // A GPU group waits for the caller's stream (the host backend has none).
                    let s = b
                        .device()
                        // SAFETY: the caller's live stream of this device, or the legacy one.
                        .map(|d| unsafe { Stream::wrap_borrowed(d, raw as usize as _) })
                        .transpose()?;
                    b.synchronize(s.as_ref())
                },
            )?
            .map_err(to_py)
        })
    }

    /// Collective when the pool grows (every rank allocates in the same order): a
    /// DLPack capsule (`"dltensor_versioned"` with `versioned`) of `shape` elements of `dtype` in the group's symmetric pool,
    /// for use on `stream` (GPU; 0 or None: the legacy default stream). The block returns
    /// to the pool when the consumer's tensor (or the unconsumed capsule) dies.
    #[pyo3(signature = (shape, dtype, stream = None, versioned = false))]
    fn empty(
        &self,
        py: Python<'_>,
        shape: Vec<i64>,
        dtype: &str,
        stream: Option<isize>,
        versioned: bool,
    ) -> PyResult<Py<PyAny>> {
        let dtype: DType = dtype.parse().map_err(to_py)?;
        let count = shape.iter().try_fold(1usize, |acc, &d| usize::try_from(d).ok().and_then(|d| acc.checked_mul(d)));
        let bytes = count
            .and_then(|c| c.checked_mul(dtype.size()))
            .ok_or_else(|| invalid(format!("rank {}: bad shape {shape:?}", self.rank)))?;
        let pool = self.pool.clone();
        let (id, ptr, cuda) = self.with(|b| {
            let cuda = b.device_index().map(|i| i as i32);
            // A free block: taken here, with no helper thread (the common case).
            let key = if cuda.is_some() { stream.unwrap_or(0) as u64 } else { 0 };
            if let Some((id, p)) = py.detach(|| pool.try_alloc(bytes, key)).map_err(to_py)? {
                return Ok((id, p, cuda));
            }
            // Growth: collective, through the store; interruptible.
            let got = interruptible(py, || b.abort(), || pool.alloc(b, bytes, key))?.map(|(id, p)| (id, p, cuda));
            got.map_err(to_py)
        })?;
        pool::export(py, self.pool.clone(), id, ptr, shape, dtype, cuda, versioned)
    }

    /// What the symmetric pool holds on this rank: a dict of bytes and counts.
    fn pool_stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, pyo3::types::PyDict>> {
        let s = self.pool.stats();
        let d = pyo3::types::PyDict::new(py);
        d.set_item("pool_bytes", s.reserved)?;
        d.set_item("in_use_bytes", s.in_use)?;
        d.set_item("peak_in_use_bytes", s.peak_in_use)?;
        d.set_item("segments", s.segments)?;
        d.set_item("live_blocks", s.live_blocks)?;
        d.set_item("allocations", s.allocs)?;
        let ws = self.with(|b| Ok(b.as_gpu().map_or(0, |g| g.workspace_bytes()))).unwrap_or(0);
        d.set_item("workspace_bytes", ws)?;
        let split = self.with(|b| Ok(b.as_gpu().map_or_else(Vec::new, |g| g.workspace_split()))).unwrap_or_default();
        let per = pyo3::types::PyDict::new(py);
        for (ch, bytes) in split {
            per.set_item(ch, bytes)?;
        }
        d.set_item("workspace_channels", per)?;
        let mapped = self.with(|b| Ok(b.as_gpu().map_or(0, |g| g.mapped_allocations()))).unwrap_or(0);
        d.set_item("mapped_allocations", mapped)?;
        Ok(d)
    }

    /// What the planner would run for a call (NOTE [one planner]), as a dict: `kind` is
    /// "all-gather" or "reduce-scatter", `count` the elements per rank (the all-gather's
    /// input, the reduce-scatter's output), `symmetric` whether the memory peers read (the
    /// all-gather's output, the reduce-scatter's input) is the pool's, `captured` whether
    /// the call would be captured into a CUDA graph. The options are the collectives'.
    #[pyo3(signature = (kind, count, dtype, *, out_dtype = None, op = "sum", symmetric = false, captured = false, algorithm = "auto", sync = "auto", graph_sync = "auto", ctas = None, pipeline = None, map_ordinary = None, wire = None, reduce_launch = "auto", context = "alone", bf16_exact = false, arrival = "auto"))]
    #[allow(clippy::too_many_arguments)]
    fn plan<'py>(
        &self,
        py: Python<'py>,
        kind: &str,
        count: usize,
        dtype: &str,
        out_dtype: Option<&str>,
        op: &str,
        symmetric: bool,
        captured: bool,
        algorithm: &str,
        sync: &str,
        graph_sync: &str,
        ctas: Option<u32>,
        pipeline: Option<u32>,
        map_ordinary: Option<bool>,
        wire: Option<&str>,
        reduce_launch: &str,
        context: &str,
        bf16_exact: bool,
        arrival: &str,
    ) -> PyResult<Bound<'py, pyo3::types::PyDict>> {
        let dt: DType = dtype.parse().map_err(to_py)?;
        let bytes = count
            .checked_mul(dt.size())
            .ok_or_else(|| invalid(format!("rank {}: plan of {count} {dt} elements: the size overflows", self.rank)))?;
        let hints = Hints { context, bf16_exact };
        let fields = match kind {
            "all-gather" => {
                let o = options::<lowcon::AllGatherAlgorithm>(
                    self.rank,
                    algorithm,
                    (sync, graph_sync),
                    ctas,
                    pipeline,
                    Some(0),
                    true,
                    map_ordinary,
                    (None, "auto"),
                    hints,
                )?;
                let o = lowcon::AllGatherOptions { arrival: arrival.parse().map_err(to_py)?, ..o };
                let call = lowcon::plan::AgCall { shard: bytes, dtype: dt, output_symmetric: symmetric, captured };
                self.with(|b| Ok(b.planner().all_gather(&call, &o).fields()))?
            }
            "reduce-scatter" => {
                let o = options::<lowcon::ReduceScatterAlgorithm>(
                    self.rank,
                    algorithm,
                    (sync, graph_sync),
                    ctas,
                    pipeline,
                    Some(0),
                    true,
                    map_ordinary,
                    (wire, reduce_launch),
                    hints,
                )?;
                let out: DType = out_dtype.unwrap_or(dtype).parse().map_err(to_py)?;
                let call = lowcon::plan::RsCall {
                    chunk: bytes,
                    input: dt,
                    output: out,
                    op: op.parse().map_err(to_py)?,
                    input_symmetric: symmetric,
                    captured,
                };
                self.with(|b| Ok(b.planner().reduce_scatter(&call, &o).map_err(to_py)?.fields()))?
            }
            k => {
                return Err(invalid(format!(
                    "rank {}: plan kind {k:?}: expected all-gather or reduce-scatter",
                    self.rank
                )));
            }
        };
        let d = pyo3::types::PyDict::new(py);
        for (k, v) in fields {
            match k {
                "ctas" | "pieces" | "tma_tile" | "tma_stages" => d.set_item(k, v.parse::<u32>().unwrap_or(0))?,
                _ if v == "true" || v == "false" => d.set_item(k, v == "true")?,
                "wire" if v == "none" => d.set_item(k, py.None())?,
                _ => d.set_item(k, v)?,
            }
        }
        let (table, how) = self.with(|b| {
            let (t, how) = b.planner().table();
            Ok((t.name.clone(), how.to_string()))
        })?;
        d.set_item("table", table)?;
        d.set_item("table_how", how)?;
        Ok(d)
    }

    /// The bytes this rank's calls moved to and from peers (NOTE [bf16 wire]): a dict.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, pyo3::types::PyDict>> {
        let s = self.with(|b| py.detach(|| b.stats()).map_err(to_py))?;
        let d = pyo3::types::PyDict::new(py);
        d.set_item("all_gather_bytes", s.all_gather_bytes)?;
        d.set_item("reduce_scatter_bytes", s.reduce_scatter_bytes)?;
        d.set_item("wire_bytes", s.wire_bytes)?;
        d.set_item("fallback_bytes", s.fallback_bytes)?;
        d.set_item("wire_pieces", s.wire_pieces)?;
        d.set_item("fallback_pieces", s.fallback_pieces)?;
        d.set_item("total_bytes", s.total_bytes())?;
        d.set_item("host_rendezvous", s.host_rendezvous)?;
        d.set_item("predicted_calls", s.predicted_calls)?;
        d.set_item("mispredicted_calls", s.mispredicted_calls)?;
        d.set_item("host_calls", s.host_calls)?;
        d.set_item("host_call_ns", s.host_call_ns)?;
        d.set_item("host_rendezvous_ns", s.host_rendezvous_ns)?;
        d.set_item("mailbox_waits", s.mailbox_waits)?;
        d.set_item("mailbox_wait_ns", s.mailbox_wait_ns)?;
        d.set_item("wire_replays", s.wire_replays)?;
        d.set_item("wire_captures", s.wire_captures)?;
        Ok(d)
    }

    /// Where this rank's host time in collective calls went (NOTE [host time]): a tuple
    /// (calls, their nanoseconds from entry to return, the nanoseconds of host
    /// rendezvous, of those the nanoseconds of the address mailbox's post waits), read
    /// without a device call (cheap enough to read around every call).
    fn host_clock(&self) -> PyResult<(u64, u64, u64, u64)> {
        self.with(|b| Ok(b.host_clock()))
    }

    /// Whether eager all-gathers batch their peer copies (GPU; nothing on the host
    /// backend). NOTE [batched copies].
    fn set_copy_batching(&self, on: bool) -> PyResult<()> {
        self.with(|b| {
            if let Some(g) = b.as_gpu() {
                g.set_copy_batching(on);
            }
            Ok(())
        })
    }

    /// Whether eager bf16-wire reduce-scatters are launched as one graph from their
    /// shape's second call on (GPU; nothing on the host backend). Every rank must make
    /// the same choice between the same calls. NOTE [wire replays].
    fn set_wire_replays(&self, on: bool) -> PyResult<()> {
        self.with(|b| {
            if let Some(g) = b.as_gpu() {
                g.set_wire_replays(on);
            }
            Ok(())
        })
    }

    /// Whether `map_ordinary` all-gathers predict the peers' addresses (GPU; nothing on
    /// the host backend). NOTE [addresses predicted].
    fn set_address_prediction(&self, on: bool) -> PyResult<()> {
        self.with(|b| {
            if let Some(g) = b.as_gpu() {
                g.set_address_prediction(on);
            }
            Ok(())
        })
    }

    /// Closes the peer allocations `map_ordinary` calls opened that no call in flight
    /// uses (GPU; 0 on the host backend). Returns how many.
    fn release_mappings(&self) -> PyResult<usize> {
        self.with(|b| b.as_gpu().map_or(Ok(0), |g| g.release_mappings().map_err(to_py)))
    }

    /// Collective: sets up channel `channel`'s workspace (at least `bytes`) and LL
    /// buffer now (GPU; nothing on the host backend). Needed before capturing calls on
    /// the channel into a CUDA graph: a captured call cannot grow them.
    fn reserve_workspace(&self, py: Python<'_>, channel: u32, bytes: usize) -> PyResult<()> {
        self.with(|b| py.detach(|| b.reserve_workspace(channel, bytes)).map_err(to_py))
    }

    /// Registers the work enqueued on `stream` (0 or None: the legacy default stream) with
    /// the group's watchdog: call it after replaying a CUDA graph that holds lowcon calls,
    /// so a dead or late peer is named while the replay waits for it (GPU only).
    #[pyo3(signature = (stream = None))]
    fn track_replay(&self, stream: Option<isize>) -> PyResult<()> {
        self.with(|b| {
            let g = b.gpu("track_replay (the host backend has no CUDA graphs)").map_err(to_py)?;
            // SAFETY: the caller's live stream of this device, or the legacy one.
            let s = unsafe { Stream::wrap_borrowed(g.device(), stream.unwrap_or(0) as usize as _) }.map_err(to_py)?;
            g.track_replay(&s).map_err(to_py)
        })
    }

    /// A channel of its own for `name` (claimed in order of first use, among the
    /// streams' channels: every rank must claim its names and use its streams in the same
    /// order). The same name gives the same channel.
    fn channel(&self, name: &str) -> PyResult<u32> {
        self.channels.named(self.rank, name)
    }

    /// Collective (every rank, with no pool allocation in flight): waits for this GPU's
    /// work, then gives back the pool's segments that hold no live block on any rank.
    /// Returns the bytes released on this rank. Ctrl-C works while it waits.
    fn pool_trim(&self, py: Python<'_>) -> PyResult<usize> {
        let pool = self.pool.clone();
        self.with(|b| interruptible(py, || b.abort(), || pool.trim(b))?.map_err(to_py))
    }

    /// Collective among the survivors of a failed group: a new group of the ranks still
    /// alive, renumbered in order (`GpuGroup::shrink`: a rank too late is left out and
    /// told so). This group is failed: its calls in flight are discarded; close it.
    fn shrink(&self, py: Python<'_>) -> PyResult<Group> {
        let b = self.with(|b| py.detach(|| b.shrink()).map_err(to_py))?;
        Ok(Group::wrap(b))
    }

    /// Fails the group now: waits in flight give up, every later call raises.
    fn abort(&self) -> PyResult<()> {
        self.with(|b| {
            b.abort();
            Ok(())
        })
    }

    /// Releases the group (its memory, its watchdog). Later calls raise.
    fn close(&self, py: Python<'_>) {
        // Without the GIL (another thread's call holds the read lock with the GIL released
        // and needs it back to finish), and polling rather than queueing as a writer: a
        // queued writer blocks new readers, and a reader holding the GIL would then wait
        // for this writer while this writer waits for a call that waits for that GIL.
        py.detach(|| {
            let b = loop {
                match self.inner.try_write() {
                    Ok(mut g) => break g.take(),
                    Err(std::sync::TryLockError::Poisoned(p)) => break p.into_inner().take(),
                    Err(std::sync::TryLockError::WouldBlock) => std::thread::sleep(Duration::from_millis(1)),
                }
            };
            drop(b);
        });
    }
}

/// This thread's enqueues so far (NOTE [enqueue clock] in `lowcon::cuda::enqueued`):
/// kind ("launch", "memop", "copy", "event") to (calls, nanoseconds). Read it around a
/// call to split the library's host time by what it handed the driver.
#[pyfunction]
fn enqueue_clock() -> std::collections::HashMap<&'static str, (u64, u64)> {
    let t = lowcon::cuda::enqueued::totals();
    lowcon::cuda::enqueued::Enqueue::ALL.iter().map(|k| (k.name(), t[*k as usize])).collect()
}

/// This thread's host phases so far (NOTE [host phases] in `lowcon::cuda::enqueued`):
/// phase ("binding", "checks", "plan", "exchange", "prepare", "verify", "finish") to
/// (calls, nanoseconds), each
/// less the enqueues inside it. With `enqueue_clock()` around a call, what is left of
/// its host time is the rest of the library and the binding.
#[pyfunction]
fn host_phases() -> std::collections::HashMap<&'static str, (u64, u64)> {
    let t = lowcon::cuda::enqueued::phase_totals();
    lowcon::cuda::enqueued::Phase::ALL.iter().map(|k| (k.name(), t[*k as usize])).collect()
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Group>()?;
    m.add_class::<PyArrivals>()?;
    m.add_function(wrap_pyfunction!(placement::device_count, m)?)?;
    m.add_function(wrap_pyfunction!(placement::device_index, m)?)?;
    m.add_function(wrap_pyfunction!(placement::share_gpu, m)?)?;
    m.add_function(wrap_pyfunction!(enqueue_clock, m)?)?;
    m.add_function(wrap_pyfunction!(host_phases, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
