//! Thread-index and CTA-barrier helpers over `core::arch::nvptx`.

use core::arch::asm;
use core::arch::nvptx;

/// `threadIdx.x`.
#[inline(always)]
pub fn thread_idx_x() -> u32 {
    // SAFETY: reading a special register has no preconditions.
    unsafe { nvptx::_thread_idx_x() as u32 }
}

/// `blockDim.x`.
#[inline(always)]
pub fn block_dim_x() -> u32 {
    // SAFETY: reading a special register has no preconditions.
    unsafe { nvptx::_block_dim_x() as u32 }
}

/// `blockIdx.x`.
#[inline(always)]
pub fn block_idx_x() -> u32 {
    // SAFETY: reading a special register has no preconditions.
    unsafe { nvptx::_block_idx_x() as u32 }
}

/// `gridDim.x`.
#[inline(always)]
pub fn grid_dim_x() -> u32 {
    // SAFETY: reading a special register has no preconditions.
    unsafe { nvptx::_grid_dim_x() as u32 }
}

/// The global thread index and the grid-stride step, as `u64` (element counts may
/// exceed 2³²).
#[inline(always)]
pub fn grid_stride() -> (u64, u64) {
    let idx = block_idx_x() as u64 * block_dim_x() as u64 + thread_idx_x() as u64;
    (idx, grid_dim_x() as u64 * block_dim_x() as u64)
}

/// `bar.red.or.pred`: a CTA barrier (like `__syncthreads`) that also returns whether any
/// thread passed `true`. Every thread of the CTA must call it.
#[inline(always)]
pub fn sync_threads_or(pred: bool) -> bool {
    let out: u32;
    // SAFETY: a CTA barrier with a reduction; all threads of the CTA reach it (caller's
    // contract, as for __syncthreads). It orders memory among the CTA's threads.
    unsafe {
        asm!(
            "{{ .reg .pred %lp_in; .reg .pred %lp_out;",
            "setp.ne.u32 %lp_in, {x}, 0;",
            "bar.red.or.pred %lp_out, 0, %lp_in;",
            "selp.u32 {o}, 1, 0, %lp_out; }}",
            x = in(reg32) pred as u32,
            o = out(reg32) out,
            options(nostack)
        )
    };
    out != 0
}

/// Waits until the grids this one depends on programmatically have completed and their
/// memory is visible (`griddepcontrol.wait`; returns at once for a grid launched
/// without programmatic serialization). NOTE [LL launch overlap] in
/// `host/src/cuda/kernels.rs`.
#[inline(always)]
pub fn wait_prior_grids() {
    // SAFETY: no operands; valid PTX from ISA 7.8 on sm_90 (the kernels' target).
    unsafe { asm!("griddepcontrol.wait;", options(nostack)) };
}

/// Lets the stream's next programmatically serialized grid be scheduled once every CTA
/// of this one has called this or exited (`griddepcontrol.launch_dependents`).
#[inline(always)]
pub fn launch_dependents() {
    // SAFETY: as `wait_prior_grids`.
    unsafe { asm!("griddepcontrol.launch_dependents;", options(nostack)) };
}
