//! Unit tests of the pool's decisions ([`super::PoolCore`]) and of [`super::Pool`].

use super::*;

fn used(p: Plan<u32>) -> (u64, Placement, Option<u32>) {
    match p {
        Plan::Use { id, at, wait } => (id, at, wait),
        Plan::Grow { bytes } => panic!("expected a block, got a growth of {bytes}"),
    }
}

fn grow_then_take(c: &mut PoolCore<u32>, bytes: usize, stream: u64) -> (u64, Placement) {
    let Plan::Grow { bytes: seg } = c.plan(bytes, stream).unwrap() else { panic!("expected growth") };
    let (id, at, _) = used(c.take_new_segment(seg, bytes, stream).unwrap());
    (id, at)
}

#[test]
fn grows_then_splits_and_reuses_on_the_same_stream() {
    let mut c = PoolCore::<u32>::new(8 << 20);
    let (a, at) = grow_then_take(&mut c, 1000, 7);
    assert_eq!(at, Placement { segment: 0, offset: 0, bytes: 1024 });
    assert_eq!(c.stats().reserved, 8 << 20);
    let (_, bt, _) = used(c.plan(100, 7).unwrap());
    assert_eq!(bt.offset, 1024);
    c.free(a, Some(1)).unwrap();
    // Best fit: the freed 1024-byte hole, not the big remainder; same stream: no wait.
    let (_, ct, w) = used(c.plan(600, 7).unwrap());
    assert_eq!((ct.offset, w), (0, None));
    assert!(c.free(999, None).is_err());
}

#[test]
fn another_stream_takes_only_whole_free_segments_after_the_free_event() {
    let mut c = PoolCore::<u32>::new(2 << 20);
    let (a, _) = grow_then_take(&mut c, 4096, 1);
    // Stream 2 does not split stream 1's segment (its free remainder): it grows.
    assert!(matches!(c.plan(4096, 2).unwrap(), Plan::Grow { .. }));
    let (b, bt) = grow_then_take(&mut c, 4096, 2);
    assert_eq!((bt.segment, bt.offset), (1, 0));
    let (big, _) = grow_then_take(&mut c, 3 << 20, 1);
    c.free(a, Some(11)).unwrap();
    c.free(b, Some(22)).unwrap();
    c.free(big, Some(33)).unwrap();
    // Stream 2 prefers its own freed block; no wait.
    let (_, t, w) = used(c.plan(4096, 2).unwrap());
    assert_eq!((t.segment, t.offset, w), (1, 0, None));
    // Stream 3 has none: a whole free segment of stream 1, best fit (segment 0, 2 MiB,
    // merged back whole), after the event of its last free.
    let (_, t, w) = used(c.plan(4096, 3).unwrap());
    assert_eq!((t.segment, t.offset, w), (0, 0, Some(11)));
    // The rest of segment 0 is still stream 1's, with stream 1's event.
    let (_, t, w) = used(c.plan(4096, 1).unwrap());
    assert_eq!((t.segment, t.offset, w), (0, 4096, None));
    // A request only segment 2 (4 MiB, whole) holds: stream 3 takes it after event 33.
    let (_, t, w) = used(c.plan(3 << 20, 3).unwrap());
    assert_eq!((t.segment, w), (2, Some(33)));
}

#[test]
fn neighbours_of_one_stream_merge_with_the_later_event() {
    let mut c = PoolCore::<u32>::new(2 << 20);
    let (a, _) = grow_then_take(&mut c, 512, 1);
    let (b, _, _) = used(c.plan(512, 1).unwrap());
    let (x, _, _) = used(c.plan(512, 1).unwrap());
    c.free(x, Some(1)).unwrap();
    c.free(b, Some(2)).unwrap();
    c.free(a, Some(3)).unwrap();
    // Everything merged back into one whole segment, whose event is the last free's.
    assert_eq!(c.stats().live_blocks, 0);
    let (_, t, w) = used(c.plan(1024, 9).unwrap());
    assert_eq!((t.offset, t.bytes, w), (0, 1024, Some(3)));
}

