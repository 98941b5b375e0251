//! The sentinel: a second thread per GPU group that makes no CUDA call at all, so that
//! a dead peer is still named when the watchdog itself is stuck inside the driver.
//!
//! NOTE [stuck watchdog]: the watchdog talks to the driver (event queries, a copy of
//! this rank's device pad on its side stream). While a caller's enqueue is blocked
//! because a stream's queue is full, such calls can wait inside the driver for that
//! enqueue, or their side-stream work can sit behind a stuck stream: seen on 2x H200
//! with 8-16 MB calls queued from Python, the pad copy blocked inside `cuMemcpyAsync`
//! on the legacy default stream, and on created streams its side-stream work never
//! ran. If the queue is full because the calls wait for a dead peer, nothing would ever
//! move: the stream cannot drain until the waits are released, and the watchdog that
//! releases them waits for the stream. The sentinel breaks that cycle with what needs
//! no driver:
//!
//! - the watchdog marks each step it takes ([`Stage`]); a step is stuck once it has
//!   lasted [`Step::stuck_after`]: 100 ms inside a driver call (driver calls take
//!   microseconds), 1 s for side-stream work that was enqueued but has not run (a
//!   hardware queue shared with a stream that waits, legitimately, can delay it);
//! - while the watchdog is stuck and a peer's socket has hung up, the sentinel fails
//!   the group with [`Error::PeerGone`] naming that peer and releases every wait with
//!   [`GpuSync::release_round`], which is driver-free: the error record's abort word
//!   (pinned host memory) makes kernel waits give up, and memop waits see their epochs
//!   stored into the host pad (NOTE [host pad]). The streams drain, the blocked enqueue
//!   returns, and the caller's next call, `check()` or `synchronize()` raises;
//! - while the watchdog has been stuck diagnosing a timeout (a peer alive but late) for
//!   [`GpuSync::SIDE_LIMIT`], the sentinel fails the group with the peer named from the
//!   host pad ([`GpuSync::diagnose_from_host`]) and releases likewise;
//! - once the group has failed, it repeats that release while the watchdog is stuck.
//!
//! The sentinel cannot check, as the watchdog does, that a wait really lacks the gone
//! peer's signal (that check is what the stuck watchdog was doing). So one case fails a
//! group whose calls would complete: the peer exited cleanly after its last collective,
//! and this rank's last calls sit behind so much of its own work that the driver blocks.
//! The peer is gone either way (no later collective could run), and the release only
//! hurries waits that are not yet satisfied, so no data changes; the caller is told of
//! a dead peer a little early.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::GpuSync;
use crate::error::{Error, Result};

/// How long a driver call of the watchdog may last before the sentinel calls it stuck.
pub(crate) const STUCK_AFTER: Duration = Duration::from_millis(100);

/// How long side-stream work the watchdog waits for may take before it counts as stuck.
const SIDE_STUCK_AFTER: Duration = Duration::from_secs(1);

/// How often the sentinel looks.
const TICK: Duration = Duration::from_millis(10);

/// What the watchdog is doing, for the sentinel and for diagnostics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub(crate) enum Step {
    /// Between rounds, or outside any driver call.
    Idle = 0,
    /// Querying the completion events of the calls in flight.
    Poll = 1,
    /// Copying this rank's device pad to the host, to see which signals are missing.
    ReadPad = 2,
    /// Waiting (bounded) for work on the side stream.
    SideWait = 3,
}

impl Step {
    fn from_code(c: u32) -> Self {
        match c {
            1 => Step::Poll,
            2 => Step::ReadPad,
            3 => Step::SideWait,
            _ => Step::Idle,
        }
    }

    /// How long this step may last before the sentinel calls the watchdog stuck.
    pub(crate) fn stuck_after(self) -> Duration {
        if self == Step::SideWait { SIDE_STUCK_AFTER } else { STUCK_AFTER }
    }

    pub(crate) fn describe(self) -> &'static str {
        match self {
            Step::Idle => "idle",
            Step::Poll => "querying the calls' completion events",
            Step::ReadPad => "copying this rank's signal pad to the host",
            Step::SideWait => "waiting for its side stream",
        }
    }
}

/// The watchdog's current step and since when (microseconds from `origin`), and since
/// when the oldest call in flight has been its stream's head, as of the watchdog's last
/// poll (`NO_HEAD`: nothing in flight).
pub(crate) struct Stage {
    origin: Instant,
    code: AtomicU32,
    since_us: AtomicU64,
    head_since_us: AtomicU64,
}

const NO_HEAD: u64 = u64::MAX;

impl Default for Stage {
    fn default() -> Self {
        Self {
            origin: Instant::now(),
            code: AtomicU32::new(0),
            since_us: AtomicU64::new(0),
            head_since_us: AtomicU64::new(NO_HEAD),
        }
    }
}

