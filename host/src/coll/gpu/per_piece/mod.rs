//! The per-piece signals of the fused tensor-parallel ops (`lowcon.tp`): a consumer that
//! starts on an all-gather's pieces as they land, and a producer that releases a
//! reduce-scatter's chunks as it writes them.
//!
//! - `arrivals`: one CUDA event per rank, recorded as each all-gather piece lands
//!   (NOTE [per-piece arrivals]);
//! - `released`: the released reduce-scatter, each chunk a point-to-point round on the
//!   device (NOTE [release rounds]).
//!
//! The bf16 wire's per-piece words, another signal, are the sync layer's
//! (`sync/gpu/wire_pieces.rs`).

pub(crate) mod arrivals;
mod released;
