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

/// Something that completes: a CUDA event in the library, a flag in the tests.
pub(crate) trait Completion {
    /// Whether the work before it has finished. A query error counts as finished (the
    /// error resurfaces on the stream itself).
    fn complete(&self) -> bool;
}

impl Completion for crate::cuda::Event {
    fn complete(&self) -> bool {
        self.is_complete().unwrap_or(true)
    }
}

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
    /// longest head time among the streams with calls left (`None`: nothing in flight).
    pub(crate) fn poll(&mut self, now: Instant) -> Option<Duration> {
        let mut longest: Option<Duration> = None;
        for s in &mut self.streams {
            let mut advanced = false;
            while s.calls.front().is_some_and(|(_, e)| e.complete()) {
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
    /// The longest head time ([`InFlight::poll`]); `None` when nothing is in flight.
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
    struct Flag(Rc<Cell<bool>>);
    impl Completion for Flag {
        fn complete(&self) -> bool {
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
