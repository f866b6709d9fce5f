"""Kafka's consumer group requests, in Kafka's messages, answered by `GroupCoordinator`.

- FindCoordinator: the broker leading the group's offsets Partition (from the
  cluster's listings); COORDINATOR_NOT_AVAILABLE while it has no leader or does not
  exist, with a message naming the Partition. Transaction coordinators are refused.
- JoinGroup, SyncGroup, Heartbeat, LeaveGroup: the classic protocol (`group.Group`),
  session timeouts within Kafka's default bounds (6 s to 30 min).
- OffsetCommit: stored with acks=all in the offsets Partition. OffsetFetch: the
  committed offsets of the topics the principal may DESCRIBE, -1 where none was
  committed.
- ListGroups: the groups this broker coordinates (clients ask every broker).
  DescribeGroups: state, protocol and members of each group asked for.

Authorization is Kafka's for the Group resource, by the access policy's rules for
groups (`Gate.allows_group`), checked before the coordinator is asked anything, so a
refused request changes nothing (no member, no rebalance, no offset):

- JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit: READ on the group;
  OffsetFetch, DescribeGroups and FindCoordinator (a group key): DESCRIBE on it.
  Refused: GROUP_AUTHORIZATION_FAILED, for OffsetCommit on every partition, for
  OffsetFetch on the group (v2+) or every partition asked (v1, which has no group
  error), for DescribeGroups and FindCoordinator v4+ on that group alone.
- OffsetCommit needs READ on each topic as well, OffsetFetch DESCRIBE
  (TOPIC_AUTHORIZATION_FAILED on the partition).
- ListGroups answers only the groups the principal may DESCRIBE (brokers and the
  operator, Kafka's DESCRIBE on the Cluster, every group).

The offsets Partitions are internal: Produce to them is refused on this listener
(INVALID_TOPIC_EXCEPTION, as Kafka refuses appends to `__consumer_offsets`).
"""

from __future__ import annotations

from typing import Any, Final

from epochlog.security.access import Operation
from epochlog.security.principal import Principal
from epochlog_broker.gate import Gate
from epochlog_broker.kafka import wire
from epochlog_broker.kafka.coordinator import CoordinatorError, GroupCoordinator
from epochlog_broker.kafka.group import NONE, JoinAnswer
from epochlog_broker.kafka.metadata import ClusterView, brokers, topics
from epochlog_broker.kafka.offsets import OFFSETS_TOPIC

MIN_SESSION_TIMEOUT_MS: Final = 6000
MAX_SESSION_TIMEOUT_MS: Final = 1_800_000
"""Kafka's group.min.session.timeout.ms and group.max.session.timeout.ms defaults."""
GROUP_KEY: Final = 0
AUTHORIZED_OPERATIONS_OMITTED: Final = -(2**31)
GROUP_REFUSED: Final = "group_authorization_failed"


def _ms(value: Any) -> int:
    return int(value.total_seconds() * 1000)


