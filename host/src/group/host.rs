//! [`HostGroup`]: a group of ranks on the host backend, over CPU shared memory. The
//! GPU backend's API (allocation, barriers, signals, collectives) with synchronous
//! calls, so the protocols and data layouts run and are tested on machines without a
//! GPU. Composes [`crate::rendezvous`], [`crate::memory`], [`crate::sync`] and
//! [`crate::coll`], like [`crate::group::gpu::GpuGroup`].

use std::sync::Arc;
use std::time::Duration;

use lowcon_store::Store;

use crate::coll::host::HostColl;
use crate::coll::{AllGatherOptions, CollStats, DType, HostInput, ReduceOp, ReduceScatterOptions};
use crate::error::Result;
use crate::memory::HostBuffer;
use crate::plan::{Machine, Planner};
use crate::rendezvous::GroupCore;
use crate::sync::host::HostSync;

/// Options for [`HostGroup::new`].
#[derive(Clone, Debug)]
pub struct HostGroupOptions {
    /// Group name; ranks creating groups with one name in the same order meet.
    pub name: String,
    /// Bound on every wait for a peer.
    pub timeout: Duration,
}

impl Default for HostGroupOptions {
    fn default() -> Self {
        Self { name: "default".into(), timeout: crate::config::timeout() }
    }
}

/// A group of ranks on the host backend.
pub struct HostGroup {
    pub(super) coll: HostColl,
    /// The store this rank hosts (torchrun mode), dropped last.
    _store_server: Option<Arc<lowcon_store::StoreServer>>,
    /// What the group was made with, and the shrink attempts so far.
    opts: HostGroupOptions,
    shrinks: std::sync::Mutex<u64>,
}

impl HostGroup {
    /// Collective: creates the group, meeting through `store` (lowcon's store client or any
    /// [`Store`]) as rank `rank` of `world`.
    pub fn new(store: impl Store + 'static, rank: usize, world: usize, opts: HostGroupOptions) -> Result<Self> {
        Self::create(Box::new(store), rank, world, opts, &|_| None)
    }

    /// [`Self::new`], failing at once when a rank `gone` names has died.
    fn create(
        store: Box<dyn Store>,
        rank: usize,
        world: usize,
        opts: HostGroupOptions,
        gone: crate::rendezvous::Watch<'_>,
    ) -> Result<Self> {
        // NOTE [tuning tables]: every rank plans from the same table.
        let planner = Planner::for_machine(Machine::host(world)).map(|p| p.at_rank(rank));
        let extra = vec![("backend".into(), "host".into()), ("tuning".into(), crate::plan::announce(&planner))];
        let core = GroupCore::new(store, rank, world, &opts.name, extra, opts.timeout, gone)?;
        let announced: Vec<&str> = core.infos.iter().map(|i| i.get("tuning")).collect();
        crate::plan::agree(&announced)?;
        let planner = Arc::new(planner?);
        let sync =
            HostSync::new(core).map_err(|e| e.during(format!("creating group {:?}: the signal pads", opts.name)))?;
        Ok(Self { coll: HostColl::new(sync, planner), _store_server: None, opts, shrinks: Default::default() })
    }

    /// Collective among the survivors: as [`crate::group::gpu::GpuGroup::shrink`], on the host backend.
    pub fn shrink(&self) -> Result<HostGroup> {
        let core = self.core();
        let agreed = core.begin_shrink(&self.shrinks)?;
        let opts = HostGroupOptions { name: agreed.name.clone(), ..self.opts.clone() };
        let gone = |q: usize| agreed.gone(core, q);
        let made = (|| {
            let step = |what: &str| format!("shrink attempt {}{what}", agreed.attempt);
            let mut g = HostGroup::create(core.share_store(), agreed.new_rank, agreed.members.len(), opts, &gone)
                .map_err(|e| e.during(step("")))?;
            g._store_server = self._store_server.clone();
            // Creation can end differently on different members (one that dies midway
            // leaves some with a group and some with an error): the group counts only
            // once every member has it, else every member fails this attempt and may
            // shrink again.
            g.core().barrier_watching("shrink-created").map_err(|e| e.during(step(": the new group's barrier")))?;
            Ok(g)
        })();
        if made.is_err() {
            agreed.give_up(core);
        }
        made
    }

    /// Collective: creates the group from the `lowcon launch` or torchrun environment.
    /// Without `lowcon launch`, rank 0 hosts the store for as long as its group lives.
    pub fn from_env(opts: HostGroupOptions) -> Result<Self> {
        let e = crate::rendezvous::connect_from_env(opts.timeout)?;
        let mut g = Self::new(e.store, e.rank, e.world, opts)?;
        g._store_server = e.server;
        Ok(g)
    }

    /// The group's failure, if it has one (a dead or late peer, or `abort`), as first
    /// reported; `Ok` while healthy. Never waits.
    pub fn check(&self) -> Result<()> {
        self.core().failure()
    }

