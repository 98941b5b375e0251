//! The bf16 wire of `ce-reduce` (NOTE [bf16 wire] in `host/src/coll/wire.rs`): the pack
//! that splits each f32 into its top and bottom halves, the reduction that joins them
//! again (reading a peer's bottom halves over NVLink only where that peer flagged its
//! piece inexact), and the one-thread wait of kernel sync.
//!
//! - **Pack** (`lowcon_wire_pack`, one launch per piece): for every chunk this rank
//!   sends (every destination `q` but itself), elements `first .. first + len` of the
//!   chunk are split: `hi = bits >> 16`, `lo = bits & 0xffff`, into the workspace's high
//!   and low planes (slot `q` or `q - 1`: this rank's own chunk is never packed).
//!   `lowcon_wire_pack_bf16` packs a bf16 input (a bf16 input with an f32 output, read
//!   directly): its values are the top halves, there is no low plane, and every flag
//!   it writes is clear, so readers never look for bottom halves. Each
//!   CTA ORs into the channel's scratch word of `q` whether it saw a nonzero `lo`; the
//!   last CTA (the channel's CTA counter, as the fused barriers find theirs) writes the
//!   flag into `q`'s device pad, zeroes the scratch, fences at system scope and sets its
//!   byte of `q`'s piece word (`st.release.sys.u8`): `q` may now copy the high plane.
//! - **Reduce** (`lowcon_wire_reduce_{f32,bf16}`, one launch per piece): sources in rank
//!   order, in f32, as every lowcon reduction: this rank's own chunk from its input
//!   (f32, or bf16 for a bf16 input with an f32 output), each peer's high halves from
//!   the local staging slot its copy landed in (or, read directly, `staged` null: from
//!   the peer's high plane over NVLink, as sm-direct reads), joined with that peer's low halves read
//!   over NVLink when its flag is set (else zero, which is exact: the flag says every
//!   bottom half was zero). So the result is the f32 reduce-scatter's, bit for bit.
//!   CTA 0 resets this rank's piece words of the piece (its own wait saw them) and
//!   counts the fallback pieces and bytes.
//! - **Wait** (`lowcon_wire_wait`, kernel sync): one thread per piece word of this rank's
//!   device pad spins until every other rank's byte is set, bounded like every wait.
//! - **Plane ring** (NOTE [plane ring] in `host/src/coll/gpu/wire_steps.rs`): where the
//!   planes hold fewer slots than the call has pieces, a reduction given `read_sig`
//!   tells each sender, from its last CTA (the channel's reduction counter), that it has
//!   read the piece (the piece's "read" word, `pad::read_piece`); the pack that refills
//!   the slot waits for it (on the host side) and its CTA 0 resets it (`read_reset`).

use lowcon_abi::{ErrorRecord, pad, status};

use crate::atomics::{
    atom_exch_relaxed_gpu_u32, fence_acq_rel_sys, ld_relaxed_sys_u32, red_add_relaxed_gpu_u64, red_or_relaxed_gpu_u32,
    st_relaxed_sys_u32, st_release_sys_u8, wait_epoch_acquire_sys_or_abort,
};
use crate::coll::{V16, last_cta};
use crate::errors::report_error;
use crate::reduce::{combine, finish, ld_v16};
use crate::thread::{block_dim_x, block_idx_x, grid_stride, sync_threads_or, thread_idx_x};

/// Index of destination `q`'s slot in rank `rank`'s planes (its own chunk has none).
#[inline(always)]
const fn plane_slot(q: u32, rank: u32) -> u32 {
    if q < rank { q } else { q - 1 }
}

/// The rank whose chunk slot `k` holds in rank `rank`'s planes.
#[inline(always)]
const fn slot_rank(k: u32, rank: u32) -> u32 {
    if k < rank { k } else { k + 1 }
}

