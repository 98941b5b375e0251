//! The runner the checks run on: lowcon's either-backend group (NOTE [either backend] in
//! `lowcon::group`) and, for a GPU group, the stream its collectives are enqueued on.
//! A check written against [`Runner`] runs on both backends: its buffers ([`Mem`]) are
//! the group's symmetric memory or ordinary memory of the group's kind, and its calls go
//! through `lowcon::Group` with [`CollBufs`]. GPU-only checks (graphs, mapped memory,
//! streams) take the GPU view, [`Runner::gpu`].

use lowcon::{Buffer, CollBufs, CollStats};

use super::typed::Typed;
use super::*;

/// A group on either backend, with the stream its GPU collectives run on.
pub struct Runner {
    /// The group.
    pub g: lowcon::Group,
    /// The stream of a GPU group (high priority); `None` on the host backend.
    stream: Option<Stream>,
}

/// The GPU view of a [`Runner`]: the GPU group and its stream.
pub struct GpuRunner<'a> {
    /// The group.
    pub g: &'a GpuGroup,
    /// The stream the collectives run on.
    pub stream: &'a Stream,
}

/// Joins the launcher's world on the host backend, with `timeout` if given.
pub fn host_group(timeout: Option<Duration>) -> Result<HostGroup, String> {
    let mut opts = HostGroupOptions::default();
    if let Some(t) = timeout {
        opts.timeout = t;
    }
    HostGroup::from_env(opts).map_err(e)
}

impl Runner {
    /// Wraps a group; a GPU group gets a high-priority stream of its device.
    pub fn new(g: impl Into<lowcon::Group>) -> Result<Self, String> {
        let g = g.into();
        let stream = g.device().map(|d| d.stream(StreamPriority::High)).transpose().map_err(e)?;
        Ok(Self { g, stream })
    }

    /// Joins the launcher's world on GPUs (`gpu`) or on the host backend, with
    /// `timeout` if given.
    pub fn from_env(gpu: bool, timeout: Option<Duration>) -> Result<Self, String> {
        if !gpu {
            return Self::new(host_group(timeout)?);
        }
        let mut opts = GpuGroupOptions::default();
        if let Some(t) = timeout {
            opts.timeout = t;
        }
        Self::new(GpuGroup::from_env(opts).map_err(e)?)
    }

