//! Reductions: the element types (f32, f16, bf16, through f32), the operators, and the
//! kernels that reduce staged chunks (`ce-reduce`) and peers' memory directly over NVLink
//! (`sm-direct`). Sources are added in rank order in `f32`, so every algorithm gives the
//! result of a CPU reference that adds in rank order.
//!
//! The output is of the sources' type, except for sm-direct's bf16 input into f32
//! (`lowcon_rs_direct_bf16_f32`): the same `f32` reduction, stored without rounding
//! (see [`Out`]).

use lowcon_abi::reduce_op;

use crate::coll::{Fused, V16, fused_kernel};
use crate::thread::grid_stride;

/// An element type the reductions handle: loaded to and stored from `f32`.
pub(crate) trait Elem: Copy {
    /// Elements per 16-byte vector.
    const VEC: usize;
    fn to_f32(self) -> f32;
    fn from_f32(f: f32) -> Self;
    fn unpack(v: V16) -> [f32; 8];
    fn pack(f: &[f32; 8]) -> V16;
}

impl Elem for f32 {
    const VEC: usize = 4;
    #[inline(always)]
    fn to_f32(self) -> f32 {
        self
    }
    #[inline(always)]
    fn from_f32(f: f32) -> Self {
        f
    }
    #[inline(always)]
    fn unpack(v: V16) -> [f32; 8] {
        let w = v.0;
        [f32::from_bits(w[0]), f32::from_bits(w[1]), f32::from_bits(w[2]), f32::from_bits(w[3]), 0.0, 0.0, 0.0, 0.0]
    }
    #[inline(always)]
    fn pack(f: &[f32; 8]) -> V16 {
        V16([f[0].to_bits(), f[1].to_bits(), f[2].to_bits(), f[3].to_bits()])
    }
}

/// IEEE binary16, as its bits.
#[derive(Clone, Copy)]
#[repr(transparent)]
pub struct F16(u16);

/// bfloat16, as its bits.
#[derive(Clone, Copy)]
#[repr(transparent)]
pub struct Bf16(u16);

#[inline(always)]
fn f16_to_f32(h: u16) -> f32 {
    let f: f32;
    // SAFETY: a register-only conversion.
    unsafe {
        core::arch::asm!("cvt.f32.f16 {f}, {h};", f = out(reg32) f, h = in(reg16) h, options(pure, nomem, nostack))
    };
    f
}

#[inline(always)]
fn f32_to_f16(f: f32) -> u16 {
    let h: u16;
    // SAFETY: a register-only conversion (round to nearest even).
    unsafe {
        core::arch::asm!("cvt.rn.f16.f32 {h}, {f};", h = out(reg16) h, f = in(reg32) f, options(pure, nomem, nostack))
    };
    h
}

#[inline(always)]
fn f32_to_bf16(f: f32) -> u16 {
    let h: u16;
    // SAFETY: a register-only conversion (round to nearest even; sm_80+).
    unsafe {
        core::arch::asm!("cvt.rn.bf16.f32 {h}, {f};", h = out(reg16) h, f = in(reg32) f, options(pure, nomem, nostack))
    };
    h
}

/// Unpacks eight 16-bit values with `conv`.
#[inline(always)]
fn unpack16(v: V16, conv: impl Fn(u16) -> f32) -> [f32; 8] {
    let mut out = [0.0; 8];
    for (i, w) in v.0.iter().enumerate() {
        out[2 * i] = conv(*w as u16);
        out[2 * i + 1] = conv((*w >> 16) as u16);
    }
    out
}

/// Packs eight `f32`s into 16-bit values with `conv`.
#[inline(always)]
fn pack16(f: &[f32; 8], conv: impl Fn(f32) -> u16) -> V16 {
    let mut w = [0u32; 4];
    for (i, x) in w.iter_mut().enumerate() {
        *x = conv(f[2 * i]) as u32 | (conv(f[2 * i + 1]) as u32) << 16;
    }
    V16(w)
}

