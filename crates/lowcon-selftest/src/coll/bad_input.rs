//! Bad input on both backends: every refusal is an error naming the rank and sizes.

use super::*;

/// Expects `res` to be an `InvalidArgument` whose message contains every one of `want`.
fn expect_refused(what: &str, res: lowcon::Result<()>, want: &[&str]) -> Result<String, String> {
    match res {
        Err(err @ lowcon::Error::InvalidArgument(_)) => {
            let m = err.to_string();
            match want.iter().find(|w| !m.contains(*w)) {
                None => Ok(m),
                Some(w) => Err(format!("{what}: the message does not mention {w:?}: {m}")),
            }
        }
        Err(other) => Err(format!("{what}: expected InvalidArgument, got {other}")),
        Ok(()) => Err(format!("{what}: accepted")),
    }
}

/// Bad calls on the host backend: each must be refused with a clear message, and the
/// group must still work afterwards (nothing half-done, no epoch advanced).
pub fn host_bad_input() -> Result<String, String> {
    let run = Runner::from_env(false, None)?;
    let g = run.g.as_host().ok_or("the host backend's bad input on a GPU group")?;
    let (rank, world) = (g.rank(), g.world_size());
    let rk = format!("rank {rank}");
    let input = vec![1u8; 64];
    let mut small = vec![0u8; 64 * world - 4];
    let mut out = vec![0u8; 64 * world];
    let mut notes = Vec::new();
    let ag = AllGatherOptions::default();
    notes.push(expect_refused(
        "short all-gather output",
        g.all_gather(HostInput::Plain(&input), &mut small, DType::F32, &ag),
        &[&rk, &format!("{} elements", 16 * world - 1)],
    )?);
    let mut rs_out = vec![0u8; 64];
    let rs = ReduceScatterOptions::default();
    notes.push(expect_refused(
        "i32 reduce-scatter with avg",
        g.reduce_scatter(HostInput::Plain(&out), &mut rs_out, DType::I32, ReduceOp::Avg, &rs),
        &[&rk, "reduce-scatter of i32 with avg"],
    )?);
    let tma = ReduceScatterOptions { algorithm: ReduceScatterAlgorithm::TmaReduce, ..rs };
    notes.push(expect_refused(
        "i64 reduce-scatter with tma-reduce",
        g.reduce_scatter(HostInput::Plain(&out), &mut rs_out, DType::I64, ReduceOp::Max, &tma),
        &[&rk, "tma-reduce", "ce-reduce or sm-direct"],
    )?);
    let push = ReduceScatterOptions { algorithm: ReduceScatterAlgorithm::TmaPushReduce, ..rs };
    notes.push(expect_refused(
        "tma-push-reduce with max",
        g.reduce_scatter(HostInput::Plain(&out), &mut rs_out, DType::F32, ReduceOp::Max, &push),
        &[&rk, "op max", "tma-push-reduce"],
    )?);
    let once = ReduceScatterOptions { reduce_launch: ReduceLaunch::Once, ..rs };
    let once_direct = ReduceScatterOptions { algorithm: ReduceScatterAlgorithm::SmDirect, ..once };
    notes.push(expect_refused(
        "one reduction launch with sm-direct",
        g.reduce_scatter(HostInput::Plain(&out), &mut rs_out, DType::F32, ReduceOp::Sum, &once_direct),
        &[&rk, "reduce launch once", "ce-reduce only, not sm-direct"],
    )?);
    let once_ce = ReduceScatterOptions { algorithm: ReduceScatterAlgorithm::CeReduce, ..once };
    notes.push(expect_refused(
        "one reduction launch of i32",
        g.reduce_scatter(HostInput::Plain(&out), &mut rs_out, DType::I32, ReduceOp::Sum, &once_ce),
        &[&rk, "reduce launch once", "not i32"],
    )?);
    let mut rs_short = vec![0u8; 60];
    notes.push(expect_refused(
        "reduce-scatter output of the wrong size",
        g.reduce_scatter(HostInput::Plain(&out), &mut rs_short, DType::F32, ReduceOp::Sum, &rs),
        &[&rk, "needs"],
    )?);
    let no_stage = AllGatherOptions { algorithm: AllGatherAlgorithm::CePull, allow_staging: false, ..ag };
    notes.push(expect_refused(
        "ordinary input with staging disabled",
        g.all_gather(HostInput::Plain(&input), &mut out, DType::F32, &no_stage),
        &[&rk, "needs a symmetric input"],
    )?);
    notes.push(expect_refused(
        "channel out of range",
        g.all_gather(HostInput::Plain(&input), &mut out, DType::F32, &AllGatherOptions { channel: 99, ..ag }),
        &["channel 99"],
    )?);
    // The group is intact: a real call still works.
    let ok = Case {
        launch: ReduceLaunch::Auto,
        arrival: Arrival::Auto,
        coll: Coll::ReduceScatter(ReduceScatterAlgorithm::Auto, ReduceOp::Sum),
        dtype: DType::F32,
        count: 100,
        symmetric: false,
        misalign: 0,
        sync: SyncMethod::Kernel,
        channel: 0,
    };
    check_case(&run, &ok, "after-bad")?;
    Ok(format!("{} bad calls refused, group still works; e.g. {}", notes.len(), notes[0]))
}

