"""Loopback ports for the processes the harness starts: free ones, and waiting for one to be
released."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import socket
import time

LOOPBACK = "127.0.0.1"


_EPHEMERAL_RANGE = "/proc/sys/net/ipv4/ip_local_port_range"
_LOWEST = 10_000


def _listening_range() -> range:
    """The ports to hand out: those below the kernel's ephemeral range (where every outgoing
    connection takes its local port, so a port chosen there may be taken by a client before
    the server binds it), split among pytest-xdist workers so that parallel tests never
    choose the same one."""
    try:
        with open(_EPHEMERAL_RANGE) as f:
            ephemeral_low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral_low = 32_768
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    index = int(worker[2:]) if worker[2:].isdigit() else 0
    count = max(int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1), index + 1)
    width = (ephemeral_low - _LOWEST) // count
    start = _LOWEST + index * width
    return range(start, start + width)


_cursor: dict[range, int] = {}


def _bindable(s: socket.socket, port: int) -> bool:
    try:
        s.bind((LOOPBACK, port))
    except OSError:
        return False
    return True


def free_ports(n: int) -> list[int]:
    """`n` distinct TCP ports free on loopback right now.

    Chosen below the ephemeral range, in this process's share of it, each one after the
    last handed out (a port just released may still be wanted by the process that had
    it). The sockets stay bound until all are chosen. Falls back to the kernel's choice
    when the share is too small to hold them.
    """
    ports_range = _listening_range()
    with contextlib.ExitStack() as stack:
        ports: list[int] = []
        if len(ports_range) < 4 * n:
            for _ in range(n):
                s = stack.enter_context(socket.socket())
                s.bind((LOOPBACK, 0))
                ports.append(int(s.getsockname()[1]))
            return ports
        at = _cursor.get(ports_range, random.randrange(len(ports_range)))
        for _ in range(len(ports_range)):
            port = ports_range[at % len(ports_range)]
            at += 1
            s = stack.enter_context(socket.socket())
            if _bindable(s, port):
                ports.append(port)
                if len(ports) == n:
                    break
        _cursor[ports_range] = at
        if len(ports) < n:
            raise OSError(f"no {n} free ports in {ports_range.start}-{ports_range.stop - 1}")
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
