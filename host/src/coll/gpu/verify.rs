//! The check of predicted peer addresses (NOTE [addresses predicted] in
//! `memory::mapped`), off the calling thread.
//!
//! An all-gather whose peers' addresses were predicted enqueues its copies at once, then
//! an event and a wait on this channel's verify word (a stream memory operation). The
//! verifier thread reads the peers' entries of the call from the mailbox (the peers
//! posted them when they made the call: it polls while a peer's host is behind, never
//! holding up another channel), and on the channel's stream of its own enqueues, in
//! call order: for each peer whose buffer was not
//! where this rank predicted, a copy from where it is, after the event (so after the
//! predicted copy it overwrites); then the write of the call's number into the verify
//! word, which releases the caller's stream. Nothing after the call reads its output
//! before that, and the peers' exit barrier waits for it, so a wrong prediction costs a
//! copy, never a wrong result. A predicted copy that missed read some other part of a
//! peer allocation this rank keeps open (pinned until the call completed): never a
//! freed mapping.
//!
//! Writes to a verify word come from its channel's stream in call order, so it only grows,
//! and a wait for call k passes only once every fix of calls up to k has landed. When a
//! check fails (a dead peer, a peer whose buffer cannot be shared any more) the group
//! fails, naming the rank, and the word is written anyway so that the streams drain; the
//! group then refuses further work.
//!
//! The verifier closes a mapping in one case only: a peer freed an allocation and made
//! the one this call reads at its address, which the driver opens only once the old
//! mapping is closed. It waits (polling) until nothing reads the old one (this call's
//! predicted copies done, no call in flight pinning it); `scripts/probes/
//! ipc_close_blocks.cu` checks that closing does not wait for the device, which may be
//! waiting for the verifier.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use lowcon_abi::pad::CHANNELS;

use crate::cuda::{Event, Stream, StreamPriority, raw};
use crate::error::{Error, Result};
use crate::memory::gpu::Drain;
use crate::memory::mapped::{Exchanged, PeerMaps, Verified};
use crate::memory::pinned::Pinned;
use crate::sync::gpu::GpuSync;

/// A predicted all-gather handed to the verifier.
pub(super) struct Job {
    pub(super) channel: u32,
    /// The call's number in the channel's address exchange.
    pub(super) seq: u64,
    /// The watchdog's number of the call.
    pub(super) call: u64,
    pub(super) ex: Exchanged,
    /// Recorded on the caller's stream after the predicted copies.
    pub(super) after: Event,
    /// Peer `p`'s shard lands at `out + p * shard`, `shard` bytes.
    pub(super) out: u64,
    pub(super) shard: usize,
}

struct Queue {
    jobs: VecDeque<Job>,
    stop: bool,
}

struct Shared {
    queue: Mutex<Queue>,
    wake: Condvar,
    /// One u32 per channel, in pinned memory: the last call whose check landed.
    words: Pinned,
    events: Mutex<Vec<Event>>,
}

/// A GPU group's mapped peer memory and the check of its predicted addresses.
pub(super) struct Mapping {
    /// Ordinary inputs that peers read in place (`map_ordinary`).
    pub(super) maps: Arc<PeerMaps>,
    pub(super) verifier: Verifier,
}

/// The verifier of a GPU group: its thread starts with the first predicted call.
pub(super) struct Verifier {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
    started: AtomicBool,
}

