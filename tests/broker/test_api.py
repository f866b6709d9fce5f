"""The HTTP API on three real broker processes (RF3) and the test controller.

One cluster serves the whole module: produce with every acks level and body
format, reads (JSON, base64, binary batches) and long polls, ListOffsets,
the partition listing, health, readiness and metrics, the replication
endpoints, and every kind of bad input with its status and code, after
which nothing acknowledged is missing.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from prometheus_client.parser import text_string_to_metric_families

from epochlog.protocol.batch import Record, encode_batch
from epochlog.protocol.errors import FencedLeaderEpochError
from epochlog.protocol.framing import BATCH_CONTENT_TYPE, unframe
from epochlog_broker.replica_wire import decode_session_answer
from tests.broker.cluster import ApiError, Cluster
from tests.broker.controller import spec
from tests.broker.test_openapi import DOCUMENT

pytestmark = pytest.mark.asyncio(loop_scope="module")

NAME = "orders-0"
MAX_RECORD = 4096
MAX_REQUEST = 64 * 1024
LONG_POLL_MS = 50_000
"""A long poll's maxWaitMs: far above the time anything in these tests takes to arrive."""


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def cluster(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Cluster]:
    async with Cluster(
        tmp_path_factory.mktemp("api"),
        [spec("orders", 0)],
        extra_args=[
            "--max-record-bytes",
            str(MAX_RECORD),
            "--max-request-bytes",
            str(MAX_REQUEST),
        ],
        # Nobody is fenced here on purpose: a session long enough that a broker starved of
        # CPU on a busy machine is not fenced either (a new leader would fail these tests).
        session_timeout_ms=10_000,
    ).serving(NAME) as c:
        yield c


async def leader(c: Cluster) -> int:
    return await c.wait_leader(NAME)


async def records_path(c: Cluster) -> tuple[int, str]:
    return await leader(c), f"/v1/partitions/{NAME}/records"


async def test_produce_acks_all_and_read_back(cluster: Cluster) -> None:
    b, path = await records_path(cluster)
    before = (await cluster.call("GET", b, f"/v1/partitions/{NAME}/offsets"))["offset"]
    first = await cluster.call(
        "POST",
        b,
        path,
        params={"acks": "all"},
        json={
            "records": [
                {"key": "k1", "value": "v1", "headers": {"h": "x"}},
                {"key": None, "value": "v2"},
            ]
        },
    )
    second = await cluster.call("POST", b, path, json={"records": [{"value": "v3"}]})
    assert first["baseOffset"] == before
    assert first["lastOffset"] == before + 1
    assert second["baseOffset"] == before + 2 == second["lastOffset"]
    assert first["leaderEpoch"] >= 1

    answer = await cluster.call("GET", b, path, params={"offset": before})
    got = answer["records"]
    assert [r["value"] for r in got] == ["v1", "v2", "v3"]
    assert [r["offset"] for r in got] == [before, before + 1, before + 2]
    assert got[0]["key"] == "k1"
    assert got[0]["headers"] == {"h": "x"}
    assert got[1]["key"] is None
    assert got[1]["headers"] == {}
    assert all(r["leaderEpoch"] == first["leaderEpoch"] for r in got)
    assert all(abs(r["timestamp"] - time.time() * 1000) < 60_000 for r in got)
    # acks=all: the high watermark covers the records on answer.
    assert answer["highWatermark"] >= before + 3
    assert answer["logStartOffset"] == 0
    assert answer["leaderEpoch"] == first["leaderEpoch"]

    latest = await cluster.call("GET", b, f"/v1/partitions/{NAME}/offsets", params={"at": "latest"})
    earliest = await cluster.call(
        "GET", b, f"/v1/partitions/{NAME}/offsets", params={"at": "earliest"}
    )
    assert latest["offset"] == answer["highWatermark"]
    assert earliest["offset"] == 0
    by_time = await cluster.call(
        "GET", b, f"/v1/partitions/{NAME}/offsets", params={"at": got[0]["timestamp"]}
    )
    assert by_time["offset"] <= before

    # Every replica holds the acknowledged records (acks=all waited for the ISR).
    for other in cluster.brokers:
        part = (await cluster.partitions(other))[NAME]
        assert part["persistedLogEndOffset"] >= before + 3, part


