//! Rendezvous: how the ranks of a group meet, and what every group has whatever the
//! backend: its place in the world, the store, the socket mesh for passing memory
//! handles (`fdpass`), and a failed state.
//!
//! Creation is collective: every rank of the world calls it, in the same order as any
//! other group creation. It checks, before anything is mapped, that all ranks run on
//! one host (same boot id), and gives the ranks a common group id, from which the
//! abstract socket names derive.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use lowcon_store::{Store, StoreClient};

use crate::error::{Error, Result};

mod fdpass;
pub(crate) mod shrink;

pub(crate) use fdpass::Mesh;

/// This rank's facts, exchanged at group creation (`key=value` lines).
#[derive(Clone, Debug, Default)]
pub(crate) struct PeerInfo {
    pub(crate) fields: Vec<(String, String)>,
}

impl PeerInfo {
    pub(crate) fn get(&self, key: &str) -> &str {
        self.fields.iter().find(|(k, _)| k == key).map_or("", |(_, v)| v.as_str())
    }
    fn encode(&self) -> Vec<u8> {
        self.fields.iter().map(|(k, v)| format!("{k}={v}\n")).collect::<String>().into_bytes()
    }
    fn decode(b: &[u8]) -> Self {
        let s = String::from_utf8_lossy(b);
        Self {
            fields: s.lines().filter_map(|l| l.split_once('=')).map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        }
    }
}

pub(crate) struct GroupCore {
    pub(crate) rank: usize,
    pub(crate) world: usize,
    pub(crate) group_id: String,
    pub(crate) timeout: Duration,
    /// Bound on set-up steps (creation, allocation); at least `timeout`.
    pub(crate) setup_timeout: Duration,
    pub(crate) mesh: Mesh,
    pub(crate) infos: Vec<PeerInfo>,
    store: Mutex<StoreSlot>,
    /// Where this rank's host time goes (NOTE [host time]): shared with the store slot,
    /// read without its lock.
    pub(crate) clock: Arc<HostClock>,
    /// Breaks off a store wait in progress on `abort` (the waiting thread holds `store`),
    /// where the store can (lowcon's can; a framework's wait ends at its timeout).
    store_interrupt: Option<lowcon_store::StoreInterrupter>,
    next_alloc: Mutex<u64>,
    /// Held by a symmetric allocation from its tag through its handle exchange (NOTE
    /// [allocations agreed]): a rank's tags then come in the order its exchanges do.
    pub(crate) alloc_serial: Mutex<()>,
    /// The first failure, as reported.
    failed: Mutex<Option<Error>>,
    /// Set with `failed`; shared with the group's buffers, whose release then waits
    /// only briefly for the device (streams may be stuck on a dead peer).
    pub(crate) broken: Arc<AtomicBool>,
    /// `LOWCON_CHECK_CALLS=1` on every rank (NOTE [checked calls]).
    check_calls: bool,
}

/// What `from_env` constructors start from: a store client, this rank, the world, and
/// the store server when this rank hosts it (torchrun mode, no `lowcon launch`): the
/// group keeps that server for as long as it lives.
pub(crate) struct FromEnv {
    pub(crate) store: StoreClient,
    pub(crate) rank: usize,
    pub(crate) world: usize,
    pub(crate) server: Option<Arc<lowcon_store::StoreServer>>,
}

/// Reads the launcher (or torchrun) environment and connects to its store, hosting it
/// on rank 0 when no launcher does.
pub(crate) fn connect_from_env(timeout: Duration) -> Result<FromEnv> {
    let rdzv = lowcon_store::Rendezvous::from_env(crate::config::setup_timeout().max(timeout))?;
    let (env, store, server) = rdzv.into_parts();
    Ok(FromEnv { store, rank: env.rank, world: env.world_size, server })
}

fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id").map(|s| s.trim().to_string()).unwrap_or_default()
}

fn hostname() -> String {
    nix::unistd::gethostname().map(|h| h.to_string_lossy().into_owned()).unwrap_or_default()
}