/// Splits eight f32s (two vectors) into their top and bottom halves (one vector each).
#[inline(always)]
fn split8(a: V16, b: V16) -> (V16, V16) {
    let w = [a.0[0], a.0[1], a.0[2], a.0[3], b.0[0], b.0[1], b.0[2], b.0[3]];
    let mut hi = [0u32; 4];
    let mut lo = [0u32; 4];
    for i in 0..4 {
        hi[i] = (w[2 * i] >> 16) | (w[2 * i + 1] & 0xffff_0000);
        lo[i] = (w[2 * i] & 0xffff) | (w[2 * i + 1] << 16);
    }
    (V16(hi), V16(lo))
}

/// Joins eight top halves with eight bottom halves into eight f32s.
#[inline(always)]
fn join8(hi: V16, lo: V16) -> [f32; 8] {
    let mut out = [0.0; 8];
    for i in 0..4 {
        out[2 * i] = f32::from_bits((hi.0[i] << 16) | (lo.0[i] & 0xffff));
        out[2 * i + 1] = f32::from_bits((hi.0[i] & 0xffff_0000) | (lo.0[i] >> 16));
    }
    out
}

/// What a pack reads: an f32 input, split into top and bottom halves, or a bf16 input,
/// whose values are the top halves (no bottom halves: nothing is written to the low
/// plane, and every flag stays clear).
trait PackSrc {
    type E;
    /// Whether the source has bottom halves (the low plane is written, flags computed).
    const SPLIT: bool;
    /// Eight elements from vector position `i`: their top and bottom halves.
    ///
    /// # Safety
    /// `s` valid for `8 * (i + 1)` elements, 16-byte aligned.
    unsafe fn load8(s: *const Self::E, i: u64) -> (V16, V16);
    /// Element `i`'s top and bottom halves.
    ///
    /// # Safety
    /// `s` valid for `i + 1` elements.
    unsafe fn load1(s: *const Self::E, i: u64) -> (u16, u16);
}

struct PackF32;
struct PackBf16;

impl PackSrc for PackF32 {
    type E = u32;
    const SPLIT: bool = true;
    #[inline(always)]
    unsafe fn load8(s: *const u32, i: u64) -> (V16, V16) {
        let sv = s.cast::<V16>();
        // SAFETY: the caller's contract (two vectors per eight f32s).
        let (a, b) = unsafe { (ld_v16(sv.add(2 * i as usize)), ld_v16(sv.add(2 * i as usize + 1))) };
        split8(a, b)
    }
    #[inline(always)]
    unsafe fn load1(s: *const u32, i: u64) -> (u16, u16) {
        // SAFETY: the caller's contract.
        let w = unsafe { s.add(i as usize).read() };
        ((w >> 16) as u16, w as u16)
    }
}

impl PackSrc for PackBf16 {
    type E = u16;
    const SPLIT: bool = false;
    #[inline(always)]
    unsafe fn load8(s: *const u16, i: u64) -> (V16, V16) {
        // SAFETY: the caller's contract (one vector per eight bf16s).
        (unsafe { ld_v16(s.cast::<V16>().add(i as usize)) }, V16([0; 4]))
    }
    #[inline(always)]
    unsafe fn load1(s: *const u16, i: u64) -> (u16, u16) {
        // SAFETY: the caller's contract.
        (unsafe { s.add(i as usize).read() }, 0)
    }
}

