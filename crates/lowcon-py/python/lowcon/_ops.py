"""torch.distributed's reduce operators in lowcon's names (shared by the FSDP2 hooks
and the torch.distributed backend)."""


def reduce_op_name(op):
    """"sum", "avg", "min" or "max" for those ReduceOps; None for any other."""
    import torch.distributed as dist

    RO = dist.ReduceOp
    for want, name in ((RO.SUM, "sum"), (RO.AVG, "avg"), (RO.MIN, "min"), (RO.MAX, "max")):
        if op == want:
            return name
    return None