async def test_acks_leader_and_none(cluster: Cluster) -> None:
    b, path = await records_path(cluster)
    leader = await cluster.call(
        "POST", b, path, params={"acks": "leader"}, json={"records": [{"value": "leader"}]}
    )
    assert leader["lastOffset"] == leader["baseOffset"]
    # acks=none is answered before the leader knows the records will last (not synced,
    # not replicated): a leader that fails may give the same offsets to other records,
    # so the answer promises none.
    none = await cluster.call(
        "POST", b, path, params={"acks": "none"}, json={"records": [{"value": "none"}]}
    )
    assert "baseOffset" not in none
    assert "lastOffset" not in none
    assert none["leaderEpoch"] == leader["leaderEpoch"]

    async def readable() -> bool:
        got = await cluster.call("GET", b, path, params={"offset": leader["baseOffset"] + 1})
        return [r["value"] for r in got["records"]] == ["none"]

    await cluster.wait_until(readable, 5, "the acks=none record to be committed")


async def test_base64_keys_values_and_headers_round_trip(cluster: Cluster) -> None:
    b, path = await records_path(cluster)
    raw = bytes(range(256))
    enc = base64.b64encode(raw).decode()
    answer = await cluster.call(
        "POST",
        b,
        path,
        params={"encoding": "base64"},
        json={"records": [{"key": enc, "value": enc, "headers": {"bin": enc}}]},
    )
    got = await cluster.call(
        "GET", b, path, params={"offset": answer["baseOffset"], "encoding": "base64"}
    )
    r = got["records"][0]
    assert base64.b64decode(r["value"]) == raw == base64.b64decode(r["key"])
    assert base64.b64decode(r["headers"]["bin"]) == raw


async def test_binary_batches_produce_and_read(cluster: Cluster) -> None:
    b, path = await records_path(cluster)
    values = [f"bin-{i}".encode() for i in range(100)]
    body = encode_batch(
        [Record(v, key=b"k") for v in values], base_offset=0, leader_epoch=0, timestamp=123
    )
    status, raw, _ = await cluster.request(
        "POST", b, path, data=bytes(body), headers={"Content-Type": BATCH_CONTENT_TYPE}
    )
    assert status == 200, raw
    answer = json.loads(raw)
    assert answer["lastOffset"] - answer["baseOffset"] == 99

    status, raw, ctype = await cluster.request(
        "GET",
        b,
        path,
        params={"offset": answer["baseOffset"] + 10},
        headers={"Accept": BATCH_CONTENT_TYPE},
    )
    assert status == 200
    assert ctype == BATCH_CONTENT_TYPE
    header, batches = unframe(raw)
    assert header["offset"] == answer["baseOffset"] + 10
    records = [
        r
        for batch in batches
        for r in batch.records()
        if header["offset"] <= r.offset < header["highWatermark"]
    ]
    assert [r.value for r in records] == values[10:]
    assert records[0].offset == answer["baseOffset"] + 10
    assert {r.timestamp for r in records} == {123}

    js = await cluster.call("GET", b, path, params={"offset": answer["baseOffset"]})
    assert [r["value"] for r in js["records"]] == [v.decode() for v in values]


async def test_idempotent_producer_retries_are_not_written_twice(cluster: Cluster) -> None:
    b, path = await records_path(cluster)
    body = {
        "records": [{"value": "once-a"}, {"value": "once-b"}],
        "producerId": 77,
        "producerEpoch": 0,
        "baseSequence": 0,
    }
    first = await cluster.call("POST", b, path, json=body)
    retry = await cluster.call("POST", b, path, json=body)
    assert retry == first
    # The binary path carries the same fields in the batch header.
    raw = encode_batch(
        [Record(b"once-c")],
        base_offset=0,
        leader_epoch=0,
        timestamp=1,
        producer_id=77,
        producer_epoch=0,
        base_sequence=2,
    )
    answers = [
        json.loads(
            (
                await cluster.request(
                    "POST", b, path, data=bytes(raw), headers={"Content-Type": BATCH_CONTENT_TYPE}
                )
            )[1]
        )
        for _ in range(2)
    ]
    assert answers[0] == answers[1]
    assert answers[0]["baseOffset"] == first["lastOffset"] + 1
    got = await cluster.call("GET", b, path, params={"offset": first["baseOffset"]})
    assert [r["value"] for r in got["records"]] == ["once-a", "once-b", "once-c"]
    with pytest.raises(ApiError) as err:
        await cluster.call("POST", b, path, json={**body, "baseSequence": 10})
    assert (err.value.status, err.value.code) == (409, "OUT_OF_ORDER_SEQUENCE")


