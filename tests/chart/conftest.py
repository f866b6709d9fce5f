"""The operator end-to-end fixtures (API emulator, real operator processes, scripted
brokers), for measuring what the operator calls against what the chart grants."""

from tests.operator_e2e.conftest import env, pytest_runtest_makereport

__all__ = ["env", "pytest_runtest_makereport"]
