//! The store server: tokio, one task per connection, waits that cost no busy loop.
//!
//! `run(listener, shutdown)` serves until `shutdown` resolves, so tests bind
//! `127.0.0.1:0`. [`StoreServer`] runs it on a background thread for synchronous
//! callers (rank 0, the launcher, `lowcon store serve`).
//!
//! NOTE [server robustness]: a client can only ever hurt its own connection. The
//! handshake must arrive within `handshake_timeout`; a frame, once started, must finish
//! within `frame_timeout`; over-long or malformed frames get an ERROR reply and the
//! connection is closed (a length prefix that cannot be trusted leaves no way to find
//! the next frame); a client that disconnects mid-frame or mid-wait ends only its task;
//! `accept` errors such as EMFILE are logged and retried after a pause, not fatal.

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use subtle::ConstantTimeEq;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::StoreError;
use crate::protocol::{self, DecodeError, Request, Response};

/// Server settings.
#[derive(Clone, Debug)]
pub struct ServerOptions {
    /// Shared secret a client must present (none: any client is accepted).
    pub token: Option<Vec<u8>>,
    /// How long a new connection may take to send its handshake.
    pub handshake_timeout: Duration,
    /// How long a started frame may take to arrive completely.
    pub frame_timeout: Duration,
    /// Print connection-level problems to stderr.
    pub log_errors: bool,
}

impl Default for ServerOptions {
    fn default() -> Self {
        Self {
            token: None,
            handshake_timeout: Duration::from_secs(10),
            frame_timeout: Duration::from_secs(30),
            log_errors: false,
        }
    }
}

impl ServerOptions {
    /// Defaults, with the token taken from `LOWCON_STORE_TOKEN` when set.
    pub fn from_env() -> Self {
        let token = std::env::var_os(crate::TOKEN_ENV).map(|t| t.into_encoded_bytes()).filter(|t| !t.is_empty());
        Self { token, ..Self::default() }
    }
}

/// The key-value map and, per missing key, the waiters to wake when it appears.
#[derive(Default)]
struct State {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    map: HashMap<Vec<u8>, Vec<u8>>,
    waiters: HashMap<Vec<u8>, Arc<Notify>>,
}

impl Inner {
    fn put(&mut self, key: Vec<u8>, value: Vec<u8>) {
        if let Some(n) = self.waiters.remove(&key) {
            n.notify_waiters();
        }
        self.map.insert(key, value);
    }
}

