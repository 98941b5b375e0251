//! The check of predicted peer addresses (NOTE [addresses predicted] in
//! `memory::mapped`), off the calling thread.
//!
//! An all-gather whose peers' addresses were predicted enqueues its copies at once, then
//! an event and a one-thread kernel that waits for this channel's verify word (a word of
//! pinned host memory). The verifier thread reads the peers' entries of the call from
//! the mailbox (the peers posted them when they made the call: it polls while a peer's
//! host is behind, never holding up another channel). Where every prediction held, it
//! writes the call's number into the word from the host. Otherwise it enqueues on the
//! channel's stream of its own, after the event (so after the predicted copies they
//! overwrite), a copy of each shard from where it is, records an event, and writes the
//! word once that event completed. Nothing after the call reads its output before the
//! word, and the peers' exit barriers wait for this rank's, which follows it: a wrong
//! prediction costs a copy, never a wrong result. A predicted copy that missed read some
//! other part of a peer allocation this rank keeps open (pinned until the call
//! completed), never a closed mapping.
//!
//! Why a kernel waits and the host writes: a stream memory operation that waits holds up
//! every stream sharing its hardware queue (`CUDA_DEVICE_MAX_CONNECTIONS`), the
//! verifier's among them, and a word written from a stream could sit behind it: both
//! deadlocked at 2 ranks sharing a GPU under MPS. A spinning kernel does not hold up its
//! queue, and a host write goes through none.
//!
//! NOTE [nothing between the wait and its job]. A kernel that waits for this thread's
//! next step waits for ever (until its timeout fails the group) if the thread is held up
//! on the way, and many driver calls can hold a thread up while the device is busy
//! (making a stream or an event, an enqueue behind a full queue, a driver lock that a
//! synchronous call of another thread holds). So nothing comes between the wait and the job: `arm`
//! makes what the job needs (the fix stream and the two events, by the caller) and
//! records `after`, `wait` launches the kernel, and `submit` hands the job over at once,
//! before the call's exit barrier and its registration with the watchdog (a launch that
//! fails submits nothing: no fix lands after the call returned its error). The
//! watchdog's number of the call is known only after that, so it reaches the job through
//! a `CallNumber`: a mapping the verifier opens for a missed prediction stays pinned until
//! then. Seen at 4 ranks sharing one H100 (2026-11-28), when the job was submitted after
//! the call was registered: `coll-mapped`'s two threads stalled 2 runs in 6, rank 0
//! handing channel 5's call 48 to its verifier 60 s after call 47 was released, the
//! moment its wait kernel timed out, with every other rank waiting for it (which driver
//! call held the thread up is not known).
//!
//! Each channel's jobs run in call order, so its word only grows. When a check fails (a
//! dead peer, a peer whose buffer cannot be shared any more) the group fails, naming the
//! rank, and the word is written anyway so that the streams drain; the group then
//! refuses further work. The verifier never closes a mapping: closing waits for the
//! device (`scripts/probes/ipc_close_blocks.cu`: 3 s while a kernel was parked), which
//! may be waiting for the verifier. So a peer that frees an allocation and makes the one
//! a predicted call reads at the same address, which the driver opens only once the old
//! mapping is closed, fails the group, named (calls that rank made before keep their
//! own allocation in the prediction's key, so the usual `empty_cache()` on every rank
//! makes new calls, not wrong predictions).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use lowcon_abi::pad::CHANNELS;

use crate::cuda::raw::mem_op::Op;
use crate::cuda::{Event, Stream, StreamPriority, raw};
use crate::error::{Error, Result};
use crate::memory::gpu::Drain;
use crate::memory::mapped::{CallNumber, PeerMaps, Prediction, Verified};
use crate::memory::pinned::Pinned;
use crate::sync::gpu::GpuSync;

/// A predicted call handed to the verifier.
pub(super) struct Job {
    pub(super) channel: u32,
    /// The call's number in the channel's address exchange.
    pub(super) seq: u64,
    /// The watchdog's number of the call, once registered.
    pub(super) call: Arc<CallNumber>,
    pub(super) prediction: Prediction,
    pub(super) armed: Armed,
    /// What a missed prediction's fix does.
    pub(super) fix: Fix,
}

/// How a predicted call's misses are fixed before its word is written.
pub(super) enum Fix {
    /// An all-gather's copies: peer `p`'s shard lands at `out + p * shard`, `shard`
    /// bytes, copied again from where it is (with the plan's `copy_hint`).
    Shards { out: u64, shard: usize, hint: bool },
    /// A reduce-scatter read in place (NOTE [bf16 input read in place]): peer `p`'s
    /// address is the `u64` at `table + 8 * p` in this rank's workspace, which the
    /// kernel reads only after the word; a miss rewrites it.
    Table { table: u64 },
}