/// One bf16-wire pack of piece `piece` (module note), from source `S`.
///
/// # Safety
/// As the kernels below.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn pack<S: PackSrc>(
    src: *const S::E,
    n: u64,
    first: u64,
    len: u64,
    hi: *mut u16,
    lo: *mut u16,
    stride: u64,
    rank: u32,
    world: u32,
    channel: u32,
    piece: u32,
    pads: *const u64,
    sig: *const u64,
    scratch: *mut u32,
    counter: *mut u32,
    vec_ok: u32,
    read_reset: *mut u32,
) {
    if !read_reset.is_null() && block_idx_x() == 0 && thread_idx_x() == 0 {
        // The stream waited for every reader's byte; zeroed before this CTA counts
        // itself in (`last_cta`), so before the last CTA signals the piece, which
        // readers need before they read it and set their bytes again.
        for word in 0..pad::piece_words(world) {
            // SAFETY: `piece_words(world)` words of this rank's pad (contract).
            unsafe { st_relaxed_sys_u32(read_reset.add(word as usize), 0) };
        }
    }
    let (start, step) = grid_stride();
    for k in 0..world - 1 {
        let q = slot_rank(k, rank);
        // SAFETY: (the block) chunk `q`'s piece and slot `k`'s planes are in bounds (the
        // caller's contract); vectors only when aligned.
        let inexact = unsafe {
            let s = src.add((q as u64 * n + first) as usize);
            let h = hi.add((k as u64 * stride + first) as usize);
            let l = lo.wrapping_add((k as u64 * stride + first) as usize);
            let mut any = 0u32;
            let mut scalar_from = 0;
            if vec_ok != 0 {
                let nv = len / 8;
                scalar_from = nv * 8;
                let (hv, lv) = (h.cast::<V16>(), l.cast::<V16>());
                let mut i = start;
                while i < nv {
                    let (x, y) = S::load8(s, i);
                    hv.add(i as usize).write(x);
                    if S::SPLIT {
                        any |= y.0[0] | y.0[1] | y.0[2] | y.0[3];
                        lv.add(i as usize).write(y);
                    }
                    i += step;
                }
            }
            let mut i = scalar_from + start;
            while i < len {
                let (x, y) = S::load1(s, i);
                h.add(i as usize).write(x);
                if S::SPLIT {
                    l.add(i as usize).write(y);
                    any |= y as u32;
                }
                i += step;
            }
            sync_threads_or(any != 0)
        };
        if inexact && thread_idx_x() == 0 {
            // SAFETY: `scratch` holds `world` words (contract).
            unsafe { red_or_relaxed_gpu_u32(scratch.add(k as usize), 1) };
        }
    }
    // SAFETY: the channel's counter (contract).
    if !unsafe { last_cta(counter) } {
        return;
    }
    // The last CTA: one thread per destination writes its flag, then signals it.
    let mut k = thread_idx_x();
    while k < world - 1 {
        let q = slot_rank(k, rank);
        // SAFETY: (the block) `scratch`, `pads[q]` and `sig[q]` are valid (contract); the
        // flag and the piece word are inside `q`'s pads (`piece < WIRE_PIECES`).
        unsafe {
            let flag = atom_exch_relaxed_gpu_u32(scratch.add(k as usize), 0);
            let fo = pad::wire_flag_offset(world, channel, piece, rank) as u64;
            st_relaxed_sys_u32((*pads.add(q as usize) + fo) as *mut u32, flag);
            // Every CTA's planes (ordered before the counter by `last_cta`) and the flag
            // are visible system-wide before the byte.
            fence_acq_rel_sys();
            let word = pad::piece_slot(channel, piece, rank, world) as u64 * 4;
            let byte = (rank % pad::RANKS_PER_WORD) as u64;
            st_release_sys_u8((*sig.add(q as usize) + word + byte) as *mut u8, 1);
        }
        k += block_dim_x();
    }
}

