//! What a captured CUDA graph holds: its nodes by type (`cuGraphGetNodes`,
//! `cuGraphNodeGetType`), to check which kind of synchronisation a capture recorded.

use super::*;

/// Counts of a graph's nodes by type.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NodeCounts {
    /// Every node.
    pub total: usize,
    /// Kernel launches.
    pub kernels: usize,
    /// Stream memory operations (the driver captures each wait, write or batch of
    /// them as one batch node).
    pub mem_ops: usize,
    /// Copies and memsets.
    pub copies: usize,
}

/// `CU_GRAPH_NODE_TYPE_*` as the driver numbers them (read as integers: a type this
/// crate's bindings do not know must not become an invalid enum value).
const KERNEL: u32 = 0;
const MEMCPY: u32 = 1;
const MEMSET: u32 = 2;
const BATCH_MEM_OP: u32 = 12;

/// The nodes of `graph` by type.
///
/// # Safety
/// `graph` is a live graph (not an executable one).
pub unsafe fn node_counts(graph: sys::CUgraph) -> Result<NodeCounts> {
    let mut n = 0usize;
    // SAFETY: a null array asks for the count only; valid out-pointer.
    check("cuGraphGetNodes", unsafe { sys::cuGraphGetNodes(graph, std::ptr::null_mut(), &mut n) })?;
    let mut nodes = vec![std::ptr::null_mut(); n];
    // SAFETY: `nodes` has room for `n` handles; `n` is updated to the number written.
    check("cuGraphGetNodes", unsafe { sys::cuGraphGetNodes(graph, nodes.as_mut_ptr(), &mut n) })?;
    nodes.truncate(n);
    let mut c = NodeCounts { total: n, ..Default::default() };
    for node in nodes {
        let mut ty = u32::MAX;
        // SAFETY: a node of the live graph; the driver writes a 4-byte enum, read back
        // as the integer it is.
        check("cuGraphNodeGetType", unsafe {
            sys::cuGraphNodeGetType(node, (&raw mut ty).cast::<sys::CUgraphNodeType>())
        })?;
        match ty {
            KERNEL => c.kernels += 1,
            MEMCPY | MEMSET => c.copies += 1,
            BATCH_MEM_OP => c.mem_ops += 1,
            _ => {}
        }
    }
    Ok(c)
}
