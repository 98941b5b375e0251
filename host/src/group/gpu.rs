//! [`GpuGroup`]: a group of ranks, one GPU each, on one host. The public face of the
//! GPU backend: creation (rendezvous and the GPU checks), symmetric allocation,
//! barriers and signals, collectives, and failure reporting. Each stage lives in its
//! own module ([`crate::rendezvous`], [`crate::memory`], [`crate::sync`],
//! [`crate::coll`]); this type composes them.

mod per_piece;

use std::sync::Arc;
use std::time::Duration;

use lowcon_store::Store;

use crate::coll::gpu::GpuColl;
use crate::coll::{AllGatherOptions, CollStats, DeviceBuf, ReduceOp, ReduceScatterOptions};
use crate::cuda::{Device, Graph, Stream, raw};
use crate::error::{Error, Result};
use crate::memory::{HandleKind, SymmetricBuffer};
use crate::plan::{Machine, Planner};
use crate::rendezvous::{GroupCore, PeerInfo};
use crate::sync::SyncMethod;
use crate::sync::gpu::GpuSync;
use crate::sync::gpu::graph::Mode;
use crate::sync::gpu::watchdog::Watchdog;

/// Options for [`GpuGroup::new`].
#[derive(Clone, Debug)]
pub struct GpuGroupOptions {
    /// Group name; ranks creating groups with one name in the same order meet.
    pub name: String,
    /// Bound on every wait for a peer (device waits and host waits).
    pub timeout: Duration,
    /// Device index; default `LOWCON_DEVICE`, else `LOCAL_RANK`, else the rank.
    pub device: Option<usize>,
    /// How memory is shared; default from `LOWCON_MEM_HANDLES`.
    pub handles: HandleKind,
    /// Whether ranks may share a GPU (for correctness checks on fewer GPUs than ranks;
    /// see [`crate::config::share_gpu`]); default `LOWCON_SHARE_GPU`. Every rank must
    /// agree.
    pub share_gpu: Option<bool>,
}

impl Default for GpuGroupOptions {
    fn default() -> Self {
        Self {
            name: "default".into(),
            timeout: crate::config::timeout(),
            device: None,
            handles: crate::config::mem_handles().parse().unwrap_or_default(),
            share_gpu: None,
        }
    }
}

/// A group of ranks, one GPU each, on one host.
pub struct GpuGroup {
    // Dropped first: stops the watchdog before any of the group's memory is released.
    _watchdog: Watchdog,
    pub(super) coll: GpuColl,
    /// The store this rank hosts (torchrun mode), dropped last.
    _store_server: Option<Arc<lowcon_store::StoreServer>>,
    /// Some ranks share a GPU (`LOWCON_SHARE_GPU`).
    shares_gpu: bool,
    /// What the group was made with (a shrink makes the next with the same), and the
    /// shrink attempts so far (NOTE [shrink agreement]).
    opts: GpuGroupOptions,
    shrinks: std::sync::Mutex<u64>,
}

impl GpuGroup {
    /// Collective: creates the group, meeting through `store` (lowcon's [`lowcon_store::StoreClient`]
    /// or any [`Store`], e.g. a framework's) as rank `rank` of `world`. Checks before
    /// anything is mapped: all ranks on one host, no two ranks on one GPU (unless every
    /// rank allows it: [`GpuGroupOptions::share_gpu`]), every pair
    /// of GPUs can access each other.
    pub fn new(store: impl Store + 'static, rank: usize, world: usize, opts: GpuGroupOptions) -> Result<Self> {
        Self::create(Box::new(store), rank, world, opts, &|_| None)
    }

