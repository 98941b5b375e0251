//! A benchmark instrument, not part of the collectives: [`ReduceKernels`] runs lowcon's
//! reduction kernels (ce-reduce's, the bf16 wire's pack and reduction, the bulk
//! reduce-add of `tma-push-reduce`) and two controls, on one GPU with no group, for
//! `lowcon bench reduce-kernels` (the reduction beside a GEMM, and NOTE [bf16 wire] in
//! `host/src/coll/wire.rs`). A collective at one rank reduces nothing, and ranks sharing
//! a GPU do not time their own kernels, so the kernels run here alone: a world of
//! `world` ranks is played by buffers of this GPU (every "peer" pointer is a local
//! buffer), so each kernel reads and writes what it would on a rank.

use cudarc::driver::CudaSlice;
use lowcon_abi::pad;

use crate::cuda::kernels::{FusedArgs, PadArgs, PushArgs, WirePackArgs, WireReduceArgs};
use crate::cuda::{Device, DeviceAlloc, Stream, device_ptr};
use crate::error::{Error, Result};

/// What one launch of [`ReduceKernels::launch`] runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelKind {
    /// ce-reduce's reduction: this rank's f32 chunk and `world - 1` staged f32 chunks,
    /// in rank order, into the output.
    Reduce,
    /// ce-reduce's reduction of a whole call in one launch (`ReduceLaunch::Once`): the
    /// same work as `Reduce`, its pieces behind flags that stream writes set just before
    /// the launch (as the copy stream would, with no copies here).
    Once,
    /// The bf16 wire's pack: every chunk this rank sends, split into top and bottom halves.
    Pack,
    /// The bf16 wire's reduction: the own f32 chunk and `world - 1` staged top halves
    /// (joined with bottom halves with inexact data).
    WireReduce,
    /// `tma-push-reduce`'s kernel with no barriers: one thread per CTA bulk-loads
    /// `world - 1` chunks into a shared-memory ring of `tile`-byte tiles and adds them
    /// into a second output with `cp.reduce.async.bulk` (the memory system adds).
    BulkAdd {
        /// Bytes per tile (a multiple of 128); the ring holds 12 of them.
        tile: u32,
    },
    /// Control: CTAs held for `ns` nanoseconds, sleeping, no memory traffic (what taking
    /// the SMs costs a GEMM, apart from any bytes).
    Spin {
        /// How long each launch holds its CTAs.
        ns: u64,
    },
    /// Control: `cuMemcpyAsync` of as many bytes as `Reduce` reads and writes (half of
    /// them each way; the driver picks copy engine or kernel).
    Memcpy,
}

impl KernelKind {
    /// A short name for tables.
    pub fn name(&self) -> String {
        match self {
            KernelKind::Reduce => "reduce".into(),
            KernelKind::Once => "reduce-once".into(),
            KernelKind::Pack => "pack".into(),
            KernelKind::WireReduce => "wire-reduce".into(),
            KernelKind::BulkAdd { tile } => format!("bulk-add/{}K", tile >> 10),
            KernelKind::Spin { ns } => format!("spin/{}us", ns / 1000),
            KernelKind::Memcpy => "memcpy".into(),
        }
    }
}

/// `bytes` of zeroed `cuMemAlloc` memory on `device` (freed on drop: the
/// instrument's users synchronise before dropping it).
fn zeroed(device: &Device, stream: &Stream, bytes: usize) -> Result<DeviceAlloc> {
    let a = DeviceAlloc::new(device, bytes)?;
    // SAFETY: the `bytes` just allocated; synchronised below.
    unsafe { stream.fill(a.ptr(), 0, bytes)? };
    stream.synchronize()?;
    Ok(a)
}

/// A launch's CTAs and threads per CTA.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    /// CTAs.
    pub ctas: u32,
    /// Threads per CTA (32 to 512; `BulkAdd` always runs its kernel's 128).
    pub threads: u32,
}

