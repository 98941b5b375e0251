//! The CPU reduction: what the host backend computes with, and the reference the GPU
//! kernels are held to (f32 accumulation in rank order, `Avg` divides at the end).

use half::{bf16, f16};

use super::{DType, ReduceOp};

fn load(dtype: DType, b: &[u8], i: usize) -> f32 {
    match dtype {
        DType::F32 => f32::from_le_bytes(b[4 * i..4 * i + 4].try_into().expect("4 bytes")),
        DType::F16 => f16::from_le_bytes(b[2 * i..2 * i + 2].try_into().expect("2 bytes")).to_f32(),
        DType::Bf16 => bf16::from_le_bytes(b[2 * i..2 * i + 2].try_into().expect("2 bytes")).to_f32(),
        _ => unreachable!("integers reduce in int_into"),
    }
}

fn store(dtype: DType, b: &mut [u8], i: usize, v: f32) {
    match dtype {
        DType::F32 => b[4 * i..4 * i + 4].copy_from_slice(&v.to_le_bytes()),
        DType::F16 => b[2 * i..2 * i + 2].copy_from_slice(&f16::from_f32(v).to_le_bytes()),
        DType::Bf16 => b[2 * i..2 * i + 2].copy_from_slice(&bf16::from_f32(v).to_le_bytes()),
        _ => unreachable!("integers reduce in int_into"),
    }
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
    let n = out.len() / out_dtype.size();
    for i in 0..n {
        let mut acc = load(dtype, srcs[0], i);
        for s in &srcs[1..] {
            let x = load(dtype, s, i);
            acc = match op {
                ReduceOp::Min => acc.min(x),
                ReduceOp::Max => acc.max(x),
                ReduceOp::Sum | ReduceOp::Avg => acc + x,
            };
        }
        if op == ReduceOp::Avg {
            acc /= world as f32;
        }
        store(out_dtype, out, i, acc);
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