    /// [`Self::new`], failing at once when a rank `gone` names has died (see
    /// `GroupCore::new`).
    fn create(
        store: Box<dyn Store>,
        rank: usize,
        world: usize,
        opts: GpuGroupOptions,
        gone: crate::rendezvous::Watch<'_>,
    ) -> Result<Self> {
        let share = match opts.share_gpu {
            Some(s) => s,
            None => crate::config::share_gpu()?,
        };
        let index = match opts.device {
            Some(d) => d,
            None => crate::cuda::rank_device(rank)?,
        };
        let device = Device::open(index)?;
        let info = device.info()?;
        // NOTE [tuning tables]: every rank must plan from the same table; a rank that
        // cannot load one says so to the others instead of leaving them waiting.
        let machine = Machine { device: info.name.clone(), sms: info.sm_count, world, ranks_on_gpu: 1 };
        let planner = Planner::for_machine(machine).map(|p| p.at_rank(rank));
        let extra = vec![
            ("backend".to_string(), "gpu".to_string()),
            ("pci".to_string(), info.pci_bus_id.clone()),
            ("device_index".to_string(), index.to_string()),
            ("share_gpu".to_string(), u8::from(share).to_string()),
            ("tuning".to_string(), crate::plan::announce(&planner)),
        ];
        let core = GroupCore::new(store, rank, world, &opts.name, extra, opts.timeout, gone)?;
        let announced: Vec<&str> = core.infos.iter().map(|i| i.get("tuning")).collect();
        crate::plan::agree(&announced)?;
        // Once per job, not once per rank: every rank planned from the same rules (above).
        if let Some(n) = planner.as_ref().ok().and_then(Planner::notice) {
            if rank == 0 {
                crate::log::warn(&n);
            } else {
                crate::log::trace(rank, &n);
            }
        }
        // Every rank evaluates the same checks on the same facts, so all fail together.
        let shared = check_placement(&core.infos)?;
        if !shared.is_empty() && rank == 0 {
            let queues = if std::env::var_os(crate::config::MAX_CONNECTIONS_ENV).is_none() {
                "; under MPS give every rank CUDA_DEVICE_MAX_CONNECTIONS=8 (lowcon launch --gpus does), or calls on \
                 several streams can wait for each other across ranks"
            } else {
                ""
            };
            crate::log::warn(&format!(
                "ranks share GPUs ({}; {}=1): for checking correctness only: nothing crosses NVLink and \
                 timings mean nothing{queues}",
                shared.join("; "),
                crate::config::SHARE_GPU_ENV
            ));
        }
        // Peer access is checked locally; the verdicts are shared so every rank fails
        // with the same message instead of some waiting for the others.
        let verdict = peer_access_verdict(&core, &device);
        let verdicts = core
            .store()
            .all_gather_watching(
                &format!("group/{}/peer-access", core.group_id),
                rank,
                world,
                verdict.as_bytes(),
                core.setup_timeout,
                &crate::rendezvous::hung_up(&core.mesh),
            )
            .map_err(|e| e.during(format!("creating group {:?}: the peer-access verdicts", opts.name)))?;
        if let Some(bad) = verdicts.iter().find(|v| !v.is_empty()) {
            return Err(Error::Rendezvous(String::from_utf8_lossy(bad).into_owned()));
        }
        let shares_gpu = !shared.is_empty();
        let mine = core.infos[rank].get("pci");
        let ranks_on_gpu = core.infos.iter().filter(|i| i.get("pci") == mine).count();
        // NOTE [LL launch overlap]: the planner keeps LL rounds apart where ranks share the
        // GPU (NOTE [shared CTAs]).
        let planner = Arc::new(planner?.sharing(ranks_on_gpu));
        let name = opts.name.clone();
        let sync = Arc::new(
            GpuSync::new(core, device, (opts.handles, planner.settings().memop_batch))
                .map_err(|e| e.during(format!("creating group {name:?}: the signal pads")))?,
        );
        Ok(Self {
            _watchdog: Watchdog::spawn(sync.clone())?,
            coll: GpuColl::new(sync, planner)?,
            _store_server: None,
            shares_gpu,
            opts: GpuGroupOptions { device: Some(index), share_gpu: Some(share), ..opts },
            shrinks: Default::default(),
        })
    }

