//! [`WireKernels`]: the bf16 wire's pack and reduction kernels on one GPU, with no group,
//! for `lowcon bench wire-kernels` (NOTE [bf16 wire] in `host/src/coll/wire.rs`). A
//! collective at one rank packs nothing, and on GPUs shared by ranks the kernels' times
//! are not their own, so the kernels are timed here alone: a world of `world` ranks is
//! played by buffers of this GPU (every "peer" pointer is a local buffer), so the pack
//! splits `world - 1` chunks and the reduction joins `world - 1` staged slots (and
//! bottom halves, with `inexact` data) as on a real rank.

use cudarc::driver::CudaSlice;
use lowcon_abi::pad;

use super::kernels::{WirePackArgs, WireReduceArgs};
use super::{Device, Stream, device_ptr, raw};
use crate::error::{Error, Result};

/// Buffers and arguments of one pack and one reduction of `n` elements per chunk (one
/// piece: the whole chunk), for a simulated world of `world` ranks.
pub struct WireKernels {
    device: Device,
    world: usize,
    n: usize,
    input: CudaSlice<u32>,
    planes: CudaSlice<u16>,
    output: CudaSlice<f32>,
    pads: CudaSlice<u8>,
    pad_table: CudaSlice<u64>,
    plane_table: CudaSlice<u64>,
    inexact: bool,
}

impl WireKernels {
    /// Buffers for chunks of `n` f32 elements in a world of `world` (2 to 8) ranks, the
    /// input filled with bf16-exact values, or (`inexact`) values whose bottom halves
    /// are nonzero, so that every reduction reads them (the fallback).
    pub fn new(device: &Device, stream: &Stream, n: usize, world: usize, inexact: bool) -> Result<Self> {
        if !(2..=8).contains(&world) || n == 0 {
            return Err(Error::InvalidArgument(format!(
                "wire kernels: world {world} (2 to 8) and {n} elements per chunk (at least 1)"
            )));
        }
        device.bind_to_thread()?;
        let stride = n.next_multiple_of(128);
        let words: Vec<u32> = (0..world * n)
            .map(|i| {
                let top = 0x3c00 | ((i as u32).wrapping_mul(2_654_435_761) >> 24);
                top << 16 | if inexact { 0x8001 } else { 0 }
            })
            .collect();
        let input = stream.upload(&words)?;
        // The high plane, the low plane: `world - 1` slots of `stride` each.
        let planes = stream.alloc_zeros::<u16>(2 * (world - 1) * stride)?;
        let output = stream.alloc_zeros::<f32>(n)?;
        let pads = stream.alloc_zeros::<u8>(pad::buffer_bytes(world as u32))?;
        // Every rank's pad and workspace is this GPU's own.
        let pad_table = stream.upload(&vec![device_ptr(&pads); world])?;
        let plane_table = stream.upload(&vec![device_ptr(&planes); world])?;
        if inexact {
            // Every "peer" flags its piece (its pack would write the flag into this rank's
            // pad; here the pack writes rank 0's own entry, which the reduction skips).
            for p in 1..world as u32 {
                let at = device_ptr(&pads) + pad::wire_flag_offset(world as u32, 0, 0, p) as u64;
                // SAFETY: a word inside the live pad buffer; synchronous copy.
                unsafe { raw::mem_op::copy_from_host(stream.raw(), at, &1u32.to_le_bytes())? };
            }
        }
        stream.synchronize()?;
        Ok(Self { device: device.clone(), world, n, input, planes, output, pads, pad_table, plane_table, inexact })
    }

    fn stride(&self) -> usize {
        self.n.next_multiple_of(128)
    }

    /// Bytes one pack reads and writes.
    pub fn pack_bytes(&self) -> usize {
        (self.world - 1) * self.n * (4 + 4)
    }

    /// Bytes one reduction reads and writes (the bottom halves too with `inexact` data).
    pub fn reduce_bytes(&self) -> usize {
        let lo = if self.inexact { 2 } else { 0 };
        self.n * 4 + (self.world - 1) * self.n * (2 + lo) + self.n * 4
    }

