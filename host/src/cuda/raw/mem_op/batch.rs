//! `cuStreamBatchMemOp`: several stream memory operations as one queue entry (NOTE
//! [memop batches] in `crate::sync::gpu::graph`).

use super::super::*;
use super::{wait_geq_u32, write_u32};

/// One operation of [`batch`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// `*addr = value` (with the driver's default memory barrier before it).
    Write(sys::CUdeviceptr, u32),
    /// Wait until `(int32_t)(*addr - value) >= 0`.
    WaitGeq(sys::CUdeviceptr, u32),
}

/// Enqueues `ops`, in order, as one `cuStreamBatchMemOp` (`batched`): one queue entry
/// (one node of a captured graph) instead of one per operation; else one each (to
/// measure what batching saves). Nothing for no `ops`.
///
/// # Safety
/// Every address 4-byte-aligned device(-mapped) memory valid when the batch runs.
pub unsafe fn batch(stream: sys::CUstream, ops: &[Op], batched: bool) -> Result<()> {
    if ops.is_empty() {
        return Ok(());
    }
    if !batched {
        for op in ops {
            // SAFETY: forwarded from the caller.
            unsafe {
                match *op {
                    Op::Write(a, v) => write_u32(stream, a, v)?,
                    Op::WaitGeq(a, v) => wait_geq_u32(stream, a, v)?,
                }
            }
        }
        return Ok(());
    }
    let mut params: Vec<sys::CUstreamBatchMemOpParams> = ops
        .iter()
        .map(|op| {
            // SAFETY: an all-zero union is a valid value of these plain-data fields.
            let mut p: sys::CUstreamBatchMemOpParams = unsafe { std::mem::zeroed() };
            match *op {
                Op::Write(address, value) => {
                    p.writeValue.operation = sys::CUstreamBatchMemOpType::CU_STREAM_MEM_OP_WRITE_VALUE_32;
                    p.writeValue.address = address;
                    p.writeValue.__bindgen_anon_1.value = value;
                    p.writeValue.flags = sys::CUstreamWriteValue_flags::CU_STREAM_WRITE_VALUE_DEFAULT as u32;
                }
                Op::WaitGeq(address, value) => {
                    p.waitValue.operation = sys::CUstreamBatchMemOpType::CU_STREAM_MEM_OP_WAIT_VALUE_32;
                    p.waitValue.address = address;
                    p.waitValue.__bindgen_anon_1.value = value;
                    p.waitValue.flags = sys::CUstreamWaitValue_flags::CU_STREAM_WAIT_VALUE_GEQ as u32;
                }
            }
            p
        })
        .collect();
    let _t = crate::cuda::enqueued::time(crate::cuda::enqueued::Enqueue::Memop);
    // SAFETY: `params` holds `ops.len()` initialised entries; the addresses are the
    // caller's.
    check("cuStreamBatchMemOp", unsafe {
        sys::cuStreamBatchMemOp_v2(stream, params.len() as u32, params.as_mut_ptr(), 0)
    })
}