async def test_long_poll_returns_when_data_arrives(cluster: Cluster) -> None:
    b, path = await records_path(cluster)
    hw = (await cluster.call("GET", b, f"/v1/partitions/{NAME}/offsets"))["offset"]
    started = time.monotonic()
    poll = asyncio.create_task(
        cluster.call("GET", b, path, params={"offset": hw, "maxWaitMs": LONG_POLL_MS})
    )
    await asyncio.sleep(0.3)
    assert not poll.done()
    await cluster.call("POST", b, path, json={"records": [{"value": "wake"}]})
    answer = await poll
    elapsed = time.monotonic() - started
    assert [r["value"] for r in answer["records"]] == ["wake"]
    # Answered before its maxWaitMs ran out: the record woke the poll.
    assert 0.3 <= elapsed < LONG_POLL_MS / 1000, elapsed


async def test_long_poll_times_out_empty(cluster: Cluster) -> None:
    b, path = await records_path(cluster)
    hw = (await cluster.call("GET", b, f"/v1/partitions/{NAME}/offsets"))["offset"]
    started = time.monotonic()
    longer = asyncio.create_task(
        cluster.call("GET", b, path, params={"offset": hw, "maxWaitMs": LONG_POLL_MS})
    )
    answer = await cluster.call("GET", b, path, params={"offset": hw, "maxWaitMs": 300})
    assert answer["records"] == []
    assert answer["highWatermark"] == hw
    assert time.monotonic() - started >= 0.25
    # Ended by its own maxWaitMs (not by a limit of the broker's, however fast the machine
    # is): a poll of the same offset with a longer one still waits, until a record comes.
    assert not longer.done()
    await cluster.call("POST", b, path, json={"records": [{"value": "ends-the-longer-poll"}]})
    assert [r["value"] for r in (await longer)["records"]] == ["ends-the-longer-poll"]


async def test_follower_answers_not_leader_with_the_leaders_address(cluster: Cluster) -> None:
    b, path = await records_path(cluster)
    follower = next(x for x in cluster.brokers if x != b)
    for method, kwargs in (
        ("POST", {"json": {"records": [{"value": "x"}]}}),
        ("GET", {"params": {"offset": 0}}),
    ):
        with pytest.raises(ApiError) as err:
            await cluster.call(method, follower, path, **kwargs)
        assert err.value.status == 409
        assert err.value.code == "NOT_LEADER_OR_FOLLOWER"
        assert err.value.error["retriable"] is True
        assert err.value.error["leader"] == b
        assert err.value.error["leaderAddress"] == cluster.brokers[b].url
        assert err.value.error["leaderEpoch"] >= 1


# -- bad input ---------------------------------------------------------------------------