macro_rules! wire_pack_kernel {
    ($name:ident, $src:ty, $e:ty) => {
        /// One bf16-wire pack of piece `piece` (module note). Launch with any number of
        /// CTAs of `COLL_THREADS`; the channel's CTA counter must be 0 and no other kernel
        /// of the channel may run at the same time.
        ///
        /// # Safety
        /// `src` holds `world * n` elements (this rank's input: f32, or bf16 for
        /// `lowcon_wire_pack_bf16`); `hi` holds `(world - 1) * stride` `u16`s, and so does
        /// `lo` for an f32 source (unused for bf16), with `first + len <= n <= stride`;
        /// `pads` and `sig` are device arrays of `world` pad bases (the device pads, and
        /// the pads this call's waits poll, host or device) with the layout of
        /// `lowcon_abi::pad`; `scratch` and `counter` are this rank's words of the
        /// channel; `piece < pad::WIRE_PIECES`; `vec_ok` only if `src`, `n` and `first`
        /// keep every chunk's piece 16-byte aligned; `read_reset` null or this rank's
        /// `piece_words(world)` "read" words of the piece whose plane slot this pack
        /// refills, which the stream has already waited for.
        #[allow(clippy::too_many_arguments)]
        #[unsafe(no_mangle)]
        pub unsafe extern "ptx-kernel" fn $name(
            src: *const $e,
            n: u64,
            first: u64,
            len: u64,
            hi: *mut u16,
            lo: *mut u16,
            stride: u64,
            rank: u32,
            world: u32,
            channel: u32,
            piece: u32,
            pads: *const u64,
            sig: *const u64,
            scratch: *mut u32,
            counter: *mut u32,
            vec_ok: u32,
            read_reset: *mut u32,
        ) {
            // SAFETY: forwarded from the caller.
            unsafe {
                pack::<$src>(
                    src, n, first, len, hi, lo, stride, rank, world, channel, piece, pads, sig, scratch, counter,
                    vec_ok, read_reset,
                )
            };
        }
    };
}

wire_pack_kernel!(lowcon_wire_pack, PackF32, u32);
wire_pack_kernel!(lowcon_wire_pack_bf16, PackBf16, u16);

/// This rank's own source: the chunk in its input, f32 or bf16.
trait Own {
    /// Eight elements from vector position `i` (16-byte aligned base).
    ///
    /// # Safety
    /// `p` valid for `8 * (i + 1)` elements, 16-byte aligned.
    unsafe fn load8(p: *const u8, i: u64) -> [f32; 8];
    /// Element `i`.
    ///
    /// # Safety
    /// `p` valid for `i + 1` elements.
    unsafe fn load1(p: *const u8, i: u64) -> f32;
}

struct OwnF32;
struct OwnBf16;

impl Own for OwnF32 {
    #[inline(always)]
    unsafe fn load8(p: *const u8, i: u64) -> [f32; 8] {
        let v = p.cast::<V16>();
        // SAFETY: the caller's contract (two vectors per eight f32s).
        let (a, b) = unsafe { (ld_v16(v.add(2 * i as usize)), ld_v16(v.add(2 * i as usize + 1))) };
        let w = [a.0[0], a.0[1], a.0[2], a.0[3], b.0[0], b.0[1], b.0[2], b.0[3]];
        w.map(f32::from_bits)
    }
    #[inline(always)]
    unsafe fn load1(p: *const u8, i: u64) -> f32 {
        // SAFETY: the caller's contract.
        unsafe { p.cast::<f32>().add(i as usize).read() }
    }
}

impl Own for OwnBf16 {
    #[inline(always)]
    unsafe fn load8(p: *const u8, i: u64) -> [f32; 8] {
        // SAFETY: the caller's contract (one vector per eight bf16s).
        let a = unsafe { ld_v16(p.cast::<V16>().add(i as usize)) };
        join8(a, V16([0; 4]))
    }
    #[inline(always)]
    unsafe fn load1(p: *const u8, i: u64) -> f32 {
        // SAFETY: the caller's contract.
        f32::from_bits((unsafe { p.cast::<u16>().add(i as usize).read() } as u32) << 16)
    }
}

/// Folds `v` into `acc` in rank order: the first source is taken as it is (as the other
/// reductions do: `-0.0` stays `-0.0`), later ones combined with `op`.
#[inline(always)]
fn fold(acc: &mut [f32; 8], started: &mut bool, op: u32, v: [f32; 8]) {
    for e in 0..8 {
        acc[e] = if *started { combine(op, acc[e], v[e]) } else { v[e] };
    }
    *started = true;
}

/// As [`fold`], one element.
#[inline(always)]
fn fold1(acc: &mut f32, started: &mut bool, op: u32, v: f32) {
    *acc = if *started { combine(op, *acc, v) } else { v };
    *started = true;
}

/// What a reduction of one piece reads and writes (see [`reduce_piece`]).
#[derive(Clone, Copy)]
struct Piece {
    own: *const u8,
    staged: *const u16,
    /// Elements between two staging slots.
    pe: u64,
    len: u64,
    dst: *mut f32,
    rank: u32,
    world: u32,
    op: u32,
    vec_ok: bool,
}

