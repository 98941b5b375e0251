//! Checks on the embedded PTX that need no GPU: every kernel is there, the
//! synchronisation primitives kept their system scope, and `ptxas` accepts the code.
//!
//! A refactor that silently weakens an ordering (say, `ld.acquire.sys` becoming a plain
//! load because someone used `core::sync::atomic`) must fail here, not on a GPU box.

use std::io::Write;
use std::path::PathBuf;
use std::process::Command;

use lowcon::cuda::PTX;
use lowcon_abi::kernel_names;

#[test]
fn every_kernel_is_exported() {
    for name in kernel_names::ALL {
        assert!(PTX.contains(&format!(".visible .entry {name}(")), "kernel {name} missing from the PTX");
    }
}

/// The body of one `.entry` in the PTX (up to the next `.entry` or the end).
fn entry_body(name: &str) -> &'static str {
    let start = PTX.find(&format!(".entry {name}(")).unwrap_or_else(|| panic!("{name} missing"));
    let rest = &PTX[start + 1..];
    let end = rest.find(".entry ").map_or(PTX.len(), |e| start + 1 + e);
    &PTX[start..end]
}

#[test]
fn flag_kernels_keep_system_scope_ordering() {
    for name in [kernel_names::FLAG_PING, kernel_names::FLAG_PONG] {
        let body = entry_body(name);
        for instr in ["ld.acquire.sys", "st.release.sys", "atom.acq_rel.sys.cas", "%globaltimer", "nanosleep"] {
            assert!(body.contains(instr), "{name} lost `{instr}`");
        }
    }
}

#[test]
fn sync_kernels_keep_system_scope_ordering() {
    for (name, needs) in [
        (
            kernel_names::BARRIER,
            &["fence.acq_rel.sys", "st.release.sys", "ld.acquire.sys", "%globaltimer", "atom.acq_rel.sys.cas"][..],
        ),
        (kernel_names::PUT_SIGNAL, &["fence.acq_rel.sys", "st.release.sys"][..]),
        (kernel_names::WAIT_SIGNAL, &["ld.acquire.sys", "%globaltimer", "atom.acq_rel.sys.cas"][..]),
        (kernel_names::WAIT_WORD, &["ld.acquire.sys", "%globaltimer", "atom.acq_rel.sys.cas"][..]),
    ] {
        let body = entry_body(name);
        for instr in needs {
            assert!(body.contains(instr), "{name} lost `{instr}`");
        }
    }
}

/// The bytes of `name`'s local-memory depot (0 without one).
fn local_depot(name: &str) -> usize {
    let body = entry_body(name);
    body.find("__local_depot")
        .and_then(|at| body[at..].split_once('[').and_then(|(_, r)| r.split_once(']')))
        .map_or(0, |(n, _)| n.parse().expect("a depot size"))
}

#[test]
fn fused_kernels_take_their_head_as_one_parameter_read_in_place() {
    // NOTE [fused head by value] (lowcon_abi::FusedHead): 64 bytes in one aggregate
    // parameter, read with ld.param. Had the ABI passed a pointer, the host's bytes would
    // be read as an address; had the kernels copied the head to local memory, their
    // depots would have grown by 64 bytes. The depots below are those of the 11 scalar
    // parameters the head replaced (2026-11-25): the one-shot all-gather's and
    // rs_direct's (the bf16-into-f32 one's too: the same code) are their own arrays.
    assert_eq!(std::mem::size_of::<lowcon_abi::FusedHead>(), 64);
    for name in kernel_names::FUSED {
        let body = entry_body(name);
        let param = format!(".param .align 8 .b8 {name}_param_0[64]");
        assert!(body.contains(&param), "{name}: its first parameter is not `{param}`");
        assert!(body.contains(&format!("[{name}_param_0+56]")), "{name} does not read its head's last field");
        let before = match name {
            n if n == kernel_names::ALLGATHER_ONESHOT => 48,
            n if kernel_names::RS_DIRECT.contains(&n) || n == kernel_names::RS_DIRECT_BF16_IN => 64,
            _ => 0,
        };
        assert!(local_depot(name) <= before, "{name}: local depot {} bytes, was {before}", local_depot(name));
    }
}