impl Elem for F16 {
    const VEC: usize = 8;
    #[inline(always)]
    fn to_f32(self) -> f32 {
        f16_to_f32(self.0)
    }
    #[inline(always)]
    fn from_f32(f: f32) -> Self {
        F16(f32_to_f16(f))
    }
    #[inline(always)]
    fn unpack(v: V16) -> [f32; 8] {
        unpack16(v, f16_to_f32)
    }
    #[inline(always)]
    fn pack(f: &[f32; 8]) -> V16 {
        pack16(f, f32_to_f16)
    }
}

impl Elem for Bf16 {
    const VEC: usize = 8;
    #[inline(always)]
    fn to_f32(self) -> f32 {
        f32::from_bits((self.0 as u32) << 16)
    }
    #[inline(always)]
    fn from_f32(f: f32) -> Self {
        Bf16(f32_to_bf16(f))
    }
    #[inline(always)]
    fn unpack(v: V16) -> [f32; 8] {
        unpack16(v, |h| f32::from_bits((h as u32) << 16))
    }
    #[inline(always)]
    fn pack(f: &[f32; 8]) -> V16 {
        pack16(f, f32_to_bf16)
    }
}

/// Where a reduction of sources of type `T` stores its finished `f32`s: `T` itself
/// (rounded by `T::pack` / `T::from_f32`), or `f32` for bf16 sources (a bf16 input
/// reduced into an f32 output). Implemented by the output element type.
pub(crate) trait Out<T: Elem>: Copy {
    /// Stores the `T::VEC` finished values `a` of source vector `at` (elements
    /// `at * T::VEC..` of `dst`), in 16-byte stores.
    ///
    /// # Safety
    /// `dst` 16-byte aligned and valid for `(at + 1) * T::VEC` elements.
    unsafe fn store_vec(dst: *mut Self, at: u64, a: &[f32; 8]);

    /// Stores the finished value `x` as element `i` of `dst`.
    ///
    /// # Safety
    /// `dst` valid for `i + 1` elements.
    unsafe fn store(dst: *mut Self, i: u64, x: f32);
}

impl<T: Elem> Out<T> for T {
    #[inline(always)]
    unsafe fn store_vec(dst: *mut T, at: u64, a: &[f32; 8]) {
        // SAFETY: the caller's contract: one vector of `T::VEC` elements.
        unsafe { dst.cast::<V16>().add(at as usize).write(T::pack(a)) };
    }

    #[inline(always)]
    unsafe fn store(dst: *mut T, i: u64, x: f32) {
        // SAFETY: the caller's contract.
        unsafe { dst.add(i as usize).write(T::from_f32(x)) };
    }
}

impl Out<Bf16> for f32 {
    /// Eight `f32`s per 16-byte bf16 vector: two 16-byte stores, at vectors `2 * at` and
    /// `2 * at + 1` of `dst`.
    #[inline(always)]
    unsafe fn store_vec(dst: *mut f32, at: u64, a: &[f32; 8]) {
        let d = dst.cast::<V16>();
        let lo = V16([a[0].to_bits(), a[1].to_bits(), a[2].to_bits(), a[3].to_bits()]);
        let hi = V16([a[4].to_bits(), a[5].to_bits(), a[6].to_bits(), a[7].to_bits()]);
        // SAFETY: the caller's contract: `dst` valid for `(at + 1) * 8` f32s, i.e. for
        // `2 * at + 2` vectors.
        unsafe {
            d.add(2 * at as usize).write(lo);
            d.add(2 * at as usize + 1).write(hi);
        }
    }

    #[inline(always)]
    unsafe fn store(dst: *mut f32, i: u64, x: f32) {
        // SAFETY: the caller's contract.
        unsafe { dst.add(i as usize).write(x) };
    }
}

#[inline(always)]
pub(crate) fn combine(op: u32, acc: f32, x: f32) -> f32 {
    match op {
        reduce_op::MIN => acc.min(x),
        reduce_op::MAX => acc.max(x),
        _ => acc + x,
    }
}

#[inline(always)]
pub(crate) fn finish(op: u32, acc: f32, world: u32) -> f32 {
    if op == reduce_op::AVG { acc / world as f32 } else { acc }
}

