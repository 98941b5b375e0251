//! Every tunable lowcon reads from the environment, in one place, each with its
//! default and meaning (NCCL's `NCCL_PARAM` habit). Explicit options in code win over
//! the environment; the environment wins over the defaults.

use std::time::Duration;

/// `LOWCON_TIMEOUT_MS`: how long any wait for a peer (signal, barrier, handle exchange)
/// may take before it fails with an error naming the peer. Default 60 000 ms.
pub fn timeout() -> Duration {
    Duration::from_millis(env_u64("LOWCON_TIMEOUT_MS").unwrap_or(60_000))
}

/// `LOWCON_SETUP_TIMEOUT_MS`: bound on collective set-up steps (group creation,
/// symmetric allocation), which include CUDA context start-up on every rank and so can
/// take far longer than a barrier. A group never uses less than its own timeout (the
/// `timeout` option, else [`timeout`]). Default 300 000 ms.
pub fn setup_timeout() -> Duration {
    Duration::from_millis(env_u64("LOWCON_SETUP_TIMEOUT_MS").unwrap_or(300_000))
}

/// `LOWCON_MEM_HANDLES`: how the GPU backend shares memory: `vmm` (CUDA VMM, POSIX file
/// descriptors over Unix sockets), `ipc` (legacy `cuIpcGetMemHandle` through the
/// store), or `auto` (VMM, falling back to IPC with the reason logged). Default `auto`.
pub fn mem_handles() -> String {
    std::env::var("LOWCON_MEM_HANDLES").unwrap_or_else(|_| "auto".into())
}

/// `LOWCON_SHARE_GPU=1`: let several ranks of a GPU group share one GPU (each rank a
/// process of its own, best under MPS). For checking correctness on a machine with fewer
/// GPUs than ranks: nothing crosses NVLink, the copy engines and SMs are shared, so
/// timings mean nothing, and `lowcon bench` refuses to run. Unset, empty or `0`: off (two
/// ranks on one GPU are refused, naming this variable); `1`: on; anything else is an
/// error naming the value.
pub fn share_gpu() -> crate::error::Result<bool> {
    parse_share_gpu(std::env::var(SHARE_GPU_ENV).ok().as_deref())
}

/// The variable [`share_gpu`] reads.
pub const SHARE_GPU_ENV: &str = "LOWCON_SHARE_GPU";

/// [`share_gpu`]'s rule for a value of the variable (`None`: unset).
pub fn parse_share_gpu(v: Option<&str>) -> crate::error::Result<bool> {
    match v.map(str::trim) {
        None | Some("") | Some("0") => Ok(false),
        Some("1") => Ok(true),
        Some(other) => Err(crate::error::Error::InvalidArgument(format!(
            "{SHARE_GPU_ENV}={other:?}: expected 1 (ranks may share a GPU) or 0"
        ))),
    }
}

/// CUDA's variable for the hardware work queues a process (an MPS client) asks for: read
/// (never set) by lowcon; `lowcon launch --gpus` gives ranks sharing a GPU 8 (design.md,
/// "Ranks sharing a GPU").
pub const MAX_CONNECTIONS_ENV: &str = "CUDA_DEVICE_MAX_CONNECTIONS";

/// The variable naming a rank's device.
pub const DEVICE_ENV: &str = "LOWCON_DEVICE";

/// The value of `name` as a device index (`LOWCON_DEVICE`, `LOCAL_RANK`).
fn device_index(name: &str, v: &str) -> crate::error::Result<usize> {
    v.trim().parse::<usize>().map_err(|_| {
        crate::error::Error::InvalidArgument(format!("{name}={v:?}: expected a device index (a non-negative integer)"))
    })
}

/// [`crate::cuda::rank_device`]'s rule, from the variables' values (`None`: unset) and, in shared
/// mode, the number of visible devices.
pub fn pick_device(
    lowcon_device: Option<&str>,
    local_rank: Option<&str>,
    rank: usize,
    share: bool,
    visible: Option<usize>,
) -> crate::error::Result<usize> {
    if let Some(v) = lowcon_device {
        return device_index(DEVICE_ENV, v);
    }
    let local = match local_rank {
        Some(v) => device_index("LOCAL_RANK", v)?,
        None => rank,
    };
    match (share, visible) {
        (true, Some(0)) => Err(crate::error::Error::InvalidArgument(format!(
            "{SHARE_GPU_ENV}=1: no CUDA device is visible to place rank {rank} on"
        ))),
        (true, Some(n)) => Ok(local % n),
        _ => Ok(local),
    }
}

