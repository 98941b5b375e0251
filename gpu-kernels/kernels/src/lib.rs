//! lowcon's device code: barrier, signal, reduction (plain, bulk-copy and LL) and test kernels.
//!
//! Compiled to PTX by `host/build.rs` (see `gpu-kernels/build`): rustc's own
//! `nvptx64-nvidia-cuda` backend, `-Zbuild-std=core`, and a bitcode link done with the
//! `llvm-tools` component (`llvm-link` → `opt` → `llc`). Every kernel is an
//! `extern "ptx-kernel"` function with a `#[unsafe(no_mangle)]` name listed in
//! `lowcon_abi::kernel_names`.
//!
//! Cross-GPU memory ordering never goes through `core::sync::atomic`: see [`atomics`].
#![no_std]
#![feature(abi_ptx, asm_experimental_arch, stdarch_nvptx)]
#![deny(unsafe_op_in_unsafe_fn)]

pub mod atomics;
pub mod bulk;
pub mod errors;
pub mod thread;

mod coll;
mod int;
mod ll;
mod once;
mod push;
mod reduce;
mod release;
mod sync;
mod test_kernels;
mod tma;
mod wire;

/// Kernels cannot unwind. A panic (an out-of-range slice index, say) traps the context;
/// kernels are written so that their inputs are checked on the host and they do not
/// index out of range, and bounded waits report through `ErrorRecord`, never by panic.
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    // SAFETY: `trap` aborts the kernel; nothing after it runs.
    unsafe { core::arch::nvptx::trap() }
}
