//! The CPU reduction: what the host backend computes with, and the reference the GPU
//! kernels are held to (f32 accumulation in rank order, `Avg` divides at the end).

#[cfg(test)]
use half::bf16;
use half::f16;
use half::slice::HalfFloatSliceExt;

use super::{DType, ReduceOp};

/// Elements the float path converts and reduces at a time: four 16 KiB f32 buffers stay
/// in L1/L2.
const CHUNK: usize = 4096;

/// Loads `dst.len()` elements of `dtype` from the bytes `b` (little-endian) into f32:
/// as typed slices when `b` is aligned for them (loops the compiler vectorises), else
/// element by element.
#[inline]
fn load(dtype: DType, b: &[u8], dst: &mut [f32]) {
    let n = dst.len();
    match dtype {
        DType::F32 => match bytemuck::try_cast_slice::<u8, f32>(&b[..4 * n]) {
            Ok(v) => dst.copy_from_slice(v),
            Err(_) => dst.iter_mut().zip(b.chunks_exact(4)).for_each(|(d, c)| {
                *d = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            }),
        },
        DType::F16 => match bytemuck::try_cast_slice::<u8, f16>(&b[..2 * n]) {
            Ok(v) => v.convert_to_f32_slice(dst),
            Err(_) => dst.iter_mut().zip(b.chunks_exact(2)).for_each(|(d, c)| {
                *d = f16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32();
            }),
        },
        // bf16 -> f32 is exact: the bits, shifted (what `bf16::to_f32` computes).
        DType::Bf16 => match bytemuck::try_cast_slice::<u8, u16>(&b[..2 * n]) {
            Ok(v) => dst.iter_mut().zip(v).for_each(|(d, h)| *d = f32::from_bits((*h as u32) << 16)),
            Err(_) => dst.iter_mut().zip(b.chunks_exact(2)).for_each(|(d, c)| {
                *d = f32::from_bits((u16::from_le_bytes([c[0], c[1]]) as u32) << 16);
            }),
        },
        _ => unreachable!("integers reduce in int_into"),
    }
}

/// Stores `src` as `dtype` into the bytes `b`, rounding to nearest even.
#[inline]
fn store(dtype: DType, b: &mut [u8], src: &[f32]) {
    let n = src.len();
    match dtype {
        DType::F32 => match bytemuck::try_cast_slice_mut::<u8, f32>(&mut b[..4 * n]) {
            Ok(v) => v.copy_from_slice(src),
            Err(_) => b.chunks_exact_mut(4).zip(src).for_each(|(c, v)| c.copy_from_slice(&v.to_le_bytes())),
        },
        DType::F16 => match bytemuck::try_cast_slice_mut::<u8, f16>(&mut b[..2 * n]) {
            Ok(v) => v.convert_from_f32_slice(src),
            Err(_) => {
                b.chunks_exact_mut(2).zip(src).for_each(|(c, v)| c.copy_from_slice(&f16::from_f32(*v).to_le_bytes()))
            }
        },
        DType::Bf16 => match bytemuck::try_cast_slice_mut::<u8, u16>(&mut b[..2 * n]) {
            Ok(v) => v.iter_mut().zip(src).for_each(|(h, f)| *h = bf16_bits(*f)),
            Err(_) => b.chunks_exact_mut(2).zip(src).for_each(|(c, v)| c.copy_from_slice(&bf16_bits(*v).to_le_bytes())),
        },
        _ => unreachable!("integers reduce in int_into"),
    }
}

/// `bf16::from_f32(v).to_bits()`, without branches (so the store loop vectorises):
/// round to nearest even; a NaN keeps its top bits and is made quiet.
#[inline(always)]
fn bf16_bits(v: f32) -> u16 {
    let x = v.to_bits();
    let rounded = (x.wrapping_add(0x7fff + ((x >> 16) & 1)) >> 16) as u16;
    let nan = (x >> 16) as u16 | 0x0040;
    if x & 0x7fff_ffff > 0x7f80_0000 { nan } else { rounded }
}

/// `op` over integers (`Avg` is refused before): sums wrap, in the type itself.
fn int_into<const N: usize, T: Copy + Ord>(
    srcs: &[&[u8]],
    out: &mut [u8],
    op: ReduceOp,
    from: impl Fn([u8; N]) -> T,
    to: impl Fn(T) -> [u8; N],
    add: impl Fn(T, T) -> T,
) {
    let get = |b: &[u8], i: usize| from(b[N * i..N * i + N].try_into().expect("N bytes"));
    for i in 0..out.len() / N {
        let mut acc = get(srcs[0], i);
        for s in &srcs[1..] {
            let x = get(s, i);
            acc = match op {
                ReduceOp::Min => acc.min(x),
                ReduceOp::Max => acc.max(x),
                ReduceOp::Sum | ReduceOp::Avg => add(acc, x),
            };
        }
        out[N * i..N * i + N].copy_from_slice(&to(acc));
    }
}

/// `out = op(srcs[0], srcs[1], ...)` element-wise, as the GPU kernels do: floats
/// accumulate in f32 in source order (`world` divides for `Avg`); integers reduce in
/// their own type, sums wrapping. Every source and `out` hold the same whole number of
/// `dtype` elements.
pub(crate) fn reduce_into(dtype: DType, op: ReduceOp, world: usize, srcs: &[&[u8]], out: &mut [u8]) {
    reduce_into_as(dtype, dtype, op, world, srcs, out)
}