impl Stage {
    /// Marks the start of `step`; the returned guard marks its end.
    pub(crate) fn enter(&self, step: Step) -> StageGuard<'_> {
        let prev = self.code.load(Ordering::Relaxed);
        self.since_us.store(self.origin.elapsed().as_micros() as u64, Ordering::Relaxed);
        self.code.store(step as u32, Ordering::Release);
        StageGuard { stage: self, prev }
    }

    /// Publishes the longest head time the watchdog's poll just found (`None`: nothing
    /// in flight).
    pub(crate) fn set_head_wait(&self, wait: Option<Duration>) {
        let v = wait.map_or(NO_HEAD, |w| self.origin.elapsed().saturating_sub(w).as_micros() as u64);
        self.head_since_us.store(v, Ordering::Relaxed);
    }

    /// The longest head time now, from the last poll's (`None`: nothing was in flight).
    /// It keeps growing while the watchdog is stuck, which is the point.
    pub(crate) fn head_wait(&self) -> Option<Duration> {
        match self.head_since_us.load(Ordering::Relaxed) {
            NO_HEAD => None,
            us => Some(self.origin.elapsed().saturating_sub(Duration::from_micros(us))),
        }
    }

    /// The step under way and how long it has lasted (`None` when idle).
    pub(crate) fn current(&self) -> Option<(Step, Duration)> {
        let step = Step::from_code(self.code.load(Ordering::Acquire));
        if step == Step::Idle {
            return None;
        }
        let since = Duration::from_micros(self.since_us.load(Ordering::Relaxed));
        Some((step, self.origin.elapsed().saturating_sub(since)))
    }
}

/// Ends a step (restoring the enclosing one, whose clock restarts).
pub(crate) struct StageGuard<'a> {
    stage: &'a Stage,
    prev: u32,
}

impl Drop for StageGuard<'_> {
    fn drop(&mut self) {
        self.stage.since_us.store(self.stage.origin.elapsed().as_micros() as u64, Ordering::Relaxed);
        self.stage.code.store(self.prev, Ordering::Release);
    }
}

/// What the sentinel does about one look: pure, so CI tests it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    Nothing,
    /// Fail the group: `peer` hung up while the watchdog is stuck.
    FailPeerGone(usize),
    /// Fail the group: the watchdog is stuck diagnosing a timeout; name the late peer
    /// from the host pad.
    FailLate,
    /// The group has failed and the watchdog is stuck: release the waits again.
    Abort,
}

/// The verdict on the watchdog's current step (`stuck`: the step and how long it has
/// lasted), whether the group has failed, which peer hung up, whether the watchdog is
/// diagnosing a timeout, and whether a call has been its stream's head for longer than
/// the watchdog's timeout rule plus [`GpuSync::SIDE_LIMIT`] (`late`: the watchdog
/// should have failed the group by then, so it got stuck before it could).
pub(crate) fn judge(
    stuck: Option<(Step, Duration)>,
    failed: bool,
    hung_up: Option<usize>,
    diagnosing: bool,
    late: bool,
) -> Verdict {
    let Some((step, lasted)) = stuck else { return Verdict::Nothing };
    if lasted < step.stuck_after() {
        return Verdict::Nothing;
    }
    if failed {
        return Verdict::Abort;
    }
    if let Some(peer) = hung_up {
        return Verdict::FailPeerGone(peer);
    }
    if late || (diagnosing && lasted >= GpuSync::SIDE_LIMIT) {
        return Verdict::FailLate;
    }
    Verdict::Nothing
}

