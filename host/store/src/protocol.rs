//! The store's wire format: a handshake, then length-prefixed binary frames.
//!
//! All integers are little-endian. Full description: `docs/store-protocol.md`.
//!
//! ```text
//! handshake  client → server: "LCST" u16:version u16:token_len token
//!            server → client: "LCST" u16:version u8:status u16:msg_len msg
//! frame      u32:body_len body          (body_len ≤ MAX_FRAME)
//! request    u8:op fields...
//! response   u8:status payload...       (OK / TIMEOUT missing-keys / ERROR message)
//! bytes      u32:len data               list = u32:count items
//! ```
//!
//! Decoding never panics and never allocates more than the frame it was given: every
//! length is checked against the remaining input and the stated limits first
//! (property-tested in `tests/protocol_props.rs`).

use std::fmt;

/// Handshake magic.
pub const MAGIC: [u8; 4] = *b"LCST";
/// Protocol version; a server refuses any other.
pub const VERSION: u16 = 1;
/// Longest key, in bytes.
pub const MAX_KEY: usize = 4096;
/// Longest value, in bytes.
pub const MAX_VALUE: usize = 16 << 20;
/// Most keys in one request (wait, multi_get, multi_set).
pub const MAX_KEYS: usize = 65_536;
/// Longest frame body, in bytes: one maximal value plus room for keys and headers.
pub const MAX_FRAME: usize = 64 << 20;
/// Longest handshake token, in bytes.
pub const MAX_TOKEN: usize = 1024;
/// Longest wait the server accepts, in milliseconds (one day).
pub const MAX_WAIT_MS: u64 = 24 * 3600 * 1000;

/// Handshake status: accepted.
pub const HS_OK: u8 = 0;
/// Handshake status: the client speaks another protocol version.
pub const HS_BAD_VERSION: u8 = 1;
/// Handshake status: the token does not match the server's.
pub const HS_BAD_TOKEN: u8 = 2;

/// A request from a client. Keys and values are bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    /// Stores `value` under `key`, replacing any value.
    Set { key: Vec<u8>, value: Vec<u8> },
    /// The value of `key`, waiting up to `timeout_ms` for it to exist.
    Get { key: Vec<u8>, timeout_ms: u64 },
    /// Returns once every key exists, or TIMEOUT after `timeout_ms`.
    Wait { keys: Vec<Vec<u8>>, timeout_ms: u64 },
    /// Adds `delta` to the integer stored (as decimal text) at `key` (0 if absent);
    /// returns the new value.
    Add { key: Vec<u8>, delta: i64 },
    /// Sets `key` to `new` if its value is `expected` (or it is absent and `expected` is
    /// empty); returns the value after the operation.
    CompareSet { key: Vec<u8>, expected: Vec<u8>, new: Vec<u8> },
    /// Removes `key`; returns whether it existed.
    Delete { key: Vec<u8> },
    /// The number of keys stored.
    NumKeys,
    /// The values of all `keys`, waiting up to `timeout_ms` for all to exist.
    MultiGet { keys: Vec<Vec<u8>>, timeout_ms: u64 },
    /// Stores every pair, atomically with respect to other requests.
    MultiSet { pairs: Vec<(Vec<u8>, Vec<u8>)> },
    /// Whether every key exists, without waiting.
    Check { keys: Vec<Vec<u8>> },
    /// Liveness check.
    Ping,
}