class GroupApis:
    def __init__(self, coordinator: GroupCoordinator, gate: Gate, view: ClusterView) -> None:
        self.coordinator = coordinator
        self.gate = gate
        self.view = view

    async def handle(self, req: wire.Request, who: Principal, peer: str) -> Any:
        key = req.api_key
        if key == wire.FIND_COORDINATOR:
            return await self.find_coordinator(req, who)
        if key == wire.JOIN_GROUP:
            return await self.join_group(req, who, peer)
        if key == wire.SYNC_GROUP:
            return await self.sync_group(req, who)
        if key == wire.HEARTBEAT:
            return await self.heartbeat(req, who)
        if key == wire.LEAVE_GROUP:
            return await self.leave_group(req, who)
        if key == wire.OFFSET_COMMIT:
            return await self.offset_commit(req, who)
        if key == wire.OFFSET_FETCH:
            return await self.offset_fetch(req, who)
        if key == wire.LIST_GROUPS:
            return self.list_groups(req, who)
        assert key == wire.DESCRIBE_GROUPS
        return await self.describe_groups(req, who)

    def _may(self, who: Principal, operation: Operation, group_id: str) -> bool:
        return self.gate.allows_group(who, operation, group_id)

    # -- FindCoordinator -------------------------------------------------------------------

    async def find_coordinator(self, req: wire.Request, who: Principal) -> Any:
        cls = wire.response_schema(wire.FIND_COORDINATOR, req.api_version)
        body = req.body
        keys = list(getattr(body, "coordinator_keys", ()) or ()) or [getattr(body, "key", "")]
        key_type = int(getattr(body, "key_type", GROUP_KEY))
        answers = [await self._coordinator_of(k, key_type, who) for k in keys]
        if req.api_version >= 4:
            return wire.build(cls, throttle_time=wire.NO_THROTTLE, coordinators=answers)
        return wire.build(cls, throttle_time=wire.NO_THROTTLE, **answers[0])

    async def _coordinator_of(self, key: str, key_type: int, who: Principal) -> dict[str, Any]:
        out: dict[str, Any] = {
            "key": key,
            "node_id": -1,
            "host": "",
            "port": -1,
            "error_message": None,
        }
        if key_type != GROUP_KEY:
            out["error_code"] = wire.error("transactional_id_authorization_failed")
            out["error_message"] = "transactions are not supported"
            return out
        if not self._may(who, Operation.DESCRIBE, key):
            out["error_code"] = wire.error(GROUP_REFUSED)
            out["error_message"] = f"not allowed to describe group {key!r}"
            return out
        name = self.coordinator.partition_of(key)
        listings = await self.view.listings()
        index = int(name.rsplit("-", 1)[1])
        parts = {p.index: p for p in topics(listings).get(OFFSETS_TOPIC, [])}
        part = parts.get(index)
        where = {b.node_id: b for b in brokers(listings)}
        if part is None or part.leader < 0 or part.leader not in where:
            self.view.forget()
            out["error_code"] = wire.error("coordinator_not_available")
            out["error_message"] = (
                f"the offsets Partition {name} of group {key!r} has no leader"
                if part is not None
                else f"the offsets Partition {name} of group {key!r} does not exist: "
                "Kafka consumer groups need the Partitions of "
                f"{OFFSETS_TOPIC} (the chart creates them)"
            )
            return out
        b = where[part.leader]
        out.update(node_id=b.node_id, host=b.host, port=b.port, error_code=wire.error(NONE))
        return out

    async def _call(self, coro: Any) -> tuple[Any, str]:
        """(result, NONE) or (None, Kafka's error name) for a coordinator call."""
        try:
            return await coro, NONE
        except CoordinatorError as exc:
            if exc.code == "not_coordinator":
                self.view.forget()
            return None, exc.code

    # -- JoinGroup, SyncGroup, Heartbeat, LeaveGroup ---------------------------------------

    async def join_group(self, req: wire.Request, who: Principal, peer: str) -> Any:
        cls = wire.response_schema(wire.JOIN_GROUP, req.api_version)
        body = req.body
        session = _ms(body.session_timeout)
        rebalance = _ms(getattr(body, "rebalance_timeout", body.session_timeout))
        answer: JoinAnswer | None
        if not self._may(who, Operation.READ, body.group_id):
            answer, error = None, GROUP_REFUSED
        elif not body.group_id:
            answer, error = None, "invalid_group_id"
        elif not MIN_SESSION_TIMEOUT_MS <= session <= MAX_SESSION_TIMEOUT_MS:
            answer, error = None, "invalid_session_timeout"
        else:
            answer, error = await self._call(
                self.coordinator.join(
                    body.group_id,
                    body.member_id,
                    client_id=req.client_id or "",
                    client_host=peer,
                    protocol_type=body.protocol_type,
                    protocols=tuple((p.name, bytes(p.metadata)) for p in body.protocols),
                    session_timeout_ms=session,
                    rebalance_timeout_ms=rebalance,
                    require_known_id=req.api_version >= 4,
                )
            )
        if answer is None:
            answer = JoinAnswer(error, member_id=body.member_id)
        return wire.build(
            cls,
            throttle_time=wire.NO_THROTTLE,
            error_code=wire.error(answer.error),
            generation_id=answer.generation,
            protocol_type=answer.protocol_type,
            protocol_name=answer.protocol_name or ("" if req.api_version < 7 else None),
            leader=answer.leader,
            skip_assignment=False,
            member_id=answer.member_id,
            members=[
                {"member_id": m, "group_instance_id": None, "metadata": meta}
                for m, meta in answer.members
            ],
        )

    async def sync_group(self, req: wire.Request, who: Principal) -> Any:
        cls = wire.response_schema(wire.SYNC_GROUP, req.api_version)
        body = req.body
        if not self._may(who, Operation.READ, body.group_id):
            answer, error = None, GROUP_REFUSED
        else:
            answer, error = await self._call(
                self.coordinator.sync(
                    body.group_id,
                    body.member_id,
                    int(body.generation_id),
                    {a.member_id: bytes(a.assignment) for a in body.assignments},
                )
            )
        if answer is not None:
            error = answer.error
        return wire.build(
            cls,
            throttle_time=wire.NO_THROTTLE,
            error_code=wire.error(error),
            protocol_type=None if answer is None else answer.protocol_type,
            protocol_name=None if answer is None else answer.protocol_name,
            assignment=b"" if answer is None else answer.assignment,
        )

    async def heartbeat(self, req: wire.Request, who: Principal) -> Any:
        cls = wire.response_schema(wire.HEARTBEAT, req.api_version)
        body = req.body
        if not self._may(who, Operation.READ, body.group_id):
            result, error = None, GROUP_REFUSED
        else:
            result, error = await self._call(
                self.coordinator.heartbeat(body.group_id, body.member_id, int(body.generation_id))
            )
        return wire.build(
            cls, throttle_time=wire.NO_THROTTLE, error_code=wire.error(result or error)
        )

    async def leave_group(self, req: wire.Request, who: Principal) -> Any:
        cls = wire.response_schema(wire.LEAVE_GROUP, req.api_version)
        body = req.body
        batch = req.api_version >= 3
        ids = [m.member_id for m in body.members] if batch else [body.member_id]
        if not self._may(who, Operation.READ, body.group_id):
            results, error = None, GROUP_REFUSED
        else:
            results, error = await self._call(self.coordinator.leave(body.group_id, ids))
        if results is None:
            results = [error] * len(ids)
        top = error if error != NONE else (results[0] if not batch else NONE)
        return wire.build(
            cls,
            throttle_time=wire.NO_THROTTLE,
            error_code=wire.error(top),
            members=[
                {"member_id": m, "group_instance_id": None, "error_code": wire.error(e)}
                for m, e in zip(ids, results, strict=True)
            ],
        )

    # -- OffsetCommit, OffsetFetch ---------------------------------------------------------

    async def offset_commit(self, req: wire.Request, who: Principal) -> Any:
        cls = wire.response_schema(wire.OFFSET_COMMIT, req.api_version)
        body = req.body
        asked: list[tuple[str, int, int, int, str]] = []
        refused: dict[tuple[str, int], str] = {}
        group_allowed = self._may(who, Operation.READ, body.group_id)
        for t in body.topics:
            allowed = self.gate.allows(who, Operation.READ, t.name)
            for p in t.partitions:
                index = int(p.partition_index)
                if not group_allowed:
                    refused[(t.name, index)] = GROUP_REFUSED
                    continue
                if not allowed or t.name == OFFSETS_TOPIC:
                    refused[(t.name, index)] = "topic_authorization_failed"
                    continue
                epoch = int(getattr(p, "committed_leader_epoch", -1))
                meta = p.committed_metadata or ""
                asked.append((t.name, index, int(p.committed_offset), epoch, meta))
        results: list[str] | None = []
        error = NONE
        if asked:
            results, error = await self._call(
                self.coordinator.commit(
                    body.group_id,
                    body.member_id,
                    int(body.generation_id_or_member_epoch),
                    asked,
                )
            )
        codes = dict(
            zip([(t, i) for t, i, *_ in asked], results or [error] * len(asked), strict=True)
        )
        codes.update(refused)
        out: dict[str, list[dict[str, Any]]] = {}
        for t in body.topics:
            for p in t.partitions:
                index = int(p.partition_index)
                out.setdefault(t.name, []).append(
                    {"partition_index": index, "error_code": wire.error(codes[(t.name, index)])}
                )
        return wire.build(
            cls,
            throttle_time=wire.NO_THROTTLE,
            topics=[{"name": n, "partitions": ps} for n, ps in out.items()],
        )

    async def offset_fetch(self, req: wire.Request, who: Principal) -> Any:
        cls = wire.response_schema(wire.OFFSET_FETCH, req.api_version)
        body = req.body
        if req.api_version >= 8:
            groups = [await self._fetch_group(g.group_id, g.topics, who) for g in body.groups]
            return wire.build(cls, throttle_time=wire.NO_THROTTLE, groups=groups)
        one = await self._fetch_group(body.group_id, body.topics, who)
        if req.api_version < 2 and one["error_code"] == wire.error(GROUP_REFUSED):
            # v1 has no group error: Kafka answers it on every partition asked.
            one["topics"] = [
                {
                    "name": t.name,
                    "partitions": [
                        {
                            "partition_index": int(i),
                            "committed_offset": -1,
                            "committed_leader_epoch": -1,
                            "metadata": "",
                            "error_code": wire.error(GROUP_REFUSED),
                        }
                        for i in t.partition_indexes
                    ],
                }
                for t in body.topics or ()
            ]
        return wire.build(
            cls, throttle_time=wire.NO_THROTTLE, topics=one["topics"], error_code=one["error_code"]
        )

    async def _fetch_group(self, group_id: str, asked: Any, who: Principal) -> dict[str, Any]:
        if not self._may(who, Operation.DESCRIBE, group_id):
            return {"group_id": group_id, "topics": [], "error_code": wire.error(GROUP_REFUSED)}
        committed, error = await self._call(self.coordinator.committed(group_id))
        if committed is None:
            return {"group_id": group_id, "topics": [], "error_code": wire.error(error)}
        wanted: dict[str, list[int]] = {}
        if asked is None:
            for topic, index in sorted(committed):
                wanted.setdefault(topic, []).append(index)
        else:
            for t in asked:
                wanted[t.name] = [int(i) for i in t.partition_indexes]
        out = []
        for topic, indexes in wanted.items():
            allowed = self.gate.allows(who, Operation.DESCRIBE, topic)
            if asked is None and not allowed:
                continue
            parts = []
            for index in indexes:
                c = committed.get((topic, index)) if allowed else None
                parts.append(
                    {
                        "partition_index": index,
                        "committed_offset": -1 if c is None else c.offset,
                        "committed_leader_epoch": -1 if c is None else c.leader_epoch,
                        "metadata": "" if c is None else c.metadata,
                        "error_code": wire.error(NONE if allowed else "topic_authorization_failed"),
                    }
                )
            out.append({"name": topic, "partitions": parts})
        return {"group_id": group_id, "topics": out, "error_code": wire.error(NONE)}

    # -- ListGroups, DescribeGroups --------------------------------------------------------

    def list_groups(self, req: wire.Request, who: Principal) -> Any:
        cls = wire.response_schema(wire.LIST_GROUPS, req.api_version)
        states = {s.lower() for s in getattr(req.body, "states_filter", ()) or ()}
        types = {t.lower() for t in getattr(req.body, "types_filter", ()) or ()}
        listed = [
            {
                "group_id": g,
                "protocol_type": protocol_type,
                "group_state": state,
                "group_type": "classic",
            }
            for g, protocol_type, state in self.coordinator.groups()
            if (not states or state.lower() in states)
            and (not types or "classic" in types)
            and self._may(who, Operation.DESCRIBE, g)
        ]
        return wire.build(
            cls, throttle_time=wire.NO_THROTTLE, error_code=wire.error(NONE), groups=listed
        )

    async def describe_groups(self, req: wire.Request, who: Principal) -> Any:
        cls = wire.response_schema(wire.DESCRIBE_GROUPS, req.api_version)
        out = []
        for group_id in req.body.groups:
            if not self._may(who, Operation.DESCRIBE, group_id):
                out.append(_refused_description(group_id))
                continue
            group, error = await self._call(self.coordinator.describe(group_id))
            entry: dict[str, Any] = {
                "error_code": wire.error(error),
                "group_id": group_id,
                "group_state": "Dead",
                "protocol_type": "",
                "protocol_data": "",
                "members": [],
                "authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
            }
            if group is not None:
                stable = group.state.value in ("Stable", "CompletingRebalance")
                entry.update(
                    group_state=group.state.value,
                    protocol_type=group.protocol_type or "",
                    protocol_data=group.protocol_name or "",
                    members=[
                        {
                            "member_id": m.member_id,
                            "group_instance_id": None,
                            "client_id": m.client_id,
                            "client_host": m.client_host,
                            "member_metadata": m.metadata(group.protocol_name)
                            if stable and group.protocol_name
                            else b"",
                            "member_assignment": m.assignment,
                        }
                        for m in group.members.values()
                    ],
                )
            elif error == NONE:
                entry["group_state"] = "Empty" if self._has_offsets(group_id) else "Dead"
            out.append(entry)
        return wire.build(cls, throttle_time=wire.NO_THROTTLE, groups=out)

    def _has_offsets(self, group_id: str) -> bool:
        return any(g == group_id for g, _t, _s in self.coordinator.groups())


def _refused_description(group_id: str) -> dict[str, Any]:
    """DescribeGroups' answer for a group the principal may not describe: nothing of it,
    its state unknown ("", as Kafka answers)."""
    return {
        "error_code": wire.error(GROUP_REFUSED),
        "group_id": group_id,
        "group_state": "",
        "protocol_type": "",
        "protocol_data": "",
        "members": [],
        "authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
    }
