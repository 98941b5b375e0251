//! The LL ("low latency") collectives for small messages: one kernel per round, no
//! barrier. The data carries its own signal, as in NCCL's LL protocol.
//!
//! NOTE [LL protocol]: every 8 bytes of payload travel in a 16-byte line
//! `{data0, flag, data1, flag}`, written into the receiver's LL buffer with one
//! `st.volatile.v4.u32`. Each 8-byte half (data word and flag) is single-copy atomic,
//! so a receiver that reads the line with `ld.volatile.v4.u32` and finds the round's
//! flag in both halves has both data words: no fence, no separate signal, one trip
//! over NVLink instead of a barrier's round trip plus the data's.
//!
//! Reuse without barriers: round `seq` writes half `seq & 1` (layout in
//! `lowcon_abi::ll`). A rank starts the kernel of round `seq` only after its kernel of
//! round `seq - 1` completed, which needed every peer's lines of round `seq - 1`; a peer
//! pushes those only from its own kernel of round `seq - 1`, which started after its
//! kernel of round `seq - 2` completed, i.e. after it read everything of half
//! `seq & 1`. So one round per kernel launch is safe whatever the CTA counts, and the
//! host launches one kernel per round (`host/src/coll/gpu/ll.rs`).
//!
//! NOTE [LL rounds on the device]: the round number lives in the pad buffer (one `u64`
//! per channel, `lowcon_abi::pad::ll_seq_offset`), not in the kernel's arguments. Every
//! CTA reads it when it starts; the last CTA to finish (the channel's CTA counter, as
//! the fused barriers use it) writes the next. The host never knows the round, so a
//! kernel captured into a CUDA graph runs a fresh round on every replay, and eager and
//! replayed LL calls on one channel share one sequence. The argument above is
//! unchanged: a round's number is still one more than the previous kernel's of the
//! channel, on every rank alike, since every rank runs the same LL kernels in order.
//!
//! Every wait is bounded by `%globaltimer` and drains on the group's abort word, like
//! the barriers (`atomics::wait_epoch_acquire_sys_or_abort`); a failure fills the error
//! record (the missing peer, the channel, the flag expected and seen) and the kernel
//! returns.

use core::arch::asm;

use lowcon_abi::{ErrorRecord, status};

use crate::atomics::{globaltimer_ns, ld_relaxed_sys_u32, nanosleep};
use crate::coll::V16;
use crate::errors::report_error;
use crate::reduce::{Bf16, Elem, F16, combine, finish};
use crate::thread::{grid_stride, thread_idx_x};

/// Stores one LL line (`lo`, `hi` with `flag` beside each) at `p`.
///
/// # Safety
/// `p` is a 16-byte-aligned, writable address (local or mapped peer memory).
#[inline(always)]
unsafe fn st_line(p: *mut u32, lo: u32, hi: u32, flag: u32) {
    // SAFETY: the caller guarantees `p`.
    unsafe {
        asm!("st.volatile.v4.u32 [{p}], {{{a}, {f}, {b}, {f}}};",
            p = in(reg64) p, a = in(reg32) lo, b = in(reg32) hi, f = in(reg32) flag, options(nostack))
    };
}

/// Loads one LL line from `p`.
///
/// # Safety
/// `p` is a 16-byte-aligned, readable address.
#[inline(always)]
unsafe fn ld_line(p: *const u32) -> [u32; 4] {
    let (a, b, c, d): (u32, u32, u32, u32);
    // SAFETY: the caller guarantees `p`.
    unsafe {
        asm!("ld.volatile.v4.u32 {{{a}, {b}, {c}, {d}}}, [{p}];",
            a = out(reg32) a, b = out(reg32) b, c = out(reg32) c, d = out(reg32) d, p = in(reg64) p, options(nostack))
    };
    [a, b, c, d]
}

/// Spins before a wait starts reading the clock.
const SPINS_BEFORE_CLOCK: u32 = 64;
/// Waiting before a wait first looks at the abort word, and between two looks.
///
/// NOTE [LL abort checks]: the abort word is host-mapped memory, a PCIe read away, and
/// an LL round has up to 16K threads waiting. When each of them read it every
/// iteration after 100 µs (the barriers' rule, made for one thread per peer), one late
/// peer (host jitter) turned into ~500 µs calls (2x H200, 2026-11-22, commit b1258e8): the
/// reads queued on PCIe, the late calls made the other rank's threads wait past 100 µs
/// in turn, and the stall fed itself. One look per thread per 8 ms, from 1 ms on,
/// still releases a failed group's waits within about 10 ms.
const ABORT_FIRST_NS: u64 = 1_000_000;
const ABORT_EVERY_NS: u64 = 8_000_000;