/// Peer slot `k`'s top halves of this piece: its local staging slot, or with `staged`
/// null (read directly) the peer's high plane over NVLink.
///
/// # Safety
/// As [`wire_reduce`], with `k < world - 1`.
#[inline(always)]
unsafe fn hi_ptr(a: &Piece, w: &Wire, k: u32) -> *const u16 {
    if !a.staged.is_null() {
        // SAFETY: `world - 1` slots `pe` apart (contract).
        return unsafe { a.staged.add(k as usize * a.pe as usize) };
    }
    let p = slot_rank(k, a.rank);
    let at = w.hi_off + 2 * (plane_slot(a.rank, p) as u64 * w.stride + w.first);
    // SAFETY: `lo_bases` holds `world` bases whose high planes are in bounds (contract).
    unsafe { (*w.lo_bases.add(p as usize) + at) as *const u16 }
}

/// Peer slot `k`'s bottom halves of this piece over NVLink, or null where its flag is
/// clear (or for a bf16 input, which has none).
///
/// # Safety
/// As [`wire_reduce`], with `k < world - 1`.
#[inline(always)]
unsafe fn lo_ptr(w: &Wire, rank: u32, k: u32) -> *const u16 {
    if w.lo_bases.is_null() {
        return core::ptr::null();
    }
    let p = slot_rank(k, rank);
    // SAFETY: `flags` holds `world` words, `lo_bases` `world` bases (contract).
    unsafe {
        if ld_relaxed_sys_u32(w.flags.add(p as usize)) == 0 {
            return core::ptr::null();
        }
        let at = w.lo_off + 2 * (plane_slot(rank, p) as u64 * w.stride + w.first);
        (*w.lo_bases.add(p as usize) + at) as *const u16
    }
}

/// Defines `$name`, the reduction of one piece with exactly as many peers as slots
/// listed (`world` = that + 1), returning how many peers' bottom halves it read. The
/// peers come in groups (`group: (tuple index, slot), ...`): a thread loads every
/// vector of a group before it combines any, then folds them, in rank order with this
/// rank's own chunk at its place. Written out per peer count with tuples, as
/// `reduce.rs`'s loops are (LLVM kept arrays over 7 sources in local memory); 7 peers
/// come in two groups, since one group of 7 needs more than the 128 registers a
/// 512-thread CTA allows.
macro_rules! wire_fixed {
    ($name:ident; $($g:tt: ($($i:tt $k:tt),+))+) => {
        /// # Safety
        /// As [`wire_reduce`].
        #[inline(always)]
        unsafe fn $name<O: Own>(a: Piece, w: &Wire) -> u64 {
            let peers = [$($($k),+),+].len() as u32;
            // SAFETY: (each) k < world - 1.
            let lo = ($(($(unsafe { lo_ptr(w, a.rank, $k) },)+),)+);
            let (start, step) = grid_stride();
            let mut scalar_from = 0;
            if a.vec_ok {
                let nv = a.len / 8;
                scalar_from = nv * 8;
                let mut i = start;
                while i < nv {
                    // SAFETY: (each) i < nv vectors of every source (contract).
                    let own = unsafe { O::load8(a.own, i) };
                    let mut acc = [0.0f32; 8];
                    let mut started = false;
                    $(
                        // The top halves' addresses are made where they are read (not kept
                        // beside the bottom halves' for the whole loop: at 8 ranks that
                        // spilled registers).
                        // SAFETY: (each) i < nv vectors of every peer's top halves (the
                        // contract; `hi_ptr`), and of its bottom halves where flagged (`lo_ptr`).
                        let hv = ($(unsafe { ld_v16(hi_ptr(&a, w, $k).cast::<V16>().add(i as usize)) },)+);
                        let lv = ($(
                            if lo.$g.$i.is_null() {
                                V16([0; 4])
                            } else {
                                unsafe { ld_v16(lo.$g.$i.cast::<V16>().add(i as usize)) }
                            },
                        )+);
                        $(
                            if $k == a.rank {
                                fold(&mut acc, &mut started, a.op, own);
                            }
                            fold(&mut acc, &mut started, a.op, join8(hv.$i, lv.$i));
                        )+
                    )+
                    if a.rank == peers {
                        fold(&mut acc, &mut started, a.op, own);
                    }
                    let o = acc.map(|x| finish(a.op, x, a.world).to_bits());
                    // SAFETY: i < nv vectors of `dst` (contract).
                    unsafe {
                        let d = a.dst.cast::<V16>();
                        d.add(2 * i as usize).write(V16([o[0], o[1], o[2], o[3]]));
                        d.add(2 * i as usize + 1).write(V16([o[4], o[5], o[6], o[7]]));
                    }
                    i += step;
                }
            }
            let mut i = scalar_from + start;
            while i < a.len {
                // SAFETY: (the block) i < len elements of every source (contract).
                unsafe {
                    let own = O::load1(a.own, i);
                    let mut acc = 0.0f32;
                    let mut started = false;
                    $($(
                        if $k == a.rank {
                            fold1(&mut acc, &mut started, a.op, own);
                        }
                        let h = hi_ptr(&a, w, $k).add(i as usize).read() as u32;
                        let l = if lo.$g.$i.is_null() { 0 } else { lo.$g.$i.add(i as usize).read() as u32 };
                        fold1(&mut acc, &mut started, a.op, f32::from_bits(h << 16 | l));
                    )+)+
                    if a.rank == peers {
                        fold1(&mut acc, &mut started, a.op, own);
                    }
                    a.dst.add(i as usize).write(finish(a.op, acc, a.world));
                }
                i += step;
            }
            0 $($(+ u64::from(!lo.$g.$i.is_null()))+)+
        }
    };
}

