//! The blocking store client.
//!
//! One TCP connection, one call at a time (the server relies on that). Connecting
//! retries with exponential backoff while the server starts; every call has a timeout;
//! after any I/O failure the connection is dropped and the next call reconnects, so one
//! timed-out call does not leave a half-read reply in the socket.

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use crate::StoreError;
use crate::protocol::{self, Request, Response};

/// Client settings.
#[derive(Clone, Debug)]
pub struct ClientOptions {
    /// How long to keep retrying the initial connection.
    pub connect_timeout: Duration,
    /// Reply timeout for calls that do not wait for keys.
    pub call_timeout: Duration,
    /// Default wait for `get`/`wait`/`multi_get`/`barrier` when none is given.
    pub wait_timeout: Duration,
    /// Shared secret for the handshake (`LOWCON_STORE_TOKEN`).
    pub token: Option<Vec<u8>>,
}

impl Default for ClientOptions {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(60),
            call_timeout: Duration::from_secs(60),
            wait_timeout: Duration::from_secs(300),
            token: None,
        }
    }
}

impl ClientOptions {
    /// Defaults, with the token taken from `LOWCON_STORE_TOKEN` when set.
    pub fn from_env() -> Self {
        let token = std::env::var_os(crate::TOKEN_ENV).map(|t| t.into_encoded_bytes()).filter(|t| !t.is_empty());
        Self { token, ..Self::default() }
    }
}

/// Extra time the client allows past a server-side wait's deadline before it gives up
/// on the reply itself (the server answers TIMEOUT at the deadline).
const WAIT_GRACE: Duration = Duration::from_secs(10);

/// A blocking connection to a lowcon store.
pub struct StoreClient {
    addr: String,
    opts: ClientOptions,
    conn: Option<TcpStream>,
    /// Per-name call counters, so that helpers (barrier, all_gather, send/recv) used
    /// repeatedly under one name get fresh keys each time.
    generations: std::collections::HashMap<String, u64>,
    /// A second handle on the current connection, for [`StoreInterrupter`].
    interrupt: std::sync::Arc<std::sync::Mutex<Interrupt>>,
}

#[derive(Default)]
struct Interrupt {
    conn: Option<TcpStream>,
    interrupted: bool,
}

/// Breaks off a [`StoreClient`]'s call from another thread (an application's abort or
/// Ctrl-C): the call in progress, and every later one, fails with an I/O error instead
/// of waiting out its timeout.
#[derive(Clone)]
pub struct StoreInterrupter(std::sync::Arc<std::sync::Mutex<Interrupt>>);

impl StoreInterrupter {
    /// Shuts the client's connection down; the client does not reconnect afterwards.
    pub fn interrupt(&self) {
        let mut i = self.0.lock().unwrap_or_else(|p| p.into_inner());
        i.interrupted = true;
        if let Some(c) = &i.conn {
            let _ = c.shutdown(std::net::Shutdown::Both);
        }
    }
}

impl std::fmt::Debug for StoreClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreClient").field("addr", &self.addr).field("connected", &self.conn.is_some()).finish()
    }
}

impl StoreClient {
    /// Connects to `addr` (`host:port`), retrying until `opts.connect_timeout`.
    pub fn connect(addr: impl Into<String>, opts: ClientOptions) -> Result<Self, StoreError> {
        let mut c = Self {
            addr: addr.into(),
            opts,
            conn: None,
            generations: Default::default(),
            interrupt: Default::default(),
        };
        c.ensure_connected()?;
        Ok(c)
    }

    /// The server address this client talks to.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// A handle that breaks off this client's calls from another thread.
    pub fn interrupter(&self) -> StoreInterrupter {
        StoreInterrupter(self.interrupt.clone())
    }

    fn ensure_connected(&mut self) -> Result<&mut TcpStream, StoreError> {
        if self.conn.is_none() {
            let c = self.open()?;
            let mut i = self.interrupt.lock().unwrap_or_else(|p| p.into_inner());
            if i.interrupted {
                let _ = c.shutdown(std::net::Shutdown::Both);
            }
            i.conn = c.try_clone().ok();
            drop(i);
            self.conn = Some(c);
        }
        Ok(self.conn.as_mut().expect("just connected"))
    }

    fn open(&self) -> Result<TcpStream, StoreError> {
        let start = Instant::now();
        let mut attempts = 0u32;
        let mut backoff = Duration::from_millis(10);
        loop {
            attempts += 1;
            match self.try_open(start) {
                Ok(s) => return Ok(s),
                Err(Attempt::Fatal(e)) => return Err(e),
                Err(Attempt::Retry(source)) => {
                    let elapsed = start.elapsed();
                    if elapsed >= self.opts.connect_timeout {
                        return Err(StoreError::Connect {
                            addr: self.addr.clone(),
                            attempts,
                            secs: elapsed.as_secs_f64(),
                            source,
                        });
                    }
                    std::thread::sleep(backoff.min(self.opts.connect_timeout - elapsed));
                    backoff = (backoff * 2).min(Duration::from_millis(500));
                }
            }
        }
    }

