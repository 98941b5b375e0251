//! Shrinking a group after a peer died: the survivors agree, through the store, on who
//! is alive, and the caller makes a new group of them (`GpuGroup::shrink`,
//! `HostGroup::shrink`).
//!
//! NOTE [shrink agreement]: every survivor first marks itself present (`here/<rank>`),
//! then draws a number (`claim`); the first draws 1, coordinates, and publishes its rank
//! (`coordinator`). It waits until every rank that has neither hung up its socket nor
//! been left out before is present (re-reading the hang-ups meanwhile), or for twice the
//! group's timeout (a survivor may first wait out a timeout in a collective on another
//! survivor that had already gone on to shrink), then writes the member list: the ranks
//! present, less those that hung up since. Each step is one store operation, and the
//! coordinator never waits on a key another rank may have died before writing, so a rank
//! killed between any two steps leaves nothing for the others to wait out. (An earlier
//! design had each rank write its rank under the number it drew: one killed between
//! the two made the coordinator fail the attempt after the set-up timeout while the
//! others waited longer for the list, and their attempts drifted apart into groups of
//! one.) Only `set`, `get` and `add` are used, so a framework's store serves too; flags
//! are counters, read with `add(key, 0)`, which never blocks.
//!
//! NOTE [orphaned attempt]: a rank killed between drawing 1 and publishing its rank as
//! coordinator leaves the others no coordinator to watch. They used to wait out the
//! window and a margin (15 s with a 5 s timeout; seen under CPU load, where the two store
//! operations lie further apart). Now every rank that drew and does not coordinate marks
//! it (`drew/<rank>`); a rank waiting for an unpublished coordinator fails the attempt
//! as soon as every other rank still alive (not hung up, not left out) has drawn: the
//! one that drew first is then dead. A live coordinator never marks `drew`, so it is
//! waited for; a live rank that has not drawn yet may still be the first, so it is too.
//!
//! The list is final once written, so a rank that arrives later finds itself outside it
//! and is told so ("left out"); it marks itself so (`out/<rank>`, for the whole group),
//! later attempts do not wait for it, and its later `shrink` calls fail the same way.
//! The others wait for the list, and fail the attempt as soon as the coordinator hangs
//! up without writing it, or, if it died before publishing its rank, as soon as every
//! other rank still alive has drawn (NOTE [orphaned attempt]); calling `shrink` again
//! makes a new attempt (the next number: every survivor's count of attempts stays the
//! same, since they all fail the same one).
//!
//! The new group meets under a name of its own (the old group's id and the attempt's
//! number), so its store keys, signal pads and epochs share nothing with the old group's.
//!
//! NOTE [watched set-up]: every wait of a group's creation (the ranks' facts, the
//! sockets listening, the mesh's connects and accepts, the peer-access verdicts, the
//! pads' allocation exchanges) and the new group's barrier fail at once when a rank
//! they wait for will not come ([`Left`]), not at the set-up timeout. A rank will not
//! come when its socket hung up, and, in a shrink, when it gave up the attempt while
//! alive. That second case was missed: under CPU load (2 cores beside a parallel build)
//! one survivor saw a member die during the new group's creation and failed the
//! attempt, dropping its half-made group and its listening socket, while another,
//! starved for a moment, only then tried to connect to it. Its connects were refused,
//! and since the first survivor was alive (its old socket still open) nothing said it
//! would not come: the second waited out the set-up timeout (5013 ms against a 3 s
//! bound). Now a member whose creation fails marks `gave-up/<rank>` under the attempt's
//! keys ([`Agreed::give_up`]) before it goes on, and the others' waits read that mark
//! as they read the hang-ups ([`Agreed::gone`]): their attempt fails at once, and the
//! next one finds them all. Every error of these waits names its step ("shrink attempt
//! 1: creating group ...: the socket mesh: ..."), so a wait that does run out says which
//! it was.

use std::time::{Duration, Instant};

use super::{GroupCore, Left};
use crate::error::{Error, Result};

/// The outcome of an agreement: the survivors (old ranks, ascending), this rank's place
/// among them, and the name the new group meets under.
#[derive(Clone, Debug)]
pub(crate) struct Agreed {
    pub(crate) members: Vec<usize>,
    pub(crate) new_rank: usize,
    pub(crate) name: String,
    /// This attempt's number, and its store keys' prefix.
    pub(crate) attempt: u64,
    prefix: String,
}

