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
    let b = pool.alloc(100, 1, |bytes, fp, n| {
        assert_eq!((fp.allocs, n), (0, 1));
        Ok(FakeSeg(0x10_0000, bytes))
    });
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
    let short = pool.alloc(4 << 20, 1, |_, _, _| Ok(FakeSeg(0x90_0000, 1 << 20)));
    assert!(short.is_err());
}
