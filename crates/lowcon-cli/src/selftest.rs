//! `lowcon selftest`: the scenarios one rank of a multi-process check runs (started with
//! `lowcon launch`, or by hand), and their dispatch to the scenario crate.

use std::time::Duration;

use clap::Subcommand;
use lowcon::SyncMethod;

use crate::Backend;

/// `--method`: parsed with the CLI (`kernel`, `memop`), whatever the backend.
fn sync_method(s: &str) -> Result<SyncMethod, String> {
    s.parse().map_err(|e: lowcon::Error| e.to_string())
}

#[derive(Subcommand)]
pub(crate) enum Scenario {
    /// Barriers with random per-rank delays, checking that no rank runs ahead.
    BarrierStress {
        #[arg(long, default_value_t = 100_000)]
        iters: u64,
        #[arg(long, default_value_t = 200)]
        max_delay_us: u64,
    },
    /// Ring of publish (fresh random data) then signal; every word checked.
    PublishSignal {
        #[arg(long, default_value_t = 10_000)]
        rounds: u32,
        #[arg(long, default_value_t = 1024)]
        words: usize,
    },
    /// One rank skips a barrier; the others must time out naming it.
    SkipBarrier {
        #[arg(long)]
        skipper: Option<usize>,
        #[arg(long, default_value_t = 1000)]
        timeout_ms: u64,
    },
    /// One rank exits abruptly; the others must notice and name it.
    DeadPeer {
        #[arg(long)]
        victim: Option<usize>,
    },
    /// Ranks ask for different sizes; allocation must fail naming them.
    MismatchedSize,
    /// GPU: checked barriers (both sync methods unless --method).
    GpuBarrierStress {
        #[arg(long, default_value_t = 100_000)]
        iters: u64,
        #[arg(long, default_value_t = 200)]
        max_delay_us: u64,
        #[arg(long, value_parser = sync_method)]
        method: Option<SyncMethod>,
    },
    /// GPU: copy-engine publish then signal, every word checked.
    GpuPublishSignal {
        #[arg(long, default_value_t = 10_000)]
        rounds: u32,
        #[arg(long, default_value_t = 1024)]
        words: usize,
        #[arg(long, value_parser = sync_method)]
        method: Option<SyncMethod>,
    },
    /// GPU: one rank skips a barrier; the others must time out naming it.
    GpuSkipBarrier {
        #[arg(long, default_value_t = 1000)]
        timeout_ms: u64,
        #[arg(long, value_parser = sync_method)]
        method: Option<SyncMethod>,
    },
    /// GPU: one rank exits abruptly; the others must name it.
    GpuDeadPeer {
        #[arg(long, value_parser = sync_method)]
        method: Option<SyncMethod>,
    },
    /// GPU: ranks ask for different sizes.
    GpuMismatchedSize,
    /// GPU: every peer mapping points at that peer's memory.
    GpuMapping,
    /// GPU: run with LOWCON_DEVICE=0 on every rank; creation must fail naming them.
    GpuSameDevice,
    /// GPU: symmetric memory is given back when dropped.
    GpuMemoryRelease,
    /// Collectives: every algorithm, dtype and op against a CPU reference.
    CollCheck {
        #[arg(long, value_enum, default_value_t = Backend::Host)]
        backend: Backend,
        /// Elements per rank of the largest case.
        #[arg(long, default_value_t = 300_001)]
        large: usize,
        #[arg(long, value_parser = sync_method)]
        method: Option<SyncMethod>,
    },
    /// The bf16 wire of reduce-scatter (NOTE [bf16 wire]): f32 over bf16 and bf16 into
    /// f32, every op, exact and inexact data, bit for bit against the f32 path, with the
    /// counters checked; on GPUs also captured in a CUDA graph.
    CollWire {
        #[arg(long, value_enum, default_value_t = Backend::Host)]
        backend: Backend,
        /// Elements per rank of the largest case.
        #[arg(long, default_value_t = 300_001)]
        large: usize,
        /// GPU: graph replays (0: no graph).
        #[arg(long, default_value_t = 20)]
        replays: usize,
        #[arg(long, value_parser = sync_method)]
        method: Option<SyncMethod>,
    },
    /// GPU collectives with `map_ordinary`: peers read ordinary (cuMemAlloc) inputs in
    /// place; differing sizes and unshareable memory refused on every rank.
    CollMapped {
        #[arg(long, value_parser = sync_method)]
        method: Option<SyncMethod>,
        /// Only the part with two threads on two channels at once (kernel sync), this
        /// many calls per thread: a quick reproducer of a stall there (scripts/gpu-stall.sh).
        #[arg(long)]
        threads_only: Option<u64>,
    },
    /// Shrinking after peers die: the victims (default: the last rank) SIGKILL
    /// themselves at call `--kill-at`; every survivor must get an error naming one,
    /// shrink, and pass the correctness suite on the new group. `--healthy N` instead
    /// shrinks a live group N times and checks that nothing leaks.
    CollShrink {
        #[arg(long, value_enum, default_value_t = Backend::Host)]
        backend: Backend,
        /// Comma-separated ranks that die.
        #[arg(long, alias = "victim")]
        victims: Option<String>,
        #[arg(long, default_value_t = 50)]
        kill_at: usize,
        #[arg(long, default_value_t = 10_000)]
        timeout_ms: u64,
        #[arg(long, value_parser = sync_method)]
        method: Option<SyncMethod>,
        #[arg(long)]
        healthy: Option<usize>,
        /// Host backend: this rank dies (SIGKILL) this many ms into its shrink
        /// (`RANK:MS`); the others retry.
        #[arg(long)]
        die_in_shrink: Option<String>,
        /// Host backend: this rank calls shrink this many ms late (`RANK:MS`); past the
        /// agreement window it must be told it was left out, and the others go on.
        #[arg(long)]
        late_in_shrink: Option<String>,
    },
    /// GPU collectives captured into CUDA graphs: twelve calls replayed with fresh data
    /// and eager calls between; two graphs on two streams; what a capture refuses. With
    /// `--kill-at`, rank `--victim` dies at that replay and the others must name it.
    CollGraph {
        #[arg(long, value_parser = sync_method)]
        method: Option<SyncMethod>,
        #[arg(long, default_value_t = 1000)]
        replays: usize,
        #[arg(long)]
        kill_at: Option<usize>,
        #[arg(long)]
        victim: Option<usize>,
        #[arg(long, default_value = "sigkill")]
        exit: String,
        #[arg(long, default_value_t = 10_000)]
        timeout_ms: u64,
    },
    /// Collectives: back-to-back calls cycling through every algorithm, on one or two
    /// streams (threads on the host backend) at once, every output checked.
    CollStress {
        #[arg(long, value_enum, default_value_t = Backend::Host)]
        backend: Backend,
        #[arg(long, default_value_t = 1000)]
        iters: usize,
        #[arg(long, default_value_t = 2)]
        streams: usize,
        #[arg(long, value_parser = sync_method)]
        method: Option<SyncMethod>,
    },
    /// Collectives: one rank leaves mid-loop (SIGKILL, or `--exit exit`: `_exit(0)`);
    /// the others must name it. GPU: `--elems` f32 per rank (default 16384), `--staged`
    /// from ordinary buffers, `--wire`: bf16-wire reduce-scatters instead, launched as one
    /// graph from the second call on (NOTE [wire replays]); `--bf16-in`: reduce-scatters
    /// of a bf16 input into f32 on sm-direct (FSDP2's bf16 copy-in), packed and replayed alike;
    /// `--bf16-in --in-place`: the same read in place (`map_ordinary`: an address exchange
    /// per call, then one kernel).
    CollDeadPeer {
        #[arg(long, value_enum, default_value_t = Backend::Host)]
        backend: Backend,
        #[arg(long)]
        victim: Option<usize>,
        #[arg(long, default_value_t = 300)]
        kill_at: usize,
        #[arg(long, default_value = "sigkill")]
        exit: String,
        #[arg(long, default_value_t = 16 << 10)]
        elems: usize,
        #[arg(long)]
        staged: bool,
        #[arg(long, conflicts_with = "staged")]
        wire: bool,
        #[arg(long, conflicts_with_all = ["staged", "wire"])]
        bf16_in: bool,
        #[arg(long, requires = "bf16_in")]
        in_place: bool,
        #[arg(long, default_value_t = 10_000)]
        timeout_ms: u64,
        #[arg(long, value_parser = sync_method)]
        method: Option<SyncMethod>,
    },
    /// Collectives never wait for the GPU: `calls` back-to-back collectives (every
    /// algorithm, two streams) at two sizes; the host enqueue time must be a small
    /// fraction of the GPU time and must not grow with it. GPU only.
    CollEnqueue {
        #[arg(long, default_value_t = 1000)]
        calls: usize,
        /// bf16 elements per rank of the small size.
        #[arg(long, default_value_t = 64 << 10)]
        small: usize,
        /// bf16 elements per rank of the large size.
        #[arg(long, default_value_t = 32 << 20)]
        large: usize,
        #[arg(long, value_parser = sync_method)]
        method: Option<SyncMethod>,
    },
    /// Collectives: bad arguments are refused with clear errors, nothing enqueued.
    CollBadInput {
        #[arg(long, value_enum, default_value_t = Backend::Host)]
        backend: Backend,
    },
}

