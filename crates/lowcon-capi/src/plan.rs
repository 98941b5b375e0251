//! What the planner would run for a call (NOTE [one planner]): `lowconCommPlan`.

use super::*;

/// `lowconCommPlan`'s `kind`: an all-gather.
pub const lowconPlanAllGather: c_int = 0;
/// `lowconCommPlan`'s `kind`: a reduce-scatter.
pub const lowconPlanReduceScatter: c_int = 1;

/// (Since 0.3.0) what the communicator's planner would run for a call, as text
/// (`algorithm=ce-reduce ctas=64 sync=memop pieces=4 wire=bf16 ... origin=TABLE:LINE`),
/// NUL-terminated into `plan` (`len` bytes; a `plan` too small is refused, naming the
/// size needed). `kind`: `lowconPlanAllGather` or `lowconPlanReduceScatter`; `count`:
/// elements per rank (the all-gather's send count, the reduce-scatter's receive count);
/// `symmetric`: nonzero when the memory peers read (the all-gather's receive buffer,
/// the reduce-scatter's send buffer) comes from `lowconMemAlloc`; `opts` (NULL:
/// defaults) as the call would pass them, its `recv_type` included. The options win
/// over the planner as in a call. Eager calls only (a captured call may plan its sync
/// otherwise).
///
/// # Safety
/// `opts` is NULL or a valid `lowconCollOptions`; `plan` points to `len` writable bytes.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn lowconCommPlan(
    comm: lowconComm_t,
    kind: c_int,
    count: usize,
    datatype: lowconDataType_t,
    op: lowconRedOp_t,
    symmetric: c_int,
    opts: *const lowconCollOptions,
    plan: *mut c_char,
    len: usize,
) -> lowconResult_t {
    guard(|| {
        let c = lookup(comm)?;
        let dt = dtype(datatype)?;
        let bytes = count
            .checked_mul(dt.size())
            .ok_or_else(|| invalid(format!("rank {}: count {count} overflows", c.rank())))?;
        let text = match kind {
            lowconPlanAllGather => {
                let (o, _) = options::<lowcon::AllGatherAlgorithm>(opts)?;
                let call =
                    lowcon::plan::AgCall { shard: bytes, dtype: dt, output_symmetric: symmetric != 0, captured: false };
                c.group.planner().all_gather(&call, &o).to_string()
            }
            lowconPlanReduceScatter => {
                let (o, recv) = options::<lowcon::ReduceScatterAlgorithm>(opts)?;
                let call = lowcon::plan::RsCall {
                    chunk: bytes,
                    input: dt,
                    output: recv.unwrap_or(dt),
                    op: red_op(op)?,
                    input_symmetric: symmetric != 0,
                    captured: false,
                };
                c.group.planner().reduce_scatter(&call, &o)?.to_string()
            }
            k => {
                return Err(invalid(format!(
                    "rank {}: plan kind {k}: expected lowconPlanAllGather (0) or lowconPlanReduceScatter (1)",
                    c.rank()
                )));
            }
        };
        let p = out_ptr(plan, "plan")?;
        if text.len() + 1 > len {
            return Err(invalid(format!(
                "rank {}: the plan needs {} bytes with its NUL, `len` is {len}",
                c.rank(),
                text.len() + 1
            )));
        }
        // SAFETY: `plan` holds `len` bytes (contract), more than the text and its NUL.
        unsafe {
            std::ptr::copy_nonoverlapping(text.as_ptr(), p.cast::<u8>(), text.len());
            *p.add(text.len()) = 0;
        }
        Ok(())
    })
}
