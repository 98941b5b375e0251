//! The check of predicted peer addresses (NOTE [addresses predicted] in
//! `memory::mapped`), off the calling thread.
//!
//! An all-gather whose peers' addresses were predicted enqueues its copies at once, then
//! an event and a wait on this channel's verify word (a stream memory operation). The
//! verifier thread reads the peers' entries of the call from the mailbox (the peers
//! posted them when they made the call: a wait only while a peer's host is behind),
//! and on its own stream enqueues, in call order: for each peer whose buffer was not
//! where this rank predicted, a copy from where it is, after the event (so after the
//! predicted copy it overwrites); then the write of the call's number into the verify
//! word, which releases the caller's stream. Nothing after the call reads its output
//! before that, and the peers' exit barrier waits for it, so a wrong prediction costs a
//! copy, never a wrong result. A predicted copy that missed read some other part of a
//! peer allocation this rank keeps open (pinned until the call completed): never a
//! freed mapping.
//!
//! Writes to a verify word come from one stream in call order, so the word only grows,
//! and a wait for call k passes only once every fix of calls up to k has landed. When a
//! check fails (a dead peer, a peer whose buffer cannot be shared any more) the group
//! fails, naming the rank, and the word is written anyway so that the streams drain; the
//! group then refuses further work.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use lowcon_abi::pad::CHANNELS;

use crate::cuda::{Event, Stream, StreamPriority, raw};
use crate::error::Result;
use crate::memory::gpu::Drain;
use crate::memory::mapped::{Exchanged, PeerMaps};
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
            let stream = sync.device.stream(StreamPriority::High)?;
            let rank = sync.core.rank;
            let (shared, sync, maps) = (self.shared.clone(), sync.clone(), maps.clone());
            let t = std::thread::Builder::new()
                .name(format!("lowcon-verify-{rank}"))
                .spawn(move || run(&shared, &sync, &maps, &stream))
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

fn run(shared: &Shared, sync: &GpuSync, maps: &PeerMaps, stream: &Stream) {
    let rank = sync.core.rank;
    if let Err(e) = sync.device.bind_to_thread() {
        crate::log::warn(&format!("rank {rank}: the verifier thread cannot use the device: {e}"));
    }
    loop {
        let job = {
            let mut q = shared.queue.lock().unwrap_or_else(|p| p.into_inner());
            loop {
                if let Some(j) = q.jobs.pop_front() {
                    break j;
                }
                if q.stop {
                    return;
                }
                q = shared.wake.wait(q).unwrap_or_else(|p| p.into_inner());
            }
        };
        if let Err(e) = check(shared, sync, maps, stream, &job) {
            // The group has failed (named in `e`); release the caller's stream.
            crate::log::trace(rank, &format!("checking predicted addresses: {e}"));
            let _ = sync.core.fail(e);
            let word = shared.words.dev + 4 * job.channel as u64;
            // SAFETY: a word of the live pinned allocation.
            if unsafe { raw::mem_op::write_u32(stream.raw(), word, job.seq as u32) }.is_err() {
                let _ = stream.synchronize();
                // SAFETY: as above, through the host mapping; the stream drained, so no
                // earlier write of ours lands after this one.
                unsafe {
                    std::ptr::write_volatile(shared.words.host.cast::<u32>().add(job.channel as usize), job.seq as u32)
                };
            }
        }
        shared.events.lock().unwrap_or_else(|p| p.into_inner()).push(job.after);
    }
}

/// Checks one job and enqueues its fixes and its verify word.
fn check(shared: &Shared, sync: &GpuSync, maps: &PeerMaps, stream: &Stream, job: &Job) -> Result<()> {
    let done = |s: u64| sync.done_before(s);
    let misses = maps.verify(&sync.core, job.channel, job.seq, &job.ex, job.call, "all-gather input", &done)?;
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
        raw::mem_op::write_u32(stream.raw(), shared.words.dev + 4 * job.channel as u64, job.seq as u32)
    }
}
