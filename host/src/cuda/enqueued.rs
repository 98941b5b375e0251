//! NOTE [enqueue clock]: what the host spends handing work to the driver, by kind.
//!
//! A collective call's host time (NOTE [host time] in `rendezvous`) is its checks and plan,
//! its host rendezvous, and its enqueues: kernel launches, stream memory operations (the
//! memop waits and signals), copies (and fills) and event records and waits. The driver
//! calls that enqueue are counted and timed here, per thread: every enqueue of a
//! collective call is made on the thread that calls it, so a caller that reads
//! [`totals`] around its call gets that call's enqueues (`lowcon.enqueue_clock()` in
//! Python; `fsdp2_profile.py` splits each FSDP2 hook so). Two clock reads per driver
//! call, against the 1-5 µs each takes.

use std::cell::Cell;
use std::time::Instant;

/// A kind of enqueue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Enqueue {
    /// Kernel launches.
    Launch,
    /// Stream memory operations: waits and writes, one per batch.
    Memop,
    /// Device copies and fills, one per batch.
    Copy,
    /// Event records and stream waits on events.
    Event,
}

impl Enqueue {
    /// Every kind, in [`totals`]' order.
    pub const ALL: [Enqueue; 4] = [Enqueue::Launch, Enqueue::Memop, Enqueue::Copy, Enqueue::Event];

    /// The kind's name: "launch", "memop", "copy", "event".
    pub fn name(self) -> &'static str {
        match self {
            Enqueue::Launch => "launch",
            Enqueue::Memop => "memop",
            Enqueue::Copy => "copy",
            Enqueue::Event => "event",
        }
    }
}

thread_local! {
    /// Calls and nanoseconds per kind, this thread's.
    static CLOCK: Cell<[(u64, u64); 4]> = const { Cell::new([(0, 0); 4]) };
}

/// Adds its lifetime to one kind's counters when dropped.
pub(crate) struct Timed {
    kind: Enqueue,
    start: Instant,
}

impl Drop for Timed {
    fn drop(&mut self) {
        let ns = u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX);
        CLOCK.with(|c| {
            let mut v = c.get();
            let e = &mut v[self.kind as usize];
            *e = (e.0 + 1, e.1.saturating_add(ns));
            c.set(v);
        });
    }
}

/// An enqueue of `kind` starts: counted and timed until the guard drops.
pub(crate) fn time(kind: Enqueue) -> Timed {
    Timed { kind, start: Instant::now() }
}

/// This thread's enqueues so far: (calls, nanoseconds) per kind, in [`Enqueue::ALL`]'s order.
pub fn totals() -> [(u64, u64); 4] {
    CLOCK.with(Cell::get)
}

/// NOTE [host phases]: the rest of a GPU collective call's host time, by what the library
/// does besides enqueueing. Each phase is timed exclusive of the enqueues made inside
/// it (those are the enqueue clock's), so the enqueues, the phases and what neither
/// covers add up to the call: `hook_cost.py` prints the three, per call. Per thread, as
/// the enqueue clock; two clock reads and one read of that clock per phase. Timed on the
/// GPU all-gather and reduce-scatter (`coll/gpu.rs`): every call's checks and plan; the
/// exchange, the channel's preparation, the verifier's hand-off and the registration
/// where the call runs them there (the `ll` calls and the packed wire's, which return
/// early, report checks and plan only); and the Python binding's conversion of a call's
/// tensors (`crates/lowcon-py`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// A binding's conversion of its arguments into the library's call (the Python
    /// binding's tensor views and stream; `crates/lowcon-py`), before the call.
    Binding,
    /// The call's checks before its plan (checked calls, sizes, buffers, options).
    Checks,
    /// The planner's decision.
    Plan,
    /// The addresses of mapped ordinary memory: this rank's entry and the peers'
    /// (predicted, or a host rendezvous: NOTE [addresses predicted]).
    Exchange,
    /// The channel's workspace, events and streams made ready for the call (a workspace
    /// that grows is a collective allocation: a host rendezvous).
    Prepare,
    /// A predicted call's check armed and handed to the verifier thread.
    Verify,
    /// The call's registration with the watchdog (NOTE [host time] counts the call).
    Finish,
}