/// Reduces `nsrc` sources of `n` elements into `dst` (`src(i)` gives source `i`, in rank
/// order), this thread's share of the grid-stride `(start, step)`; `dst` is of the
/// sources' type or another [`Out`] of it.
///
/// # Safety
/// Every source and `dst` valid for `n` elements; when `vec`, all 16-byte aligned.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub(crate) unsafe fn reduce_part<T: Elem, D: Out<T>, const CUT: u32>(
    src: impl Fn(u32) -> *const T,
    nsrc: u32,
    dst: *mut D,
    n: u64,
    op: u32,
    vec: bool,
    start: u64,
    step: u64,
) {
    let mut scalar_from = 0u64;
    if vec {
        let nv = n / T::VEC as u64;
        scalar_from = nv * T::VEC as u64;
        let mut p = [core::ptr::null::<V16>(); 8];
        for (k, pk) in p.iter_mut().enumerate().take(nsrc as usize) {
            *pk = src(k as u32).cast::<V16>();
        }
        // SAFETY: (each arm) forwarded from the caller; `p` holds the first `nsrc`
        // sources, exactly as many as the arm reads.
        unsafe {
            match nsrc {
                2 => reduce_vec2::<T, D, CUT>(&p, dst, nv, op, start, step),
                3 => reduce_vec3::<T, D, CUT>(&p, dst, nv, op, start, step),
                4 => reduce_vec4::<T, D, CUT>(&p, dst, nv, op, start, step),
                5 => reduce_vec5::<T, D, CUT>(&p, dst, nv, op, start, step),
                6 => reduce_vec6::<T, D, CUT>(&p, dst, nv, op, start, step),
                7 => reduce_vec7::<T, D, CUT>(&p, dst, nv, op, start, step),
                8 => reduce_vec8::<T, D, CUT>(&p, dst, nv, op, start, step),
                _ => reduce_vec_any::<T, D>(&src, nsrc, dst, nv, op, start, step),
            }
        }
    }
    let mut i = scalar_from + start;
    while i < n {
        // SAFETY: i < n.
        unsafe {
            let mut acc = src(0).add(i as usize).read().to_f32();
            for s in 1..nsrc {
                acc = combine(op, acc, src(s).add(i as usize).read().to_f32());
            }
            D::store(dst, i, finish(op, acc, nsrc));
        }
        i += step;
    }
}

/// `ld.global.v4.u32`: one 16-byte load.
///
/// # Safety
/// `p` is a 16-byte-aligned address of global (device or mapped peer) memory.
#[inline(always)]
pub(crate) unsafe fn ld_v16(p: *const V16) -> V16 {
    let (a, b, c, d): (u32, u32, u32, u32);
    // SAFETY: the caller's contract; reads 16 bytes, writes nothing.
    unsafe {
        core::arch::asm!(
            "{{ .reg .u64 g; cvta.to.global.u64 g, {p}; ld.global.v4.u32 {{{a}, {b}, {c}, {d}}}, [g]; }}",
            p = in(reg64) p,
            a = out(reg32) a,
            b = out(reg32) b,
            c = out(reg32) c,
            d = out(reg32) d,
            options(readonly, nostack, preserves_flags)
        )
    };
    V16([a, b, c, d])
}

