"""Kafka's Group ACLs on the Kafka listener, judged by kafka-python nobody here wrote.

An embedded cluster with TLS, one offsets Partition (so one coordinator) and an access
policy: `billing` (SASL/SCRAM-SHA-512) may read and write topic `ledger` and read the
groups `billing-*`; `audit` (SASL/PLAIN, a bearer token) may read `ledger` and no group.

- audit's kafka-python consumer in group billing-1 is refused
  (GroupAuthorizationFailedError) though it may read the topic.
- billing's consumer in billing-1 reads what billing wrote and commits.
- audit cannot fetch those offsets nor describe the group, and ListGroups shows
  billing-1 to billing, not to audit.
- Every version of every group API, sent by audit as Kafka's own schemas build it,
  is answered GROUP_AUTHORIZATION_FAILED, and none of it changed anything: a JoinGroup
  of a new member did not start a rebalance (billing's member is still alone in its
  Stable group, handed its partitions once), billing's offsets are as committed, and
  billing-2, into which audit committed at every version, has no offsets.
"""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka.consumer.subscription_state import ConsumerRebalanceListener
from kafka.errors import GroupAuthorizationFailedError

from epochlog.resources import KAFKA_OFFSETS_TOPIC
from epochlog.security.access import scram_entry, token_digest
from epochlog.security.tls import TlsFiles, client_context
from epochlog_broker.kafka import wire
from epochlog_tools.devcluster.local import LocalCluster
from tests.e2e.conftest import e2e_settings, print_logs
from tests.e2e.helpers import create_partition, status_of, until
from tests.e2e.test_kafka_clients import _group_request, _kafka_address
from tests.e2e.test_kafka_sasl import _sasl_ssl
from tests.kafka.raw import KafkaConnection

TOPIC = "ledger"
GROUP = "billing-1"
UNUSED = "billing-2"
"""A group without members or offsets: a standalone commit into it is taken, when allowed."""
RECORDS = 3
BILLING_PASSWORD = "correct horse battery staple"
AUDIT_TOKEN = "audit-token-0123456789"
WAIT_S = 120.0
REFUSED = wire.error("group_authorization_failed")


class Member(ConsumerRebalanceListener):  # type: ignore[misc]
    """billing's kafka-python consumer in GROUP, in a thread until stopped: it reads,
    commits once it read every record, and counts the assignments it is handed."""

    def __init__(self, bootstrap: list[str], sasl: dict[str, Any]) -> None:
        self.bootstrap, self.sasl = bootstrap, sasl
        self.read: list[bytes] = []
        self.assigned = 0
        self.committed = threading.Event()
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="billing-member", daemon=True)

    def on_partitions_revoked(self, revoked: Any) -> None:
        pass

    def on_partitions_assigned(self, assigned: Any) -> None:
        self.assigned += 1

    def _run(self) -> None:
        consumer = KafkaConsumer(
            bootstrap_servers=self.bootstrap,
            group_id=GROUP,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            # Long enough that a busy machine does not drop the member: a rebalance
            # seen below is one a request of audit's started.
            session_timeout_ms=30_000,
            heartbeat_interval_ms=1000,
            **self.sasl,
        )
        try:
            consumer.subscribe([TOPIC], listener=self)
            while not self.stop.is_set():
                for records in consumer.poll(timeout_ms=200).values():
                    self.read += [r.value for r in records]
                if len(self.read) >= RECORDS and not self.committed.is_set():
                    consumer.commit()
                    self.committed.set()
        except BaseException as exc:
            self.error = exc
        finally:
            consumer.close(autocommit=False)


def _produce(bootstrap: list[str], sasl: dict[str, Any]) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", **sasl)
    try:
        for i in range(RECORDS):
            producer.send(TOPIC, b"r%d" % i, partition=0).get(60)
    finally:
        producer.close()


def _join_refused(bootstrap: list[str], sasl: dict[str, Any]) -> Any:
    """What audit's consumer in GROUP is told (None: it polled on, never refused)."""
    consumer = KafkaConsumer(
        TOPIC, bootstrap_servers=bootstrap, group_id=GROUP, enable_auto_commit=False, **sasl
    )
    try:
        for _ in range(60):
            consumer.poll(timeout_ms=1000)
    except GroupAuthorizationFailedError as exc:
        return exc
    finally:
        consumer.close(autocommit=False)
    return None