/// How long non-coordinators wait for the member list beyond the group's timeout.
const LIST_MARGIN: Duration = Duration::from_secs(5);

/// How often a rank that waits for an unpublished coordinator looks whether it died
/// (NOTE [orphaned attempt]).
const ORPHAN_LOOK: Duration = Duration::from_millis(10);

fn parse_members(b: &[u8]) -> Result<Vec<usize>> {
    let s = String::from_utf8_lossy(b);
    s.split(',').filter(|x| !x.is_empty()).map(|x| x.parse().map_err(|_| bad_list(&s))).collect()
}

fn bad_list(s: &str) -> Error {
    Error::Rendezvous(format!("shrink: a malformed member list in the store: {s:?}"))
}

impl Agreed {
    /// Whether member `q` of the new group (its new rank) will not come: the old
    /// group's socket to it hung up, or it gave up this attempt (NOTE [watched set-up]).
    /// The new group's creation watches this.
    pub(crate) fn gone(&self, old: &GroupCore, q: usize) -> Option<Left> {
        let p = self.members[q];
        if p == old.rank {
            return None;
        }
        if old.mesh.peer_hung_up(p) {
            return Some(Left::HungUp);
        }
        // A counter read with `add(key, 0)`, which never blocks; a store error reads as
        // "still coming" (the wait's own timeout then holds).
        (old.store().add(&self.gave_up_key(p), 0).unwrap_or(0) > 0).then_some(Left::GaveUp(self.attempt))
    }

    /// Marks this rank as having given up the attempt, for the members still making
    /// the new group (their waits for it then fail at once).
    pub(crate) fn give_up(&self, old: &GroupCore) {
        if let Err(e) = old.store().add(&self.gave_up_key(old.rank), 1) {
            crate::log::warn(&format!(
                "rank {}: shrink attempt {}: cannot tell the others it gave up ({e}): they wait out the set-up timeout",
                old.rank, self.attempt
            ));
        }
    }

    fn gave_up_key(&self, p: usize) -> String {
        format!("{}/gave-up/{p}", self.prefix)
    }
}

impl GroupCore {
    /// Collective among the survivors, both backends' first half of `shrink`: the next
    /// attempt's agreement (`attempts` counts them), then this group failed, not aborted
    /// (an abort would also break off the store, which the new group shares).
    pub(crate) fn begin_shrink(&self, attempts: &std::sync::Mutex<u64>) -> Result<Agreed> {
        let attempt = {
            let mut a = attempts.lock().unwrap_or_else(|p| p.into_inner());
            *a += 1;
            *a - 1
        };
        let agreed = self.agree_on_survivors(attempt)?;
        self.fail(Error::GroupFailed(format!("rank {}: the group was shrunk", self.rank)));
        Ok(agreed)
    }

