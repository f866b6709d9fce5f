"""Which tests share a pytest-xdist worker: those that share a module- or package-scoped
fixture.

`make test` spreads the tests over pytest-xdist workers one test at a time. A
module- or package-scoped fixture (a cluster of real processes, say) would then
start once in every worker that runs one of its tests, and tests written to run
one after the other on it (up, then down) could run on different clusters. So the
tests of a module that defines such a fixture, or of a package whose conftest.py
does, travel together: `SharedFixtureScheduling` (installed by tests/conftest.py)
makes each such module or package one unit of work.

Units holding a test marked `slow` (a decorator `@pytest.mark.slow`, or `slow` in a
module's `pytestmark`) go out first, so that the longest ones do not start last and
leave the other workers idle while they finish.

xdist's own `--dist loadgroup` would do this with `xdist_group` markers, but it
renames the tests' node ids to carry the group, which pytest 9.2 no longer lets it
do; the fixtures' scopes are read here from the test sources instead, so that the
controller, which collects no tests, knows them.
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xdist.scheduler import LoadScopeScheduling  # type: ignore[import-untyped]

SHARED_SCOPES = ("package", "module")


@dataclass(frozen=True)
class SharedFixture:
    """A module- or package-scoped fixture, known by the file that defines it."""

    path: str
    """Root-relative, with "/" separators."""
    scope: str

    def group(self, module: str) -> str | None:
        """The unit of work of the test module `module` if this fixture is shared with it."""
        folder = self.path.rpartition("/")[0] + "/"
        if self.scope == "package" and module.startswith(folder):
            return folder
        if self.scope == "module" and (module == self.path or self.is_conftest_over(module)):
            return module
        return None

    def is_conftest_over(self, module: str) -> bool:
        folder = self.path.rpartition("/")[0] + "/"
        return self.path.endswith("/conftest.py") and module.startswith(folder)


@functools.cache
def _parse(path: Path) -> ast.Module:
    """A test source's syntax tree, parsed once for the fixtures and the slow marks."""
    return ast.parse(path.read_text(), str(path))


def _scope(decorator: ast.expr) -> str | None:
    if not isinstance(decorator, ast.Call):
        return None
    for keyword in decorator.keywords:
        value = keyword.value
        if keyword.arg == "scope" and isinstance(value, ast.Constant):
            return value.value if value.value in SHARED_SCOPES else None
    return None


def shared_fixtures(root: Path, tests: str = "tests") -> list[SharedFixture]:
    """Every fixture under `tests` whose decorator says scope="module" or "package"."""
    found = []
    for path in sorted((root / tests).rglob("*.py")):
        tree = _parse(path)
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                for decorator in node.decorator_list:
                    scope = _scope(decorator)
                    if scope is not None:
                        found.append(SharedFixture(path.relative_to(root).as_posix(), scope))
    return found


def _marks_slow(node: ast.expr) -> bool:
    """Whether a decorator or a `pytestmark` value is, or lists, `pytest.mark.slow`."""
    if isinstance(node, ast.List | ast.Tuple):
        return any(_marks_slow(e) for e in node.elts)
    return isinstance(node, ast.Attribute) and node.attr == "slow"


def slow_tests(root: Path, tests: str = "tests") -> frozenset[str]:
    """Test modules ("path") and test functions ("path::name") marked slow."""
    found: set[str] = set()
    for path in sorted((root / tests).rglob("test_*.py")):
        module = path.relative_to(root).as_posix()
        tree = _parse(path)
        for node in tree.body:
            if (
                isinstance(node, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets)
                and _marks_slow(node.value)
            ):
                found.add(module)
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and any(
                _marks_slow(d) for d in node.decorator_list
            ):
                found.add(f"{module}::{node.name}")
    return frozenset(found)


def is_slow(nodeid: str, slow: frozenset[str]) -> bool:
    module, _, rest = nodeid.partition("::")
    return module in slow or f"{module}::{rest.split('[', 1)[0]}" in slow


def work_unit(nodeid: str, fixtures: list[SharedFixture]) -> str:
    """The package or module a test travels with, or the test's own id."""
    module = nodeid.split("::", 1)[0]
    for scope in SHARED_SCOPES:  # widest first
        for fixture in fixtures:
            if fixture.scope == scope and (group := fixture.group(module)) is not None:
                return group
    return nodeid


class SharedFixtureScheduling(LoadScopeScheduling):  # type: ignore[misc]
    """xdist's load balancing, test by test, except that the tests sharing a module- or
    package-scoped fixture are one unit of work. Units with a slow test go out first,
    then the others; among each, the largest first."""

    def __init__(self, config: Any, log: Any = None) -> None:
        super().__init__(config, log)
        root = Path(str(config.rootpath))
        self.fixtures = shared_fixtures(root)
        self.slow = slow_tests(root)
        self._slow_first = False

    def _split_scope(self, nodeid: str) -> str:
        return work_unit(nodeid, self.fixtures)

    def _assign_work_unit(self, node: Any) -> None:
        if not self._slow_first:
            self._slow_first = True
            slow = [
                scope
                for scope, ids in self.workqueue.items()
                if any(is_slow(i, self.slow) for i in ids)
            ]
            for scope in reversed(slow):  # keeps their order among themselves
                self.workqueue.move_to_end(scope, last=False)
        super()._assign_work_unit(node)
