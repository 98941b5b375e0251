//! The watchdog's bookkeeping, with no CUDA in it (so CI tests it): the collective calls
//! in flight per stream, and the decision the watchdog takes on each round.
//!
//! NOTE [head time]: a call is judged by how long it has been the oldest unfinished call
//! of its stream (its "head time"), not by how long ago it was enqueued. With a
//! thousand calls queued, the last one legitimately waits for the 999 before it; only
//! the head of a stream can be stuck. The head time starts when the call becomes the
//! head (enqueued on an idle stream, or its predecessor seen complete), so work of the
//! caller's own before it on the stream counts too: a caller kernel running longer than
//! the group's timeout ahead of a collective is reported as a timeout (as a barrier
//! kernel's own device-side timeout would).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Something that completes: a CUDA event in the library (shared, so the watchdog can
/// query it off the lock: NOTE [completions off the lock]), a flag in the tests.
pub(crate) trait Completion: Clone {
    /// Whether the work before it has finished. A query error counts as finished (the
    /// error resurfaces on the stream itself).
    fn complete(&self) -> bool;
}

impl Completion for std::sync::Arc<crate::cuda::Event> {
    fn complete(&self) -> bool {
        self.is_complete().unwrap_or(true)
    }
}

/// NOTE [completions off the lock]: the watchdog used to query, under the lock every call
/// takes to register itself, one event per call completed since its last round, stopping
/// at the first incomplete one. Eager calls of 5 µs complete 200 a millisecond; with one
/// round a millisecond, one batch of 20 calls in about six took 20-35 µs a call instead
/// of 5, and with one round every 5 ms the stall came a fifth as often and lasted five
/// times as long (2x H200, eager bf16 sweeps at 2 ranks, 2026-11-28, 4d54bbc): the round's
/// cost grows with the calls it retires. Now a round copies the events it will look at
/// under the lock ([`InFlight::probe`]: up to [`PROBE`] per stream, from the front),
/// queries them with the lock released ([`InFlight::completed`]: from the front to the
/// first incomplete one, as before, so a call is retired only once its own event says it
/// is done, whatever order threads tracked calls in), and takes the lock again only to
/// retire them ([`InFlight::retire`]). Whether the caller waited for the lock or for the
/// driver busy with those queries, the measurement could not tell: this takes the lock
/// out; a round still makes a query per completed call.
pub(crate) const PROBE: usize = 512;

/// What a round looks at: per stream, its first calls (sequence number and completion).
pub(crate) type Probe<E> = Vec<(u64, Vec<(u64, E)>)>;

struct StreamCalls<E> {
    stream: u64,
    calls: VecDeque<(u64, E)>,
    head_since: Instant,
}

/// The calls in flight, per stream, in enqueue order.
pub(crate) struct InFlight<E> {
    streams: Vec<StreamCalls<E>>,
    /// Events of completed calls, for reuse (creating one costs a driver call).
    free: Vec<E>,
    next_seq: u64,
    pending: usize,
}

impl<E: Completion> Default for InFlight<E> {
    fn default() -> Self {
        Self { streams: Vec::new(), free: Vec::new(), next_seq: 1, pending: 0 }
    }
}

impl<E: Completion> InFlight<E> {
    /// A completed event to record the next call with, if one is free.
    pub(crate) fn take_free(&mut self) -> Option<E> {
        self.free.pop()
    }