    /// The GPU view, for `what`, which only GPU groups run: a host group is refused
    /// naming it.
    pub fn gpu(&self, what: &str) -> Result<GpuRunner<'_>, String> {
        let g = self.g.gpu(what).map_err(e)?;
        let stream = self.stream.as_ref().ok_or_else(|| format!("rank {}: {what}: no stream", g.rank()))?;
        Ok(GpuRunner { g, stream })
    }

    /// The stream of a GPU group.
    pub fn stream(&self) -> Option<&Stream> {
        self.stream.as_ref()
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.g.rank()
    }

    /// Ranks.
    pub fn world(&self) -> usize {
        self.g.world_size()
    }

    /// A seed drawn by rank 0 and shared (collective).
    pub fn shared_seed(&self, name: &str) -> Result<u64, String> {
        seed_of_rank0(|mine| self.g.all_gather_bytes(name, mine))
    }

    /// The group's counters.
    pub fn stats(&self) -> Result<CollStats, String> {
        self.g.stats().map_err(e)
    }

    /// A buffer of `bytes` for one case: the group's symmetric memory, or ordinary
    /// memory of the group's kind (device memory on a GPU group, host memory else).
    pub(crate) fn mem(&self, symmetric: bool, bytes: usize) -> Result<Mem, String> {
        if symmetric {
            return self.g.alloc(bytes).map(Mem::Symmetric).map_err(e);
        }
        Ok(match &self.stream {
            Some(s) => Mem::Device(s.alloc_zeros::<u8>(bytes).map_err(e)?),
            None => Mem::Host(vec![0u8; bytes]),
        })
    }

    /// Whether a symmetric case's output is symmetric too: on GPUs, where the algorithms
    /// that push write into peers' outputs; not on the host backend, whose calls write
    /// their output locally, so its symmetric cases cover a symmetric input beside an
    /// ordinary output.
    fn symmetric_output(&self, symmetric: bool) -> bool {
        symmetric && self.stream.is_some()
    }

    /// Waits for the stream's copies and fills (GPU); nothing on the host backend.
    fn settle(&self) -> Result<(), String> {
        self.stream.as_ref().map_or(Ok(()), |s| s.synchronize().map_err(e))
    }

    /// Runs `call` once on fresh buffers: this rank's `input` bytes at byte `ioff` of a
    /// new input, and a poisoned output of `out_len` bytes at byte `ooff` (symmetric as
    /// `symmetric` and [`Self::symmetric_output`] say), as `counts` elements of `dtypes`:
    /// device buffers on the runner's stream, or host memory. Returns the output bytes.
    #[allow(clippy::too_many_arguments)]
    fn fresh(
        &self,
        symmetric: bool,
        (ioff, input): (usize, &[u8]),
        (ooff, out_len): (usize, usize),
        counts: (usize, usize),
        dtypes: (DType, DType),
        call: impl FnOnce(CollBufs<'_>) -> lowcon::Result<()>,
    ) -> Result<Vec<u8>, String> {
        let mut inp = self.mem(symmetric, ioff + input.len() + 16)?;
        inp.write(self.stream(), ioff, input)?;
        let mut out = self.mem(self.symmetric_output(symmetric), ooff + out_len + 16)?;
        out.fill(self.stream(), 0, ooff + out_len + 16, 0xFF)?;
        self.settle()?;
        let bufs = match &self.stream {
            Some(stream) => CollBufs::Gpu {
                input: inp.buf(ioff, counts.0, dtypes.0)?,
                output: out.buf(ooff, counts.1, dtypes.1)?,
                stream,
            },
            None => CollBufs::Host {
                input: inp.host_input(ioff, counts.0 * dtypes.0.size())?,
                output: out.host_out(ooff, out_len)?,
                dtypes,
            },
        };
        call(bufs).map_err(e)?;
        self.g.synchronize(self.stream()).map_err(e)?;
        out.read(self.stream(), ooff, out_len)
    }

    /// Runs `case` on `bufs` through the either-backend group.
    fn coll(&self, case: &Case, bufs: CollBufs<'_>) -> lowcon::Result<()> {
        match case.coll {
            Coll::AllGather(a) => self.g.all_gather(bufs, &case.ag_opts(a)),
            Coll::ReduceScatter(a, op) => self.g.reduce_scatter(bufs, op, &case.rs_opts(a)),
        }
    }

    /// Runs `case` with this rank's `input` bytes into a poisoned output (both shifted by
    /// `case.misalign` elements); returns the output bytes.
    pub fn run(&self, case: &Case, input: &[u8]) -> Result<Vec<u8>, String> {
        let world = self.world();
        let s = case.dtype.size();
        let off = case.misalign * s;
        let counts = (case.in_count(world), case.out_count(world));
        let out_len = counts.1 * s;
        self.fresh(case.symmetric, (off, input), (off, out_len), counts, (case.dtype, case.dtype), |bufs| {
            self.coll(case, bufs)
        })
    }

    /// Runs `case` in place: an all-gather's input is this rank's slot of the output
    /// (the other slots poisoned), a reduce-scatter's output this rank's chunk of the
    /// input. Returns the output. The buffer is symmetric when `case.symmetric` says so,
    /// and always on the host backend, which would stage (copy) an ordinary input first.
    pub fn run_in_place(&self, case: &Case, input: &[u8]) -> Result<Vec<u8>, String> {
        let (rank, world) = (self.rank(), self.world());
        let (n, count, d) = (input.len(), case.count, case.dtype);
        let symmetric = case.symmetric || self.stream.is_none();
        // (bytes, input offset and count, output offset and count)
        let (total, (ioff, ic), (ooff, oc)) = match case.coll {
            Coll::ReduceScatter(..) => (n, (0, count * world), (rank * (n / world), count)),
            Coll::AllGather(_) => (n * world, (rank * n, count), (0, count * world)),
        };
        let mut buf = self.mem(symmetric, total)?;
        if let Coll::AllGather(_) = case.coll {
            buf.fill(self.stream(), 0, total, 0xFF)?;
        }
        buf.write(self.stream(), ioff, input)?;
        self.settle()?;
        let bufs = match &self.stream {
            Some(stream) => CollBufs::Gpu { input: buf.buf(ioff, ic, d)?, output: buf.buf(ooff, oc, d)?, stream },
            None => {
                let (ptr, len) = (buf.mapped_ptr(ooff, oc * d.size())?, oc * d.size());
                // SAFETY: this rank's mapping of the symmetric buffer, holding the range
                // (checked); during the call only the library touches it, through this
                // slice and its own raw copies (the input is read through the mapping,
                // not through a slice).
                let output = unsafe { std::slice::from_raw_parts_mut(ptr, len) };
                CollBufs::Host { input: buf.host_input(ioff, ic * d.size())?, output, dtypes: (d, d) }
            }
        };
        self.coll(case, bufs).map_err(e)?;
        self.g.synchronize(self.stream()).map_err(e)?;
        // Read as soon as this rank's call is done (a call that ended before the peers'
        // writes landed must fail here), then let the peers, which may still read this
        // rank's buffer, pass a barrier before it is dropped.
        let got = buf.read(self.stream(), ooff, oc * d.size())?;
        self.g.barrier(0, self.stream(), case.sync).map_err(e)?;
        self.g.synchronize(self.stream()).map_err(e)?;
        Ok(got)
    }

    /// Runs the typed reduce-scatter `c` with this rank's `input` bytes into a poisoned
    /// output; returns it.
    pub fn run_typed(&self, c: &Typed, input: &[u8]) -> Result<Vec<u8>, String> {
        let (io, oo) = (c.misalign * c.input.size(), c.misalign * c.output.size());
        let counts = (c.count * self.world(), c.count);
        let out_len = c.count * c.output.size();
        self.fresh(c.symmetric, (io, input), (oo, out_len), counts, (c.input, c.output), |bufs| {
            self.g.reduce_scatter(bufs, c.op, &c.opts())
        })
    }
}

/// One buffer of a case: the group's symmetric memory (either backend), or ordinary
/// memory: device memory (cudarc) or host memory.
pub enum Mem {
    /// The group's symmetric memory.
    Symmetric(Buffer),
    /// Ordinary device memory.
    Device(cudarc::driver::CudaSlice<u8>),
    /// Ordinary host memory.
    Host(Vec<u8>),
}

impl Mem {
    /// Device memory for a GPU check: symmetric, or ordinary memory from `stream`.
    pub(crate) fn new(g: &GpuGroup, stream: &Stream, symmetric: bool, bytes: usize) -> Result<Self, String> {
        Ok(if symmetric {
            Mem::Symmetric(Buffer::Gpu(g.alloc(bytes).map_err(e)?))
        } else {
            Mem::Device(stream.alloc_zeros::<u8>(bytes).map_err(e)?)
        })
    }

    /// This rank's address of the buffer (a device pointer or a host one).
    pub(super) fn ptr(&self) -> u64 {
        match self {
            Mem::Symmetric(b) => b.base_addr() as u64,
            Mem::Device(s) => lowcon::cuda::device_ptr(s),
            Mem::Host(v) => v.as_ptr() as u64,
        }
    }

    fn len(&self) -> usize {
        match self {
            Mem::Symmetric(b) => b.len(),
            Mem::Device(s) => s.len(),
            Mem::Host(v) => v.len(),
        }
    }

