"""tests/sharing.py: the tests that share a module- or package-scoped fixture are one unit
of work for pytest-xdist; every other test is a unit of its own."""

from __future__ import annotations

from pathlib import Path

from tests.sharing import SharedFixture, shared_fixtures, work_unit

REPO = Path(__file__).resolve().parents[1]


def test_the_suites_shared_fixtures_are_found() -> None:
    found = set(shared_fixtures(REPO))
    assert SharedFixture("tests/broker/test_api.py", "module") in found
    assert SharedFixture("tests/client/conftest.py", "package") in found


def test_a_package_fixture_groups_its_package_a_module_fixture_its_module() -> None:
    fixtures = [
        SharedFixture("tests/a/conftest.py", "package"),
        SharedFixture("tests/b/test_m.py", "module"),
        SharedFixture("tests/c/conftest.py", "module"),
    ]
    assert work_unit("tests/a/test_x.py::test_1", fixtures) == "tests/a/"
    assert work_unit("tests/a/sub/test_y.py::test_2[p]", fixtures) == "tests/a/"
    assert work_unit("tests/b/test_m.py::test_3", fixtures) == "tests/b/test_m.py"
    assert work_unit("tests/c/test_z.py::test_4", fixtures) == "tests/c/test_z.py"
    assert work_unit("tests/b/test_n.py::test_5", fixtures) == "tests/b/test_n.py::test_5"
    assert work_unit("tests/ab/test_x.py::test_6", fixtures) == "tests/ab/test_x.py::test_6"