BAD_REQUESTS: list[tuple[str, str, dict[str, Any], int, str, str]] = [
    # (id, method, request kwargs, status, code, message fragment)
    ("malformed-json", "POST", {"data": b"{nope"}, 400, "INVALID_REQUEST", "Invalid JSON"),
    ("not-an-object", "POST", {"json": [1, 2]}, 400, "INVALID_REQUEST", "object"),
    ("no-records", "POST", {"json": {}}, 400, "INVALID_REQUEST", "records: Field required"),
    ("empty-records", "POST", {"json": {"records": []}}, 400, "INVALID_REQUEST", "at least 1"),
    (
        "value-not-a-string",
        "POST",
        {"json": {"records": [{"value": 5}]}},
        400,
        "INVALID_REQUEST",
        "records.0.value",
    ),
    (
        "key-not-a-string",
        "POST",
        {"json": {"records": [{"value": "a", "key": ["k"]}]}},
        400,
        "INVALID_REQUEST",
        "records.0.key",
    ),
    (
        "header-not-a-string",
        "POST",
        {"json": {"records": [{"value": "a", "headers": {"h": 1}}]}},
        400,
        "INVALID_REQUEST",
        "records.0.headers.h",
    ),
    (
        "unknown-field",
        "POST",
        {"json": {"records": [{"valeu": "a"}]}},
        400,
        "INVALID_REQUEST",
        "records.0.valeu",
    ),
    (
        "bad-acks",
        "POST",
        {"params": {"acks": "most"}, "json": {"records": [{"value": "a"}]}},
        400,
        "INVALID_REQUEST",
        "acks must be",
    ),
    (
        "bad-timeout",
        "POST",
        {"params": {"timeoutMs": "soon"}, "json": {"records": [{"value": "a"}]}},
        400,
        "INVALID_REQUEST",
        "timeoutMs must be an integer",
    ),
    (
        "zero-timeout",
        "POST",
        {"params": {"timeoutMs": 0}, "json": {"records": [{"value": "a"}]}},
        400,
        "INVALID_REQUEST",
        "timeoutMs must be >= 1",
    ),
    (
        "bad-base64",
        "POST",
        {"params": {"encoding": "base64"}, "json": {"records": [{"value": "***"}]}},
        400,
        "INVALID_REQUEST",
        "base64",
    ),
    (
        "partial-producer-fields",
        "POST",
        {"json": {"records": [{"value": "a"}], "producerId": 5}},
        400,
        "INVALID_REQUEST",
        "go together",
    ),
    (
        "record-too-large",
        "POST",
        {"json": {"records": [{"value": "x" * (MAX_RECORD + 1)}]}},
        413,
        "RECORD_TOO_LARGE",
        "records.0",
    ),
    (
        "body-too-large",
        "POST",
        {"json": {"records": [{"value": "x" * 1000}] * 70}},
        413,
        "RECORD_TOO_LARGE",
        "exceeds the limit",
    ),
    (
        "binary-garbage",
        "POST",
        {"data": b"\x00" * 80, "headers": {"Content-Type": BATCH_CONTENT_TYPE}},
        400,
        "INVALID_REQUEST",
        "invalid record batch",
    ),
    (
        "binary-bad-crc",
        "POST",
        {
            "data": bytes(
                encode_batch([Record(b"a")], base_offset=0, leader_epoch=0, timestamp=1)[:-1]
            )
            + b"b",
            "headers": {"Content-Type": BATCH_CONTENT_TYPE},
        },
        400,
        "INVALID_REQUEST",
        "CRC",
    ),
    (
        "stale-epoch-produce",
        "POST",
        {"params": {"leaderEpoch": 0}, "json": {"records": [{"value": "a"}]}},
        409,
        "FENCED_LEADER_EPOCH",
        "older",
    ),
    (
        "future-epoch-produce",
        "POST",
        {"params": {"leaderEpoch": 99}, "json": {"records": [{"value": "a"}]}},
        409,
        "UNKNOWN_LEADER_EPOCH",
        "newer",
    ),
    (
        "bad-epoch-param",
        "POST",
        {"params": {"leaderEpoch": "one"}, "json": {"records": [{"value": "a"}]}},
        400,
        "INVALID_REQUEST",
        "leaderEpoch must be an integer",
    ),
    ("read-no-offset", "GET", {}, 400, "INVALID_REQUEST", "offset is required"),
    ("read-bad-offset", "GET", {"params": {"offset": "x"}}, 400, "INVALID_REQUEST", "offset"),
    (
        "read-offset-past-end",
        "GET",
        {"params": {"offset": 10**9}},
        416,
        "OFFSET_OUT_OF_RANGE",
        "outside",
    ),
    (
        "read-negative-offset",
        "GET",
        {"params": {"offset": -1}},
        416,
        "OFFSET_OUT_OF_RANGE",
        "outside",
    ),
    (
        "read-zero-max-records",
        "GET",
        {"params": {"offset": 0, "maxRecords": 0}},
        400,
        "INVALID_REQUEST",
        "maxRecords must be >= 1",
    ),
    (
        "read-wait-too-long",
        "GET",
        {"params": {"offset": 0, "maxWaitMs": 10**9}},
        400,
        "INVALID_REQUEST",
        "maxWaitMs must be <=",
    ),
    (
        "read-stale-epoch",
        "GET",
        {"params": {"offset": 0, "leaderEpoch": 0}},
        409,
        "FENCED_LEADER_EPOCH",
        "older",
    ),
]


@pytest.mark.parametrize(
    ("method", "kwargs", "status", "code", "message"),
    [pytest.param(*case[1:], id=case[0]) for case in BAD_REQUESTS],
)
async def test_bad_input_is_refused_with_its_code(
    cluster: Cluster, method: str, kwargs: dict[str, Any], status: int, code: str, message: str
) -> None:
    b, path = await records_path(cluster)
    got_status, raw, ctype = await cluster.request(method, b, path, **kwargs)
    assert ctype == "application/json"
    body = json.loads(raw)
    assert got_status == status, body
    err = body["error"]
    assert err["code"] == code
    assert message in err["message"], err["message"]
    assert set(err) >= {"code", "message", "retriable", "leader", "leaderEpoch"}


