//! Instruments for the benchmarks (`lowcon bench`, the `lowcon-bench` crate): code that
//! drives lowcon's kernels outside any collective, to time or check them alone. Nothing
//! in the library's collectives uses it, and it is not part of the collectives' API: it
//! sits on the driver layer ([`crate::cuda`]) and its kernels, like a caller would.
//!
//! - [`reduce_kernels`]: the reduction kernels (ce-reduce's, the bf16 wire's pack and
//!   reduction, `tma-push-reduce`'s bulk reduce-add) and two controls on one GPU with no
//!   group, for `lowcon bench reduce-kernels`.

pub mod reduce_kernels;