    /// Registers a call enqueued on `stream`, whose completion `done` marks. Returns its
    /// sequence number (increasing over all streams).
    pub(crate) fn push(&mut self, stream: u64, done: E, now: Instant) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.pending += 1;
        match self.streams.iter_mut().find(|s| s.stream == stream) {
            Some(s) => {
                if s.calls.is_empty() {
                    s.head_since = now;
                }
                s.calls.push_back((seq, done));
            }
            None => self.streams.push(StreamCalls { stream, calls: VecDeque::from([(seq, done)]), head_since: now }),
        }
        seq
    }

    /// Retires every call seen complete at the front of its stream and returns the
    /// longest head time among the streams with calls left (`None`: nothing in flight):
    /// [`InFlight::probe`], [`InFlight::completed`] and [`InFlight::retire`] in one, for
    /// a caller that holds no lock others wait for (the tests).
    #[cfg(test)]
    pub(crate) fn poll(&mut self, now: Instant) -> Option<Duration> {
        let done = Self::completed(&self.probe());
        self.retire(&done, now)
    }

    /// The calls a round looks at (NOTE [completions off the lock]): per stream with
    /// calls, up to [`PROBE`] from its front, their completions cloned.
    pub(crate) fn probe(&self) -> Probe<E> {
        self.streams
            .iter()
            .filter(|s| !s.calls.is_empty())
            .map(|s| (s.stream, s.calls.iter().take(PROBE).map(|(seq, e)| (*seq, e.clone())).collect()))
            .collect()
    }

    /// Per stream of `probe`, the last sequence number of the calls seen complete from its
    /// front, up to the first that is not (none if the first is not): NOTE [completions off
    /// the lock]. Needs no lock.
    pub(crate) fn completed(probe: &Probe<E>) -> Vec<(u64, u64)> {
        let mut done = Vec::new();
        for (stream, calls) in probe {
            if let Some(seq) = calls.iter().take_while(|(_, e)| e.complete()).last().map(|(seq, _)| *seq) {
                done.push((*stream, seq));
            }
        }
        done
    }

    /// Retires, on each stream of `done`, the calls up to its sequence number (seen
    /// complete, [`InFlight::completed`]); returns the longest head time among the streams
    /// with calls left (`None`: nothing in flight). Calls tracked since the probe are
    /// newer, and stay.
    pub(crate) fn retire(&mut self, done: &[(u64, u64)], now: Instant) -> Option<Duration> {
        let mut longest: Option<Duration> = None;
        for s in &mut self.streams {
            let upto = done.iter().find(|(stream, _)| *stream == s.stream).map(|(_, seq)| *seq);
            let mut advanced = false;
            while let Some(upto) = upto
                && s.calls.front().is_some_and(|(seq, _)| *seq <= upto)
            {
                let (_, e) = s.calls.pop_front().expect("front exists");
                self.free.push(e);
                self.pending -= 1;
                advanced = true;
            }
            if advanced {
                s.head_since = now;
            }
            if !s.calls.is_empty() {
                let waited = now.saturating_duration_since(s.head_since);
                longest = Some(longest.map_or(waited, |l| l.max(waited)));
            }
        }
        // Streams come and go (a trainer may make many); keep only those with calls.
        self.streams.retain(|s| !s.calls.is_empty());
        longest
    }

    /// Calls registered and not yet seen complete.
    pub(crate) fn pending(&self) -> usize {
        self.pending
    }

    /// Whether every call registered before sequence number `seq` was seen complete.
    pub(crate) fn done_before(&self, seq: u64) -> bool {
        self.streams.iter().all(|s| s.calls.front().is_none_or(|(first, _)| *first >= seq))
    }

    /// The sequence number the next call will get.
    pub(crate) fn next_seq(&self) -> u64 {
        self.next_seq
    }
}

/// What the watchdog saw on one round.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Observation {
    /// The group has already failed (this watchdog or a caller recorded it).
    pub(crate) failed: bool,
    /// A kernel claimed the error record (a device-side wait timed out).
    pub(crate) record_claimed: bool,
    /// A peer whose socket hung up (the lowest such rank).
    pub(crate) hung_up: Option<usize>,
    /// The longest head time ([`InFlight::retire`]); `None` when nothing is in flight.
    pub(crate) head_wait: Option<Duration>,
}

/// What the watchdog does about an [`Observation`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Action {
    /// Nothing to do.
    Nothing,
    /// Fail the group: a kernel's wait timed out on the device.
    FailRecord,
    /// Fail the group: `peer` died and the calls in flight stopped moving.
    FailPeerGone(usize),
    /// Fail the group: a call has been its stream's head for longer than the limit;
    /// name the late peer from the pad.
    FailStuck,
    /// The group has failed and calls are still in flight: release their waits.
    Release,
}

