//! Shrinking a group after a peer died: the survivors agree, through the store, on who
//! is alive, and the caller makes a new group of them (`GpuGroup::shrink`,
//! `HostGroup::shrink`).
//!
//! NOTE [shrink agreement]: every survivor adds 1 to a counter under the old group's id
//! and the attempt's number, and writes its rank under the number it drew. The first to
//! arrive coordinates: it waits until every rank whose socket has not hung up has
//! arrived (re-reading the hang-ups meanwhile), or for twice the group's timeout (a
//! survivor may first wait out a timeout in a collective on another survivor that had
//! already gone on to shrink), then
//! writes the member list: the ranks that arrived, less those that hung up since. The
//! list is final once written, so a rank that arrives later finds itself outside it and
//! is told so ("left out"); the others wait for the list, within the timeout and a
//! margin. If the coordinator dies before writing it, they time out naming it; calling
//! `shrink` again makes a new attempt (the next number: every survivor's count of
//! attempts stays the same, since they all fail the same one).
//!
//! The new group meets under a name of its own (the old group's id and the attempt's
//! number), so its store keys, signal pads and epochs share nothing with the old group's.

use std::time::{Duration, Instant};

use super::GroupCore;
use crate::error::{Error, Result};

/// The outcome of an agreement: the survivors (old ranks, ascending), this rank's place
/// among them, and the name the new group meets under.
#[derive(Clone, Debug)]
pub(crate) struct Agreed {
    pub(crate) members: Vec<usize>,
    pub(crate) new_rank: usize,
    pub(crate) name: String,
}

/// How long non-coordinators wait for the member list beyond the group's timeout.
const LIST_MARGIN: Duration = Duration::from_secs(5);

fn parse_members(b: &[u8]) -> Result<Vec<usize>> {
    let s = String::from_utf8_lossy(b);
    s.split(',').filter(|x| !x.is_empty()).map(|x| x.parse().map_err(|_| bad_list(&s))).collect()
}

fn bad_list(s: &str) -> Error {
    Error::Rendezvous(format!("shrink: a malformed member list in the store: {s:?}"))
}

impl GroupCore {
    /// Collective among the survivors: agrees on who is alive (NOTE [shrink agreement]),
    /// attempt `attempt` of this group.
    pub(crate) fn agree_on_survivors(&self, attempt: u64) -> Result<Agreed> {
        let (rank, world) = (self.rank, self.world);
        let prefix = format!("group/{}/shrink/{attempt}", self.group_id);
        let hung_up = |p: usize| p != rank && self.mesh.peer_hung_up(p);
        let mut store = self.store();
        let k = store.add(&format!("{prefix}/arrive"), 1)?;
        store.set(&format!("{prefix}/who/{k}"), rank.to_string().as_bytes())?;
        let list = format!("{prefix}/members");
        // A survivor may first wait out a whole timeout in a collective on another
        // survivor that already went on to shrink: the window allows for that.
        let window = 2 * self.timeout;
        let members = if k == 1 {
            let start = Instant::now();
            let arrived = loop {
                let alive = (0..world).filter(|&p| !hung_up(p)).count();
                let arrived = store.add(&format!("{prefix}/arrive"), 0)?;
                if arrived as usize >= alive || start.elapsed() > window {
                    break arrived;
                }
                std::thread::sleep(Duration::from_millis(1));
            };
            let keys: Vec<String> = (1..=arrived).map(|i| format!("{prefix}/who/{i}")).collect();
            let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
            let who = store.multi_get(&keys, self.setup_timeout)?;
            let mut members = Vec::new();
            for w in who {
                let p: usize = String::from_utf8_lossy(&w).parse().map_err(|_| bad_list("who"))?;
                if !hung_up(p) {
                    members.push(p);
                }
            }
            members.sort_unstable();
            members.dedup();
            let text = members.iter().map(usize::to_string).collect::<Vec<_>>().join(",");
            store.set(&list, text.as_bytes())?;
            members
        } else {
            match store.multi_get(&[&list], window + LIST_MARGIN) {
                Ok(v) => parse_members(&v[0])?,
                Err(e) => {
                    let coordinator = store
                        .multi_get(&[&format!("{prefix}/who/1")], Duration::from_millis(100))
                        .ok()
                        .map(|v| String::from_utf8_lossy(&v[0]).into_owned());
                    return Err(Error::Rendezvous(format!(
                        "rank {rank}: shrink attempt {attempt}: no member list within {:.1} s ({e}); the \
                         coordinating rank ({}) may have died: call shrink again",
                        (window + LIST_MARGIN).as_secs_f64(),
                        coordinator.as_deref().unwrap_or("unknown")
                    )));
                }
            }
        };
        let Some(new_rank) = members.iter().position(|&p| p == rank) else {
            return Err(Error::Rendezvous(format!(
                "rank {rank}: left out of the shrunken group: it arrived after the survivors' list was made \
                 (members, by old rank: {members:?})"
            )));
        };
        let name = format!("shrink-{}-{attempt}", self.group_id);
        Ok(Agreed { members, new_rank, name })
    }
}