wire_fixed!(wire1; 0: (0 0));
wire_fixed!(wire2; 0: (0 0, 1 1));
wire_fixed!(wire3; 0: (0 0, 1 1, 2 2));
wire_fixed!(wire4; 0: (0 0, 1 1, 2 2, 3 3));
wire_fixed!(wire5; 0: (0 0, 1 1, 2 2, 3 3, 4 4));
wire_fixed!(wire6; 0: (0 0, 1 1, 2 2, 3 3, 4 4, 5 5));
wire_fixed!(wire7; 0: (0 0, 1 1, 2 2, 3 3) 1: (0 4, 1 5, 2 6));

/// The wire's extra arguments: the split wire's, or a bf16 input's read directly (the
/// same, every flag clear); all null / zero for a bf16 input staged by ce-reduce.
#[derive(Clone, Copy)]
struct Wire {
    lo_bases: *const u64,
    lo_off: u64,
    /// The high plane's offset in every workspace (read directly: `staged` null).
    hi_off: u64,
    stride: u64,
    first: u64,
    flags: *const u32,
    reset: *mut u32,
    stats: *mut u64,
    /// The channel's reduction counter, and the pads (`world` bases) and byte offset in
    /// each of this rank's byte of the piece's "read" word; `read_sig` null: no signal.
    counter: *mut u32,
    read_sig: *const u64,
    read_byte: u64,
}