impl State {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave the map half-updated (every
        // mutation is a single insert/remove), so a poisoned lock is still usable.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits until every key exists or the deadline passes; returns the missing keys.
    ///
    /// Keys are awaited one after another, each on its own `Notify`, so a set wakes only
    /// the waiters of that key: N ranks waiting on N keys cost O(N²) wake-ups in total,
    /// not O(N³).
    async fn wait_for(&self, keys: &[Vec<u8>], deadline: Instant) -> Result<(), Vec<Vec<u8>>> {
        for key in keys {
            loop {
                let notified = {
                    let mut g = self.lock();
                    if g.map.contains_key(key) {
                        break;
                    }
                    // Registered while holding the lock, so a set that happens after we
                    // drop it cannot be missed.
                    let n = g.waiters.entry(key.clone()).or_default().clone();
                    let mut fut = Box::pin(n.notified_owned());
                    fut.as_mut().enable();
                    fut
                };
                if tokio::time::timeout_at(deadline, notified).await.is_err() {
                    let g = self.lock();
                    return Err(keys.iter().filter(|k| !g.map.contains_key(*k)).cloned().collect());
                }
            }
        }
        Ok(())
    }

    async fn apply(&self, req: Request) -> Response {
        let deadline = |ms: u64| Instant::now() + Duration::from_millis(ms);
        match req {
            Request::Set { key, value } => {
                self.lock().put(key, value);
                Response::Ok
            }
            Request::Get { key, timeout_ms } => {
                let keys = [key];
                match self.wait_for(&keys, deadline(timeout_ms)).await {
                    // The key may have been deleted between the wake-up and this read.
                    Ok(()) => match self.lock().map.get(&keys[0]) {
                        Some(v) => Response::Value(v.clone()),
                        None => Response::Timeout(keys.to_vec()),
                    },
                    Err(missing) => Response::Timeout(missing),
                }
            }
            Request::Wait { keys, timeout_ms } => match self.wait_for(&keys, deadline(timeout_ms)).await {
                Ok(()) => Response::Ok,
                Err(missing) => Response::Timeout(missing),
            },
            Request::MultiGet { keys, timeout_ms } => match self.wait_for(&keys, deadline(timeout_ms)).await {
                Ok(()) => {
                    let g = self.lock();
                    let vals: Option<Vec<Vec<u8>>> = keys.iter().map(|k| g.map.get(k).cloned()).collect();
                    match vals {
                        Some(v) => Response::Values(v),
                        None => Response::Timeout(keys.iter().filter(|k| !g.map.contains_key(*k)).cloned().collect()),
                    }
                }
                Err(missing) => Response::Timeout(missing),
            },
            Request::Add { key, delta } => {
                let mut g = self.lock();
                let cur = match g.map.get(&key) {
                    None => 0i64,
                    Some(v) => match std::str::from_utf8(v).ok().and_then(|s| s.parse::<i64>().ok()) {
                        Some(i) => i,
                        None => {
                            return Response::Error(format!(
                                "add: the value of key {} is not a decimal integer",
                                protocol::show_keys(&[&key])
                            ));
                        }
                    },
                };
                let Some(new) = cur.checked_add(delta) else {
                    return Response::Error(format!(
                        "add: {cur} + {delta} overflows for key {}",
                        protocol::show_keys(&[&key])
                    ));
                };
                g.put(key, new.to_string().into_bytes());
                Response::Int(new)
            }
            Request::CompareSet { key, expected, new } => {
                let mut g = self.lock();
                let matches = match g.map.get(&key) {
                    None => expected.is_empty(),
                    Some(cur) => *cur == expected,
                };
                if matches {
                    g.put(key, new.clone());
                    Response::Value(new)
                } else {
                    Response::Value(g.map.get(&key).cloned().unwrap_or_default())
                }
            }
            Request::Delete { key } => Response::Bool(self.lock().map.remove(&key).is_some()),
            Request::NumKeys => Response::Int(self.lock().map.len() as i64),
            Request::MultiSet { pairs } => {
                let mut g = self.lock();
                for (k, v) in pairs {
                    g.put(k, v);
                }
                Response::Ok
            }
            Request::Check { keys } => {
                let g = self.lock();
                Response::Bool(keys.iter().all(|k| g.map.contains_key(k)))
            }
            Request::Ping => Response::Ok,
        }
    }
}

/// Serves `listener` until `shutdown` completes, then closes every connection (clients
/// in the middle of a call get a "closed the connection" error).
pub async fn run(listener: TcpListener, shutdown: impl Future<Output = ()>, opts: ServerOptions) {
    let state = Arc::new(State::default());
    let opts = Arc::new(opts);
    let mut conns = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let (state, opts) = (state.clone(), opts.clone());
                    conns.spawn(async move {
                        if let Err(e) = serve_connection(stream, &state, &opts).await
                            && opts.log_errors
                        {
                            eprintln!("lowcon store: connection from {peer}: {e}");
                        }
                    });
                }
                Err(e) => {
                    // EMFILE/ENFILE and friends: keep serving the existing clients and
                    // retry after a pause instead of spinning or exiting.
                    if opts.log_errors {
                        eprintln!("lowcon store: accept failed: {e}");
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            // Reap finished connection tasks so the set does not grow without bound.
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
    conns.shutdown().await;
}

/// Why one connection ended (logged, never propagated to other clients).
#[derive(Debug, thiserror::Error)]
enum ConnError {
    #[error("no handshake within {0:?}")]
    HandshakeTimeout(Duration),
    #[error("bad handshake: {0}")]
    BadHandshake(String),
    #[error("frame not completed within {0:?}")]
    FrameTimeout(Duration),
    #[error("malformed frame: {0}")]
    Malformed(DecodeError),
    #[error("client sent data while a call was in progress")]
    Pipelined,
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

async fn serve_connection(mut stream: TcpStream, state: &State, opts: &ServerOptions) -> Result<(), ConnError> {
    stream.set_nodelay(true)?;
    tokio::time::timeout(opts.handshake_timeout, handshake(&mut stream, opts))
        .await
        .map_err(|_| ConnError::HandshakeTimeout(opts.handshake_timeout))??;
    loop {
        // Between calls a client may stay idle indefinitely.
        let mut len = [0u8; 4];
        match stream.read_exact(&mut len).await {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e.into()),
        }
        let len = u32::from_le_bytes(len) as usize;
        if len > protocol::MAX_FRAME {
            let err = DecodeError::TooLarge { what: "frame", len, max: protocol::MAX_FRAME };
            write_frame(&mut stream, &Response::Error(err.to_string()).encode()).await?;
            return Err(ConnError::Malformed(err));
        }
        let mut body = vec![0u8; len];
        tokio::time::timeout(opts.frame_timeout, stream.read_exact(&mut body))
            .await
            .map_err(|_| ConnError::FrameTimeout(opts.frame_timeout))??;
        let req = match Request::decode(&body) {
            Ok(r) => r,
            Err(e) => {
                write_frame(&mut stream, &Response::Error(e.to_string()).encode()).await?;
                return Err(ConnError::Malformed(e));
            }
        };
        // While a (possibly long) wait runs, watch the socket: the client sends nothing
        // until it has our reply, so readable data or EOF means it went away (or broke
        // the protocol) and the wait is abandoned instead of lingering.
        let mut probe = [0u8; 1];
        let resp = tokio::select! {
            resp = state.apply(req) => resp,
            r = stream.read(&mut probe) => return match r {
                Ok(0) => Ok(()),
                Ok(_) => Err(ConnError::Pipelined),
                Err(e) => Err(e.into()),
            },
        };
        write_frame(&mut stream, &resp.encode()).await?;
    }
}

async fn handshake(stream: &mut TcpStream, opts: &ServerOptions) -> Result<(), ConnError> {
    let mut head = [0u8; 8];
    stream.read_exact(&mut head).await?;
    if head[..4] != protocol::MAGIC {
        // Not a lowcon client (an HTTP probe, say): close without a reply.
        return Err(ConnError::BadHandshake(format!("wrong magic {:?}", &head[..4])));
    }
    let version = u16::from_le_bytes([head[4], head[5]]);
    let token_len = u16::from_le_bytes([head[6], head[7]]) as usize;
    if token_len > protocol::MAX_TOKEN {
        stream.write_all(&protocol::encode_welcome(protocol::HS_BAD_TOKEN, "token too long")).await?;
        return Err(ConnError::BadHandshake(format!("token of {token_len} bytes")));
    }
    let mut token = vec![0u8; token_len];
    stream.read_exact(&mut token).await?;
    if version != protocol::VERSION {
        let msg = format!("protocol version {version} not supported (server speaks {})", protocol::VERSION);
        stream.write_all(&protocol::encode_welcome(protocol::HS_BAD_VERSION, &msg)).await?;
        return Err(ConnError::BadHandshake(msg));
    }
    if let Some(expected) = &opts.token
        && !bool::from(token.ct_eq(expected))
    {
        let msg = "wrong or missing token (LOWCON_STORE_TOKEN)";
        stream.write_all(&protocol::encode_welcome(protocol::HS_BAD_TOKEN, msg)).await?;
        return Err(ConnError::BadHandshake(msg.into()));
    }
    stream.write_all(&protocol::encode_welcome(protocol::HS_OK, "")).await?;
    Ok(())
}

async fn write_frame(stream: &mut TcpStream, body: &[u8]) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(4 + body.len());
    buf.extend_from_slice(&(body.len() as u32).to_le_bytes());
    buf.extend_from_slice(body);
    stream.write_all(&buf).await
}

/// A store server running on its own thread, for synchronous code. Dropping it (or
/// calling [`StoreServer::shutdown`]) stops the server and closes every connection.
pub struct StoreServer {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl StoreServer {
    /// Binds `bind` (e.g. `127.0.0.1:0`) and starts serving.
    pub fn start(bind: &str, opts: ServerOptions) -> Result<Self, StoreError> {
        let bind_err = |source| StoreError::Bind { addr: bind.to_string(), source, hint: "" };
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("lowcon-store")
            .enable_all()
            .build()
            .map_err(bind_err)?;
        let listener = rt.block_on(TcpListener::bind(bind)).map_err(bind_err)?;
        let addr = listener.local_addr().map_err(bind_err)?;
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("lowcon-store-server".into())
            .spawn(move || {
                rt.block_on(run(
                    listener,
                    async move {
                        let _ = rx.await;
                    },
                    opts,
                ))
            })
            .map_err(bind_err)?;
        Ok(Self { addr, stop: Some(tx), thread: Some(thread) })
    }

    /// The address the server listens on (with the real port when bound to port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops the server and waits for it to close every connection.
    pub fn shutdown(mut self) {
        self.stop_and_join();
    }

    fn stop_and_join(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for StoreServer {
    fn drop(&mut self) {
        self.stop_and_join();
    }
}