/// Where a round's waits report and how long they may take.
#[derive(Clone, Copy)]
struct Waits {
    rank: u32,
    channel: u32,
    timeout_ns: u64,
    err: *mut ErrorRecord,
}

impl Waits {
    /// Waits until the line at `p` (from `peer`) carries `flag` in both halves and
    /// returns its payload; on a timeout or an abort fills the error record and returns
    /// `None`.
    ///
    /// # Safety
    /// `p` is a 16-byte-aligned line of this rank's LL buffer; `err` is valid.
    #[inline(always)]
    unsafe fn line(&self, p: *const u32, flag: u32, peer: u32) -> Option<(u32, u32)> {
        // SAFETY: forwarded from the caller.
        let v = unsafe { ld_line(p) };
        if v[1] == flag && v[3] == flag {
            return Some((v[0], v[2]));
        }
        // SAFETY: forwarded from the caller.
        unsafe { self.line_slow(p, flag, peer) }
    }

    /// The spinning part of [`Waits::line`], out of line: its clock, back-off and abort
    /// state would otherwise share registers with the kernels' loops (`ll_allgather`
    /// spilled 8 bytes with it inlined, which `host/tests/ptx.rs` refuses).
    ///
    /// # Safety
    /// As [`Waits::line`].
    #[inline(never)]
    unsafe fn line_slow(&self, p: *const u32, flag: u32, peer: u32) -> Option<(u32, u32)> {
        let mut spins = 0u32;
        let mut start = 0u64;
        let mut next_abort_check = ABORT_FIRST_NS;
        let mut backoff = 32u32;
        loop {
            // SAFETY: forwarded from the caller.
            let v = unsafe { ld_line(p) };
            if v[1] == flag && v[3] == flag {
                return Some((v[0], v[2]));
            }
            spins += 1;
            if spins < SPINS_BEFORE_CLOCK {
                continue;
            }
            if spins == SPINS_BEFORE_CLOCK {
                start = globaltimer_ns();
            }
            let waited = globaltimer_ns().wrapping_sub(start);
            let mut aborted = false;
            if waited > next_abort_check {
                next_abort_check = waited + ABORT_EVERY_NS;
                // SAFETY: `code` is the record's first field (the group's abort word).
                aborted = unsafe { ld_relaxed_sys_u32(self.err.cast::<u32>()) } != 0;
            }
            if aborted || (self.timeout_ns != 0 && waited > self.timeout_ns) {
                let rec = ErrorRecord {
                    code: status::WAIT_TIMEOUT,
                    rank: self.rank,
                    peer,
                    channel: self.channel,
                    expected: flag as u64,
                    observed: v[1] as u64,
                    waited_ns: waited,
                };
                // SAFETY: `err` is valid (caller).
                unsafe { report_error(self.err, rec) };
                return None;
            }
            nanosleep(backoff);
            if backoff < 256 {
                backoff *= 2;
            }
        }
    }
}

/// Loads the `valid` (≤ 8) payload bytes at `p` as two words, zero-padded; in one 8-byte
/// load when `aligned` and the line is whole.
///
/// # Safety
/// `p` is readable for `valid` bytes; when `aligned`, 8-byte aligned.
#[inline(always)]
unsafe fn load8(p: *const u8, valid: u64, aligned: bool) -> (u32, u32) {
    if aligned && valid == 8 {
        // SAFETY: 8 readable, aligned bytes.
        let v = unsafe { p.cast::<u64>().read() };
        return (v as u32, (v >> 32) as u32);
    }
    let mut v = 0u64;
    for k in 0..valid.min(8) {
        // SAFETY: k < valid.
        v |= (unsafe { p.add(k as usize).read() } as u64) << (8 * k);
    }
    (v as u32, (v >> 32) as u32)
}

/// Stores the first `valid` (≤ 8) bytes of the two words at `p`.
///
/// # Safety
/// `p` is writable for `valid` bytes; when `aligned`, 8-byte aligned.
#[inline(always)]
unsafe fn store8(p: *mut u8, valid: u64, aligned: bool, lo: u32, hi: u32) {
    let v = lo as u64 | (hi as u64) << 32;
    if aligned && valid == 8 {
        // SAFETY: 8 writable, aligned bytes.
        unsafe { p.cast::<u64>().write(v) };
        return;
    }
    for k in 0..valid.min(8) {
        // SAFETY: k < valid.
        unsafe { *p.add(k as usize) = (v >> (8 * k)) as u8 };
    }
}