impl Request {
    /// The operation's name, for errors and logs.
    pub fn op_name(&self) -> &'static str {
        match self {
            Request::Set { .. } => "set",
            Request::Get { .. } => "get",
            Request::Wait { .. } => "wait",
            Request::Add { .. } => "add",
            Request::CompareSet { .. } => "compare_set",
            Request::Delete { .. } => "delete",
            Request::NumKeys => "num_keys",
            Request::MultiGet { .. } => "multi_get",
            Request::MultiSet { .. } => "multi_set",
            Request::Check { .. } => "check",
            Request::Ping => "ping",
        }
    }

    /// The keys the request names, for error messages.
    pub fn keys(&self) -> Vec<&[u8]> {
        match self {
            Request::Set { key, .. }
            | Request::Get { key, .. }
            | Request::Add { key, .. }
            | Request::CompareSet { key, .. }
            | Request::Delete { key } => vec![key],
            Request::Wait { keys, .. } | Request::MultiGet { keys, .. } | Request::Check { keys } => {
                keys.iter().map(|k| k.as_slice()).collect()
            }
            Request::MultiSet { pairs } => pairs.iter().map(|(k, _)| k.as_slice()).collect(),
            Request::NumKeys | Request::Ping => vec![],
        }
    }

    /// Checks the size limits; the server applies the same checks when decoding.
    pub fn validate(&self) -> Result<(), DecodeError> {
        let key = |k: &[u8]| {
            if k.len() > MAX_KEY {
                Err(DecodeError::TooLarge { what: "key", len: k.len(), max: MAX_KEY })
            } else {
                Ok(())
            }
        };
        let value = |v: &[u8]| {
            if v.len() > MAX_VALUE {
                Err(DecodeError::TooLarge { what: "value", len: v.len(), max: MAX_VALUE })
            } else {
                Ok(())
            }
        };
        let count = |n: usize| {
            if n > MAX_KEYS { Err(DecodeError::TooLarge { what: "key count", len: n, max: MAX_KEYS }) } else { Ok(()) }
        };
        let wait = |t: u64| {
            if t > MAX_WAIT_MS {
                Err(DecodeError::TooLarge { what: "timeout_ms", len: t as usize, max: MAX_WAIT_MS as usize })
            } else {
                Ok(())
            }
        };
        match self {
            Request::Set { key: k, value: v } => {
                key(k)?;
                value(v)
            }
            Request::Get { key: k, timeout_ms } => {
                key(k)?;
                wait(*timeout_ms)
            }
            Request::Wait { keys, timeout_ms } | Request::MultiGet { keys, timeout_ms } => {
                count(keys.len())?;
                keys.iter().try_for_each(|k| key(k))?;
                wait(*timeout_ms)
            }
            Request::Check { keys } => {
                count(keys.len())?;
                keys.iter().try_for_each(|k| key(k))
            }
            Request::Add { key: k, .. } | Request::Delete { key: k } => key(k),
            Request::CompareSet { key: k, expected, new } => {
                key(k)?;
                value(expected)?;
                value(new)
            }
            Request::MultiSet { pairs } => {
                count(pairs.len())?;
                pairs.iter().try_for_each(|(k, v)| key(k).and_then(|_| value(v)))
            }
            Request::NumKeys | Request::Ping => Ok(()),
        }
    }

    /// Encodes the request body (without the frame's length prefix).
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::default();
        match self {
            Request::Set { key, value } => {
                w.u8(op::SET);
                w.bytes(key);
                w.bytes(value);
            }
            Request::Get { key, timeout_ms } => {
                w.u8(op::GET);
                w.bytes(key);
                w.u64(*timeout_ms);
            }
            Request::Wait { keys, timeout_ms } => {
                w.u8(op::WAIT);
                w.list(keys);
                w.u64(*timeout_ms);
            }
            Request::Add { key, delta } => {
                w.u8(op::ADD);
                w.bytes(key);
                w.u64(*delta as u64);
            }
            Request::CompareSet { key, expected, new } => {
                w.u8(op::COMPARE_SET);
                w.bytes(key);
                w.bytes(expected);
                w.bytes(new);
            }
            Request::Delete { key } => {
                w.u8(op::DELETE);
                w.bytes(key);
            }
            Request::NumKeys => w.u8(op::NUM_KEYS),
            Request::MultiGet { keys, timeout_ms } => {
                w.u8(op::MULTI_GET);
                w.list(keys);
                w.u64(*timeout_ms);
            }
            Request::MultiSet { pairs } => {
                w.u8(op::MULTI_SET);
                w.u32(pairs.len() as u32);
                for (k, v) in pairs {
                    w.bytes(k);
                    w.bytes(v);
                }
            }
            Request::Check { keys } => {
                w.u8(op::CHECK);
                w.list(keys);
            }
            Request::Ping => w.u8(op::PING),
        }
        w.0
    }

    /// Decodes a request body. Errors name what was wrong; trailing bytes are an error.
    pub fn decode(body: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(body);
        let req = match r.u8("op")? {
            op::SET => Request::Set { key: r.key()?, value: r.value()? },
            op::GET => Request::Get { key: r.key()?, timeout_ms: r.u64("timeout_ms")? },
            op::WAIT => Request::Wait { keys: r.keys()?, timeout_ms: r.u64("timeout_ms")? },
            op::ADD => Request::Add { key: r.key()?, delta: r.u64("delta")? as i64 },
            op::COMPARE_SET => Request::CompareSet { key: r.key()?, expected: r.value()?, new: r.value()? },
            op::DELETE => Request::Delete { key: r.key()? },
            op::NUM_KEYS => Request::NumKeys,
            op::MULTI_GET => Request::MultiGet { keys: r.keys()?, timeout_ms: r.u64("timeout_ms")? },
            op::MULTI_SET => {
                let n = r.count()?;
                let mut pairs = Vec::with_capacity(n.min(1024));
                for _ in 0..n {
                    pairs.push((r.key()?, r.value()?));
                }
                Request::MultiSet { pairs }
            }
            op::CHECK => Request::Check { keys: r.keys()? },
            op::PING => Request::Ping,
            other => return Err(DecodeError::UnknownOp(other)),
        };
        r.finish()?;
        req.validate()?;
        Ok(req)
    }
}