/// Buffers of a simulated world of `world` ranks, chunks of `n` f32 elements (see the
/// module docs).
pub struct ReduceKernels {
    device: Device,
    world: usize,
    n: usize,
    input: CudaSlice<u32>,
    planes: CudaSlice<u16>,
    output: CudaSlice<f32>,
    second: CudaSlice<f32>,
    /// The pad: `cuMemAlloc` memory, which stream writes accept (the stream-ordered
    /// pool's, where `alloc_zeros` allocates, they refuse: `CUDA_ERROR_INVALID_VALUE`).
    pads: DeviceAlloc,
    pad_table: CudaSlice<u64>,
    plane_table: CudaSlice<u64>,
    second_table: CudaSlice<u64>,
    /// An error record of its own (`Once`'s waits never expire here; it stays zero).
    err: CudaSlice<u8>,
    inexact: bool,
}

impl ReduceKernels {
    /// Buffers for chunks of `n` f32 elements (a multiple of 64) in a world of `world`
    /// (2 to 8) ranks, the input bf16-exact, or (`inexact`) with every bottom half
    /// nonzero, so that the wire's reduction reads them (the fallback).
    pub fn new(device: &Device, stream: &Stream, n: usize, world: usize, inexact: bool) -> Result<Self> {
        if !(2..=8).contains(&world) || n == 0 || !n.is_multiple_of(64) {
            return Err(Error::InvalidArgument(format!(
                "reduce kernels: world {world} (2 to 8) and {n} elements per chunk (a positive multiple of 64)"
            )));
        }
        device.bind_to_thread()?;
        let words: Vec<u32> = (0..world * n)
            .map(|i| {
                let top = 0x3c00 | ((i as u32).wrapping_mul(2_654_435_761) >> 24);
                top << 16 | if inexact { 0x8001 } else { 0 }
            })
            .collect();
        let input = stream.upload(&words)?;
        // The high plane, the low plane: `world - 1` slots of `n` each.
        let planes = stream.alloc_zeros::<u16>(2 * (world - 1) * n)?;
        let output = stream.alloc_zeros::<f32>(n)?;
        let second = stream.alloc_zeros::<f32>(n * (world + 1) / 2 + 64)?;
        let pads = zeroed(device, stream, pad::buffer_bytes(world as u32))?;
        let err = stream.alloc_zeros::<u8>(std::mem::size_of::<lowcon_abi::ErrorRecord>())?;
        // Every rank's pad and workspace is this GPU's own.
        let pad_table = stream.upload(&vec![pads.ptr(); world])?;
        let plane_table = stream.upload(&vec![device_ptr(&planes); world])?;
        let second_table = stream.upload(&vec![device_ptr(&second); world])?;
        if inexact {
            // Every "peer" flags its piece (its pack would write the flag into this rank's
            // pad; here the pack writes rank 0's own entry, which the reduction skips).
            for p in 1..world as u32 {
                for piece in 0..pad::WIRE_PIECES {
                    let at = pads.ptr() + pad::wire_flag_offset(world as u32, 0, piece, p) as u64;
                    // SAFETY: a word inside the live pad buffer; synchronous copy.
                    unsafe { stream.copy_from_host(at, &1u32.to_le_bytes())? };
                }
            }
        }
        stream.synchronize()?;
        let (pt, plt, st) = (pad_table, plane_table, second_table);
        let (device, pad_table, plane_table, second_table) = (device.clone(), pt, plt, st);
        Ok(Self {
            device,
            world,
            n,
            input,
            planes,
            output,
            second,
            pads,
            pad_table,
            plane_table,
            second_table,
            err,
            inexact,
        })
    }

    /// Bytes one call (the whole chunk) reads and writes, for GB/s (0 for `Spin`).
    pub fn bytes(&self, k: KernelKind) -> usize {
        let (n, w) = (self.n, self.world);
        match k {
            KernelKind::Reduce | KernelKind::Once | KernelKind::Memcpy => n * 4 * (w + 1),
            KernelKind::Pack => (w - 1) * n * 8,
            KernelKind::WireReduce => n * 4 + (w - 1) * n * (2 + if self.inexact { 2 } else { 0 }) + n * 4,
            // Per peer chunk: read it, and read and write the sum.
            KernelKind::BulkAdd { .. } => (w - 1) * n * 12,
            KernelKind::Spin { .. } => 0,
        }
    }

