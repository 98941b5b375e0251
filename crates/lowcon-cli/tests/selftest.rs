//! The multi-process host-backend suite: `lowcon selftest` scenarios started by
//! `lowcon launch` at world sizes 2, 3 and 4, as real separate processes.

use std::process::Command;

const LOWCON: &str = env!("CARGO_BIN_EXE_lowcon");

/// Launches `scenario` on `n` ranks; returns (success, combined output).
fn run(n: usize, scenario: &[&str], env: &[(&str, &str)]) -> (bool, String) {
    // Every test here runs ranks on 2 cores; keep group-creation waits generous.
    let out = Command::new(LOWCON)
        .args(["launch", "--nproc-per-node", &n.to_string(), "--tee", "--", LOWCON, "selftest"])
        .args(scenario)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

fn expect_ok(n: usize, scenario: &[&str]) -> String {
    let (ok, text) = run(n, scenario, &[]);
    assert!(ok, "{scenario:?} on {n} ranks failed:\n{text}");
    for r in 0..n {
        assert!(text.contains(&format!("[rank {r}] rank {r}: ")), "rank {r} reported nothing:\n{text}");
    }
    assert!(!text.contains("FAILED"), "{text}");
    text
}

#[test]
fn barrier_stress_100k_at_2_3_4_ranks() {
    for n in [2, 3, 4] {
        expect_ok(n, &["barrier-stress", "--iters", "100000"]);
    }
}

#[test]
fn publish_then_signal_10k_rounds_at_2_3_4_ranks() {
    for n in [2, 3, 4] {
        let text = expect_ok(n, &["publish-signal", "--rounds", "10000", "--words", "256"]);
        assert!(text.contains("10000 rounds, 2560000 words checked, 0 wrong"), "{text}");
    }
}

#[test]
fn a_rank_that_skips_a_barrier_is_named_by_the_others() {
    for n in [2, 4] {
        let text = expect_ok(n, &["skip-barrier", "--timeout-ms", "700"]);
        for r in 0..n - 1 {
            assert!(
                text.contains(&format!("rank {r}: timed out after 0.7 s waiting for peer rank {}", n - 1)),
                "{text}"
            );
        }
    }
}

#[test]
fn a_dead_rank_is_named_quickly() {
    let (ok, text) = run(3, &["dead-peer", "--victim", "1"], &[]);
    assert!(ok, "{text}");
    for r in [0, 2] {
        assert!(text.contains(&format!("[rank {r}] rank {r}: dead-peer ok: noticed in")), "{text}");
        assert!(text.contains(&format!("rank {r}: peer rank 1 is gone")), "{text}");
    }
}

#[test]
fn mismatched_sizes_are_rejected_naming_them() {
    let text = expect_ok(3, &["mismatched-size"]);
    assert!(text.contains("asked for 4096 bytes") || text.contains("asked for 8192 bytes"), "{text}");
}
