"""Secret volumes written as the kubelet writes them: paths through `..data`, updates
switched by one rename, nothing rewritten when nothing changed."""

from __future__ import annotations

import os
from pathlib import Path

from epochlog.security.watch import FileWatch
from epochlog_tools.devcluster.volumes import DATA, read_payload, write_volume

GID = os.getgid()


def _stamped_dirs(d: Path) -> list[str]:
    return [e.name for e in d.iterdir() if e.name.startswith("..") and e.name != DATA]


def test_files_are_reached_through_the_data_symlink(tmp_path: Path) -> None:
    d = tmp_path / "tls"
    payload = {"broker-0/tls.crt": (b"cert", 0o440), "policy.yaml": (b"rules", 0o444)}
    assert write_volume(d, payload, GID)
    assert (d / "broker-0" / "tls.crt").read_bytes() == b"cert"
    assert (d / "policy.yaml").read_bytes() == b"rules"
    assert os.readlink(d / "broker-0") == f"{DATA}/broker-0"
    assert os.readlink(d / "policy.yaml") == f"{DATA}/policy.yaml"
    assert (d / "policy.yaml").stat().st_mode & 0o777 == 0o444
    assert read_payload(d / DATA) == payload


def test_an_update_switches_the_files_and_a_watcher_sees_it(tmp_path: Path) -> None:
    d = tmp_path / "tls"
    write_volume(d, {"tls.crt": (b"old cert", 0o440), "tls.key": (b"old key", 0o440)}, GID)
    watch = FileWatch([str(d / "tls.crt"), str(d / "tls.key")])
    before = _stamped_dirs(d)

    new = {"tls.crt": (b"new cert", 0o440), "tls.key": (b"new key", 0o440)}
    assert write_volume(d, new, GID)
    assert (d / "tls.crt").read_bytes() == b"new cert"
    assert (d / "tls.key").read_bytes() == b"new key"
    assert watch.changed()
    # One directory of files at a time: the old one is gone once the switch is made.
    after = _stamped_dirs(d)
    assert len(after) == 1
    assert after != before


def test_an_unchanged_payload_writes_nothing(tmp_path: Path) -> None:
    d = tmp_path / "tls"
    payload = {"tls.crt": (b"cert", 0o440)}
    write_volume(d, payload, GID)
    watch = FileWatch([str(d / "tls.crt")])
    target = os.readlink(d / DATA)
    assert not write_volume(d, payload, GID)
    assert os.readlink(d / DATA) == target
    assert not watch.changed()
    # A changed mode alone is a change.
    assert write_volume(d, {"tls.crt": (b"cert", 0o400)}, GID)


def test_a_removed_key_goes_and_files_of_an_older_layout_are_replaced(tmp_path: Path) -> None:
    d = tmp_path / "tls"
    (d / "broker-0").mkdir(parents=True)
    (d / "broker-0" / "tls.crt").write_bytes(b"plain file")
    (d / "stale.txt").write_bytes(b"stale")
    write_volume(d, {"broker-0/tls.crt": (b"cert", 0o440), "extra": (b"x", 0o440)}, GID)
    assert (d / "broker-0").is_symlink()
    assert (d / "broker-0" / "tls.crt").read_bytes() == b"cert"
    assert not (d / "stale.txt").exists()

    write_volume(d, {"broker-0/tls.crt": (b"cert", 0o440)}, GID)
    assert not (d / "extra").exists()
    assert not (d / "extra").is_symlink()
    assert sorted(e.name for e in d.iterdir() if not e.name.startswith("..")) == ["broker-0"]