#[test]
fn collective_kernels_declare_their_cta_size() {
    // Without `.maxntid`, ptxas may use more registers than a 512-thread CTA can hold
    // and the launch fails (seen on H200: rs_direct_f16, LAUNCH_OUT_OF_RESOURCES).
    let want = format!(".maxntid {}, 1, 1", kernel_names::COLL_THREADS);
    for name in kernel_names::COLL {
        assert!(entry_body(name).contains(&want), "{name} lacks `{want}`");
    }
}

#[test]
fn ll_kernels_keep_their_line_stores_and_loads() {
    // NOTE [LL protocol] (gpu-kernels/kernels/src/ll.rs): a line's data and flags must be one
    // 16-byte volatile store and one 16-byte volatile load; split into narrower or
    // cached accesses, a reader could see a flag before its data.
    for name in std::iter::once(&kernel_names::LL_ALLGATHER).chain(kernel_names::LL_RS.iter()) {
        let body = entry_body(name);
        for instr in ["st.volatile.v4.u32", "ld.volatile.v4.u32", "line_slow"] {
            assert!(body.contains(instr), "{name} lost `{instr}`");
        }
    }
    // The spin, out of line (`Waits::line_slow`): bounded by the clock, polling the same
    // 16-byte volatile loads.
    let slow = func_body("line_slow");
    for instr in ["ld.volatile.v4.u32", "%globaltimer", "nanosleep"] {
        assert!(slow.contains(instr), "Waits::line_slow lost `{instr}`");
    }
}

#[test]
fn ll_kernels_wait_for_the_prior_grid_before_touching_memory() {
    // NOTE [LL launch overlap] (host/src/cuda/kernels.rs): an LL round may be scheduled
    // while the stream's previous kernel still runs, so every CTA must pass
    // `griddepcontrol.wait` before its first load or store (the round counter, the LL
    // buffers, the source); its CTA count-out is ordered at GPU scope (`last_cta_local`).
    let memory = |l: &&str| {
        (l.starts_with("ld.") && !l.starts_with("ld.param"))
            || ["st.", "atom.", "red.", "cp."].iter().any(|p| l.starts_with(p))
    };
    for name in std::iter::once(&kernel_names::LL_ALLGATHER).chain(kernel_names::LL_RS.iter()) {
        let lines = instructions(entry_body(name));
        let wait = lines
            .iter()
            .position(|l| l.starts_with("griddepcontrol.wait"))
            .unwrap_or_else(|| panic!("{name}: no griddepcontrol.wait"));
        let first = lines.iter().position(memory).unwrap_or_else(|| panic!("{name}: no memory access"));
        assert!(wait < first, "{name}: `{}` comes before griddepcontrol.wait", lines[first]);
        for instr in ["griddepcontrol.launch_dependents", "fence.acq_rel.gpu"] {
            assert!(lines.iter().any(|l| l.starts_with(instr)), "{name} lost `{instr}`");
        }
    }
}

/// The body of the `.func` whose name contains `fragment` (its definition: the last
/// `.func` line naming it, up to the closing brace).
fn func_body(fragment: &str) -> &'static str {
    let start = PTX
        .match_indices(".func")
        .map(|(i, _)| i)
        .filter(|&i| PTX[i..].lines().take(2).any(|l| l.contains(fragment)))
        .last()
        .unwrap_or_else(|| panic!("no .func named like {fragment}"));
    let end = PTX[start..].find("\n}\n").map_or(PTX.len(), |e| start + e + 3);
    &PTX[start..end]
}

#[test]
fn reductions_issue_16_byte_loads() {
    let bf16_in = std::iter::once(&kernel_names::RS_DIRECT_BF16_IN);
    for name in kernel_names::REDUCE.iter().chain(kernel_names::RS_DIRECT.iter()).chain(bf16_in) {
        assert!(entry_body(name).contains("ld.global.v4.u32"), "{name} lost its 16-byte loads");
    }
}

#[test]
fn bulk_copy_kernels_declare_their_cta_size() {
    let want = format!(".maxntid {}, 1, 1", kernel_names::TMA_THREADS);
    for name in kernel_names::TMA_REDUCE {
        assert!(entry_body(name).contains(&want), "{name} lacks `{want}`");
    }
}

