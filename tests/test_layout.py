"""The distribution's layout: packages import, and `operator/` never shadows the stdlib."""

from __future__ import annotations

import importlib
import operator
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_stdlib_operator_module_in_the_test_process() -> None:
    assert operator.__file__ is not None
    assert Path(operator.__file__).name == "operator.py"
    assert callable(operator.itemgetter)


def test_stdlib_operator_module_when_run_from_the_repository_root() -> None:
    # `python -c` puts the current directory first on sys.path: the worst case.
    out = subprocess.run(
        [sys.executable, "-c", "import operator; print(operator.__file__, operator.add(2, 3))"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert Path(out[0]).name == "operator.py"
    assert Path(out[0]).parent != ROOT / "operator"
    assert out[1] == "5"


def test_operator_folder_is_not_a_package() -> None:
    assert not (ROOT / "operator" / "__init__.py").exists()


def test_all_packages_import() -> None:
    for name in ("epochlog", "epochlog_broker.log", "epochlog_operator", "epochlog_spark"):
        importlib.import_module(name)


def test_console_script_runs() -> None:
    exe = Path(sys.executable).parent / "epochlog"
    out = subprocess.run([str(exe), "--version"], capture_output=True, text=True, check=True)
    assert out.stdout.startswith("epochlog ")


def test_legacy_behaviours_live_only_in_the_simulator() -> None:
    """The old behaviours the checker must catch cannot be switched on in a broker or an
    operator: neither package refers to the simulator, and neither command offers them."""
    from epochlog.sim.legacy import LEGACY

    for package in (
        ROOT / "broker_image" / "epochlog_broker",
        ROOT / "operator" / "epochlog_operator",
    ):
        for source in package.rglob("*.py"):
            text = source.read_text()
            assert "epochlog.sim" not in text, source
            for name in LEGACY:
                assert name not in text, (source, name)
                assert name.replace("-", "_") not in text, (source, name)
    exe = Path(sys.executable).parent / "epochlog"
    for command in ("broker", "operator"):
        out = subprocess.run([str(exe), command, "--help"], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        for name in LEGACY:
            assert name not in out.stdout
