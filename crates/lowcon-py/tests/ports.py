"""A free port for torchrun's store whose next port is free too: without lowcon launch,
rank 0 hosts lowcon's store at MASTER_PORT + 1 (host/store/src/env.rs), and a port taken
there fails the group's creation ("Address already in use"), as it did once on CI's
2-core machine (test_plan.py, 2026-11-27)."""

import socket


def free_port():
    """A port P with P and P + 1 free now (both bound, then released)."""
    for _ in range(100):
        with socket.socket() as a:
            a.bind(("127.0.0.1", 0))
            p = a.getsockname()[1]
            if p >= 65535:
                continue
            with socket.socket() as b:
                try:
                    b.bind(("127.0.0.1", p + 1))
                except OSError:
                    continue
                return p
    raise RuntimeError("no free pair of ports in 100 tries")
