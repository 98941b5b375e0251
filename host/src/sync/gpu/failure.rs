//! Failure handling on the GPU backend: how a dead or late peer is detected, named and
//! survived.
//!
//! Detection: kernel waits time out on the device and claim the group's error record
//! (pinned memory the host polls); stream-memop waits cannot time out, so the host
//! bounds them (the group's timeout) and watches every peer's socket for a hang-up.
//! Diagnosis reads this rank's pads (the host pad of memop waits, then, if that does not
//! settle it, the device pad of kernel waits) and names the first (channel, peer) whose
//! signal is behind. Release makes every stuck wait complete so the streams drain, with
//! no driver call (NOTE [host pad]): kernels give up once the record's abort word is
//! set, memop waits see their epochs stored into this rank's host pad. The group then
//! refuses further work.

use std::time::{Duration, Instant};

use cudarc::driver::sys;
use lowcon_abi::{ErrorRecord, pad, status};

use super::GpuSync;
use super::sentinel::Step;
use crate::cuda::{Device, Stream, raw};
use crate::error::{Error, Result};
use crate::memory::gpu::Drain;
use crate::memory::pinned::Pinned;
use crate::sync::epoch_reached;

/// How long `synchronize` polls without sleeping (see there).
const SYNC_SPIN: Duration = Duration::from_millis(2);

/// The group's error record in pinned memory: kernels write it, the host reads it
/// without synchronising.
pub(crate) struct HostRecord(Pinned);

impl HostRecord {
    pub(crate) fn new(device: &Device, drain: Drain) -> Result<Self> {
        Pinned::new(device, size_of::<ErrorRecord>(), drain).map(Self)
    }

    /// Marks the record as failed (if nothing claimed it yet) so that queued kernels'
    /// waits give up instead of each waiting out its timeout.
    pub(crate) fn abort(&self) {
        let code = self.0.host.cast::<u32>();
        // SAFETY: `code` is the record's first field in live pinned memory; kernels only
        // CAS it from OK, so a racing claim by a kernel at worst loses to this write,
        // which the group (already failed) no longer reports.
        unsafe {
            if std::ptr::read_volatile(code) == status::OK {
                std::ptr::write_volatile(code, status::ABORTED);
            }
        }
    }

    /// The record's device address, for kernels.
    pub(crate) fn device_ptr(&self) -> sys::CUdeviceptr {
        self.0.dev
    }

    pub(crate) fn read(&self) -> ErrorRecord {
        // SAFETY: `host` points to a live, aligned ErrorRecord-sized pinned allocation;
        // a volatile read sees what kernels wrote (a torn record is impossible once
        // the writing stream completed; a racing read only delays detection).
        unsafe { std::ptr::read_volatile(self.0.host.cast::<ErrorRecord>()) }
    }
}

impl GpuSync {
    /// The group's failure, if it has one, without waiting: what the watchdog (or a
    /// kernel, through the error record) found, naming the rank, as first reported
    /// (`Error::PeerGone`, `PeerTimeout` or `DeviceTimeout`). Like NCCL's
    /// `ncclCommGetAsyncError`, it returns the same error every time.
    pub(crate) fn check(&self) -> Result<()> {
        self.core.failure()?;
        if let Some(rec) = self.claimed_record() {
            return Err(self.core.fail(Error::DeviceTimeout(rec)));
        }
        Ok(())
    }

    /// The error record, once a kernel has claimed it. A kernel claims the code word
    /// first and writes the other fields right after, so a claimed record is read again
    /// a moment later, when those fields are in place.
    pub(crate) fn claimed_record(&self) -> Option<ErrorRecord> {
        if self.err.read().code == status::OK {
            return None;
        }
        std::thread::sleep(Duration::from_millis(2));
        Some(self.err.read())
    }

    /// Whether a wait this rank has issued still lacks `peer`'s signal (read from this
    /// rank's pads; `true` when the device pad cannot be read). LL calls wait for data,
    /// not pad slots: the watchdog treats them apart (`LL_DEAD_PEER_GRACE`).
    pub(crate) fn awaits_missing_from(&self, peer: usize) -> bool {
        let mine: Vec<Awaited> = self.awaited().into_iter().filter(|a| a.peer == peer).collect();
        // The host pad costs no driver call: memop waits are settled by it alone.
        let host = self.host_pad.snapshot();
        if mine.iter().all(|a| epoch_reached(host[a.slot], a.epoch)) {
            return false;
        }
        match self.read_own_pad() {
            Ok(dev) => mine.iter().any(|a| !a.reached(&host, &dev)),
            Err(_) => true,
        }
    }

