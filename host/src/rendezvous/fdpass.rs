//! A full mesh of Unix-domain sockets between the ranks of one host, used to pass file
//! descriptors (`SCM_RIGHTS`): memfd buffers on the host backend, CUDA VMM handles on
//! the GPU backend.
//!
//! Sockets live in the *abstract* namespace under a name derived from the group id
//! (which the ranks agree on through the store), so no `/tmp` path is created, nothing
//! is left behind, and no pid-namespace assumption is made. Ranks on one host share a
//! network namespace, which is what the abstract namespace is scoped to.
//!
//! The mesh doubles as a liveness signal: a peer that dies closes its sockets, and the
//! next receive from it fails with an error that names it.

use std::io::{IoSlice, IoSliceMut, Read, Write};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::time::{Duration, Instant};

use nix::sys::socket::{ControlMessage, ControlMessageOwned, MsgFlags, recvmsg, sendmsg};

use crate::error::{Error, Result};

/// One connected socket per peer.
pub(crate) struct Mesh {
    rank: usize,
    peers: Vec<Option<UnixStream>>,
}

fn socket_name(group_id: &str, rank: usize) -> String {
    format!("lowcon/{group_id}/{rank}")
}

impl Mesh {
    /// Binds this rank's socket; call [`Mesh::connect`] once every rank has bound.
    pub(crate) fn listen(group_id: &str, rank: usize) -> Result<UnixListener> {
        let name = socket_name(group_id, rank);
        let addr = SocketAddr::from_abstract_name(name.as_bytes())
            .map_err(|e| Error::Rendezvous(format!("rank {rank}: bad socket name {name:?}: {e}")))?;
        UnixListener::bind_addr(&addr)
            .map_err(|e| Error::Rendezvous(format!("rank {rank}: cannot bind the abstract socket @{name}: {e}")))
    }