/// An LL round's kernel: the head every LL kernel shares (this rank and the world, the
/// channel, the wait bound and error record, the peers' LL-buffer bases, this round's
/// half and slot size, its flag, the source and destination), named by the caller, then
/// its own parameters. One definition of the head, so the kernels and the host's
/// `Kernels::ll_round` (which passes it for all of them) agree by construction.
macro_rules! ll_kernel {
    (
        $(#[$m:meta])*
        fn $name:ident[$rank:ident, $world:ident, $channel:ident, $timeout:ident, $err:ident, $bases:ident,
            $half:ident, $slot:ident, $flag:ident, $src:ident, $dst:ident]($($arg:ident: $ty:ty),* $(,)?) $body:block
    ) => {
        $(#[$m])*
        #[allow(clippy::too_many_arguments)]
        #[unsafe(no_mangle)]
        pub unsafe extern "ptx-kernel" fn $name(
            $rank: u32,
            $world: u32,
            $channel: u32,
            $timeout: u64,
            $err: *mut ErrorRecord,
            $bases: *const u64,
            seq: *mut u64,
            counter: *mut u32,
            $slot: u64,
            $src: *const u8,
            $dst: *mut u8,
            $($arg: $ty),*
        ) {
            // NOTE [LL launch overlap] (`host/src/cuda/kernels.rs`): nothing before this
            // wait, which returns once the stream's previous kernel has completed; then
            // the next LL round may be scheduled.
            crate::thread::wait_prior_grids();
            crate::thread::launch_dependents();
            // The round (NOTE [LL rounds on the device]): read by every CTA before it
            // counts itself out, advanced by the last CTA, so the next LL kernel of the
            // channel (eager or replayed) reads the next one.
            // SAFETY: `seq` is this rank's round counter of the channel.
            let round = unsafe { core::ptr::read_volatile(seq) };
            let $half: u64 = lowcon_abi::ll::slot_offset($world, round, 0);
            let $flag: u32 = lowcon_abi::ll::flag(round);
            // A closure, so that the body's early returns (a failed wait) still count out.
            let run = || $body;
            run();
            // SAFETY: `counter` is this rank's counter word of the channel.
            if unsafe { crate::coll::last_cta_local(counter) } && thread_idx_x() == 0 {
                // SAFETY: as above; no CTA of this launch reads `seq` any more.
                unsafe { core::ptr::write_volatile(seq, round + 1) };
            }
        }
    };
}

ll_kernel! {
    /// One round of the LL all-gather: lines `first .. first + n` of this rank's `shard`
    /// bytes at `src` go into slot `rank` of every peer's LL buffer (`bases[p] + half_off +
    /// rank * slot`), and peer `p`'s lines, from slot `p` of this rank's buffer
    /// (`bases[rank] + half_off + p * slot`), into `dst[p * shard ..]`. With `own != 0` this rank's lines are
    /// also copied to `dst[rank * shard ..]`. `aligned`: `src`, `dst` and `shard` are
    /// multiples of 8.
    ///
    /// # Safety
    /// `bases` holds `world` mapped LL-buffer bases, each holding both halves of `world`
    /// slots of `slot` bytes (`slot / 16 >= n`); `src` is valid for `shard` bytes, `dst`
    /// for `world * shard`; `err` is the group's error record.
    fn lowcon_ll_allgather[rank, world, channel, timeout_ns, err, bases, half_off, slot, flag, src, dst](
        shard: u64,
        first: u64,
        n: u64,
        own: u32,
        aligned: u32,
    ) {
        let w = Waits { rank, channel, timeout_ns, err };
        let aligned = aligned != 0;
        let (start, step) = grid_stride();
        // SAFETY: (the whole body) every index below is inside the ranges the caller
        // guarantees: line i < n lines of a slot, payload offsets < shard.
        unsafe {
            let mut i = start;
            while i < n {
                let off = (first + i) * 8;
                let valid = (shard - off).min(8);
                let (lo, hi) = load8(src.add(off as usize), valid, aligned);
                for k in 1..world {
                    let p = (rank + k) % world;
                    let line = *bases.add(p as usize) + half_off + rank as u64 * slot + i * 16;
                    st_line(line as *mut u32, lo, hi, flag);
                }
                if own != 0 {
                    store8(dst.add((rank as u64 * shard + off) as usize), valid, aligned, lo, hi);
                }
                i += step;
            }
            let mine = *bases.add(rank as usize) + half_off;
            let mut i = start;
            while i < n {
                let off = (first + i) * 8;
                let valid = (shard - off).min(8);
                for k in 1..world {
                    let p = (rank + world - k) % world;
                    let line = (mine + p as u64 * slot + i * 16) as *const u32;
                    let Some((lo, hi)) = w.line(line, flag, p) else { return };
                    store8(dst.add((p as u64 * shard + off) as usize), valid, aligned, lo, hi);
                }
                i += step;
            }
        }
    }
}

/// The `f32` values of one line's payload (2 for `f32`, 4 for 16-bit types).
#[inline(always)]
fn unpack_line<T: Elem>(lo: u32, hi: u32) -> [f32; 8] {
    T::unpack(V16([lo, hi, 0, 0]))
}

/// One round of the LL reduce-scatter: lines `first .. first + n` of chunk `p` of this
/// rank's input (`src + p * chunk`, `chunk` bytes) go into slot `rank` of peer `p`'s LL
/// buffer; then each line of this rank's output is `op` over the sources in rank order
/// (its own chunk read locally, the peers' lines from its LL buffer), in `f32`.
/// `aligned`: `src`, `dst` and `chunk` are multiples of 8.
///
/// # Safety
/// As [`lowcon_ll_allgather`], with `src` valid for `world * chunk` bytes and `dst` for
/// `chunk`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn ll_rs<T: Elem>(
    w: Waits,
    world: u32,
    bases: *const u64,
    half_off: u64,
    slot: u64,
    flag: u32,
    src: *const u8,
    dst: *mut u8,
    chunk: u64,
    first: u64,
    n: u64,
    op: u32,
    aligned: bool,
) {
    let rank = w.rank;
    let (start, step) = grid_stride();
    let per_line = 8 / core::mem::size_of::<T>();
    // SAFETY: (the whole body) as in `lowcon_ll_allgather`.
    unsafe {
        let mut i = start;
        while i < n {
            let off = (first + i) * 8;
            let valid = (chunk - off).min(8);
            for k in 1..world {
                let p = (rank + k) % world;
                let (lo, hi) = load8(src.add((p as u64 * chunk + off) as usize), valid, aligned);
                let line = *bases.add(p as usize) + half_off + rank as u64 * slot + i * 16;
                st_line(line as *mut u32, lo, hi, flag);
            }
            i += step;
        }
        let mine = *bases.add(rank as usize) + half_off;
        let mut i = start;
        while i < n {
            let off = (first + i) * 8;
            let valid = (chunk - off).min(8);
            // NOTE [own chunk first]: this rank's own source is loaded before any wait. In
            // rank order it comes after the lower ranks' lines; loaded at its place, on every
            // rank but 0 its latency would follow the wait for those lines, on the call's
            // critical path. Issued here, it overlaps them. The sum keeps rank order.
            let own = load8(src.add((rank as u64 * chunk + off) as usize), valid, aligned);
            let mut acc = [0f32; 8];
            for s in 0..world {
                let (lo, hi) = if s == rank {
                    own
                } else {
                    let line = (mine + s as u64 * slot + i * 16) as *const u32;
                    let Some(v) = w.line(line, flag, s) else { return };
                    v
                };
                let x = unpack_line::<T>(lo, hi);
                for e in 0..per_line {
                    acc[e] = if s == 0 { x[e] } else { combine(op, acc[e], x[e]) };
                }
            }
            for a in acc.iter_mut().take(per_line) {
                *a = finish(op, *a, world);
            }
            let out = T::pack(&acc).0;
            store8(dst.add(off as usize), valid, aligned, out[0], out[1]);
            i += step;
        }
    }
}

macro_rules! ll_rs_kernel {
    ($t:ty, $name:ident) => {
        ll_kernel! {
            /// One round of the LL reduce-scatter for this element type (see `ll_rs`).
            ///
            /// # Safety
            /// See `ll_rs`.
            fn $name[rank, world, channel, timeout_ns, err, bases, half_off, slot, flag, src, dst](
                chunk: u64,
                first: u64,
                n: u64,
                op: u32,
                aligned: u32,
            ) {
                let w = Waits { rank, channel, timeout_ns, err };
                // SAFETY: forwarded from the caller.
                unsafe { ll_rs::<$t>(w, world, bases, half_off, slot, flag, src, dst, chunk, first, n, op, aligned != 0) };
            }
        }
    };
}

ll_rs_kernel!(f32, lowcon_ll_rs_f32);
ll_rs_kernel!(F16, lowcon_ll_rs_f16);
ll_rs_kernel!(Bf16, lowcon_ll_rs_bf16);