#[test]
fn push_reduce_kernels_declare_their_cta_size() {
    let want = format!(".maxntid {}, 1, 1", kernel_names::PUSH_THREADS);
    for name in kernel_names::TMA_PUSH_REDUCE {
        assert!(entry_body(name).contains(&want), "{name} lacks `{want}`");
    }
}

#[test]
fn push_reduce_kernels_keep_their_instructions() {
    let types = [".add.f32", ".add.noftz.f16", ".add.noftz.bf16"];
    for (name, ty) in kernel_names::TMA_PUSH_REDUCE.into_iter().zip(types) {
        let body = entry_body(name);
        for instr in [
            "lowcon_smem",
            "mbarrier.init.shared::cta.b64",
            "fence.mbarrier_init.release.cluster",
            "mbarrier.arrive.expect_tx.shared::cta.b64",
            "mbarrier.try_wait.parity.shared::cta.b64",
            "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes",
            &format!("cp.reduce.async.bulk.global.shared::cta.bulk_group{ty} "),
            "cp.async.bulk.commit_group",
            "cp.async.bulk.wait_group.read",
            "cp.async.bulk.wait_group 0",
            "fence.proxy.async.global",
            "fence.proxy.async;",
            "fence.acq_rel.sys",
            "st.release.sys",
            "ld.acquire.sys",
        ] {
            assert!(body.contains(instr), "{name} lost `{instr}`");
        }
        // Every push completes (`wait_group 0`) before a `fence.proxy.async;` (the full
        // fence, not `.shared::cta`) that comes before the exit signal, on every path.
        let lines = instructions(body);
        let wait0 = |l: &str| l.starts_with("cp.async.bulk.wait_group 0");
        let full_fence = |l: &str| l.starts_with("fence.proxy.async;");
        let signal = |l: &str| l.contains("st.release.sys");
        for (i, l) in lines.iter().enumerate().filter(|(_, l)| l.contains("cp.reduce.async.bulk")) {
            let early = reach(&lines, i, wait0, |l| full_fence(l) || signal(l));
            assert!(early.is_none(), "{name}: `{l}` reaches `{}` before wait_group 0", lines[early.unwrap()]);
        }
        for (i, _) in lines.iter().enumerate().filter(|(_, l)| wait0(l)) {
            let unfenced = reach(&lines, i, full_fence, signal);
            assert!(unfenced.is_none(), "{name}: wait_group 0 reaches a signal without fence.proxy.async");
        }
        assert!(lines.iter().any(|l| wait0(l)), "{name} has no wait_group 0");
    }
}

#[test]
fn ptx_isa_is_8_or_later() {
    // Bulk copies, mbarrier transaction counts and `fence.proxy.async` need PTX ISA 8.0
    // (lowcon_build passes `-mattr=+ptx80` to llc; LLVM's default for sm_90 is 7.8).
    let v = PTX.lines().find_map(|l| l.strip_prefix(".version ")).expect("PTX has a .version line").trim();
    let (major, minor) = v.split_once('.').expect("major.minor");
    let (major, minor): (u32, u32) = (major.parse().unwrap(), minor.parse().unwrap());
    assert!((major, minor) >= (8, 0), "PTX ISA {v}: the bulk-copy kernels need 8.0 or later");
}

#[test]
fn the_dynamic_shared_array_is_declared_once() {
    let decl = ".extern .shared .align 128 .b8 lowcon_smem[];";
    assert_eq!(PTX.matches(decl).count(), 1, "`{decl}` must be declared exactly once");
    assert!(PTX.find(decl).unwrap() < PTX.find(".entry").unwrap(), "declared after its first use");
}

#[test]
fn bulk_copy_kernels_keep_their_instructions() {
    for name in kernel_names::TMA_REDUCE {
        let body = entry_body(name);
        for instr in [
            "lowcon_smem",
            "mbarrier.init.shared::cta.b64",
            "fence.mbarrier_init.release.cluster",
            "mbarrier.arrive.expect_tx.shared::cta.b64",
            "mbarrier.try_wait.parity.shared::cta.b64",
            "mbarrier.arrive.shared::cta.b64",
            "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes",
            ".L2::cache_hint",
            "createpolicy.fractional.L2::evict_first",
            "ld.shared.v4.u32",
            // The fused barriers, as in the other collectives.
            "fence.acq_rel.sys",
            "st.release.sys",
            "ld.acquire.sys",
        ] {
            assert!(body.contains(instr), "{name} lost `{instr}`");
        }
    }
}

