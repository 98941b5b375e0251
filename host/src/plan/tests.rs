//! The planner's tests: the shipped tables, the model, and how options and hints meet
//! the rules.

use super::vocab::{AgAlgo, AllGatherAlgorithm, ArrivalForm, Context, LaunchForm, ReduceScatterAlgorithm, RsAlgo};
use super::*;

fn planner(device: &str, world: usize) -> Planner {
    Planner::shipped(Machine { device: device.into(), sms: 132, world, ranks_on_gpu: 1 }).unwrap()
}

fn ag(p: &Planner, shard: usize, symmetric: bool, opts: &AllGatherOptions) -> AgPlan {
    p.all_gather(&AgCall { shard, dtype: DType::Bf16, output_symmetric: symmetric, captured: false }, opts)
}

fn rs_call(chunk: usize, dtype: DType) -> RsCall {
    RsCall { chunk, input: dtype, output: dtype, op: ReduceOp::Sum, input_symmetric: true, captured: false }
}

fn rs(p: &Planner, call: &RsCall, opts: &ReduceScatterOptions) -> RsPlan {
    p.reduce_scatter(call, opts).unwrap()
}

/// FSDP2's reduce-scatter options for bf16-exact f32 gradients (the wire's rule).
fn fsdp_exact() -> ReduceScatterOptions {
    ReduceScatterOptions { context: Context::Fsdp, bf16_exact: true, ..Default::default() }
}

/// A planner of one H200 rank of 4 with the table `text` (named `name`).
fn h200_w4_with(name: &str, text: &str) -> Planner {
    let m = Machine { device: "NVIDIA H200".into(), sms: 132, world: 4, ranks_on_gpu: 1 };
    Planner::with_table(m, Table::parse(name, text).unwrap(), "test".into())
}

#[test]
fn every_shipped_table_parses_and_is_found_for_its_machine() {
    for (name, text) in SHIPPED {
        let t = Table::parse(name, text).unwrap();
        assert!(!t.source.is_empty(), "{name} has no source line");
        assert!(!t.rules.is_empty(), "{name} has no rules");
    }
    assert!(planner("NVIDIA H200", 2).table().1.starts_with("shipped:h200-w2.txt"));
    assert!(planner("NVIDIA H200", 4).table().1.starts_with("shipped:h200-w4.txt"));
    assert!(planner("host", 3).table().1.starts_with("shipped:host.txt"));
}

#[test]
fn two_ranks_keep_the_measured_two_rank_rules() {
    let p = planner("NVIDIA H200", 2);
    let d = AllGatherOptions::default();
    assert_eq!(ag(&p, 64 << 10, false, &d).algorithm, AgAlgo::Ll);
    assert_eq!(ag(&p, 1 << 20, true, &d).algorithm, AgAlgo::Ll);
    assert_eq!(ag(&p, (1 << 20) + 2, true, &d).algorithm, AgAlgo::CePush);
    assert_eq!(ag(&p, 4 << 20, false, &d).algorithm, AgAlgo::CePull);
    let r = ReduceScatterOptions::default();
    assert_eq!(rs(&p, &rs_call(64 << 10, DType::Bf16), &r).algorithm, RsAlgo::Ll);
    // ll on 128 CTAs from 256 KiB to 1 MiB (2026-11-26, 20b3be4).
    let mid = rs(&p, &rs_call(512 << 10, DType::Bf16), &r);
    assert_eq!((mid.algorithm, mid.ctas), (RsAlgo::Ll, 128));
    let big = rs(&p, &rs_call((1 << 20) + 2, DType::Bf16), &r);
    assert_eq!((big.algorithm, big.ctas), (RsAlgo::SmDirect, 16));
}

#[test]
fn two_ranks_send_fsdps_wire_in_64_mib_pieces_at_most_4() {
    // h200-w2.txt (2026-11-27): a piece costs the host a pack, a wait and a reduction, which
    // a small model's step does not hide; 16 MiB pieces made 2048x8 slower than NCCL. Even
    // launched as one graph a piece's copy costs the host about 7 µs: at most 4.
    let p = planner("NVIDIA H200", 2);
    let fsdp = fsdp_exact();
    let layer = |mib: usize| rs(&p, &RsCall { input_symmetric: false, ..rs_call(mib << 20, DType::F32) }, &fsdp);
    let small = layer(96);
    assert_eq!((small.algorithm, small.wire, small.ctas), (RsAlgo::CeReduce, Some(DType::Bf16), 64));
    assert_eq!(
        (small.pieces, layer(384).pieces, layer(1536).pieces),
        (2, 4, 4),
        "2048x8's, 4096x12's, 8192x4's layers"
    );
}

#[test]
fn four_ranks_take_ll_for_small_messages_too() {
    let p = planner("NVIDIA H200", 4);
    let d = AllGatherOptions::default();
    assert_eq!(ag(&p, 16 << 10, false, &d).algorithm, AgAlgo::Ll);
    assert_eq!(ag(&p, 1 << 20, false, &d).algorithm, AgAlgo::SmOneshot);
    let r = ReduceScatterOptions::default();
    assert_eq!(rs(&p, &rs_call(16 << 10, DType::F32), &r).algorithm, RsAlgo::Ll);
}

