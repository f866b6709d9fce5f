"""OS processes of the embedded cluster: start detached, tell alive from dead, signal, stop.

The embedded cluster's processes outlive the command that started them, so
everything here works from a pid and a recorded command line alone, never
from a `Popen` object:

- `spawn` starts a process in its own session (a Ctrl-C in the terminal that
  ran `epochlog dev up` does not reach it) with its output appended to a log
  file;
- `alive` is false for a process that exited, including one that is a zombie
  because its parent has not collected it yet (the parent may be this very
  process, or an init that reaps late);
- `ours` checks that a pid still runs the command line that was recorded for
  it, so that a stale state file never makes us signal an unrelated process
  that happens to have been given the same pid.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path


def free_ports(n: int) -> list[int]:
    """`n` distinct TCP ports free on loopback right now (the kernel's choice).

    The sockets stay bound until all are chosen: closed one by one, the kernel may
    hand out the same port twice.
    """
    with contextlib.ExitStack() as stack:
        ports = []
        for _ in range(n):
            s = stack.enter_context(socket.socket())
            s.bind(("127.0.0.1", 0))
            ports.append(int(s.getsockname()[1]))
        return ports


def free_port() -> int:
    return free_ports(1)[0]


def spawn(argv: Sequence[str], log: Path, env: Mapping[str, str] | None = None) -> int:
    """Start `argv` detached (own session, stdin from /dev/null, output to `log`); its pid."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        out.write(f"--- {time.strftime('%Y-%m-%dT%H:%M:%S')} start: {' '.join(argv)}\n".encode())
        out.flush()
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=dict(env) if env is not None else None,
            start_new_session=True,
            close_fds=True,
        )
    # The Popen object is dropped on purpose: liveness is tracked by pid (see `alive`),
    # so that a process started here and one found in a state file behave the same.
    proc.returncode = 0  # keeps Popen.__del__ from warning about a "still running" child
    return proc.pid


def _reap(pid: int) -> bool:
    """Collect `pid` if it is an exited child of this process; True when it was."""
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return False
    return done == pid


def _proc_state(pid: int) -> str | None:
    """The state letter from /proc/PID/stat (R, S, T, Z, ...), None where /proc is absent."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name is in parentheses and may itself contain spaces or ")".
    return stat.rpartition(")")[2].split()[0]


def alive(pid: int) -> bool:
    """The process exists and has not exited (a zombie counts as gone)."""
    if pid <= 0 or _reap(pid):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return _proc_state(pid) not in ("Z", "X")


def stopped(pid: int) -> bool:
    """The process is stopped by a signal (SIGSTOP)."""
    return _proc_state(pid) == "T"


def ours(pid: int, argv: Sequence[str]) -> bool:
    """`pid` is alive and runs `argv` (checked through /proc where there is one)."""
    if not alive(pid):
        return False
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except FileNotFoundError:
        return False
    except OSError:
        return True  # no /proc to check against: trust the state file
    return raw.rstrip(b"\0").split(b"\0") == [a.encode() for a in argv]


def send(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


async def wait_gone(pid: int, timeout_s: float) -> bool:
    """Until the process is gone; False when it still runs after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while alive(pid):
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(0.05)
    return True


async def stop(pid: int, argv: Sequence[str], grace_s: float) -> str:
    """SIGTERM, then SIGKILL after `grace_s`; how it ended: "stopped", "killed" or "gone"."""
    if not ours(pid, argv):
        return "gone"
    # A paused process would never act on SIGTERM.
    send(pid, signal.SIGCONT)
    send(pid, signal.SIGTERM)
    if await wait_gone(pid, grace_s):
        return "stopped"
    send(pid, signal.SIGKILL)
    await wait_gone(pid, 10)
    return "killed"
