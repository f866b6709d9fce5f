"""What `ChartCluster.upgrade` does to the pods, decided from two renderings of the chart.

`upgrade_steps` is pure: these render helm/epochlog with Helm's engine (no
images, no containers; under a second each) and check the plan the embedded
cluster follows for `helm upgrade`, as the workload controllers would.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from e2e.targets import CHART, NAMESPACE, RELEASE
from epochlog_tools.devcluster.chart_cluster import DEFAULT_VALUES, merge, render, upgrade_steps
from epochlog_tools.devcluster.pods import ChartPlan, cluster_domain, plan


def _plan(values: Mapping[str, Any]) -> ChartPlan:
    merged = merge(DEFAULT_VALUES, values)
    objects = render(CHART, merged, release=RELEASE, namespace=NAMESPACE)
    return plan(objects, namespace=NAMESPACE, cluster_domain=cluster_domain(merged))


def _running(p: ChartPlan) -> set[str]:
    return {pod.name for pod in p.pods if not pod.test_hook}


def test_adding_a_broker_starts_it_replaces_the_operator_and_rolls_the_others_down() -> None:
    three = _plan({"broker": {"replicas": 3}})
    four = _plan({"broker": {"replicas": 4}})
    steps = upgrade_steps(three, four, running=_running(three))
    # The operator is told the new broker id (it issues its certificate); the brokers'
    # pod template mounts the new broker's Secret too, so each of them rolls.
    operators = sorted(p.name for p in three.pods if p.workload.startswith("Deployment/"))
    assert [p.name for p in steps.replace] == operators
    assert [p.name for p in steps.start] == [f"{RELEASE}-broker-3"]
    assert [p.name for p in steps.roll] == [f"{RELEASE}-broker-{b}" for b in (2, 1, 0)]
    assert steps.stop == ()


def test_removing_a_broker_stops_the_highest_ordinal_and_starts_nothing() -> None:
    four = _plan({"broker": {"replicas": 4}})
    three = _plan({"broker": {"replicas": 3}})
    steps = upgrade_steps(four, three, running=_running(four))
    assert steps.stop == (f"{RELEASE}-broker-3",)
    assert steps.start == ()
    assert [p.name for p in steps.roll] == [f"{RELEASE}-broker-{b}" for b in (2, 1, 0)]


def test_an_upgrade_that_changes_nothing_touches_no_pod() -> None:
    before = _plan({})
    after = _plan({"broker": {"replicas": 3}})  # the default, said again
    steps = upgrade_steps(before, after, running=_running(before))
    assert (steps.replace, steps.start, steps.roll, steps.stop) == ((), (), (), ())


def test_a_changed_broker_setting_rolls_only_the_brokers() -> None:
    before = _plan({})
    after = _plan({"broker": {"logLevel": "debug"}})
    steps = upgrade_steps(before, after, running=_running(before))
    assert steps.replace == ()
    assert [p.name for p in steps.roll] == [f"{RELEASE}-broker-{b}" for b in (2, 1, 0)]