    /// Enqueues one pack on `ctas` CTAs (rank 0 of the simulated world, piece 0).
    pub fn pack(&self, stream: &Stream, ctas: u32) -> Result<()> {
        let w = self.world as u32;
        let pads = device_ptr(&self.pads);
        let a = WirePackArgs {
            src: device_ptr(&self.input),
            n: self.n as u64,
            first: 0,
            len: self.n as u64,
            hi: device_ptr(&self.planes),
            lo: device_ptr(&self.planes) + (2 * (self.world - 1) * self.stride()) as u64,
            stride: self.stride() as u64,
            rank: 0,
            world: w,
            channel: 0,
            piece: 0,
            pads: device_ptr(&self.pad_table),
            sig: device_ptr(&self.pad_table),
            scratch: pads + pad::wire_or_offset(w, 0) as u64,
            counter: pads + pad::counter_offset(w, 0) as u64,
            vec_ok: self.n.is_multiple_of(4),
        };
        // SAFETY: every pointer is one of this instrument's live buffers, sized for the
        // simulated world (`new`), and stays alive until the stream has run it (the
        // caller synchronises before dropping `self`, as `Drop` does too).
        unsafe { self.device.kernels()?.wire_pack(stream, ctas.max(1), &a) }
    }

    /// Enqueues one reduction on `ctas` CTAs (`op` sum): the staged top halves are the
    /// high plane the pack wrote, the bottom halves (with `inexact` data, where the pack
    /// flagged them) its low plane.
    pub fn reduce(&self, stream: &Stream, ctas: u32) -> Result<()> {
        let w = self.world as u32;
        let pads = device_ptr(&self.pads);
        let a = WireReduceArgs {
            own: device_ptr(&self.input),
            own_bf16: false,
            staged: device_ptr(&self.planes),
            pe: self.stride() as u64,
            len: self.n as u64,
            dst: device_ptr(&self.output),
            rank: 0,
            world: w,
            op: lowcon_abi::reduce_op::SUM,
            vec_ok: true,
            lo_bases: device_ptr(&self.plane_table),
            lo_off: (2 * (self.world - 1) * self.stride()) as u64,
            stride: self.stride() as u64,
            first: 0,
            flags: pads + pad::wire_flag_offset(w, 0, 0, 0) as u64,
            reset: pads + 4 * pad::piece_slot(0, 0, 0, w) as u64,
            stats: pads + pad::stats_offset(w) as u64,
        };
        // SAFETY: as in `pack`; the planes hold `world - 1` slots of `stride >= n`.
        unsafe { self.device.kernels()?.wire_reduce(stream, ctas.max(1), &a) }
    }

    /// Checks the last reduction against the CPU: element `i` must be the sum, in rank
    /// order in f32, of the input's element `i` and the packed chunks' (chunks 1 to
    /// `world - 1`, as rank 0 of the world sees them). Synchronises `stream`.
    pub fn check(&self, stream: &Stream) -> Result<usize> {
        let words = stream.download(&self.input)?;
        let got = stream.download(&self.output)?;
        let mut wrong = 0;
        for (i, g) in got.iter().enumerate() {
            // Slot k of rank 0's plane holds chunk k + 1, and rank 0 reads slot k's
            // entry for "peer" k + 1 at its own chunk's offset: the same plane, i.e.
            // chunk k + 1's element i (a stand-in peer's chunk for rank 0).
            let mut acc = f32::from_bits(words[i]);
            for k in 1..self.world {
                acc += f32::from_bits(words[k * self.n + i]);
            }
            wrong += usize::from(acc.to_bits() != g.to_bits());
        }
        // The fallbacks the device counted: `world - 1` per reduction with inexact data.
        let mut stats = vec![0u8; 16];
        // SAFETY: the counters are inside the live pad buffer; synchronous copy.
        unsafe {
            raw::mem_op::copy_to_host(
                stream.raw(),
                &mut stats,
                device_ptr(&self.pads) + pad::stats_offset(self.world as u32) as u64,
            )?
        };
        let fallbacks = u64::from_le_bytes(stats[..8].try_into().expect("8 bytes"));
        if self.inexact != (fallbacks > 0) {
            return Err(Error::InvalidArgument(format!(
                "wire kernels: {fallbacks} fallback pieces counted with {} data",
                if self.inexact { "inexact" } else { "exact" }
            )));
        }
        Ok(wrong)
    }
}
