//! Kernel names exported by `lowcon-kernels`, so the host never spells one by hand.

/// `vec_add_f32(a, b, out, n)`: the pipeline's smoke test.
pub const VEC_ADD_F32: &str = "lowcon_vec_add_f32";
/// `flag_ping(...)`: first half of the system-scope flag round trip.
pub const FLAG_PING: &str = "lowcon_flag_ping";
/// `flag_pong(...)`: second half of the system-scope flag round trip.
pub const FLAG_PONG: &str = "lowcon_flag_pong";
/// `barrier(pads, rank, world, channel, epoch, timeout_ns, err)`: one CTA.
pub const BARRIER: &str = "lowcon_barrier";
/// `put_signal(pads, rank, world, peer, channel, epoch)`: one thread.
pub const PUT_SIGNAL: &str = "lowcon_put_signal";
/// `wait_signal(pad, rank, world, peer, channel, epoch, timeout_ns, err)`: one thread.
pub const WAIT_SIGNAL: &str = "lowcon_wait_signal";
/// Waits for a word of pinned host memory (NOTE [addresses predicted]).
pub const WAIT_WORD: &str = "lowcon_wait_word";
/// `allgather_oneshot(...)`: one kernel reads every peer's shard (optionally with
/// the entry and exit barriers fused in).
pub const ALLGATHER_ONESHOT: &str = "lowcon_allgather_oneshot";
/// `reduce_<dtype>(...)`: reduces this rank's chunk with staged peer chunks (ce-reduce).
pub const REDUCE: [&str; 3] = ["lowcon_reduce_f32", "lowcon_reduce_f16", "lowcon_reduce_bf16"];
/// `rs_direct_<dtype>(...)`: reads and reduces the peers' chunks over NVLink (sm-direct).
pub const RS_DIRECT: [&str; 3] = ["lowcon_rs_direct_f32", "lowcon_rs_direct_f16", "lowcon_rs_direct_bf16"];
/// `rs_direct_bf16_f32(...)`: sm-direct of a bf16 input into an f32 output: reads the
/// peers' bf16 chunks over NVLink (`off` in bytes, as [`RS_DIRECT`]) and writes their
/// reduction in f32 (the f32 kernel's, in rank order, of the inputs widened to f32;
/// never rounded to bf16). Its arguments are [`RS_DIRECT`]'s.
pub const RS_DIRECT_BF16_IN: &str = "lowcon_rs_direct_bf16_f32";
/// `reduce_int(..., dtype)`: ce-reduce's reduction of integers (`dtype` 0: i32, 1:
/// i64, 2: u8; wrapping sums, in the element type).
pub const REDUCE_INT: &str = "lowcon_reduce_int";
/// `rs_direct_int(..., dtype)`: sm-direct for integers (as [`REDUCE_INT`]).
pub const RS_DIRECT_INT: &str = "lowcon_rs_direct_int";
/// `tma_reduce_<dtype>(...)`: reduce-scatter through bulk copies (tma-reduce): a
/// producer warp streams every rank's tiles into a shared-memory ring, consumer
/// warps reduce them in rank order.
pub const TMA_REDUCE: [&str; 3] = ["lowcon_tma_reduce_f32", "lowcon_tma_reduce_f16", "lowcon_tma_reduce_bf16"];
/// Consumer warps per CTA of [`TMA_REDUCE`] (plus one producer warp).
pub const TMA_CONSUMER_WARPS: u32 = 8;
/// Threads per CTA of [`TMA_REDUCE`]: the producer warp and the consumer warps
/// (declared in their PTX as `.maxntid` by the build).
pub const TMA_THREADS: u32 = 32 * (1 + TMA_CONSUMER_WARPS);
/// `tma_push_reduce_<dtype>(...)`: reduce-scatter by pushes (tma-push-reduce): one
/// thread per CTA stages tiles of this rank's input into shared memory with bulk
/// loads and adds them into the owners' accumulators with `cp.reduce.async.bulk`.
pub const TMA_PUSH_REDUCE: [&str; 3] =
    ["lowcon_tma_push_reduce_f32", "lowcon_tma_push_reduce_f16", "lowcon_tma_push_reduce_bf16"];
