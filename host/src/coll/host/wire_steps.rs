//! The split bf16 wire on the host backend (NOTE [bf16 wire] in `coll::wire`): the GPU's
//! protocol over shared memory, so that CI checks it. Each rank packs every piece of
//! every chunk it sends into the high and low planes of its workspace (the GPU's
//! layout), writes its inexact flag into the destination's pad and sets its byte of the
//! destination's piece word; then, piece by piece, it waits for every peer's byte,
//! reads their high halves (the copy engines' part), their low halves only where
//! flagged, and reduces in rank order in f32. An exit barrier ends the call, as on GPUs.
//! A bf16 input into f32 on sm-direct packs its values as the top halves, with no low
//! plane and every flag clear, as on GPUs (`RsPlan::packs`).

use super::{HostColl, HostInput};
use crate::coll::counters::Moved;
use crate::coll::reference::reduce_into;
use crate::coll::wire::{Carry, Layout, pieces};
use crate::coll::{DType, ReduceOp};
use crate::error::Result;

impl HostColl {
    /// The packed reduce-scatter: `output` is f32, `input` f32 (the split wire) or bf16
    /// (`Carry::Bf16In`; checked by the caller), `n` elements per chunk.
    pub(super) fn wire_reduce_scatter(
        &self,
        input: HostInput<'_>,
        output: &mut [u8],
        (carry, op): (Carry, ReduceOp),
        (ch, planned): (u32, u32),
        n: usize,
    ) -> Result<()> {
        let (rank, world) = (self.sync.core.rank, self.sync.core.world);
        let (pe, count) = pieces(rank, n, planned)?;
        let bf16 = carry == Carry::Bf16In;
        let layout = Layout::new(world, n, pe, if bf16 { 1 } else { 2 });
        let mut fallback = (0, 0);
        self.with_workspace(ch, layout.bytes, |ws| {
            let ws = ws.expect("workspace sized for the planes");
            let local = input.local(rank)?;
            // Every element as the f32 bits it stands for (a bf16 is an f32's top half).
            let words: Vec<u32> = match bf16 {
                true => local.chunks_exact(2).map(|b| u32::from(u16::from_le_bytes([b[0], b[1]])) << 16).collect(),
                false => local.chunks_exact(4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect(),
            };
            let (mut hi, mut lo) = (vec![0u16; pe], vec![0u16; pe]);
            for i in 0..count {
                let (first, len) = (i * pe, pe.min(n - i * pe));
                for q in (0..world).filter(|&q| q != rank) {
                    let src = &words[q * n + first..q * n + first + len];
                    let mut any = 0;
                    for ((h, l), &w) in hi.iter_mut().zip(lo.iter_mut()).zip(src) {
                        (*h, *l) = ((w >> 16) as u16, w as u16);
                        any |= w & 0xffff;
                    }
                    ws.write(rank, layout.slot(layout.hi, q, rank, first), bytemuck::cast_slice(&hi[..len]))?;
                    if !bf16 {
                        ws.write(rank, layout.slot(layout.lo, q, rank, first), bytemuck::cast_slice(&lo[..len]))?;
                    }
                    self.sync.signal_piece(q, ch, i as u32, any != 0);
                }
            }
            let mut joined = vec![vec![0u32; pe]; world];
            for i in 0..count {
                let (first, len) = (i * pe, pe.min(n - i * pe));
                let flags = self.sync.wait_piece(ch, i as u32)?;
                for (p, dst) in joined.iter_mut().enumerate() {
                    if p == rank {
                        dst[..len].copy_from_slice(&words[rank * n + first..rank * n + first + len]);
                        continue;
                    }
                    ws.read(p, layout.slot(layout.hi, rank, p, first), bytemuck::cast_slice_mut(&mut hi[..len]))?;
                    lo[..len].fill(0);
                    if flags[p] {
                        ws.read(p, layout.slot(layout.lo, rank, p, first), bytemuck::cast_slice_mut(&mut lo[..len]))?;
                        fallback = (fallback.0 + 2 * len, fallback.1 + 1);
                    }
                    for ((d, &h), &l) in dst.iter_mut().zip(&hi[..len]).zip(&lo[..len]) {
                        *d = u32::from(h) << 16 | u32::from(l);
                    }
                }
                let srcs: Vec<&[u8]> = joined.iter().map(|v| bytemuck::cast_slice(&v[..len])).collect();
                reduce_into(DType::F32, op, world, &srcs, &mut output[4 * first..4 * (first + len)]);
            }
            // Peers may pack into their planes again once every rank has read them.
            self.sync.barrier(ch)
        })?;
        // A bf16 input's bytes are any reduce-scatter's (as on GPUs: `wire_steps::moved`).
        self.counters.add(match bf16 {
            true => Moved::ReduceScatter((world - 1) * n * 2),
            false => Moved::Wire((world - 1) * n * 2, (world - 1) * count),
        });
        self.counters.add(Moved::Fallback(fallback.0, fallback.1));
        Ok(())
    }
}