/// The methods a scenario runs: the one asked for, else both.
fn methods(m: &Option<SyncMethod>) -> Vec<SyncMethod> {
    m.map_or_else(|| vec![SyncMethod::Kernel, SyncMethod::StreamMemop], |m| vec![m])
}

/// Runs `f` once per method, joining the details; the first failure wins.
fn per_method(m: &Option<SyncMethod>, f: impl Fn(SyncMethod) -> Result<String, String>) -> Result<String, String> {
    let mut out = Vec::new();
    for method in methods(m) {
        out.push(f(method)?);
    }
    Ok(out.join("; "))
}

/// As [`per_method`] on GPUs; a host group runs once (its calls have no sync method).
fn per_backend_method(
    gpu: bool,
    m: &Option<SyncMethod>,
    f: impl Fn(SyncMethod) -> Result<String, String>,
) -> Result<String, String> {
    if gpu { per_method(m, f) } else { f(SyncMethod::Kernel) }
}

pub(crate) fn run(s: Scenario) -> Result<i32, Box<dyn std::error::Error>> {
    use lowcon_selftest::{coll, dead_peer, gpu_ranks, ranks};
    let world: usize = std::env::var("WORLD_SIZE").ok().and_then(|w| w.parse().ok()).unwrap_or(1);
    let rank = std::env::var("RANK").unwrap_or_else(|_| "?".into());
    let (name, r) = match s {
        Scenario::BarrierStress { iters, max_delay_us } => {
            ("barrier-stress", ranks::barrier_stress(iters, max_delay_us))
        }
        Scenario::PublishSignal { rounds, words } => ("publish-signal", ranks::publish_signal(rounds, words)),
        Scenario::SkipBarrier { skipper, timeout_ms } => {
            ("skip-barrier", ranks::skip_barrier(skipper.unwrap_or(world - 1), Duration::from_millis(timeout_ms)))
        }
        Scenario::DeadPeer { victim } => ("dead-peer", ranks::dead_peer(victim.unwrap_or(world - 1))),
        Scenario::MismatchedSize => ("mismatched-size", ranks::mismatched_size()),
        Scenario::GpuBarrierStress { iters, max_delay_us, method } => {
            ("gpu-barrier-stress", per_method(&method, |m| gpu_ranks::barrier_stress(m, iters, max_delay_us)))
        }
        Scenario::GpuPublishSignal { rounds, words, method } => {
            ("gpu-publish-signal", per_method(&method, |m| gpu_ranks::publish_signal(m, rounds, words)))
        }
        Scenario::GpuSkipBarrier { timeout_ms, method } => (
            "gpu-skip-barrier",
            per_method(&method, |m| gpu_ranks::skip_barrier(m, world - 1, Duration::from_millis(timeout_ms))),
        ),
        Scenario::GpuDeadPeer { method } => {
            ("gpu-dead-peer", per_method(&method, |m| gpu_ranks::dead_peer(m, world - 1)))
        }
        Scenario::GpuMismatchedSize => ("gpu-mismatched-size", gpu_ranks::mismatched_size()),
        Scenario::GpuMapping => ("gpu-mapping", gpu_ranks::mapping()),
        Scenario::GpuSameDevice => ("gpu-same-device", gpu_ranks::same_device()),
        Scenario::GpuMemoryRelease => ("gpu-memory-release", gpu_ranks::memory_release()),
        Scenario::CollCheck { backend, large, method } => {
            // One runner on either backend (lowcon::Group); host groups have no sync methods.
            let gpu = backend == Backend::Gpu;
            let r = per_backend_method(gpu, &method, |m| {
                let r = coll::Runner::from_env(gpu, None)?;
                let suite = coll::run_suite(&r, &coll::suite(m, large))?;
                Ok(format!("{suite}; {}", coll::run_in_place_suite(&r, m)?))
            });
            ("coll-check", r)
        }
        Scenario::CollWire { backend, large, replays, method } => {
            let gpu = backend == Backend::Gpu;
            let r = per_backend_method(gpu, &method, |m| {
                let r = coll::Runner::from_env(gpu, None)?;
                let suite = coll::wire_suite(&r, m, large)?;
                if !gpu {
                    return Ok(suite);
                }
                let suite = format!("{suite}; {}", coll::gpu_wire_in_place(&r, m)?);
                let suite = format!("{suite}; {}", coll::gpu_wire_replays(&r, m, 14)?);
                if replays == 0 {
                    return Ok(suite);
                }
                Ok(format!("{suite}; {}", coll::gpu_wire_graph(&r, m, replays)?))
            });
            ("coll-wire", r)
        }
        Scenario::CollMapped { method: _, threads_only: Some(calls) } => ("coll-mapped", {
            let r = coll::Runner::from_env(true, None)?;
            coll::gpu_mapped_threads(&r.gpu("coll-mapped")?, calls)
                .map(|(checked, calls)| format!("two threads: {calls} calls, {checked} elements ok"))
        }),
        Scenario::CollMapped { method, threads_only: None } => (
            "coll-mapped",
            per_method(&method, |m| {
                let r = coll::Runner::from_env(true, None)?;
                coll::gpu_mapped(&r.gpu("coll-mapped")?, m)
            }),
        ),
        Scenario::CollGraph { method, replays, kill_at: None, .. } => (
            "coll-graph",
            per_method(&method, |m| {
                let r = coll::Runner::from_env(true, None)?;
                coll::gpu_graph(&r.gpu("coll-graph")?, m, replays)
            }),
        ),
        Scenario::CollGraph { method, kill_at: Some(k), victim, exit, timeout_ms, .. } => (
            "coll-graph-dead-peer",
            coll::graph_dead_peer(
                victim.unwrap_or(world - 1),
                k,
                exit.parse()?,
                Duration::from_millis(timeout_ms),
                methods(&method)[0],
            ),
        ),
        Scenario::CollShrink { backend, healthy: Some(n), .. } => {
            ("coll-shrink", lowcon_selftest::shrink::healthy_shrinks(n, backend == Backend::Gpu))
        }
        Scenario::CollShrink {
            backend,
            victims,
            kill_at,
            timeout_ms,
            method,
            healthy: None,
            die_in_shrink,
            late_in_shrink,
        } => {
            let rank_ms = |d: Option<String>, flag: &str| -> Result<_, Box<dyn std::error::Error>> {
                let Some(d) = d else { return Ok(None) };
                let (r, ms) = d.split_once(':').ok_or(format!("{flag} RANK:MS"))?;
                Ok(Some((r.parse::<usize>()?, Duration::from_millis(ms.parse()?))))
            };
            let dier = rank_ms(die_in_shrink, "--die-in-shrink")?;
            let late = rank_ms(late_in_shrink, "--late-in-shrink")?;
            let victims: Vec<usize> = match victims {
                Some(v) => v.split(',').map(|x| x.trim().parse()).collect::<Result<_, _>>()?,
                None => vec![world - 1],
            };
            let t = Duration::from_millis(timeout_ms);
            let r = match backend {
                Backend::Gpu => lowcon_selftest::shrink::gpu_shrink(&victims, kill_at, t, methods(&method)[0]),
                Backend::Host => lowcon_selftest::shrink::host_shrink(&victims, kill_at, t, dier, late),
            };
            ("coll-shrink", r)
        }
        Scenario::CollStress { backend, iters, streams, method } => (
            "coll-stress",
            match backend {
                Backend::Gpu => per_method(&method, |m| {
                    let r = coll::Runner::from_env(true, None)?;
                    coll::gpu_stress(&r.gpu("coll-stress")?, iters, streams, m)
                }),
                Backend::Host => {
                    coll::Runner::from_env(false, None).and_then(|r| coll::host_stress(&r, iters, streams))
                }
            },
        ),
        Scenario::CollDeadPeer {
            backend,
            victim,
            kill_at,
            exit,
            elems,
            staged,
            wire,
            bf16_in,
            in_place,
            timeout_ms,
            method,
        } => {
            let call = match (staged, wire, bf16_in) {
                (_, _, true) if in_place => dead_peer::DeadPeerCall::Bf16InPlace,
                (_, _, true) => dead_peer::DeadPeerCall::Bf16In,
                (_, true, _) => dead_peer::DeadPeerCall::Wire,
                (true, _, _) => dead_peer::DeadPeerCall::Staged,
                _ => dead_peer::DeadPeerCall::AllGather,
            };
            let victim = victim.unwrap_or(world - 1);
            let t = Duration::from_millis(timeout_ms);
            let exit: dead_peer::Exit = exit.parse()?;
            (
                "coll-dead-peer",
                match backend {
                    Backend::Gpu => {
                        dead_peer::gpu_dead_peer(victim, kill_at, exit, elems, call, t, methods(&method)[0])
                    }
                    Backend::Host => dead_peer::host_dead_peer(victim, kill_at, exit, t),
                },
            )
        }
        Scenario::CollEnqueue { calls, small, large, method } => {
            ("coll-enqueue", per_method(&method, |m| lowcon_selftest::enqueue::gpu_enqueue(calls, small, large, m)))
        }
        Scenario::CollBadInput { backend } => (
            "coll-bad-input",
            match backend {
                Backend::Gpu => coll::gpu_bad_input(),
                Backend::Host => coll::host_bad_input(),
            },
        ),
    };
    match r {
        Ok(detail) => {
            println!("rank {rank}: {name} ok: {detail}");
            Ok(0)
        }
        Err(why) => {
            println!("rank {rank}: {name} FAILED: {why}");
            Ok(1)
        }
    }
}
