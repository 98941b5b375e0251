//! The contenders of the saturated benchmark ([`crate::saturated`]): lowcon's
//! algorithms, NCCL (default and copy-engine communicators), the null collective and
//! null+local (the null's copies plus a same-device copy of the shard), each as a closure that enqueues one call, and the CTAs each one's kernels hold.

use lowcon::cuda::Stream;
use lowcon::plan::DEFAULT_REDUCE_CTAS;
use lowcon::{
    AllGatherOptions, DType, DeviceBuf, GpuGroup, ReduceOp, ReduceScatterOptions, SymmetricBuffer, SyncMethod,
};

use crate::sweep::Kind;
use crate::{Res, nccl};

/// One implementation of a collective call.
#[derive(Clone, Debug)]
pub(crate) enum Impl {
    Lowcon {
        algo: String,
        method: SyncMethod,
    },
    Nccl {
        ce: bool,
        /// The reduce-scatter's element type: bf16 by default; beside a wire sweep f32
        /// and bf16 (the same element count: half the bytes).
        dtype: DType,
    },
    Null,
    /// The null's peer copies plus a same-device copy of the shard: does a plain local
    /// `cuMemcpyAsync` (which the driver may run on SMs) slow down under a persistent GEMM?
    NullLocal,
}

/// An NCCL communicator, whether it is the copy-engine one, and its windows (in, out).
pub(crate) type NcclComm = (nccl::Comm, bool, Option<(nccl::NcclMem, nccl::NcclMem)>);
/// Enqueues one collective call on a stream.
pub(crate) type Caller<'a> = Box<dyn FnMut(&Stream) -> Res<()> + 'a>;
/// The CTAs an implementation's kernels hold, and where the number comes from.
pub(crate) fn ctas_of(
    i: &Impl,
    kind: Kind,
    ctas: Option<u32>,
    nccl_ctas: (Option<u32>, &str),
) -> (Option<u32>, String) {
    match i {
        Impl::Null => (Some(0), "none".into()),
        // The driver picks how a same-device copy runs (copy engine or kernel).
        Impl::NullLocal => (None, "memcpy".into()),
        Impl::Lowcon { algo, method } => match algo.as_str() {
            "sm-direct" | "ce-reduce" => (Some(ctas.unwrap_or(DEFAULT_REDUCE_CTAS)), "option".into()),
            // Their reduction kernel holds `ctas` CTAs whatever the sync method.
            "tma-reduce" | "tma-reduce-evict" | "tma-push-reduce" => {
                (Some(ctas.unwrap_or(lowcon::plan::DEFAULT_TMA_CTAS)), "option".into())
            }
            _ if *method == SyncMethod::StreamMemop => (Some(0), "memop".into()),
            _ => (Some(1), "barrier".into()),
        },
        Impl::Nccl { ce: true, .. } if kind == Kind::AllGather => (Some(0), "ce".into()),
        Impl::Nccl { .. } => (nccl_ctas.0, nccl_ctas.1.to_string()),
    }
}