/// The reduction of one piece (module note), dispatched on the world size so that each
/// source count gets its own unrolled loop. CTA 0 resets the piece words and counts the
/// fallbacks.
///
/// # Safety
/// `a.own` holds `len` own elements, `a.staged` `world - 1` slots of `a.pe >= len` top
/// halves (or null: read from the peers' high planes at `w.hi_off`, then `w.lo_bases`
/// is not null and every peer signalled the piece), `a.dst` `len` f32s (`vec_ok` only if `own` and `dst` are 16-byte aligned: the
/// staging and the planes always are); `w.flags` is this rank's flags of the piece
/// (`world` words), `w.lo_bases` a device array of `world` workspace bases (or null: no
/// bottom halves) whose bottom-half ranges are in bounds, `w.reset` this rank's
/// `piece_words(world)` piece words of the piece (or null), `w.stats` this rank's
/// counters (or null); `w.read_sig` null, or the `world` pad bases of every rank whose
/// byte `w.read_byte` this rank sets once every CTA has read the piece, with `w.counter`
/// the channel's reduction counter, 0 when the launch began, used by no other kernel
/// running at the same time.
#[inline(always)]
unsafe fn wire_reduce<O: Own>(a: Piece, w: Wire) {
    // SAFETY: (each arm) forwarded from the caller.
    let fallbacks = unsafe {
        match a.world {
            2 => wire1::<O>(a, &w),
            3 => wire2::<O>(a, &w),
            4 => wire3::<O>(a, &w),
            5 => wire4::<O>(a, &w),
            6 => wire5::<O>(a, &w),
            7 => wire6::<O>(a, &w),
            8 => wire7::<O>(a, &w),
            // One rank, or more than 8: peer by peer (rare; kept simple).
            _ => wire_reduce_any::<O>(a, w),
        }
    };
    if block_idx_x() == 0 && thread_idx_x() == 0 {
        // SAFETY: (the block) `reset` and `stats` per the contract.
        unsafe {
            if !w.reset.is_null() {
                for word in 0..pad::piece_words(a.world) {
                    st_relaxed_sys_u32(w.reset.add(word as usize), 0);
                }
                // The reset lands before anything this rank signals later (its exit).
                fence_acq_rel_sys();
            }
            if fallbacks > 0 && !w.stats.is_null() {
                red_add_relaxed_gpu_u64(w.stats, fallbacks);
                red_add_relaxed_gpu_u64(w.stats.add(1), fallbacks * a.len * 2);
            }
        }
    }
    // NOTE [plane ring]: every CTA's reads of the senders' planes are done (program order
    // before its count, `last_cta`'s fences) before the last one tells the senders.
    // SAFETY: the channel's reduction counter (contract).
    if w.read_sig.is_null() || !unsafe { last_cta(w.counter) } {
        return;
    }
    let mut k = thread_idx_x();
    while k < a.world - 1 {
        let p = slot_rank(k, a.rank);
        // SAFETY: `read_sig` holds `world` pad bases with this rank's byte at `read_byte`.
        unsafe { st_release_sys_u8((*w.read_sig.add(p as usize) + w.read_byte) as *mut u8, 1) };
        k += block_dim_x();
    }
}

/// [`wire_reduce`] for more than 8 ranks: element by element, sources in rank order.
///
/// # Safety
/// As [`wire_reduce`].
#[inline(always)]
unsafe fn wire_reduce_any<O: Own>(a: Piece, w: Wire) -> u64 {
    let (start, step) = grid_stride();
    let mut fallbacks = 0;
    for p in 0..a.world {
        // SAFETY: `flags` holds `world` words (contract).
        if p != a.rank && !w.lo_bases.is_null() && unsafe { ld_relaxed_sys_u32(w.flags.add(p as usize)) } != 0 {
            fallbacks += 1;
        }
    }
    let mut i = start;
    while i < a.len {
        let mut acc = 0.0f32;
        let mut started = false;
        for p in 0..a.world {
            // SAFETY: (the block) i < len elements of every source: the own chunk, the peer's
            // top halves (`hi_ptr`) and, where flagged, its bottom halves (as `lo_ptr`).
            let v = unsafe {
                if p == a.rank {
                    O::load1(a.own, i)
                } else {
                    let h = hi_ptr(&a, &w, plane_slot(p, a.rank)).add(i as usize).read() as u32;
                    let mut l = 0u32;
                    if !w.lo_bases.is_null() && ld_relaxed_sys_u32(w.flags.add(p as usize)) != 0 {
                        let at = w.lo_off + 2 * (plane_slot(a.rank, p) as u64 * w.stride + w.first + i);
                        l = ((*w.lo_bases.add(p as usize) + at) as *const u16).read() as u32;
                    }
                    f32::from_bits(h << 16 | l)
                }
            };
            fold1(&mut acc, &mut started, a.op, v);
        }
        // SAFETY: i < len.
        unsafe { a.dst.add(i as usize).write(finish(a.op, acc, a.world)) };
        i += step;
    }
    fallbacks
}