mod op {
    pub const SET: u8 = 1;
    pub const GET: u8 = 2;
    pub const WAIT: u8 = 3;
    pub const ADD: u8 = 4;
    pub const COMPARE_SET: u8 = 5;
    pub const DELETE: u8 = 6;
    pub const NUM_KEYS: u8 = 7;
    pub const MULTI_GET: u8 = 8;
    pub const MULTI_SET: u8 = 9;
    pub const CHECK: u8 = 10;
    pub const PING: u8 = 11;
}

/// A reply from the server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Response {
    /// Success with nothing to return (set, wait, multi_set, ping).
    Ok,
    /// One value (get, compare_set).
    Value(Vec<u8>),
    /// Several values, in request order (multi_get).
    Values(Vec<Vec<u8>>),
    /// An integer (add, num_keys).
    Int(i64),
    /// A boolean (delete, check).
    Bool(bool),
    /// The wait expired; these keys were still missing.
    Timeout(Vec<Vec<u8>>),
    /// The request was rejected; the message says why.
    Error(String),
}

mod status {
    pub const OK: u8 = 0;
    pub const VALUE: u8 = 1;
    pub const VALUES: u8 = 2;
    pub const INT: u8 = 3;
    pub const BOOL: u8 = 4;
    pub const TIMEOUT: u8 = 5;
    pub const ERROR: u8 = 6;
}

impl Response {
    /// Encodes the response body (without the frame's length prefix).
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::default();
        match self {
            Response::Ok => w.u8(status::OK),
            Response::Value(v) => {
                w.u8(status::VALUE);
                w.bytes(v);
            }
            Response::Values(vs) => {
                w.u8(status::VALUES);
                w.list(vs);
            }
            Response::Int(i) => {
                w.u8(status::INT);
                w.u64(*i as u64);
            }
            Response::Bool(b) => {
                w.u8(status::BOOL);
                w.u8(*b as u8);
            }
            Response::Timeout(keys) => {
                w.u8(status::TIMEOUT);
                w.list(keys);
            }
            Response::Error(msg) => {
                w.u8(status::ERROR);
                w.bytes(msg.as_bytes());
            }
        }
        w.0
    }

    /// Decodes a response body.
    pub fn decode(body: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(body);
        let resp = match r.u8("status")? {
            status::OK => Response::Ok,
            status::VALUE => Response::Value(r.value()?),
            status::VALUES => {
                let n = r.count()?;
                let mut vs = Vec::with_capacity(n.min(1024));
                for _ in 0..n {
                    vs.push(r.value()?);
                }
                Response::Values(vs)
            }
            status::INT => Response::Int(r.u64("int")? as i64),
            status::BOOL => Response::Bool(r.u8("bool")? != 0),
            status::TIMEOUT => Response::Timeout(r.keys()?),
            status::ERROR => Response::Error(String::from_utf8_lossy(&r.value()?).into_owned()),
            other => return Err(DecodeError::UnknownOp(other)),
        };
        r.finish()?;
        Ok(resp)
    }
}

