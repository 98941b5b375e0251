//! lowcon's rendezvous: a TCP key-value store, the way torch.distributed uses TCPStore.
//!
//! - [`server`]: a tokio server (`server::run(listener, shutdown)`), and
//!   [`StoreServer`], a handle that runs one on a background thread for synchronous code.
//! - [`StoreClient`]: a blocking client (the collective library is synchronous) with
//!   connect retry, per-call timeouts, and errors that name the key and the address;
//!   plus NCCL-bootstrap-style helpers: [`StoreClient::barrier`],
//!   [`StoreClient::all_gather`], [`StoreClient::send`]/[`StoreClient::recv`].
//! - [`protocol`]: the wire format (documented in `docs/store-protocol.md`); every decode
//!   is bounds-checked and returns an error, never panics.
//! - [`env`](mod@env): the torchrun environment contract (`RANK`, `WORLD_SIZE`, ...).
//! - [`kv`]: [`Store`], what a group needs of any key-value store (this one, or a
//!   framework's), with barriers and all-gathers built on it.

pub mod client;
pub mod env;
mod error;
pub mod kv;
pub mod protocol;
pub mod server;

pub use client::{ClientOptions, StoreClient, StoreInterrupter};
pub use env::{RankEnv, Rendezvous};
pub use error::StoreError;
pub use kv::Store;
pub use server::{ServerOptions, StoreServer};

/// The variable holding the optional shared secret checked in the handshake.
pub const TOKEN_ENV: &str = "LOWCON_STORE_TOKEN";
