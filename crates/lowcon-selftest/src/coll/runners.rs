//! The two backends the checks run on: the host group (shared memory) and one GPU per rank.

use super::*;

/// The host backend.
pub struct HostRunner {
    /// The group.
    pub g: HostGroup,
}

impl HostRunner {
    /// Joins the launcher's world.
    pub fn from_env(timeout: Option<Duration>) -> Result<Self, String> {
        let mut opts = HostGroupOptions::default();
        if let Some(t) = timeout {
            opts.timeout = t;
        }
        Ok(Self { g: HostGroup::from_env(opts).map_err(e)? })
    }
}

impl Runner for HostRunner {
    fn rank(&self) -> usize {
        self.g.rank()
    }
    fn world(&self) -> usize {
        self.g.world_size()
    }
    fn shared_seed(&self, name: &str) -> Result<u64, String> {
        seed_of_rank0(|mine| self.g.all_gather_bytes(name, mine))
    }
    fn run(&mut self, case: &Case, input: &[u8]) -> Result<Vec<u8>, String> {
        let world = self.world();
        let s = case.dtype.size();
        let off = case.misalign * s;
        let out_len = case.out_count(world) * s;
        let inp = HostIn::new(&self.g, case.symmetric, off, input)?;
        let mut out = vec![0xFFu8; off + out_len];
        host_call(&self.g, case, inp.input(), &mut out[off..]).map_err(e)?;
        Ok(out.split_off(off))
    }
    fn run_in_place(&mut self, case: &Case, input: &[u8]) -> Result<Vec<u8>, String> {
        let (rank, world) = (self.rank(), self.world());
        if let Coll::ReduceScatter(..) = case.coll {
            // The output is this rank's chunk of the (symmetric) input.
            let chunk = input.len() / world;
            let sym = self.g.alloc(input.len()).map_err(e)?;
            sym.write(rank, 0, input).map_err(e)?;
            let inp = HostInput::Symmetric { buf: &sym, offset: 0, len: input.len() };
            // SAFETY: this rank's live mapping of `sym`, chunk `rank`; during the call only
            // the library touches it, through this slice and its own raw copies.
            let out = unsafe { std::slice::from_raw_parts_mut(sym.local_ptr().add(rank * chunk), chunk) };
            host_call(&self.g, case, inp, out).map_err(e)?;
            let mut got = vec![0u8; chunk];
            sym.read(rank, rank * chunk, &mut got).map_err(e)?;
            self.g.barrier(0).map_err(e)?;
            return Ok(got);
        }
        let n = input.len();
        let sym = self.g.alloc(n * world).map_err(e)?;
        sym.write(rank, 0, &vec![0xFFu8; n * world]).map_err(e)?;
        sym.write(rank, rank * n, input).map_err(e)?;
        let inp = HostInput::Symmetric { buf: &sym, offset: rank * n, len: n };
        // SAFETY: the slice is this rank's live mapping of `sym` (n * world bytes); during
        // the call only the library touches it, through this slice and its own raw copies.
        let out = unsafe { std::slice::from_raw_parts_mut(sym.local_ptr(), n * world) };
        host_call(&self.g, case, inp, out).map_err(e)?;
        let mut got = vec![0u8; n * world];
        sym.read(rank, 0, &mut got).map_err(e)?;
        // Peers may still read this rank's slot until they pass the call's last barrier.
        self.g.barrier(0).map_err(e)?;
        Ok(got)
    }
}

/// A host-backend case's input: in a symmetric buffer or ordinary memory, at `off` bytes
/// (a misaligned sub-slice when `off` is not a multiple of the element size).
pub(crate) enum HostIn {
    Symmetric(lowcon::HostBuffer, usize, usize),
    Plain(Vec<u8>, usize),
}

impl HostIn {
    pub(crate) fn new(g: &HostGroup, symmetric: bool, off: usize, input: &[u8]) -> Result<Self, String> {
        Ok(if symmetric {
            let sym = g.alloc(off + input.len() + 1).map_err(e)?;
            sym.write(g.rank(), off, input).map_err(e)?;
            HostIn::Symmetric(sym, off, input.len())
        } else {
            let mut plain = vec![0u8; off + input.len()];
            plain[off..].copy_from_slice(input);
            HostIn::Plain(plain, off)
        })
    }

    pub(crate) fn input(&self) -> HostInput<'_> {
        match self {
            HostIn::Symmetric(buf, offset, len) => HostInput::Symmetric { buf, offset: *offset, len: *len },
            HostIn::Plain(v, off) => HostInput::Plain(&v[*off..]),
        }
    }
}

/// The GPU backend: one GPU per rank.
pub struct GpuRunner {
    /// The group.
    pub g: GpuGroup,
    /// The stream the collectives run on.
    pub stream: Stream,
}

impl GpuRunner {
    /// Joins the launcher's world.
    pub fn from_env(timeout: Option<Duration>) -> Result<Self, String> {
        let mut opts = GpuGroupOptions::default();
        if let Some(t) = timeout {
            opts.timeout = t;
        }
        let g = GpuGroup::from_env(opts).map_err(e)?;
        let stream = g.device().stream(StreamPriority::High).map_err(e)?;
        Ok(Self { g, stream })
    }
}

/// Device memory for one GPU case: plain (cudarc) or symmetric.
pub enum GpuMem {
    Plain(cudarc::driver::CudaSlice<u8>),
    Symmetric(lowcon::SymmetricBuffer),
}