impl Verifier {
    pub(super) fn new(sync: &GpuSync) -> Result<Self> {
        let words = Pinned::new(&sync.device, 4 * CHANNELS as usize, Drain::new(&sync.core))?;
        // SAFETY: `words.host` is a live pinned allocation of 4 * CHANNELS bytes; nothing
        // reads it yet.
        unsafe { std::ptr::write_bytes(words.host.cast::<u8>(), 0, 4 * CHANNELS as usize) };
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue { jobs: VecDeque::new(), stop: false }),
            wake: Condvar::new(),
            words,
            events: Mutex::new(Vec::new()),
        });
        Ok(Self { shared, thread: Mutex::new(None), started: AtomicBool::new(false) })
    }

    /// An event for [`Job::after`] (reused once the verifier enqueued its wait).
    pub(super) fn event(&self, stream: &Stream) -> Result<Event> {
        let free = self.shared.events.lock().unwrap_or_else(|p| p.into_inner()).pop();
        match free {
            Some(e) => Ok(e),
            None => stream.event(false),
        }
    }

    /// Enqueues on `stream` the wait for the check of call `seq` of `channel`.
    ///
    /// # Safety
    /// A job for that call is handed to [`Verifier::submit`] after this.
    pub(super) unsafe fn wait(&self, stream: &Stream, channel: u32, seq: u64) -> Result<()> {
        let word = self.shared.words.dev + 4 * channel as u64;
        // SAFETY: a word of the live pinned allocation; the job's check writes it.
        unsafe { raw::mem_op::wait_geq_u32(stream.raw(), word, seq as u32) }
    }

    /// Hands a predicted call to the verifier thread (started on first use).
    pub(super) fn submit(&self, sync: &Arc<GpuSync>, maps: &Arc<PeerMaps>, job: Job) -> Result<()> {
        if !self.started.swap(true, Ordering::AcqRel) {
            let rank = sync.core.rank;
            let (shared, sync, maps) = (self.shared.clone(), sync.clone(), maps.clone());
            let t = std::thread::Builder::new()
                .name(format!("lowcon-verify-{rank}"))
                .spawn(move || run(&shared, &sync, &maps))
                .map_err(|e| {
                    crate::error::Error::GroupFailed(format!("rank {rank}: starting the verifier thread: {e}"))
                })?;
            *self.thread.lock().unwrap_or_else(|p| p.into_inner()) = Some(t);
        }
        let mut q = self.shared.queue.lock().unwrap_or_else(|p| p.into_inner());
        q.jobs.push_back(job);
        self.shared.wake.notify_one();
        Ok(())
    }
}

impl Drop for Verifier {
    /// Checks what is queued, then stops the thread.
    fn drop(&mut self) {
        self.shared.queue.lock().unwrap_or_else(|p| p.into_inner()).stop = true;
        self.shared.wake.notify_one();
        if let Some(t) = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = t.join();
        }
    }
}

/// The verifier thread: jobs of each channel in call order, channels independent (a
/// job whose peers have not posted yet holds up only later jobs of its channel: one
/// queue for all once let two ranks' channels wait on each other), on one stream per
/// channel. Never a driver call that waits for the device (the device may be waiting
/// for this thread).
fn run(shared: &Shared, sync: &GpuSync, maps: &PeerMaps) {
    let rank = sync.core.rank;
    if let Err(e) = sync.device.bind_to_thread() {
        crate::log::warn(&format!("rank {rank}: the verifier thread cannot use the device: {e}"));
    }
    let channels = CHANNELS as usize;
    let mut queues: Vec<VecDeque<(Job, Instant)>> = (0..channels).map(|_| VecDeque::new()).collect();
    let mut streams: Vec<Option<Stream>> = (0..channels).map(|_| None).collect();
    loop {
        {
            let mut q = shared.queue.lock().unwrap_or_else(|p| p.into_inner());
            let idle = queues.iter().all(VecDeque::is_empty);
            if idle && q.jobs.is_empty() {
                if q.stop {
                    return;
                }
                q = shared.wake.wait(q).unwrap_or_else(|p| p.into_inner());
            }
            let now = Instant::now();
            while let Some(j) = q.jobs.pop_front() {
                queues[j.channel as usize].push_back((j, now));
            }
        }
        let mut pending = false;
        for (ch, queue) in queues.iter_mut().enumerate() {
            while let Some((job, since)) = queue.front() {
                let stream = match &streams[ch] {
                    Some(s) => s,
                    None => match sync.device.stream(StreamPriority::High) {
                        Ok(s) => streams[ch].insert(s),
                        Err(e) => {
                            crate::log::warn(&format!("rank {rank}: the verifier's stream: {e}"));
                            std::thread::sleep(Duration::from_millis(1));
                            pending = true;
                            break;
                        }
                    },
                };
                match check(shared, sync, maps, stream, job, *since) {
                    Ok(false) => {
                        pending = true;
                        break;
                    }
                    Ok(true) => {}
                    Err(e) => {
                        // The group has failed (named in `e`); release the caller's stream.
                        crate::log::trace(rank, &format!("checking predicted addresses: {e}"));
                        let _ = sync.core.fail(e);
                        release(shared, stream, job);
                    }
                }
                let (job, _) = queue.pop_front().expect("looked at above");
                shared.events.lock().unwrap_or_else(|p| p.into_inner()).push(job.after);
            }
        }
        if pending {
            // Peers' hosts post their entries when they make the call: poll for them.
            let q = shared.queue.lock().unwrap_or_else(|p| p.into_inner());
            if q.jobs.is_empty() {
                let _ = shared.wake.wait_timeout(q, POLL).unwrap_or_else(|p| p.into_inner());
            }
        }
    }
}

