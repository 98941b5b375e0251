//! The embedded PTX and typed launchers for lowcon's kernels.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use cudarc::driver::sys::CUfunction_attribute;
use cudarc::driver::{
    CudaContext, CudaFunction, CudaModule, CudaSlice, DriverError, LaunchArgs, LaunchConfig, PushKernelArg,
};
use cudarc::nvrtc::Ptx;
use lowcon_abi::{ErrorRecord, RoundTripReport, kernel_names as names, reduce_dtype};

use super::Stream;
use super::stream::DeviceRecord;
use crate::error::{Error, Result, drv};

mod fused;
mod once;
mod release;
mod wire;
pub(crate) use fused::FusedArgs;
pub(crate) use once::OnceArgs;
pub(crate) use wire::{WirePackArgs, WireReduceArgs};

/// The PTX of `gpu-kernels/kernels/`, built by `host/build.rs` (or taken from `LOWCON_PTX_DIR`).
pub const PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/lowcon_kernels.ptx"));

/// lowcon's kernels, loaded into one context.
#[derive(Debug)]
pub struct Kernels {
    _module: Arc<CudaModule>,
    vec_add_f32: CudaFunction,
    flag_ping: CudaFunction,
    flag_pong: CudaFunction,
    barrier: CudaFunction,
    put_signal: CudaFunction,
    wait_signal: CudaFunction,
    wait_word: CudaFunction,
    release: CudaFunction,
    release_wait: CudaFunction,
    allgather_oneshot: CudaFunction,
    reduce: [CudaFunction; 3],
    rs_direct: [CudaFunction; 3],
    /// sm-direct of a bf16 input into an f32 output (`lowcon_rs_direct_bf16_f32`).
    rs_direct_bf16_in: CudaFunction,
    tma_reduce: [CudaFunction; 3],
    /// The dynamic shared memory each `tma_reduce` kernel has been allowed so far
    /// (`CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES`; 48 KiB without it).
    tma_smem: [AtomicU32; 3],
    tma_push_reduce: [CudaFunction; 3],
    /// As `tma_smem`, for `tma_push_reduce`.
    push_smem: [AtomicU32; 3],
    ll_allgather: CudaFunction,
    ll_rs: [CudaFunction; 3],
    reduce_int: CudaFunction,
    rs_direct_int: CudaFunction,
    wire_pack: [CudaFunction; 2],
    wire_reduce: [CudaFunction; 2],
    wire_wait: CudaFunction,
    reduce_once: [CudaFunction; 3],
    spin: CudaFunction,
    /// Whether the driver can launch LL rounds overlapped (NOTE [LL launch overlap]; the
    /// plan says whether to): decided at load, cleared if the driver refuses the attribute.
    ll_overlap: std::sync::atomic::AtomicBool,
}

// NOTE [LL launch overlap]
// An LL call is one short kernel, and back-to-back LL calls (a sweep, a replayed graph
// of small collectives, a model's many small all-gathers) spend part of each call in
// the gap between one kernel's end and the next one's start. Each LL round is launched
// with programmatic stream serialization allowed (`raw::launch::programmatic`): its
// CTAs may be scheduled while the stream's previous kernel runs, and every CTA starts
// with `griddepcontrol.wait`, which returns once that kernel has completed and its
// memory is visible, so nothing the round reads or writes (the round counter, the LL
// buffers, the source) moves earlier, and NOTE [LL protocol]'s argument holds as it
// is. Every LL CTA then triggers its dependents at once (`launch_dependents`): a
// following LL round can be scheduled as soon as this one's CTAs are all resident.
// Any other kernel after it is launched as usual, and waits for the whole round.
// Needs a driver of CUDA 12.3 or later and sm_90. The plan decides it (its `ll_overlap`,
// NOTE [plan settings]): `LOWCON_LL_OVERLAP=0` turns it off, and so does a group whose
// ranks share the GPU: an early round's CTAs are resident while they wait, which would
// break NOTE [shared CTAs]'s count of the kernels each rank holds.

/// `l.launch(cfg)`, its host time counted (NOTE [enqueue clock] in `cuda::enqueued`).
///
/// # Safety
/// As cudarc's `LaunchArgs::launch`: the arguments match the kernel's parameters and
/// what they point to is valid until it has run.
unsafe fn timed_launch(l: &mut LaunchArgs<'_>, cfg: LaunchConfig) -> std::result::Result<(), DriverError> {
    let _t = super::enqueued::time(super::enqueued::Enqueue::Launch);
    // SAFETY: forwarded from the caller.
    unsafe { l.launch(cfg) }.map(drop)
}

