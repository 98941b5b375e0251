//! The split bf16 wire on the host backend (NOTE [bf16 wire] in `coll::wire`): the GPU's
//! protocol over shared memory, so that CI checks it. Each rank packs every piece of
//! every chunk it sends into the high and low planes of its workspace (the GPU's
//! layout), writes its inexact flag into the destination's pad and sets its byte of the
//! destination's piece word; then, piece by piece, it waits for every peer's byte,
//! reads their high halves (the copy engines' part), their low halves only where
//! flagged, and reduces in rank order in f32. An exit barrier ends the call, as on GPUs.

use super::{HostColl, HostInput};
use crate::coll::reference::reduce_into;
use crate::coll::wire::{Layout, Moved, pieces};
use crate::coll::{DType, ReduceOp, ReduceScatterOptions};
use crate::error::Result;

impl HostColl {
    /// The split-wire reduce-scatter: `input` and `output` are f32 (checked by the
    /// caller), `n` elements per chunk.
    pub(super) fn wire_reduce_scatter(
        &self,
        input: HostInput<'_>,
        output: &mut [u8],
        op: ReduceOp,
        opts: &ReduceScatterOptions,
        n: usize,
    ) -> Result<()> {
        let (rank, world) = (self.sync.core.rank, self.sync.core.world);
        let (pe, count) = pieces(rank, n, opts.pipeline)?;
        let layout = Layout::new(world, n, pe, true);
        let ch = opts.channel;
        let word = |b: &[u8], i: usize| u32::from_le_bytes(b[4 * i..4 * i + 4].try_into().expect("4 bytes"));
        let mut fallback = (0, 0);
        self.with_workspace(ch, layout.bytes, |ws| {
            let ws = ws.expect("workspace sized for the planes");
            let local = input.local(rank)?;
            for i in 0..count {
                let (first, len) = (i * pe, pe.min(n - i * pe));
                for q in (0..world).filter(|&q| q != rank) {
                    let (mut hi, mut lo) = (vec![0u8; 2 * len], vec![0u8; 2 * len]);
                    let mut inexact = false;
                    for k in 0..len {
                        let w = word(&local, q * n + first + k);
                        hi[2 * k..2 * k + 2].copy_from_slice(&((w >> 16) as u16).to_le_bytes());
                        lo[2 * k..2 * k + 2].copy_from_slice(&(w as u16).to_le_bytes());
                        inexact |= w & 0xffff != 0;
                    }
                    ws.write(rank, layout.slot(layout.hi, q, rank, first), &hi)?;
                    ws.write(rank, layout.slot(layout.lo, q, rank, first), &lo)?;
                    self.sync.signal_piece(q, ch, i as u32, inexact);
                }
            }
            for i in 0..count {
                let (first, len) = (i * pe, pe.min(n - i * pe));
                let flags = self.sync.wait_piece(ch, i as u32)?;
                let mut srcs = Vec::with_capacity(world);
                for p in 0..world {
                    if p == rank {
                        srcs.push(local[4 * (rank * n + first)..4 * (rank * n + first + len)].to_vec());
                        continue;
                    }
                    let (mut hi, mut lo) = (vec![0u8; 2 * len], vec![0u8; 2 * len]);
                    ws.read(p, layout.slot(layout.hi, rank, p, first), &mut hi)?;
                    if flags[p] {
                        ws.read(p, layout.slot(layout.lo, rank, p, first), &mut lo)?;
                        fallback = (fallback.0 + 2 * len, fallback.1 + 1);
                    }
                    let joined = hi.chunks_exact(2).zip(lo.chunks_exact(2)).flat_map(|(h, l)| {
                        (u32::from(u16::from_le_bytes([h[0], h[1]])) << 16
                            | u32::from(u16::from_le_bytes([l[0], l[1]])))
                        .to_le_bytes()
                    });
                    srcs.push(joined.collect());
                }
                let srcs: Vec<&[u8]> = srcs.iter().map(Vec::as_slice).collect();
                reduce_into(DType::F32, op, world, &srcs, &mut output[4 * first..4 * (first + len)]);
            }
            // Peers may pack into their planes again once every rank has read them.
            self.sync.barrier(ch)
        })?;
        self.counters.add(Moved::Wire((world - 1) * n * 2, (world - 1) * count));
        self.counters.add(Moved::Fallback(fallback.0, fallback.1));
        Ok(())
    }
}