def _admin(bootstrap: list[str], sasl: dict[str, Any]) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000, **sasl)


def _listed(bootstrap: list[str], sasl: dict[str, Any]) -> set[str]:
    admin = _admin(bootstrap, sasl)
    try:
        return {g["group_id"] for g in admin.list_groups()}
    finally:
        admin.close()


def _offsets(bootstrap: list[str], sasl: dict[str, Any], group: str) -> Any:
    """{partition: committed offset} of `group` as kafka-python's admin client reads
    them; the error it raised instead, if any."""
    admin = _admin(bootstrap, sasl)
    try:
        answer = admin.list_group_offsets(group)[group]
    except GroupAuthorizationFailedError as exc:
        return exc
    finally:
        admin.close()
    return {tp.partition: om.offset for tp, om in answer.items()}


def _described(
    bootstrap: list[str], sasl: dict[str, Any], coordinator: int
) -> dict[str, Any] | None:
    """GROUP as DescribeGroups answers it, asked of the coordinator directly (past
    FindCoordinator, which a principal that may not describe the group is refused)."""
    admin = _admin(bootstrap, sasl)
    try:
        return dict(admin.describe_groups([GROUP], group_coordinator_id=coordinator)[GROUP])
    finally:
        admin.close()


async def _stable_alone(bootstrap: list[str], sasl: dict[str, Any], coordinator: int) -> str:
    """The member id of GROUP's only member once the group is Stable ("" before)."""
    group = await asyncio.to_thread(_described, bootstrap, sasl, coordinator)
    if group is None or group["group_state"] != "Stable" or len(group["members"]) != 1:
        return ""
    return str(group["members"][0]["member_id"])


async def _as_audit(cluster: LocalCluster, broker: int) -> KafkaConnection:
    """A connection to `broker` authenticated as audit (SASL/PLAIN, no certificate)."""
    pki = cluster.security.pki
    assert pki is not None
    conn = await KafkaConnection.open(
        _kafka_address(cluster, broker), client_context(TlsFiles(str(pki.cluster_ca)))
    )
    shake = await conn.ask(wire.SASL_HANDSHAKE, 1, mechanism="PLAIN")
    assert shake.error_code == wire.error("none")
    auth = await conn.ask(wire.SASL_AUTHENTICATE, 2, auth_bytes=b"\0audit\0" + AUDIT_TOKEN.encode())
    assert auth.error_code == wire.error("none")
    return conn


def _check_refused(api_key: int, version: int, answer: Any) -> None:
    what = f"api {api_key} v{version}"
    if api_key == wire.FIND_COORDINATOR:
        found = answer.coordinators[0] if version >= 4 else answer
        assert (found.error_code, int(found.node_id)) == (REFUSED, -1), what
    elif api_key == wire.OFFSET_COMMIT:
        ((p,),) = [t.partitions for t in answer.topics]
        assert p.error_code == REFUSED, what
    elif api_key == wire.OFFSET_FETCH:
        if version >= 8:
            (group,) = answer.groups
            assert (group.error_code, group.topics) == (REFUSED, ()), what
        elif version >= 2:
            assert (answer.error_code, answer.topics) == (REFUSED, ()), what
        else:  # v1 has no group error: every partition asked carries it, and no offset
            ((p,),) = [t.partitions for t in answer.topics]
            assert (p.error_code, int(p.committed_offset)) == (REFUSED, -1), what
    elif api_key == wire.DESCRIBE_GROUPS:
        (group,) = answer.groups
        assert (group.error_code, group.group_state, group.members) == (REFUSED, "", ()), what
    else:
        assert api_key in (wire.JOIN_GROUP, wire.SYNC_GROUP, wire.HEARTBEAT, wire.LEAVE_GROUP)
        assert answer.error_code == REFUSED, what


async def _every_group_api_refused_to_audit(cluster: LocalCluster, coordinator: int) -> None:
    conn = await _as_audit(cluster, coordinator)
    try:
        for api_key in sorted(wire.GROUP_APIS):
            low, high = wire.SUPPORTED[api_key]
            for version in range(low, high + 1):
                values = _group_request(api_key, version, group=GROUP, topic=TOPIC)
                if api_key == wire.JOIN_GROUP:
                    # A new member: allowed, it would start a rebalance (v4+: be given
                    # an id to come back with).
                    values["member_id"] = ""
                elif api_key == wire.OFFSET_COMMIT:
                    # A standalone commit, into a group without members: allowed, it
                    # would be written (audit may read the topic).
                    values = _group_request(api_key, version, group=UNUSED, topic=TOPIC)
                answer = await conn.ask(api_key, version, **values)
                if api_key == wire.LIST_GROUPS:
                    assert answer.error_code == wire.error("none")
                    assert [g.group_id for g in answer.groups] == [], f"v{version}"
                else:
                    _check_refused(api_key, version, answer)
    finally:
        await conn.close()