macro_rules! wire_reduce_kernel {
    ($name:ident, $own:ty, $t:ty) => {
        /// The bf16-wire reduction of one piece with this own-chunk type (module note).
        ///
        /// # Safety
        /// See `wire_reduce`: `own` is this rank's chunk piece in its input, `staged` the
        /// piece's staging (`world - 1` slots `pe` apart; null: the peers' high planes at
        /// `hi_off`, read directly), `dst` the output piece;
        /// `lo_bases` null for a bf16 input staged by ce-reduce (then `flags`, `reset` and
        /// `stats` unused); a bf16 input read directly passes the workspaces' bases and
        /// its pieces' flags and words, every flag clear (`lowcon_wire_pack_bf16`);
        /// `read_sig` null: no "read" signal (then `counter` and `read_byte` unused).
        #[allow(clippy::too_many_arguments)]
        #[unsafe(no_mangle)]
        pub unsafe extern "ptx-kernel" fn $name(
            own: *const $t,
            staged: *const u16,
            pe: u64,
            len: u64,
            dst: *mut f32,
            rank: u32,
            world: u32,
            op: u32,
            vec_ok: u32,
            lo_bases: *const u64,
            lo_off: u64,
            hi_off: u64,
            stride: u64,
            first: u64,
            flags: *const u32,
            reset: *mut u32,
            stats: *mut u64,
            counter: *mut u32,
            read_sig: *const u64,
            read_byte: u64,
        ) {
            let a = Piece { own: own.cast::<u8>(), staged, pe, len, dst, rank, world, op, vec_ok: vec_ok != 0 };
            let w = Wire { lo_bases, lo_off, hi_off, stride, first, flags, reset, stats, counter, read_sig, read_byte };
            // SAFETY: forwarded from the caller.
            unsafe { wire_reduce::<$own>(a, w) };
        }
    };
}

wire_reduce_kernel!(lowcon_wire_reduce_f32, OwnF32, f32);
wire_reduce_kernel!(lowcon_wire_reduce_bf16, OwnBf16, u16);

/// Kernel sync's wait for piece `piece` on `channel`: thread `w` spins on this rank's
/// piece word `w` (`words` of them at `word0`) until every other rank's byte is set,
/// bounded by `timeout_ns` and the group's abort word; a timeout names the first rank
/// whose byte is missing. Launch one CTA of at least `piece_words(world)` threads.
///
/// # Safety
/// `word0` is this rank's device pad's first piece word of the piece; `err` the group's
/// error record.
#[allow(clippy::too_many_arguments)]
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn lowcon_wire_wait(
    word0: *const u32,
    rank: u32,
    world: u32,
    channel: u32,
    timeout_ns: u64,
    err: *mut ErrorRecord,
) {
    let w = thread_idx_x();
    let mut failed = false;
    if w < pad::piece_words(world) {
        let mask = pad::piece_mask(world, rank, w);
        // SAFETY: (the block) the word is this rank's (contract); `err` likewise.
        unsafe {
            if let Err(t) = wait_epoch_acquire_sys_or_abort(word0.add(w as usize), mask, timeout_ns, err.cast::<u32>())
            {
                let missing = (0..pad::RANKS_PER_WORD)
                    .find(|b| mask & (1 << (8 * b)) != 0 && t.observed & (1 << (8 * b)) == 0)
                    .map_or(ErrorRecord::NO_PEER, |b| w * pad::RANKS_PER_WORD + b);
                let rec = ErrorRecord {
                    code: status::WAIT_TIMEOUT,
                    rank,
                    peer: missing,
                    channel,
                    expected: mask as u64,
                    observed: t.observed as u64,
                    waited_ns: t.waited_ns,
                };
                report_error(err, rec);
                failed = true;
            }
        }
    }
    sync_threads_or(failed);
}