#[test]
fn fsdp_gets_the_wire_only_for_exact_f32_and_reads_torch_memory_in_place() {
    let p = planner("NVIDIA H200", 4);
    let fsdp = fsdp_exact();
    let call = RsCall { input_symmetric: false, ..rs_call(64 << 20, DType::F32) };
    let w = rs(&p, &call, &fsdp);
    // NOTE [the wire read directly]: sm-direct's wire, 64 MiB pieces, 2 to 8 of them.
    assert_eq!((w.algorithm, w.wire, w.ctas), (RsAlgo::SmDirect, Some(DType::Bf16), 64));
    assert_eq!((w.pieces, w.sync), (2, SyncMethod::StreamMemop), "64 MiB: at least 2 pieces");
    let layer = |mib: usize| rs(&p, &RsCall { input_symmetric: false, ..rs_call(mib << 20, DType::F32) }, &fsdp).pieces;
    assert_eq!((layer(192), layer(771)), (3, 8), "4096x12's and 8192x4's layers");
    assert!(w.origin.starts_with("shipped:h200-w4.txt:"), "{}", w.origin);
    // Not exact: no wire; torch memory: ce-reduce reading it in place.
    let plain = rs(&p, &call, &ReduceScatterOptions { bf16_exact: false, ..fsdp });
    assert_eq!((plain.algorithm, plain.wire, plain.map_ordinary), (RsAlgo::CeReduce, None, true));
    // bf16 gradients: no wire either (the input is the wire).
    let bf = rs(&p, &RsCall { input: DType::Bf16, output: DType::Bf16, ..call }, &fsdp);
    assert_eq!(bf.wire, None);
    // The same call without the hint, alone: sm-direct, nothing mapped.
    let alone = rs(&p, &call, &ReduceScatterOptions::default());
    assert_eq!((alone.algorithm, alone.map_ordinary), (RsAlgo::SmDirect, false));
    // The caller's options win over every rule.
    let mine = ReduceScatterOptions { ctas: Some(8), pipeline: Some(3), wire: Some(DType::F32), ..fsdp };
    let m = rs(&p, &call, &mine);
    assert_eq!((m.ctas, m.pieces, m.wire), (8, 3, None));
    assert_eq!((m.algorithm, m.map_ordinary), (RsAlgo::CeReduce, true), "the wire's rule is skipped");
    // The caller who names the rule's wire gets the rule.
    let named = rs(&p, &call, &ReduceScatterOptions { wire: Some(DType::Bf16), ..fsdp });
    assert_eq!((named.algorithm, named.wire, named.ctas), (RsAlgo::SmDirect, Some(DType::Bf16), 64));
}

#[test]
fn explicit_algorithms_take_their_rules_parameters_or_the_defaults() {
    let p = planner("NVIDIA H200", 4);
    let opts = ReduceScatterOptions { algorithm: ReduceScatterAlgorithm::SmDirect, ..Default::default() };
    let r = rs(&p, &rs_call(16 << 10, DType::Bf16), &opts);
    assert_eq!((r.algorithm, r.ctas), (RsAlgo::SmDirect, 16));
    assert!(r.origin.starts_with("shipped:h200-w4.txt:"));
    let opts = ReduceScatterOptions { algorithm: ReduceScatterAlgorithm::TmaReduce, ..Default::default() };
    let r = rs(&p, &rs_call(16 << 20, DType::Bf16), &opts);
    assert_eq!((r.ctas, &*r.origin), (DEFAULT_TMA_CTAS, "explicit"));
    // An explicit algorithm passes as it is, with the explicit origin (the backend
    // refuses one that cannot carry the wire).
    let bad = ReduceScatterOptions {
        algorithm: ReduceScatterAlgorithm::SmDirect,
        wire: Some(DType::Bf16),
        ..Default::default()
    };
    let r = rs(&p, &rs_call(1 << 20, DType::F32), &bad);
    assert_eq!((r.algorithm, r.wire), (RsAlgo::SmDirect, Some(DType::Bf16)));
}

#[test]
fn integers_and_carried_types_skip_rules_they_cannot_run() {
    let p = planner("NVIDIA H200", 4);
    let d = ReduceScatterOptions::default();
    // ll reduces floats only: an i32 call in its range goes on to the next rule.
    let i = rs(&p, &rs_call(16 << 10, DType::I32), &d);
    assert_eq!(i.algorithm, RsAlgo::SmDirect);
    // bf16 into f32 carries bf16: ce-reduce, whatever the size, unless a rule naming the
    // output's type says sm-direct (which then packs).
    let call = RsCall { output: DType::F32, ..rs_call(16 << 10, DType::Bf16) };
    assert_eq!(rs(&p, &call, &d).algorithm, RsAlgo::CeReduce);
    let big = RsCall { output: DType::F32, ..rs_call(64 << 20, DType::Bf16) };
    assert_eq!(rs(&p, &big, &d).algorithm, RsAlgo::CeReduce, "the table's sm-direct rules name no `out`");
    let text = format!(
        "{}\nmachine gpu=H200 world=4\nreduce-scatter dtype=bf16 out=f32 algorithm=sm-direct ctas=64\n\
         reduce-scatter algorithm=sm-direct ctas=16\n",
        crate::plan::table::FORMAT
    );
    let t = crate::plan::table::Table::parse("t", &text).unwrap();
    let m = Machine { device: "NVIDIA H200".into(), sms: 132, world: 4, ranks_on_gpu: 1 };
    let q = Planner::with_table(m, t, "test".into());
    let plan = rs(&q, &big, &d);
    assert_eq!((plan.algorithm, plan.ctas, plan.packs()), (RsAlgo::SmDirect, 64, true));
    // A caller's pipeline past the packs' signals keeps auto on ce-reduce, not a refusal.
    let long = ReduceScatterOptions { pipeline: Some(100), ..Default::default() };
    let plan = rs(&q, &big, &long);
    assert_eq!((plan.algorithm, plan.pieces, plan.packs()), (RsAlgo::CeReduce, 100, false));
    assert_eq!(rs(&q, &rs_call(64 << 20, DType::Bf16), &d).ctas, 16, "bf16 into bf16: the other rule");
}

