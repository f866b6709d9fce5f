"""Shared test configuration: hypothesis profiles.

`make test` uses the "ci" profile; `make soak` sets HYPOTHESIS_PROFILE=soak to run
the same properties with many more examples. Tests that need a specific number
of examples scale it with `examples(n)`.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

SOAK_FACTOR = 50

settings.register_profile(
    "ci",
    deadline=None,
    derandomize=False,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "soak",
    parent=settings.get_profile("ci"),
    max_examples=100 * SOAK_FACTOR,
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def examples(n: int) -> int:
    """`n` examples in CI, SOAK_FACTOR times more under the soak profile."""
    return n * SOAK_FACTOR if os.environ.get("HYPOTHESIS_PROFILE") == "soak" else n