    /// Collective among the survivors of a failed group (every live rank calls it): the
    /// ranks still alive agree through the store, within the group's timeout, and make a
    /// new group of themselves, renumbered in order of their old ranks (NOTE [shrink
    /// agreement]). A rank that arrives after the list was made is left out and gets an
    /// error saying so (and on every later call). A rank that dies during the shrink
    /// fails the attempt on every survivor at once, naming it: the coordinator
    /// ([`Error::Rendezvous`]) or a member while the new group is made (its waits watch
    /// the old group's sockets: [`Error::PeerGone`]); call `shrink` again.
    ///
    /// This group is failed (not aborted): calls of it still in flight are discarded
    /// (their waits are released, so they complete without their data), and it refuses
    /// further calls. Drop it to release its memory (its mappings of the dead peer's
    /// memory included), but do not abort it: the new group shares its store connection,
    /// which an abort breaks off. Nothing else is shared: the new group's pads, epochs,
    /// workspaces and pool start fresh, and symmetric buffers of this group must be
    /// allocated again from the new one. A new group counts once every member has made
    /// it (a watched store barrier), else this attempt fails on every member. In torchrun mode
    /// (no `lowcon launch`), rank 0 hosts the store: if rank 0 died, there is no store to
    /// agree through.
    pub fn shrink(&self) -> Result<GpuGroup> {
        let core = &self.sync().core;
        let agreed = core.begin_shrink(&self.shrinks)?;
        let opts = GpuGroupOptions { name: agreed.name.clone(), ..self.opts.clone() };
        let gone = |q: usize| agreed.gone(core, q);
        let made = (|| {
            let step = |what: &str| format!("shrink attempt {}{what}", agreed.attempt);
            let mut g = GpuGroup::create(core.share_store(), agreed.new_rank, agreed.members.len(), opts, &gone)
                .map_err(|e| e.during(step("")))?;
            g._store_server = self._store_server.clone();
            // Creation can end differently on different members (one that dies midway
            // leaves some with a group and some with an error): the group counts only
            // once every member has it, else every member fails this attempt and may
            // shrink again.
            g.sync()
                .core
                .barrier_watching("shrink-created")
                .map_err(|e| e.during(step(": the new group's barrier")))?;
            Ok(g)
        })();
        if made.is_err() {
            agreed.give_up(core);
        }
        made
    }

    /// Collective: creates the group from the `lowcon launch` or torchrun environment.
    /// Without `lowcon launch`, rank 0 hosts the store (at `MASTER_PORT + 1`, or
    /// `LOWCON_STORE_PORT`) for as long as its group lives.
    pub fn from_env(opts: GpuGroupOptions) -> Result<Self> {
        let e = crate::rendezvous::connect_from_env(opts.timeout)?;
        let mut g = Self::new(e.store, e.rank, e.world, opts)?;
        g._store_server = e.server;
        Ok(g)
    }

    /// Fails the group now (like `ncclCommAbort`): waits of calls in flight are released
    /// so the streams drain, and every later call errors. Peers notice through their own
    /// timeouts, or at once when this process exits.
    pub fn abort(&self) {
        self.sync().core.abort();
    }

    fn sync(&self) -> &GpuSync {
        &self.coll.sync
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.sync().core.rank
    }

    /// Where this rank's host time in collective calls went (NOTE [host time]):
    /// (calls, their ns, the ns of host rendezvous, of those the ns of mailbox waits),
    /// read without a device call.
    pub fn host_clock(&self) -> (u64, u64, u64, u64) {
        self.sync().core.clock.read()
    }

    /// Number of ranks.
    pub fn world_size(&self) -> usize {
        self.sync().core.world
    }

    /// Whether two or more ranks of the group share a GPU (allowed by
    /// [`GpuGroupOptions::share_gpu`]): the group is then good for checking correctness,
    /// and its timings mean nothing.
    pub fn shares_gpu(&self) -> bool {
        self.shares_gpu
    }

    /// This rank's GPU.
    pub fn device(&self) -> &Device {
        &self.sync().device
    }

    /// The wait bound.
    pub fn timeout(&self) -> Duration {
        self.sync().core.timeout
    }

    /// Collective: a symmetric buffer of `bytes` on every rank (all must ask the same),
    /// zero-filled.
    pub fn alloc(&self, bytes: usize) -> Result<SymmetricBuffer> {
        self.sync().alloc(bytes, "a buffer the caller allocates")
    }