/// Why a frame could not be decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// The input ended inside a field.
    Truncated { field: &'static str, need: usize, have: usize },
    /// A length or count over its limit.
    TooLarge { what: &'static str, len: usize, max: usize },
    /// An op (or status) code this version does not know.
    UnknownOp(u8),
    /// Bytes left over after a complete message.
    TrailingBytes(usize),
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::Truncated { field, need, have } => {
                write!(f, "truncated frame: {field} needs {need} byte(s), {have} left")
            }
            DecodeError::TooLarge { what, len, max } => write!(f, "{what} of {len} exceeds the limit of {max}"),
            DecodeError::UnknownOp(op) => write!(f, "unknown op code {op}"),
            DecodeError::TrailingBytes(n) => write!(f, "{n} unexpected byte(s) after the message"),
        }
    }
}

impl std::error::Error for DecodeError {}

#[derive(Default)]
struct Writer(Vec<u8>);

impl Writer {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn bytes(&mut self, b: &[u8]) {
        self.u32(b.len() as u32);
        self.0.extend_from_slice(b);
    }
    fn list(&mut self, items: &[Vec<u8>]) {
        self.u32(items.len() as u32);
        for i in items {
            self.bytes(i);
        }
    }
}

struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Self { buf }
    }
    fn take(&mut self, n: usize, field: &'static str) -> Result<&'a [u8], DecodeError> {
        if self.buf.len() < n {
            return Err(DecodeError::Truncated { field, need: n, have: self.buf.len() });
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }
    fn u8(&mut self, field: &'static str) -> Result<u8, DecodeError> {
        Ok(self.take(1, field)?[0])
    }
    fn u32(&mut self, field: &'static str) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(self.take(4, field)?.try_into().expect("4 bytes")))
    }
    fn u64(&mut self, field: &'static str) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(self.take(8, field)?.try_into().expect("8 bytes")))
    }
    fn sized(&mut self, what: &'static str, max: usize) -> Result<Vec<u8>, DecodeError> {
        let len = self.u32(what)? as usize;
        if len > max {
            return Err(DecodeError::TooLarge { what, len, max });
        }
        Ok(self.take(len, what)?.to_vec())
    }
    fn key(&mut self) -> Result<Vec<u8>, DecodeError> {
        self.sized("key", MAX_KEY)
    }
    fn value(&mut self) -> Result<Vec<u8>, DecodeError> {
        self.sized("value", MAX_VALUE)
    }
    fn count(&mut self) -> Result<usize, DecodeError> {
        let n = self.u32("count")? as usize;
        if n > MAX_KEYS {
            return Err(DecodeError::TooLarge { what: "key count", len: n, max: MAX_KEYS });
        }
        Ok(n)
    }
    fn keys(&mut self) -> Result<Vec<Vec<u8>>, DecodeError> {
        let n = self.count()?;
        // Each key needs at least its 4-byte length, so a count larger than the input
        // can hold is rejected before allocating.
        if n.saturating_mul(4) > self.buf.len() {
            return Err(DecodeError::Truncated { field: "keys", need: n * 4, have: self.buf.len() });
        }
        (0..n).map(|_| self.key()).collect()
    }
    fn finish(&self) -> Result<(), DecodeError> {
        if self.buf.is_empty() { Ok(()) } else { Err(DecodeError::TrailingBytes(self.buf.len())) }
    }
}

/// The client's handshake bytes.
pub fn encode_hello(token: &[u8]) -> Vec<u8> {
    let mut w = Writer::default();
    w.0.extend_from_slice(&MAGIC);
    w.0.extend_from_slice(&VERSION.to_le_bytes());
    w.0.extend_from_slice(&(token.len() as u16).to_le_bytes());
    w.0.extend_from_slice(token);
    w.0
}

/// The server's handshake reply.
pub fn encode_welcome(status: u8, message: &str) -> Vec<u8> {
    let msg = &message.as_bytes()[..message.len().min(1024)];
    let mut v = Vec::with_capacity(9 + msg.len());
    v.extend_from_slice(&MAGIC);
    v.extend_from_slice(&VERSION.to_le_bytes());
    v.push(status);
    v.extend_from_slice(&(msg.len() as u16).to_le_bytes());
    v.extend_from_slice(msg);
    v
}

/// Renders keys for error messages: UTF-8 where possible, at most 8 keys.
pub fn show_keys<K: AsRef<[u8]>>(keys: &[K]) -> String {
    let mut s: Vec<String> =
        keys.iter().take(8).map(|k| format!("{:?}", String::from_utf8_lossy(k.as_ref()))).collect();
    if keys.len() > 8 {
        s.push(format!("... ({} in all)", keys.len()));
    }
    if s.is_empty() { "(none)".into() } else { s.join(", ") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_every_request() {
        let reqs = vec![
            Request::Set { key: b"k".to_vec(), value: vec![0, 1, 2] },
            Request::Get { key: b"k".to_vec(), timeout_ms: 5 },
            Request::Wait { keys: vec![b"a".to_vec(), b"b".to_vec()], timeout_ms: 7 },
            Request::Add { key: b"c".to_vec(), delta: -3 },
            Request::CompareSet { key: b"k".to_vec(), expected: vec![], new: b"n".to_vec() },
            Request::Delete { key: b"k".to_vec() },
            Request::NumKeys,
            Request::MultiGet { keys: vec![b"a".to_vec()], timeout_ms: 0 },
            Request::MultiSet { pairs: vec![(b"a".to_vec(), b"1".to_vec())] },
            Request::Check { keys: vec![] },
            Request::Ping,
        ];
        for r in reqs {
            assert_eq!(Request::decode(&r.encode()).unwrap(), r);
        }
    }

    #[test]
    fn rejects_bad_frames_with_reasons() {
        assert_eq!(Request::decode(&[]), Err(DecodeError::Truncated { field: "op", need: 1, have: 0 }));
        assert_eq!(Request::decode(&[200]), Err(DecodeError::UnknownOp(200)));
        let mut long = vec![op::SET];
        long.extend_from_slice(&((MAX_KEY + 1) as u32).to_le_bytes());
        assert!(matches!(Request::decode(&long), Err(DecodeError::TooLarge { what: "key", .. })));
        let mut trailing = Request::Ping.encode();
        trailing.push(0);
        assert_eq!(Request::decode(&trailing), Err(DecodeError::TrailingBytes(1)));
        // A count that claims millions of keys in a tiny frame is refused before allocating.
        let mut wait = vec![op::WAIT];
        wait.extend_from_slice(&60_000u32.to_le_bytes());
        assert!(matches!(Request::decode(&wait), Err(DecodeError::Truncated { field: "keys", .. })));
    }

    #[test]
    fn validate_enforces_limits() {
        let big = Request::Set { key: b"k".to_vec(), value: vec![0; MAX_VALUE + 1] };
        assert!(matches!(big.validate(), Err(DecodeError::TooLarge { what: "value", .. })));
        let slow = Request::Get { key: b"k".to_vec(), timeout_ms: MAX_WAIT_MS + 1 };
        assert!(slow.validate().is_err());
    }
}
