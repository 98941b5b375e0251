//! Integer reductions (i32, i64, u8): `ce-reduce`'s reduction of staged chunks and
//! `sm-direct`, as the float kernels in `reduce.rs`, but in the element type itself:
//! sums wrap (as NCCL's and torch's integer sums do), minimum and maximum are exact, and
//! no average (the host refuses it). Element by element: integer reductions carry token
//! counts, flags and step counters, not bandwidth.

use lowcon_abi::reduce_op;

use crate::coll::fused_kernel;
use crate::thread::grid_stride;

/// An integer element type.
trait Int: Copy + Ord {
    fn wrapping_add(self, other: Self) -> Self;
}

macro_rules! int {
    ($($t:ty),*) => {$(
        impl Int for $t {
            #[inline(always)]
            fn wrapping_add(self, other: Self) -> Self {
                <$t>::wrapping_add(self, other)
            }
        }
    )*};
}
int!(i32, i64, u8);

#[inline(always)]
fn combine<T: Int>(op: u32, acc: T, x: T) -> T {
    match op {
        reduce_op::MIN => acc.min(x),
        reduce_op::MAX => acc.max(x),
        _ => acc.wrapping_add(x),
    }
}

/// `dst[i] = op(src(0)[i], src(1)[i], ...)` in rank order, for this thread's share of
/// the grid stride.
///
/// # Safety
/// Every source and `dst` valid for `n` elements.
#[inline(always)]
unsafe fn reduce_part<T: Int>(src: impl Fn(u32) -> *const T, nsrc: u32, dst: *mut T, n: u64, op: u32) {
    let (start, step) = grid_stride();
    let mut i = start;
    while i < n {
        // SAFETY: i < n; the caller's contract.
        unsafe {
            let mut acc = src(0).add(i as usize).read();
            for s in 1..nsrc {
                acc = combine(op, acc, src(s).add(i as usize).read());
            }
            *dst.add(i as usize) = acc;
        }
        i += step;
    }
}

/// ce-reduce's layout (as `reduce::reduce_staged`): source `own_idx` is `own`, the
/// others staged `stride` elements apart in rank order with this rank's place skipped.
///
/// # Safety
/// `own` and `dst` valid for `n` elements, `staged` for `(nsrc - 1) * stride`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn staged<T: Int>(
    own: *const u8,
    own_idx: u32,
    staged: *const u8,
    stride: u64,
    nsrc: u32,
    dst: *mut u8,
    n: u64,
    op: u32,
) {
    let src = crate::reduce::staged_sources(own.cast::<T>(), own_idx, staged.cast::<T>(), stride);
    // SAFETY: forwarded from the caller.
    unsafe { reduce_part::<T>(src, nsrc, dst.cast::<T>(), n, op) };
}

/// ce-reduce's reduction of integers; `dtype` 0: i32, 1: i64, 2: u8.
///
/// # Safety
/// See `staged`.
#[allow(clippy::too_many_arguments)]
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn lowcon_reduce_int(
    own: *const u8,
    own_idx: u32,
    staged_chunks: *const u8,
    stride: u64,
    nsrc: u32,
    dst: *mut u8,
    n: u64,
    op: u32,
    dtype: u32,
) {
    // SAFETY: (each arm) forwarded from the caller, for its element type.
    unsafe {
        match dtype {
            0 => staged::<i32>(own, own_idx, staged_chunks, stride, nsrc, dst, n, op),
            1 => staged::<i64>(own, own_idx, staged_chunks, stride, nsrc, dst, n, op),
            _ => staged::<u8>(own, own_idx, staged_chunks, stride, nsrc, dst, n, op),
        }
    }
}

/// sm-direct for integers: chunk `rank` of every peer's input (`bases[p] + off`, bytes)
/// reduced into `dst`, read over NVLink.
///
/// # Safety
/// `bases` holds `world` mapped bases each valid for `off` plus `n` elements.
#[inline(always)]
unsafe fn direct<T: Int>(world: u32, bases: *const u64, off: u64, dst: *mut u8, n: u64, op: u32) {
    // SAFETY: i < world entries in `bases`.
    let src = |i: u32| unsafe { (*bases.add(i as usize) + off) as *const T };
    // SAFETY: forwarded from the caller.
    unsafe { reduce_part::<T>(src, world, dst.cast::<T>(), n, op) };
}

fused_kernel! {
    /// sm-direct's reduction of integers (`dtype` as for `lowcon_reduce_int`), with the
    /// fused barriers.
    ///
    /// # Safety
    /// See `direct`, and the fused barriers' contract (`coll.rs`).
    fn lowcon_rs_direct_int(bases: *const u64, off: u64, dst: *mut u8, n: u64, op: u32, dtype: u32) |f| {
        // SAFETY: the caller's contract.
        if unsafe { f.enter() } {
            // SAFETY: (each arm) forwarded from the caller, for its element type.
            unsafe {
                match dtype {
                    0 => direct::<i32>(f.world, bases, off, dst, n, op),
                    1 => direct::<i64>(f.world, bases, off, dst, n, op),
                    _ => direct::<u8>(f.world, bases, off, dst, n, op),
                }
            }
        }
        // SAFETY: the caller's contract.
        unsafe { f.exit() };
    }
}
