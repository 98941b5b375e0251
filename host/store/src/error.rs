//! The store's one error type. Every variant says which address, operation and key.

use std::io;

/// Everything a store client (or server start-up) can fail with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// Could not connect before the connect timeout.
    #[error("cannot connect to the lowcon store at {addr} after {attempts} attempt(s) over {secs:.1} s: {source}")]
    Connect {
        addr: String,
        attempts: u32,
        secs: f64,
        #[source]
        source: io::Error,
    },
    /// The server refused the handshake (wrong token, other protocol version).
    #[error("the lowcon store at {addr} refused the connection: {reason}")]
    Refused { addr: String, reason: String },
    /// A wait (or the reply to any call) did not arrive in time.
    #[error("store {op} at {addr} timed out after {secs:.1} s waiting for key(s) {keys}")]
    Timeout { addr: String, op: &'static str, keys: String, secs: f64 },
    /// The server closed the connection in the middle of a call (it died or shut down).
    #[error(
        "the lowcon store at {addr} closed the connection during {op} of key(s) {keys}: the process hosting it \
         (rank 0 when no launcher does) has exited or stopped it, most often after an error of its own; its \
         output says which"
    )]
    Disconnected { addr: String, op: &'static str, keys: String },
    /// Any other socket error during a call.
    #[error("store {op} of key(s) {keys} at {addr}: {source}")]
    Io {
        addr: String,
        op: &'static str,
        keys: String,
        #[source]
        source: io::Error,
    },
    /// The server rejected the request (the message says why).
    #[error("the lowcon store at {addr} rejected {op} of key(s) {keys}: {message}")]
    Server { addr: String, op: &'static str, keys: String, message: String },
    /// The server's reply could not be decoded.
    #[error("malformed reply from the lowcon store at {addr} to {op}: {message}")]
    Protocol { addr: String, op: &'static str, message: String },
    /// A request that can never succeed (key or value over the size limits, ...).
    #[error("invalid store request: {0}")]
    InvalidArgument(String),
    /// A launcher/torchrun environment variable is missing or malformed.
    #[error("environment variable {var}: {reason}")]
    Env { var: &'static str, reason: String },
    /// The server could not start (bind failed, ...); `hint`: what may hold the address.
    #[error("cannot start the lowcon store on {addr}: {source}{hint}")]
    Bind {
        addr: String,
        #[source]
        source: io::Error,
        hint: &'static str,
    },
}