/// The instruction lines of a PTX body (comments dropped).
fn instructions(body: &str) -> Vec<&str> {
    body.lines().map(|l| l.split("//").next().unwrap_or("").trim()).filter(|l| !l.is_empty()).collect()
}

/// The first line matching `hit` reachable from line `from` (exclusive) along the
/// body's control flow (fall-through, `bra` to labels, nothing after `ret`/`exit`)
/// without passing a line matching `stop`. LLVM lays loops out after the kernel's
/// `ret`, so text order is not execution order.
fn reach(lines: &[&str], from: usize, stop: impl Fn(&str) -> bool, hit: impl Fn(&str) -> bool) -> Option<usize> {
    let label = |name: &str| lines.iter().position(|l| l.strip_suffix(':') == Some(name));
    let mut seen = vec![false; lines.len()];
    let mut todo = vec![from];
    while let Some(i) = todo.pop() {
        let l = lines[i];
        let mut next = Vec::new();
        let words: Vec<&str> = l.split_whitespace().collect();
        let bra = words.iter().position(|w| *w == "bra" || *w == "bra.uni");
        if let Some(b) = bra {
            let target = words.get(b + 1).map(|t| t.trim_end_matches(';')).unwrap_or("");
            next.extend(label(target));
            if l.starts_with('@') {
                next.push(i + 1);
            }
        } else if !(l.starts_with("ret;") || l.starts_with("exit;")) {
            next.push(i + 1);
        }
        for j in next {
            if j >= lines.len() || seen[j] {
                continue;
            }
            seen[j] = true;
            if hit(lines[j]) {
                return Some(j);
            }
            if !stop(lines[j]) {
                todo.push(j);
            }
        }
    }
    None
}

/// Checks the async-proxy fences of one kernel body (`gpu-kernels/kernels/src/bulk.rs`, NOTE
/// [async proxy]): a `fence.proxy.async` comes (in text order) before the first bulk
/// copy (the peers' generic writes, acquired by the entry barrier, are then visible to
/// the copies), and no path from a bulk copy reaches a system-scope signal
/// (`st.release.sys` / `red.release.sys`: peers may overwrite what the copies read, or
/// read what they wrote, once they see it) without passing a `fence.proxy.async`.
fn check_async_proxy_fences(name: &str, body: &str) -> Result<(), String> {
    let lines = instructions(body);
    let is_copy = |l: &str| l.contains("cp.async.bulk.shared") || l.contains("cp.reduce.async.bulk");
    let is_fence = |l: &str| l.contains("fence.proxy.async");
    let is_signal = |l: &str| l.contains("st.release.sys") || l.contains("red.release.sys");
    let Some(first) = lines.iter().position(|l| is_copy(l)) else { return Ok(()) };
    if !lines[..first].iter().any(|l| is_fence(l)) {
        return Err(format!("{name}: no fence.proxy.async before its first bulk copy `{}`", lines[first]));
    }
    for (i, l) in lines.iter().enumerate().filter(|(_, l)| is_copy(l)) {
        if let Some(sig) = reach(&lines, i, is_fence, is_signal) {
            return Err(format!(
                "{name}: bulk copy `{l}` reaches the signal `{}` without fence.proxy.async",
                lines[sig]
            ));
        }
    }
    Ok(())
}

#[test]
fn bulk_copies_are_fenced_before_signals() {
    let mut checked = 0;
    for name in kernel_names::ALL {
        let body = entry_body(name);
        check_async_proxy_fences(name, body).unwrap_or_else(|e| panic!("{e}"));
        checked += body.contains("cp.async.bulk") as usize;
    }
    let want = kernel_names::TMA_REDUCE.len() + kernel_names::TMA_PUSH_REDUCE.len();
    assert!(checked >= want, "the bulk-copy kernels have no bulk copies");
}