#[test]
fn no_plan_leaves_a_choice_open() {
    for (device, world) in [("NVIDIA H200", 2), ("NVIDIA H200", 4), ("NVIDIA H100", 8), ("host", 3)] {
        let p = planner(device, world);
        for shift in 0..34 {
            let bytes = 1usize << shift;
            for context in Context::ALL {
                for captured in [false, true] {
                    let o = AllGatherOptions { context, ..Default::default() };
                    // A plan's types have no `Auto` (AgAlgo, RsAlgo, ArrivalForm, LaunchForm).
                    let a =
                        p.all_gather(&AgCall { shard: bytes, dtype: DType::F32, output_symmetric: true, captured }, &o);
                    // Only an eager ce-pull waits per peer.
                    assert!(a.arrival == ArrivalForm::Barrier || (a.algorithm == AgAlgo::CePull && !captured), "{a}");
                    for (dtype, exact) in
                        [(DType::F32, true), (DType::F32, false), (DType::Bf16, false), (DType::I64, false)]
                    {
                        let o = ReduceScatterOptions { context, bf16_exact: exact, ..Default::default() };
                        let call = RsCall { captured, ..rs_call(bytes, dtype) };
                        let r = rs(&p, &call, &o);
                        assert_ne!(r.algorithm, RsAlgo::TmaPushReduce, "never picked: not deterministic");
                        assert!(r.ctas >= 1 && r.pieces >= 1);
                        if r.wire.is_some() {
                            assert!(r.pieces <= lowcon_abi::pad::WIRE_PIECES);
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn captured_calls_take_kernel_waits_unless_told() {
    let p = planner("NVIDIA H200", 4);
    let call = AgCall { shard: 64 << 20, dtype: DType::Bf16, output_symmetric: true, captured: true };
    let memop = AllGatherOptions { sync: Some(SyncMethod::StreamMemop), ..Default::default() };
    assert_eq!(p.all_gather(&call, &memop).sync, SyncMethod::Kernel, "sync is for eager calls");
    let both = memop.with_sync(SyncMethod::StreamMemop);
    assert_eq!(p.all_gather(&call, &both).sync, SyncMethod::StreamMemop);
    assert_eq!(p.all_gather(&AgCall { captured: false, ..call }, &memop).sync, SyncMethod::StreamMemop);
}

#[test]
fn lowcon_replays_of_eager_calls_wait_as_captured_ones_unless_told() {
    // NOTE [replay sync]: FSDP2's wire at 4 ranks is planned with memop waits (the rule's
    // sync=memop), and its replays take kernel waits (the rule names no graph_sync).
    let p = planner("NVIDIA H200", 4);
    let fsdp = fsdp_exact();
    let call = RsCall { input_symmetric: false, ..rs_call(256 << 20, DType::F32) };
    let planned = rs(&p, &call, &fsdp);
    assert_eq!(
        (planned.wire, planned.sync, planned.replay_sync),
        (Some(DType::Bf16), SyncMethod::StreamMemop, SyncMethod::Kernel)
    );
    // As for a captured call: the eager `sync` speaks for the eager enqueues only, the
    // caller's graph_sync wins.
    let memop = ReduceScatterOptions { sync: Some(SyncMethod::StreamMemop), ..fsdp };
    assert_eq!(rs(&p, &call, &memop).replay_sync, SyncMethod::Kernel);
    let graph = ReduceScatterOptions { graph_sync: Some(SyncMethod::StreamMemop), ..fsdp };
    assert_eq!(rs(&p, &call, &graph).replay_sync, SyncMethod::StreamMemop);
    // A rule's graph_sync speaks for the replays, over the caller's eager sync.
    let text = "lowcon-tuning 1\nmachine gpu=H200 world=4\nsource test\n\
                reduce-scatter algorithm=sm-direct sync=memop graph_sync=memop\n";
    let t = h200_w4_with("mine.txt", text);
    assert_eq!(rs(&t, &call, &ReduceScatterOptions::default()).replay_sync, SyncMethod::StreamMemop);
    let kernel = ReduceScatterOptions { sync: Some(SyncMethod::Kernel), ..Default::default() };
    assert_eq!(rs(&t, &call, &kernel).replay_sync, SyncMethod::StreamMemop);
    // Whatever decides it, a replay waits as a user's capture of the same call would.
    for o in [fsdp, memop, graph] {
        let captured = rs(&p, &RsCall { captured: true, ..call }, &o).sync;
        assert_eq!(rs(&p, &call, &o).replay_sync, captured, "{o:?}");
    }
    assert!(planned.to_string().contains("replay_sync=kernel"), "{planned}");
}

#[test]
fn unmeasured_worlds_and_gpus_take_the_model() {
    // 8 ranks of H200: the 4-rank table, byte bounds x 3/7.
    let p = planner("NVIDIA H200", 8);
    assert!(p.table().1.starts_with("model: shipped:h200-w4.txt"), "{}", p.table().1);
    let d = AllGatherOptions::default();
    let ll_max = (512usize << 10) * 3 / 7;
    assert_eq!(ag(&p, ll_max, false, &d).algorithm, AgAlgo::Ll);
    assert_eq!(ag(&p, ll_max + 2, false, &d).algorithm, AgAlgo::SmOneshot);
    // 3 ranks: between 2 and 4, the larger world's table (x 3/2).
    let p3 = planner("NVIDIA H200", 3);
    assert!(p3.table().1.contains("h200-w4.txt") && p3.table().1.contains("x 3/2"), "{}", p3.table().1);
    // H100 has its own 2- and 4-rank tables; at 8 both 4-rank tables are as near and
    // H100's own wins; at 3 the larger world's of the same GPU.
    let h100 = "NVIDIA H100 80GB HBM3";
    assert!(planner(h100, 4).table().1.starts_with("shipped:h100-w4.txt"), "{}", planner(h100, 4).table().1);
    assert!(planner(h100, 2).table().1.starts_with("shipped:h100-w2.txt"), "{}", planner(h100, 2).table().1);
    assert!(planner(h100, 8).table().1.starts_with("model: shipped:h100-w4.txt"), "{}", planner(h100, 8).table().1);
    assert!(planner(h100, 3).table().1.starts_with("model: shipped:h100-w4.txt"), "{}", planner(h100, 3).table().1);
    // The FSDP2 rules of H100's 2-rank table are H200's (carried, confirmed by a paired run).
    let fsdp = |d: &str| rs(&planner(d, 2), &rs_call(64 << 20, DType::F32), &fsdp_exact());
    let (a, b) = (fsdp(h100), fsdp("NVIDIA H200"));
    assert_eq!((a.algorithm, a.ctas, a.pieces, a.wire), (b.algorithm, b.ctas, b.pieces, b.wire));
    // A GPU with no table: the nearest world of any GPU's (the first shipped, H100's, where
    // two GPUs' tables are as near).
    let a100 = planner("NVIDIA A100-SXM4-80GB", 2);
    assert!(a100.table().1.starts_with("model: shipped:h100-w2.txt"), "{}", a100.table().1);
    // Same rules, same CRC: every rank of the same world plans alike.
    assert_eq!(planner("NVIDIA H200", 8).fingerprint(), p.fingerprint());
}

#[test]
fn a_table_of_the_callers_changes_the_plan() {
    let text = "lowcon-tuning 1\nmachine gpu=H200 world=4\nsource test\n\
                all-gather algorithm=sm-oneshot ctas=7\n\
                reduce-scatter context=fsdp algorithm=tma-reduce ctas=5 sync=memop\n\
                reduce-scatter algorithm=ce-reduce piece=1M max_pieces=3 launch=once\n";
    let p = h200_w4_with("mine.txt", text);
    let a = ag(&p, 1 << 30, true, &AllGatherOptions::default());
    assert_eq!((a.algorithm, a.ctas, &*a.origin), (AgAlgo::SmOneshot, 7, "mine.txt:4"));
    let f =
        rs(&p, &rs_call(1 << 30, DType::Bf16), &ReduceScatterOptions { context: Context::Fsdp, ..Default::default() });
    assert_eq!((f.algorithm, f.ctas, f.sync), (RsAlgo::TmaReduce, 5, SyncMethod::StreamMemop));
    let c = rs(&p, &rs_call(64 << 20, DType::Bf16), &ReduceScatterOptions::default());
    assert_eq!((c.algorithm, c.pieces, c.reduce_launch), (RsAlgo::CeReduce, 3, LaunchForm::Once));
    // A rule's `once` that cannot run (an integer call) falls back to one launch per piece.
    let ints = rs(&p, &rs_call(64 << 20, DType::I32), &ReduceScatterOptions::default());
    assert_eq!((ints.algorithm, ints.reduce_launch), (RsAlgo::CeReduce, LaunchForm::Pieces));
    assert_ne!(p.fingerprint(), planner("NVIDIA H200", 4).fingerprint());
}

#[test]
fn ranks_sharing_a_gpu_get_capped_ctas() {
    let m = Machine { device: "NVIDIA H200".into(), sms: 132, world: 4, ranks_on_gpu: 4 };
    let p = Planner::shipped(m).unwrap();
    let opts = fsdp_exact();
    assert_eq!(rs(&p, &rs_call(64 << 20, DType::F32), &opts).ctas, 8);
    assert_eq!(shared_cta_cap(1, 132), None);
    assert_eq!(shared_cta_cap(2, 132), Some(16));
    assert_eq!(shared_cta_cap(8, 132), Some(4));
    assert_eq!(shared_cta_cap(64, 132), Some(2));
    for k in 2..=8 {
        assert!(4 * k as u32 * shared_cta_cap(k, 132).unwrap() <= 132);
    }
}

#[test]
fn pieces_and_ctas_defaults() {
    assert_eq!(pieces_for(1, DEFAULT_PIECE, 16), 1);
    assert_eq!(pieces_for(4 << 20, DEFAULT_PIECE, 16), 2);
    assert_eq!(pieces_for(256 << 20, DEFAULT_PIECE, 16), 16);
    assert_eq!(pieces_for(1 << 30, DEFAULT_PIECE, 16), 16);
    assert_eq!(pieces_for(64 << 20, 32 << 20, 16), 2);
    assert_eq!(ll_ctas(8192), 16);
    assert_eq!(ll_ctas(1), 1);
    assert_eq!(ll_ctas(1 << 20), 32);
    assert_eq!(oneshot_ctas(1), 4);
    assert_eq!(oneshot_ctas(4 << 20), 32);
}

#[test]
fn ranks_must_agree_on_the_table() {
    let a = planner("NVIDIA H200", 4).fingerprint();
    let b = planner("NVIDIA H200", 2).fingerprint();
    assert!(agree(&[&a, &a, &a]).is_ok());
    let e = agree(&[&a, &a, &b]).unwrap_err().to_string();
    assert!(e.contains("rank 2 plans from tuning table") && e.contains("h200-w2.txt"), "{e}");
    let bad = announce(&Err(Error::InvalidArgument("LOWCON_TUNING=\"x\": cannot read".into())));
    let e = agree(&[&a, &bad]).unwrap_err().to_string();
    assert!(e.contains("rank 1: no planner") && e.contains("cannot read"), "{e}");
    // The reason once, not wrapped in a second "invalid argument".
    assert_eq!(e.matches("invalid argument").count(), 1, "{e}");
    // NOTE [wire replays]: a rank that turned them off is named.
    let off = format!("{a} [LOWCON_WIRE_REPLAYS=0]");
    assert!(agree(&[&off, &off]).is_ok());
    let e = agree(&[&a, &a, &off]).unwrap_err().to_string();
    assert!(e.contains("rank 2 has LOWCON_WIRE_REPLAYS=0 but rank 0 has 1"), "{e}");
    let e = agree(&[&off, &a]).unwrap_err().to_string();
    assert!(e.contains("rank 1 has LOWCON_WIRE_REPLAYS=1 (the default) but rank 0 has 0"), "{e}");
}

#[test]
fn a_named_launch_binds_ce_reduce() {
    let p = planner("NVIDIA H200", 4);
    let once = ReduceScatterOptions { reduce_launch: ReduceLaunch::Once, ..Default::default() };
    // auto picks among ce-reduce's rules (ll would otherwise take 16 KiB, sm-direct 64 MiB).
    for chunk in [16 << 10, 64 << 20] {
        let r = rs(&p, &rs_call(chunk, DType::Bf16), &once);
        assert_eq!((r.algorithm, r.reduce_launch), (RsAlgo::CeReduce, LaunchForm::Once));
    }
    // Named with another algorithm it binds too: the planner refuses it, naming why.
    let named = ReduceScatterOptions { algorithm: ReduceScatterAlgorithm::SmDirect, ..once };
    let e = p.at_rank(3).reduce_scatter(&rs_call(16 << 10, DType::Bf16), &named).unwrap_err().to_string();
    assert!(e.contains("rank 3: reduce launch once: ce-reduce only, not sm-direct"), "{e}");
    let p = planner("NVIDIA H200", 4);
    // The planner's wire never turns the caller's options into a refusal: no wire with
    // one launch per call, or with more pieces than the wire has.
    let fsdp = ReduceScatterOptions { context: Context::Fsdp, bf16_exact: true, ..once };
    assert_eq!(rs(&p, &rs_call(64 << 20, DType::F32), &fsdp).wire, None);
    let many = ReduceScatterOptions { pipeline: Some(100), reduce_launch: ReduceLaunch::Auto, ..fsdp };
    assert_eq!(rs(&p, &rs_call(64 << 20, DType::F32), &many).wire, None);
    let fine = ReduceScatterOptions { pipeline: Some(8), ..many };
    assert_eq!(rs(&p, &rs_call(64 << 20, DType::F32), &fine).wire, Some(DType::Bf16));
}

#[test]
fn the_released_reduce_scatter_keeps_its_ctas_unless_a_tp_rule_names_others() {
    let tp = ReduceScatterOptions { context: Context::Tp, ..Default::default() };
    let call = rs_call(64 << 20, DType::Bf16);
    // h200-w2.txt ends in a ce-reduce rule with 16 CTAs: not the released call's.
    let p2 = planner("NVIDIA H200", 2);
    let r = p2.released(&call, &tp).unwrap();
    assert_eq!((r.algorithm, r.ctas), (RsAlgo::CeReduce, RELEASED_REDUCE_CTAS));
    let text = "lowcon-tuning 1\nmachine gpu=H200 world=2\nreduce-scatter context=tp algorithm=ce-reduce ctas=5\n";
    let m = Machine { device: "NVIDIA H200".into(), sms: 132, world: 2, ranks_on_gpu: 1 };
    let mine = Planner::with_table(m, Table::parse("tp.txt", text).unwrap(), "test".into());
    assert_eq!(mine.released(&call, &tp).unwrap().ctas, 5);
    assert_eq!(&*planner("NVIDIA H200", 4).released(&call, &tp).unwrap().origin, "default");
}

#[test]
fn plans_say_what_the_backend_does_with_ordinary_memory() {
    let p = planner("NVIDIA H200", 4);
    let fsdp = ReduceScatterOptions { context: Context::Fsdp, ..Default::default() };
    let call = RsCall { input_symmetric: false, ..rs_call(64 << 20, DType::Bf16) };
    assert!(rs(&p, &call, &fsdp).map_ordinary);
    assert!(!rs(&p, &RsCall { captured: true, ..call }, &fsdp).map_ordinary, "eager calls only");
    assert_eq!(pieces_for(64 << 20, 1 << 20, 1), 1, "max_pieces=1 is honoured");
}

#[test]
fn the_wire_read_directly_is_sm_direct_with_pieces() {
    // NOTE [the wire read directly]: sm-direct carries an f32 call's bf16 wire, in pieces.
    let p = planner("NVIDIA H200", 4);
    let call = RsCall { input_symmetric: false, ..rs_call(64 << 20, DType::F32) };
    let named = ReduceScatterOptions {
        algorithm: ReduceScatterAlgorithm::SmDirect,
        wire: Some(DType::Bf16),
        context: Context::Fsdp,
        bf16_exact: true,
        ..Default::default()
    };
    let d = rs(&p, &call, &named);
    assert_eq!((d.algorithm, d.wire, d.map_ordinary), (RsAlgo::SmDirect, Some(DType::Bf16), false));
    assert!(d.pieces > 1, "the wire's pieces: {}", d.pieces);
    // A table may pick it for hinted calls; without the hint sm-direct keeps f32 and one piece.
    let text = "lowcon-tuning 1\nmachine gpu=H200 world=4\nsource test\n\
                reduce-scatter context=fsdp exact=yes dtype=f32 algorithm=sm-direct wire=bf16 ctas=24 piece=8M\n\
                reduce-scatter algorithm=sm-direct\n";
    let t = h200_w4_with("t", text);
    let hinted = fsdp_exact();
    let h = rs(&t, &call, &hinted);
    assert_eq!((h.algorithm, h.wire, h.ctas, h.pieces), (RsAlgo::SmDirect, Some(DType::Bf16), 24, 8));
    let plain = rs(&t, &call, &ReduceScatterOptions { bf16_exact: false, ..hinted });
    assert_eq!((plain.algorithm, plain.wire, plain.pieces), (RsAlgo::SmDirect, None, 1));
}

#[test]
fn named_algorithms_and_launches_keep_or_skip_the_wire_rule_as_they_can_take_it() {
    let p = planner("NVIDIA H200", 4);
    let call = RsCall { input_symmetric: false, ..rs_call(256 << 20, DType::F32) };
    let fsdp = fsdp_exact();
    // ce-reduce named: the wire on ce-reduce, as measured before the wire read directly.
    let ce = rs(&p, &call, &ReduceScatterOptions { algorithm: ReduceScatterAlgorithm::CeReduce, ..fsdp });
    assert_eq!(
        (ce.algorithm, ce.wire, ce.ctas, ce.sync),
        (RsAlgo::CeReduce, Some(DType::Bf16), 64, SyncMethod::StreamMemop)
    );
    // A launch named binds ce-reduce, and keeps the wire.
    let l = rs(&p, &call, &ReduceScatterOptions { reduce_launch: ReduceLaunch::Pieces, ..fsdp });
    assert_eq!((l.algorithm, l.wire), (RsAlgo::CeReduce, Some(DType::Bf16)));
    // sm-direct named with f32 on the wire: not the wire's rule (its CTAs and sync).
    let f = ReduceScatterOptions { algorithm: ReduceScatterAlgorithm::SmDirect, wire: Some(DType::F32), ..fsdp };
    let f = rs(&p, &call, &f);
    assert_eq!((f.algorithm, f.wire, f.ctas, f.pieces), (RsAlgo::SmDirect, None, 16, 1));
}

#[test]
fn arrival_is_per_peer_only_where_a_per_peer_wait_runs() {
    // NOTE [arrival-driven all-gather]: a rule or the caller asks; the planner keeps it for
    // eager ce-pull with memop sync (or on the host backend), and plans a barrier elsewhere.
    let p = h200_w4_with(
        "arrival.txt",
        "lowcon-tuning 1\nmachine gpu=H200 world=4\n\
         all-gather context=fsdp algorithm=ce-pull sync=memop arrival=any-order\n\
         all-gather algorithm=ce-pull sync=memop\n",
    );
    let fsdp = AllGatherOptions { context: Context::Fsdp, ..Default::default() };
    let plan = ag(&p, 64 << 20, false, &fsdp);
    assert_eq!(
        (plan.algorithm, plan.sync, plan.arrival),
        (AgAlgo::CePull, SyncMethod::StreamMemop, ArrivalForm::AnyOrder)
    );
    assert!(plan.to_string().contains("arrival=any-order"), "{plan}");
    // No rule names it: one barrier, as before.
    assert_eq!(ag(&p, 64 << 20, false, &AllGatherOptions::default()).arrival, ArrivalForm::Barrier);
    // The caller's choice wins over the rule's.
    let in_order = AllGatherOptions { arrival: Arrival::InOrder, ..fsdp };
    assert_eq!(ag(&p, 64 << 20, false, &in_order).arrival, ArrivalForm::InOrder);
    let barrier = AllGatherOptions { arrival: Arrival::Barrier, ..fsdp };
    assert_eq!(ag(&p, 64 << 20, false, &barrier).arrival, ArrivalForm::Barrier);
    // Where no per-peer wait runs: kernel sync, a captured call, another algorithm, the
    // honest floor.
    let kernel = AllGatherOptions { sync: Some(SyncMethod::Kernel), ..in_order };
    assert_eq!(ag(&p, 64 << 20, false, &kernel).arrival, ArrivalForm::Barrier);
    let call = AgCall { shard: 64 << 20, dtype: DType::Bf16, output_symmetric: false, captured: true };
    assert_eq!(p.all_gather(&call, &in_order).arrival, ArrivalForm::Barrier);
    // So a replayed call's wait nodes do not grow with the peers at any world, 8 included.
    for w in [2, 8] {
        let big = planner("NVIDIA H200", w);
        assert_eq!(big.all_gather(&call, &in_order).arrival, ArrivalForm::Barrier, "{w} ranks");
    }
    let push = AllGatherOptions { algorithm: AllGatherAlgorithm::CePush, ..in_order };
    assert_eq!(ag(&p, 64 << 20, true, &push).arrival, ArrivalForm::Barrier);
    let traffic = AllGatherOptions { traffic: true, ..in_order };
    assert_eq!(ag(&p, 64 << 20, false, &traffic).arrival, ArrivalForm::Barrier);
    // The host backend's waits are the host's: any sync.
    let host = Planner::shipped(Machine::host(3)).unwrap();
    let pull = AllGatherOptions { algorithm: AllGatherAlgorithm::CePull, ..in_order };
    assert_eq!(ag(&host, 4096, false, &pull).arrival, ArrivalForm::InOrder);
}

#[test]
fn arrival_in_tables_round_trips_and_is_an_all_gather_choice() {
    let text = "lowcon-tuning 1\nmachine gpu=H100 world=4\nall-gather context=fsdp algorithm=ce-pull sync=memop arrival=in-order\n";
    let t = Table::parse("t.txt", text).unwrap();
    assert_eq!(t.rule_lines(), ["all-gather context=fsdp algorithm=ce-pull sync=memop arrival=in-order"]);
    let bad = |line: &str| {
        Table::parse("t.txt", &format!("lowcon-tuning 1\nmachine gpu=H100 world=4\n{line}\n")).unwrap_err().to_string()
    };
    let e = bad("reduce-scatter algorithm=ce-reduce arrival=in-order");
    assert!(e.contains("t.txt, line 3") && e.contains("a reduce-scatter has no arrival"), "{e}");
    let e = bad("all-gather algorithm=ce-pull arrival=auto");
    assert!(e.contains("barrier, in-order or any-order"), "{e}");
    let e = bad("all-gather algorithm=ce-pull arrival=soon");
    assert!(e.contains("arrival=\"soon\""), "{e}");
}

#[test]
fn only_a_modelled_planner_has_a_notice_and_one_rank_has_none() {
    // The line a group prints once, from rank 0 (`group::gpu`), not once per rank.
    assert_eq!(planner("NVIDIA H200", 4).notice(), None);
    assert_eq!(planner("NVIDIA H100 80GB HBM3", 4).notice(), None);
    let n = planner("NVIDIA H100 80GB HBM3", 8).notice().expect("no table for 8 ranks of H100");
    assert!(n.starts_with("no tuning table for 8 ranks of NVIDIA H100 80GB HBM3; planning with the model: "), "{n}");
    assert_eq!(planner("NVIDIA H100 80GB HBM3", 1).notice(), None);
    assert_eq!(
        h200_w4_with("given", &format!("{}\nmachine gpu=x\nall-gather algorithm=ll\n", table::FORMAT)).notice(),
        None
    );
}

#[test]
fn plans_carry_the_settings_where_they_apply() {
    // NOTE [plan settings]: what each plan shows, and the group switches' effect.
    let m = Machine { device: "NVIDIA H100 80GB HBM3".into(), sms: 132, world: 4, ranks_on_gpu: 1 };
    let p = Planner::shipped(m.clone()).unwrap().at_rank(2);
    let ll = AllGatherOptions { algorithm: AllGatherAlgorithm::Ll, ..Default::default() };
    assert!(ag(&p, 16 << 10, true, &ll).ll_overlap);
    // Not where ranks share the GPU (NOTE [shared CTAs]), and the settings survive sharing.
    let shared = Planner::shipped(m.clone()).unwrap().with_settings(Settings { copy_hint: true, ..Default::default() });
    let shared = shared.sharing(4);
    assert!(!ag(&shared, 16 << 10, true, &ll).ll_overlap);
    assert!(shared.settings().copy_hint);
    // Copy batches: eager copy-engine calls with one barrier.
    let pull = AllGatherOptions { algorithm: AllGatherAlgorithm::CePull, ..Default::default() };
    assert!(ag(&p, 64 << 20, false, &pull).copy_batch);
    let captured = AgCall { shard: 64 << 20, dtype: DType::Bf16, output_symmetric: false, captured: true };
    assert!(!p.all_gather(&captured, &pull).copy_batch);
    p.change_settings(|s| s.copy_batch = false);
    assert!(!ag(&p, 64 << 20, false, &pull).copy_batch);
    // Replays: eager split-wire calls only, while the switch is on.
    let wire = ReduceScatterOptions { wire: Some(DType::Bf16), ..Default::default() };
    let f32_call = rs_call(64 << 20, DType::F32);
    let r = rs(&p, &f32_call, &wire);
    assert_eq!((r.carry, r.replays), (Carry::Split, true));
    assert!(!rs(&p, &RsCall { captured: true, ..f32_call }, &wire).replays);
    assert!(!rs(&p, &f32_call, &ReduceScatterOptions::default()).replays);
    p.change_settings(|s| s.wire_replays = false);
    assert!(!rs(&p, &f32_call, &wire).replays);
    assert!(announce(&Ok(p)).ends_with("[LOWCON_WIRE_REPLAYS=0]"));
    // The TMA ring of the world, on TMA algorithms only.
    let p = Planner::shipped(m).unwrap();
    let tma = ReduceScatterOptions { algorithm: ReduceScatterAlgorithm::TmaReduce, ..Default::default() };
    assert_eq!(rs(&p, &rs_call(64 << 20, DType::Bf16), &tma).tma, (8 << 10, 7));
    assert_eq!(rs(&p, &rs_call(64 << 20, DType::Bf16), &ReduceScatterOptions::default()).tma, (0, 0));
}

#[test]
fn the_planner_refuses_what_no_plan_can_run_naming_the_rank() {
    let p = planner("NVIDIA H200", 4).at_rank(3);
    let call = |input, output| RsCall {
        chunk: 1 << 20,
        input,
        output,
        op: ReduceOp::Sum,
        input_symmetric: true,
        captured: false,
    };
    let d = ReduceScatterOptions::default();
    let e = p.reduce_scatter(&call(DType::F32, DType::Bf16), &d).unwrap_err().to_string();
    assert!(e.contains("rank 3: reduce-scatter of f32 into bf16 with wire none"), "{e}");
    let named = |a| ReduceScatterOptions { algorithm: a, ..Default::default() };
    let e = p.reduce_scatter(&call(DType::I32, DType::I32), &named(ReduceScatterAlgorithm::TmaReduce)).unwrap_err();
    assert!(e.to_string().contains("rank 3: reduce-scatter of i32 with tma-reduce"), "{e}");
    let e = p.reduce_scatter(&call(DType::Bf16, DType::F32), &named(ReduceScatterAlgorithm::TmaReduce)).unwrap_err();
    assert!(e.to_string().contains("over a bf16 wire runs on ce-reduce, sm-direct (or auto), not tma-reduce"), "{e}");
    let avg = RsCall { op: ReduceOp::Avg, ..call(DType::F32, DType::F32) };
    let e = p.reduce_scatter(&avg, &named(ReduceScatterAlgorithm::TmaPushReduce)).unwrap_err().to_string();
    assert!(e.contains("rank 3: op avg is not supported by tma-push-reduce"), "{e}");
    // auto never picks what cannot run: a bf16 input into f32 runs on ce-reduce.
    assert_eq!(p.reduce_scatter(&call(DType::Bf16, DType::F32), &d).unwrap().carry, Carry::Bf16In);
}

#[test]
fn a_bf16_input_into_f32_packs_on_sm_direct_and_copies_on_ce_reduce() {
    // NOTE [the wire read directly]: sm-direct packs the bf16 input as top halves, in at
    // most `WIRE_PIECES` pieces; ce-reduce copies it as it is.
    let call = RsCall {
        chunk: 256 << 20,
        input: DType::Bf16,
        output: DType::F32,
        op: ReduceOp::Sum,
        input_symmetric: false,
        captured: false,
    };
    let named = |a| ReduceScatterOptions { algorithm: a, ..Default::default() };
    for world in [2, 4, 8] {
        let p = planner("NVIDIA H100 80GB HBM3", world);
        let sm = rs(&p, &call, &named(ReduceScatterAlgorithm::SmDirect));
        assert_eq!((sm.algorithm, sm.carry), (RsAlgo::SmDirect, Carry::Bf16In));
        assert!(sm.packs() && sm.pieces > 1 && sm.pieces <= lowcon_abi::pad::WIRE_PIECES, "{sm:?}");
        assert!(sm.replays, "eager calls that pack replay (NOTE [wire replays])");
        let ce = rs(&p, &call, &named(ReduceScatterAlgorithm::CeReduce));
        assert!(!ce.packs() && !ce.replays);
        let many = ReduceScatterOptions { pipeline: Some(65), ..named(ReduceScatterAlgorithm::SmDirect) };
        let e = p.reduce_scatter(&call, &many).unwrap_err().to_string();
        assert!(e.contains("pipeline 65"), "{e}");
    }
    // FSDP2's bf16 copy-in (lowcon.fsdp, NOTE [bf16 copy-in]): the H100 tables pack it on
    // sm-direct, 64 CTAs, at 4 ranks (at most 8 pieces) and at 2 (at most 4): no mapping,
    // so no host rendezvous at any call. The H200 tables read it in place on 16 CTAs
    // (NOTE [bf16 input read in place]), one piece, mapped (its addresses predicted), with
    // memop waits: beside a saturated GEMM a kernel barrier cost it more (19% against 8% at
    // 4 ranks; 8-10% against 7-8% at 2, where the step is level: h200-w2.txt).
    let fsdp = ReduceScatterOptions { context: Context::Fsdp, ..Default::default() };
    let (kernel, memop) = (SyncMethod::Kernel, SyncMethod::StreamMemop);
    for (device, world, max, ctas, sync) in [
        ("NVIDIA H100 80GB HBM3", 4, 8, 64, memop),
        ("NVIDIA H200", 4, 1, 16, memop),
        ("NVIDIA H100 80GB HBM3", 2, 4, 64, kernel),
        ("NVIDIA H200", 2, 1, 16, memop),
    ] {
        let plan = rs(&planner(device, world), &call, &fsdp);
        assert_eq!(
            (plan.algorithm, plan.ctas, plan.carry, plan.sync),
            (RsAlgo::SmDirect, ctas, Carry::Bf16In, sync),
            "{device} x{world}"
        );
        let packed = ctas == 64;
        assert_eq!((plan.packs(), plan.map_ordinary, plan.pieces), (packed, !packed, max), "{plan:?}");
        assert!(plan.origin.contains(&format!("-w{world}.txt")), "{}", plan.origin);
    }
    // One rank packs for no one: the plan reduces its own chunk on ce-reduce.
    let one = rs(&planner("NVIDIA H100 80GB HBM3", 1), &call, &named(ReduceScatterAlgorithm::SmDirect));
    assert_eq!((one.algorithm, one.carry, one.packs()), (RsAlgo::CeReduce, Carry::Bf16In, false));
}

#[test]
fn a_bf16_input_read_in_place_packs_nothing() {
    // NOTE [bf16 input read in place]: a rule (or the caller) with `map` has sm-direct read
    // a bf16 input into f32 where it is: mapped when ordinary (eager calls only: a
    // captured ordinary input packs), as it is when symmetric (captured too); one piece,
    // no replays of the wire's graphs.
    let text = "lowcon-tuning 1\nmachine gpu=H200 world=4\nsource test\n\
                reduce-scatter context=fsdp dtype=bf16 out=f32 algorithm=sm-direct ctas=16 sync=memop map=yes\n";
    let p = h200_w4_with("mine.txt", text);
    let fsdp = ReduceScatterOptions { context: Context::Fsdp, ..Default::default() };
    let call = |input_symmetric, captured| RsCall {
        chunk: 64 << 20,
        input: DType::Bf16,
        output: DType::F32,
        op: ReduceOp::Sum,
        input_symmetric,
        captured,
    };
    for (symmetric, captured, in_place) in
        [(false, false, true), (true, false, true), (true, true, true), (false, true, false)]
    {
        let plan = rs(&p, &call(symmetric, captured), &fsdp);
        assert_eq!((plan.algorithm, plan.ctas, plan.carry), (RsAlgo::SmDirect, 16, Carry::Bf16In), "{plan:?}");
        assert_eq!((plan.map_ordinary, plan.packs()), (in_place, !in_place), "{symmetric} {captured}: {plan:?}");
        if in_place {
            assert!(plan.pieces == 1 && !plan.replays, "{plan:?}");
        }
    }
    // The caller's `map_ordinary` wins over the rule's either way.
    let no = ReduceScatterOptions { map_ordinary: Some(false), ..fsdp };
    assert!(rs(&p, &call(false, false), &no).packs());
    let named = ReduceScatterOptions {
        algorithm: ReduceScatterAlgorithm::SmDirect,
        map_ordinary: Some(true),
        pipeline: Some(65),
        ..Default::default()
    };
    // Read in place, nothing is packed: the wire's piece limit does not apply, at one rank
    // too (where the call runs on ce-reduce, the refusals follow sm-direct's asked).
    assert!(!rs(&p, &call(false, false), &named).packs());
    let one = planner("NVIDIA H200", 1);
    assert!(
        one.reduce_scatter(&call(true, true), &named).is_ok() && p.reduce_scatter(&call(true, true), &named).is_ok()
    );
    // An f32 call is not a bf16 input: sm-direct's `map` changes nothing there.
    let f32_call = RsCall { input: DType::F32, ..call(false, false) };
    assert!(!rs(&p, &f32_call, &ReduceScatterOptions { map_ordinary: Some(true), ..named }).map_ordinary);
}

#[test]
fn no_shipped_table_sends_the_wire_without_the_hint() {
    // lowcon.fsdp's and the torch backend's `reduce_scatter_wire=None` give no hint and
    // no wire of their own: the shipped tables then keep f32 on the wire.
    for (device, world) in [
        ("NVIDIA H100 80GB HBM3", 2),
        ("NVIDIA H100 80GB HBM3", 4),
        ("NVIDIA H200", 2),
        ("NVIDIA H200", 4),
        ("NVIDIA H100", 8),
    ] {
        let p = planner(device, world);
        for shift in 10..=30 {
            let call = RsCall { input_symmetric: false, ..rs_call(1 << shift, DType::F32) };
            let fsdp = ReduceScatterOptions { context: Context::Fsdp, ..Default::default() };
            assert_eq!(rs(&p, &call, &fsdp).wire, None, "{device} x{world}, 2^{shift} bytes");
            assert_eq!(rs(&p, &call, &fsdp_exact()).carry == Carry::Split, rs(&p, &call, &fsdp_exact()).wire.is_some());
        }
    }
}