    /// Fails the group now: every later call errors.
    pub fn abort(&self) {
        self.core().abort();
    }

    fn core(&self) -> &GroupCore {
        &self.coll.sync.core
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.core().rank
    }

    /// Where this rank's host time in collective calls went (NOTE [host time]):
    /// (calls, their ns, the ns of host rendezvous, of those the ns of mailbox waits).
    pub fn host_clock(&self) -> (u64, u64, u64, u64) {
        self.core().clock.read()
    }

    /// Number of ranks.
    pub fn world_size(&self) -> usize {
        self.core().world
    }

    /// The wait bound.
    pub fn timeout(&self) -> Duration {
        self.core().timeout
    }

    /// Collective: a symmetric buffer of `bytes` on every rank (all must ask the same).
    pub fn alloc(&self, bytes: usize) -> Result<HostBuffer> {
        self.core().check_usable()?;
        crate::memory::host::alloc(self.core(), bytes, "a buffer the caller allocates")
    }

    /// Collective: every rank contributes `data` (a small blob) through the store and
    /// gets all ranks' contributions in rank order.
    pub fn all_gather_bytes(&self, name: &str, data: &[u8]) -> Result<Vec<Vec<u8>>> {
        self.core().all_gather(name, data, self.core().setup_timeout)
    }

    /// Publishes this rank's small `data` under `name` through the store, without
    /// waiting for the other ranks (see [`Self::published`]).
    pub fn publish(&self, name: &str, data: &[u8]) -> Result<()> {
        self.core().publish(name, data)
    }

    /// Every rank's data published under `name`, in rank order; waits (up to the set-up
    /// timeout) only for ranks that have not published it yet.
    pub fn published(&self, name: &str) -> Result<Vec<Vec<u8>>> {
        let core = &self.core();
        core.published(name, core.setup_timeout)
    }

    /// Collective: a barrier through the store (host-side; for setup and teardown).
    pub fn store_barrier(&self, name: &str) -> Result<()> {
        self.core().barrier(name, self.core().setup_timeout)
    }

    /// Collective: returns once every rank reached the barrier on `channel`. Everything
    /// a rank wrote to any buffer before the barrier is visible to every rank after it.
    pub fn barrier(&self, channel: u32) -> Result<()> {
        self.coll.sync.barrier(channel)
    }

    /// Signals `peer` on `channel` (release: the peer's matching `wait_signal` sees
    /// everything this rank wrote before).
    pub fn put_signal(&self, peer: usize, channel: u32) -> Result<()> {
        self.coll.sync.put_signal(peer, channel)
    }

    /// Waits for `peer`'s next `put_signal` on `channel`.
    pub fn wait_signal(&self, peer: usize, channel: u32) -> Result<()> {
        self.coll.sync.wait_signal(peer, channel)
    }

    /// All-gather: `output[p * n .. (p + 1) * n]` receives rank `p`'s `input` (`n` bytes,
    /// a whole number of `dtype` elements) on every rank. Synchronous.
    pub fn all_gather(
        &self,
        input: HostInput<'_>,
        output: &mut [u8],
        dtype: DType,
        opts: &AllGatherOptions,
    ) -> Result<()> {
        self.coll.all_gather(input, output, (dtype, dtype), opts)
    }

    /// Reduce-scatter: `output` (`n` elements) receives `op` over all ranks of their
    /// input chunk `rank` (`input[rank * n .. (rank + 1) * n]`). f32, f16 and bf16,
    /// accumulated in f32 in rank order. Synchronous.
    pub fn reduce_scatter(
        &self,
        input: HostInput<'_>,
        output: &mut [u8],
        dtype: DType,
        op: ReduceOp,
        opts: &ReduceScatterOptions,
    ) -> Result<()> {
        self.coll.reduce_scatter(input, output, (dtype, dtype), op, opts)
    }

    /// As [`HostGroup::reduce_scatter`], with an input of `input_dtype` and an output of
    /// `output_dtype`: a bf16 input may reduce into an f32 output (accumulated in f32,
    /// rounded once). With `opts.wire = Some(DType::Bf16)`, f32 crosses as its top halves
    /// (NOTE [bf16 wire]; the result is the f32 call's, bit for bit).
    pub fn reduce_scatter_typed(
        &self,
        input: HostInput<'_>,
        output: &mut [u8],
        (input_dtype, output_dtype): (DType, DType),
        op: ReduceOp,
        opts: &ReduceScatterOptions,
    ) -> Result<()> {
        self.coll.reduce_scatter(input, output, (input_dtype, output_dtype), op, opts)
    }

    /// The bytes this rank's calls moved to and from peers since the group was made
    /// (NOTE [bf16 wire]).
    pub fn stats(&self) -> CollStats {
        self.coll.stats()
    }

    /// The planner that decides this group's calls (NOTE [one planner]): ask it what a
    /// call would run (`planner().all_gather(..)`), or which table it uses.
    pub fn planner(&self) -> &crate::plan::Planner {
        &self.coll.planner
    }
}