    /// Collective among the survivors: agrees on who is alive (NOTE [shrink agreement]),
    /// attempt `attempt` of this group.
    pub(crate) fn agree_on_survivors(&self, attempt: u64) -> Result<Agreed> {
        let (rank, world) = (self.rank, self.world);
        let group = format!("group/{}/shrink", self.group_id);
        let prefix = format!("{group}/{attempt}");
        let hung_up = |p: usize| p != rank && self.mesh.peer_hung_up(p);
        let mut store = self.store();
        if store.add(&format!("{group}/out/{rank}"), 0)? > 0 {
            return Err(Error::Rendezvous(format!(
                "rank {rank}: left out of an earlier shrink of this group: the survivors went on without it"
            )));
        }
        store.add(&format!("{prefix}/here/{rank}"), 1)?;
        let coordinating = store.add(&format!("{prefix}/claim"), 1)? == 1;
        let (coordinator_key, listed, list) =
            (format!("{prefix}/coordinator"), format!("{prefix}/listed"), format!("{prefix}/members"));
        // A survivor may first wait out a whole timeout in a collective on another
        // survivor that already went on to shrink: the window allows for that.
        let window = 2 * self.timeout;
        let start = Instant::now();
        let members = if coordinating {
            store.add(&coordinator_key, rank as i64 + 1)?;
            let (mut present, mut out) = (vec![false; world], vec![false; world]);
            loop {
                let mut waiting = false;
                for p in 0..world {
                    if present[p] || out[p] || hung_up(p) {
                        continue;
                    }
                    present[p] = store.add(&format!("{prefix}/here/{p}"), 0)? > 0;
                    out[p] = !present[p] && store.add(&format!("{group}/out/{p}"), 0)? > 0;
                    waiting |= !present[p] && !out[p];
                }
                if !waiting || start.elapsed() > window {
                    break;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            let members: Vec<usize> = (0..world).filter(|&p| present[p] && !hung_up(p)).collect();
            let absent: Vec<usize> = (0..world).filter(|&p| !present[p] && !out[p] && !hung_up(p)).collect();
            if !absent.is_empty() {
                crate::log::warn(&format!(
                    "rank {rank}: shrink attempt {attempt}: the agreement window ({:.1} s) ran out: live rank(s) \
                     {absent:?} left out",
                    window.as_secs_f64()
                ));
            }
            let text = members.iter().map(usize::to_string).collect::<Vec<_>>().join(",");
            store.set(&list, text.as_bytes())?;
            store.add(&listed, 1)?;
            crate::log::trace(
                rank,
                &format!(
                    "shrink attempt {attempt} of group {}: coordinated in {:?}: members {text}",
                    self.group_id,
                    start.elapsed()
                ),
            );
            members
        } else {
            // This rank drew and does not coordinate (NOTE [orphaned attempt]).
            store.add(&format!("{prefix}/drew/{rank}"), 1)?;
            let mut coordinator = None;
            let mut last_look = Instant::now();
            loop {
                if store.add(&listed, 0)? > 0 {
                    let members = parse_members(&store.multi_get(&[&list], self.setup_timeout)?[0])?;
                    crate::log::trace(rank, &format!("shrink attempt {attempt}: members {members:?}"));
                    break members;
                }
                if coordinator.is_none() {
                    coordinator = usize::try_from(store.add(&coordinator_key, 0)? - 1).ok();
                }
                let gone = coordinator.filter(|&c| hung_up(c));
                let late = start.elapsed() > window + LIST_MARGIN;
                // With no coordinator published, look (every 10 ms) whether every rank
                // still alive has drawn and does not coordinate: then the one that drew
                // first (someone did: this rank drew more than 1) died before publishing
                // its rank.
                let orphaned = coordinator.is_none() && last_look.elapsed() >= ORPHAN_LOOK && {
                    last_look = Instant::now();
                    let mut all_drew = true;
                    for p in (0..world).filter(|&p| p != rank && !hung_up(p)) {
                        if store.add(&format!("{prefix}/drew/{p}"), 0)? == 0
                            && store.add(&format!("{group}/out/{p}"), 0)? == 0
                        {
                            all_drew = false;
                            break;
                        }
                    }
                    all_drew
                };
                if gone.is_some() || late || orphaned {
                    let why = match (gone, orphaned) {
                        (Some(c), _) => format!("the coordinating rank {c} hung up before it wrote the member list"),
                        (None, true) => "the coordinating rank died before it published its rank (every rank still \
                                         alive drew, and none coordinates)"
                            .to_string(),
                        (None, false) => format!(
                            "no member list within {:.1} s (the coordinating rank, {}, may have died)",
                            (window + LIST_MARGIN).as_secs_f64(),
                            coordinator.map_or("unknown".to_string(), |c| c.to_string())
                        ),
                    };
                    return Err(Error::Rendezvous(format!(
                        "rank {rank}: shrink attempt {attempt}: {why}: call shrink again"
                    )));
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        };
        let Some(new_rank) = members.iter().position(|&p| p == rank) else {
            store.add(&format!("{group}/out/{rank}"), 1)?;
            return Err(Error::Rendezvous(format!(
                "rank {rank}: left out of the shrunken group: it arrived after the survivors' list was made \
                 (members, by old rank: {members:?})"
            )));
        };
        let name = format!("shrink-{}-{attempt}", self.group_id);
        Ok(Agreed { members, new_rank, name, attempt, prefix })
    }
}
