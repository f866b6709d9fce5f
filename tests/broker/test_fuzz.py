"""Fuzzing a real broker's HTTP API: whatever arrives, a clear answer and nothing lost.

Hypothesis sends requests to every route of `openapi/broker.json` (and to a
few that do not exist): wrong methods, query parameters of every type and
size, bodies that are random bytes, random JSON, produce bodies with fields of
the wrong type, binary batches that are cut or corrupted. Every answer must be
either a success or an error body with a protocol code, never a 500; and the
records acknowledged before the fuzzing must read back unchanged after it.

A second property draws requests from the document alone (`openapi_requests`):
every documented route, with the parameters and JSON bodies its schemas
describe, integers often out of their range or of the wrong type. Every answer
is one the document describes for that route and status, never a 500, and a 5xx
only as a retriable error; a request the document does not allow is refused with
a 4xx and changes nothing.

Under `make soak` (HYPOTHESIS_PROFILE=soak) both run fifty times as long.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from hypothesis import HealthCheck, event, given, note, settings
from hypothesis import strategies as st

from epochlog.protocol.batch import Record, encode_batch
from epochlog.protocol.errors import ErrorCode
from epochlog.protocol.framing import BATCH_CONTENT_TYPE
from epochlog.protocol.openapi import broker_openapi
from tests import waiting
from tests.broker.cluster import Cluster
from tests.broker.controller import spec
from tests.broker.openapi_requests import (
    Operation,
    answer_problems,
    is_error_answer,
    operations,
    requests_for,
)
from tests.conftest import examples

pytestmark = pytest.mark.asyncio(loop_scope="module")

NAME = "fuzz-0"
DOCUMENTED = "documented-0"
"""The partition of the property drawn from the document, which may delete its records."""
KNOWN = [f"known-{i}" for i in range(20)]
CODES = {str(c) for c in ErrorCode}


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def cluster(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Cluster]:
    async with Cluster(
        tmp_path_factory.mktemp("fuzz"),
        [spec("fuzz", 0), spec("documented", 0)],
        extra_args=["--max-request-bytes", str(256 * 1024)],
        session_timeout_ms=10_000,
    ).serving(NAME, DOCUMENTED) as c:
        yield c


def _paths() -> list[tuple[str, str]]:
    doc = broker_openapi()["paths"]
    routes = [(m.upper(), p) for p, ops in doc.items() for m in ops if m != "parameters"]
    return [*routes, ("GET", "/v1/partitions/{name}/nothing"), ("POST", "/v2/{name}")]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=10), inner),
    max_leaves=20,
)
names = st.sampled_from([NAME, "unknown-0", "", "..", "a" * 300, "fuzz-0%00", "ünï"])
PARAMS = ("acks", "timeoutMs", "leaderEpoch", "encoding", "offset", "maxRecords", "maxBytes")
param_names = st.sampled_from([*PARAMS, "maxWaitMs", "at", "x"])
param_values = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.sampled_from(["all", "leader", "none", "earliest", "latest", "utf8", "base64", ""]),
    st.text(max_size=20),
)
produce_bodies = st.fixed_dictionaries(
    {
        "records": st.lists(
            st.fixed_dictionaries(
                {}, optional={"value": json_values, "key": json_values, "headers": json_values}
            ),
            max_size=5,
        )
    },
    optional={"producerId": json_values, "producerEpoch": json_values, "sequence": json_values},
)


@st.composite
def batches(draw: st.DrawFn) -> bytes:
    records = [Record(draw(st.binary(max_size=50))) for _ in range(draw(st.integers(1, 4)))]
    data = bytearray(encode_batch(records, base_offset=0, leader_epoch=0, timestamp=0))
    cut = draw(st.integers(0, len(data)))
    flips = draw(st.lists(st.integers(0, max(0, len(data) - 1)), max_size=3))
    for i in flips:
        if data:
            data[i] ^= 0xFF
    return bytes(data[:cut] if draw(st.booleans()) else data)


bodies = st.one_of(
    st.just(None),
    st.binary(max_size=300),
    json_values.map(lambda v: json.dumps(v).encode()),
    produce_bodies.map(lambda v: json.dumps(v).encode()),
    batches(),
)


@st.composite
def requests(draw: st.DrawFn) -> dict[str, Any]:
    method, path = draw(st.sampled_from(_paths()))
    if draw(st.integers(0, 9)) == 0:
        method = draw(st.sampled_from(["GET", "POST", "PUT", "DELETE", "PATCH"]))
    path = path.replace("{name}", draw(names))
    params = draw(st.dictionaries(param_names, param_values, max_size=5))
    body = draw(bodies)
    ctype = draw(st.sampled_from(["application/json", BATCH_CONTENT_TYPE, "text/plain"]))
    # The admin user, or a broker no partition is assigned to: replication requests get
    # past authentication (as the latter) and are fuzzed in what they say.
    who = draw(st.sampled_from([None, 99]))
    return {
        "method": method,
        "path": path,
        "params": params,
        "body": body,
        "ctype": ctype,
        "as_broker": who,
    }


@given(request=requests())
@settings(max_examples=examples(200), suppress_health_check=list(HealthCheck))
async def test_random_requests_get_clear_answers_and_lose_nothing(
    cluster: Cluster, request: dict[str, Any]
) -> None:
    if not getattr(cluster, "_fuzz_seeded", False):
        answer = await cluster.produce(NAME, KNOWN)
        assert answer["baseOffset"] == 0
        cluster._fuzz_seeded = True  # type: ignore[attr-defined]
    headers = {"Content-Type": request["ctype"]} if request["body"] is not None else None
    leader = await cluster.leader_of(NAME)
    assert leader is not None
    status, body, _ = await cluster.request(
        request["method"],
        leader,
        request["path"],
        params=request["params"],
        data=request["body"],
        headers=headers,
        timeout_s=30,
        as_broker=request["as_broker"],
    )
    assert status != 500, body[:500]
    if (status >= 400 and status != 405 and status != 404) or (status == 404 and body[:1] == b"{"):
        error = json.loads(body)["error"]
        assert error["code"] in CODES, error
        assert error["message"], error
    # What was acknowledged before is there, unchanged, whatever came since.
    records = await cluster.read_all(NAME, leader)
    assert [r["value"] for r in records[: len(KNOWN)]] == KNOWN


OPERATIONS = operations()
HINTS: dict[str, list[Any]] = {
    "name": [DOCUMENTED] * 6 + ["unknown-0", "", "..", "a" * 300, "\u00fcn\u00ef"],
    "partition": [DOCUMENTED],
    "replicaId": [99],
    "leaderEpoch": [1],
}
"""Values drawn often for these wire names: the partition, the broker the replication
requests are sent as, and the partition's first leader epoch, so that requests get past
the checks of who asks, which partition and which epoch to what they say."""
ENDS = ("logStartOffset", "logEndOffset", "highWatermark")


async def settled(cluster: Cluster, leader: int) -> dict[str, Any]:
    """The partition as `leader` shows it once its high watermark has reached its log end:
    a record an earlier example appended may still be on its way to the followers, and
    moves the high watermark whatever the request under test does."""

    async def caught_up() -> dict[str, Any]:
        p = (await cluster.partitions(leader))[DOCUMENTED]
        return p if p["highWatermark"] == p["logEndOffset"] else {}

    return await waiting.until(caught_up, "the high watermark to reach the log end", 30)


@pytest.mark.parametrize("op", OPERATIONS, ids=[op.operation_id for op in OPERATIONS])
@given(data=st.data())
@settings(max_examples=examples(40), suppress_health_check=list(HealthCheck))
async def test_every_documented_route_answers_as_documented_and_refuses_what_it_does_not_allow(
    cluster: Cluster, op: Operation, data: st.DataObject
) -> None:
    drawn = data.draw(requests_for(op, HINTS))
    # The admin user, or broker 99, which no partition is assigned to.
    as_broker = data.draw(st.sampled_from([None, 99]))
    leader = await cluster.wait_leader(DOCUMENTED)
    before = await settled(cluster, leader)
    status, body, ctype = await cluster.request(
        op.method,
        leader,
        drawn.path,
        params=drawn.query,
        data=drawn.body,
        headers=None if drawn.body is None else {"Content-Type": "application/json"},
        as_broker=as_broker,
    )
    note(f"HTTP {status} {body[:1000]!r}")
    note(f"not allowed by the document: {drawn.problems}")
    event(f"HTTP {status}, {'not allowed' if drawn.problems else 'allowed'}")
    assert status != 500, body[:500]
    assert not answer_problems(op, status, ctype, body), body[:500]
    if status >= 500 and is_error_answer(op, status):
        assert json.loads(body)["error"]["retriable"] is True, body[:500]
    if drawn.problems:
        assert 400 <= status < 500, body[:500]
        after = (await cluster.partitions(leader))[DOCUMENTED]
        assert [after[e] for e in ENDS] == [before[e] for e in ENDS], (before, after)