    /// Enqueues one call: the whole chunk in `pieces` launches of equal, 64-element
    /// aligned ranges (as ce-reduce's pipeline pieces), each on `shape`.
    pub fn launch(&self, stream: &Stream, k: KernelKind, shape: Shape, pieces: u32) -> Result<()> {
        let pe = self.n.div_ceil(pieces.max(1) as usize).div_ceil(64) * 64;
        let shape = (shape.ctas.max(1), shape.threads);
        if k == KernelKind::Once {
            // SAFETY: the flags and buffers are this instrument's, live, and sized by `new`.
            return unsafe { self.launch_once(stream, shape, pe) };
        }
        let mut first = 0;
        while first < self.n {
            let len = pe.min(self.n - first);
            // SAFETY: every launch reads and writes ranges of this instrument's live
            // buffers, inside the sizes `new` gave them (`first + len <= n`), and the
            // buffers outlive the stream's work (callers synchronise before dropping).
            unsafe { self.launch_range(stream, k, shape, first, len)? };
            first += len;
        }
        Ok(())
    }

    /// # Safety
    /// As `launch`; at most `pad::WIRE_PIECES` pieces.
    unsafe fn launch_once(&self, stream: &Stream, shape: (u32, u32), pe: usize) -> Result<()> {
        let (w, n) = (self.world as u32, self.n);
        let pieces = n.div_ceil(pe);
        if pieces > pad::WIRE_PIECES as usize {
            return Err(Error::InvalidArgument(format!("reduce-once: {pieces} pieces (at most {})", pad::WIRE_PIECES)));
        }
        let pads = self.pads.ptr();
        let flags = pads + pad::once_flag_offset(w, 0, 0) as u64;
        let src = device_ptr(&self.input);
        for i in 0..pieces {
            // SAFETY: piece `i`'s flag inside the live pad buffer.
            unsafe { stream.write_u32(flags + 4 * i as u64, 1)? };
        }
        let a = crate::cuda::kernels::OnceArgs {
            own: src,
            own_idx: 0,
            staged: src + 4 * n as u64,
            stride: n as u64,
            nsrc: w,
            dst: device_ptr(&self.output),
            n: n as u64,
            pe: pe as u64,
            op: lowcon_abi::reduce_op::SUM,
            vec_ok: true,
            flags,
            counter: pads + pad::counter_offset(w, 0) as u64,
            // No group: a wait never expires here (the flags are set before the launch).
            err: device_ptr(&self.err),
            timeout_ns: 0,
            rank: 0,
            channel: 0,
        };
        let kernels = self.device.kernels()?;
        // SAFETY: every source and the output hold `n` elements; the flags are set above.
        unsafe { kernels.reduce_once(stream, lowcon_abi::reduce_dtype::F32, shape, &a) }
    }

    /// Fills the output with NaNs (all ones), so that a check after one call sees only
    /// what that call wrote.
    pub fn poison(&self, stream: &Stream) -> Result<()> {
        // SAFETY: the live output buffer, `n` words.
        unsafe { stream.fill_u32(device_ptr(&self.output), u32::MAX, self.n) }
    }

