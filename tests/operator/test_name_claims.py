"""One name, one Partition: which namespace serves a name, and the status of the others.

Brokers know a partition by its name alone. `NameClaims` gives a name to the
first namespace that claims it and to the oldest waiting one when that one
goes; `name_conflict_status` is the status of a Partition left waiting; the
`Reconciler` decides only the Partition served (no API call is made here:
observing and forgetting are bookkeeping).
"""

from __future__ import annotations

from typing import Any

import kopf

from epochlog.resources import (
    Condition,
    ConditionStatus,
    ConditionType,
    PartitionStatus,
    rfc3339,
)
from epochlog_operator.conditions import NAME_CONFLICT, name_conflict_status
from epochlog_operator.indexed import NameClaims
from epochlog_operator.kube import KubeClient
from epochlog_operator.metrics import Metrics
from epochlog_operator.reconciler import Reconciler, _claim_order
from epochlog_operator.settings import OperatorSettings


def test_the_first_claim_serves_a_name_and_the_oldest_waiting_one_takes_over() -> None:
    claims = NameClaims()
    assert claims.claim("orders-0", "b", "2026-01-03T00:00:00Z") == "b"
    assert claims.claim("orders-0", "c", "2026-01-02T00:00:00Z") == "b"
    assert claims.claim("orders-0", "a", "2026-01-02T00:00:00Z") == "b"
    assert claims.claim("orders-0", "d") == "b"
    assert claims.claim("orders-0", "b", "2026-01-03T00:00:00Z") == "b"  # again: no change
    assert claims.claim("orders-1", "c") == "c"  # another name, its own claim
    assert claims.waiting("orders-0") == ("c", "a", "d")
    # A waiting one going changes nothing for the one served.
    assert claims.release("orders-0", "d") == "b"
    # The served one goes: the oldest waiting one (then by namespace) takes over.
    assert claims.release("orders-0", "b") == "a"
    assert claims.waiting("orders-0") == ("c",)
    assert claims.release("orders-0", "x") == "a"  # never claimed
    assert claims.release("orders-0", "a") == "c"
    assert claims.release("orders-0", "c") is None
    assert claims.serving("orders-0") is None
    assert claims.serving("orders-1") == "c"


def test_unknown_creation_times_take_over_last() -> None:
    claims = NameClaims()
    claims.claim("t-0", "first")
    claims.claim("t-0", "a")
    claims.claim("t-0", "z", "2026-01-01T00:00:00Z")
    assert claims.release("t-0", "first") == "z"


def test_a_waiting_partition_shows_ready_false_name_conflict_and_nothing_else() -> None:
    served_before = PartitionStatus(
        leader=1,
        leader_epoch=3,
        partition_epoch=4,
        isr=(1, 2),
        replicas=(1, 2, 3),
        conditions=(
            Condition(
                type=ConditionType.READY,
                status=ConditionStatus.TRUE,
                reason="InSync",
                last_transition_time=rfc3339(1_000),
            ),
        ),
    )
    status = name_conflict_status(
        served_before, name="orders-0", serving_namespace="team-a", generation=2, now_ms=60_000
    )
    assert status is not None
    assert (status.leader, status.isr, status.replicas, status.leader_epoch) == (None, (), (), 0)
    assert status.observed_generation == 2
    (ready,) = status.conditions
    assert (ready.type, ready.status, ready.reason) == (
        ConditionType.READY,
        ConditionStatus.FALSE,
        NAME_CONFLICT,
    )
    assert "namespace team-a" in ready.message
    assert ready.last_transition_time == rfc3339(60_000)  # it flipped from True
    assert ready.observed_generation == 2
    # Written once: the same conflict again needs no write, even later.
    again = name_conflict_status(
        status, name="orders-0", serving_namespace="team-a", generation=2, now_ms=90_000
    )
    assert again is None
    # Another namespace holding the name, or a new generation, is a new status; the
    # condition keeps its transition time (it was False already).
    moved = name_conflict_status(
        status, name="orders-0", serving_namespace="team-c", generation=3, now_ms=90_000
    )
    assert moved is not None
    assert "namespace team-c" in moved.conditions[0].message
    assert moved.conditions[0].last_transition_time == rfc3339(60_000)
    assert name_conflict_status(
        None, name="orders-0", serving_namespace="team-a", generation=1, now_ms=5_000
    ) == name_conflict_status(
        PartitionStatus(), name="orders-0", serving_namespace="team-a", generation=1, now_ms=5_000
    )