/// The watchdog's rules (times are parameters so tests can use small ones).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Rules {
    /// A head time past this is a timeout: the group's timeout plus a second, so a
    /// kernel's own device-side timeout (which names the peer exactly) fires first.
    pub(crate) stuck_after: Duration,
    /// After a peer hung up, calls in flight that make no progress for this long are
    /// waiting for it. Work that does not need the dead peer (it exited cleanly after
    /// its last barrier) completes within it; a peer that is merely slow never hangs up.
    pub(crate) gone_grace: Duration,
}

impl Rules {
    pub(crate) fn for_timeout(timeout: Duration) -> Self {
        Self { stuck_after: timeout + Duration::from_secs(1), gone_grace: Duration::from_millis(50) }
    }

    /// The decision for one round. A failure is decided once; afterwards the watchdog
    /// only releases.
    pub(crate) fn decide(&self, o: &Observation) -> Action {
        let in_flight = o.head_wait.is_some();
        if o.failed {
            return if in_flight { Action::Release } else { Action::Nothing };
        }
        if o.record_claimed {
            return Action::FailRecord;
        }
        if let (Some(peer), Some(w)) = (o.hung_up, o.head_wait)
            && w >= self.gone_grace
        {
            return Action::FailPeerGone(peer);
        }
        if o.head_wait.is_some_and(|w| w > self.stuck_after) {
            return Action::FailStuck;
        }
        Action::Nothing
    }
}