#[test]
fn a_missing_async_proxy_fence_fails_the_check() {
    let body = entry_body(kernel_names::TMA_REDUCE[2]);
    let strip = |fence: &str| body.lines().filter(|l| !l.contains(fence)).collect::<Vec<_>>().join("\n");
    // Without the fence after the ring, the exit signal follows the copies unfenced.
    let e = check_async_proxy_fences("exit", &strip("fence.proxy.async;")).unwrap_err();
    assert!(e.contains("without fence.proxy.async"), "{e}");
    // Without the fence after the entry barrier, the copies read unfenced.
    let e = check_async_proxy_fences("entry", &strip("fence.proxy.async.global")).unwrap_err();
    assert!(e.contains("before its first bulk copy"), "{e}");
    // And a hand-written case: copy, signal, fence.
    let bad = "fence.proxy.async.global;\ncp.async.bulk.shared::cluster.global [a], [b], 16, [c];\n\
               st.release.sys.u32 [p], 1;\nfence.proxy.async;";
    assert!(check_async_proxy_fences("bad", bad).is_err());
    // The push kernel: without its final fence, the pushes reach the exit signal unfenced.
    let body = entry_body(kernel_names::TMA_PUSH_REDUCE[2]);
    let stripped = body.lines().filter(|l| !l.contains("fence.proxy.async;")).collect::<Vec<_>>().join("\n");
    let e = check_async_proxy_fences("push exit", &stripped).unwrap_err();
    assert!(e.contains("cp.reduce.async.bulk") && e.contains("without fence.proxy.async"), "{e}");
    let good =
        bad.replace("st.release.sys.u32 [p], 1;\nfence.proxy.async;", "fence.proxy.async;\nst.release.sys.u32 [p], 1;");
    check_async_proxy_fences("good", &good).unwrap();
}

#[test]
fn ptx_targets_the_configured_arch() {
    let arch = std::env::var("LOWCON_CUDA_ARCH").unwrap_or_else(|_| "sm_90".into());
    assert!(PTX.contains(&format!(".target {arch}")), "PTX is not built for {arch}");
}

/// `LOWCON_PTXAS`, then the copy `scripts/setup.sh` installs under `.tools/`, then PATH.
fn find_ptxas() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("LOWCON_PTXAS") {
        return Some(PathBuf::from(p));
    }
    let local = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.tools/cuda-nvcc/nvidia/cu13/bin/ptxas");
    if local.is_file() {
        return Some(local);
    }
    std::env::var_os("PATH")?.to_str()?.split(':').map(|d| PathBuf::from(d).join("ptxas")).find(|p| p.is_file())
}

#[test]
fn ptxas_accepts_the_ptx() {
    let Some(ptxas) = find_ptxas() else {
        let required = std::env::var("LOWCON_REQUIRE_PTXAS").is_ok_and(|v| v == "1");
        assert!(!required, "LOWCON_REQUIRE_PTXAS=1 but no ptxas found (run scripts/setup.sh)");
        // Not eprintln!: libtest captures that, and the reason should show.
        writeln!(
            std::io::stderr(),
            "skipped ptxas_accepts_the_ptx: no ptxas found (run scripts/setup.sh or set LOWCON_PTXAS)"
        )
        .ok();
        return;
    };
    let arch = PTX
        .lines()
        .find_map(|l| l.strip_prefix(".target "))
        .map(|t| t.split(',').next().unwrap_or(t).trim().to_string())
        .expect("PTX has a .target line");
    let dir = std::env::temp_dir().join(format!("lowcon-ptxas-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("lowcon_kernels.ptx");
    std::fs::write(&src, PTX).unwrap();
    let out = Command::new(&ptxas)
        .arg(format!("-arch={arch}"))
        .arg("--warning-as-error")
        .arg("-v")
        .arg(&src)
        .arg("-o")
        .arg(dir.join("lowcon_kernels.cubin"))
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", ptxas.display()));
    let _ = std::fs::remove_dir_all(&dir);
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "ptxas -arch={arch} rejected the PTX:\n{log}");
    // Kernels must not spill: every entry reports 0 bytes of spill stores.
    for line in log.lines().filter(|l| l.contains("spill stores")) {
        // With the comma: "20 bytes spill stores" contains "0 bytes spill stores".
        assert!(line.contains(", 0 bytes spill stores"), "a kernel spills registers: {line}");
    }
    eprintln!("ptxas -arch={arch} accepted {} kernels", log.matches("Compiling entry function").count());
}
