"""tests/sharing.py: the tests that share a module- or package-scoped fixture are one unit
of work for pytest-xdist; every other test is a unit of its own."""

from __future__ import annotations

from pathlib import Path

from tests.sharing import SharedFixture, is_slow, shared_fixtures, slow_tests, work_unit

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


def test_slow_marks_are_read_from_decorators_and_module_marks(tmp_path: Path) -> None:
    (tmp_path / "tests" / "p").mkdir(parents=True)
    (tmp_path / "tests" / "p" / "test_a.py").write_text(
        "import pytest\n\n"
        "@pytest.mark.slow\ndef test_long(): ...\n\n"
        "@pytest.mark.parametrize('x', [1])\ndef test_short(x): ...\n"
    )
    (tmp_path / "tests" / "p" / "test_b.py").write_text(
        "import pytest\npytestmark = [pytest.mark.asyncio, pytest.mark.slow]\n"
    )
    slow = slow_tests(tmp_path)
    assert slow == {"tests/p/test_a.py::test_long", "tests/p/test_b.py"}
    assert is_slow("tests/p/test_a.py::test_long", slow)
    assert not is_slow("tests/p/test_a.py::test_short[1]", slow)
    assert is_slow("tests/p/test_b.py::test_any[x]", slow)


def test_the_demo_is_marked_slow() -> None:
    assert is_slow(
        "tests/devcluster/test_demo.py::test_demo_loses_nothing_acknowledged", slow_tests(REPO)
    )