    /// Collective: every rank contributes `data` (a small blob) through the store and
    /// gets all ranks' contributions in rank order.
    pub fn all_gather_bytes(&self, name: &str, data: &[u8]) -> Result<Vec<Vec<u8>>> {
        let core = &self.sync().core;
        core.all_gather(name, data, core.setup_timeout)
    }

    /// Publishes this rank's small `data` under `name` through the store, without
    /// waiting for the other ranks (see [`Self::published`]).
    pub fn publish(&self, name: &str, data: &[u8]) -> Result<()> {
        self.sync().core.publish(name, data)
    }

    /// Every rank's data published under `name`, in rank order; waits (up to the set-up
    /// timeout) only for ranks that have not published it yet.
    pub fn published(&self, name: &str) -> Result<Vec<Vec<u8>>> {
        let core = &self.sync().core;
        core.published(name, core.setup_timeout)
    }

    /// Collective: a barrier through the store (host-side; for setup and teardown).
    pub fn store_barrier(&self, name: &str) -> Result<()> {
        let core = &self.sync().core;
        core.barrier(name, core.setup_timeout)
    }

    /// Enqueues a barrier of all ranks on `channel`. Work enqueued on `stream` before it
    /// (kernels, copies into peers' buffers) is visible to every rank's work after it.
    /// Asynchronous: a peer that never arrives shows in [`GpuGroup::synchronize`].
    ///
    /// It can be captured into a CUDA graph (as two barriers, so every replay
    /// synchronises afresh; NOTE [graph flags]).
    pub fn barrier(&self, stream: &Stream, channel: u32, method: SyncMethod) -> Result<()> {
        let mode = self.sync().begin(stream)?;
        self.sync().barrier(stream, channel, method)?;
        match mode {
            Mode::Eager => self.sync().track(stream).map(drop),
            Mode::Captured => Ok(()),
        }
    }

    /// Enqueues one replay of `graph` (captured with lowcon's collectives or barriers in
    /// it) on the stream it was captured from, and registers the replay with the
    /// group's watchdog, as [`GpuGroup::track_replay`] does. Never waits.
    pub fn replay(&self, graph: &Graph) -> Result<()> {
        self.sync().check_stream_for(graph.stream(), "a replay")?;
        graph.launch()?;
        self.sync().track_replay(graph.stream())
    }

    /// Registers the work enqueued on `stream` so far with the group's watchdog: call it
    /// after launching a graph that holds lowcon calls by other means (`cudaGraphLaunch`,
    /// `torch.cuda.CUDAGraph.replay`). Eager calls register themselves, but a captured
    /// call runs only when replayed, and the watchdog names a dead or late peer only
    /// while registered work waits for it (kernel waits still time out on the device
    /// without it; stream-memop waits would wait for ever). Never waits.
    pub fn track_replay(&self, stream: &Stream) -> Result<()> {
        self.sync().track_replay(stream)
    }

    /// Enqueues a signal to `peer` on `channel`, after everything enqueued before.
    pub fn put_signal(&self, stream: &Stream, peer: usize, channel: u32, method: SyncMethod) -> Result<()> {
        self.sync().put_signal(stream, peer, channel, method)?;
        self.sync().track(stream).map(drop)
    }

    /// Enqueues a wait for `peer`'s next signal on `channel`; work after it sees what
    /// the peer did before signalling.
    pub fn wait_signal(&self, stream: &Stream, peer: usize, channel: u32, method: SyncMethod) -> Result<()> {
        self.sync().wait_signal(stream, peer, channel, method)?;
        self.sync().track(stream).map(drop)
    }

    /// The group's failure, if it has one, without waiting (like NCCL's
    /// `ncclCommGetAsyncError`): a dead or late peer found by the watchdog, or a
    /// kernel's device-side timeout, as an error naming the rank. `Ok` while healthy.
    pub fn check(&self) -> Result<()> {
        self.sync().check()
    }

    /// Waits until the work enqueued on `stream` so far has finished, or the group has
    /// failed; returns the failure, naming the rank. Failures are found by the group's
    /// watchdog: a peer that died (its socket hung up) while calls wait for it, or a call
    /// that waited longer than the group's timeout (the error names the peer whose
    /// signals are missing). The stuck waits are then released so the streams drain,
    /// and the group refuses further work.
    pub fn synchronize(&self, stream: &Stream) -> Result<()> {
        self.sync().synchronize(stream)
    }

