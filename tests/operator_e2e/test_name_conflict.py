"""One name, one Partition: a real operator serving every namespace, on the emulator.

Brokers know a partition by its name alone, so of two Partitions named alike
in two namespaces only the first is assigned to brokers. The second gets a
status saying why (Ready False, reason NameConflict, naming the namespace that
holds the name) and a Warning Event, and takes over the name once the first is
deleted.
"""

from __future__ import annotations

from typing import Any

from epochlog.resources import ConditionType, PartitionStatus
from epochlog_operator.conditions import NAME_CONFLICT
from tests.operator_e2e.conftest import Env, partition_body, until
from tests.waiting import until as until_async

FIRST = "team-a"
SECOND = "team-b"
NAME = "orders-0"


def _path(namespace: str, name: str | None = None) -> str:
    base = f"/apis/epochlog.dev/v1alpha1/namespaces/{namespace}/partitions"
    return f"{base}/{name}" if name else base


async def _status(env: Env, namespace: str) -> PartitionStatus | None:
    code, obj = await env.api.call("GET", _path(namespace, NAME))
    if code != 200 or not obj.get("status"):
        return None
    return PartitionStatus.model_validate(obj["status"])


async def _events(env: Env, namespace: str) -> list[dict[str, Any]]:
    data = await env.api.ok(
        "GET", f"/api/v1/namespaces/{namespace}/events?fieldSelector=involvedObject.name={NAME}"
    )
    items: list[dict[str, Any]] = data["items"]
    return items


def _reason(s: PartitionStatus | None) -> str | None:
    ready = s.condition(ConditionType.READY) if s is not None else None
    return ready.reason if ready is not None else None


async def test_a_second_partition_of_a_name_in_another_namespace_waits_for_the_name(
    env: Env,
) -> None:
    for ns in (FIRST, SECOND):
        await env.api.ok("POST", "/api/v1/namespaces", {"metadata": {"name": ns}})
    await env.operator("--standalone")  # no --namespace: every namespace
    async with env.cluster([1, 2, 3]) as cluster:
        await env.api.ok("POST", _path(FIRST), partition_body(NAME, replicas=[1, 2, 3]))

        async def served_in_first() -> PartitionStatus | None:
            s = await _status(env, FIRST)
            return s if s is not None and _reason(s) == "InSync" else None

        first = await until_async(served_in_first, f"{FIRST}/{NAME} Ready", 10)
        assert first is not None
        await env.api.ok("POST", _path(SECOND), partition_body(NAME, replicas=[3, 2, 1]))

        async def refused_in_second() -> PartitionStatus | None:
            s = await _status(env, SECOND)
            return s if _reason(s) == NAME_CONFLICT else None

        refused = await until_async(refused_in_second, f"{SECOND}/{NAME} NameConflict", 10)
        assert refused is not None
        ready = refused.condition(ConditionType.READY)
        assert ready is not None
        assert ready.status == "False"
        assert f"namespace {FIRST}" in ready.message
        # Not assigned: no leader, replicas or epochs shown, and the brokers still follow
        # the first one's assignment.
        assert (refused.leader, refused.replicas, refused.leader_epoch) == (None, (), 0)

        async def warned() -> list[dict[str, Any]]:
            return [e for e in await _events(env, SECOND) if e["reason"] == NAME_CONFLICT]

        events = await until_async(warned, f"a {NAME_CONFLICT} Event in {SECOND}", 10)
        assert len(events) == 1, events
        assert events[0]["type"] == "Warning"
        assert f"namespace {FIRST}" in events[0]["message"]
        now = await _status(env, FIRST)
        assert now is not None
        assert (now.leader, now.leader_epoch) == (first.leader, first.leader_epoch)
        assert first.leader is not None
        leader = cluster.brokers[first.leader].replica(NAME)
        await until(lambda: leader.role == "leader", 5, "the first one's leader to lead it")

        # The first one goes: the second takes the name over and is assigned, from the
        # brokers' record of the name (epochs never below the first one's).
        await env.api.ok("DELETE", _path(FIRST, NAME))

        async def served_in_second() -> PartitionStatus | None:
            s = await _status(env, SECOND)
            return s if s is not None and _reason(s) == "InSync" else None

        taken = await until_async(served_in_second, f"{SECOND}/{NAME} Ready", 15)
        assert taken is not None
        assert taken.leader_epoch >= first.leader_epoch
        assert set(taken.isr) == {1, 2, 3}
        await until(
            lambda: all(
                b.replica(NAME).leader_epoch == taken.leader_epoch for b in cluster.brokers.values()
            ),
            5,
            "every broker on the second Partition's leaderEpoch",
        )