    /// Whether the buffer is device memory (copied with the stream).
    fn on_device(&self) -> bool {
        match self {
            Mem::Symmetric(b) => b.as_gpu().is_some(),
            Mem::Device(_) => true,
            Mem::Host(_) => false,
        }
    }

    fn check(&self, off: usize, len: usize) -> Result<(), String> {
        match off.checked_add(len) {
            Some(end) if end <= self.len() => Ok(()),
            _ => Err(format!("{len} bytes at {off} outside a buffer of {}", self.len())),
        }
    }

    /// The stream device memory is copied with.
    fn device_stream<'s>(&self, stream: Option<&'s Stream>) -> Result<&'s Stream, String> {
        stream.ok_or_else(|| "device memory without a stream to copy it with".to_string())
    }

    /// Copies `data` to `off` (synchronously).
    pub(crate) fn write(&mut self, stream: Option<&Stream>, off: usize, data: &[u8]) -> Result<(), String> {
        self.check(off, data.len())?;
        let at = self.ptr() + off as u64;
        if self.on_device() {
            let s = self.device_stream(stream)?;
            // SAFETY: device memory of this rank holding `off + data.len()` bytes (checked).
            return unsafe { s.copy_from_host(at, data) }.map_err(e);
        }
        match self {
            Mem::Host(v) => v[off..off + data.len()].copy_from_slice(data),
            // SAFETY: this rank's mapping of a host symmetric buffer (not Rust-owned
            // memory), holding the range (checked), written by no one else before the
            // collective.
            _ => unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), at as *mut u8, data.len()) },
        }
        Ok(())
    }

    /// Sets `len` bytes from `off` to `byte` (on the stream for device memory: ordered
    /// before the collectives enqueued after it).
    pub(crate) fn fill(&mut self, stream: Option<&Stream>, off: usize, len: usize, byte: u8) -> Result<(), String> {
        self.check(off, len)?;
        let at = self.ptr() + off as u64;
        if self.on_device() {
            let s = self.device_stream(stream)?;
            // SAFETY: device memory of this rank holding the range (checked).
            return unsafe { s.fill(at, byte, len) }.map_err(e);
        }
        match self {
            Mem::Host(v) => v[off..off + len].fill(byte),
            // SAFETY: as in `write`.
            _ => unsafe { std::ptr::write_bytes(at as *mut u8, byte, len) },
        }
        Ok(())
    }

    /// The `len` bytes at `off` (synchronously).
    pub(crate) fn read(&self, stream: Option<&Stream>, off: usize, len: usize) -> Result<Vec<u8>, String> {
        self.check(off, len)?;
        let at = self.ptr() + off as u64;
        let mut v = vec![0u8; len];
        if self.on_device() {
            let s = self.device_stream(stream)?;
            // SAFETY: device memory of this rank holding the range (checked).
            unsafe { s.copy_to_host(&mut v, at) }.map_err(e)?;
        } else if let Mem::Host(h) = self {
            v.copy_from_slice(&h[off..off + len]);
        } else {
            // SAFETY: this rank's mapping of a host symmetric buffer holding the range
            // (checked), no call in flight.
            unsafe { std::ptr::copy_nonoverlapping(at as *const u8, v.as_mut_ptr(), len) };
        }
        Ok(v)
    }

    /// A device buffer of `count` `dtype`s at byte `off`.
    pub(crate) fn buf(&self, off: usize, count: usize, dtype: DType) -> Result<DeviceBuf<'_>, String> {
        match self {
            Mem::Symmetric(b) => match b.as_gpu() {
                Some(s) => DeviceBuf::symmetric(s, off, count, dtype).map_err(e),
                None => Err("host memory where a device buffer is needed".into()),
            },
            Mem::Device(s) => {
                self.check(off, count * dtype.size())?;
                // SAFETY: `off + count * size` lies inside the allocation (checked), which
                // outlives the collective (synchronised before it is dropped).
                Ok(unsafe { DeviceBuf::from_raw(lowcon::cuda::device_ptr(s) + off as u64, count, dtype) })
            }
            Mem::Host(_) => Err("host memory where a device buffer is needed".into()),
        }
    }

    /// A host call's input: `len` bytes at `off`.
    fn host_input(&self, off: usize, len: usize) -> Result<HostInput<'_>, String> {
        self.check(off, len)?;
        match self {
            Mem::Symmetric(b) => match b.as_host() {
                Some(buf) => Ok(HostInput::Symmetric { buf, offset: off, len }),
                None => Err("device memory where host memory is needed".into()),
            },
            Mem::Host(v) => Ok(HostInput::Plain(&v[off..off + len])),
            Mem::Device(_) => Err("device memory where host memory is needed".into()),
        }
    }

    /// A host call's output: `len` bytes at `off`.
    fn host_out(&mut self, off: usize, len: usize) -> Result<&mut [u8], String> {
        self.check(off, len)?;
        match self {
            Mem::Host(v) => Ok(&mut v[off..off + len]),
            // SAFETY: this rank's mapping of a host symmetric buffer holding the range
            // (`mapped_ptr` checks both), borrowed mutably here, so nothing else in this
            // process touches it while the slice lives.
            Mem::Symmetric(_) => Ok(unsafe { std::slice::from_raw_parts_mut(self.mapped_ptr(off, len)?, len) }),
            Mem::Device(_) => Err("device memory where host memory is needed".into()),
        }
    }

    /// The address of `len` bytes at `off` of this rank's mapping of a host symmetric
    /// buffer (for an output the library reads through its own raw copies too).
    fn mapped_ptr(&self, off: usize, len: usize) -> Result<*mut u8, String> {
        self.check(off, len)?;
        match self {
            Mem::Symmetric(b) if b.as_host().is_some() => Ok((b.base_addr() + off) as *mut u8),
            _ => Err("host memory of a symmetric buffer is needed here".into()),
        }
    }
}

