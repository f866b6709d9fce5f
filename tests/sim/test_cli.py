"""`epochlog sim`: arguments, exit status, and that each legacy behaviour is found at random."""

from __future__ import annotations

import pytest

from epochlog_tools.cli import main
from epochlog_tools.sim.legacy import LEGACY
from epochlog_tools.sim.runner import FAULTS


def test_help_lists_every_legacy_name_and_fault_kind(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["sim", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for name in [*LEGACY, *FAULTS]:
        assert name in out


def test_clean_run_exits_zero_with_a_summary(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--log-level", "critical", "sim", "--seeds", "4", "--jobs", "1"]) == 0
    captured = capsys.readouterr()
    assert "4 schedule(s), 0 with violations" in captured.out
    assert "4/4 seeds" in captured.err


@pytest.mark.parametrize(
    "args",
    [["--legacy", "no-such-thing"], ["--faults", "kill,meteor"]],
    ids=["legacy", "fault"],
)
def test_unknown_names_are_refused(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sim", "--seeds", "1", *args]) == 2
    assert "unknown" in capsys.readouterr().err


# Each old behaviour, with the fault kinds that provoke it, is found within this many seeds.
LEGACY_RUNS = {
    # KAFKA-1211: a restarted follower truncates to its HW and is elected: broker kills.
    "truncate-to-hw": (["--legacy", "truncate-to-hw", "--faults", "kill"], 80),
    "ack-before-fsync": (["--legacy", "ack-before-fsync", "--faults", "all-crash"], 80),
    "drop-hw-checkpoint+truncate-to-hw": (
        ["--legacy", "drop-hw-checkpoint", "--legacy", "truncate-to-hw", "--faults", "kill"],
        80,
    ),
    # Records arrive a few per second per partition, so a new leader's HW is behind the
    # old one's only in a minority of failovers.
    "no-offset-gate": (["--legacy", "no-offset-gate", "--faults", "power-loss"], 100),
    "count-lag": (["--legacy", "count-lag"], 60),
    "late-maximal-isr": (["--legacy", "late-maximal-isr", "--faults", "kill-on-isr-change"], 40),
    "rank-by-known-epoch": (["--legacy", "rank-by-known-epoch", "--faults", "recreate"], 150),
    # A deposed leader's tail, or deleted records, back after a crash: DeleteRecords and
    # retention at the production interval under kills and partitions (first found at seed
    # 55 since consumers validate their positions after leader changes, which moves every
    # later event of a schedule).
    "history-start-divergence": (
        ["--legacy", "history-start-divergence", "--faults", "retention,kill,partition"],
        80,
    ),
    # A follower fenced while it fetches, the refusals to its leader lost.
    "refuse-once": (["--legacy", "refuse-once", "--faults", "lost-answer"], 40),
}


SCENARIO_RUNS = {"history-start-divergence"}
"""Minutes of schedules with retention at its production interval: run in `make e2e`."""


@pytest.mark.slow
@pytest.mark.parametrize(
    "name",
    [
        pytest.param(n, marks=[pytest.mark.scenario] if n in SCENARIO_RUNS else [])
        for n in sorted(LEGACY_RUNS)
    ],
)
def test_legacy_behaviour_is_found_in_random_schedules(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    args, seeds = LEGACY_RUNS[name]
    # One process: the run stops at the first violation, a few seeds in, sooner than a
    # pool of processes starts.
    rc = main(["--log-level", "critical", "sim", "--seeds", str(seeds), "--jobs", "1", *args])
    out = capsys.readouterr().out
    assert rc == 1, out
    assert "VIOLATION" in out
    assert "FAILED: seed" in out
    assert "replay: epochlog sim --start" in out
