//! `lowcon info`: the library, the driver and devices, and what the planner picks for a
//! few sizes, from which table or model (NOTE [one planner]).

pub fn info(world: Option<usize>) -> Result<(), Box<dyn std::error::Error>> {
    let kernels = lowcon::cuda::PTX.matches(".visible .entry ").count();
    let target = lowcon::cuda::PTX.lines().find_map(|l| l.strip_prefix(".target ")).unwrap_or("?");
    println!("lowcon {}: {kernels} kernels embedded, PTX target {target}", env!("CARGO_PKG_VERSION"));
    // WORLD_SIZE, where set, must be a world (a malformed one is refused, not taken for 2).
    let env_world = match std::env::var("WORLD_SIZE") {
        Ok(w) => match w.parse::<usize>() {
            Ok(n) if n >= 1 => Some(n),
            _ => return Err(format!("WORLD_SIZE={w:?}: expected a number of ranks, 1 or more").into()),
        },
        Err(_) => None,
    };
    match lowcon::cuda::device_count() {
        Err(lowcon::Error::NoDriver) => {
            println!("{}", lowcon::Error::NoDriver);
            let w = world.or(env_world).unwrap_or(2);
            return plans(lowcon::plan::Machine::host(w));
        }
        Err(e) => return Err(e.into()),
        Ok(n) => {
            let (maj, min) = lowcon::cuda::driver_version()?;
            println!("CUDA driver {maj}.{min}, {n} device(s)");
            for i in 0..n {
                let d = lowcon::cuda::Device::open(i)?.info()?;
                println!(
                    "  [{i}] {} sm_{}{} {} SMs {:.0} GiB pci {}",
                    d.name,
                    d.compute_capability.0,
                    d.compute_capability.1,
                    d.sm_count,
                    d.total_memory as f64 / (1u64 << 30) as f64,
                    d.pci_bus_id
                );
            }
            if n > 0 {
                let d = lowcon::cuda::Device::open(0)?.info()?;
                let w = world.or(env_world).unwrap_or(n.max(2));
                plans(lowcon::plan::Machine { device: d.name, sms: d.sm_count, world: w, ranks_on_gpu: 1 })?;
            }
        }
    }
    Ok(())
}

/// What the planner picks for a few sizes per rank on `machine` (NOTE [one planner]).
fn plans(machine: lowcon::plan::Machine) -> Result<(), Box<dyn std::error::Error>> {
    use lowcon::plan::{AgCall, RsCall, format_bytes};
    use lowcon::{AllGatherOptions, Context, DType, ReduceOp, ReduceScatterOptions};
    let (world, device) = (machine.world, machine.device.clone());
    let p = lowcon::plan::Planner::for_machine(machine)?;
    println!("planner for {world} ranks of {device}: {}", p.table().1);
    // NOTE [plan settings]: what every plan carries beside its choices.
    let s = p.settings();
    let or_default = |v: Option<u64>| v.map_or("default".to_string(), |v| v.to_string());
    println!(
        "settings: tma_tile_bytes={} tma_stages={} ll_overlap={} copy_hint={} wire_replays={} copy_batch={} \
         memop_batch={} (g.plan() and lowconCommPlan show each call's whole plan)",
        or_default(s.tma_tile_bytes),
        or_default(s.tma_stages),
        s.ll_overlap,
        s.copy_hint,
        s.wire_replays,
        s.copy_batch,
        s.memop_batch
    );
    // FSDP2's two copy-ins (torch memory, context fsdp): the bf16 gradients reduced into
    // f32, what lowcon.fsdp sends by default (NOTE [bf16 copy-in]), and the fp32 gradients
    // over the bf16 wire (`copy_in="fp32"`). Every column plans an input of the row's
    // bytes per rank, in its own element type. The cells are built first, so that each
    // column is as wide as its widest cell.
    let mut rows: Vec<[String; 5]> = vec![[
        "bytes".to_string(),
        "all-gather (symmetric)".to_string(),
        "reduce-scatter bf16 (symmetric)".to_string(),
        "FSDP2 bf16 copy-in (the default)".to_string(),
        "FSDP2 fp32 copy-in (bf16 wire)".to_string(),
    ]];
    // A cell: the algorithm, its CTAs, what else the column shows, and the rule's line.
    let short = |a: &str, c: u32, extra: String, o: &str| {
        format!("{a} ctas={c}{extra} [{}]", o.rsplit('/').next().unwrap_or(o))
    };
    for shift in [13, 16, 18, 20, 22, 24, 26, 28] {
        let b = 1usize << shift;
        let ag = p.all_gather(
            &AgCall { shard: b, dtype: DType::Bf16, output_symmetric: true, captured: false },
            &AllGatherOptions::default(),
        );
        let rs_call = RsCall {
            chunk: b,
            input: DType::Bf16,
            output: DType::Bf16,
            op: ReduceOp::Sum,
            input_symmetric: true,
            captured: false,
        };
        let rs = p.reduce_scatter(&rs_call, &ReduceScatterOptions::default())?;
        let fsdp = ReduceScatterOptions { context: Context::Fsdp, ..Default::default() };
        let copy_in = RsCall { output: DType::F32, input_symmetric: false, ..rs_call };
        let ci = p.reduce_scatter(&copy_in, &fsdp)?;
        let f = RsCall { input: DType::F32, output: DType::F32, input_symmetric: false, ..rs_call };
        let fs = p.reduce_scatter(&f, &ReduceScatterOptions { bf16_exact: true, ..fsdp })?;
        // Read in place: eager calls (a captured ordinary input is packed, NOTE [bf16
        // input read in place]).
        let placed = if ci.map_ordinary {
            " in place (eager)".to_string()
        } else if ci.packs() {
            format!(" packed pieces={}", ci.pieces)
        } else {
            format!(" pieces={}", ci.pieces)
        };
        rows.push([
            format_bytes(b),
            short(ag.algorithm.name(), ag.ctas, String::new(), &ag.origin),
            short(rs.algorithm.name(), rs.ctas, format!(" pieces={}", rs.pieces), &rs.origin),
            short(ci.algorithm.name(), ci.ctas, format!("{placed} sync={}", ci.sync.name()), &ci.origin),
            short(
                fs.algorithm.name(),
                fs.ctas,
                format!(" pieces={} wire={}", fs.pieces, fs.wire.map_or("f32", |w| w.name())),
                &fs.origin,
            ),
        ]);
    }
    let width: Vec<usize> = (0..5).map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0)).collect();
    println!("bytes: per rank, of each column's input (its own element type)");
    for r in &rows {
        let mut line = format!("{:>w$}", r[0], w = width[0]);
        for (c, cell) in r.iter().enumerate().skip(1) {
            line += &format!("  {cell:<w$}", w = width[c]);
        }
        println!("{}", line.trim_end());
    }
    Ok(())
}