/// As [`reduce_into`], with sources of `dtype` and an output of `out_dtype` (a float
/// type: the f32 accumulator is rounded to it once).
pub(crate) fn reduce_into_as(
    dtype: DType,
    out_dtype: DType,
    op: ReduceOp,
    world: usize,
    srcs: &[&[u8]],
    out: &mut [u8],
) {
    match dtype {
        DType::I32 => return int_into(srcs, out, op, i32::from_le_bytes, i32::to_le_bytes, i32::wrapping_add),
        DType::I64 => return int_into(srcs, out, op, i64::from_le_bytes, i64::to_le_bytes, i64::wrapping_add),
        DType::U8 => return int_into(srcs, out, op, u8::from_le_bytes, u8::to_le_bytes, u8::wrapping_add),
        _ => {}
    }
    // In chunks: each source converted to f32 once, then combined element-wise in rank
    // order (loops the compiler vectorises), the accumulator rounded once on the store.
    let n = out.len() / out_dtype.size();
    let (is, os) = (dtype.size(), out_dtype.size());
    let (mut acc, mut x) = (vec![0f32; CHUNK.min(n)], vec![0f32; CHUNK.min(n)]);
    let mut first = 0;
    while first < n {
        let len = CHUNK.min(n - first);
        let (acc, x) = (&mut acc[..len], &mut x[..len]);
        let at = first * is..(first + len) * is;
        load(dtype, &srcs[0][at.clone()], acc);
        for s in &srcs[1..] {
            load(dtype, &s[at.clone()], x);
            match op {
                ReduceOp::Min => acc.iter_mut().zip(x.iter()).for_each(|(a, b)| *a = a.min(*b)),
                ReduceOp::Max => acc.iter_mut().zip(x.iter()).for_each(|(a, b)| *a = a.max(*b)),
                ReduceOp::Sum | ReduceOp::Avg => acc.iter_mut().zip(x.iter()).for_each(|(a, b)| *a += *b),
            }
        }
        if op == ReduceOp::Avg {
            let w = world as f32;
            acc.iter_mut().for_each(|a| *a /= w);
        }
        store(out_dtype, &mut out[first * os..(first + len) * os], acc);
        first += len;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integer_reductions_are_exact_and_sums_wrap() {
        let a: Vec<u8> = [i64::MAX, -5, 7].iter().flat_map(|x| x.to_le_bytes()).collect();
        let b: Vec<u8> = [1i64, 3, -9].iter().flat_map(|x| x.to_le_bytes()).collect();
        let mut out = vec![0u8; 24];
        let f = |out: &[u8]| -> Vec<i64> {
            out.chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().unwrap())).collect()
        };
        reduce_into(DType::I64, ReduceOp::Sum, 2, &[&a, &b], &mut out);
        assert_eq!(f(&out), vec![i64::MIN, -2, -2]);
        reduce_into(DType::I64, ReduceOp::Min, 2, &[&a, &b], &mut out);
        assert_eq!(f(&out), vec![1, -5, -9]);
        let mut o8 = [0u8; 2];
        reduce_into(DType::U8, ReduceOp::Sum, 2, &[&[250, 1], &[10, 2]], &mut o8);
        assert_eq!(o8, [4, 3]);
        reduce_into(DType::U8, ReduceOp::Max, 2, &[&[250, 1], &[10, 2]], &mut o8);
        assert_eq!(o8, [250, 2]);
        let mut o32 = [0u8; 4];
        reduce_into(DType::I32, ReduceOp::Sum, 2, &[&(-7i32).to_le_bytes(), &3i32.to_le_bytes()], &mut o32);
        assert_eq!(i32::from_le_bytes(o32), -4);
    }

    #[test]
    fn the_branch_free_bf16_rounding_is_half_s() {
        // Every bf16 boundary neighbourhood, ties, infinities, NaNs and random bits.
        let mut xs: Vec<u32> = vec![0, 0x8000_0000, 0x7f7f_ffff, 0x7f80_0000, 0xff80_0000, 0x7fc0_0000, 0x7f80_0001];
        for hi in (0..=0xffffu32).step_by(7) {
            for lo in [0u32, 1, 0x7fff, 0x8000, 0x8001, 0xffff] {
                xs.push(hi << 16 | lo);
            }
        }
        let mut r = 0x1234_5678u32;
        for _ in 0..100_000 {
            r ^= r << 13;
            r ^= r >> 17;
            r ^= r << 5;
            xs.push(r);
        }
        for x in xs {
            let v = f32::from_bits(x);
            assert_eq!(bf16_bits(v), bf16::from_f32(v).to_bits(), "{x:#010x}");
        }
    }

    #[test]
    fn cpu_reduction_accumulates_in_f32_in_order() {
        let a: Vec<u8> = [1.0f32, 5.0, -2.0].iter().flat_map(|x| x.to_le_bytes()).collect();
        let b: Vec<u8> = [2.0f32, -1.0, 4.0].iter().flat_map(|x| x.to_le_bytes()).collect();
        let mut out = vec![0u8; 12];
        let f = |out: &[u8]| -> Vec<f32> {
            out.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()
        };
        reduce_into(DType::F32, ReduceOp::Sum, 2, &[&a, &b], &mut out);
        assert_eq!(f(&out), vec![3.0, 4.0, 2.0]);
        reduce_into(DType::F32, ReduceOp::Avg, 2, &[&a, &b], &mut out);
        assert_eq!(f(&out), vec![1.5, 2.0, 1.0]);
        reduce_into(DType::F32, ReduceOp::Min, 2, &[&a, &b], &mut out);
        assert_eq!(f(&out), vec![1.0, -1.0, -2.0]);
        reduce_into(DType::F32, ReduceOp::Max, 2, &[&a, &b], &mut out);
        assert_eq!(f(&out), vec![2.0, 5.0, 4.0]);
    }
}