/// One store used by a group and the groups its shrinks make (`share_store`).
#[derive(Clone)]
struct Shared(Arc<Mutex<Box<dyn Store>>>);

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Box<dyn Store>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Store for Shared {
    fn set(&mut self, key: &str, value: &[u8]) -> std::result::Result<(), lowcon_store::StoreError> {
        self.lock().set(key, value)
    }
    fn get_timeout(&mut self, key: &str, timeout: Duration) -> std::result::Result<Vec<u8>, lowcon_store::StoreError> {
        self.lock().get_timeout(key, timeout)
    }
    fn add(&mut self, key: &str, delta: i64) -> std::result::Result<i64, lowcon_store::StoreError> {
        self.lock().add(key, delta)
    }
    fn multi_get(
        &mut self,
        keys: &[&str],
        timeout: Duration,
    ) -> std::result::Result<Vec<Vec<u8>>, lowcon_store::StoreError> {
        self.lock().multi_get(keys, timeout)
    }
    fn interrupter(&self) -> Option<lowcon_store::StoreInterrupter> {
        self.lock().interrupter()
    }
}

/// NOTE [host time]: where a rank's host time in collective calls goes, for `stats()`:
/// the calls (from entry to return: checks, plan, rendezvous, enqueues), and of that
/// time the host rendezvous (blocking waits for the other ranks through the store or the
/// address mailbox). What is left is the library's own work, mostly the launches and
/// copies it enqueues; a binding's time is what its caller measures around the call,
/// less the call's. Two clock reads per call and per wait. Of the rendezvous, the
/// address mailbox's posts that waited (a rank `DEPTH` calls of a channel ahead of a
/// peer's host, `memory::mapped`) are also counted apart: they are backpressure between
/// the hosts, not an exchange the call needs.
#[derive(Debug, Default)]
pub(crate) struct HostClock {
    /// Host rendezvous, and the nanoseconds spent in them.
    pub(crate) rendezvous: AtomicU64,
    pub(crate) rendezvous_ns: AtomicU64,
    /// Of those, the mailbox posts that waited for a peer's reading, and their ns.
    pub(crate) mailbox_waits: AtomicU64,
    pub(crate) mailbox_wait_ns: AtomicU64,
    /// Collective calls (all-gathers, reduce-scatters), and their nanoseconds.
    pub(crate) calls: AtomicU64,
    pub(crate) call_ns: AtomicU64,
}

/// Adds its lifetime to one or two of [`HostClock`]'s counters when dropped.
pub(crate) struct Timed<'a> {
    ns: &'a AtomicU64,
    also: Option<&'a AtomicU64>,
    start: std::time::Instant,
}

impl Drop for Timed<'_> {
    fn drop(&mut self) {
        let ns = u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.ns.fetch_add(ns, Ordering::Relaxed);
        if let Some(also) = self.also {
            also.fetch_add(ns, Ordering::Relaxed);
        }
    }
}

impl HostClock {
    /// A host rendezvous starts: counted now, timed until the guard drops.
    pub(crate) fn rendezvous(&self) -> Timed<'_> {
        self.rendezvous.fetch_add(1, Ordering::Relaxed);
        Timed { ns: &self.rendezvous_ns, also: None, start: std::time::Instant::now() }
    }

    /// A mailbox post waits for a peer's reading: a host rendezvous, also counted apart.
    pub(crate) fn mailbox_wait(&self) -> Timed<'_> {
        self.rendezvous.fetch_add(1, Ordering::Relaxed);
        self.mailbox_waits.fetch_add(1, Ordering::Relaxed);
        Timed { ns: &self.rendezvous_ns, also: Some(&self.mailbox_wait_ns), start: std::time::Instant::now() }
    }

    /// A collective call starts: counted now, timed until the guard drops.
    pub(crate) fn call(&self) -> Timed<'_> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        Timed { ns: &self.call_ns, also: None, start: std::time::Instant::now() }
    }

    /// (calls, call ns, rendezvous ns, of which mailbox wait ns).
    pub(crate) fn read(&self) -> (u64, u64, u64, u64) {
        (
            self.calls.load(Ordering::Relaxed),
            self.call_ns.load(Ordering::Relaxed),
            self.rendezvous_ns.load(Ordering::Relaxed),
            self.mailbox_wait_ns.load(Ordering::Relaxed),
        )
    }
}

/// A group's store (any [`Store`]: lowcon's TCP store or a framework's), shareable with
/// the groups its shrinks make, and how many times each barrier or all-gather name has
/// been used, so names can repeat.
pub(crate) struct StoreSlot {
    store: Shared,
    generations: std::collections::HashMap<String, u64>,
    /// Where the group's host time goes (shared with its `GroupCore`): the store's
    /// waits for the other ranks (all-gathers, barriers, reads of what others publish)
    /// are host rendezvous, counted and timed for `stats()`.
    clock: Arc<HostClock>,
}

