//! Logging. lowcon logs through [`tracing`], so the embedding application decides
//! where lines go (the `lowcon` command installs a stderr subscriber filtered by
//! `RUST_LOG`). Events carry the rank as a field and use the target `lowcon`.
//!
//! NOTE [no subscriber]: Python and C embeddings usually install no `tracing`
//! subscriber. Where none is installed globally, lowcon prints to stderr itself:
//! warnings always (as it did before it used `tracing`), debug lines (failure handling,
//! rendezvous decisions) with `LOWCON_DEBUG=1`. So `LOWCON_DEBUG=1` works in every
//! embedding, with or without a subscriber.

use std::sync::OnceLock;
use std::time::Instant;

fn since_start() -> f64 {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_secs_f64()
}

fn no_subscriber() -> bool {
    !tracing::dispatcher::has_been_set()
}

/// A debug line about rank `rank` (failure paths: detection, release of stuck waits,
/// teardown; rendezvous decisions). Shown by a subscriber at debug level for target
/// `lowcon`, or on stderr with `LOWCON_DEBUG=1` when no subscriber is installed.
pub fn trace(rank: usize, what: &str) {
    let t = since_start();
    tracing::debug!(target: "lowcon", rank, t = format_args!("{t:.3}"), "{what}");
    if no_subscriber() && crate::config::debug() {
        eprintln!("lowcon[rank {rank} +{t:.3}s]: {what}");
    }
}

/// A warning (a fallback taken, a setting ignored). On stderr when no subscriber is
/// installed.
pub fn warn(what: &str) {
    tracing::warn!(target: "lowcon", "{what}");
    if no_subscriber() {
        eprintln!("lowcon: {what}");
    }
}

/// A call's plan (NOTE [one planner]), once per distinct plan, collective and context
/// hint: shown as [`trace`] is, with the call's bytes per rank when it was first seen.
/// Costs one check when debugging is off.
pub fn plan(rank: usize, what: &str, context: &str, bytes: usize, plan: &dyn std::fmt::Display) {
    static ON: OnceLock<bool> = OnceLock::new();
    let on = *ON.get_or_init(crate::config::debug) || tracing::enabled!(target: "lowcon", tracing::Level::DEBUG);
    if !on {
        return;
    }
    static SEEN: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let key = format!("{what} ({context}): {plan}");
    let mut seen = SEEN.lock().unwrap_or_else(|p| p.into_inner());
    if seen.len() < 4096 && !seen.contains(&key) {
        seen.push(key.clone());
        drop(seen);
        trace(rank, &format!("plan: {key} (first at {bytes} bytes per rank)"));
    }
}
