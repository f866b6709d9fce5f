"""The locks in requirements/ (what scripts/bootstrap.sh installs) satisfy pyproject.toml.

A dependency added to or tightened in pyproject.toml without `make lock` would
otherwise go unnoticed until a fresh clone lacks it.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[1]
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)", re.MULTILINE)
LOCKS = {
    "dev.txt": ("dev", "operator", "docs"),
    "spark.txt": ("dev", "operator", "docs", "spark"),
    "broker-image.txt": (),
    "image.txt": ("operator",),
}


def pins(lock: Path) -> dict[str, str]:
    return {canonicalize_name(n): v for n, v in PIN.findall(lock.read_text())}


def required(extras: tuple[str, ...]) -> list[Requirement]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    lines = list(project["dependencies"])
    for extra in extras:
        lines += project["optional-dependencies"][extra]
    tools = (REPO / "requirements" / "tools.in").read_text().splitlines()
    lines += [t for t in tools if t.strip() and not t.startswith("#")]
    return [Requirement(line) for line in lines]


@pytest.mark.parametrize("lock", sorted(LOCKS))
def test_every_requirement_is_pinned_within_its_range(lock: str) -> None:
    pinned = pins(REPO / "requirements" / lock)
    wrong = []
    for req in required(LOCKS[lock]):
        if req.marker is not None and not req.marker.evaluate():
            continue
        version = pinned.get(canonicalize_name(req.name))
        if version is None or not req.specifier.contains(version, prereleases=True):
            wrong.append(f"{req} (locked: {version})")
    assert not wrong, f"requirements/{lock} is stale, run `make lock`: {wrong}"


@pytest.mark.parametrize("lock", sorted(LOCKS))
def test_every_pin_has_hashes(lock: str) -> None:
    text = (REPO / "requirements" / lock).read_text()
    found = list(PIN.finditer(text))
    ends = [m.start() for m in found[1:]] + [len(text)]
    unhashed = [
        m[1] for m, end in zip(found, ends, strict=True) if "--hash=" not in text[m.end() : end]
    ]
    assert found
    assert not unhashed, unhashed
