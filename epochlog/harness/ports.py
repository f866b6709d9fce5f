"""Loopback ports for the processes the harness starts: free ones, and waiting for one to be
released."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time

LOOPBACK = "127.0.0.1"


def free_ports(n: int) -> list[int]:
    """`n` distinct TCP ports free on loopback right now (the kernel's choice).

    The sockets stay bound until all are chosen: closed one by one, the kernel may
    hand out the same port twice.
    """
    with contextlib.ExitStack() as stack:
        ports = []
        for _ in range(n):
            s = stack.enter_context(socket.socket())
            s.bind((LOOPBACK, 0))
            ports.append(int(s.getsockname()[1]))
        return ports


def free_port() -> int:
    return free_ports(1)[0]


def port_free(port: int) -> bool:
    """Nothing listens on `port` and a new server could bind it now."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((LOOPBACK, port))
        except OSError:
            return False
        return True


async def wait_port_free(port: int, timeout_s: float | None = None) -> None:
    """Until `port` can be bound again (a killed process's socket may linger for a moment).
    TimeoutError after `timeout_s`, when one is given."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while not port_free(port):
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError(f"port {port} is still in use after {timeout_s} s")
        await asyncio.sleep(0.1)