/// Threads per CTA of [`TMA_PUSH_REDUCE`] (thread 0 issues every bulk operation; the
/// others take part in the fused barriers).
pub const PUSH_THREADS: u32 = 128;
/// `ll_allgather(...)`: one round of the LL all-gather (data and flag in each
/// 8-byte word, pushed into every peer's LL buffer; see [`crate::ll`]).
pub const LL_ALLGATHER: &str = "lowcon_ll_allgather";
/// `ll_rs_<dtype>(...)`: one round of the LL reduce-scatter.
pub const LL_RS: [&str; 3] = ["lowcon_ll_rs_f32", "lowcon_ll_rs_f16", "lowcon_ll_rs_bf16"];
/// `wire_pack_<src>(...)`: the bf16 wire's pack of one piece, then the piece signal:
/// from an f32 input (the split wire: top and bottom halves of every f32 a rank sends,
/// an inexact flag per destination), or from a bf16 input (a bf16 input with an f32
/// output read directly: the bf16 values are the top halves, every flag clear).
pub const WIRE_PACK: [&str; 2] = ["lowcon_wire_pack", "lowcon_wire_pack_bf16"];
/// `wire_reduce_<own>(...)`: the bf16 wire's reduction of one piece, this rank's own
/// chunk in f32 (the split wire) or bf16 (a bf16 input with an f32 output); the
/// output is f32.
pub const WIRE_REDUCE: [&str; 2] = ["lowcon_wire_reduce_f32", "lowcon_wire_reduce_bf16"];
/// `wire_wait(...)`: kernel sync's wait for a piece's signals (one thread per word).
pub const WIRE_WAIT: &str = "lowcon_wire_wait";
/// `release(pads, rank, world, peer, channel)`: one thread releases this rank's next
/// piece for `peer` (a released reduce-scatter; rounds kept on the device).
pub const RELEASE: &str = "lowcon_release";
/// `release_wait(pads, rank, world, peer, channel, timeout_ns, err)`: one thread waits
/// for `peer`'s next release to this rank.
pub const RELEASE_WAIT: &str = "lowcon_release_wait";
/// `reduce_once_<dtype>(...)`: ce-reduce's reduction of a whole call in one launch,
/// each piece waited for on its flag in the pad ([`crate::pad::once_flag_offset`]).
pub const REDUCE_ONCE: [&str; 3] = ["lowcon_reduce_once_f32", "lowcon_reduce_once_f16", "lowcon_reduce_once_bf16"];
/// `spin(ns)`: holds its CTAs for `ns` nanoseconds, no memory traffic (a benchmark
/// control).
pub const SPIN: &str = "lowcon_spin";
/// The fused kernels: their first parameter is [`FusedHead`](crate::FusedHead), by
/// value (NOTE [fused head by value]).
pub const FUSED: [&str; 12] = [
    ALLGATHER_ONESHOT,
    RS_DIRECT[0],
    RS_DIRECT[1],
    RS_DIRECT[2],
    RS_DIRECT_BF16_IN,
    RS_DIRECT_INT,
    TMA_REDUCE[0],
    TMA_REDUCE[1],
    TMA_REDUCE[2],
    TMA_PUSH_REDUCE[0],
    TMA_PUSH_REDUCE[1],
    TMA_PUSH_REDUCE[2],
];
/// Threads per CTA of the collective kernels (one-shot all-gather, reductions).
/// The build declares it in their PTX (`.maxntid`), so `ptxas` keeps each thread
/// within the registers a CTA of this size may use.
pub const COLL_THREADS: u32 = 512;
/// The kernels launched with [`COLL_THREADS`] threads.
pub const COLL: [&str; 21] = [
    ALLGATHER_ONESHOT,
    REDUCE_ONCE[0],
    REDUCE_ONCE[1],
    REDUCE_ONCE[2],
    WIRE_PACK[0],
    WIRE_PACK[1],
    WIRE_REDUCE[0],
    WIRE_REDUCE[1],
    REDUCE_INT,
    RS_DIRECT_INT,
    REDUCE[0],
    REDUCE[1],
    REDUCE[2],
    RS_DIRECT[0],
    RS_DIRECT[1],
    RS_DIRECT[2],
    RS_DIRECT_BF16_IN,
    LL_ALLGATHER,
    LL_RS[0],
    LL_RS[1],
    LL_RS[2],
];
/// Every kernel the host expects to find in the PTX.
pub const ALL: &[&str] = &[
    VEC_ADD_F32,
    FLAG_PING,
    FLAG_PONG,
    BARRIER,
    PUT_SIGNAL,
    WAIT_SIGNAL,
    WAIT_WORD,
    ALLGATHER_ONESHOT,
    REDUCE[0],
    REDUCE[1],
    REDUCE[2],
    RS_DIRECT[0],
    RS_DIRECT[1],
    RS_DIRECT[2],
    RS_DIRECT_BF16_IN,
    REDUCE_INT,
    RS_DIRECT_INT,
    TMA_REDUCE[0],
    TMA_REDUCE[1],
    TMA_REDUCE[2],
    TMA_PUSH_REDUCE[0],
    TMA_PUSH_REDUCE[1],
    TMA_PUSH_REDUCE[2],
    LL_ALLGATHER,
    LL_RS[0],
    LL_RS[1],
    LL_RS[2],
    WIRE_PACK[0],
    WIRE_PACK[1],
    WIRE_REDUCE[0],
    WIRE_REDUCE[1],
    WIRE_WAIT,
    RELEASE,
    RELEASE_WAIT,
    REDUCE_ONCE[0],
    REDUCE_ONCE[1],
    REDUCE_ONCE[2],
    SPIN,
];