impl Phase {
    /// Every phase, in [`phase_totals`]' order.
    pub const ALL: [Phase; 7] =
        [Phase::Binding, Phase::Checks, Phase::Plan, Phase::Exchange, Phase::Prepare, Phase::Verify, Phase::Finish];

    /// The phase's name: "binding", "checks", "plan", "exchange", "prepare", "verify",
    /// "finish".
    pub fn name(self) -> &'static str {
        match self {
            Phase::Binding => "binding",
            Phase::Checks => "checks",
            Phase::Plan => "plan",
            Phase::Exchange => "exchange",
            Phase::Prepare => "prepare",
            Phase::Verify => "verify",
            Phase::Finish => "finish",
        }
    }
}

thread_local! {
    /// Calls and nanoseconds per phase, this thread's.
    static PHASES: Cell<[(u64, u64); 7]> = const { Cell::new([(0, 0); 7]) };
}

/// This thread's enqueue nanoseconds so far, all kinds.
fn enqueue_ns() -> u64 {
    totals().iter().fold(0u64, |a, e| a.saturating_add(e.1))
}

/// Adds its lifetime, less the enqueues made meanwhile, to one phase when dropped.
pub struct PhaseTimed {
    phase: Phase,
    start: Instant,
    enqueued: u64,
}

impl Drop for PhaseTimed {
    fn drop(&mut self) {
        let ns = u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let own = ns.saturating_sub(enqueue_ns().saturating_sub(self.enqueued));
        PHASES.with(|c| {
            let mut v = c.get();
            let e = &mut v[self.phase as usize];
            *e = (e.0 + 1, e.1.saturating_add(own));
            c.set(v);
        });
    }
}

/// A phase starts: timed until the guard drops, less the enqueues inside it.
pub fn phase(phase: Phase) -> PhaseTimed {
    PhaseTimed { phase, start: Instant::now(), enqueued: enqueue_ns() }
}

/// This thread's phases so far: (calls, nanoseconds) per phase, in [`Phase::ALL`]'s order.
pub fn phase_totals() -> [(u64, u64); 7] {
    PHASES.with(Cell::get)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_counts_its_own_enqueues_on_this_thread_only() {
        let before = totals();
        {
            let _a = time(Enqueue::Copy);
            let _b = time(Enqueue::Copy);
            let _c = time(Enqueue::Event);
        }
        let after = totals();
        let delta: Vec<u64> = (0..4).map(|k| after[k].0 - before[k].0).collect();
        assert_eq!(delta, [0, 0, 2, 1]);
        assert!(after[Enqueue::Copy as usize].1 >= before[Enqueue::Copy as usize].1);
        // Another thread's enqueues are its own.
        std::thread::spawn(|| drop(time(Enqueue::Launch))).join().unwrap();
        assert_eq!(totals()[Enqueue::Launch as usize].0, after[Enqueue::Launch as usize].0);
        let names: Vec<_> = Enqueue::ALL.iter().map(|k| k.name()).collect();
        assert_eq!(names, ["launch", "memop", "copy", "event"]);
    }

    #[test]
    fn a_phase_counts_its_time_less_the_enqueues_inside_it() {
        let before = phase_totals();
        {
            let _p = phase(Phase::Exchange);
            std::thread::sleep(std::time::Duration::from_millis(20));
            let _e = time(Enqueue::Launch);
            std::thread::sleep(std::time::Duration::from_millis(60));
        }
        let after = phase_totals();
        let x = Phase::Exchange as usize;
        let (calls, ns) = (after[x].0 - before[x].0, after[x].1 - before[x].1);
        assert_eq!(calls, 1);
        // 20 ms of its own, 60 inside an enqueue: the phase keeps the 20 (and scheduling noise).
        assert!((20_000_000..55_000_000).contains(&ns), "{ns} ns");
        let others: Vec<u64> = (0..7).filter(|&k| k != x).map(|k| after[k].0 - before[k].0).collect();
        assert_eq!(others, [0, 0, 0, 0, 0, 0]);
        let names: Vec<_> = Phase::ALL.iter().map(|k| k.name()).collect();
        assert_eq!(names, ["binding", "checks", "plan", "exchange", "prepare", "verify", "finish"]);
        assert!(Phase::ALL.iter().enumerate().all(|(i, p)| *p as usize == i));
    }
}