/// Defines `$name`, the vector part of [`reduce_part`] for exactly as many sources as
/// indices listed: a thread loads the 16-byte vectors of every source for `$lanes`
/// grid-stride positions before it combines any, so a pass costs one memory round
/// trip instead of one per source (a few CTAs are latency-bound otherwise, above all
/// over NVLink), then reduces and stores the positions one after another, so only
/// the loaded vectors and one position's accumulators are live. Written out per source
/// count (tuples, no arrays over sources) so the loaded vectors stay in registers: LLVM
/// left loops over 7-8 sources rolled and moved such arrays to local memory.
macro_rules! reduce_vec_fixed {
    ($name:ident, $lanes:expr, $($k:tt),+) => {
        /// # Safety
        /// As [`reduce_part`] with `vec`: `p` holds one 16-byte-aligned source per index,
        /// each valid for `nv` vectors, and `d` 16-byte aligned and valid for `nv * T::VEC`
        /// elements.
        #[inline(always)]
        unsafe fn $name<T: Elem, D: Out<T>, const CUT: u32>(
            p: &[*const V16],
            d: *mut D,
            nv: u64,
            op: u32,
            start: u64,
            step: u64,
        ) {
            let nsrc = [$($k),+].len() as u32;
            // `CUT` fewer positions (at least one) for callers with more live state.
            let lanes: u64 = if $lanes > CUT { ($lanes - CUT) as u64 } else { 1 };
            // Up to four positions; those at or past `$lanes` are constant-false and
            // compile away.
            let live = |l: u64, at: u64| l < lanes && at < nv;
            let mut i = start;
            while i < nv {
                let at = [i, i + step, i + 2 * step, i + 3 * step];
                // SAFETY: (each) a position is loaded only when below `nv`.
                let x0 = load_sources!(p, at[0], true; $($k),+);
                let x1 = load_sources!(p, at[1], live(1, at[1]); $($k),+);
                let x2 = load_sources!(p, at[2], live(2, at[2]); $($k),+);
                let x3 = load_sources!(p, at[3], live(3, at[3]); $($k),+);
                // SAFETY: (each) stores only to positions below `nv`.
                unsafe {
                    D::store_vec(d, at[0], &combine_sources!(T, x0, op, nsrc; $($k),+));
                    if live(1, at[1]) {
                        D::store_vec(d, at[1], &combine_sources!(T, x1, op, nsrc; $($k),+));
                    }
                    if live(2, at[2]) {
                        D::store_vec(d, at[2], &combine_sources!(T, x2, op, nsrc; $($k),+));
                    }
                    if live(3, at[3]) {
                        D::store_vec(d, at[3], &combine_sources!(T, x3, op, nsrc; $($k),+));
                    }
                }
                i += lanes * step;
            }
        }
    };
}

/// The tuple of every source's 16-byte vector at position `$at` (zeros unless `$ok`).
macro_rules! load_sources {
    ($p:ident, $at:expr, $ok:expr; $($k:tt),+) => {
        if $ok {
            // SAFETY: the caller's contract: `$at` is below the sources' length.
            ($(unsafe { ld_v16($p[$k].add($at as usize)) },)+)
        } else {
            ($({ let _ = $k; V16([0; 4]) },)+)
        }
    };
}

/// `op` over the tuple `$x` of sources in rank order, finished (the first `VEC` values
/// of the `[f32; 8]`; the output's `store_vec` packs them).
macro_rules! combine_sources {
    ($t:ident, $x:ident, $op:ident, $nsrc:ident; $($k:tt),+) => {{
        let mut a = $t::unpack($x.0);
        $(
            if $k > 0 {
                let y = $t::unpack($x.$k);
                for e in 0..$t::VEC {
                    a[e] = combine($op, a[e], y[e]);
                }
            }
        )+
        for e in a.iter_mut().take($t::VEC) {
            *e = finish($op, *e, $nsrc);
        }
        a
    }};
}

// Positions per thread per pass: the most that fit in the 128 registers a 512-thread
// CTA allows without spilling in any dtype (`ptxas -v`; `host/tests/ptx.rs` fails on
// spills). 4 at 2-3 sources, 3 at 4, 2 at 5-7 and 1 at 8 (2 spilled there). The
// bf16-into-f32 kernel (two stores per vector, no rounding) fits the same counts
// (`CUT` 0; ptxas for sm_90: 124 registers, no spills).
reduce_vec_fixed!(reduce_vec2, 4, 0, 1);
reduce_vec_fixed!(reduce_vec3, 4, 0, 1, 2);
reduce_vec_fixed!(reduce_vec4, 3, 0, 1, 2, 3);
reduce_vec_fixed!(reduce_vec5, 2, 0, 1, 2, 3, 4);
reduce_vec_fixed!(reduce_vec6, 2, 0, 1, 2, 3, 4, 5);
reduce_vec_fixed!(reduce_vec7, 2, 0, 1, 2, 3, 4, 5, 6);
reduce_vec_fixed!(reduce_vec8, 1, 0, 1, 2, 3, 4, 5, 6, 7);