async def test_other_bad_requests(cluster: Cluster) -> None:
    b = await leader(cluster)
    for method, path, kwargs in (
        ("POST", "/v1/partitions/nope-0/records", {"json": {"records": [{"value": "a"}]}}),
        ("GET", "/v1/partitions/nope-0/records", {"params": {"offset": 0}}),
        ("GET", "/v1/partitions/nope-0/offsets", {}),
    ):
        with pytest.raises(ApiError) as err:
            await cluster.call(method, b, path, **kwargs)
        assert (err.value.status, err.value.code) == (404, "UNKNOWN_PARTITION")
        assert err.value.error["retriable"] is False
    with pytest.raises(ApiError) as err:
        await cluster.call("GET", b, f"/v1/partitions/{NAME}/offsets", params={"at": "soon"})
    assert (err.value.status, err.value.code) == (400, "INVALID_REQUEST")
    with pytest.raises(ApiError) as err:
        await cluster.call("GET", b, "/v1/nothing-here")
    assert err.value.status == 404
    assert err.value.code == "INVALID_REQUEST"


async def test_nothing_is_lost_or_added_by_bad_input(cluster: Cluster) -> None:
    b, path = await records_path(cluster)
    before = await cluster.read_all(NAME, b)
    for case in BAD_REQUESTS:
        await cluster.request(case[1], b, path, **case[2])
    after = await cluster.read_all(NAME, b)
    assert after == before
    answer = await cluster.call("POST", b, path, json={"records": [{"value": "after"}]})
    assert answer["baseOffset"] == before[-1]["offset"] + 1


OUT_OF_RANGE = [
    ("producerId", 2**70),
    ("producerId", 2**63),
    ("producerId", -1),
    ("producerEpoch", 2**15),
    ("baseSequence", 2**31),
]


async def test_a_producer_id_beyond_int64_is_an_invalid_request_not_a_retriable_failure(
    cluster: Cluster,
) -> None:
    """A producerId of 2**70 was answered 500 INTERNAL_ERROR, retriable, so a client
    retried it until its delivery timeout; 2**63-1 was taken. Kafka's producerId is an
    int64: beyond it the request is invalid, said so at once, and nothing of it is
    written."""
    b, path = await records_path(cluster)
    before = await cluster.read_all(NAME, b)
    ends_before = (await cluster.partitions(b))[NAME]
    for field, value in OUT_OF_RANGE:
        body = {
            "records": [{"value": "out of range"}],
            "producerId": 1,
            "producerEpoch": 0,
            "baseSequence": 0,
            field: value,
        }
        status, raw, ctype = await cluster.request("POST", b, path, json=body)
        assert ctype == "application/json", (field, value, status, raw)
        err = json.loads(raw)["error"]
        assert (status, err["code"]) == (400, "INVALID_REQUEST"), (field, value, err)
        assert err["retriable"] is False, err
        assert field in err["message"], err
    assert await cluster.read_all(NAME, b) == before
    ends_after = (await cluster.partitions(b))[NAME]
    for end in ("logStartOffset", "logEndOffset", "highWatermark"):
        assert ends_after[end] == ends_before[end], (end, ends_before, ends_after)


# -- replication endpoints ---------------------------------------------------------------