impl Fix {
    /// The buffer whose address was predicted, in errors.
    fn what(&self) -> &'static str {
        match self {
            Fix::Shards { .. } => "all-gather input",
            Fix::Table { .. } => "reduce-scatter input",
        }
    }
}

/// What [`Verifier::arm`] made for a job.
pub(super) struct Armed {
    /// Recorded on the caller's stream after the predicted copies.
    after: Event,
    /// Recorded on `fix`, the channel's stream of fixes, after them.
    fixed: Event,
    fix: Stream,
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

/// How a GPU group reads its peers' memory: the mapped peer memory and the check of its
/// predicted addresses (boxed, so that `Group`'s variants stay alike in size).
pub(super) struct Mapping {
    /// Ordinary inputs that peers read in place (`map_ordinary`).
    pub(super) maps: Arc<PeerMaps>,
    pub(super) verifier: Verifier,
}

/// The verifier of a GPU group: its thread starts with the first predicted call.
pub(super) struct Verifier {
    shared: Arc<Shared>,
    /// Per channel, the stream of the verifier's fixes (made by callers: `arm`).
    fix_streams: Mutex<Vec<Option<Stream>>>,
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
        let fix_streams = Mutex::new(vec![None; CHANNELS as usize]);
        Ok(Self { shared, fix_streams, thread: Mutex::new(None), started: AtomicBool::new(false) })
    }

    /// Enqueues on `stream`, after a call's predicted copies, what the verifier's job
    /// needs: an event (`Armed::after`). Returns the pieces of the job, whose fixes'
    /// stream and event are made here, by the caller, never by the verifier (the driver
    /// may hold up their creation while the device waits: seen under MPS,
    /// `cuStreamCreate` waited 60 s for the caller's wait kernel). Then the wait for it
    /// ([`Verifier::wait`]) and at once the job ([`Verifier::submit`]: NOTE [nothing
    /// between the wait and its job]).
    pub(super) fn arm(&self, sync: &GpuSync, stream: &Stream, channel: u32) -> Result<Armed> {
        let fix = {
            let mut streams = self.fix_streams.lock().unwrap_or_else(|p| p.into_inner());
            match &streams[channel as usize] {
                Some(s) => s.clone(),
                None => streams[channel as usize].insert(sync.device.stream(StreamPriority::High)?).clone(),
            }
        };
        let (after, fixed) = (self.event(stream)?, self.event(stream)?);
        stream.record(&after)?;
        Ok(Armed { after, fixed, fix })
    }

    /// Enqueues on `stream` a one-thread kernel that waits for the check of call `seq`
    /// of `channel`.
    ///
    /// # Safety
    /// The job of call `seq` of `channel` is submitted next, with no driver call between
    /// (NOTE [nothing between the wait and its job]).
    pub(super) unsafe fn wait(&self, sync: &GpuSync, stream: &Stream, channel: u32, seq: u64) -> Result<()> {
        let word = self.shared.words.dev + 4 * channel as u64;
        // SAFETY: a word of the live pinned allocation (it lives as long as the group's
        // collectives, which drain before it goes); the job's check writes it.
        unsafe { sync.device.kernels()?.wait_word(stream, sync.pad_args(), word, seq as u32, channel) }
    }

    /// The device address of `channel`'s verify word (pinned memory): what a kernel that
    /// reads predicted addresses waits for (`lowcon_rs_direct_bf16_f32`'s gate).
    pub(super) fn word(&self, channel: u32) -> u64 {
        self.shared.words.dev + 4 * channel as u64
    }