    /// # Safety
    /// `first + len <= n`; see `launch`.
    unsafe fn launch_range(
        &self,
        stream: &Stream,
        k: KernelKind,
        shape: (u32, u32),
        first: usize,
        len: usize,
    ) -> Result<()> {
        let kernels = self.device.kernels()?;
        let (w, n) = (self.world as u32, self.n);
        let pads = self.pads.ptr();
        let src = device_ptr(&self.input);
        let lo_off = (2 * (self.world - 1) * n) as u64;
        // SAFETY: (the block) as the caller's contract; each kernel's arguments as its
        // contract says (`gpu-kernels/kernels/src/{reduce,wire,push}.rs`).
        unsafe {
            match k {
                KernelKind::Once => unreachable!("launch_once"),
                KernelKind::Reduce => kernels.reduce(
                    stream,
                    lowcon_abi::reduce_dtype::F32,
                    shape,
                    src + 4 * first as u64,
                    0,
                    src + 4 * (n + first) as u64,
                    n as u64,
                    w,
                    device_ptr(&self.output) + 4 * first as u64,
                    len as u64,
                    lowcon_abi::reduce_op::SUM,
                    true,
                ),
                KernelKind::Pack => {
                    let a = WirePackArgs {
                        src,
                        src_bf16: false,
                        n: n as u64,
                        first: first as u64,
                        len: len as u64,
                        hi: device_ptr(&self.planes),
                        lo: device_ptr(&self.planes) + lo_off,
                        stride: n as u64,
                        rank: 0,
                        world: w,
                        channel: 0,
                        piece: 0,
                        pads: device_ptr(&self.pad_table),
                        sig: device_ptr(&self.pad_table),
                        scratch: pads + pad::wire_or_offset(w, 0) as u64,
                        counter: pads + pad::counter_offset(w, 0) as u64,
                        vec_ok: true,
                        read_reset: 0,
                    };
                    kernels.wire_pack(stream, shape, &a)
                }
                KernelKind::WireReduce => {
                    let a = WireReduceArgs {
                        own: src + 4 * first as u64,
                        own_bf16: false,
                        staged: device_ptr(&self.planes) + 2 * first as u64,
                        pe: n as u64,
                        len: len as u64,
                        dst: device_ptr(&self.output) + 4 * first as u64,
                        rank: 0,
                        world: w,
                        op: lowcon_abi::reduce_op::SUM,
                        vec_ok: true,
                        lo_bases: device_ptr(&self.plane_table),
                        lo_off,
                        hi_off: 0,
                        stride: n as u64,
                        first: first as u64,
                        flags: pads + pad::wire_flag_offset(w, 0, 0, 0) as u64,
                        reset: pads + 4 * pad::piece_slot(0, 0, 0, w) as u64,
                        stats: pads + pad::stats_offset(w) as u64,
                        counter: 0,
                        read_sig: 0,
                        read_byte: 0,
                    };
                    kernels.wire_reduce(stream, shape, &a)
                }
                KernelKind::BulkAdd { tile } => {
                    let pa = PadArgs { pads: device_ptr(&self.pad_table), rank: 0, world: w, err: 0, timeout_ns: 0 };
                    let f = FusedArgs::new(pa, 0, (0, 0), pads + pad::counter_offset(w, 0) as u64, false, false);
                    let a = PushArgs {
                        src: src + 4 * first as u64,
                        stride: 4 * n as u64,
                        bases: device_ptr(&self.second_table),
                        acc_off: 4 * first as u64,
                        body: 4 * len as u64,
                        tile: tile.div_ceil(128).max(1) * 128,
                    };
                    kernels.tma_push_reduce(stream, lowcon_abi::reduce_dtype::F32, f, shape.0, &a)
                }
                KernelKind::Spin { ns } => {
                    // The whole call's time, shared by its pieces.
                    let share = ns * len as u64 / n as u64;
                    kernels.spin(stream, shape.0, shape.1.clamp(32, 1024), share)
                }
                KernelKind::Memcpy => {
                    let bytes = self.bytes(KernelKind::Memcpy) / 2 * len / n;
                    let at = (self.bytes(KernelKind::Memcpy) / 2 * first / n) as u64 / 4 * 4;
                    stream.copy(device_ptr(&self.second) + at, src + at, bytes)
                }
            }
        }
    }

    /// Checks the last `Reduce`, `Once` or `WireReduce` (they write the same output) against the
    /// CPU: element `i` must be the sum, in rank order in f32, of the chunks' element `i`
    /// (the "peers'" chunks being chunks 1 to `world - 1`). Synchronises `stream`. With
    /// `wire`, also checks that the device counted fallbacks exactly when the data is
    /// inexact.
    pub fn check(&self, stream: &Stream, wire: bool) -> Result<usize> {
        let words = stream.download(&self.input)?;
        let got = stream.download(&self.output)?;
        let mut wrong = 0;
        for (i, g) in got.iter().enumerate() {
            let mut acc = f32::from_bits(words[i]);
            for k in 1..self.world {
                acc += f32::from_bits(words[k * self.n + i]);
            }
            wrong += usize::from(acc.to_bits() != g.to_bits());
        }
        if !wire {
            return Ok(wrong);
        }
        let mut stats = vec![0u8; 16];
        // SAFETY: the counters are inside the live pad buffer; synchronous copy.
        unsafe { stream.copy_to_host(&mut stats, self.pads.ptr() + pad::stats_offset(self.world as u32) as u64)? };
        let fallbacks = u64::from_le_bytes(stats[..8].try_into().expect("8 bytes"));
        if self.inexact != (fallbacks > 0) {
            return Err(Error::InvalidArgument(format!(
                "reduce kernels: {fallbacks} fallback pieces counted with {} data",
                if self.inexact { "inexact" } else { "exact" }
            )));
        }
        Ok(wrong)
    }
}