/// The vector part of [`reduce_part`] for any number of sources (more than 8).
///
/// # Safety
/// As [`reduce_part`] with `vec`, `nv` vectors of `T::VEC` elements.
#[inline(always)]
unsafe fn reduce_vec_any<T: Elem, D: Out<T>>(
    src: &impl Fn(u32) -> *const T,
    nsrc: u32,
    dst: *mut D,
    nv: u64,
    op: u32,
    start: u64,
    step: u64,
) {
    {
        let mut i = start;
        // Two vectors per thread per pass.
        while i < nv {
            let j = i + step;
            let two = j < nv;
            // SAFETY: i < nv (and j < nv when `two`); the caller's contract.
            let (mut a, mut b) = unsafe {
                let s0 = src(0).cast::<V16>();
                (
                    T::unpack(s0.add(i as usize).read()),
                    if two { T::unpack(s0.add(j as usize).read()) } else { [0.0; 8] },
                )
            };
            for s in 1..nsrc {
                // SAFETY: as above.
                let (x, y) = unsafe {
                    let sp = src(s).cast::<V16>();
                    (
                        T::unpack(sp.add(i as usize).read()),
                        if two { T::unpack(sp.add(j as usize).read()) } else { [0.0; 8] },
                    )
                };
                for k in 0..T::VEC {
                    a[k] = combine(op, a[k], x[k]);
                    b[k] = combine(op, b[k], y[k]);
                }
            }
            for k in 0..T::VEC {
                a[k] = finish(op, a[k], nsrc);
                b[k] = finish(op, b[k], nsrc);
            }
            // SAFETY: as above.
            unsafe {
                D::store_vec(dst, i, &a);
                if two {
                    D::store_vec(dst, j, &b);
                }
            }
            i += 2 * step;
        }
    }
}

/// Where ce-reduce's source `i` is: `own` for `i == own_idx`, else the staged peer chunk,
/// `stride` elements apart in rank order with this rank's place skipped.
#[inline(always)]
pub(crate) fn staged_sources<T>(
    own: *const T,
    own_idx: u32,
    staged: *const T,
    stride: u64,
) -> impl Fn(u32) -> *const T {
    move |i: u32| {
        if i == own_idx {
            own
        } else {
            let slot = if i < own_idx { i } else { i - 1 };
            staged.wrapping_add((slot as u64 * stride) as usize)
        }
    }
}

/// ce-reduce's reduction: source `own_idx` is `own` (this rank's chunk, in place), the
/// others are the staged peer chunks, `stride` elements apart in rank order with this
/// rank's place skipped.
///
/// # Safety
/// `own` and `dst` valid for `n` elements, `staged` for `(nsrc - 1) * stride`;
/// `vec_ok` only if every address and `stride` allow 16-byte vectors.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn reduce_staged<T: Elem>(
    own: *const T,
    own_idx: u32,
    staged: *const T,
    stride: u64,
    nsrc: u32,
    dst: *mut T,
    n: u64,
    op: u32,
    vec_ok: u32,
) {
    let src = staged_sources(own, own_idx, staged, stride);
    let (start, step) = grid_stride();
    // SAFETY: forwarded from the caller.
    unsafe { reduce_part::<T, T, 0>(src, nsrc, dst, n, op, vec_ok != 0, start, step) };
}

/// sm-direct: reduces chunk `rank` of every peer's input (`bases[p] + off`, `off` in
/// bytes) into `dst`, reading over NVLink, with optionally fused barriers. `dst` is of
/// the inputs' type `T`, or `f32` for a bf16 input ([`Out`]).
///
/// # Safety
/// As [`lowcon_allgather_oneshot`], with every `bases[p] + off` valid for `n` elements
/// of `T` and `dst` for `n` of `D`; `vec_ok` only if every `bases[p] + off` and `dst`
/// are 16-byte aligned.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn rs_direct<T: Elem, D: Out<T>>(
    f: Fused,
    bases: *const u64,
    off: u64,
    dst: *mut D,
    n: u64,
    op: u32,
    vec_ok: u32,
) {
    // SAFETY: the caller's contract.
    if unsafe { f.enter() } {
        // SAFETY: i < world entries in `bases`.
        let src = |i: u32| unsafe { (*bases.add(i as usize) + off) as *const T };
        let (start, step) = grid_stride();
        // SAFETY: forwarded from the caller.
        unsafe { reduce_part::<T, D, 0>(src, f.world, dst, n, op, vec_ok != 0, start, step) };
    }
    // SAFETY: the caller's contract.
    unsafe { f.exit() };
}

