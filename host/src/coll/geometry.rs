//! The algorithms' geometry: how a call's bytes are cut into LL rounds, `tma-reduce`
//! heads, bodies and tails, ce-reduce pipeline pieces and staging slots. What runs is the
//! planner's choice (`crate::plan`, the TMA rings' tiles and stages included:
//! `plan::tma`); this is how it is laid out.

/// The rounds of an LL collective of `bytes` per rank: `(first line, lines)`, each at
/// most a slot's lines (`lowcon_abi::ll::slot_lines`: 1 MiB of payload at 2 ranks).
pub(crate) fn ll_rounds(bytes: usize, world: u32) -> impl Iterator<Item = (u64, u64)> {
    let lines = (bytes as u64).div_ceil(lowcon_abi::ll::PAYLOAD_PER_LINE);
    let per = lowcon_abi::ll::slot_lines(world);
    (0..lines.div_ceil(per)).map(move |r| (r * per, per.min(lines - r * per)))
}

/// How `tma-reduce` splits a chunk of `n` elements of `esize` bytes that starts at byte
/// offset `off` of the symmetric input (the same on every rank): `(head elements, body
/// bytes)`. The head runs up to the first 16-byte boundary, the body is whole 16-byte
/// vectors (what bulk copies may move), the tail the rest. Head and tail are reduced
/// with plain loads. An `off` that is not a multiple of `esize` leaves no body.
pub(crate) fn tma_split(off: usize, n: usize, esize: usize) -> (usize, usize) {
    if !off.is_multiple_of(esize) {
        return (n, 0);
    }
    let head = (((16 - off % 16) % 16) / esize).min(n);
    let body = (n - head) * esize / 16 * 16;
    (head, body)
}

/// Staging slots of ce-reduce: copies may run this many pieces ahead of the reduction.
pub(crate) const STAGING_DEPTH: usize = 3;

/// Pieces a bf16-wire plane holds per chunk slot when a call has more (NOTE [plane
/// ring] in `coll::gpu::wire_steps`): packs may run this many pieces ahead of the
/// slowest reader.
pub(crate) const PLANE_RING: usize = 3;

/// Elements per ce-reduce piece: `count / pieces` rounded up to a multiple of 64
/// elements, so every piece but the last keeps 16-byte alignment.
pub(crate) fn piece_elems(count: usize, pieces: u32) -> usize {
    count.div_ceil(pieces as usize).div_ceil(64) * 64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_cover_the_chunk_and_stay_aligned() {
        for count in [1usize, 63, 64, 1000, 1 << 20, (1 << 20) + 7] {
            for pieces in [1, 2, 3, 7, 64] {
                let pe = piece_elems(count, pieces);
                assert_eq!(pe % 64, 0);
                assert!(pe * pieces as usize >= count);
            }
        }
    }

    #[test]
    fn ll_rounds_cover_the_lines_within_a_slot() {
        for world in [2u32, 3, 8] {
            let per = lowcon_abi::ll::slot_lines(world);
            for bytes in [1usize, 7, 8, 9, 65536, (per * 8) as usize, (per * 8) as usize + 1, 5 << 20] {
                let rounds: Vec<_> = ll_rounds(bytes, world).collect();
                let mut next = 0;
                for &(first, n) in &rounds {
                    assert_eq!(first, next);
                    assert!(n >= 1 && n <= per);
                    next += n;
                }
                assert_eq!(next, (bytes as u64).div_ceil(8), "world {world} bytes {bytes}");
            }
        }
        assert_eq!(ll_rounds(1 << 20, 2).count(), 1);
        assert_eq!(ll_rounds((1 << 20) + 1, 2).count(), 2);
    }

    #[test]
    fn tma_split_covers_the_chunk_with_an_aligned_body() {
        for esize in [2usize, 4] {
            for off in (0..64).step_by(esize) {
                for n in [0usize, 1, 3, 7, 8, 9, 100, 1003] {
                    let (head, body) = tma_split(off, n, esize);
                    assert!(body.is_multiple_of(16));
                    assert!(head * esize + body <= n * esize);
                    assert!(n * esize - head * esize - body < 16 + 16, "tail too long");
                    if head * esize + body > 0 && body > 0 {
                        assert!((off + head * esize).is_multiple_of(16), "body unaligned at {off}");
                    }
                }
            }
        }
        assert_eq!(tma_split(12, 100, 4), (1, 384));
        assert_eq!(tma_split(1, 10, 2), (10, 0));
    }
}