    /// All-gather: on every rank, `output[p * n .. (p + 1) * n]` receives rank `p`'s
    /// `input` (`n` elements). Enqueued on `stream`; every rank must make the same call
    /// (same sizes, dtype, algorithm, channel and kinds of buffers).
    pub fn all_gather(
        &self,
        input: DeviceBuf<'_>,
        output: DeviceBuf<'_>,
        stream: &Stream,
        opts: &AllGatherOptions,
    ) -> Result<()> {
        self.coll.all_gather(input, output, stream, opts, None)
    }

    /// Reduce-scatter: on every rank, `output` (`n` elements) receives `op` over all
    /// ranks of their input chunk `rank` (`input[rank * n .. (rank + 1) * n]`). f32, f16
    /// and bf16, accumulated in f32, added in rank order. Enqueued on `stream`; every
    /// rank must make the same call.
    pub fn reduce_scatter(
        &self,
        input: DeviceBuf<'_>,
        output: DeviceBuf<'_>,
        op: ReduceOp,
        stream: &Stream,
        opts: &ReduceScatterOptions,
    ) -> Result<()> {
        self.coll.reduce_scatter(input, output, op, stream, opts)
    }

    /// The bytes this rank's calls moved to and from peers since the group was made
    /// (NOTE [bf16 wire] in `coll::wire`): counted on the host as calls are enqueued,
    /// and, for the bf16 wire's fallbacks, on the GPU as its reductions run (read here
    /// on a side stream, bounded: synchronise first for the calls just enqueued).
    pub fn stats(&self) -> Result<CollStats> {
        self.coll.stats()
    }

    /// The planner that decides this group's calls (NOTE [one planner]): ask it what a
    /// call would run (`planner().all_gather(..)`), or which table it uses.
    pub fn planner(&self) -> &crate::plan::Planner {
        &self.coll.planner
    }

    /// Bytes this rank's collectives hold in workspaces and LL buffers (symmetric memory
    /// beside any pool; grown on demand, kept for the group's life).
    pub fn workspace_bytes(&self) -> usize {
        self.coll.workspace_bytes()
    }

    /// [`GpuGroup::workspace_bytes`] per channel that holds any, as (channel, bytes): where
    /// lowcon's own memory is (the bf16 wire's planes are its channel's workspace).
    pub fn workspace_split(&self) -> Vec<(u32, usize)> {
        self.coll.workspace_split()
    }

    /// Peer allocations this rank has opened for `map_ordinary` calls, over all peers
    /// (each stays open until its address comes back with another allocation, until it
    /// is among the least recently used idle ones beyond [`crate::memory::mapped::MAX_OPEN_PER_PEER`] per
    /// peer, until [`GpuGroup::release_mappings`], or until the group ends; NOTE [mapped
    /// ordinary memory]).
    pub fn mapped_allocations(&self) -> usize {
        self.coll.mapped_allocations()
    }

    /// Closes the peer allocations that `map_ordinary` calls opened and that no call in
    /// flight uses; returns how many. Not collective, but useful on every rank: a peer's
    /// freed segment (say after `torch.cuda.empty_cache()`) goes back to its driver only
    /// once every rank that mapped it closed it. Later calls open what they need again.
    pub fn release_mappings(&self) -> Result<usize> {
        self.coll.release_mappings()
    }

    /// Whether an eager all-gather hands its peer copies to the driver as one batch
    /// (NOTE [batched copies] in `coll::gpu`; on by default) or one by one. Not
    /// collective, and results are the same either way: for measuring it.
    pub fn set_copy_batching(&self, on: bool) {
        // NOTE [plan settings]: the next plans carry it.
        self.coll.planner.change_settings(|s| s.copy_batch = on)
    }

