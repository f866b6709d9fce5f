"""OS processes the harness runs: start with output to a log file, tell alive from dead,
signal, wait, stop.

A `ManagedProcess` is known by its pid and its command line, never by a `Popen`
object, so that a process started here and one found again by pid (the local
cluster's processes outlive the command that started them, and are recorded in
a state file) behave the same:

- `start` runs the command with stdin from /dev/null and stdout and stderr
  appended to the log file, after a `--- start N ---` line; `detached` puts it
  in a session of its own, so that a Ctrl-C in the terminal does not reach it;
- `alive` is false for a process that exited, including a zombie whose parent
  has not collected it yet; for a child of this process the exit status is
  collected into `returncode`;
- a process that is not a child of this one (`adopt`) counts as alive only
  while its pid still runs the recorded command line, so that a stale state
  file never makes us signal an unrelated process that was given the same pid;
- `stop` is SIGTERM, then SIGKILL after a grace period.

Nothing here knows what the processes are; `epochlog_tools.harness.commands` builds
their command lines.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

POLL_S = 0.02
"""How often `wait` looks whether the process is gone."""

KILL_WAIT_S = 10.0
"""How long `stop` waits for a SIGKILLed process to be gone (longer only in
uninterruptible sleep) before it reports it killed anyway."""

StopOutcome = Literal["stopped", "killed", "gone"]


def _proc_state(pid: int) -> str | None:
    """The state letter from /proc/PID/stat (R, S, T, Z, ...), None where /proc is absent."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name is in parentheses and may itself contain spaces or ")".
    return stat.rpartition(")")[2].split()[0]


def _runs(pid: int, argv: Sequence[str]) -> bool:
    """`pid` exists, has not exited, and runs `argv` (checked through /proc where there is one)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    if _proc_state(pid) in ("Z", "X"):
        return False
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except FileNotFoundError:
        return False
    except OSError:
        return True  # no /proc to check against: trust the record
    return raw.rstrip(b"\0").split(b"\0") == [a.encode() for a in argv]


@dataclass
class ManagedProcess:
    """One process: its command line, log file and, once started or adopted, its pid."""

    argv: list[str]
    log: Path
    name: str = ""
    """How messages name it ("broker-1", "operator"); the program name when empty."""
    env: Mapping[str, str] | None = None
    """Its whole environment (see `commands.child_env`); this process's when None."""
    cwd: Path | None = None
    detached: bool = False
    """In a session of its own: signals sent to the terminal's process group miss it."""
    pid: int = 0
    returncode: int | None = None
    """Exit code of a child that exited (negative: the signal that ended it)."""
    starts: int = 0
    """Starts through this object; one adopted by pid counts from its adoption."""
    _child: bool = field(default=False, init=False, repr=False)

    @classmethod
    def adopt(cls, pid: int, argv: Sequence[str], log: Path, name: str = "") -> ManagedProcess:
        """A process started elsewhere (another command, recorded in a state file)."""
        return cls(list(argv), Path(log), name=name, pid=pid)

    @property
    def label(self) -> str:
        return self.name or Path(self.argv[0]).name

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> int:
        """Start the command; its pid. The log file is appended to, never truncated."""
        if self.alive:
            raise RuntimeError(f"{self.label} (pid {self.pid}) is running")
        self.log.parent.mkdir(parents=True, exist_ok=True)
        self.starts += 1
        with open(self.log, "ab") as out:
            stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
            out.write(f"--- start {self.starts} --- {stamp}: {' '.join(self.argv)}\n".encode())
            out.flush()
            proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=dict(self.env) if self.env is not None else None,
                cwd=self.cwd,
                start_new_session=self.detached,
                close_fds=True,
            )
        # The Popen object is dropped on purpose (see the module docstring); with a
        # returncode set, neither its destructor nor the subprocess module's cleanup of
        # lost children collects the exit status that `alive` is going to read.
        proc.returncode = 0
        self.pid = proc.pid
        self.returncode = None
        self._child = True
        return self.pid

    @property
    def alive(self) -> bool:
        """Started, and neither exited nor a zombie."""
        if self.pid <= 0 or self.returncode is not None:
            return False
        if self._child:
            try:
                done, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                self._child = False  # collected elsewhere: judge it like an adopted one
            else:
                if done == self.pid:
                    self.returncode = os.waitstatus_to_exitcode(status)
                    return False
                return True
        return _runs(self.pid, self.argv)

    @property
    def paused(self) -> bool:
        """Alive and stopped by a signal (SIGSTOP)."""
        return self.alive and _proc_state(self.pid) == "T"

    def send(self, sig: int) -> bool:
        """Send `sig` if the process is alive; whether it was sent."""
        if not self.alive:
            return False
        try:
            os.kill(self.pid, sig)
        except ProcessLookupError:
            return False
        return True

    async def wait(self, timeout_s: float | None = None) -> int | None:
        """Until the process is gone; its exit code (None when it was not our child).
        TimeoutError when it still runs after `timeout_s`."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while self.alive:
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"{self.label} (pid {self.pid}) still runs after {timeout_s} s")
            await asyncio.sleep(POLL_S)
        return self.returncode

    async def kill(self) -> int | None:
        """SIGKILL, and wait until it is gone."""
        self.send(signal.SIGKILL)
        return await self.wait()

    async def stop(self, grace_s: float) -> StopOutcome:
        """SIGTERM, then SIGKILL after `grace_s`; how it ended."""
        if not self.alive:
            return "gone"
        # A paused process would never act on SIGTERM.
        self.send(signal.SIGCONT)
        self.send(signal.SIGTERM)
        try:
            await self.wait(grace_s)
        except TimeoutError:
            pass
        else:
            return "stopped"
        self.send(signal.SIGKILL)
        with contextlib.suppress(TimeoutError):
            await self.wait(KILL_WAIT_S)
        return "killed"

    # -- its log ---------------------------------------------------------------------------

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def log_tail(self, lines: int = 25) -> str:
        text = self.log_text()
        return "\n".join(text.splitlines()[-lines:]) if text else "(no log)"