async def test_replica_fetch_with_a_stale_epoch_is_fenced(cluster: Cluster) -> None:
    """A fetch session request: the session-level checks answer as errors of their own,
    a partition's stale epoch is that partition's error inside a 200 answer."""
    b = await leader(cluster)
    path = "/internal/v1/fetch-session"
    stale = {"partition": NAME, "leaderEpoch": 0, "fetchOffset": 0, "persistedLogEndOffset": 0}
    # Replica id 99: a session of its own, not the real followers'.
    body = {"replicaId": 99, "brokerEpoch": 1, "partitions": [stale]}
    status, raw, _ = await cluster.request("POST", b, path, json=body, as_broker=99)
    assert status == 200
    answer = decode_session_answer(raw)
    ((name, error),) = answer.partitions
    assert name == NAME
    assert isinstance(error, FencedLeaderEpochError)
    # The session it opened knows the next request's number; others are refused.
    again = {**body, "sessionId": answer.session_id, "sessionEpoch": 5, "partitions": []}
    with pytest.raises(ApiError) as err:
        await cluster.call("POST", b, path, json=again, as_broker=99)
    assert (err.value.status, err.value.code) == (409, "INVALID_FETCH_SESSION_EPOCH")
    with pytest.raises(ApiError) as err:
        await cluster.call(
            "POST", b, path, json={**again, "sessionId": answer.session_id + 1}, as_broker=99
        )
    assert (err.value.status, err.value.code) == (409, "FETCH_SESSION_ID_NOT_FOUND")
    with pytest.raises(ApiError) as err:
        await cluster.call(
            "POST",
            b,
            path,
            json={**body, "partitions": [{**stale, "fetchOffset": "0"}]},
            as_broker=99,
        )
    assert (err.value.status, err.value.code) == (400, "INVALID_REQUEST")
    assert "fetchOffset" in err.value.error["message"]
    # A follower cannot claim more on its disk than it has fetched.
    with pytest.raises(ApiError) as err:
        await cluster.call(
            "POST",
            b,
            path,
            json={**body, "partitions": [{**stale, "persistedLogEndOffset": 1}]},
            as_broker=99,
        )
    assert (err.value.status, err.value.code) == (400, "INVALID_REQUEST")
    assert "persistedLogEndOffset 1 is above fetchOffset 0" in err.value.error["message"]
    follower = next(x for x in cluster.brokers if x != b)
    epoch_path = f"/internal/v1/partitions/{NAME}/offsets-for-leader-epoch"
    epoch = (await cluster.partitions(b))[NAME]["leaderEpoch"]
    answer = await cluster.call(
        "POST",
        b,
        epoch_path,
        json={"replicaId": follower, "leaderEpoch": epoch, "epoch": epoch},
        as_broker=follower,
    )
    assert answer["epoch"] == epoch
    assert answer["endOffset"] >= 0


# -- state, health, metrics --------------------------------------------------------------


async def test_partitions_readyz_healthz(cluster: Cluster) -> None:
    b = await leader(cluster)
    await cluster.wait_ready()
    roles = {}
    for x in cluster.brokers:
        listing = await cluster.call("GET", x, "/v1/partitions")
        assert listing["brokerId"] == x
        assert listing["brokerEpoch"] > 0
        part = listing["partitions"][0]
        roles[x] = part["role"]
        assert part["leader"] == b
        assert sorted(part["replicas"]) == [1, 2, 3]
        assert part["logEndOffset"] >= part["highWatermark"] >= 0
        health = await cluster.call("GET", x, "/healthz")
        assert health["status"] == "ok"
        ready = await cluster.call("GET", x, "/readyz")
        assert ready == {"ready": True, "waiting": []}
    assert sorted(roles.values()) == ["follower", "follower", "leader"]


async def test_metrics_text_parses(cluster: Cluster) -> None:
    b, path = await records_path(cluster)
    await cluster.call("POST", b, path, json={"records": [{"value": "m"}]})
    status, raw, _ = await cluster.request("GET", b, "/metrics")
    assert status == 200
    families = {f.name: f for f in text_string_to_metric_families(raw.decode())}
    produced = [
        s
        for s in families["epochlog_produce_requests"].samples
        if s.name.endswith("_total") and s.labels["result"] == "ok"
    ]
    assert sum(s.value for s in produced) >= 1
    hw = [s for s in families["epochlog_partition_high_watermark"].samples]
    assert hw
    assert hw[0].labels["partition"] == NAME
    assert hw[0].value > 0
    role = {s.labels["role"] for s in families["epochlog_partition_role"].samples}
    assert role == {"leader"}
    assert families["epochlog_fsync_seconds"].samples
    assert "epochlog_produce_latency_seconds" in families
    served = [
        s
        for s in families["epochlog_fetch_session_requests"].samples
        if s.name.endswith("_total") and s.labels["side"] == "leader"
    ]
    assert any(s.labels["result"] == "ok" and s.value >= 1 for s in served)
    assert families["epochlog_fetch_session_bytes"].samples


async def test_the_broker_serves_its_openapi_document(cluster: Cluster) -> None:
    status, body, ctype = await cluster.request("GET", 1, "/openapi.json")
    assert (status, ctype) == (200, "application/json")
    assert body.decode() == DOCUMENT.read_text()