    /// Whether an eager split-wire reduce-scatter (the bf16 wire) is launched as one
    /// graph from its shape's second call on (NOTE [wire replays] in `coll::gpu`; on by
    /// default, `LOWCON_WIRE_REPLAYS=0` turns it off at creation). **Every rank must make
    /// the same choice, between the same calls**: a replayed call meets its peers on
    /// other signal slots than an eager one, so ranks that differ wait for each other
    /// until the group's timeout names the peer. Results are the same either way.
    pub fn set_wire_replays(&self, on: bool) {
        // NOTE [plan settings]: the next plans carry it.
        self.coll.planner.change_settings(|s| s.wire_replays = on)
    }

    /// Whether `map_ordinary` all-gathers predict the peers' addresses from the same
    /// call before (NOTE [addresses predicted]; on by default). Off, every such call
    /// waits for every peer's address (a host rendezvous per call), as before 0.4. Not
    /// collective: a rank's choice changes only how it learns where its peers' buffers
    /// are, never what it computes.
    pub fn set_address_prediction(&self, on: bool) {
        self.coll.set_address_prediction(on)
    }

    /// The traffic floor of an all-gather (a measurement, not a collective): this rank's
    /// shard is copied into every peer's slot of the symmetric `output` with no barrier,
    /// so the results are garbage (`coll::gpu::floor`). Every rank makes the same call.
    pub fn all_gather_traffic(&self, input: DeviceBuf<'_>, output: DeviceBuf<'_>, stream: &Stream) -> Result<()> {
        self.coll.all_gather_traffic(input, output, stream)
    }

    /// The traffic floor of a reduce-scatter: every peer's chunk of the symmetric
    /// `input` is copied into `output` with no barrier and no reduction (garbage).
    pub fn reduce_scatter_traffic(&self, input: DeviceBuf<'_>, output: DeviceBuf<'_>, stream: &Stream) -> Result<()> {
        self.coll.reduce_scatter_traffic(input, output, stream)
    }

    /// Collective: grows channel `channel`'s workspace to at least `bytes` now and sets up
    /// its LL buffer (`lowcon_abi::ll::BUFFER_BYTES`), so that no later call has to
    /// (both are collective, and must not race between threads using different
    /// channels: reserve before starting them).
    pub fn reserve_workspace(&self, channel: u32, bytes: usize) -> Result<()> {
        self.coll.reserve_workspace(channel, bytes)
    }
}

/// The placement rules, on every rank's facts: every rank uses the GPU backend, every
/// rank has the same `share_gpu` setting, and no two ranks use one GPU unless it is on.
/// Returns, when sharing, a line per shared GPU naming its ranks.
pub(crate) fn check_placement(infos: &[PeerInfo]) -> Result<Vec<String>> {
    let var = crate::config::SHARE_GPU_ENV;
    for (a, info) in infos.iter().enumerate() {
        if info.get("backend") != "gpu" {
            return Err(Error::Rendezvous(format!("rank {a} is not using the GPU backend")));
        }
        if info.get("share_gpu") != infos[0].get("share_gpu") {
            let on = |r: usize| if infos[r].get("share_gpu") == "1" { "allows" } else { "does not allow" };
            return Err(Error::Rendezvous(format!(
                "rank 0 {} ranks sharing a GPU but rank {a} {} ({var}, or the share_gpu option): every rank \
                 must agree",
                on(0),
                on(a)
            )));
        }
    }
    let share = infos.first().is_some_and(|i| i.get("share_gpu") == "1");
    let mut shared = Vec::new();
    let mut seen = vec![false; infos.len()];
    for a in 0..infos.len() {
        if seen[a] {
            continue;
        }
        let same: Vec<usize> = (a..infos.len()).filter(|&b| infos[b].get("pci") == infos[a].get("pci")).collect();
        if same.len() < 2 {
            continue;
        }
        if !share {
            let b = same[1];
            return Err(Error::Rendezvous(format!(
                "ranks {a} and {b} both use the GPU at PCI {} (device index {} and {}): give each rank its own \
                 GPU (lowcon launch sets LOCAL_RANK; or set LOWCON_DEVICE), or set {var}=1 on every rank to let \
                 ranks share a GPU for correctness checks (best under MPS; timings then mean nothing)",
                infos[a].get("pci"),
                infos[a].get("device_index"),
                infos[b].get("device_index")
            )));
        }
        for &b in &same {
            seen[b] = true;
        }
        let ranks: Vec<String> = same.iter().map(|r| r.to_string()).collect();
        shared.push(format!("ranks {} on PCI {}", ranks.join(","), infos[a].get("pci")));
    }
    Ok(shared)
}