/// The arguments of one LL round: see `gpu-kernels/kernels/src/ll.rs` for their contract.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LlArgs {
    /// Device array of the `world` LL-buffer bases.
    pub bases: u64,
    /// This rank's round counter (`lowcon_abi::pad::ll_seq_offset`) and CTA counter
    /// words of the channel: the kernel reads its round there and advances it (NOTE [LL
    /// rounds on the device], `gpu-kernels/kernels/src/ll.rs`).
    pub seq: u64,
    pub counter: u64,
    /// Bytes of one source's slot.
    pub slot: u64,
    /// This rank's input and output.
    pub src: u64,
    pub dst: u64,
    /// Bytes of the shard (all-gather) or chunk (reduce-scatter).
    pub bytes: u64,
    /// The round's first line and line count (`n <= slot / 16`).
    pub first: u64,
    pub n: u64,
    /// `src`, `dst` and `bytes` are multiples of 8.
    pub aligned: bool,
    /// The plan's NOTE [LL launch overlap] (launched plainly where the driver cannot).
    pub overlap: bool,
}

/// The arguments of a `tma-reduce` launch besides the fused barrier's: see
/// `gpu-kernels/kernels/src/tma.rs` (`tma_reduce`) for their contract.
#[derive(Clone, Copy, Debug)]
pub(crate) struct TmaArgs {
    /// Device array of the `world` symmetric-buffer bases.
    pub bases: u64,
    /// Byte offset of this rank's chunk in every rank's input.
    pub off: u64,
    pub dst: u64,
    /// Elements of the chunk.
    pub n: u64,
    pub op: u32,
    /// Head elements and body bytes (`coll::geometry::tma_split`).
    pub head: u64,
    pub body: u64,
    /// Ring tile bytes and stages (`plan::tma::tma_ring`).
    pub tile: u32,
    pub stages: u32,
    pub vec_out: bool,
    /// Evict-first L2 hint on the bulk loads.
    pub evict_first: bool,
}

/// The arguments of a `tma-push-reduce` launch besides the fused barrier's: see
/// `gpu-kernels/kernels/src/push.rs` (`tma_push_reduce`) for their contract.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PushArgs {
    /// This rank's 16-byte-aligned, padded input: chunk `p` at `src + p * stride`.
    pub src: u64,
    pub stride: u64,
    /// Device array of the `world` workspace bases; each accumulator at `acc_off`.
    pub bases: u64,
    pub acc_off: u64,
    /// Bytes pushed per chunk (the chunk rounded up to 16).
    pub body: u64,
    /// Ring tile bytes (`plan::tma::push_tile`).
    pub tile: u32,
}

/// Threads per CTA of the collective kernels (declared in their PTX by the build).
pub(crate) const COLL_THREADS: u32 = lowcon_abi::kernel_names::COLL_THREADS;

/// Arguments of the signal-pad kernels: where the pads are and who is asking.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PadArgs {
    /// Device array of the `world` pad base pointers.
    pub pads: u64,
    pub rank: u32,
    pub world: u32,
    /// Device pointer to the group's (host-mapped) error record.
    pub err: u64,
    pub timeout_ns: u64,
}