def _partition(namespace: str, uid: str, created: str, rv: str = "1") -> dict[str, Any]:
    return {
        "apiVersion": "epochlog.dev/v1alpha1",
        "kind": "Partition",
        "metadata": {
            "name": "orders-0",
            "namespace": namespace,
            "uid": uid,
            "resourceVersion": rv,
            "generation": 1,
            "creationTimestamp": created,
        },
        "spec": {"topic": "orders", "partition": 0},
    }


def test_the_reconciler_decides_only_the_partition_that_holds_the_name() -> None:
    kube = KubeClient(kopf.ConnectionInfo(server="http://127.0.0.1:1"))  # never opened
    reconciler = Reconciler(OperatorSettings(), kube, Metrics())
    reconciler.observe(_partition("team-a", "a1", "2026-01-01T00:00:00Z"))
    reconciler.observe(_partition("team-b", "b1", "2026-01-02T00:00:00Z"))
    reconciler.observe(_partition("team-c", "c1", "2026-01-03T00:00:00Z"))
    assert reconciler.entries["orders-0"].namespace == "team-a"
    assert set(reconciler.inputs) == {"orders-0"}
    assert set(reconciler.unserved) == {("team-b", "orders-0"), ("team-c", "orders-0")}
    # A newer version of a waiting one is kept, and still not decided.
    reconciler.observe(_partition("team-b", "b1", "2026-01-02T00:00:00Z", rv="7"))
    assert reconciler.unserved[("team-b", "orders-0")]["metadata"]["resourceVersion"] == "7"
    assert reconciler.entries["orders-0"].namespace == "team-a"
    # A delete event of an earlier object of the served name changes nothing.
    reconciler.forget("team-a", "orders-0", "a0")
    assert reconciler.entries["orders-0"].uid == "a1"
    # The served one goes: the oldest waiting one is decided from now on.
    reconciler.forget("team-a", "orders-0", "a1")
    served = reconciler.entries["orders-0"]
    assert (served.namespace, served.resource_version) == ("team-b", "7")
    assert "orders-0" in reconciler.dirty
    assert set(reconciler.unserved) == {("team-c", "orders-0")}
    # A waiting one goes: nothing changes for the one served.
    reconciler.forget("team-c", "orders-0", "c1")
    assert reconciler.unserved == {}
    assert reconciler.claims.waiting("orders-0") == ()
    assert reconciler.entries["orders-0"].namespace == "team-b"


def test_an_operator_that_starts_keeps_the_name_where_it_was_served() -> None:
    """At start the Partitions read claim their names in `_claim_order`: those whose status
    does not say NameConflict (served before, or never written), oldest first, then those
    that waited, so a restart does not move a name to one that waited for it, even an
    older one."""
    served = _partition("team-b", "b1", "2026-01-02T00:00:00Z")
    served["status"] = {"conditions": [_ready("True", "InSync")]}
    waiting = _partition("team-a", "a1", "2026-01-01T00:00:00Z")
    waiting["status"] = {"conditions": [_ready("False", NAME_CONFLICT)]}
    newer = _partition("team-c", "c1", "2026-01-03T00:00:00Z")
    never_written = _partition("team-d", "d1", "2026-01-01T00:00:00Z")
    objs = sorted([waiting, newer, served, never_written], key=_claim_order)
    assert [o["metadata"]["namespace"] for o in objs] == ["team-d", "team-b", "team-c", "team-a"]
    kube = KubeClient(kopf.ConnectionInfo(server="http://127.0.0.1:1"))  # never opened
    reconciler = Reconciler(OperatorSettings(), kube, Metrics())
    for obj in sorted([waiting, served], key=_claim_order):
        reconciler.observe(obj)
    assert reconciler.entries["orders-0"].namespace == "team-b"
    assert set(reconciler.unserved) == {("team-a", "orders-0")}


def _ready(status: str, reason: str) -> dict[str, Any]:
    return {
        "type": "Ready",
        "status": status,
        "reason": reason,
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }
