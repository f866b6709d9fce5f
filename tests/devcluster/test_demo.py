"""`epochlog demo` end to end, with short timings: a leader SIGKILLed under acks=all writes
and under a running Spark job, an election, every acknowledged record read back once, the
job's outputs equal to the log, a Kafka client (kafka-python) reading and writing the same
partitions as epochlog's client, and the leaders spread again once the broker is back."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.devcluster.test_local import TIMINGS, _kill_recorded

MIN_RECORDS = 150
"""Records acknowledged before the failover, and again after it, at the least."""


@pytest.mark.slow
@pytest.mark.scenario
def test_demo_loses_nothing_acknowledged(tmp_path: Path) -> None:
    state = tmp_path / "demo"
    try:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "epochlog_tools.cli",
                "demo",
                "--state-dir",
                str(state),
                "--duration",
                "1",
                # Acknowledged records to wait for before the failover and after it: a count,
                # not what a second of producing yields on this machine.
                "--min-records",
                str(MIN_RECORDS),
                *TIMINGS,
                # Leadership goes back soon after the restarted broker has caught up.
                "--leader-imbalance-check-interval-ms",
                "1000",
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
    # The Kafka act: kafka-python read what epochlog's client read, and the other way round.
    assert "the same as epochlog's client" in out, out
    assert "NOT the same" not in out, out
    # ... in a consumer group, which committed the end of each partition into the offsets
    # Partition its coordinator leads.
    assert "in consumer group demo-audit" in out, out
    group = re.search(
        r"group demo-audit committed \{(.*)\} \(the end of each partition\) into "
        r"epochlog\.consumer-offsets-\d+, whose leader, broker (\d), is its coordinator",
        out,
    )
    assert group is not None, out
    assert "None" not in group.group(1), out
    wrote = re.search(r"kafka-python wrote (\d+) records .* read (\d+) of them back", out)
    assert wrote is not None, out
    assert wrote.group(1) == wrote.group(2), out
    election = re.search(r"leader broker (\d) -> broker (\d), leaderEpoch (\d+) -> (\d+)", out)
    assert election is not None, out
    old, new, before, after = map(int, election.groups())
    assert old != new
    assert after > before
    # The killed broker, restarted, got its leadership back: the leaders spread again.
    assert re.search(r"leaders at the end: +orders-0 on broker \d.*spread again: yes", out), out
    acked = re.search(r"acknowledged \(acks=all\): (\d+) records", out)
    assert acked is not None, out
    assert int(acked.group(1)) >= 2 * MIN_RECORDS
    # The Spark act: the job's audit copy, dead letters and revenue against the log.
    assert "every record once: yes" in out, out
    assert "equal to the log's orders: yes" in out, out
    audit = re.search(r"audit copy: +(\d+) rows for (\d+) records", out)
    assert audit is not None, out
    assert audit.group(1) == audit.group(2)
    in_audit = re.search(r"acknowledged records in it: (\d+) of (\d+)", out)
    assert in_audit is not None, out
    assert in_audit.group(1) == in_audit.group(2) == acked.group(1)
    dead = re.search(r"dead letters: +(\d+) \(malformed values in the log: (\d+)\)", out)
    assert dead is not None, out
    assert dead.group(1) == dead.group(2) != "0"
    # The demo stopped its cluster.
    assert not (state / "state.json").exists()
