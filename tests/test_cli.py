"""`epochlog log check` and `log dump` on a real partition directory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from epochlog_broker.log import OsFileSystem, PartitionLog, Record
from epochlog_tools.cli import main


def _make_log(path: Path) -> None:
    plog = PartitionLog.open(OsFileSystem(), str(path))
    for epoch in (0, 2):
        plog.append_records(
            [Record(f"v{epoch}-{i}".encode(), key=b"k") for i in range(10)],
            leader_epoch=epoch,
            timestamp=1000,
        )
    plog.close()


def test_log_check_reports_ok_for_a_healthy_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _make_log(tmp_path / "t-0")
    assert main(["log", "check", str(tmp_path / "t-0")]) == 0
    out = capsys.readouterr().out
    assert "log end offset: 20" in out
    assert "[(0, 0), (2, 10)]" in out
    assert out.strip().endswith("OK")


def test_log_check_flags_damage_in_the_middle_and_changes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _make_log(tmp_path / "t-0")
    seg = tmp_path / "t-0" / f"{0:020d}.log"
    data = bytearray(seg.read_bytes())
    data[70] ^= 0xFF  # inside the first batch; the second batch is intact
    seg.write_bytes(bytes(data))
    assert main(["log", "check", str(tmp_path / "t-0")]) == 1
    out = capsys.readouterr().out
    assert "PROBLEM" in out
    assert "corrupt batch at byte 0" in out
    assert seg.read_bytes() == bytes(data)


def test_log_dump_prints_records_from_an_offset(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _make_log(tmp_path / "t-0")
    capsys.readouterr()  # what making the log printed (its recovery event)
    assert main(["log", "dump", str(tmp_path / "t-0"), "--offset", "8", "--max", "3"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["offset"], r["value"], r["leaderEpoch"]) for r in lines] == [
        (8, "v0-8", 0),
        (9, "v0-9", 0),
        (10, "v2-0", 2),
    ]


def test_storage_demo_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--storage", "--state-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "every one survived" in out