impl Kernels {
    /// JIT-loads the embedded PTX into `ctx` and resolves every kernel.
    pub(crate) fn load(ctx: &Arc<CudaContext>) -> Result<Self> {
        let module = ctx.load_module(Ptx::from_src(PTX)).map_err(drv("cuModuleLoadData"))?;
        let f = |name: &'static str| {
            module
                .load_function(name)
                .map_err(|e| Error::MissingKernel { name, source: Box::new(Error::driver("cuModuleGetFunction", e)) })
        };
        Ok(Self {
            vec_add_f32: f(names::VEC_ADD_F32)?,
            flag_ping: f(names::FLAG_PING)?,
            flag_pong: f(names::FLAG_PONG)?,
            barrier: f(names::BARRIER)?,
            put_signal: f(names::PUT_SIGNAL)?,
            wait_signal: f(names::WAIT_SIGNAL)?,
            wait_word: f(names::WAIT_WORD)?,
            release: f(names::RELEASE)?,
            release_wait: f(names::RELEASE_WAIT)?,
            allgather_oneshot: f(names::ALLGATHER_ONESHOT)?,
            reduce: [f(names::REDUCE[0])?, f(names::REDUCE[1])?, f(names::REDUCE[2])?],
            rs_direct: [f(names::RS_DIRECT[0])?, f(names::RS_DIRECT[1])?, f(names::RS_DIRECT[2])?],
            rs_direct_bf16_in: f(names::RS_DIRECT_BF16_IN)?,
            tma_reduce: [f(names::TMA_REDUCE[0])?, f(names::TMA_REDUCE[1])?, f(names::TMA_REDUCE[2])?],
            tma_smem: Default::default(),
            tma_push_reduce: [
                f(names::TMA_PUSH_REDUCE[0])?,
                f(names::TMA_PUSH_REDUCE[1])?,
                f(names::TMA_PUSH_REDUCE[2])?,
            ],
            push_smem: Default::default(),
            ll_allgather: f(names::LL_ALLGATHER)?,
            ll_rs: [f(names::LL_RS[0])?, f(names::LL_RS[1])?, f(names::LL_RS[2])?],
            reduce_int: f(names::REDUCE_INT)?,
            rs_direct_int: f(names::RS_DIRECT_INT)?,
            wire_pack: [f(names::WIRE_PACK[0])?, f(names::WIRE_PACK[1])?],
            wire_reduce: [f(names::WIRE_REDUCE[0])?, f(names::WIRE_REDUCE[1])?],
            wire_wait: f(names::WIRE_WAIT)?,
            reduce_once: [f(names::REDUCE_ONCE[0])?, f(names::REDUCE_ONCE[1])?, f(names::REDUCE_ONCE[2])?],
            spin: f(names::SPIN)?,
            // Whether the driver takes the attribute (the plan says whether to use it).
            ll_overlap: std::sync::atomic::AtomicBool::new(super::driver_version().is_ok_and(|v| v >= (12, 3))),
            _module: module,
        })
    }

    /// Enqueues the one-CTA barrier kernel.
    ///
    /// # Safety
    /// `a.pads` is a device array of `a.world` mapped pad pointers and `a.err` a
    /// device-visible error record, both alive until the kernel has run.
    pub(crate) unsafe fn barrier(
        &self,
        stream: &Stream,
        a: PadArgs,
        channel: u32,
        kind: u32,
        epoch: u32,
    ) -> Result<()> {
        let threads = a.world.div_ceil(32).clamp(1, 32) * 32;
        let cfg = LaunchConfig { grid_dim: (1, 1, 1), block_dim: (threads, 1, 1), shared_mem_bytes: 0 };
        let mut l = stream.cuda_stream().launch_builder(&self.barrier);
        l.arg(&a.pads).arg(&a.rank).arg(&a.world).arg(&channel).arg(&kind).arg(&epoch);
        l.arg(&a.timeout_ns).arg(&a.err);
        // SAFETY: matches `lowcon_barrier`'s signature; pointer validity is the caller's.
        unsafe { timed_launch(&mut l, cfg) }.map_err(drv("cuLaunchKernel(barrier)"))?;
        Ok(())
    }

    /// Enqueues a one-thread `put_signal` to `peer`.
    ///
    /// # Safety
    /// As [`Kernels::barrier`], with `peer < a.world`.
    pub(crate) unsafe fn put_signal(
        &self,
        stream: &Stream,
        a: PadArgs,
        peer: u32,
        channel: u32,
        epoch: u32,
    ) -> Result<()> {
        let cfg = LaunchConfig { grid_dim: (1, 1, 1), block_dim: (1, 1, 1), shared_mem_bytes: 0 };
        let mut l = stream.cuda_stream().launch_builder(&self.put_signal);
        l.arg(&a.pads).arg(&a.rank).arg(&a.world).arg(&peer).arg(&channel).arg(&epoch);
        // SAFETY: matches `lowcon_put_signal`'s signature; validity is the caller's.
        unsafe { timed_launch(&mut l, cfg) }.map_err(drv("cuLaunchKernel(put_signal)"))?;
        Ok(())
    }

    /// Enqueues a one-thread `wait_signal` for `peer`.
    ///
    /// # Safety
    /// As [`Kernels::barrier`], with `peer < a.world`.
    pub(crate) unsafe fn wait_signal(
        &self,
        stream: &Stream,
        a: PadArgs,
        peer: u32,
        channel: u32,
        epoch: u32,
    ) -> Result<()> {
        let cfg = LaunchConfig { grid_dim: (1, 1, 1), block_dim: (1, 1, 1), shared_mem_bytes: 0 };
        let mut l = stream.cuda_stream().launch_builder(&self.wait_signal);
        l.arg(&a.pads).arg(&a.rank).arg(&a.world).arg(&peer).arg(&channel).arg(&epoch).arg(&a.timeout_ns).arg(&a.err);
        // SAFETY: matches `lowcon_wait_signal`'s signature; validity is the caller's.
        unsafe { timed_launch(&mut l, cfg) }.map_err(drv("cuLaunchKernel(wait_signal)"))?;
        Ok(())
    }

    /// Enqueues a one-thread wait for the word at `word` (pinned host memory) to reach
    /// `value` (`lowcon_wait_word`).
    ///
    /// # Safety
    /// `word` stays valid mapped memory until the kernel has run; `a.err` is the group's
    /// error record.
    pub(crate) unsafe fn wait_word(
        &self,
        stream: &Stream,
        a: PadArgs,
        word: u64,
        value: u32,
        channel: u32,
    ) -> Result<()> {
        let cfg = LaunchConfig { grid_dim: (1, 1, 1), block_dim: (1, 1, 1), shared_mem_bytes: 0 };
        let mut l = stream.cuda_stream().launch_builder(&self.wait_word);
        l.arg(&word).arg(&value).arg(&a.rank).arg(&channel).arg(&a.timeout_ns).arg(&a.err);
        // SAFETY: matches `lowcon_wait_word`'s signature; validity is the caller's.
        unsafe { timed_launch(&mut l, cfg) }.map_err(drv("cuLaunchKernel(wait_word)"))?;
        Ok(())
    }

    /// Enqueues the one-shot all-gather on `ctas` CTAs.
    ///
    /// # Safety
    /// `bases` is a device array of `world` symmetric-buffer bases each valid for
    /// `src_off + shard` bytes, `dst` is valid for `world * shard` bytes, the fused
    /// arguments point into the group's live pads; `vec_ok` only if `src_off`, `dst`
    /// and `shard` are multiples of 16.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn allgather_oneshot(
        &self,
        stream: &Stream,
        f: FusedArgs,
        ctas: u32,
        bases: u64,
        src_off: u64,
        dst: u64,
        shard: u64,
        vec_ok: bool,
    ) -> Result<()> {
        let cfg = LaunchConfig { grid_dim: (ctas, 1, 1), block_dim: (COLL_THREADS, 1, 1), shared_mem_bytes: 0 };
        let mut l = stream.cuda_stream().launch_builder(&self.allgather_oneshot);
        let vec_ok = vec_ok as u32;
        l.arg(&f);
        l.arg(&bases).arg(&src_off).arg(&dst).arg(&shard).arg(&vec_ok);
        // SAFETY: matches `lowcon_allgather_oneshot`'s signature; validity is the caller's.
        unsafe { timed_launch(&mut l, cfg) }.map_err(drv("cuLaunchKernel(allgather_oneshot)"))?;
        Ok(())
    }

    /// Enqueues ce-reduce's reduction of one piece on `ctas` CTAs of `threads` (`dtype` is
    /// a `reduce_dtype` index; the integers, from `I32` on, run `lowcon_reduce_int`).
    ///
    /// # Safety
    /// `own` and `dst` valid for `n` elements, `staged` for `(world - 1) * stride`;
    /// `vec_ok` only if all addresses and `stride` allow 16-byte vectors.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn reduce(
        &self,
        stream: &Stream,
        dtype: usize,
        (ctas, threads): (u32, u32),
        own: u64,
        own_idx: u32,
        staged: u64,
        stride: u64,
        world: u32,
        dst: u64,
        n: u64,
        op: u32,
        vec_ok: bool,
    ) -> Result<()> {
        let threads = threads.clamp(32, COLL_THREADS);
        let cfg = LaunchConfig { grid_dim: (ctas, 1, 1), block_dim: (threads, 1, 1), shared_mem_bytes: 0 };
        // Integers: one kernel, the type as its last argument (instead of `vec_ok`).
        let (func, last) = match dtype.checked_sub(reduce_dtype::I32) {
            Some(int) => (&self.reduce_int, int as u32),
            None => (&self.reduce[dtype], vec_ok as u32),
        };
        let mut l = stream.cuda_stream().launch_builder(func);
        l.arg(&own).arg(&own_idx).arg(&staged).arg(&stride).arg(&world).arg(&dst).arg(&n).arg(&op).arg(&last);
        // SAFETY: matches `lowcon_reduce_*`'s signature; validity is the caller's.
        unsafe { timed_launch(&mut l, cfg) }.map_err(drv("cuLaunchKernel(reduce)"))?;
        Ok(())
    }

    /// Enqueues the sm-direct reduce-scatter (`dtype` is a `reduce_dtype` index; the
    /// integers run `lowcon_rs_direct_int`).
    ///
    /// # Safety
    /// As [`Kernels::allgather_oneshot`], with every `bases[p] + off` valid for `n`
    /// elements and `dst` for `n`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn rs_direct(
        &self,
        stream: &Stream,
        dtype: usize,
        f: FusedArgs,
        ctas: u32,
        bases: u64,
        off: u64,
        dst: u64,
        n: u64,
        op: u32,
        vec_ok: bool,
    ) -> Result<()> {
        let cfg = LaunchConfig { grid_dim: (ctas, 1, 1), block_dim: (COLL_THREADS, 1, 1), shared_mem_bytes: 0 };
        let (func, vec_ok) = match dtype.checked_sub(reduce_dtype::I32) {
            Some(int) => (&self.rs_direct_int, int as u32),
            None => (&self.rs_direct[dtype], vec_ok as u32),
        };
        let mut l = stream.cuda_stream().launch_builder(func);
        l.arg(&f);
        l.arg(&bases).arg(&off).arg(&dst).arg(&n).arg(&op).arg(&vec_ok);
        // SAFETY: matches `lowcon_rs_direct_*`'s signature; validity is the caller's.
        unsafe { timed_launch(&mut l, cfg) }.map_err(drv("cuLaunchKernel(rs_direct)"))?;
        Ok(())
    }

    /// Enqueues the sm-direct reduce-scatter of a bf16 input into an f32 output
    /// (`lowcon_rs_direct_bf16_f32`): every rank's bf16 chunk at `bases[p] + off` (`off`
    /// in bytes, as for [`Kernels::rs_direct`]) reduced in f32, in rank order, into `n`
    /// f32s at `dst`, bit for bit the f32 kernel's result on the inputs widened to f32.
    /// Launched as `rs_direct`'s floats are.
    ///
    /// `gate`: the verify word (a device pointer to pinned memory) and the value the kernel
    /// waits for before it reads `bases` (NOTE [addresses predicted]); `None`: no wait.
    ///
    /// # Safety
    /// As [`Kernels::allgather_oneshot`], with every `bases[p] + off` valid for `n` bf16
    /// elements once the gate opens and `dst` for `n` f32s; `vec_ok` only if every
    /// `bases[p] + off` and `dst` are 16-byte aligned; the gate's word live until the
    /// kernel has run.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn rs_direct_bf16_in(
        &self,
        stream: &Stream,
        (f, pad, channel): (FusedArgs, PadArgs, u32),
        ctas: u32,
        (bases, off, dst, n): (u64, u64, u64, u64),
        (op, vec_ok): (u32, bool),
        gate: Option<(u64, u32)>,
    ) -> Result<()> {
        let cfg = LaunchConfig { grid_dim: (ctas, 1, 1), block_dim: (COLL_THREADS, 1, 1), shared_mem_bytes: 0 };
        let vec_ok = vec_ok as u32;
        let (word, value) = gate.unwrap_or((0, 0));
        let mut l = stream.cuda_stream().launch_builder(&self.rs_direct_bf16_in);
        l.arg(&f);
        l.arg(&bases).arg(&off).arg(&dst).arg(&n).arg(&op).arg(&vec_ok);
        l.arg(&word).arg(&value).arg(&pad.rank).arg(&channel).arg(&pad.timeout_ns).arg(&pad.err);
        // SAFETY: matches `lowcon_rs_direct_bf16_f32`'s signature; validity is the caller's.
        unsafe { timed_launch(&mut l, cfg) }.map_err(drv("cuLaunchKernel(rs_direct_bf16_in)"))?;
        Ok(())
    }

    /// Enqueues the tma-reduce reduce-scatter (`dtype` is a `reduce_dtype` index) on
    /// `ctas` CTAs of `TMA_THREADS` threads, with the ring's dynamic shared memory
    /// (allowed above 48 KiB with `cuFuncSetAttribute` the first time it is needed).
    ///
    /// # Safety
    /// As [`Kernels::rs_direct`], and `a` meets `tma_reduce`'s contract.
    pub(crate) unsafe fn tma_reduce(
        &self,
        stream: &Stream,
        dtype: usize,
        f: FusedArgs,
        ctas: u32,
        a: &TmaArgs,
    ) -> Result<()> {
        let smem = lowcon_abi::tma::smem_bytes(f.0.world, a.tile, a.stages);
        let func = &self.tma_reduce[dtype];
        if self.tma_smem[dtype].load(Ordering::Relaxed) < smem {
            let attr = CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES;
            func.set_attribute(attr, smem as i32)
                .map_err(|e| Error::driver("cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES) of tma_reduce", e))?;
            self.tma_smem[dtype].fetch_max(smem, Ordering::Relaxed);
        }
        let threads = lowcon_abi::kernel_names::TMA_THREADS;
        let cfg = LaunchConfig { grid_dim: (ctas, 1, 1), block_dim: (threads, 1, 1), shared_mem_bytes: smem };
        let mut l = stream.cuda_stream().launch_builder(func);
        let (vec_out, hint) = (a.vec_out as u32, a.evict_first as u32);
        l.arg(&f);
        l.arg(&a.bases).arg(&a.off).arg(&a.dst).arg(&a.n).arg(&a.op).arg(&a.head).arg(&a.body);
        l.arg(&a.tile).arg(&a.stages).arg(&vec_out).arg(&hint);
        // SAFETY: matches `lowcon_tma_reduce_*`'s signature; validity is the caller's.
        unsafe { timed_launch(&mut l, cfg) }.map_err(drv("cuLaunchKernel(tma_reduce)"))?;
        Ok(())
    }

    /// Enqueues one round of the LL all-gather on `ctas` CTAs; with `own`, this rank's
    /// lines are copied into its own slot of the output too.
    ///
    /// # Safety
    /// `pad.err` is the group's error record, and `a` meets `lowcon_ll_allgather`'s
    /// contract (`gpu-kernels/kernels/src/ll.rs`), all alive until the kernel has run.
    pub(crate) unsafe fn ll_allgather(
        &self,
        stream: &Stream,
        pad: PadArgs,
        channel: u32,
        ctas: u32,
        a: &LlArgs,
        own: bool,
    ) -> Result<()> {
        // SAFETY: forwarded from the caller; `own` is `lowcon_ll_allgather`'s last-but-one
        // argument.
        unsafe {
            self.ll_round(&self.ll_allgather, "cuLaunchKernel(ll_allgather)", stream, pad, channel, ctas, a, own as u32)
        }
    }

    /// Enqueues one round of the LL reduce-scatter (`dtype` is a `reduce_dtype` index).
    ///
    /// # Safety
    /// As [`Kernels::ll_allgather`], for `ll_rs`'s contract.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn ll_rs(
        &self,
        stream: &Stream,
        dtype: usize,
        pad: PadArgs,
        channel: u32,
        ctas: u32,
        a: &LlArgs,
        op: u32,
    ) -> Result<()> {
        // SAFETY: forwarded from the caller; `op` is `lowcon_ll_rs_*`'s last-but-one argument.
        unsafe { self.ll_round(&self.ll_rs[dtype], "cuLaunchKernel(ll_rs)", stream, pad, channel, ctas, a, op) }
    }

    /// Launches an LL kernel: both take the same arguments but the last-but-one (`own` for
    /// the all-gather, the operator for the reduce-scatter), `extra`.
    ///
    /// # Safety
    /// `func` is `lowcon_ll_allgather` or a `lowcon_ll_rs_*`; as [`Kernels::ll_allgather`].
    #[allow(clippy::too_many_arguments)]
    unsafe fn ll_round(
        &self,
        func: &CudaFunction,
        what: &'static str,
        stream: &Stream,
        pad: PadArgs,
        channel: u32,
        ctas: u32,
        a: &LlArgs,
        extra: u32,
    ) -> Result<()> {
        let aligned = a.aligned as u32;
        if a.overlap && self.ll_overlap.load(Ordering::Relaxed) {
            // The LL kernels' parameters, in order (`ll_kernel!` in `gpu-kernels/kernels/src/ll.rs`).
            let mut params: [*mut std::ffi::c_void; 16] = [
                std::ptr::from_ref(&pad.rank).cast_mut().cast(),
                std::ptr::from_ref(&pad.world).cast_mut().cast(),
                std::ptr::from_ref(&channel).cast_mut().cast(),
                std::ptr::from_ref(&pad.timeout_ns).cast_mut().cast(),
                std::ptr::from_ref(&pad.err).cast_mut().cast(),
                std::ptr::from_ref(&a.bases).cast_mut().cast(),
                std::ptr::from_ref(&a.seq).cast_mut().cast(),
                std::ptr::from_ref(&a.counter).cast_mut().cast(),
                std::ptr::from_ref(&a.slot).cast_mut().cast(),
                std::ptr::from_ref(&a.src).cast_mut().cast(),
                std::ptr::from_ref(&a.dst).cast_mut().cast(),
                std::ptr::from_ref(&a.bytes).cast_mut().cast(),
                std::ptr::from_ref(&a.first).cast_mut().cast(),
                std::ptr::from_ref(&a.n).cast_mut().cast(),
                std::ptr::from_ref(&extra).cast_mut().cast(),
                std::ptr::from_ref(&aligned).cast_mut().cast(),
            ];
            let launched = {
                let _t = super::enqueued::time(super::enqueued::Enqueue::Launch);
                // SAFETY: one pointer per parameter of the LL kernels, each to a live value
                // of the parameter's type; the kernels start with `griddepcontrol.wait` (NOTE
                // [LL launch overlap]); validity of what they point to is the caller's.
                unsafe {
                    super::raw::launch::programmatic(
                        func.cu_function(),
                        (ctas, COLL_THREADS, 0),
                        stream.raw(),
                        &mut params,
                    )
                }?
            };
            if launched {
                return Ok(());
            }
            // This driver does not take the attribute: plain launches from now on.
            self.ll_overlap.store(false, Ordering::Relaxed);
        }
        let cfg = LaunchConfig { grid_dim: (ctas, 1, 1), block_dim: (COLL_THREADS, 1, 1), shared_mem_bytes: 0 };
        let mut l = stream.cuda_stream().launch_builder(func);
        l.arg(&pad.rank).arg(&pad.world).arg(&channel).arg(&pad.timeout_ns).arg(&pad.err);
        l.arg(&a.bases).arg(&a.seq).arg(&a.counter).arg(&a.slot).arg(&a.src).arg(&a.dst).arg(&a.bytes);
        l.arg(&a.first).arg(&a.n).arg(&extra).arg(&aligned);
        // SAFETY: matches the LL kernels' signature; validity is the caller's.
        unsafe { timed_launch(&mut l, cfg) }.map_err(drv(what))?;
        Ok(())
    }

    /// Enqueues the tma-push-reduce kernel (`dtype` is a `reduce_dtype` index) on `ctas`
    /// CTAs of `PUSH_THREADS` threads, with its ring's dynamic shared memory.
    ///
    /// # Safety
    /// As [`Kernels::rs_direct`], and `a` meets `tma_push_reduce`'s contract
    /// (`gpu-kernels/kernels/src/push.rs`).
    pub(crate) unsafe fn tma_push_reduce(
        &self,
        stream: &Stream,
        dtype: usize,
        f: FusedArgs,
        ctas: u32,
        a: &PushArgs,
    ) -> Result<()> {
        let smem = lowcon_abi::tma::push_smem_bytes(a.tile);
        let func = &self.tma_push_reduce[dtype];
        if self.push_smem[dtype].load(Ordering::Relaxed) < smem {
            let attr = CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES;
            func.set_attribute(attr, smem as i32).map_err(|e| {
                Error::driver("cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES) of tma_push_reduce", e)
            })?;
            self.push_smem[dtype].fetch_max(smem, Ordering::Relaxed);
        }
        let threads = lowcon_abi::kernel_names::PUSH_THREADS;
        let cfg = LaunchConfig { grid_dim: (ctas, 1, 1), block_dim: (threads, 1, 1), shared_mem_bytes: smem };
        let mut l = stream.cuda_stream().launch_builder(func);
        l.arg(&f);
        l.arg(&a.src).arg(&a.stride).arg(&a.bases).arg(&a.acc_off).arg(&a.body).arg(&a.tile);
        // SAFETY: matches `lowcon_tma_push_reduce_*`'s signature; validity is the caller's.
        unsafe { timed_launch(&mut l, cfg) }.map_err(drv("cuLaunchKernel(tma_push_reduce)"))?;
        Ok(())
    }

    /// Enqueues `out = a + b` on `stream`. All three must have the same length.
    pub fn vec_add_f32(
        &self,
        stream: &Stream,
        a: &CudaSlice<f32>,
        b: &CudaSlice<f32>,
        out: &mut CudaSlice<f32>,
    ) -> Result<()> {
        let n = out.len();
        if a.len() != n || b.len() != n {
            return Err(Error::InvalidArgument(format!(
                "vec_add_f32: lengths differ (a {}, b {}, out {n})",
                a.len(),
                b.len()
            )));
        }
        if n == 0 {
            return Ok(());
        }
        let blocks = n.div_ceil(256).min(132 * 8) as u32;
        let cfg = LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
        let n = n as u64;
        let mut launch = stream.cuda_stream().launch_builder(&self.vec_add_f32);
        launch.arg(a).arg(b).arg(out).arg(&n);
        // SAFETY: the kernel takes (const f32*, const f32*, f32*, u64) and reads/writes
        // `n` elements of each; all three buffers hold exactly `n` elements.
        unsafe { launch.launch(cfg) }.map_err(drv("cuLaunchKernel(vec_add_f32)"))?;
        Ok(())
    }

    /// Enqueues one side of the system-scope flag round trip (see
    /// `gpu-kernels/kernels/src/test_kernels.rs`): side 0 moves first (ping), side 1 answers
    /// (pong). The two sides must run concurrently, on two streams.
    pub fn flag_round_trip(
        &self,
        stream: &Stream,
        side: usize,
        bufs: &RoundTripBuffers,
        rounds: u32,
        seed: u64,
        timeout_ns: u64,
    ) -> Result<()> {
        if side > 1 {
            return Err(Error::InvalidArgument(format!("flag_round_trip: side {side} is not 0 or 1")));
        }
        let words = u32::try_from(bufs.words).map_err(|_| {
            Error::InvalidArgument(format!("flag_round_trip: {} payload words is too many", bufs.words))
        })?;
        let f = if side == 0 { &self.flag_ping } else { &self.flag_pong };
        let cfg = LaunchConfig { grid_dim: (1, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
        let mut launch = stream.cuda_stream().launch_builder(f);
        launch
            .arg(&bufs.payload[side])
            .arg(&bufs.flag[side])
            .arg(&bufs.payload[1 - side])
            .arg(&bufs.flag[1 - side])
            .arg(&words)
            .arg(&rounds)
            .arg(&seed)
            .arg(&timeout_ns)
            .arg(bufs.report[side].buffer())
            .arg(bufs.error.buffer());
        // SAFETY: the argument list matches `lowcon_flag_ping/pong`'s signature; both
        // payloads hold `words` u32s, the flags one u32 each, and the report and error
        // buffers are sized for their ABI types by `DeviceRecord`. The kernel is
        // launched with the one CTA it requires.
        unsafe { launch.launch(cfg) }.map_err(drv("cuLaunchKernel(flag_round_trip)"))?;
        Ok(())
    }
}

/// Device memory for the flag round trip: `payload[s]` and `flag[s]` are written by
/// side `s` and read by side `1 - s`; each side has its own report; the error record is
/// shared (the first failure claims it).
#[derive(Debug)]
pub struct RoundTripBuffers {
    words: usize,
    payload: [CudaSlice<u32>; 2],
    flag: [CudaSlice<u32>; 2],
    /// What each side counted.
    pub report: [DeviceRecord<RoundTripReport>; 2],
    /// The first timeout, if any.
    pub error: DeviceRecord<ErrorRecord>,
}

impl RoundTripBuffers {
    /// Zeroed buffers for payloads of `words` u32s, on `stream`'s device.
    pub fn new(stream: &Stream, words: usize) -> Result<Self> {
        if words == 0 {
            return Err(Error::InvalidArgument("flag round trip needs at least one payload word".into()));
        }
        Ok(Self {
            words,
            payload: [stream.alloc_zeros(words)?, stream.alloc_zeros(words)?],
            flag: [stream.alloc_zeros(1)?, stream.alloc_zeros(1)?],
            report: [stream.alloc_record()?, stream.alloc_record()?],
            error: stream.alloc_record()?,
        })
    }
}
