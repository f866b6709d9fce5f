"""`epochlog dev up` run from inside another checkout: every process imports this install.

The dev cluster's processes run `python -m ...` in the directory the command was
started from, and `python -m` puts that directory first on sys.path: inside
another checkout, a broker imported that checkout's `epochlog` and this install's
`epochlog_broker`, two versions in one process. Here the command is the installed
console script, started in a directory holding an `epochlog` package that records
who imported it and refuses to load; the cluster must come up in that directory with
none of its processes having imported it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from epochlog_tools.harness import ManagedProcess

TIMINGS = ["--heartbeat-interval-ms", "100", "--session-timeout-ms", "1000"]

IMPOSTOR = """\
import os
import sys

with open({marker!r}, "a") as out:
    out.write(f"{{os.getpid()}} {{sys.argv!r}}\\n")
raise ImportError("epochlog imported from the checkout in the working directory")
"""


def epochlog(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The installed `epochlog` command, as a user runs it, in `cwd` (no time limit:
    tests/waiting.py)."""
    exe = Path(sys.executable).parent / "epochlog"
    return subprocess.run(
        [str(exe), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**os.environ, "EPOCHLOG_DEV_STATE": ""},
    )


def _recorded(state_dir: Path) -> list[dict[str, Any]]:
    """The processes state.json records, as it records them."""
    state = state_dir / "state.json"
    if not state.exists():
        return []
    processes: list[dict[str, Any]] = json.loads(state.read_text())["processes"]
    return processes


@pytest.fixture
def checkout(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """(another checkout's root, the file its `epochlog` package writes when imported);
    every process a `dev up` there recorded is stopped afterwards."""
    root = tmp_path / "other-checkout"
    package = root / "epochlog"
    package.mkdir(parents=True)
    marker = tmp_path / "imported-from-the-checkout"
    (package / "__init__.py").write_text(IMPOSTOR.format(marker=str(marker)))
    try:
        yield root, marker
    finally:
        state_dir = root / "state"
        with contextlib.suppress(Exception):
            epochlog(root, "dev", "down", "--state-dir", str(state_dir))
        for p in _recorded(state_dir):
            process = ManagedProcess.adopt(p["pid"], p["argv"], Path(p["log"]))
            if process.alive:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(process.pid, signal.SIGKILL)


def test_dev_up_inside_another_checkout_imports_only_this_install(
    checkout: tuple[Path, Path],
) -> None:
    root, marker = checkout
    state_dir = root / "state"
    up = epochlog(
        root,
        "dev",
        "up",
        "--state-dir",
        str(state_dir),
        "--brokers",
        "1",
        "--no-examples",
        *TIMINGS,
    )
    imported = marker.read_text() if marker.exists() else ""
    assert imported == "", f"processes imported the checkout's epochlog:\n{imported}"
    assert up.returncode == 0, up.stdout + up.stderr
    processes = _recorded(state_dir)
    assert {p["role"] for p in processes} == {"apiserver", "operator", "broker"}
    for p in processes:
        # They run in the checkout, and still imported nothing from it.
        assert Path(os.readlink(f"/proc/{p['pid']}/cwd")) == root, p
    # What it prints to export: the brokers' Kafka listeners, as a Kafka client's bootstrap.
    kafka = ",".join(p["kafka_address"] for p in processes if p["role"] == "broker")
    assert kafka
    assert f"export EPOCHLOG_KAFKA_BOOTSTRAP={kafka}\n" in up.stdout, up.stdout
    down = epochlog(root, "dev", "down", "--state-dir", str(state_dir))
    assert down.returncode == 0, down.stdout + down.stderr
    assert not marker.exists()