/// How long the verifier waits for peers' entries between looks.
const POLL: Duration = Duration::from_micros(20);

/// Writes a failed job's verify word so that the caller's stream drains.
fn release(shared: &Shared, stream: &Stream, job: &Job) {
    let word = shared.words.dev + 4 * job.channel as u64;
    // SAFETY: a word of the live pinned allocation.
    if unsafe { raw::mem_op::write_u32(stream.raw(), word, job.seq as u32) }.is_err() {
        // Through the host mapping, after the earlier writes of this channel's stream
        // (which only waits for events the callers' streams record before their waits).
        let _ = stream.synchronize();
        // SAFETY: as above.
        unsafe { std::ptr::write_volatile(shared.words.host.cast::<u32>().add(job.channel as usize), job.seq as u32) };
    }
}

/// Checks one job and enqueues its fixes and its verify word; `Ok(false)` while a peer
/// has not posted its entry (an error once the group's timeout passed since `since`,
/// or at once when its process is gone).
fn check(shared: &Shared, sync: &GpuSync, maps: &PeerMaps, stream: &Stream, job: &Job, since: Instant) -> Result<bool> {
    let core = &sync.core;
    let done = |s: u64| sync.done_before(s);
    let copies_done = || job.after.is_complete().unwrap_or(false);
    let misses = match maps.verify(
        core,
        (job.channel, job.seq),
        &job.ex,
        job.call,
        "all-gather input",
        (&done, &copies_done),
    )? {
        Verified::Done(m) => m,
        Verified::Blocked(why) => {
            core.check_usable()?;
            if since.elapsed() > core.timeout {
                return Err(core.fail(Error::GroupFailed(format!(
                    "rank {}: {why}, for {:.0} s (NOTE [addresses predicted])",
                    core.rank,
                    core.timeout.as_secs_f64()
                ))));
            }
            return Ok(false);
        }
        Verified::Pending(p) => {
            core.check_usable()?;
            let what = format!("its all-gather input's address of call {} on channel {}", job.seq, job.channel);
            if core.mesh.peer_hung_up(p) {
                return Err(core.fail(Error::PeerGone {
                    rank: core.rank,
                    peer: p,
                    what: format!("waiting for {what}"),
                }));
            }
            if since.elapsed() > core.timeout {
                return Err(core.fail(Error::PeerTimeout {
                    rank: core.rank,
                    peer: p,
                    what,
                    secs: core.timeout.as_secs_f64(),
                }));
            }
            return Ok(false);
        }
    };
    // SAFETY: (the whole block) the destinations are the caller's output (live: the
    // caller's stream waits for the verify word before anything after the call); the
    // sources are peer allocations opened and kept open until the call completed
    // (`verify`); the peers' exit barriers wait for this rank's, which follows the word.
    unsafe {
        if !misses.is_empty() {
            stream.wait(&job.after)?;
            for m in &misses {
                raw::mem_op::copy(stream.raw(), job.out + (m.peer * job.shard) as u64, m.addr, job.shard)?;
            }
        }
        raw::mem_op::write_u32(stream.raw(), shared.words.dev + 4 * job.channel as u64, job.seq as u32)?;
    }
    Ok(true)
}