    /// Connects to every lower rank and accepts every higher one (each side sends its
    /// rank first), within `timeout`.
    pub(crate) fn connect(
        listener: UnixListener,
        group_id: &str,
        rank: usize,
        world: usize,
        timeout: Duration,
        gone: super::Watch<'_>,
    ) -> Result<Self> {
        let deadline = Instant::now() + timeout;
        let mut peers: Vec<Option<UnixStream>> = (0..world).map(|_| None).collect();
        for (p, slot) in peers.iter_mut().enumerate().take(rank) {
            let name = socket_name(group_id, p);
            let addr = SocketAddr::from_abstract_name(name.as_bytes())
                .map_err(|e| Error::Rendezvous(format!("bad socket name {name:?}: {e}")))?;
            let mut s = loop {
                match UnixStream::connect_addr(&addr) {
                    Ok(s) => break s,
                    Err(e) if Instant::now() < deadline => {
                        if let Some(left) = gone(p) {
                            return Err(left.error(rank, p, format!("waiting to connect to its socket @{name} ({e})")));
                        }
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    Err(e) => {
                        return Err(Error::PeerTimeout {
                            rank,
                            peer: p,
                            what: format!("its socket @{name} to accept our connection ({e})"),
                            secs: timeout.as_secs_f64(),
                        });
                    }
                }
            };
            s.write_all(&(rank as u32).to_le_bytes()).map_err(|e| Error::PeerGone {
                rank,
                peer: p,
                what: format!("sending our rank ({e})"),
            })?;
            *slot = Some(s);
        }
        listener.set_nonblocking(true).map_err(|e| Error::Rendezvous(format!("rank {rank}: socket: {e}")))?;
        let mut pending = world - rank - 1;
        while pending > 0 {
            match listener.accept() {
                Ok((mut s, _)) => {
                    s.set_nonblocking(false).map_err(|e| Error::Rendezvous(format!("socket: {e}")))?;
                    s.set_read_timeout(Some(
                        deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1)),
                    ))
                    .map_err(|e| Error::Rendezvous(format!("socket: {e}")))?;
                    let mut who = [0u8; 4];
                    s.read_exact(&mut who).map_err(|e| match e.kind() {
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => Error::Rendezvous(format!(
                            "rank {rank}: a peer connected to our socket but sent no rank within the set-up timeout \
                             ({:.1} s)",
                            timeout.as_secs_f64()
                        )),
                        _ => Error::Rendezvous(format!("rank {rank}: a peer connected but sent no rank: {e}")),
                    })?;
                    let who = u32::from_le_bytes(who) as usize;
                    if who <= rank || who >= world || peers[who].is_some() {
                        return Err(Error::Rendezvous(format!(
                            "rank {rank}: unexpected connection from a peer claiming rank {who} (world {world}): \
                             two jobs with one group id?"
                        )));
                    }
                    peers[who] = Some(s);
                    pending -= 1;
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if let Some((p, left)) =
                        (rank + 1..world).filter(|&p| peers[p].is_none()).find_map(|p| Some((p, gone(p)?)))
                    {
                        return Err(left.error(rank, p, "waiting for it to connect to our socket".into()));
                    }
                    if Instant::now() >= deadline {
                        let missing: Vec<usize> = (rank + 1..world).filter(|p| peers[*p].is_none()).collect();
                        return Err(Error::PeerTimeout {
                            rank,
                            peer: missing[0],
                            what: format!("rank(s) {missing:?} to connect to our socket"),
                            secs: timeout.as_secs_f64(),
                        });
                    }
                    std::thread::sleep(Duration::from_millis(2));
                }
                Err(e) => return Err(Error::Rendezvous(format!("rank {rank}: accept failed: {e}"))),
            }
        }
        for s in peers.iter().flatten() {
            s.set_read_timeout(Some(timeout)).map_err(|e| Error::Rendezvous(format!("socket: {e}")))?;
            s.set_write_timeout(Some(timeout)).map_err(|e| Error::Rendezvous(format!("socket: {e}")))?;
        }
        Ok(Self { rank, peers })
    }

    /// Sends `fd` to every peer under `tag` and receives every peer's; the result has
    /// this rank's slot empty. A peer that died or stalls is an error naming it.
    pub(crate) fn exchange_fds(&self, tag: u64, fd: BorrowedFd<'_>) -> Result<Vec<Option<OwnedFd>>> {
        let rank = self.rank;
        let mut header = [0u8; 12];
        header[..8].copy_from_slice(&tag.to_le_bytes());
        header[8..].copy_from_slice(&(rank as u32).to_le_bytes());
        let fds = [fd.as_raw_fd()];
        for (p, s) in self.peers.iter().enumerate() {
            let Some(s) = s else { continue };
            let iov = [IoSlice::new(&header)];
            let cmsg = [ControlMessage::ScmRights(&fds)];
            sendmsg::<()>(s.as_raw_fd(), &iov, &cmsg, MsgFlags::MSG_NOSIGNAL, None).map_err(|e| Error::PeerGone {
                rank,
                peer: p,
                what: format!("sending it a memory handle ({e})"),
            })?;
        }
        let mut out: Vec<Option<OwnedFd>> = (0..self.peers.len()).map(|_| None).collect();
        for (p, s) in self.peers.iter().enumerate() {
            let Some(s) = s else { continue };
            let mut buf = [0u8; 12];
            let mut cmsg_buf = nix::cmsg_space!([RawFd; 1]);
            let (bytes, fd) = {
                let mut iov = [IoSliceMut::new(&mut buf)];
                let msg = recvmsg::<()>(s.as_raw_fd(), &mut iov, Some(&mut cmsg_buf), MsgFlags::MSG_CMSG_CLOEXEC)
                    .map_err(|e| match e {
                        nix::errno::Errno::EAGAIN => Error::PeerTimeout {
                            rank,
                            peer: p,
                            what: "its memory handle".into(),
                            secs: s.read_timeout().ok().flatten().map_or(0.0, |d| d.as_secs_f64()),
                        },
                        e => Error::PeerGone { rank, peer: p, what: format!("receiving its memory handle ({e})") },
                    })?;
                let mut fd = None;
                for c in
                    msg.cmsgs().map_err(|e| Error::Rendezvous(format!("bad control message from rank {p}: {e}")))?
                {
                    if let ControlMessageOwned::ScmRights(v) = c {
                        for raw in v {
                            // SAFETY: the kernel just installed `raw` in our table for
                            // us (SCM_RIGHTS); we take sole ownership of it.
                            let owned = unsafe { OwnedFd::from_raw_fd(raw) };
                            if fd.is_none() {
                                fd = Some(owned);
                            }
                        }
                    }
                }
                (msg.bytes, fd)
            };
            if bytes == 0 {
                return Err(Error::PeerGone {
                    rank,
                    peer: p,
                    what: "receiving its memory handle (it closed the connection)".into(),
                });
            }
            let got_tag = u64::from_le_bytes(buf[..8].try_into().expect("8 bytes"));
            let got_rank = u32::from_le_bytes(buf[8..].try_into().expect("4 bytes")) as usize;
            if bytes != 12 || got_tag != tag || got_rank != p {
                return Err(Error::Rendezvous(format!(
                    "rank {rank}: rank {p} sent handle {got_tag} (from rank {got_rank}) while we exchange handle {tag}: \
                     ranks allocated in different orders"
                )));
            }
            out[p] = Some(fd.ok_or_else(|| Error::Rendezvous(format!("rank {p} sent no file descriptor")))?);
        }
        Ok(out)
    }

    /// Whether `peer`'s socket reports a hang-up (the process exited), without blocking.
    pub(crate) fn peer_hung_up(&self, peer: usize) -> bool {
        let Some(s) = &self.peers[peer] else { return false };
        let mut fds = [nix::poll::PollFd::new(s.as_fd(), nix::poll::PollFlags::POLLIN)];
        match nix::poll::poll(&mut fds, nix::poll::PollTimeout::ZERO) {
            Ok(n) if n > 0 => {
                let ev = fds[0].revents().unwrap_or(nix::poll::PollFlags::empty());
                if ev.intersects(nix::poll::PollFlags::POLLHUP | nix::poll::PollFlags::POLLERR) {
                    return true;
                }
                // Readable with no message pending is EOF.
                let mut b = [0u8; 1];
                matches!(
                    nix::sys::socket::recv(s.as_raw_fd(), &mut b, MsgFlags::MSG_PEEK | MsgFlags::MSG_DONTWAIT),
                    Ok(0)
                )
            }
            _ => false,
        }
    }
}

use std::os::fd::AsFd;
