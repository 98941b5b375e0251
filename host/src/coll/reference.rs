//! The CPU reduction: what the host backend computes with, and the reference the GPU
//! kernels are held to (f32 accumulation in rank order, `Avg` divides at the end).

use half::{bf16, f16};

use super::{DType, ReduceOp};

fn load(dtype: DType, b: &[u8], i: usize) -> f32 {
    match dtype {
        DType::F32 => f32::from_le_bytes(b[4 * i..4 * i + 4].try_into().expect("4 bytes")),
        DType::F16 => f16::from_le_bytes(b[2 * i..2 * i + 2].try_into().expect("2 bytes")).to_f32(),
        DType::Bf16 => bf16::from_le_bytes(b[2 * i..2 * i + 2].try_into().expect("2 bytes")).to_f32(),
        _ => unreachable!("checked reducible"),
    }
}

fn store(dtype: DType, b: &mut [u8], i: usize, v: f32) {
    match dtype {
        DType::F32 => b[4 * i..4 * i + 4].copy_from_slice(&v.to_le_bytes()),
        DType::F16 => b[2 * i..2 * i + 2].copy_from_slice(&f16::from_f32(v).to_le_bytes()),
        DType::Bf16 => b[2 * i..2 * i + 2].copy_from_slice(&bf16::from_f32(v).to_le_bytes()),
        _ => unreachable!("checked reducible"),
    }
}

/// `out = op(srcs[0], srcs[1], ...)` element-wise, accumulating in f32 in source order,
/// as the GPU kernels do (`world` divides for `Avg`). Every source and `out` hold the
/// same whole number of `dtype` elements; `dtype` is reducible.
pub(crate) fn reduce_into(dtype: DType, op: ReduceOp, world: usize, srcs: &[&[u8]], out: &mut [u8]) {
    let n = out.len() / dtype.size();
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
        store(dtype, out, i, acc);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