    fn try_open(&self, start: Instant) -> Result<TcpStream, Attempt> {
        let left = self.opts.connect_timeout.saturating_sub(start.elapsed()).max(Duration::from_millis(100));
        let addrs: Vec<_> = self
            .addr
            .to_socket_addrs()
            .map_err(|e| {
                Attempt::Fatal(StoreError::Connect { addr: self.addr.clone(), attempts: 1, secs: 0.0, source: e })
            })?
            .collect();
        let mut last = std::io::Error::new(ErrorKind::NotFound, "address resolved to nothing");
        for a in addrs {
            match TcpStream::connect_timeout(&a, left.min(Duration::from_secs(5))) {
                Ok(mut s) => {
                    let io = |e: std::io::Error| Attempt::Retry(e);
                    s.set_nodelay(true).map_err(io)?;
                    s.set_read_timeout(Some(left.min(Duration::from_secs(10)))).map_err(io)?;
                    s.set_write_timeout(Some(Duration::from_secs(10))).map_err(io)?;
                    let token = self.opts.token.clone().unwrap_or_default();
                    s.write_all(&protocol::encode_hello(&token)).map_err(io)?;
                    let mut head = [0u8; 9];
                    s.read_exact(&mut head).map_err(io)?;
                    if head[..4] != protocol::MAGIC {
                        return Err(Attempt::Fatal(StoreError::Refused {
                            addr: self.addr.clone(),
                            reason: "the server is not a lowcon store (wrong handshake magic)".into(),
                        }));
                    }
                    let msg_len = u16::from_le_bytes([head[7], head[8]]) as usize;
                    let mut msg = vec![0u8; msg_len];
                    s.read_exact(&mut msg).map_err(io)?;
                    if head[6] != protocol::HS_OK {
                        return Err(Attempt::Fatal(StoreError::Refused {
                            addr: self.addr.clone(),
                            reason: String::from_utf8_lossy(&msg).into_owned(),
                        }));
                    }
                    return Ok(s);
                }
                Err(e) => last = e,
            }
        }
        Err(Attempt::Retry(last))
    }

    /// Sends `req` and reads the reply within `timeout`. Any failure drops the
    /// connection (the next call reconnects).
    fn call(&mut self, req: &Request, timeout: Duration) -> Result<Response, StoreError> {
        let op = req.op_name();
        let keys = || protocol::show_keys(&req.keys());
        req.validate().map_err(|e| StoreError::InvalidArgument(format!("{op} of key(s) {}: {e}", keys())))?;
        let addr = self.addr.clone();
        let body = req.encode();
        let mut frame = Vec::with_capacity(4 + body.len());
        frame.extend_from_slice(&(body.len() as u32).to_le_bytes());
        frame.extend_from_slice(&body);
        let result = (|| {
            let s = self.ensure_connected()?;
            let io = |e: std::io::Error| classify(e, &addr, op, keys(), timeout);
            s.set_read_timeout(Some(timeout.max(Duration::from_millis(1)))).map_err(io)?;
            s.write_all(&frame).map_err(io)?;
            let mut len = [0u8; 4];
            s.read_exact(&mut len).map_err(io)?;
            let len = u32::from_le_bytes(len) as usize;
            if len > protocol::MAX_FRAME {
                return Err(StoreError::Protocol { addr: addr.clone(), op, message: format!("reply of {len} bytes") });
            }
            let mut body = vec![0u8; len];
            s.read_exact(&mut body).map_err(io)?;
            Response::decode(&body).map_err(|e| StoreError::Protocol { addr: addr.clone(), op, message: e.to_string() })
        })();
        match result {
            Ok(Response::Error(message)) => {
                // The server closes the connection after rejecting a frame.
                self.conn = None;
                Err(StoreError::Server { addr, op, keys: keys(), message })
            }
            Ok(Response::Timeout(missing)) => Err(StoreError::Timeout {
                addr,
                op,
                keys: protocol::show_keys(&missing),
                secs: timeout.saturating_sub(WAIT_GRACE).as_secs_f64(),
            }),
            Ok(r) => Ok(r),
            Err(e) => {
                self.conn = None;
                Err(e)
            }
        }
    }

    fn unexpected(&self, op: &'static str, r: Response) -> StoreError {
        StoreError::Protocol { addr: self.addr.clone(), op, message: format!("unexpected reply {r:?}") }
    }