#[test]
fn the_same_sequence_gives_the_same_fingerprint_and_a_different_one_does_not() {
    let run = |late_free: bool| {
        let mut c = PoolCore::<u32>::new(2 << 20);
        let (a, _) = grow_then_take(&mut c, 4096, 5);
        if !late_free {
            c.free(a, None).unwrap();
        }
        let _ = c.plan(4096, 5).unwrap();
        if late_free {
            c.free(a, None).unwrap();
        }
        c.fingerprint()
    };
    assert_eq!(run(false), run(false));
    assert_ne!(run(false), run(true));
    let f = run(false);
    assert_eq!(Fingerprint::from_bytes(&f.to_bytes()), Some(f));
    let good = vec![f.to_bytes().to_vec(), f.to_bytes().to_vec()];
    assert!(compare_fingerprints(1, "at a test", &good).is_ok());
    let bad = vec![f.to_bytes().to_vec(), run(true).to_bytes().to_vec()];
    let e = compare_fingerprints(0, "at a test", &bad).unwrap_err().to_string();
    assert!(e.contains("rank 0") && e.contains("rank 1"), "{e}");
    assert!(compare_fingerprints(0, "x", &[vec![1, 2, 3]]).is_err());
}

#[test]
fn large_requests_get_their_own_segment_rounded_to_the_grain() {
    let mut c = PoolCore::<u32>::new(4 << 20);
    let Plan::Grow { bytes } = c.plan(5 << 20, 0).unwrap() else { panic!() };
    assert_eq!(bytes, 6 << 20);
    assert!(c.take_new_segment(1 << 20, 5 << 20, 0).is_err());
    assert!(c.plan(usize::MAX, 0).is_err());
}

#[derive(Clone)]
struct FakeSeg(u64, usize);
impl Segment for FakeSeg {
    fn base(&self) -> u64 {
        self.0
    }
    fn len(&self) -> usize {
        self.1
    }
}

#[test]
fn the_pool_finds_segments_and_counts_checks() {
    let pool = Pool::<FakeSeg, u32>::new(0, 2 << 20, 3);
    let b = pool.alloc(
        100,
        1,
        |fp, n, mine| {
            assert_eq!((fp.allocs, n, mine), (0, 1, &[][..]));
            Ok(vec![])
        },
        |bytes| Ok(FakeSeg(0x10_0000, bytes)),
    );
    let b = b.unwrap();
    assert_eq!(b.ptr, 0x10_0000);
    let (seg, off) = pool.find(0x10_0000 + 512, 512).unwrap();
    assert_eq!((seg.0, off), (0x10_0000, 512));
    assert!(pool.find(0x10_0000 + (2 << 20) - 8, 16).is_none());
    assert!(pool.find(0x5, 1).is_none());
    assert!(pool.try_alloc(4 << 20, 1).unwrap().is_none(), "nothing that big is free: growth needed");
    let small = pool.try_alloc(512, 1).unwrap().expect("the segment's free space fits it");
    assert_eq!(small.ptr, 0x10_0000 + 512);
    pool.free(small.id, |_| Ok(None)).unwrap();
    assert!(pool.note_collective().is_none());
    assert!(pool.note_collective().is_none());
    assert_eq!(pool.note_collective().map(|(f, n)| (f.allocs, n)), Some((2, 1)));
    let mut recorded = None;
    pool.free(b.id, |s| {
        recorded = Some(s);
        Ok(Some(4))
    })
    .unwrap();
    assert_eq!(recorded, Some(1));
    assert!(pool.free(b.id, |_| Ok(None)).is_err());
    let short = pool.alloc(4 << 20, 1, |_, _, _| Ok(vec![]), |_| Ok(FakeSeg(0x90_0000, 1 << 20)));
    assert!(short.is_err());
}

#[test]
fn release_gives_back_only_wholly_free_segments_and_never_reuses_their_index() {
    let mut c = PoolCore::<u32>::new(2 << 20);
    let (a, _) = grow_then_take(&mut c, 4096, 1);
    let (b, bt) = grow_then_take(&mut c, 3 << 20, 1);
    assert_eq!(bt.segment, 1);
    assert!(c.free_segments().is_empty());
    c.free(b, Some(1)).unwrap();
    assert_eq!(c.free_segments(), vec![1]);
    // Segment 0 still holds `a`: refused, and nothing changes.
    assert!(c.release(&[0, 1]).unwrap_err().to_string().contains("segment 0"));
    assert_eq!(c.stats().reserved, (2 << 20) + (4 << 20));
    let before = c.fingerprint();
    assert_eq!(c.release(&[1]).unwrap(), 4 << 20);
    assert_ne!(c.fingerprint(), before, "a release changes later placements: it is fingerprinted");
    assert_eq!(c.fingerprint().allocs, before.allocs);
    assert_eq!((c.stats().reserved, c.stats().segments), (2 << 20, 1));
    // A request only a new segment fits grows again, at a new index (2, not 1).
    let (_, t) = grow_then_take(&mut c, 3 << 20, 1);
    assert_eq!(t.segment, 2);
    assert_eq!(c.growths(), 3);
    c.free(a, None).unwrap();
    assert_eq!(c.free_segments(), vec![0]);
}

