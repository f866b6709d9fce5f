"""Random fault schedules with every fault kind: zero violations over hundreds of seeds.

`make soak` runs the same through `epochlog sim --seeds 20000`.
"""

from __future__ import annotations

import os

from epochlog.sim.runner import FAULTS, RunSettings, run_seeds

SEEDS = 300


def test_random_schedules_keep_every_property() -> None:
    settings = RunSettings(faults=frozenset(FAULTS))
    jobs = max(1, min(2, len(os.sched_getaffinity(0))))
    failures = []
    acks = 0
    for result in run_seeds(range(SEEDS), settings, jobs):
        acks += result.acks
        if result.violations:
            failures.append(result)
    assert not failures, "\n\n".join(r.report or "" for r in failures[:2])
    # The schedules must exercise something: thousands of acknowledged records checked.
    assert acks > SEEDS * 100