impl GpuRunner<'_> {
    /// A seed drawn by rank 0 and shared (collective).
    pub fn shared_seed(&self, name: &str) -> Result<u64, String> {
        seed_of_rank0(|mine| self.g.all_gather_bytes(name, mine))
    }

    /// Uploads `input` and poisons the output buffer for `case` (synchronously).
    pub(crate) fn prepare(&self, case: &Case, input: &[u8]) -> Result<(Mem, Mem), String> {
        let s = case.dtype.size();
        let off = case.misalign * s;
        let out_len = case.out_count(self.g.world_size()) * s;
        let mut inp = Mem::new(self.g, self.stream, case.symmetric, off + input.len() + 16)?;
        let mut out = Mem::new(self.g, self.stream, case.symmetric, off + out_len + 16)?;
        inp.write(Some(self.stream), off, input)?;
        out.fill(Some(self.stream), 0, off + out_len + 16, 0xFF)?;
        self.stream.synchronize().map_err(e)?;
        Ok((inp, out))
    }

    /// Enqueues `case` on `stream` over prepared buffers.
    pub(crate) fn enqueue(&self, case: &Case, stream: &Stream, inp: &Mem, out: &Mem) -> Result<(), String> {
        let world = self.g.world_size();
        let off = case.misalign * case.dtype.size();
        let ib = inp.buf(off, case.in_count(world), case.dtype)?;
        let ob = out.buf(off, case.out_count(world), case.dtype)?;
        match case.coll {
            Coll::AllGather(a) => self.g.all_gather(ib, ob, stream, &case.ag_opts(a)),
            Coll::ReduceScatter(a, op) => self.g.reduce_scatter(ib, ob, op, stream, &case.rs_opts(a)),
        }
        .map_err(e)
    }
}