impl StoreSlot {
    fn new(store: Box<dyn Store>) -> Self {
        Self {
            store: Shared(Arc::new(Mutex::new(store))),
            generations: std::collections::HashMap::new(),
            clock: Arc::new(HostClock::default()),
        }
    }

    fn next(&mut self, name: &str) -> u64 {
        let g = self.generations.entry(name.to_string()).or_insert(0);
        *g += 1;
        *g
    }

    /// Every rank's `data` in rank order (collective over `world` ranks), waiting in
    /// slices of [`WATCH_SLICE`] and failing as soon as a rank still missing will not
    /// come (`gone`: its socket hung up, [`Error::PeerGone`], or it gave up a shrink
    /// attempt; NOTE [watched set-up]): a collective set-up step names such a rank at once
    /// instead of waiting out the set-up timeout.
    pub(crate) fn all_gather_watching(
        &mut self,
        name: &str,
        rank: usize,
        world: usize,
        data: &[u8],
        timeout: Duration,
        gone: Watch<'_>,
    ) -> Result<Vec<Vec<u8>>> {
        use lowcon_store::kv::all_gather_key;
        let clock = self.clock.clone();
        let _waiting = clock.rendezvous();
        let generation = self.next(name);
        self.store.set(&all_gather_key(name, generation, rank), data)?;
        let what = format!("{name:?} in the store");
        let round = Round { name, generation, rank, world, what: &what };
        collect(&mut self.store, &round, (timeout, WATCH_SLICE), gone, &|| Ok(()))
    }

    /// A barrier of `world` ranks.
    pub(crate) fn barrier(&mut self, name: &str, world: usize, timeout: Duration) -> Result<()> {
        let clock = self.clock.clone();
        let _waiting = clock.rendezvous();
        let generation = self.next(name);
        Ok(lowcon_store::kv::barrier(&mut self.store, name, generation, world, timeout)?)
    }

    pub(crate) fn add(&mut self, key: &str, delta: i64) -> Result<i64> {
        Ok(self.store.add(key, delta)?)
    }

    pub(crate) fn set(&mut self, key: &str, value: &[u8]) -> Result<()> {
        Ok(self.store.set(key, value)?)
    }

    pub(crate) fn multi_get(&mut self, keys: &[&str], timeout: Duration) -> Result<Vec<Vec<u8>>> {
        let clock = self.clock.clone();
        let _waiting = clock.rendezvous();
        Ok(self.store.multi_get(keys, timeout)?)
    }
}

/// Why a rank that a set-up step waits for will not come (NOTE [watched set-up]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Left {
    /// Its socket hung up: the process exited or was killed.
    HungUp,
    /// It is alive, but gave up this shrink attempt (its creation of the new group
    /// failed) and went on to the next.
    GaveUp(u64),
}

/// What the waits of a set-up step watch: `Some` for a rank that will not come.
pub(crate) type Watch<'a> = &'a dyn Fn(usize) -> Option<Left>;

impl Left {
    /// The error of this rank's wait for `peer`, doing `what`.
    pub(crate) fn error(self, rank: usize, peer: usize, what: String) -> Error {
        match self {
            Left::HungUp => Error::PeerGone { rank, peer, what },
            Left::GaveUp(attempt) => Error::Rendezvous(format!(
                "rank {rank}: peer rank {peer} gave up shrink attempt {attempt} while {what}: call shrink again"
            )),
        }
    }
}

/// A watch of the mesh's sockets alone.
pub(crate) fn hung_up(mesh: &Mesh) -> impl Fn(usize) -> Option<Left> + '_ {
    move |p| mesh.peer_hung_up(p).then_some(Left::HungUp)
}

/// One all-gather round in the store: `rank`'s part of round `generation` of `name` among
/// `world` ranks, `what` naming it in errors ("waiting for its part of WHAT").
struct Round<'a> {
    name: &'a str,
    generation: u64,
    rank: usize,
    world: usize,
    what: &'a str,
}

