//! CUDA graphs: what a captured graph holds, its nodes by type (`cuGraphGetNodes`,
//! `cuGraphNodeGetType`), to check which kind of synchronisation a capture recorded;
//! and the capture, instantiation, update, launch and destruction of the graphs lowcon
//! captures for itself (NOTE [wire replays] in `crate::coll::gpu::replays`).

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

/// Starts a thread-local capture on `stream` (other threads' CUDA calls stay free).
///
/// # Safety
/// `stream` is a live stream of the current context, not being captured.
pub unsafe fn begin_capture(stream: sys::CUstream) -> Result<()> {
    // SAFETY: forwarded from the caller.
    check("cuStreamBeginCapture", unsafe {
        sys::cuStreamBeginCapture_v2(stream, sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
    })
}

/// Ends the capture on `stream`: its graph (null when nothing was recorded). The caller
/// owns the graph and destroys it with [`destroy_graph`].
///
/// # Safety
/// `stream` is being captured by [`begin_capture`] on this thread.
pub unsafe fn end_capture(stream: sys::CUstream) -> Result<sys::CUgraph> {
    let mut g = std::ptr::null_mut();
    // SAFETY: forwarded from the caller; valid out-pointer.
    check("cuStreamEndCapture", unsafe { sys::cuStreamEndCapture(stream, &mut g) })?;
    Ok(g)
}

/// An executable graph of `graph`. Its nodes run at the priority of the stream it is
/// launched into (no `CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY`), as a caller's
/// eager work does.
///
/// # Safety
/// `graph` is a live graph.
pub unsafe fn instantiate(graph: sys::CUgraph) -> Result<sys::CUgraphExec> {
    let mut exec = std::ptr::null_mut();
    // SAFETY: forwarded from the caller; valid out-pointer.
    check("cuGraphInstantiateWithFlags", unsafe { sys::cuGraphInstantiateWithFlags(&mut exec, graph, 0) })?;
    Ok(exec)
}

/// Updates `exec` in place to run `graph` (same topology, other parameters): whether
/// the driver could. On `false`, `exec` still runs what it ran before.
///
/// # Safety
/// Both are live; `exec` is not being launched by another thread.
pub unsafe fn update(exec: sys::CUgraphExec, graph: sys::CUgraph) -> Result<bool> {
    // SAFETY: all-zero is a valid value of this plain C struct (an enum and two handles).
    let mut info: sys::CUgraphExecUpdateResultInfo = unsafe { std::mem::zeroed() };
    // SAFETY: forwarded from the caller; valid out-pointer.
    let r = unsafe { sys::cuGraphExecUpdate_v2(exec, graph, &mut info) };
    match r {
        sys::CUresult::CUDA_SUCCESS => Ok(true),
        sys::CUresult::CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE => Ok(false),
        other => check("cuGraphExecUpdate", other).map(|()| false),
    }
}

/// Enqueues one run of `exec` on `stream` (counted as a launch, NOTE [enqueue clock]).
///
/// # Safety
/// Both are live, of the current context.
pub unsafe fn launch(exec: sys::CUgraphExec, stream: sys::CUstream) -> Result<()> {
    let _t = crate::cuda::enqueued::time(crate::cuda::enqueued::Enqueue::Launch);
    // SAFETY: forwarded from the caller.
    check("cuGraphLaunch", unsafe { sys::cuGraphLaunch(exec, stream) })
}

/// Destroys a graph (not an executable one).
///
/// # Safety
/// `graph` is live and not used after.
pub unsafe fn destroy_graph(graph: sys::CUgraph) -> Result<()> {
    // SAFETY: forwarded from the caller.
    check("cuGraphDestroy", unsafe { sys::cuGraphDestroy(graph) })
}

/// Destroys an executable graph; a run in flight finishes first (the driver frees it
/// once done).
///
/// # Safety
/// `exec` is live and not launched after.
pub unsafe fn destroy_exec(exec: sys::CUgraphExec) -> Result<()> {
    // SAFETY: forwarded from the caller.
    check("cuGraphExecDestroy", unsafe { sys::cuGraphExecDestroy(exec) })
}