    fn wait_ms(t: Duration) -> u64 {
        (t.as_millis() as u64).min(protocol::MAX_WAIT_MS)
    }

    /// Stores `value` under `key`.
    pub fn set(&mut self, key: &str, value: &[u8]) -> Result<(), StoreError> {
        let t = self.opts.call_timeout;
        match self.call(&Request::Set { key: key.into(), value: value.to_vec() }, t)? {
            Response::Ok => Ok(()),
            r => Err(self.unexpected("set", r)),
        }
    }

    /// The value of `key`, waiting up to the default wait timeout for it to be set.
    pub fn get(&mut self, key: &str) -> Result<Vec<u8>, StoreError> {
        self.get_timeout(key, self.opts.wait_timeout)
    }

    /// The value of `key`, waiting up to `timeout` for it to be set.
    pub fn get_timeout(&mut self, key: &str, timeout: Duration) -> Result<Vec<u8>, StoreError> {
        let req = Request::Get { key: key.into(), timeout_ms: Self::wait_ms(timeout) };
        match self.call(&req, timeout + WAIT_GRACE)? {
            Response::Value(v) => Ok(v),
            r => Err(self.unexpected("get", r)),
        }
    }

    /// Blocks until every key exists; the error after `timeout` lists the missing ones.
    pub fn wait(&mut self, keys: &[&str], timeout: Duration) -> Result<(), StoreError> {
        let req = Request::Wait {
            keys: keys.iter().map(|k| k.as_bytes().to_vec()).collect(),
            timeout_ms: Self::wait_ms(timeout),
        };
        match self.call(&req, timeout + WAIT_GRACE)? {
            Response::Ok => Ok(()),
            r => Err(self.unexpected("wait", r)),
        }
    }

    /// Atomically adds `delta` to the counter at `key` (0 if absent); returns the new value.
    pub fn add(&mut self, key: &str, delta: i64) -> Result<i64, StoreError> {
        let t = self.opts.call_timeout;
        match self.call(&Request::Add { key: key.into(), delta }, t)? {
            Response::Int(v) => Ok(v),
            r => Err(self.unexpected("add", r)),
        }
    }

    /// Sets `key` to `new` if it holds `expected` (or is absent and `expected` is empty);
    /// returns the value after the operation.
    pub fn compare_set(&mut self, key: &str, expected: &[u8], new: &[u8]) -> Result<Vec<u8>, StoreError> {
        let t = self.opts.call_timeout;
        let req = Request::CompareSet { key: key.into(), expected: expected.to_vec(), new: new.to_vec() };
        match self.call(&req, t)? {
            Response::Value(v) => Ok(v),
            r => Err(self.unexpected("compare_set", r)),
        }
    }

    /// Removes `key`; returns whether it existed.
    pub fn delete(&mut self, key: &str) -> Result<bool, StoreError> {
        let t = self.opts.call_timeout;
        match self.call(&Request::Delete { key: key.into() }, t)? {
            Response::Bool(b) => Ok(b),
            r => Err(self.unexpected("delete", r)),
        }
    }

    /// The number of keys in the store.
    pub fn num_keys(&mut self) -> Result<u64, StoreError> {
        let t = self.opts.call_timeout;
        match self.call(&Request::NumKeys, t)? {
            Response::Int(n) => Ok(n as u64),
            r => Err(self.unexpected("num_keys", r)),
        }
    }

    /// Whether every key exists, without waiting.
    pub fn check(&mut self, keys: &[&str]) -> Result<bool, StoreError> {
        let t = self.opts.call_timeout;
        match self.call(&Request::Check { keys: keys.iter().map(|k| k.as_bytes().to_vec()).collect() }, t)? {
            Response::Bool(b) => Ok(b),
            r => Err(self.unexpected("check", r)),
        }
    }

    /// The values of all keys, in order, waiting up to `timeout` for all to exist.
    pub fn multi_get(&mut self, keys: &[&str], timeout: Duration) -> Result<Vec<Vec<u8>>, StoreError> {
        let req = Request::MultiGet {
            keys: keys.iter().map(|k| k.as_bytes().to_vec()).collect(),
            timeout_ms: Self::wait_ms(timeout),
        };
        match self.call(&req, timeout + WAIT_GRACE)? {
            Response::Values(v) if v.len() == keys.len() => Ok(v),
            r => Err(self.unexpected("multi_get", r)),
        }
    }

    /// Stores every pair in one request.
    pub fn multi_set(&mut self, pairs: &[(&str, &[u8])]) -> Result<(), StoreError> {
        let t = self.opts.call_timeout;
        let req = Request::MultiSet { pairs: pairs.iter().map(|(k, v)| (k.as_bytes().to_vec(), v.to_vec())).collect() };
        match self.call(&req, t)? {
            Response::Ok => Ok(()),
            r => Err(self.unexpected("multi_set", r)),
        }
    }