    /// Waits until the work enqueued on `stream` so far has finished, or the group has
    /// failed. The watchdog decides failures (a dead peer, a timeout); this only watches
    /// for its verdict, so it needs no bound of its own.
    pub(crate) fn synchronize(&self, stream: &Stream) -> Result<()> {
        self.check()?;
        self.check_stream_for(stream, "synchronize (it waits on the host)")?;
        let done = stream.event(false)?;
        stream.record(&done)?;
        // The watchdog watches this stream too (if the caller's own signals, not a
        // collective, are what it waits on, nothing else would be tracked).
        self.track(stream)?;
        let mut polls = 0u64;
        let start = Instant::now();
        while !done.is_complete()? {
            polls += 1;
            if polls.is_multiple_of(16) {
                self.check()?;
            }
            // Spin for SYNC_SPIN, then sleep between polls: a wake-up from a sleep comes
            // 50-100 µs late, which a caller that synchronises every few hundred µs (a
            // benchmark's batch, a step of small calls) would pay each time.
            if start.elapsed() < SYNC_SPIN {
                std::hint::spin_loop();
            } else {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
        self.check()
    }

    /// Every pad slot this rank has issued a wait on, with the epoch it awaits: the
    /// facts behind both the timeout diagnosis and the release of stuck waits.
    fn awaited(&self) -> Vec<Awaited> {
        let world = self.core.world;
        let ep = self.epochs();
        let mut v = Vec::new();
        for channel in 0..pad::CHANNELS {
            for peer in (0..world).filter(|&p| p != self.core.rank) {
                for (kind, epoch, what) in [
                    (pad::BARRIER, ep.barrier_epoch(channel), "barrier arrival"),
                    (pad::P2P, ep.received_epoch(channel, peer), "signal"),
                ] {
                    if epoch != 0 {
                        let slot = pad::slot(channel, kind, peer as u32, world as u32) as usize;
                        v.push(Awaited { slot, epoch, channel, kind, peer, what });
                    }
                }
            }
        }
        v
    }

    /// Reads this rank's pads and names the first (channel, peer) whose signal is behind
    /// what this rank expects. If the device pad cannot be read (its copy waits behind a
    /// full queue), names it from the host pad alone ([`GpuSync::diagnose_from_host`]).
    pub(crate) fn diagnose_timeout(&self) -> Error {
        let secs = self.core.timeout.as_secs_f64();
        let host = self.host_pad.snapshot();
        let dev = match self.read_own_pad() {
            Ok(s) => s,
            Err(e) => return self.diagnose_from_host(&format!("the device pad could not be read: {e}")),
        };
        for a in self.awaited() {
            // The later of the two pads' epochs: each holds the signals of its method.
            let seen = if epoch_reached(host[a.slot], dev[a.slot]) { host[a.slot] } else { dev[a.slot] };
            if !a.reached(&host, &dev) {
                return Error::PeerTimeout {
                    rank: self.core.rank,
                    peer: a.peer,
                    what: format!("its {} on channel {} (epoch {}, saw {seen})", a.what, a.channel, a.epoch),
                    secs,
                };
            }
        }
        if let Some((channel, peer)) = self.wire_missing(&host, &dev) {
            return Error::PeerTimeout {
                rank: self.core.rank,
                peer,
                what: format!("its signal of a bf16-wire piece on channel {channel}"),
                secs,
            };
        }
        if self.replay_in_flight() {
            return self.graph_timeout(&host, &dev, "");
        }
        Error::Rendezvous(format!(
            "rank {}: the stream did not finish within {secs:.1} s, yet every peer signalled",
            self.core.rank
        ))
    }

    /// The error for a replayed graph that did not finish: names the peer whose flag is
    /// missing where the pads show one ([`GpuSync::graph_missing`]), else the first peer
    /// (at two ranks, the only one).
    fn graph_timeout(&self, host: &[u32], dev: &[u32], why: &str) -> Error {
        let secs = self.core.timeout.as_secs_f64();
        let (what, peer) = match self.graph_missing(host, dev) {
            Some((channel, peer)) => (format!("its barrier flag in a replayed graph on channel {channel}{why}"), peer),
            None => (
                format!("its barrier flags in a replayed graph (none of the peers' had arrived){why}"),
                usize::from(self.core.rank == 0),
            ),
        };
        Error::PeerTimeout { rank: self.core.rank, peer, what, secs }
    }

    /// As [`GpuSync::diagnose_timeout`] from the host pad only, with no driver call (the
    /// sentinel's, NOTE [stuck watchdog]): names the first peer whose memop signal is
    /// behind, looking only at slots whose last wait was a memop wait (kernel signals
    /// land in the device pad, and kernel waits time out on the device and name their
    /// peer themselves). If none is behind there, the error lists the peers awaited.
    pub(crate) fn diagnose_from_host(&self, why: &str) -> Error {
        let secs = self.core.timeout.as_secs_f64();
        let host = self.host_pad.snapshot();
        let awaited = self.awaited();
        let behind =
            awaited.iter().find(|a| self.memop_last(a.channel, a.kind) && !epoch_reached(host[a.slot], a.epoch));
        let wire = self.wire_missing(&host, &[]);
        match behind {
            Some(a) => Error::PeerTimeout {
                rank: self.core.rank,
                peer: a.peer,
                what: format!(
                    "its {} on channel {} (epoch {}, saw {} in the host pad; {why})",
                    a.what, a.channel, a.epoch, host[a.slot]
                ),
                secs,
            },
            None if wire.is_some() => {
                let (channel, peer) = wire.expect("checked");
                Error::PeerTimeout {
                    rank: self.core.rank,
                    peer,
                    what: format!("its signal of a bf16-wire piece on channel {channel} (in the host pad; {why})"),
                    secs,
                }
            }
            None if self.replay_in_flight() => {
                self.graph_timeout(&host, &vec![0; host.len()], &format!("; from the host pad: {why}"))
            }
            None => {
                let mut peers: Vec<usize> = awaited.iter().map(|a| a.peer).collect();
                peers.sort_unstable();
                peers.dedup();
                Error::Rendezvous(format!(
                    "rank {}: the stream did not finish within {secs:.1} s; every memop signal arrived, and the \
                     kernel waits' pad could not be read ({why}); awaited peers: {peers:?}",
                    self.core.rank
                ))
            }
        }
    }

    /// Bound on each failure-handling step on the side stream.
    pub(crate) const SIDE_LIMIT: Duration = Duration::from_secs(2);

    /// Waits, at most [`Self::SIDE_LIMIT`], for what was enqueued on the side stream.
    pub(crate) fn side_wait(&self, what: &str) -> Result<()> {
        let _step = self.watch_step.enter(Step::SideWait);
        let done = self.side.event(false)?;
        self.side.record(&done)?;
        let start = Instant::now();
        while !done.is_complete()? {
            if start.elapsed() > Self::SIDE_LIMIT {
                return Err(Error::Rendezvous(format!(
                    "rank {}: {what} did not finish within {:.0} s",
                    self.core.rank,
                    Self::SIDE_LIMIT.as_secs_f64()
                )));
            }
            std::thread::sleep(Duration::from_micros(50));
        }
        Ok(())
    }

    /// This rank's pad as it is now, copied on the side stream into pinned memory
    /// (bounded: never waits behind a stuck stream for long).
    fn read_own_pad(&self) -> Result<Vec<u32>> {
        let _step = self.watch_step.enter(Step::ReadPad);
        let bytes = pad::bytes(self.core.world as u32);
        // SAFETY: copies this rank's live pad into the pinned mirror of the same size;
        // the mirror is only read after the copy completed (side_wait).
        unsafe { raw::mem_op::copy(self.side.raw(), self.pad_mirror.dev, self.pads.local_ptr(), bytes, false)? };
        self.side_wait("reading this rank's signal pad")?;
        let words = self.pad_mirror.host.cast::<u32>();
        // SAFETY: the mirror holds `bytes / 4` aligned words, written by the completed
        // copy; volatile because the device wrote them.
        Ok((0..bytes / 4).map(|i| unsafe { std::ptr::read_volatile(words.add(i)) }).collect())
    }

    /// One round of releasing every wait this rank has enqueued, so the streams drain,
    /// with no driver call (it runs on the watchdog and on the sentinel, NOTE [stuck
    /// watchdog]): kernels give up their waits (the record's abort word), and
    /// stream-memop waits see their epochs stored into this rank's host pad. Only used
    /// once the group has failed.
    ///
    /// The watchdog repeats rounds while calls are in flight, re-reading the awaited
    /// epochs each time: a live peer that had enqueued fewer calls keeps signalling
    /// older epochs into this pad while its own stream drains, and each such signal
    /// overwrites a released slot with a value below what a later wait here needs
    /// (seen on 4x H200: one survivor one call ahead of the others stayed stuck); and a
    /// call that was blocked in the driver's queue may enqueue further waits.
    pub(crate) fn release_round(&self) -> usize {
        // Queued kernels of this group give up their waits at once from now on.
        self.err.abort();
        let awaited = self.awaited();
        for a in &awaited {
            self.host_pad.release(a.slot, a.epoch);
        }
        awaited.len() + self.release_graph_flags() + self.release_piece_words()
    }
}

/// One wait this rank has issued: the slot in its own pads and the epoch it awaits.
struct Awaited {
    slot: usize,
    epoch: u32,
    channel: u32,
    kind: u32,
    peer: usize,
    what: &'static str,
}

impl Awaited {
    /// Whether the signal arrived, in either pad: the host pad holds the epochs of
    /// memop signals, the device pad those of kernel signals, and a wait completes once
    /// its own method's pad reaches its epoch (a later epoch in either pad also means
    /// the peer got past it).
    fn reached(&self, host: &[u32], dev: &[u32]) -> bool {
        epoch_reached(host[self.slot], self.epoch) || epoch_reached(dev[self.slot], self.epoch)
    }
}
