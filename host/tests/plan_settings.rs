//! NOTE [plan settings]: every environment variable that changes how a call runs feeds
//! the planner, and shows in the plan (`g.plan()`, `lowconCommPlan`). One test in its
//! own binary: it sets process environment variables, which nothing else here reads.

use lowcon::plan::settings::{
    COPY_HINT_ENV, LL_OVERLAP_ENV, MEMOP_BATCH_ENV, TMA_STAGES_ENV, TMA_TILE_ENV, VARIABLES, WIRE_REPLAYS_ENV,
};
use lowcon::plan::{AgCall, Machine, Planner, RsCall};
use lowcon::{AllGatherAlgorithm, AllGatherOptions, DType, ReduceOp, ReduceScatterAlgorithm, ReduceScatterOptions};

fn set(vars: &[(&str, &str)]) {
    for v in VARIABLES {
        // SAFETY: this binary's only test runs on one thread, and nothing else in the
        // process reads the environment meanwhile.
        unsafe { std::env::remove_var(v) };
    }
    for (k, v) in vars {
        // SAFETY: as above.
        unsafe { std::env::set_var(k, v) };
    }
}

fn planner() -> lowcon::Result<Planner> {
    Planner::for_machine(Machine { device: "NVIDIA H100 80GB HBM3".into(), sms: 132, world: 4, ranks_on_gpu: 1 })
}

/// The fields of a plan, as the bindings show them.
fn rs(
    p: &Planner,
    algorithm: ReduceScatterAlgorithm,
    input: DType,
    wire: Option<DType>,
) -> Vec<(&'static str, String)> {
    let call =
        RsCall { chunk: 64 << 20, input, output: input, op: ReduceOp::Sum, input_symmetric: true, captured: false };
    let opts = ReduceScatterOptions { algorithm, wire, ..Default::default() };
    p.reduce_scatter(&call, &opts).unwrap().fields()
}

fn ag(p: &Planner, algorithm: AllGatherAlgorithm) -> Vec<(&'static str, String)> {
    let call = AgCall { shard: 16 << 10, dtype: DType::Bf16, output_symmetric: true, captured: false };
    p.all_gather(&call, &AllGatherOptions { algorithm, ..Default::default() }).fields()
}

fn field(fields: &[(&'static str, String)], key: &str) -> String {
    fields.iter().find(|(k, _)| *k == key).map(|(_, v)| v.clone()).unwrap_or_else(|| panic!("no {key} in {fields:?}"))
}

#[test]
fn each_variable_reaches_the_plan() {
    use AllGatherAlgorithm as Ag;
    use ReduceScatterAlgorithm as Rs;
    // The defaults.
    set(&[]);
    let p = planner().unwrap();
    let tma = rs(&p, Rs::TmaReduce, DType::Bf16, None);
    assert_eq!((field(&tma, "tma_tile"), field(&tma, "tma_stages")), ("8192".into(), "7".into()));
    let wire = rs(&p, Rs::CeReduce, DType::F32, Some(DType::Bf16));
    assert_eq!((field(&wire, "carry"), field(&wire, "replays")), ("split".into(), "true".into()));
    assert_eq!(field(&wire, "copy_hint"), "false");
    assert_eq!(field(&wire, "memop_batch"), "true");
    assert_eq!(field(&ag(&p, Ag::Ll), "ll_overlap"), "true");
    assert_eq!(field(&ag(&p, Ag::CePull), "copy_batch"), "true");

    set(&[(TMA_TILE_ENV, "4096"), (TMA_STAGES_ENV, "3")]);
    let tma = rs(&planner().unwrap(), Rs::TmaReduce, DType::Bf16, None);
    assert_eq!((field(&tma, "tma_tile"), field(&tma, "tma_stages")), ("4096".into(), "3".into()));
    set(&[(TMA_TILE_ENV, "4096")]);
    assert_eq!(field(&rs(&planner().unwrap(), Rs::TmaPushReduce, DType::Bf16, None), "tma_tile"), "4096");

    set(&[(LL_OVERLAP_ENV, "0")]);
    assert_eq!(field(&ag(&planner().unwrap(), Ag::Ll), "ll_overlap"), "false");
    assert_eq!(field(&rs(&planner().unwrap(), Rs::Ll, DType::Bf16, None), "ll_overlap"), "false");

    set(&[(COPY_HINT_ENV, "1")]);
    assert_eq!(field(&ag(&planner().unwrap(), Ag::CePull), "copy_hint"), "true");
    assert_eq!(field(&rs(&planner().unwrap(), Rs::CeReduce, DType::Bf16, None), "copy_hint"), "true");

    set(&[(WIRE_REPLAYS_ENV, "0")]);
    assert_eq!(field(&rs(&planner().unwrap(), Rs::CeReduce, DType::F32, Some(DType::Bf16)), "replays"), "false");

    set(&[(MEMOP_BATCH_ENV, "0")]);
    assert_eq!(field(&ag(&planner().unwrap(), Ag::CePull), "memop_batch"), "false");
    assert_eq!(field(&rs(&planner().unwrap(), Rs::CeReduce, DType::Bf16, None), "memop_batch"), "false");

    // A value a variable does not take: the planner (so the group) is refused, naming it.
    set(&[(WIRE_REPLAYS_ENV, "off")]);
    let e = planner().unwrap_err().to_string();
    assert!(e.contains("LOWCON_WIRE_REPLAYS=\"off\"") && e.contains("expected 0 or 1"), "{e}");
    set(&[]);
}