impl GpuMem {
    pub(super) fn new(g: &GpuGroup, stream: &Stream, symmetric: bool, bytes: usize) -> Result<Self, String> {
        Ok(if symmetric {
            GpuMem::Symmetric(g.alloc(bytes).map_err(e)?)
        } else {
            GpuMem::Plain(stream.alloc_zeros::<u8>(bytes).map_err(e)?)
        })
    }
    pub(super) fn ptr(&self) -> u64 {
        match self {
            GpuMem::Plain(s) => lowcon::cuda::device_ptr(s),
            GpuMem::Symmetric(b) => b.local_ptr(),
        }
    }
    pub(crate) fn buf(&self, off: usize, count: usize, dtype: DType) -> Result<DeviceBuf<'_>, String> {
        match self {
            GpuMem::Plain(s) => {
                // SAFETY: `off + count * size` lies inside the allocation (callers size
                // it), which outlives the collective (synchronised before it is dropped).
                let b = unsafe { DeviceBuf::from_raw(lowcon::cuda::device_ptr(s) + off as u64, count, dtype) };
                Ok(b)
            }
            GpuMem::Symmetric(b) => DeviceBuf::symmetric(b, off, count, dtype).map_err(e),
        }
    }
}

impl GpuRunner {
    /// Uploads `input` and poisons the output buffer for `case` (synchronously).
    pub(crate) fn prepare(&self, case: &Case, input: &[u8]) -> Result<(GpuMem, GpuMem), String> {
        let s = case.dtype.size();
        let off = case.misalign * s;
        let out_len = case.out_count(self.g.world_size()) * s;
        let inp = GpuMem::new(&self.g, &self.stream, case.symmetric, off + input.len() + 16)?;
        let out = GpuMem::new(&self.g, &self.stream, case.symmetric, off + out_len + 16)?;
        // SAFETY: both buffers are live and sized above; the copies are synchronous.
        unsafe {
            raw::mem_op::copy_from_host(self.stream.raw(), inp.ptr() + off as u64, input).map_err(e)?;
            raw::mem_op::fill(self.stream.raw(), out.ptr(), 0xFF, off + out_len + 16).map_err(e)?;
        }
        self.stream.synchronize().map_err(e)?;
        Ok((inp, out))
    }

    /// Enqueues `case` on `stream` over prepared buffers.
    pub(crate) fn enqueue(&self, case: &Case, stream: &Stream, inp: &GpuMem, out: &GpuMem) -> Result<(), String> {
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

    fn fetch(&self, case: &Case, out: &GpuMem) -> Result<Vec<u8>, String> {
        let s = case.dtype.size();
        let mut v = vec![0u8; case.out_count(self.g.world_size()) * s];
        // SAFETY: `out` holds `off + v.len()` bytes; synchronous copy.
        unsafe { raw::mem_op::copy_to_host(self.stream.raw(), &mut v, out.ptr() + (case.misalign * s) as u64) }
            .map_err(e)?;
        Ok(v)
    }
}

impl Runner for GpuRunner {
    fn rank(&self) -> usize {
        self.g.rank()
    }
    fn world(&self) -> usize {
        self.g.world_size()
    }
    fn shared_seed(&self, name: &str) -> Result<u64, String> {
        seed_of_rank0(|mine| self.g.all_gather_bytes(name, mine))
    }
    fn run(&mut self, case: &Case, input: &[u8]) -> Result<Vec<u8>, String> {
        let (inp, out) = self.prepare(case, input)?;
        self.enqueue(case, &self.stream, &inp, &out)?;
        self.g.synchronize(&self.stream).map_err(e)?;
        self.fetch(case, &out)
    }
    fn run_in_place(&mut self, case: &Case, input: &[u8]) -> Result<Vec<u8>, String> {
        let (rank, world) = (self.rank(), self.world());
        let (n, count) = (input.len(), case.count);
        if let Coll::ReduceScatter(a, op) = case.coll {
            // The output is this rank's chunk of the input.
            let chunk = n / world;
            let buf = GpuMem::new(&self.g, &self.stream, case.symmetric, n)?;
            // SAFETY: `buf` holds n bytes; synchronous copy.
            unsafe { raw::mem_op::copy_from_host(self.stream.raw(), buf.ptr(), input) }.map_err(e)?;
            let ib = buf.buf(0, count * world, case.dtype)?;
            let ob = buf.buf(rank * chunk, count, case.dtype)?;
            self.g.reduce_scatter(ib, ob, op, &self.stream, &case.rs_opts(a)).map_err(e)?;
            self.g.synchronize(&self.stream).map_err(e)?;
            let mut got = vec![0u8; chunk];
            // SAFETY: `buf` holds n bytes; synchronous copy.
            unsafe { raw::mem_op::copy_to_host(self.stream.raw(), &mut got, buf.ptr() + (rank * chunk) as u64) }
                .map_err(e)?;
            // The call ended with a barrier: no peer reads `buf` any more.
            return Ok(got);
        }
        let out = GpuMem::new(&self.g, &self.stream, case.symmetric, n * world)?;
        // SAFETY: `out` holds n * world bytes; the copies are synchronous.
        unsafe {
            raw::mem_op::fill(self.stream.raw(), out.ptr(), 0xFF, n * world).map_err(e)?;
            raw::mem_op::copy_from_host(self.stream.raw(), out.ptr() + (rank * n) as u64, input).map_err(e)?;
        }
        let Coll::AllGather(a) = case.coll else { return Err("in place is for all-gather".into()) };
        let ib = out.buf(rank * n, count, case.dtype)?;
        let ob = out.buf(0, count * world, case.dtype)?;
        self.g.all_gather(ib, ob, &self.stream, &case.ag_opts(a)).map_err(e)?;
        self.g.synchronize(&self.stream).map_err(e)?;
        let mut got = vec![0u8; n * world];
        // SAFETY: `out` holds n * world bytes; synchronous copy.
        unsafe { raw::mem_op::copy_to_host(self.stream.raw(), &mut got, out.ptr()) }.map_err(e)?;
        Ok(got)
    }
}