/// Whether this rank's GPU can access every peer's: an empty string, or the reason not.
/// A peer on this rank's own GPU (shared mode) needs no peer access.
fn peer_access_verdict(core: &GroupCore, device: &Device) -> String {
    for p in (0..core.world).filter(|&p| p != core.rank) {
        let pci = core.infos[p].get("pci");
        if pci == core.infos[core.rank].get("pci") {
            continue;
        }
        // SAFETY: the driver is initialised (the device is open).
        let peer_dev = match unsafe { raw::device::by_pci_bus_id(pci) } {
            Ok(d) => d,
            Err(e) => {
                return format!(
                    "rank {}: the GPU of rank {p} (PCI {pci}) is not visible to this process ({e}); every rank \
                     must see every GPU (check CUDA_VISIBLE_DEVICES)",
                    core.rank
                );
            }
        };
        let me = device.cuda_context().cu_device();
        // SAFETY: both are valid device handles.
        match unsafe { raw::device::can_access_peer(me, peer_dev) } {
            Ok(true) => {}
            Ok(false) => {
                return format!(
                    "GPUs of rank {} (PCI {}) and rank {p} (PCI {pci}) cannot access each other's memory \
                     (cuDeviceCanAccessPeer is false): lowcon needs peer access (NVLink or PCIe P2P) between all GPUs",
                    core.rank,
                    core.infos[core.rank].get("pci")
                );
            }
            Err(e) => return format!("rank {}: {e}", core.rank),
        }
    }
    String::new()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn infos(rows: &[(&str, &str, &str)]) -> Vec<PeerInfo> {
        rows.iter()
            .enumerate()
            .map(|(i, (backend, pci, share))| PeerInfo {
                fields: vec![
                    ("backend".into(), backend.to_string()),
                    ("pci".into(), pci.to_string()),
                    ("device_index".into(), i.to_string()),
                    ("share_gpu".into(), share.to_string()),
                ],
            })
            .collect()
    }

    #[test]
    fn one_gpu_each_passes() {
        let i = infos(&[("gpu", "A", "0"), ("gpu", "B", "0"), ("gpu", "C", "0")]);
        assert!(check_placement(&i).unwrap().is_empty());
        // Allowed but not used: still no shared GPU.
        let i = infos(&[("gpu", "A", "1"), ("gpu", "B", "1")]);
        assert!(check_placement(&i).unwrap().is_empty());
    }

    #[test]
    fn sharing_without_the_opt_in_is_refused_naming_it() {
        let i = infos(&[("gpu", "A", "0"), ("gpu", "B", "0"), ("gpu", "A", "0")]);
        let e = check_placement(&i).unwrap_err().to_string();
        assert!(e.contains("ranks 0 and 2 both use the GPU at PCI A"), "{e}");
        assert!(e.contains("LOWCON_SHARE_GPU=1"), "{e}");
    }

    #[test]
    fn sharing_with_the_opt_in_names_the_groups() {
        let i = infos(&[("gpu", "A", "1"), ("gpu", "B", "1"), ("gpu", "A", "1"), ("gpu", "B", "1"), ("gpu", "C", "1")]);
        assert_eq!(check_placement(&i).unwrap(), ["ranks 0,2 on PCI A", "ranks 1,3 on PCI B"]);
    }

    #[test]
    fn ranks_must_agree_on_the_opt_in() {
        let i = infos(&[("gpu", "A", "1"), ("gpu", "A", "1"), ("gpu", "A", "0")]);
        let e = check_placement(&i).unwrap_err().to_string();
        assert!(e.contains("rank 0 allows") && e.contains("rank 2 does not allow"), "{e}");
    }

    #[test]
    fn other_backends_are_named() {
        let i = infos(&[("gpu", "A", "0"), ("host", "", "0")]);
        assert_eq!(check_placement(&i).unwrap_err().to_string(), "rank 1 is not using the GPU backend");
    }
}