    /// Checks that the server answers.
    pub fn ping(&mut self) -> Result<(), StoreError> {
        let t = self.opts.call_timeout;
        match self.call(&Request::Ping, t)? {
            Response::Ok => Ok(()),
            r => Err(self.unexpected("ping", r)),
        }
    }

    fn next_generation(&mut self, name: &str) -> u64 {
        let g = self.generations.entry(name.to_string()).or_insert(0);
        *g += 1;
        *g
    }

    /// Blocks until `world_size` clients have called `barrier(name, ...)`.
    ///
    /// Reusable: each client counts its calls per name, so the k-th barrier of a name
    /// only meets other clients' k-th barriers (every rank must call it equally often).
    pub fn barrier(&mut self, name: &str, world_size: usize, timeout: Duration) -> Result<(), StoreError> {
        if world_size == 0 {
            return Err(StoreError::InvalidArgument(format!("barrier {name:?}: a world of 0 ranks")));
        }
        let generation = self.next_generation(&format!("barrier/{name}"));
        let base = format!("lowcon/barrier/{name}/{generation}");
        let arrived = self.add(&format!("{base}/arrived"), 1)?;
        if arrived as usize == world_size {
            self.set(&format!("{base}/done"), b"1")?;
        } else if arrived as usize > world_size {
            return Err(StoreError::InvalidArgument(format!(
                "barrier {name:?}: {arrived} arrivals for a world of {world_size} (ranks disagree on the world size?)"
            )));
        }
        match self.wait(&[&format!("{base}/done")], timeout) {
            Err(StoreError::Timeout { addr, secs, .. }) => {
                // How many came, read once more now (adding 0), so the error says it.
                let came = match self.add(&format!("{base}/arrived"), 0) {
                    Ok(n) => format!("{n} of {world_size} ranks arrived"),
                    Err(_) => format!("only some of {world_size} ranks arrived"),
                };
                Err(StoreError::Timeout { addr, op: "barrier", keys: format!("{base}/done ({came})"), secs })
            }
            r => r,
        }
    }

    /// Every rank contributes `data`; returns all ranks' contributions in rank order.
    pub fn all_gather(
        &mut self,
        name: &str,
        rank: usize,
        world_size: usize,
        data: &[u8],
        timeout: Duration,
    ) -> Result<Vec<Vec<u8>>, StoreError> {
        if rank >= world_size {
            return Err(StoreError::InvalidArgument(format!(
                "all_gather {name:?}: rank {rank} >= world size {world_size}"
            )));
        }
        let generation = self.next_generation(&format!("all_gather/{name}"));
        let base = format!("lowcon/all_gather/{name}/{generation}");
        self.set(&format!("{base}/{rank}"), data)?;
        let keys: Vec<String> = (0..world_size).map(|r| format!("{base}/{r}")).collect();
        let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
        self.multi_get(&refs, timeout)
    }

    /// Sends `data` to rank `to` under `tag` (received by `recv(tag, from = my rank)`).
    pub fn send(&mut self, tag: &str, from: usize, to: usize, data: &[u8]) -> Result<(), StoreError> {
        let seq = self.next_generation(&format!("p2p/{tag}/{from}->{to}"));
        self.set(&format!("lowcon/p2p/{tag}/{from}->{to}/{seq}"), data)
    }

    /// Receives the next message rank `from` sent to rank `to` under `tag`, waiting up
    /// to `timeout`; the key is deleted once read.
    pub fn recv(&mut self, tag: &str, from: usize, to: usize, timeout: Duration) -> Result<Vec<u8>, StoreError> {
        let seq = self.next_generation(&format!("p2p/{tag}/{from}->{to}"));
        let key = format!("lowcon/p2p/{tag}/{from}->{to}/{seq}");
        let v = self.get_timeout(&key, timeout)?;
        self.delete(&key)?;
        Ok(v)
    }
}

enum Attempt {
    Retry(std::io::Error),
    Fatal(StoreError),
}

fn classify(e: std::io::Error, addr: &str, op: &'static str, keys: String, timeout: Duration) -> StoreError {
    match e.kind() {
        ErrorKind::WouldBlock | ErrorKind::TimedOut => {
            StoreError::Timeout { addr: addr.into(), op, keys, secs: timeout.as_secs_f64() }
        }
        ErrorKind::UnexpectedEof
        | ErrorKind::ConnectionReset
        | ErrorKind::BrokenPipe
        | ErrorKind::ConnectionAborted => StoreError::Disconnected { addr: addr.into(), op, keys },
        _ => StoreError::Io { addr: addr.into(), op, keys, source: e },
    }
}