#[test]
fn trims_agree_on_the_segments_free_on_every_rank() {
    let fp = Fingerprint { allocs: 3, hash: 9 };
    let all = vec![trim_message(fp, &[0, 2, 5]), trim_message(fp, &[2, 5, 7]), trim_message(fp, &[5, 2])];
    assert_eq!(agree_on_trim(1, "before the pool was trimmed", &all).unwrap(), vec![2, 5]);
    assert_eq!(agree_on_trim(0, "x", &[trim_message(fp, &[])]).unwrap(), Vec::<usize>::new());
    let other = Fingerprint { allocs: 4, hash: 9 };
    let e = agree_on_trim(0, "before the pool was trimmed", &[trim_message(fp, &[1]), trim_message(other, &[1])])
        .unwrap_err()
        .to_string();
    assert!(e.contains("rank 1") && e.contains("trimmed"), "{e}");
    let mut bad = trim_message(fp, &[1]);
    bad.push(0);
    let e = agree_on_trim(0, "x", &[trim_message(fp, &[1]), bad]).unwrap_err().to_string();
    assert!(e.contains("rank 1") && e.contains("malformed"), "{e}");
}

/// A segment that counts its live copies, to see a trim drop it.
#[derive(Clone)]
struct CountedSeg(u64, usize, #[allow(dead_code)] std::sync::Arc<()>);
impl Segment for CountedSeg {
    fn base(&self) -> u64 {
        self.0
    }
    fn len(&self) -> usize {
        self.1
    }
}

#[test]
fn the_pool_trims_what_every_rank_has_free_and_drops_it() {
    let pool = Pool::<CountedSeg, u32>::new(0, 2 << 20, 0);
    let live = std::sync::Arc::new(());
    let none = |_: Fingerprint, _: u64, _: &[usize]| Ok(vec![]);
    let a = pool.alloc(4 << 20, 1, none, |b| Ok(CountedSeg(0x100_0000, b, live.clone()))).unwrap();
    let b = pool.alloc(4 << 20, 1, none, |b| Ok(CountedSeg(0x900_0000, b, live.clone()))).unwrap();
    assert_eq!(std::sync::Arc::strong_count(&live), 3);
    pool.free(a.id, |_| Ok(None)).unwrap();
    pool.free(b.id, |_| Ok(None)).unwrap();
    // This rank has both free; the peers (the agreement) only segment 1.
    let mut seen = None;
    let released = pool
        .trim(|fp, n, mine| {
            seen = Some((mine.to_vec(), fp.allocs, n));
            Ok(vec![1])
        })
        .unwrap();
    assert_eq!(seen, Some((vec![0, 1], 2, 1)));
    assert_eq!(released, 4 << 20);
    assert_eq!(std::sync::Arc::strong_count(&live), 2, "the released segment was dropped");
    assert!(pool.find(0x900_0000, 16).is_none());
    assert!(pool.find(0x100_0000, 16).is_some());
    assert_eq!(pool.stats().reserved, 4 << 20);
    // An agreement that fails leaves everything as it was.
    assert!(pool.trim(|_, _, _| Err(Error::GroupFailed("peer gone".into()))).is_err());
    assert_eq!(pool.stats().reserved, 4 << 20);
    // The next growth is numbered past the released segment.
    let grown = pool.alloc(
        6 << 20,
        1,
        |_, n, mine| {
            // Numbered past the released segment; segment 0 is free and too small: the
            // ranks agree to release it before the new one is allocated.
            assert_eq!((n, mine), (3, &[0][..]));
            Ok(vec![0])
        },
        |b| Ok(CountedSeg(0x1100_0000, b, live.clone())),
    );
    assert!(grown.is_ok());
    assert_eq!(std::sync::Arc::strong_count(&live), 2, "segment 0 dropped, the new one held");
    assert_eq!(pool.stats().reserved, 6 << 20);
    assert!(pool.find(0x100_0000, 16).is_none());
}

/// FSDP2's pattern through `lowcon.fsdp` (NOTE [FSDP2 pool size], docs/fsdp2-memory.md): per
/// module, the all-gather output on the copy-in stream (two live in forward: the
/// module's and the prefetched next; two in backward), the reduce-scatter input on the
/// compute stream (the previous one freed before the next is taken); the root module's
/// buffers are larger than a block's and come last in backward. The reduce-scatter
/// output is torch's, not the pool's. Through [`Pool`], with one rank (its agreement is
/// its own free list), the pool reaches its size in the first steps and keeps it, and
/// segments that no longer fit are released as it grows (NOTE [release on growth]).
#[test]
fn an_fsdp2_step_pattern_sizes_the_pool_once() {
    // fp32 reduce: the reduce-scatter inputs twice the all-gather outputs.
    let fp32 = fsdp2_pattern((403 << 20, 806 << 20), (524 << 20, 1048 << 20));
    assert!(fp32.windows(2).all(|w| w[0] == w[1]), "the pool grew after the first step: {fp32:?}");
    // The formula: two all-gather outputs (the root's and a block's) on one stream, the
    // largest reduce-scatter input (the root's) on the other; each rounded to the grain.
    let bound = (524 << 20) + (404 << 20) + (1048 << 20);
    assert!(fp32[4] <= bound, "the pool holds {} MiB, the formula {} MiB: {fp32:?}", fp32[4] >> 20, bound >> 20);
    // bf16 reduce: both kinds of buffer of one size, so a stream's free segment fits the
    // other stream's request too.
    let bf16 = fsdp2_pattern((403 << 20, 403 << 20), (524 << 20, 524 << 20));
    assert!(bf16.windows(2).all(|w| w[0] == w[1]), "the pool grew after the first step: {bf16:?}");
    let bound = 2 * (524 << 20) + (404 << 20);
    assert!(bf16[4] <= bound, "the pool holds {} MiB, the formula {} MiB: {bf16:?}", bf16[4] >> 20, bound >> 20);
}

/// Five steps of the pattern with blocks' and the root's (all-gather, reduce-scatter)
/// sizes; the pool's size after each.
fn fsdp2_pattern((ag, rs): (usize, usize), root: (usize, usize)) -> Vec<usize> {
    const AG: u64 = 1;
    const COMPUTE: u64 = 2;
    let layers = 12;
    let pool = Pool::<FakeSeg, u32>::new(0, 64 << 20, 0);
    let next_base = std::cell::Cell::new(1u64 << 40);
    let take = |bytes: usize, stream: u64| {
        pool.alloc(
            bytes,
            stream,
            |_, _, mine| Ok(mine.to_vec()),
            |b| {
                let base = next_base.get();
                next_base.set(base + (1 << 32));
                Ok(FakeSeg(base, b))
            },
        )
        .unwrap()
        .id
    };
    let free = |id: u64| pool.free(id, |_| Ok(Some(0))).unwrap();
    let mut sizes = vec![];
    for _step in 0..5 {
        // Forward: the root's all-gather, then the blocks with one prefetched.
        let root_ag = take(root.0, AG);
        let mut held = take(ag, AG);
        free(root_ag);
        for _ in 1..layers {
            let next = take(ag, AG);
            free(held);
            held = next;
        }
        free(held);
        // Backward: all-gather i-1 prefetched while block i's reduce-scatter input is live.
        let mut prev_rs: Option<u64> = None;
        let mut held = take(ag, AG);
        for i in 0..layers {
            let next = (i + 1 < layers).then(|| take(ag, AG));
            free(held);
            if let Some(p) = prev_rs.take() {
                free(p);
            }
            prev_rs = Some(take(rs, COMPUTE));
            if let Some(n) = next {
                held = n;
            }
        }
        // The root last: its all-gather again, then its reduce-scatter input.
        let root_ag = take(root.0, AG);
        free(root_ag);
        free(prev_rs.take().unwrap());
        let root_rs = take(root.1, COMPUTE);
        free(root_rs);
        sizes.push(pool.stats().reserved);
    }
    sizes
}
