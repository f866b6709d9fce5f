"""The distribution's layout: packages import, and `operator/` never shadows the stdlib."""

from __future__ import annotations

import ast
import importlib
import operator
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

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
    for name in (
        "epochlog",
        "epochlog_broker.log",
        "epochlog_operator",
        "epochlog_spark",
        "epochlog_tools",
    ):
        importlib.import_module(name)


def test_console_script_runs() -> None:
    exe = Path(sys.executable).parent / "epochlog"
    out = subprocess.run([str(exe), "--version"], capture_output=True, text=True, check=True)
    assert out.stdout.startswith("epochlog ")


def test_legacy_behaviours_live_only_in_the_simulator() -> None:
    """The old behaviours the checker must catch cannot be switched on in a broker or an
    operator: neither package refers to the simulator, and neither command offers them."""
    from epochlog_tools.sim.legacy import LEGACY

    for package in (
        ROOT / "broker_image" / "epochlog_broker",
        ROOT / "operator" / "epochlog_operator",
    ):
        for source in package.rglob("*.py"):
            text = source.read_text()
            assert "epochlog_tools.sim" not in text, source
            for name in LEGACY:
                assert name not in text, (source, name)
                assert name.replace("-", "_") not in text, (source, name)
    exe = Path(sys.executable).parent / "epochlog"
    for command in ("broker", "operator"):
        out = subprocess.run([str(exe), command, "--help"], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        for name in LEGACY:
            assert name not in out.stdout


def _lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).parent / "lint-imports"
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run(
        [str(exe), "--no-cache"], cwd=root, env=env, capture_output=True, text=True
    )


def _copy_packages(dest: Path) -> None:
    for name, src in PACKAGES.items():
        shutil.copytree(src, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / ".importlinter", dest / ".importlinter")


PACKAGES = {
    "epochlog": ROOT / "epochlog",
    "epochlog_broker": ROOT / "broker_image" / "epochlog_broker",
    "epochlog_operator": ROOT / "operator" / "epochlog_operator",
    "epochlog_spark": ROOT / "pipeline" / "epochlog_spark",
    "epochlog_tools": ROOT / "tools" / "epochlog_tools",
}


def test_the_import_contracts_hold() -> None:
    out = _lint_imports(ROOT)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 broken" in out.stdout


@pytest.mark.parametrize(
    ("module", "statement", "contract"),
    [
        ("epochlog/client/records.py", "import epochlog_broker.core", "pull in the broker"),
        ("epochlog_broker/replication/leader.py", "import time", "read no clock"),
        ("epochlog_operator/election.py", "import random", "read no clock"),
        ("epochlog/protocol/wire.py", "import epochlog.client", "The ground floor is layered"),
        ("epochlog/resources.py", "import epochlog_operator.isr", "Three floors"),
        ("epochlog_spark/offsets.py", "import epochlog_tools.checker", "Three floors"),
        ("epochlog_tools/checker/history.py", "import epochlog_tools.sim", "top floor is layered"),
        ("epochlog_broker/log/segment.py", "import epochlog_broker.core", "broker is layered"),
        (
            "epochlog_tools/kubeapi/store.py",
            "import epochlog_tools.sim",
            "do not depend on the simulator",
        ),
    ],
)
def test_a_forbidden_import_breaks_a_contract(
    tmp_path: Path, module: str, statement: str, contract: str
) -> None:
    _copy_packages(tmp_path)
    assert _lint_imports(tmp_path).returncode == 0
    target = tmp_path / module
    target.write_text(target.read_text() + f"\n{statement}  # noqa\n")
    out = _lint_imports(tmp_path)
    assert out.returncode != 0
    broken = out.stdout.split("Broken contracts", 1)[-1]
    assert contract in " ".join(broken.split()), out.stdout


CAMEL_CASE = re.compile(r"^[a-z]+(?:[A-Z][a-z0-9]*)+$")
WIRE_MODULES = (
    "epochlog/protocol/",  # every body between epochlog's processes
    "epochlog/resources.py",  # the Partition spec and status
    "epochlog/objects.py",  # Kubernetes object envelopes
    "epochlog/crd.py",  # generates the CRD from the models
    # the Kubernetes API emulator speaks Kubernetes' own field names
    "tools/epochlog_tools/kubeapi/",
    # reads rendered workloads in Kubernetes' own field names
    "tools/epochlog_tools/devcluster/pods.py",
    "pipeline/epochlog_spark/progress.py",  # reads Spark's progress reports in its field names
)


def python_sources() -> list[tuple[str, Path]]:
    return [
        (source.relative_to(ROOT).as_posix(), source)
        for package in PACKAGES.values()
        for source in sorted(package.rglob("*.py"))
    ]


def hand_typed_wire_names(sources: list[tuple[str, Path]]) -> list[str]:
    """String constants shaped like camelCase JSON keys outside the modules that own the
    wire names (docstrings aside): each is a key typed by hand."""
    found = []
    for path, source in sources:
        if path.startswith(WIRE_MODULES):
            continue
        tree = ast.parse(source.read_text())
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and node.body
            and isinstance(node.body[0], ast.Expr)
        }
        found += [
            f"{path}:{node.lineno}: {node.value!r}"
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in docstrings
            and CAMEL_CASE.match(node.value)
        ]
    return found


def test_no_camel_case_key_is_typed_by_hand_outside_the_wire_models() -> None:
    assert hand_typed_wire_names(python_sources()) == []


def test_the_wire_name_check_sees_a_hand_typed_key(tmp_path: Path) -> None:
    source = tmp_path / "module.py"
    source.write_text('"""highWatermark in a docstring is prose."""\nX = {"highWatermark": 1}\n')
    assert hand_typed_wire_names([("epochlog/client/module.py", source)]) == [
        "epochlog/client/module.py:2: 'highWatermark'"
    ]
    assert hand_typed_wire_names([("epochlog/protocol/module.py", source)]) == []
