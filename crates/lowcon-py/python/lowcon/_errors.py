"""lowcon's exceptions. Messages are the library's own: they name the rank, the peer or the sizes."""


class Error(RuntimeError):
    """Anything lowcon reports."""


class InvalidArgument(Error, ValueError):
    """A bad argument (sizes, dtype, device, option); nothing was enqueued and the group still works."""


class PeerError(Error):
    """A peer died or timed out, or the group was aborted: the group has failed and refuses further work."""


class CudaError(Error):
    """A CUDA driver call failed, or there is no driver or no such device."""