async def test_group_rules_decide_who_may_join_commit_fetch_describe_and_list_a_group(
    tmp_path: Path,
) -> None:
    settings = e2e_settings()
    settings.kafka_offsets_partitions = 1
    cluster = LocalCluster(tmp_path / "cluster", brokers=3, settings=settings)
    policy = {
        "tokens": [{"principal": "User:audit", "sha256": token_digest(AUDIT_TOKEN)}],
        "scram": [scram_entry("billing", BILLING_PASSWORD, "SCRAM-SHA-512", 4096)],
        "acls": [
            # The embedded cluster's own client (waiting for leaders): topics only.
            {"principal": "User:admin", "topics": ["*"], "operations": ["all"]},
            {"principal": "User:billing", "topics": [TOPIC], "operations": ["read", "write"]},
            {"principal": "User:billing", "groups": ["billing-*"], "operations": ["read"]},
            {"principal": "User:audit", "topics": [TOPIC], "operations": ["read"]},
        ],
    }
    path = tmp_path / "access.yaml"
    path.write_text(json.dumps(policy))
    settings.broker_args = ("--access-policy", str(path))
    await cluster.up(example_partitions=False)
    try:
        await cluster.offsets_partitions()
        coordinator = (await status_of(cluster, f"{KAFKA_OFFSETS_TOPIC}-0")).leader
        assert coordinator is not None
        await create_partition(cluster, f"{TOPIC}-0", (1, 2, 3))
        billing = _sasl_ssl(cluster, "SCRAM-SHA-512", "billing", BILLING_PASSWORD)
        audit = _sasl_ssl(cluster, "PLAIN", "audit", AUDIT_TOKEN)
        bootstrap = cluster.kafka_bootstrap
        await asyncio.to_thread(_produce, bootstrap, billing)

        # audit may read the topic, not be a member of the group.
        refused = await asyncio.to_thread(_join_refused, bootstrap, audit)
        assert isinstance(refused, GroupAuthorizationFailedError), refused

        member = Member(bootstrap, billing)
        member.thread.start()
        try:

            async def committed() -> bool:
                assert member.error is None, member.error
                return member.committed.is_set()

            await until(committed, WAIT_S, "billing's member read everything and committed")
            assert member.read == [b"r%d" % i for i in range(RECORDS)]
            member_id = await until(
                lambda: _stable_alone(bootstrap, billing, coordinator),
                WAIT_S,
                "billing-1 Stable with billing's member alone",
            )
            assert await asyncio.to_thread(_offsets, bootstrap, billing, GROUP) == {0: RECORDS}
            assert GROUP in await asyncio.to_thread(_listed, bootstrap, billing)

            # audit: not shown the group, not told its offsets, refused its description.
            assert GROUP not in await asyncio.to_thread(_listed, bootstrap, audit)
            fetched = await asyncio.to_thread(_offsets, bootstrap, audit, GROUP)
            assert isinstance(fetched, GroupAuthorizationFailedError), fetched
            seen = await asyncio.to_thread(_described, bootstrap, audit, coordinator)
            assert seen is not None
            assert "GroupAuthorizationFailed" in str(seen["error"]), seen
            assert seen["members"] == []

            await _every_group_api_refused_to_audit(cluster, coordinator)

            # None of it changed anything.
            assert await _stable_alone(bootstrap, billing, coordinator) == member_id
            assert await asyncio.to_thread(_offsets, bootstrap, billing, GROUP) == {0: RECORDS}
            assert await asyncio.to_thread(_offsets, bootstrap, billing, UNUSED) == {}
            assert member.error is None, member.error
            assert member.assigned == 1
        finally:
            member.stop.set()
            await asyncio.to_thread(member.thread.join)
    except BaseException:
        print_logs(cluster)
        raise
    finally:
        await cluster.down()