/// Every rank's part of `round`, in rank order, waiting in slices of `slice` up to
/// `timeout` (each slice holds `store`, no more), failing as soon as a rank still missing
/// will not come (`gone`) or `usable` says the group failed; a timeout names the ranks
/// missing and gives the whole wait's length.
fn collect(
    store: &mut Shared,
    round: &Round<'_>,
    (timeout, slice): (Duration, Duration),
    gone: Watch<'_>,
    usable: &dyn Fn() -> Result<()>,
) -> Result<Vec<Vec<u8>>> {
    use lowcon_store::kv::all_gather_key;
    let Round { name, generation, rank, world, what } = *round;
    let keys: Vec<String> = (0..world).map(|r| all_gather_key(name, generation, r)).collect();
    let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
    let start = std::time::Instant::now();
    loop {
        usable()?;
        // Never a zero slice: some stores read a zero timeout as "wait forever".
        let left = timeout.saturating_sub(start.elapsed());
        match store.multi_get(&refs, left.min(slice).max(Duration::from_millis(1))) {
            Ok(v) => return Ok(v),
            Err(mut e @ lowcon_store::StoreError::Timeout { .. }) => {
                if let Some((peer, left)) =
                    missing_ranks(&e, name, generation, world).into_iter().find_map(|p| Some((p, gone(p)?)))
                {
                    return Err(left.error(rank, peer, format!("waiting for its part of {what}")));
                }
                if start.elapsed() >= timeout {
                    // The whole wait's timeout, not the last slice's.
                    if let lowcon_store::StoreError::Timeout { secs, .. } = &mut e {
                        *secs = timeout.as_secs_f64();
                    }
                    return Err(name_missing_ranks(e, name, generation, rank, world));
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// How long each wait of [`StoreSlot::all_gather_watching`] lasts before it looks at
/// the peers' sockets again.
const WATCH_SLICE: Duration = Duration::from_millis(100);

/// How long [`GroupCore::check_call`] holds the store in one wait for the other ranks'
/// calls (NOTE [checked calls]): short, so that a thread checking a call on another
/// channel gets the store between slices.
const CHECK_SLICE: Duration = Duration::from_millis(5);

/// The ranks whose part of round `generation` of all-gather `name` a store timeout says
/// is missing (its keys end in the ranks; the store quotes them, a Python store names
/// one key bare).
fn missing_ranks(e: &lowcon_store::StoreError, name: &str, generation: u64, world: usize) -> Vec<usize> {
    let lowcon_store::StoreError::Timeout { keys, .. } = e else { return Vec::new() };
    (0..world)
        .filter(|&r| {
            let k = lowcon_store::kv::all_gather_key(name, generation, r);
            *keys == k || keys.contains(&format!("\"{k}\""))
        })
        .collect()
}

/// A store all-gather that timed out, as an error naming the first rank that never
/// arrived, so that a rank that died before or during a collective set-up step is named
/// like any dead peer.
fn name_missing_ranks(e: lowcon_store::StoreError, name: &str, generation: u64, rank: usize, world: usize) -> Error {
    let missing = missing_ranks(&e, name, generation, world);
    match (&e, missing.first()) {
        (lowcon_store::StoreError::Timeout { addr, secs, .. }, Some(&peer)) => Error::PeerTimeout {
            rank,
            peer,
            what: format!("its part of {name:?} through the store at {addr} (rank(s) {missing:?} never arrived)"),
            secs: *secs,
        },
        _ => e.into(),
    }
}

/// "on" for "1", "off" otherwise (a peer's `check_calls` fact).
fn on_off(v: &str) -> &'static str {
    if v == "1" { "on" } else { "off" }
}

/// Each distinct call of `calls` (one per rank, in rank order) with the ranks that made
/// it, in the order of their first rank: "ranks 0, 2: CALL; rank 1: OTHER CALL".
fn disagreement(calls: &[Vec<u8>]) -> String {
    let mut groups: Vec<(&[u8], Vec<usize>)> = Vec::new();
    for (r, c) in calls.iter().enumerate() {
        match groups.iter_mut().find(|(call, _)| *call == c.as_slice()) {
            Some((_, ranks)) => ranks.push(r),
            None => groups.push((c, vec![r])),
        }
    }
    groups
        .iter()
        .map(|(call, ranks)| {
            let who = ranks.iter().map(|r| r.to_string()).collect::<Vec<_>>().join(", ");
            let s = if ranks.len() > 1 { "s" } else { "" };
            format!("rank{s} {who}: {}", String::from_utf8_lossy(call))
        })
        .collect::<Vec<_>>()
        .join("; ")
}

impl GroupCore {
    /// Collective: exchanges `extra` facts, checks the world fits on one host, agrees on
    /// a group id and connects the socket mesh. `gone` says whether a rank is known to
    /// have died (a shrink's new group watches the old group's sockets): waits for it
    /// then fail at once, naming it, instead of at the set-up timeout.
    pub(crate) fn new(
        store: Box<dyn Store>,
        rank: usize,
        world: usize,
        name: &str,
        extra: Vec<(String, String)>,
        timeout: Duration,
        gone: Watch<'_>,
    ) -> Result<Self> {
        crate::config::check()?;
        let setup = crate::config::setup_timeout().max(timeout);
        if world == 0 || rank >= world {
            return Err(Error::InvalidArgument(format!("rank {rank} is not within a world of {world}")));
        }
        // The k-th creation of group `name` by these ranks: every rank adds 1, so the
        // k-th round of additions yields values in (k*world, (k+1)*world].
        let store_interrupt = store.interrupter();
        let mut store = StoreSlot::new(store);
        let joined = store.add(&format!("lowcon/group/{name}/joins"), 1)?;
        let seq = (joined - 1) as usize / world;
        let mut me = PeerInfo::default();
        me.fields.push(("host".into(), hostname()));
        me.fields.push(("boot_id".into(), boot_id()));
        me.fields.push(("pid".into(), std::process::id().to_string()));
        me.fields.push(("world".into(), world.to_string()));
        let check_calls = crate::config::check_calls();
        me.fields.push(("check_calls".into(), u8::from(check_calls).to_string()));
        if rank == 0 {
            use rand::RngCore;
            let id = format!("{:016x}", rand::rng().next_u64());
            me.fields.push(("group_id".into(), id));
        }
        me.fields.extend(extra);
        let key = format!("group/{name}/{seq}/hello");
        let infos: Vec<PeerInfo> = store
            .all_gather_watching(&key, rank, world, &me.encode(), setup, gone)
            .map_err(|e| e.during(format!("creating group {name:?}: the ranks' facts")))?
            .iter()
            .map(|b| PeerInfo::decode(b))
            .collect();
        for (r, info) in infos.iter().enumerate() {
            if info.get("world") != world.to_string() {
                return Err(Error::Rendezvous(format!(
                    "rank {r} was started with a world of {} but rank {rank} with {world}",
                    info.get("world")
                )));
            }
            if info.get("check_calls") != infos[0].get("check_calls") {
                return Err(Error::InvalidArgument(format!(
                    "LOWCON_CHECK_CALLS is {} on rank {r} but {} on rank 0: every rank must compare its calls, \
                     or none (NOTE [checked calls])",
                    on_off(info.get("check_calls")),
                    on_off(infos[0].get("check_calls"))
                )));
            }
            if info.get("boot_id") != infos[0].get("boot_id") {
                return Err(Error::Rendezvous(format!(
                    "the world does not fit in one box: rank {r} runs on host {:?}, rank 0 on {:?} \
                     (lowcon is single-node: symmetric memory needs every rank on one host)",
                    info.get("host"),
                    infos[0].get("host")
                )));
            }
        }
        let group_id = format!("{}-{seq}", infos[0].get("group_id"));
        let listener = Mesh::listen(&group_id, rank)?;
        store
            .all_gather_watching(&format!("group/{name}/{seq}/listening"), rank, world, &[], setup, gone)
            .map_err(|e| e.during(format!("creating group {name:?}: every rank's socket listening")))?;
        let mesh = Mesh::connect(listener, &group_id, rank, world, setup, gone)
            .map_err(|e| e.during(format!("creating group {name:?}: the socket mesh")))?;
        Ok(Self {
            rank,
            world,
            group_id,
            timeout,
            setup_timeout: setup,
            mesh,
            infos,
            store_interrupt,
            clock: store.clock.clone(),
            store: Mutex::new(store),
            next_alloc: Mutex::new(0),
            alloc_serial: Mutex::new(()),
            failed: Mutex::new(None),
            broken: Arc::new(AtomicBool::new(false)),
            check_calls,
        })
    }

    /// NOTE [checked calls]: with `LOWCON_CHECK_CALLS=1` (on every rank: group creation
    /// checks), each collective call first meets the other ranks' in the store with what
    /// it is about to do (`call`: the collective, operator, elements and types in and out,
    /// and every option, channel and algorithm among them, written the same way on every
    /// rank), before any check of its own arguments and before it enqueues or moves
    /// anything. Ranks that disagree (one asks for 1008 elements a rank, the others for
    /// 1000; one all-gathers while the others reduce-scatter; one asks for another
    /// algorithm) then fail together with an error naming every rank's call, where they
    /// would otherwise wait for each other until the timeout, name a peer as gone, or,
    /// with sizes that still fit, compute garbage. Calls are counted per channel (each
    /// channel's calls come in one order on every rank; two threads on two channels may
    /// interleave differently), and the wait for the others holds the store only a slice
    /// at a time, so a thread checking on another channel is not held up by it (other
    /// store waits, an allocation's or a user's all-gather, still hold the store whole).
    /// Ranks that disagree on the channel never meet: that shows as a timeout. A rank
    /// that makes no call, or an error other than a disagreement (a timeout, a peer gone),
    /// fails the group, named. Barriers, the honest floor's traffic calls
    /// (`all_gather_traffic`, `reduce_scatter_traffic`) and graph replays are not checked
    /// (a captured call is checked when captured). Off by default: a store round trip per
    /// call.
    pub(crate) fn check_call(&self, channel: u32, call: impl FnOnce() -> String) -> Result<()> {
        use lowcon_store::kv::all_gather_key;
        if !self.check_calls {
            return Ok(());
        }
        // A failed group refuses at once, as the call itself would.
        self.check_usable()?;
        let mine = call();
        let name = format!("group/{}/checked-call/channel-{channel}", self.group_id);
        let (rank, world) = (self.rank, self.world);
        // Post this rank's call under the store lock; wait for the others' a slice at a time.
        let posted = {
            let mut s = self.store();
            let n = s.next(&name);
            s.store.set(&all_gather_key(&name, n, rank), mine.as_bytes()).map(|()| (n, s.store.clone()))
        };
        let (n, mut store) = posted.map_err(|e| self.fail(e.into()))?;
        let what = format!("checked call {n} on channel {channel}");
        let round = Round { name: &name, generation: n, rank, world, what: &what };
        let gone = hung_up(&self.mesh);
        // The group checked each slice: a failed group refuses at once, as the call would.
        let all = collect(&mut store, &round, (self.timeout, CHECK_SLICE), &gone, &|| self.check_usable())
            .map_err(|e| self.fail(e.during(format!("checking call {n} on channel {channel} ({mine})"))))?;
        if all.iter().all(|c| c.as_slice() == mine.as_bytes()) {
            return Ok(());
        }
        Err(Error::InvalidArgument(format!(
            "rank {rank}: the ranks disagree on call {n} on channel {channel} (LOWCON_CHECK_CALLS): {}",
            disagreement(&all)
        )))
    }

    pub(crate) fn store(&self) -> MutexGuard<'_, StoreSlot> {
        self.store.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A handle on this group's store for the group a shrink makes: both then use one
    /// connection (the old group is failed and barely uses it), and if making the new
    /// group fails, this group still has the store to shrink again.
    pub(crate) fn share_store(&self) -> Box<dyn Store> {
        Box::new(self.store().store.clone())
    }

    /// Errors with [`Error::GroupFailed`] once the group has failed.
    pub(crate) fn check_usable(&self) -> Result<()> {
        match &*self.failed.lock().unwrap_or_else(|p| p.into_inner()) {
            Some(e) => Err(Error::GroupFailed(e.to_string())),
            None => Ok(()),
        }
    }

    /// The group's failure as first reported (e.g. [`Error::PeerGone`] naming the peer),
    /// for `check` and `synchronize`; `Ok` while the group is healthy.
    pub(crate) fn failure(&self) -> Result<()> {
        match &*self.failed.lock().unwrap_or_else(|p| p.into_inner()) {
            Some(e) => Err(e.failure_copy()),
            None => Ok(()),
        }
    }

    /// Spins until `ready` returns `Some`, like a kernel's bounded wait for `peer`: fails
    /// with the peer named (`describe(state())` says what was awaited and what was seen)
    /// when the group is aborted, the peer's host hung up, or the group's timeout passes.
    pub(crate) fn spin_until<T, S: std::fmt::Display>(
        &self,
        peer: usize,
        mut ready: impl FnMut() -> Option<T>,
        describe: impl Fn(S) -> String,
        state: impl Fn() -> S,
    ) -> Result<T> {
        let start = Instant::now();
        let mut spins = 0u32;
        loop {
            if let Some(v) = ready() {
                return Ok(v);
            }
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
                continue;
            }
            if spins.is_multiple_of(256) {
                self.keep_waiting(peer, start, self.timeout, || describe(state()))?;
            }
            if spins < 1024 { std::thread::yield_now() } else { std::thread::sleep(Duration::from_micros(20)) }
        }
    }

    /// Whether a wait for `peer` that began at `start` may go on: an error (the group
    /// then fails) once the group was aborted from another thread (`HostGroup::abort`,
    /// Ctrl-C in Python), the peer's process is gone, or `limit` has passed. `what` names
    /// what is awaited.
    pub(crate) fn keep_waiting(
        &self,
        peer: usize,
        start: Instant,
        limit: Duration,
        what: impl Fn() -> String,
    ) -> Result<()> {
        self.check_usable()?;
        if self.mesh.peer_hung_up(peer) {
            return Err(self.fail(Error::PeerGone { rank: self.rank, peer, what: format!("waiting for {}", what()) }));
        }
        if start.elapsed() > limit {
            return Err(self.fail(Error::PeerTimeout {
                rank: self.rank,
                peer,
                what: what(),
                secs: limit.as_secs_f64(),
            }));
        }
        Ok(())
    }

    /// Whether the group has failed.
    pub(crate) fn is_failed(&self) -> bool {
        self.broken.load(Ordering::Acquire)
    }

    /// Fails the group on the application's request (`abort`): calls in flight give up
    /// their waits (the GPU watchdog releases them) and every later call errors.
    pub(crate) fn abort(&self) {
        self.fail(Error::GroupFailed(format!("rank {}: the application aborted the group", self.rank)));
        // A call may be waiting in the store (a collective growing its workspace).
        if let Some(i) = &self.store_interrupt {
            i.interrupt();
        }
    }

    /// Records `e` as the group's failure (the first one wins) and returns it.
    pub(crate) fn fail(&self, e: Error) -> Error {
        let mut f = self.failed.lock().unwrap_or_else(|p| p.into_inner());
        if f.is_none() {
            *f = Some(e.failure_copy());
        }
        self.broken.store(true, Ordering::Release);
        crate::log::trace(self.rank, &format!("group failed: {e}"));
        e
    }

    /// Collective: `data` from every rank, in rank order, under a key private to this
    /// group (so groups, and clients, never see each other's blobs).
    pub(crate) fn all_gather(&self, name: &str, data: &[u8], timeout: Duration) -> Result<Vec<Vec<u8>>> {
        let key = format!("group/{}/user/{name}", self.group_id);
        self.store().all_gather_watching(&key, self.rank, self.world, data, timeout, &hung_up(&self.mesh))
    }

    /// Publishes this rank's `data` under `name` (a key private to this group) without
    /// waiting for anyone; [`GroupCore::published`] reads every rank's.
    pub(crate) fn publish(&self, name: &str, data: &[u8]) -> Result<()> {
        let key = format!("group/{}/pub/{name}/{}", self.group_id, self.rank);
        self.store().set(&key, data)
    }

    /// Every rank's [`GroupCore::publish`]ed `name`, in rank order, waiting up to
    /// `timeout` for ranks that have not published it yet.
    pub(crate) fn published(&self, name: &str, timeout: Duration) -> Result<Vec<Vec<u8>>> {
        let keys: Vec<String> = (0..self.world).map(|r| format!("group/{}/pub/{name}/{r}", self.group_id)).collect();
        let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
        self.store().multi_get(&refs, timeout)
    }

    /// Collective: a store barrier under a key private to this group.
    pub(crate) fn barrier(&self, name: &str, timeout: Duration) -> Result<()> {
        let key = format!("group/{}/user/{name}", self.group_id);
        self.store().barrier(&key, self.world, timeout)
    }

    /// Collective: a store barrier (within the set-up timeout) that fails at once,
    /// naming the rank, when a rank still missing has hung up its socket.
    pub(crate) fn barrier_watching(&self, name: &str) -> Result<()> {
        let gone = hung_up(&self.mesh);
        let key = format!("group/{}/watched/{name}", self.group_id);
        self.store().all_gather_watching(&key, self.rank, self.world, &[], self.setup_timeout, &gone).map(|_| ())
    }

    /// Collective: the next allocation's tag, after checking every rank asked for the
    /// same size for the same purpose (an error naming the ranks, sizes and purposes
    /// otherwise).
    ///
    /// NOTE [allocations agreed]: allocations are matched by one sequence per group, so
    /// ranks must allocate in the same order. Two threads that first use two channels in
    /// one order on one rank and the other on another (a documented misuse: grow
    /// workspaces from one thread at a time, or `reserve_workspace` first) used to pair
    /// one rank's channel-1 workspace with another's channel-2 workspace when the sizes
    /// were equal, and the calls then read each other's data in silence (host backend,
    /// 2026-11-28). Each rank now says what the allocation is for (`purpose`: which
    /// channel's workspace or LL buffer, the pads, a caller's buffer), so a mismatch is
    /// an error on every rank naming both, never a wrong result.
    pub(crate) fn agree_on_alloc(&self, bytes: usize, purpose: &str) -> Result<u64> {
        let tag = {
            let mut n = self.next_alloc.lock().unwrap_or_else(|p| p.into_inner());
            *n += 1;
            *n
        };
        let gone = hung_up(&self.mesh);
        let mut mine = (bytes as u64).to_le_bytes().to_vec();
        mine.extend_from_slice(purpose.as_bytes());
        let asks = self.store().all_gather_watching(
            &format!("group/{}/alloc/{tag}", self.group_id),
            self.rank,
            self.world,
            &mine,
            self.setup_timeout,
            &gone,
        )?;
        for (r, s) in asks.iter().enumerate() {
            let theirs = s.get(..8).and_then(|b| b.try_into().ok()).map_or(u64::MAX, u64::from_le_bytes);
            let what = String::from_utf8_lossy(s.get(8..).unwrap_or_default());
            if what != purpose {
                return Err(Error::Rendezvous(format!(
                    "symmetric allocation {tag}: rank {r} allocates {what} but rank {} allocates {purpose}: ranks \
                     must allocate in the same order (threads growing channels' buffers in different orders? \
                     grow them from one thread at a time; on GPUs reserve_workspace does it ahead; NOTE \
                     [allocations agreed])",
                    self.rank
                )));
            }
            if theirs != bytes as u64 {
                return Err(Error::Rendezvous(format!(
                    "symmetric allocation {tag}: rank {r} asked for {theirs} bytes but rank {} asked for {bytes} \
                     ({purpose}; every rank must allocate the same size)",
                    self.rank
                )));
            }
        }
        Ok(tag)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mailbox_wait_is_a_rendezvous_counted_apart_too() {
        let clock = HostClock::default();
        {
            let _r = clock.rendezvous();
            std::thread::sleep(Duration::from_millis(2));
        }
        {
            let _m = clock.mailbox_wait();
            std::thread::sleep(Duration::from_millis(3));
        }
        let (calls, call_ns, rdv_ns, mailbox_ns) = clock.read();
        assert_eq!((calls, call_ns), (0, 0));
        assert_eq!(clock.rendezvous.load(Ordering::Relaxed), 2);
        assert_eq!(clock.mailbox_waits.load(Ordering::Relaxed), 1);
        assert!(mailbox_ns >= 3_000_000 && rdv_ns >= mailbox_ns + 2_000_000, "{rdv_ns} {mailbox_ns}");
    }

    #[test]
    fn a_disagreement_lists_each_call_with_its_ranks_in_rank_order() {
        // NOTE [checked calls].
        let calls: Vec<Vec<u8>> =
            ["ag 1008", "ag 1000", "ag 1000", "rs 8"].iter().map(|c| c.as_bytes().to_vec()).collect();
        assert_eq!(disagreement(&calls), "rank 0: ag 1008; ranks 1, 2: ag 1000; rank 3: rs 8");
        assert_eq!((on_off("1"), on_off("0"), on_off("")), ("on", "off", "off"));
    }

    #[test]
    fn a_store_timeout_names_the_first_missing_rank() {
        let base = "lowcon/kv-all-gather/group/x/hello/3";
        let e = lowcon_store::StoreError::Timeout {
            addr: "127.0.0.1:1".into(),
            op: "multi_get",
            keys: format!("\"{base}/2\", \"{base}/5\""),
            secs: 3.0,
        };
        match name_missing_ranks(e, "group/x/hello", 3, 0, 6) {
            Error::PeerTimeout { rank: 0, peer: 2, what, secs } => {
                assert!(what.contains("[2, 5]"), "{what}");
                assert_eq!(secs, 3.0);
            }
            other => panic!("expected a PeerTimeout naming rank 2, got {other}"),
        }
        // Another generation's keys are not this call's missing ranks.
        let e = lowcon_store::StoreError::Timeout {
            addr: "a".into(),
            op: "multi_get",
            keys: format!("\"{base}/2\""),
            secs: 1.0,
        };
        assert!(matches!(name_missing_ranks(e, "group/x/hello", 4, 0, 6), Error::Store(_)));
    }
}