    /// An event from the pool (events return to it once their job is done).
    fn event(&self, stream: &Stream) -> Result<Event> {
        let free = self.shared.events.lock().unwrap_or_else(|p| p.into_inner()).pop();
        match free {
            Some(e) => Ok(e),
            None => stream.event(false),
        }
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
                    // Not started: the next job tries again, rather than queue for no thread.
                    self.started.store(false, Ordering::Release);
                    Error::GroupFailed(format!("rank {rank}: starting the verifier thread: {e}"))
                })?;
            *self.thread.lock().unwrap_or_else(|p| p.into_inner()) = Some(t);
        }
        crate::log::trace(sync.core.rank, &format!("verifier: channel {} call {} submitted", job.channel, job.seq));
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
/// queue for all once let two ranks' channels wait on each other), the fixes on the
/// channel's stream. It makes no driver call that creates anything or that may wait for
/// the device (which may be waiting for it): enqueues, event queries and opening peer
/// allocations only.
fn run(shared: &Shared, sync: &GpuSync, maps: &PeerMaps) {
    let rank = sync.core.rank;
    if let Err(e) = sync.device.bind_to_thread() {
        crate::log::warn(&format!("rank {rank}: the verifier thread cannot use the device: {e}"));
    }
    crate::log::trace(rank, "verifier: started");
    let channels = CHANNELS as usize;
    // Per channel: the jobs, when each arrived, and whether its fixes are on their way
    // (the word is written once `Armed::fixed` completed).
    let mut queues: Vec<VecDeque<(Job, Instant, bool)>> = (0..channels).map(|_| VecDeque::new()).collect();
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
                queues[j.channel as usize].push_back((j, now, false));
            }
        }
        let mut pending = false;
        for (ch, queue) in queues.iter_mut().enumerate() {
            while let Some((job, since, fixing)) = queue.front_mut() {
                let step = if *fixing {
                    job.armed.fixed.is_complete()
                } else {
                    check(sync, maps, job, *since).map(|c| match c {
                        Checked::Pending => false,
                        Checked::Done => true,
                        Checked::Fixing => {
                            *fixing = true;
                            false
                        }
                    })
                };
                match step {
                    Ok(false) => {
                        pending = true;
                        break;
                    }
                    Ok(true) => {}
                    Err(e) => {
                        // The group has failed (named in `e`): release the caller's
                        // stream (its output is not to be trusted; the group refuses
                        // further work).
                        crate::log::trace(rank, &format!("checking predicted addresses: {e}"));
                        let _ = sync.core.fail(e);
                    }
                }
                let (job, _, _) = queue.pop_front().expect("looked at above");
                write_word(shared, job.channel, job.seq);
                crate::log::trace(rank, &format!("verifier: channel {ch} call {}: released", job.seq));
                let mut events = shared.events.lock().unwrap_or_else(|p| p.into_inner());
                events.push(job.armed.after);
                events.push(job.armed.fixed);
            }
        }
        if pending {
            // Peers' hosts post their entries when they make the call, and fixes run on
            // the device: poll for both.
            let q = shared.queue.lock().unwrap_or_else(|p| p.into_inner());
            if q.jobs.is_empty() {
                let _ = shared.wake.wait_timeout(q, POLL).unwrap_or_else(|p| p.into_inner());
            }
        }
    }
}

/// How long the verifier waits between looks at what it waits for.
const POLL: Duration = Duration::from_micros(20);

/// Releases the callers' waits for calls up to `seq` of `channel` (host write; the
/// kernels read it with system-scope acquires).
fn write_word(shared: &Shared, channel: u32, seq: u64) {
    std::sync::atomic::fence(Ordering::SeqCst);
    // SAFETY: a word of the live pinned allocation; only this thread writes it.
    unsafe { std::ptr::write_volatile(shared.words.host.cast::<u32>().add(channel as usize), seq as u32) };
    std::sync::atomic::fence(Ordering::SeqCst);
}

/// What checking a job found.
enum Checked {
    /// A peer has not posted its entry yet, or an allocation cannot be opened yet.
    Pending,
    /// Every prediction held: write the word.
    Done,
    /// Fixes enqueued: write the word once they ran.
    Fixing,
}

/// Checks one job and enqueues its fixes; an error once the group's timeout passed since
/// `since` with a peer missing, or at once when its process is gone.
fn check(sync: &GpuSync, maps: &PeerMaps, job: &Job, since: Instant) -> Result<Checked> {
    let core = &sync.core;
    let what = job.fix.what();
    let misses = match maps.verify(core, (job.channel, job.seq), &job.prediction, &job.call, what)? {
        Verified::Done(m) => m,
        Verified::Pending(p) => {
            // Before the caller's wait kernel times out (the group's timeout), so that
            // the error names what the verifier waited for.
            core.keep_waiting(p, since, core.timeout.mul_f64(0.75), || {
                format!("its {what}'s address of call {} on channel {}", job.seq, job.channel)
            })?;
            return Ok(Checked::Pending);
        }
    };
    if misses.is_empty() {
        return Ok(Checked::Done);
    }
    let stream = &job.armed.fix;
    stream.wait(&job.armed.after)?;
    match job.fix {
        // SAFETY: (the block) the destinations are the caller's output (live: the caller's
        // stream waits for the verify word before anything after the call); the sources
        // are peer allocations opened and kept open until the call completed (`verify`);
        // the peers' exit barriers wait for this rank's, which follows the word.
        Fix::Shards { out, shard, hint } => unsafe {
            for m in &misses {
                raw::mem_op::copy(stream.raw(), out + (m.peer * shard) as u64, m.addr, shard, hint)?;
            }
        },
        Fix::Table { table } => {
            let ops: Vec<Op> = misses
                .iter()
                .flat_map(|m| {
                    let at = table + 8 * m.peer as u64;
                    [Op::Write(at, m.addr as u32), Op::Write(at + 4, (m.addr >> 32) as u32)]
                })
                .collect();
            // SAFETY: the table is in this rank's workspace, which the call holds until
            // it completed (after the word); the kernel reads it only after the word, and
            // the addresses are peer allocations kept open until the call completed.
            unsafe { raw::mem_op::batch(stream.raw(), &ops, true)? };
        }
    }
    stream.record(&job.armed.fixed)?;
    Ok(Checked::Fixing)
}