/// The running sentinel; dropping it stops and joins the thread.
pub(crate) struct Sentinel {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Sentinel {
    pub(crate) fn spawn(sync: Arc<GpuSync>) -> Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let (s, flag) = (sync.clone(), stop.clone());
        let thread = std::thread::Builder::new()
            .name(format!("lowcon-sentry-{}", sync.core.rank))
            .spawn(move || {
                crate::cuda::raw::capture::relax_this_thread();
                s.guard(&flag)
            })
            .map_err(|e| Error::Rendezvous(format!("rank {}: cannot start the sentinel: {e}", sync.core.rank)))?;
        Ok(Self { stop, thread: Some(thread) })
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl GpuSync {
    /// The sentinel thread's body: no CUDA call in it.
    fn guard(&self, stop: &AtomicBool) {
        let rank = self.core.rank;
        let mut reported: Option<Step> = None;
        while !stop.load(Ordering::Acquire) {
            std::thread::sleep(TICK);
            let stuck = self.watch_step.current();
            let hung_up = match stuck {
                Some((step, d)) if d >= step.stuck_after() => {
                    (0..self.core.world).filter(|&p| p != rank).find(|&p| self.core.mesh.peer_hung_up(p))
                }
                _ => None,
            };
            if let Some((step, d)) = stuck
                && d >= step.stuck_after()
                && reported != Some(step)
            {
                reported = Some(step);
                crate::log::trace(
                    rank,
                    &format!(
                        "the watchdog has been {} for {} ms (inside the CUDA driver)",
                        step.describe(),
                        d.as_millis()
                    ),
                );
            }
            if stuck.is_none() {
                reported = None;
            }
            let diagnosing = self.diagnosing.load(Ordering::Acquire);
            let late = self.watch_step.head_wait().is_some_and(|w| w > self.rules.stuck_after + GpuSync::SIDE_LIMIT);
            match judge(stuck, self.core.is_failed(), hung_up, diagnosing, late) {
                Verdict::Nothing => {}
                Verdict::FailPeerGone(peer) => {
                    let step = stuck.map_or("", |(s, _)| s.describe());
                    self.core.fail(Error::PeerGone {
                        rank,
                        peer,
                        what: format!(
                            "its signals were awaited on the GPU (found by the sentinel: the watchdog was stuck {step} \
                             in the CUDA driver, behind a full stream queue)"
                        ),
                    });
                    self.release_round();
                }
                Verdict::FailLate => {
                    let step = stuck.map_or("", |(s, _)| s.describe());
                    self.core.fail(
                        self.diagnose_from_host(&format!("found by the sentinel: the watchdog was stuck {step}")),
                    );
                    self.release_round();
                }
                Verdict::Abort => {
                    self.release_round();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn only_a_stuck_watchdog_with_a_hung_up_peer_fails_the_group() {
        let stuck = Some((Step::ReadPad, 150 * MS));
        assert_eq!(judge(stuck, false, Some(1), false, false), Verdict::FailPeerGone(1));
        // Nobody hung up: a long driver call alone (a slow GPU) is the watchdog's to judge.
        assert_eq!(judge(stuck, false, None, false, false), Verdict::Nothing);
        // Not stuck long enough, or idle.
        assert_eq!(judge(Some((Step::Poll, 99 * MS)), false, Some(1), false, false), Verdict::Nothing);
        assert_eq!(judge(None, false, Some(1), false, false), Verdict::Nothing);
        // Already failed: keep releasing.
        assert_eq!(judge(stuck, true, Some(1), false, false), Verdict::Abort);
        assert_eq!(judge(None, true, Some(1), false, false), Verdict::Nothing);
    }

    #[test]
    fn side_stream_work_gets_longer_than_a_driver_call() {
        // Enqueued side-stream work may wait behind a stream that waits legitimately.
        assert_eq!(judge(Some((Step::SideWait, 500 * MS)), false, Some(1), false, false), Verdict::Nothing);
        assert_eq!(judge(Some((Step::SideWait, 1000 * MS)), false, Some(1), false, false), Verdict::FailPeerGone(1));
    }

    #[test]
    fn a_stuck_timeout_diagnosis_is_taken_over_after_the_side_limit() {
        let at = |d| Some((Step::ReadPad, d));
        assert_eq!(judge(at(GpuSync::SIDE_LIMIT - MS), false, None, true, false), Verdict::Nothing);
        assert_eq!(judge(at(GpuSync::SIDE_LIMIT), false, None, true, false), Verdict::FailLate);
        // Not diagnosing: a stuck driver call without a hung-up peer is left alone.
        assert_eq!(judge(at(GpuSync::SIDE_LIMIT), false, None, false, false), Verdict::Nothing);
        // A hung-up peer is the clearer verdict.
        assert_eq!(judge(at(GpuSync::SIDE_LIMIT), false, Some(2), true, false), Verdict::FailPeerGone(2));
        // Side-stream work at 1.5 s while diagnosing: not yet.
        assert_eq!(judge(Some((Step::SideWait, 1500 * MS)), false, None, true, false), Verdict::Nothing);
        // Failed already: release, whatever else holds.
        assert_eq!(judge(at(GpuSync::SIDE_LIMIT), true, None, true, true), Verdict::Abort);
    }

    #[test]
    fn a_watchdog_stuck_before_its_timeout_rule_is_taken_over() {
        // Stuck in an event query while a live peer is late: no hang-up, no diagnosis.
        let poll = Some((Step::Poll, 150 * MS));
        assert_eq!(judge(poll, false, None, false, false), Verdict::Nothing);
        assert_eq!(judge(poll, false, None, false, true), Verdict::FailLate);
        // Late calls but a watchdog that is not stuck: the watchdog judges.
        assert_eq!(judge(None, false, None, false, true), Verdict::Nothing);
    }

    #[test]
    fn head_waits_keep_growing_while_the_watchdog_is_away() {
        let s = Stage::default();
        assert_eq!(s.head_wait(), None);
        // A head wait never predates the group (the stage's origin).
        std::thread::sleep(6 * MS);
        s.set_head_wait(Some(5 * MS));
        std::thread::sleep(3 * MS);
        assert!(s.head_wait().expect("published") >= 8 * MS);
        s.set_head_wait(None);
        assert_eq!(s.head_wait(), None);
    }

    #[test]
    fn stages_nest_and_time_themselves() {
        let s = Stage::default();
        assert_eq!(s.current(), None);
        {
            let _a = s.enter(Step::ReadPad);
            {
                let _b = s.enter(Step::SideWait);
                assert_eq!(s.current().map(|c| c.0), Some(Step::SideWait));
            }
            std::thread::sleep(3 * MS);
            let (step, lasted) = s.current().expect("in a step");
            assert_eq!(step, Step::ReadPad);
            assert!(lasted >= 2 * MS, "{lasted:?}");
        }
        assert_eq!(s.current(), None);
    }
}
