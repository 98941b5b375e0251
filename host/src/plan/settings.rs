//! The execution settings a plan carries beside its choices.
//!
//! NOTE [plan settings]: a few switches change how a call runs without changing what it
//! computes: the `tma-reduce` ring's geometry, the LL rounds' launch overlap, the copy
//! engines' hint, lowcon's own replays of the wire, the all-gather's copy batches and
//! the stream-memop batches. They used to be read from the environment where they
//! act, deep in the backend, so `g.plan()` did not describe the whole call. Now a
//! group's planner reads them once, when the group is made ([`Settings::from_env`]), and
//! puts them into every plan that they concern; the backend reads them from the plan
//! (or, for the signal pads' memop batches, from the group's settings, which the same
//! planner handed to it), never from the environment. The per-group switches
//! (`set_wire_replays`, `set_copy_batching`) change the planner's settings, so the
//! next plan shows them.

use crate::error::{Error, Result};

/// `LOWCON_TMA_TILE_BYTES`: bytes of each rank's tile in a `tma-reduce` stage (rounded
/// up to 128), and of `tma-push-reduce`'s tiles. Default: 32 KiB per stage split over
/// the ranks (`plan::tma::tma_ring`). For measuring the ring; results do not
/// depend on it.
pub const TMA_TILE_ENV: &str = "LOWCON_TMA_TILE_BYTES";
/// `LOWCON_TMA_STAGES`: stages of the `tma-reduce` ring (2 to 16, fewer where 227 KiB of
/// shared memory cannot hold them). Default: as many 32 KiB stages as fit in 224 KiB.
pub const TMA_STAGES_ENV: &str = "LOWCON_TMA_STAGES";
/// `LOWCON_LL_OVERLAP=0`: launch LL rounds as plain kernels, without programmatic
/// stream serialization (NOTE [LL launch overlap] in `cuda::kernels`).
pub const LL_OVERLAP_ENV: &str = "LOWCON_LL_OVERLAP";
/// `LOWCON_COPY_ENGINE_HINT=1`: issue lowcon's device-to-device copies through
/// `cuMemcpyBatchAsync` with `CU_MEMCPY_FLAG_PREFER_OVERLAP_WITH_COMPUTE`, which asks the
/// driver to use copy engines rather than SMs (a plain `cuMemcpyAsync` on one device may
/// run on SMs, and then waits behind a persistent GEMM). A hint the driver may ignore;
/// needs a CUDA 13 driver (older ones keep plain copies). Off by default until measured:
/// copy engines are slower than SMs for same-device copies when nothing else runs.
pub const COPY_HINT_ENV: &str = "LOWCON_COPY_ENGINE_HINT";
/// `LOWCON_WIRE_REPLAYS=0`: an eager split-wire reduce-scatter is enqueued call by call,
/// never launched as a graph (NOTE [wire replays] in `coll::gpu::replays`). Every rank
/// must set it alike (checked at group creation).
pub const WIRE_REPLAYS_ENV: &str = "LOWCON_WIRE_REPLAYS";
/// `LOWCON_MEMOP_BATCH=0`: enqueue a stream-memop barrier's operations one node each,
/// as before NOTE [memop batches], to measure what batching saves. Default: one batch.
pub const MEMOP_BATCH_ENV: &str = "LOWCON_MEMOP_BATCH";

/// Every variable [`Settings::read`] reads.
pub const VARIABLES: &[&str] =
    &[TMA_TILE_ENV, TMA_STAGES_ENV, LL_OVERLAP_ENV, COPY_HINT_ENV, WIRE_REPLAYS_ENV, MEMOP_BATCH_ENV];

/// The execution settings of a group's calls (NOTE [plan settings]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settings {
    /// `tma-reduce`'s and `tma-push-reduce`'s tile bytes, where set (`LOWCON_TMA_TILE_BYTES`).
    pub tma_tile_bytes: Option<u64>,
    /// `tma-reduce`'s stages, where set (`LOWCON_TMA_STAGES`).
    pub tma_stages: Option<u64>,
    /// LL rounds launched with programmatic stream serialization (`LOWCON_LL_OVERLAP`).
    pub ll_overlap: bool,
    /// Copies issued with the copy-engine hint (`LOWCON_COPY_ENGINE_HINT`).
    pub copy_hint: bool,
    /// Eager split-wire calls replayed as graphs (`LOWCON_WIRE_REPLAYS`,
    /// `set_wire_replays`).
    pub wire_replays: bool,
    /// An eager all-gather's copies issued as one batch (NOTE [batched copies];
    /// `set_copy_batching`).
    pub copy_batch: bool,
    /// A stream-memop barrier's operations issued as one batch (`LOWCON_MEMOP_BATCH`).
    pub memop_batch: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            tma_tile_bytes: None,
            tma_stages: None,
            ll_overlap: true,
            copy_hint: false,
            wire_replays: true,
            copy_batch: true,
            memop_batch: true,
        }
    }
}