/// The variable [`tuning`] reads.
pub const TUNING_ENV: &str = "LOWCON_TUNING";

/// `LOWCON_TUNING`: a tuning table (`lowcon bench tune` writes one) the planner loads
/// instead of the shipped table for the machine (NOTE [tuning tables] in `crate::plan`).
/// Every rank must load the same (group creation checks). Unset or empty: the shipped
/// tables, else the model.
pub fn tuning() -> Option<String> {
    std::env::var(TUNING_ENV).ok().filter(|p| !p.trim().is_empty())
}

/// `LOWCON_DEBUG=1`: log rendezvous decisions (fallbacks, mappings) and failure handling
/// (see [`crate::log::trace`]) to stderr, where no `tracing` subscriber is installed.
pub fn debug() -> bool {
    std::env::var("LOWCON_DEBUG").is_ok_and(|v| v == "1")
}

/// `LOWCON_CHECK_CALLS=1`: before each all-gather and reduce-scatter, the ranks compare
/// what they are about to do (the collective, the operator, the input's and the output's
/// sizes and types, every option) through the store, and a call the ranks disagree on
/// fails on every rank with an error listing each rank's call, instead of a hang, a
/// timeout or a wrong result (NOTE [checked calls], like PyTorch's
/// `TORCH_DISTRIBUTED_DEBUG=DETAIL`). For debugging: it costs a store round trip per call
/// and leaves each rank's call text in the store. Unset, empty or `0`: off; `1`: on.
pub fn check_calls() -> bool {
    std::env::var("LOWCON_CHECK_CALLS").is_ok_and(|v| v.trim() == "1")
}

// The execution settings a plan carries (the TMA ring, LL launch overlap, the
// copy-engine hint, wire replays, memop batches) are read by the planner:
// `crate::plan::settings` (NOTE [plan settings]).

/// The settings above that have a fixed form, checked when a group is made (every
/// creation meets its peers through `rendezvous`): a malformed value is an error naming
/// the variable and the form it takes, not a default taken in silence (`LOWCON_TIMEOUT_MS=abc`
/// used to wait the default 60 s with a warning; `LOWCON_MEM_HANDLES=foo` to run as `auto`).
pub fn check() -> crate::error::Result<()> {
    check_with(|name| std::env::var(name).ok())
}

/// [`check`] over `get` (a variable's value, `None`: unset).
fn check_with(get: impl Fn(&str) -> Option<String>) -> crate::error::Result<()> {
    let bad = |name: &str, v: &str, want: &str| {
        Err(crate::error::Error::InvalidArgument(format!("{name}={v:?}: expected {want}")))
    };
    for name in ["LOWCON_TIMEOUT_MS", "LOWCON_SETUP_TIMEOUT_MS"] {
        if let Some(v) = get(name)
            && v.trim().parse::<u64>().is_err()
        {
            return bad(name, &v, "a whole number of milliseconds");
        }
    }
    if let Some(v) = get("LOWCON_DEBUG")
        && !matches!(v.as_str(), "" | "0" | "1")
    {
        return bad("LOWCON_DEBUG", &v, "1 (log) or 0");
    }
    if let Some(v) = get("LOWCON_CHECK_CALLS")
        && !matches!(v.trim(), "" | "0" | "1")
    {
        return bad("LOWCON_CHECK_CALLS", &v, "1 (the ranks compare each call) or 0");
    }
    // The names `memory::HandleKind` parses (config sits below memory: no import).
    if let Some(v) = get("LOWCON_MEM_HANDLES")
        && !matches!(v.as_str(), "auto" | "vmm" | "ipc")
    {
        return bad("LOWCON_MEM_HANDLES", &v, "auto, vmm or ipc");
    }
    if let Some(v) = get(DEVICE_ENV) {
        device_index(DEVICE_ENV, &v)?;
    }
    Ok(())
}