/// How long the watchdog sleeps between rounds: short while calls are in flight (this
/// bounds how late a failure is noticed), long when idle (it is also woken when a call
/// is registered).
pub(crate) const fn poll_interval(in_flight: bool) -> Duration {
    if in_flight { Duration::from_millis(1) } else { Duration::from_millis(100) }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::rc::Rc;

    use super::*;

    #[derive(Clone, Default)]
    struct Flag(Rc<Cell<bool>>, Rc<Cell<usize>>);
    impl Completion for Flag {
        fn complete(&self) -> bool {
            self.1.set(self.1.get() + 1);
            self.0.get()
        }
    }
    impl Flag {
        fn set(&self) {
            self.0.set(true)
        }
    }

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn head_time_starts_when_a_call_reaches_the_head() {
        let t0 = Instant::now();
        let mut q = InFlight::default();
        let (a, b) = (Flag::default(), Flag::default());
        assert_eq!(q.push(7, a.clone(), t0), 1);
        assert_eq!(q.push(7, b.clone(), t0), 2);
        assert_eq!(q.poll(t0 + 10 * MS), Some(10 * MS));
        a.set();
        // `a` retired at 30 ms: `b` has been the head for 0 ms, not 30.
        assert_eq!(q.poll(t0 + 30 * MS), Some(Duration::ZERO));
        assert_eq!(q.poll(t0 + 35 * MS), Some(5 * MS));
        assert_eq!(q.pending(), 1);
        b.set();
        assert_eq!(q.poll(t0 + 40 * MS), None);
        assert_eq!(q.pending(), 0);
        // Both events are free for reuse.
        assert!(q.take_free().is_some() && q.take_free().is_some() && q.take_free().is_none());
    }

    #[test]
    fn a_round_retires_only_what_it_probed_and_saw_complete_from_the_front() {
        // NOTE [completions off the lock].
        let t0 = Instant::now();
        let mut q = InFlight::default();
        let queries = Rc::new(Cell::new(0));
        let flag = || Flag(Rc::default(), queries.clone());
        let calls: Vec<Flag> = (0..200).map(|_| flag()).collect();
        for c in &calls {
            q.push(7, c.clone(), t0);
        }
        calls.iter().for_each(Flag::set);
        let probe = q.probe();
        // Calls tracked after the probe (while the lock is released) stay, done or not.
        let late = flag();
        late.set();
        q.push(7, late.clone(), t0);
        let done = InFlight::completed(&probe);
        assert_eq!((done.clone(), queries.get()), (vec![(7, 200)], 200));
        drop(probe);
        assert_eq!(q.retire(&done, t0 + MS), Some(Duration::ZERO));
        assert_eq!((q.pending(), q.done_before(201), q.done_before(202)), (1, true, false));
        // The scan from the front stops at the first call not done, even with later
        // ones done (tracked out of order by two threads, say).
        let more: Vec<Flag> = (0..5).map(|_| flag()).collect();
        for c in &more {
            q.push(7, c.clone(), t0);
        }
        more[0].set();
        more[1].set();
        more[3].set();
        more[4].set(); // the newest done, behind one that is not
        let done = InFlight::completed(&q.probe());
        assert_eq!(done, vec![(7, 203)]); // late, more[0], more[1]
        q.retire(&done, t0 + 2 * MS);
        assert_eq!((q.pending(), q.done_before(204), q.done_before(205)), (3, true, false));
        assert!(q.free.iter().all(Completion::complete), "a retired call not complete");
        // Nothing done at the front: nothing retired, its head time goes on.
        let done = InFlight::completed(&q.probe());
        assert_eq!(done, vec![]);
        assert_eq!(q.retire(&done, t0 + 5 * MS), Some(3 * MS));
        // A round looks at PROBE calls a stream at most; the rest wait for the next.
        let mut q = InFlight::default();
        for _ in 0..PROBE + 10 {
            let f = flag();
            f.set();
            q.push(1, f, t0);
        }
        let done = InFlight::completed(&q.probe());
        assert_eq!(done, vec![(1, PROBE as u64)]);
        assert_eq!(q.retire(&done, t0), Some(Duration::ZERO));
        assert_eq!(q.poll(t0), None);
    }

    /// A completion shared between threads, for the concurrent round below.
    #[derive(Clone, Default)]
    struct Shared(std::sync::Arc<std::sync::atomic::AtomicBool>);
    impl Completion for Shared {
        fn complete(&self) -> bool {
            self.0.load(std::sync::atomic::Ordering::Acquire)
        }
    }

    #[test]
    fn rounds_off_the_lock_retire_only_completed_calls_while_calls_keep_coming() {
        // NOTE [completions off the lock]: a caller thread tracks 20 000 calls on two
        // streams, a "device" thread completes each stream's calls in order, and the
        // watchdog's rounds probe under the lock, query off it and retire under it. No
        // round may retire a call not yet complete, and every call is retired in the end.
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::{Arc, Mutex};
        const N: usize = 20_000;
        let q: Arc<Mutex<InFlight<Shared>>> = Arc::default();
        let issued: Arc<Mutex<Vec<Shared>>> = Arc::default();
        let done = Arc::new(AtomicBool::new(false));
        let caller = {
            let (q, issued) = (q.clone(), issued.clone());
            std::thread::spawn(move || {
                for i in 0..N {
                    let c = Shared::default();
                    issued.lock().unwrap().push(c.clone());
                    q.lock().unwrap().push((i % 2) as u64, c, Instant::now());
                }
            })
        };
        let device = {
            let (issued, done) = (issued.clone(), done.clone());
            std::thread::spawn(move || {
                let mut next = 0;
                while next < N {
                    let batch: Vec<Shared> = issued.lock().unwrap()[next..].iter().take(37).cloned().collect();
                    // Back to front: a later call seen done before an earlier one.
                    for c in batch.iter().rev() {
                        c.0.store(true, Ordering::Release);
                    }
                    next += batch.len();
                    std::thread::yield_now();
                }
                done.store(true, Ordering::Release);
            })
        };
        let mut retired = 0usize;
        let t0 = Instant::now();
        loop {
            let finished = done.load(Ordering::Acquire);
            let probe = q.lock().unwrap().probe();
            let seen = InFlight::completed(&probe);
            drop(probe);
            let mut g = q.lock().unwrap();
            let before = g.pending();
            g.retire(&seen, Instant::now());
            assert!(g.free.iter().all(Completion::complete), "a retired call was not complete");
            retired += before - g.pending();
            assert!(t0.elapsed() < Duration::from_secs(60), "the rounds did not retire every call");
            if finished && g.pending() == 0 && caller.is_finished() {
                break;
            }
        }
        caller.join().unwrap();
        device.join().unwrap();
        assert_eq!(retired, N);
        let g = q.lock().unwrap();
        assert!(g.done_before(N as u64 + 1) && g.streams.is_empty());
    }

    #[test]
    fn streams_are_judged_separately() {
        let t0 = Instant::now();
        let mut q = InFlight::default();
        let (stuck, moving1, moving2) = (Flag::default(), Flag::default(), Flag::default());
        q.push(1, stuck.clone(), t0);
        q.push(2, moving1.clone(), t0);
        q.push(2, moving2.clone(), t0 + 5 * MS);
        moving1.set();
        moving2.set();
        // Stream 2 drained; stream 1's head has waited since t0.
        assert_eq!(q.poll(t0 + 50 * MS), Some(50 * MS));
        // A later call on the idle stream 2 starts its own clock.
        q.push(2, Flag::default(), t0 + 60 * MS);
        assert_eq!(q.poll(t0 + 70 * MS), Some(70 * MS));
        assert!(!q.done_before(2));
        stuck.set();
        q.poll(t0 + 71 * MS);
        assert!(q.done_before(4) && !q.done_before(5));
    }

    #[test]
    fn drained_streams_are_forgotten() {
        let t0 = Instant::now();
        let mut q = InFlight::default();
        for stream in 0..1000u64 {
            let f = Flag::default();
            f.set();
            q.push(stream, f, t0);
        }
        assert_eq!(q.poll(t0), None);
        assert_eq!((q.pending(), q.streams.len()), (0, 0));
    }

    #[test]
    fn a_stuck_head_fails_only_after_the_limit() {
        let r = Rules { stuck_after: 100 * MS, gone_grace: 10 * MS };
        let mut o = Observation { head_wait: Some(100 * MS), ..Default::default() };
        assert_eq!(r.decide(&o), Action::Nothing);
        o.head_wait = Some(101 * MS);
        assert_eq!(r.decide(&o), Action::FailStuck);
        o.head_wait = None;
        assert_eq!(r.decide(&o), Action::Nothing);
        assert_eq!(Rules::for_timeout(Duration::from_secs(3)).stuck_after, Duration::from_secs(4));
    }

    #[test]
    fn a_dead_peer_fails_the_group_only_when_work_waits_for_it() {
        let r = Rules { stuck_after: 100 * MS, gone_grace: 10 * MS };
        // Idle when the peer left (it exited cleanly): nothing to fail.
        let mut o = Observation { hung_up: Some(3), ..Default::default() };
        assert_eq!(r.decide(&o), Action::Nothing);
        // In flight but still moving within the grace: not yet.
        o.head_wait = Some(9 * MS);
        assert_eq!(r.decide(&o), Action::Nothing);
        o.head_wait = Some(10 * MS);
        assert_eq!(r.decide(&o), Action::FailPeerGone(3));
        // A device-side timeout wins: it names the peer and the slot exactly.
        o.record_claimed = true;
        assert_eq!(r.decide(&o), Action::FailRecord);
    }

    #[test]
    fn after_failure_only_release_until_drained() {
        let r = Rules { stuck_after: 100 * MS, gone_grace: 10 * MS };
        let mut o = Observation {
            failed: true,
            record_claimed: true,
            hung_up: Some(1),
            head_wait: Some(Duration::from_secs(9)),
        };
        assert_eq!(r.decide(&o), Action::Release);
        o.head_wait = None;
        assert_eq!(r.decide(&o), Action::Nothing);
    }

    #[test]
    fn polling_is_fast_only_with_work_in_flight() {
        assert!(poll_interval(true) <= MS);
        assert!(poll_interval(false) >= 50 * MS);
    }
}