impl Settings {
    /// The settings the environment names (unset variables keep their defaults).
    pub fn from_env() -> Result<Self> {
        Self::read(|k| std::env::var(k).ok())
    }

    /// The settings `get` names (a variable's value, or `None` where unset): an error
    /// naming the variable and its value where one is not what it takes.
    pub fn read(get: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let d = Self::default();
        let count = |name: &str| -> Result<Option<u64>> {
            match get(name).as_deref().map(str::trim) {
                None | Some("") => Ok(None),
                Some(v) => v
                    .parse()
                    .map(Some)
                    .map_err(|_| Error::InvalidArgument(format!("{name}={v:?}: expected a non-negative integer"))),
            }
        };
        // A switch: "0" or "1" (unset or empty: the default).
        let switch = |name: &str, default: bool| -> Result<bool> {
            match get(name).as_deref().map(str::trim) {
                None | Some("") => Ok(default),
                Some("0") => Ok(false),
                Some("1") => Ok(true),
                Some(v) => Err(Error::InvalidArgument(format!("{name}={v:?}: expected 0 or 1"))),
            }
        };
        Ok(Self {
            tma_tile_bytes: count(TMA_TILE_ENV)?.filter(|&t| t > 0),
            tma_stages: count(TMA_STAGES_ENV)?,
            ll_overlap: switch(LL_OVERLAP_ENV, d.ll_overlap)?,
            copy_hint: switch(COPY_HINT_ENV, d.copy_hint)?,
            wire_replays: switch(WIRE_REPLAYS_ENV, d.wire_replays)?,
            copy_batch: d.copy_batch,
            memop_batch: switch(MEMOP_BATCH_ENV, d.memop_batch)?,
        })
    }

    /// What every rank of a group must share, in its announcement (NOTE [wire
    /// replays]: ranks that replay and ranks that do not wait on different slots).
    pub fn shared(&self) -> String {
        format!("{WIRE_REPLAYS_ENV}={}", u8::from(self.wire_replays))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(vars: &[(&str, &str)]) -> Result<Settings> {
        Settings::read(|k| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string()))
    }

    #[test]
    fn unset_and_empty_variables_keep_the_defaults() {
        assert_eq!(read(&[]).unwrap(), Settings::default());
        let empty: Vec<(&str, &str)> = VARIABLES.iter().map(|v| (*v, " ")).collect();
        assert_eq!(read(&empty).unwrap(), Settings::default());
    }

    #[test]
    fn each_variable_sets_its_field() {
        let s = read(&[(TMA_TILE_ENV, "4096"), (TMA_STAGES_ENV, " 3 ")]).unwrap();
        assert_eq!((s.tma_tile_bytes, s.tma_stages), (Some(4096), Some(3)));
        assert_eq!(read(&[(TMA_TILE_ENV, "0")]).unwrap().tma_tile_bytes, None, "0 is the default");
        assert!(!read(&[(LL_OVERLAP_ENV, "0")]).unwrap().ll_overlap);
        assert!(read(&[(COPY_HINT_ENV, "1")]).unwrap().copy_hint);
        assert!(!read(&[(WIRE_REPLAYS_ENV, "0")]).unwrap().wire_replays);
        assert!(!read(&[(MEMOP_BATCH_ENV, "0")]).unwrap().memop_batch);
        assert_eq!(read(&[(WIRE_REPLAYS_ENV, "0")]).unwrap().shared(), "LOWCON_WIRE_REPLAYS=0");
    }

    #[test]
    fn a_bad_value_is_an_error_naming_the_variable() {
        for (name, value, want) in [
            (TMA_TILE_ENV, "4k", "non-negative integer"),
            (TMA_STAGES_ENV, "-1", "non-negative integer"),
            (LL_OVERLAP_ENV, "off", "expected 0 or 1"),
            (COPY_HINT_ENV, "yes", "expected 0 or 1"),
            (WIRE_REPLAYS_ENV, "2", "expected 0 or 1"),
            (MEMOP_BATCH_ENV, "true", "expected 0 or 1"),
        ] {
            let e = read(&[(name, value)]).unwrap_err().to_string();
            assert!(e.contains(&format!("{name}={value:?}")) && e.contains(want), "{e}");
        }
    }
}