fn env_u64(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    match v.trim().parse() {
        Ok(n) => Some(n),
        Err(_) => {
            // Once per variable (they are read often). Not `crate::log::warn`: the log
            // reads its switch from here (no module cycle).
            static WARNED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
            let mut w = WARNED.lock().unwrap_or_else(|p| p.into_inner());
            if !w.iter().any(|n| n == name) {
                w.push(name.to_string());
                tracing::warn!(target: "lowcon", "ignoring {name}={v:?}: not a non-negative integer");
                if !tracing::dispatcher::has_been_set() {
                    eprintln!("lowcon: ignoring {name}={v:?}: not a non-negative integer");
                }
            }
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malformed_settings_are_refused_naming_the_variable() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |n: &str| pairs.iter().find(|(k, _)| *k == n).map(|(_, v)| v.to_string())
        };
        assert!(check_with(env(&[])).is_ok());
        let ok: &'static [(&str, &str)] = &[
            ("LOWCON_TIMEOUT_MS", " 5000"),
            ("LOWCON_SETUP_TIMEOUT_MS", "0"),
            ("LOWCON_DEBUG", "1"),
            ("LOWCON_MEM_HANDLES", "ipc"),
            ("LOWCON_DEVICE", "3"),
            ("LOWCON_CHECK_CALLS", "1"),
        ];
        assert!(check_with(env(ok)).is_ok());
        for (pairs, want) in [
            (&[("LOWCON_TIMEOUT_MS", "abc")][..], "LOWCON_TIMEOUT_MS=\"abc\": expected a whole number of milliseconds"),
            (&[("LOWCON_SETUP_TIMEOUT_MS", "10s")][..], "LOWCON_SETUP_TIMEOUT_MS=\"10s\""),
            (&[("LOWCON_DEBUG", "yes")][..], "LOWCON_DEBUG=\"yes\": expected 1 (log) or 0"),
            (&[("LOWCON_MEM_HANDLES", "foo")][..], "LOWCON_MEM_HANDLES=\"foo\": expected auto, vmm or ipc"),
            (&[("LOWCON_DEVICE", "x")][..], "LOWCON_DEVICE=\"x\""),
            (&[("LOWCON_CHECK_CALLS", "yes")][..], "LOWCON_CHECK_CALLS=\"yes\": expected 1"),
        ] {
            let e = check_with(env(pairs)).unwrap_err().to_string();
            assert!(e.contains(want), "{e}");
        }
    }

    #[test]
    fn share_gpu_values() {
        assert!(!parse_share_gpu(None).unwrap());
        assert!(!parse_share_gpu(Some("")).unwrap());
        assert!(!parse_share_gpu(Some("0")).unwrap());
        assert!(parse_share_gpu(Some("1")).unwrap());
        assert!(parse_share_gpu(Some(" 1 ")).unwrap());
        let e = parse_share_gpu(Some("yes")).unwrap_err().to_string();
        assert!(e.contains("LOWCON_SHARE_GPU=\"yes\"") && e.contains("expected 1"), "{e}");
    }

    #[test]
    fn device_choice() {
        // LOWCON_DEVICE wins, shared or not.
        assert_eq!(pick_device(Some("3"), Some("1"), 5, false, None).unwrap(), 3);
        assert_eq!(pick_device(Some("0"), Some("7"), 7, true, Some(1)).unwrap(), 0);
        // Then LOCAL_RANK, then the rank.
        assert_eq!(pick_device(None, Some("2"), 5, false, None).unwrap(), 2);
        assert_eq!(pick_device(None, None, 5, false, None).unwrap(), 5);
        // Shared: round-robin over the visible devices.
        let placed: Vec<usize> =
            (0..8).map(|r| pick_device(None, Some(&r.to_string()), r, true, Some(3)).unwrap()).collect();
        assert_eq!(placed, [0, 1, 2, 0, 1, 2, 0, 1]);
        assert_eq!(pick_device(None, None, 6, true, Some(4)).unwrap(), 2);
        // Errors name the variable and the value.
        let e = pick_device(Some("gpu0"), None, 0, false, None).unwrap_err().to_string();
        assert!(e.contains("LOWCON_DEVICE=\"gpu0\""), "{e}");
        let e = pick_device(None, Some("-1"), 0, false, None).unwrap_err().to_string();
        assert!(e.contains("LOCAL_RANK=\"-1\""), "{e}");
        let e = pick_device(None, Some("1"), 1, true, Some(0)).unwrap_err().to_string();
        assert!(e.contains("no CUDA device"), "{e}");
    }
}