macro_rules! reduce_kernels {
    ($t:ty, $staged:ident, $direct:ident) => {
        /// ce-reduce's reduction for this element type (see `reduce_staged`).
        ///
        /// # Safety
        /// See `reduce_staged`.
        #[allow(clippy::too_many_arguments)]
        #[unsafe(no_mangle)]
        pub unsafe extern "ptx-kernel" fn $staged(
            own: *const $t,
            own_idx: u32,
            staged: *const $t,
            stride: u64,
            nsrc: u32,
            dst: *mut $t,
            n: u64,
            op: u32,
            vec_ok: u32,
        ) {
            // SAFETY: forwarded from the caller.
            unsafe { reduce_staged::<$t>(own, own_idx, staged, stride, nsrc, dst, n, op, vec_ok) };
        }

        fused_kernel! {
            /// sm-direct for this element type (see `rs_direct`).
            ///
            /// # Safety
            /// See `rs_direct`.
            fn $direct(
                bases: *const u64,
                off: u64,
                dst: *mut $t,
                n: u64,
                op: u32,
                vec_ok: u32,
            ) |f| {
                // SAFETY: forwarded from the caller.
                unsafe { rs_direct::<$t, $t>(f, bases, off, dst, n, op, vec_ok) };
            }
        }
    };
}

reduce_kernels!(f32, lowcon_reduce_f32, lowcon_rs_direct_f32);
reduce_kernels!(F16, lowcon_reduce_f16, lowcon_rs_direct_f16);
reduce_kernels!(Bf16, lowcon_reduce_bf16, lowcon_rs_direct_bf16);

fused_kernel! {
    /// sm-direct of a bf16 input into an f32 output (see `rs_direct`): every
    /// `bases[p] + off` (`off` in bytes) holds `n` bf16 sources, `dst` receives `n` f32s,
    /// each the f32 reduction in rank order that `lowcon_rs_direct_f32` computes of the
    /// sources widened to f32, never rounded to bf16. `vec_ok`: `dst` is 16-byte aligned;
    /// the kernel takes its vector path (8 bf16 per 16-byte load, 8 f32 in two stores)
    /// only if every `bases[p] + off` is too, which it checks itself.
    /// `gate` (null: none): the verify word that `bases` waits for (`sync::gate`), with
    /// `rank`, `channel`, `timeout_ns` and `err` for its timeout's report.
    ///
    /// # Safety
    /// See `rs_direct`; `gate` null or valid mapped memory, `err` a valid `ErrorRecord`;
    /// `bases` read only after the gate.
    fn lowcon_rs_direct_bf16_f32(
        bases: *const u64,
        off: u64,
        dst: *mut f32,
        n: u64,
        op: u32,
        vec_ok: u32,
        gate: *const u32,
        gate_value: u32,
        rank: u32,
        channel: u32,
        timeout_ns: u64,
        err: *mut lowcon_abi::ErrorRecord,
    ) |f| {
        // NOTE [addresses predicted]: `bases` holds predicted peer addresses until the
        // verify word `gate` reaches `gate_value` (the verifier rewrites any that missed
        // first); null: none predicted.
        // SAFETY: forwarded from the caller.
        unsafe { crate::sync::gate(gate, gate_value, rank, channel, timeout_ns, err) };
        // The sources' alignment is known only once `bases` is final (after the gate): the
        // caller's `vec_ok` speaks for `off` and `dst`.
        let mut aligned = vec_ok != 0;
        let mut p = 0;
        while aligned && p < f.world {
            // SAFETY: p < world entries in `bases`, final after the gate.
            aligned = unsafe { *bases.add(p as usize) + off }.is_multiple_of(16);
            p += 1;
        }
        // SAFETY: forwarded from the caller.
        unsafe { rs_direct::<Bf16, f32>(f, bases, off, dst, n, op, aligned as u32) };
    }
}
