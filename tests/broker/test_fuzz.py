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

A third sends bearer tokens to a broker started with `--service-account-tokens`,
whose operator reviews tokens against the API emulator (TokenReview): any text,
JWT-shaped tokens with random claims, a real token for another audience, real
tokens with their claims changed (expired, another audience or subject, a later
expiry), huge ones, under any scheme. Only the ServiceAccount's own token under
`Bearer` is taken; every other answer is AUTHENTICATION_FAILED (INVALID_REQUEST
for a header longer than the HTTP parser reads), within a hang detector's time,
and a refused request writes nothing.

Under `make soak` (HYPOTHESIS_PROFILE=soak) they run fifty times as long.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from hypothesis import HealthCheck, event, given, note, settings
from hypothesis import strategies as st

from epochlog.protocol.batch import Record, encode_batch
from epochlog.protocol.errors import ErrorCode
from epochlog.protocol.framing import BATCH_CONTENT_TYPE
from epochlog.protocol.openapi import broker_openapi
from epochlog.security.tls import TlsFiles, client_context
from epochlog.users import TOKEN_AUDIENCE
from epochlog_tools.devcluster.local import LocalCluster
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
from tests.e2e.conftest import e2e_settings
from tests.e2e.helpers import create_partition

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


# -- bearer tokens -------------------------------------------------------------------------

BEARER_PARTITION = "bearer-0"
HEADER_LIMIT = 8190
"""aiohttp's longest header value (`max_field_size`), in bytes."""
ACCOUNTS = "/api/v1/namespaces/default/serviceaccounts"
USERS = "/apis/epochlog.dev/v1alpha1/namespaces/default/epochlogusers"


@dataclass(frozen=True)
class TokenCluster:
    """One broker started with `--service-account-tokens`, whose operator reviews tokens
    (`--review-tokens`) against the API emulator; the ServiceAccount `fuzzer` may read and
    write `bearer-0` (an EpochlogUser of type serviceaccount)."""

    cluster: LocalCluster
    good: str
    """fuzzer's token for the audience epochlog."""
    other: str
    """fuzzer's token for another audience."""
    http: aiohttp.ClientSession
    """Trusts the cluster CA; presents no certificate."""
    admin: aiohttp.ClientSession

    @property
    def records_url(self) -> str:
        return self.cluster.broker_url(1) + f"/v1/partitions/{BEARER_PARTITION}/records"

    async def log_end(self) -> int:
        url = self.cluster.broker_url(1) + "/v1/partitions"
        async with self.admin.get(url) as rsp:
            assert rsp.status == 200, await rsp.text()
            listing = await rsp.json()
        [found] = [p for p in listing["partitions"] if p["name"] == BEARER_PARTITION]
        return int(found["logEndOffset"])


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def token_cluster(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[TokenCluster]:
    settings = e2e_settings()
    settings.broker_args = ("--cert-reload-interval-ms", "1000")
    settings.users_check_interval_s = 1.0
    c = LocalCluster(tmp_path_factory.mktemp("tokens"), brokers=1, settings=settings, users=True)
    await c.up(example_partitions=False)
    try:
        await create_partition(c, BEARER_PARTITION, (1,), min_insync_replicas=1)
        pki = c.security.pki
        assert pki is not None
        creds = c.credentials
        assert creds.tls is not None
        async with (
            aiohttp.ClientSession(c.api_url) as api,
            aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(ssl=client_context(TlsFiles(str(pki.cluster_ca))))
            ) as http,
            aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(ssl=client_context(creds.tls))
            ) as admin,
        ):

            async def call(path: str, body: Any) -> Any:
                async with api.post(path, json=body) as rsp:
                    assert rsp.status < 300, await rsp.text()
                    return await rsp.json()

            await call(ACCOUNTS, {"metadata": {"name": "fuzzer"}})
            await call(
                USERS,
                {
                    "apiVersion": "epochlog.dev/v1alpha1",
                    "kind": "EpochlogUser",
                    "metadata": {"name": "fuzzer"},
                    "spec": {
                        "authentication": {
                            "type": "serviceaccount",
                            "serviceAccount": {"name": "fuzzer"},
                        },
                        "authorization": {
                            "acls": [
                                {
                                    "resource": {"type": "topic", "name": "bearer"},
                                    "operations": ["all"],
                                }
                            ]
                        },
                    },
                },
            )

            async def token(audience: str) -> str:
                spec = {"audiences": [audience], "expirationSeconds": 3600}
                answer = await call(f"{ACCOUNTS}/fuzzer/token", {"spec": spec})
                return str(answer["status"]["token"])

            tc = TokenCluster(c, await token("epochlog"), await token("another"), http, admin)

            async def taken() -> bool:
                # The policy with fuzzer in it reaches the broker at its next reload.
                headers = {"Authorization": f"Bearer {tc.good}"}
                one = {"records": [{"value": "first"}]}
                async with http.post(tc.records_url, json=one, headers=headers) as rsp:
                    return rsp.status == 200

            await waiting.until(taken, "fuzzer's token taken", 20)
            yield tc
    finally:
        await c.down()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _claims_of(token: str) -> dict[str, Any]:
    claims: dict[str, Any] = json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "=="))
    return claims


