"""`epochlog demo` end to end, with short timings: a leader SIGKILLed under acks=all writes,
an election, and every acknowledged record read back once."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.devcluster.test_local import TIMINGS, _kill_recorded


def test_demo_loses_nothing_acknowledged(tmp_path: Path) -> None:
    state = tmp_path / "demo"
    try:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "epochlog.cli",
                "demo",
                "--state-dir",
                str(state),
                "--duration",
                "1",
                *TIMINGS,
            ],
            capture_output=True,
            text=True,
            env=os.environ.copy(),
        )
    finally:
        _kill_recorded(state)
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert "every one survived" in out
    assert "acknowledged but missing: 0" in out
    assert "read more than once:      0" in out
    election = re.search(r"leader broker (\d) -> broker (\d), leaderEpoch (\d+) -> (\d+)", out)
    assert election is not None, out
    old, new, before, after = map(int, election.groups())
    assert old != new
    assert after > before
    acked = re.search(r"acknowledged \(acks=all\): (\d+) records", out)
    assert acked is not None, out
    assert int(acked.group(1)) > 100
    # The demo stopped its cluster.
    assert not (state / "state.json").exists()