/// A closure that enqueues one call of `im` on a stream.
#[allow(clippy::too_many_arguments)]
/// With `wire` (reduce-scatter), lowcon's calls reduce f32 (`shard / 4` elements per
/// rank) over that wire (NOTE [bf16 wire]), and NCCL's the same element count; with
/// `bf16_in`, lowcon's calls reduce the same element count of bf16 into f32 (FSDP2's bf16
/// copy-in); `map` is lowcon's `map_ordinary` for those calls (`Some(true)`: sm-direct reads
/// the bf16 input where it is, NOTE [bf16 input read in place]).
pub(crate) fn caller<'a>(
    g: &'a GpuGroup,
    kind: Kind,
    im: &'a Impl,
    shard: usize,
    buf_a: &'a SymmetricBuffer,
    buf_b: &'a SymmetricBuffer,
    comms: &'a [NcclComm],
    (ctas, wire, bf16_in, map): (Option<u32>, Option<DType>, bool, Option<bool>),
) -> Res<Caller<'a>> {
    let (world, rank) = (g.world_size(), g.rank());
    let carried = (wire.is_some() || bf16_in) && kind == Kind::ReduceScatter;
    // The element count is the f32 call's; lowcon's input is bf16 with `bf16_in`.
    let dt = if carried { DType::F32 } else { DType::Bf16 };
    let in_dt = if bf16_in && kind == Kind::ReduceScatter { DType::Bf16 } else { dt };
    let (in_n, out_n) = match kind {
        Kind::AllGather => (shard / 2, world * shard / 2),
        Kind::ReduceScatter => (world * shard / dt.size(), shard / dt.size()),
    };
    Ok(match im {
        Impl::Lowcon { algo, method } => {
            let sync = *method;
            match kind {
                Kind::AllGather => {
                    let (algorithm, arrival) = crate::ag_variant(algo)?;
                    let o = AllGatherOptions { algorithm, arrival, sync: Some(sync), ctas, ..Default::default() };
                    Box::new(move |s: &Stream| {
                        let ib = DeviceBuf::symmetric(buf_a, 0, in_n, DType::Bf16)?;
                        let ob = DeviceBuf::symmetric(buf_b, 0, out_n, DType::Bf16)?;
                        Ok(g.all_gather(ib, ob, s, &o)?)
                    })
                }
                Kind::ReduceScatter => {
                    let (algorithm, reduce_launch) = crate::rs_variant(algo)?;
                    let o = ReduceScatterOptions {
                        algorithm,
                        reduce_launch,
                        sync: Some(sync),
                        ctas,
                        wire,
                        map_ordinary: map,
                        ..Default::default()
                    };
                    Box::new(move |s: &Stream| {
                        let ib = DeviceBuf::symmetric(buf_a, 0, in_n, in_dt)?;
                        let ob = DeviceBuf::symmetric(buf_b, 0, out_n, dt)?;
                        Ok(g.reduce_scatter(ib, ob, ReduceOp::Sum, s, &o)?)
                    })
                }
            }
        }
        Impl::Nccl { ce, dtype } => {
            let (c, _, w) = comms.iter().find(|(_, x, _)| x == ce).ok_or("NCCL communicator missing")?;
            let (dtype, count) = (*dtype, out_n);
            let (pi, po) = w.as_ref().map_or((buf_a.local_ptr(), buf_b.local_ptr()), |(i, o)| (i.ptr(), o.ptr()));
            Box::new(move |s: &Stream| {
                // SAFETY: both buffers hold world × max shard bytes, at least what one call uses.
                unsafe {
                    match kind {
                        Kind::AllGather => c.all_gather(pi, po, shard, s.raw() as _)?,
                        Kind::ReduceScatter => c.reduce_scatter(pi, po, count, dtype, ReduceOp::Sum, s.raw() as _)?,
                    }
                }
                Ok(())
            })
        }
        Impl::Null | Impl::NullLocal => Box::new(move |s: &Stream| {
            let off = (rank * shard) as u64;
            for p in (1..world).map(|d| (rank + d) % world) {
                // SAFETY: this rank's slot of both buffers (world × max shard bytes each,
                // mapped on every rank) holds `shard` bytes; nobody reads buf_b's slots.
                unsafe { s.copy(buf_b.peer_ptr(p) + off, buf_a.local_ptr() + off, shard)? };
            }
            if matches!(im, Impl::NullLocal) {
                // SAFETY: this rank's own slot of both local buffers; peers write only
                // their own slots of buf_b, and nobody reads it.
                unsafe { s.copy(buf_b.local_ptr() + off, buf_a.local_ptr() + off, shard)? };
            }
            Ok(())
        }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cta_counts_say_where_they_come_from() {
        let lowcon = |algo: &str, method| Impl::Lowcon { algo: algo.into(), method };
        let n = (Some(24), "debug");
        let ag = Kind::AllGather;
        let rs = Kind::ReduceScatter;
        assert_eq!(ctas_of(&lowcon("ce-push", SyncMethod::Kernel), ag, None, n), (Some(1), "barrier".into()));
        assert_eq!(ctas_of(&lowcon("ce-pull", SyncMethod::StreamMemop), ag, None, n), (Some(0), "memop".into()));
        assert_eq!(ctas_of(&lowcon("sm-direct", SyncMethod::Kernel), rs, None, n), (Some(16), "option".into()));
        assert_eq!(ctas_of(&lowcon("ce-reduce", SyncMethod::Kernel), rs, Some(8), n), (Some(8), "option".into()));
        let tma = ctas_of(&lowcon("tma-reduce", SyncMethod::Kernel), rs, None, n);
        assert_eq!(tma, (Some(lowcon::plan::DEFAULT_TMA_CTAS), "option".into()));
        let tma = ctas_of(&lowcon("tma-reduce-evict", SyncMethod::StreamMemop), rs, Some(4), n);
        assert_eq!(tma, (Some(4), "option".into()));
        assert_eq!(ctas_of(&Impl::Nccl { ce: false, dtype: DType::Bf16 }, ag, None, n), (Some(24), "debug".into()));
        assert_eq!(ctas_of(&Impl::Nccl { ce: true, dtype: DType::Bf16 }, ag, None, n), (Some(0), "ce".into()));
        assert_eq!(
            ctas_of(&Impl::Nccl { ce: true, dtype: DType::Bf16 }, rs, None, (None, "unknown")),
            (None, "unknown".into())
        );
        assert_eq!(ctas_of(&Impl::Null, rs, None, n), (Some(0), "none".into()));
        assert_eq!(ctas_of(&Impl::NullLocal, ag, None, n), (None, "memcpy".into()));
    }
}