header_text = st.text(st.characters(codec="latin-1", exclude_categories=["Cc"]), max_size=300)
"""What an HTTP header can carry (no control characters: the client refuses to send
those)."""
audiences = st.one_of(
    st.just(TOKEN_AUDIENCE),
    st.sampled_from(["another", "", TOKEN_AUDIENCE.upper()]),
    st.lists(st.sampled_from([TOKEN_AUDIENCE, "another", ""]), max_size=3),
    json_values,
)
expiries = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False),
    st.sampled_from(["later", "", None]),
    st.integers(-3600, 3600).map(lambda d: int(time.time()) + d),
)


@st.composite
def jwt_shaped(draw: st.DrawFn) -> str:
    """Three base64url parts, the claims random around what a ServiceAccount token says."""
    header = draw(
        st.one_of(
            st.just({"alg": "RS256", "kid": "k"}),
            st.dictionaries(st.text(max_size=5), json_values, max_size=3),
        )
    )
    claims = draw(st.dictionaries(st.text(max_size=8), json_values, max_size=4))
    if draw(st.booleans()):
        claims["aud"] = draw(audiences)
    if draw(st.booleans()):
        claims["exp"] = draw(expiries)
    if draw(st.booleans()):
        claims["sub"] = draw(
            st.sampled_from(["system:serviceaccount:default:fuzzer", "system:admin"])
        )
    signature = draw(st.binary(max_size=64))
    return ".".join(_b64(json.dumps(part).encode()) for part in (header, claims)) + (
        "." + _b64(signature)
    )


@st.composite
def from_real(draw: st.DrawFn, token: str) -> str:
    """fuzzer's good token with its claims changed: expired, another audience, another
    subject, a later expiry (the signature no longer matches any of these)."""
    head, _, signature = token.split(".")
    claims = _claims_of(token)
    change = draw(st.sampled_from(["expired", "audience", "subject", "later"]))
    if change == "expired":
        claims["exp"] = int(time.time()) - draw(st.integers(1, 10**6))
    elif change == "audience":
        claims["aud"] = [draw(st.text(max_size=10).filter(lambda a: a != TOKEN_AUDIENCE))]
    elif change == "subject":
        claims["sub"] = "system:serviceaccount:default:" + draw(st.text(max_size=10))
    else:
        claims["exp"] = int(time.time()) + draw(st.integers(1, 10**6))
    return f"{head}.{_b64(json.dumps(claims).encode())}.{signature}"


huge = st.one_of(
    st.integers(4096, 64 * 1024).map(lambda n: "a" * n),
    # Around the parser's limit, with and without the scheme.
    st.integers(HEADER_LIMIT - 8, HEADER_LIMIT + 1).map(lambda n: "a" * n),
    st.integers(4096, 64 * 1024).map(
        lambda n: (
            ".".join(
                _b64(json.dumps(part).encode())
                for part in (
                    {"alg": "RS256"},
                    {"aud": [TOKEN_AUDIENCE], "exp": 2**40, "x": "y" * n},
                )
            )
            + ".c2ln"
        )
    ),
)


def tokens(good: str, other: str) -> st.SearchStrategy[tuple[str, str]]:
    """(what kind, the token)."""
    return st.one_of(
        header_text.map(lambda t: ("text", t)),
        jwt_shaped().map(lambda t: ("jwt-shaped", t)),
        st.just(("another audience", other)),
        from_real(good).map(lambda t: ("changed", t)),
        huge.map(lambda t: ("huge", t)),
        st.just(("good", good)),
    )


@given(data=st.data())
@settings(max_examples=examples(150), suppress_health_check=list(HealthCheck), deadline=None)
async def test_random_bearer_tokens_are_refused_as_no_one_and_write_nothing(
    token_cluster: TokenCluster, data: st.DataObject
) -> None:
    tc = token_cluster
    kind, token = data.draw(tokens(tc.good, tc.other))
    scheme = data.draw(st.sampled_from(["Bearer ", "Bearer ", "Bearer ", "bearer ", "Basic ", ""]))
    method, url = data.draw(
        st.sampled_from(
            [
                ("POST", tc.records_url),
                ("GET", tc.records_url),
                ("GET", tc.cluster.broker_url(1) + "/v1/partitions"),
            ]
        )
    )
    event(f"{kind}, {scheme.strip() or 'no scheme'}")
    before = await tc.log_end()
    body = {"records": [{"value": "fuzzed"}]} if method == "POST" else None
    params = {"offset": "0"} if method == "GET" and url == tc.records_url else None
    async with asyncio.timeout(30):  # never a hang
        async with tc.http.request(
            method,
            url,
            json=body,
            params=params,
            headers={"Authorization": scheme + token},
        ) as rsp:
            status, answer = rsp.status, await rsp.read()
    note(f"HTTP {status} {answer[:500]!r}")
    taken = kind == "good" and scheme == "Bearer "
    if taken:
        assert status == 200, answer[:500]
    elif len((scheme + token).encode()) > HEADER_LIMIT:
        # Too long for the HTTP parser: refused before anyone looks at it.
        assert status == 400, answer[:500]
        error = json.loads(answer)["error"]
        assert error["code"] == ErrorCode.INVALID_REQUEST, error
    else:
        assert status == 401, answer[:500]
        error = json.loads(answer)["error"]
        assert error["code"] == ErrorCode.AUTHENTICATION_FAILED, error
        assert error["message"], error
    written = 1 if taken and method == "POST" else 0
    assert await tc.log_end() == before + written