/// Bad calls on the GPU backend, as [`host_bad_input`], plus buffers on another GPU and
/// host memory passed as device memory.
pub fn gpu_bad_input() -> Result<String, String> {
    let run = Runner::from_env(true, None)?;
    let r = run.gpu("gpu-bad-input")?;
    let (rank, world) = (r.g.rank(), r.g.world_size());
    let rk = format!("rank {rank}");
    let st = r.stream.clone();
    let input = st.alloc_zeros::<f32>(16).map_err(e)?;
    let mut out = st.alloc_zeros::<f32>(16 * world).map_err(e)?;
    let mut short = st.alloc_zeros::<f32>(16 * world - 1).map_err(e)?;
    let ints = st.alloc_zeros::<i32>(16 * world).map_err(e)?;
    let mut int_out = st.alloc_zeros::<i32>(16).map_err(e)?;
    let ag = AllGatherOptions::default();
    let rs = ReduceScatterOptions::default();
    let mut notes = Vec::new();
    notes.push(expect_refused(
        "short all-gather output",
        r.g.all_gather(DeviceBuf::slice(&input), DeviceBuf::slice_mut(&mut short), &st, &ag),
        &[&rk, &format!("{} elements", 16 * world - 1)],
    )?);
    notes.push(expect_refused(
        "i32 reduce-scatter with avg",
        r.g.reduce_scatter(DeviceBuf::slice(&ints), DeviceBuf::slice_mut(&mut int_out), ReduceOp::Avg, &st, &rs),
        &[&rk, "reduce-scatter of i32 with avg"],
    )?);
    let ll = ReduceScatterOptions { algorithm: ReduceScatterAlgorithm::Ll, ..rs };
    notes.push(expect_refused(
        "i32 reduce-scatter with ll",
        r.g.reduce_scatter(DeviceBuf::slice(&ints), DeviceBuf::slice_mut(&mut int_out), ReduceOp::Sum, &st, &ll),
        &[&rk, "with ll", "ce-reduce or sm-direct"],
    )?);
    let once = ReduceScatterOptions {
        algorithm: ReduceScatterAlgorithm::CeReduce,
        reduce_launch: ReduceLaunch::Once,
        pipeline: Some(65),
        ..rs
    };
    let mut f_out = st.alloc_zeros::<f32>(65 * 64).map_err(e)?;
    let f_in = st.alloc_zeros::<f32>(65 * 64 * world).map_err(e)?;
    notes.push(expect_refused(
        "one reduction launch of 65 pieces",
        r.g.reduce_scatter(DeviceBuf::slice(&f_in), DeviceBuf::slice_mut(&mut f_out), ReduceOp::Sum, &st, &once),
        &[&rk, "reduce launch once", "at most 64 pieces, not 65"],
    )?);
    let once_ll = ReduceScatterOptions { algorithm: ReduceScatterAlgorithm::Ll, pipeline: None, ..once };
    notes.push(expect_refused(
        "one reduction launch with ll",
        r.g.reduce_scatter(DeviceBuf::slice(&f_in), DeviceBuf::slice_mut(&mut f_out), ReduceOp::Sum, &st, &once_ll),
        &[&rk, "reduce launch once", "ce-reduce only, not ll"],
    )?);
    // sm-direct named: auto picks `ll` for small chunks at 2 ranks, which needs no staging.
    let no_stage = ReduceScatterOptions { algorithm: ReduceScatterAlgorithm::SmDirect, allow_staging: false, ..rs };
    let mut rs_out = st.alloc_zeros::<f32>(4).map_err(e)?;
    let rs_in = st.alloc_zeros::<f32>(4 * world).map_err(e)?;
    notes.push(expect_refused(
        "ordinary input with staging disabled",
        r.g.reduce_scatter(DeviceBuf::slice(&rs_in), DeviceBuf::slice_mut(&mut rs_out), ReduceOp::Sum, &st, &no_stage),
        &[&rk, "needs a symmetric input"],
    )?);
    let push = ReduceScatterOptions { algorithm: ReduceScatterAlgorithm::TmaPushReduce, ..rs };
    notes.push(expect_refused(
        "tma-push-reduce with avg",
        r.g.reduce_scatter(DeviceBuf::slice(&rs_in), DeviceBuf::slice_mut(&mut rs_out), ReduceOp::Avg, &st, &push),
        &[&rk, "op avg", "tma-push-reduce"],
    )?);
    let host_mem = [0f32; 16];
    // SAFETY: deliberately wrong (host memory); the call must refuse it before any use.
    let host_buf = unsafe { DeviceBuf::from_raw(host_mem.as_ptr() as u64, 16, DType::F32) };
    notes.push(expect_refused(
        "host memory as input",
        r.g.all_gather(host_buf, DeviceBuf::slice_mut(&mut out), &st, &ag),
        &[&rk, "not device memory"],
    )?);
    // A call that cannot be captured (synchronize), on a stream being captured into a
    // CUDA graph: refused, and the capture itself stays valid (nothing was enqueued into
    // it). What captures refuse in full is in `coll::graph`.
    {
        use cudarc::driver::sys;
        let cs = r.g.device().stream(StreamPriority::Default).map_err(e)?;
        // SAFETY: a live stream of the current context; the capture is ended below.
        let begun = unsafe {
            sys::cuStreamBeginCapture_v2(cs.raw(), sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        };
        if begun != sys::CUresult::CUDA_SUCCESS {
            return Err(format!("{rk}: cuStreamBeginCapture failed: {begun:?}"));
        }
        let refused = expect_refused(
            "synchronize on a stream being captured",
            r.g.synchronize(&cs),
            &[&rk, "synchronize", "cannot be captured into a CUDA graph"],
        );
        let mut graph = std::ptr::null_mut();
        // SAFETY: ends the capture begun above; the (empty) graph is destroyed at once.
        let ended = unsafe { sys::cuStreamEndCapture(cs.raw(), &mut graph) };
        if !graph.is_null() {
            // SAFETY: the graph the capture returned, used by nothing.
            unsafe { sys::cuGraphDestroy(graph) };
        }
        notes.push(refused?);
        if ended != sys::CUresult::CUDA_SUCCESS {
            return Err(format!("{rk}: the capture was invalidated by the refused call: {ended:?}"));
        }
    }
    let count = lowcon::cuda::device_count().map_err(e)?;
    if count > 1 {
        let other = (r.g.device().index() + 1) % count;
        let dev = lowcon::cuda::Device::open(other).map_err(e)?;
        let os = dev.stream(StreamPriority::Default).map_err(e)?;
        let foreign = os.alloc_zeros::<f32>(16).map_err(e)?;
        r.g.device().bind_to_thread().map_err(e)?;
        notes.push(expect_refused(
            "input on another GPU",
            r.g.all_gather(DeviceBuf::slice(&foreign), DeviceBuf::slice_mut(&mut out), &st, &ag),
            &[&rk, &format!("on device {other}")],
        )?);
    }
    let ok = Case {
        launch: ReduceLaunch::Auto,
        arrival: Arrival::Auto,
        coll: Coll::AllGather(AllGatherAlgorithm::SmOneshot),
        dtype: DType::F32,
        count: 100,
        symmetric: true,
        misalign: 0,
        sync: SyncMethod::Kernel,
        channel: 0,
    };
    check_case(&run, &ok, "after-bad")?;
    Ok(format!("{} bad calls refused, group still works; e.g. {}", notes.len(), notes[0]))
}
