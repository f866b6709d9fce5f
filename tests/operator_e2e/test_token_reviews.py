"""The operator's token-review endpoint: TokenReviews for brokers, refusals for everyone else.

A real operator process with `--review-tokens` against the API emulator (or, with
EPOCHLOG_TEST_APISERVER=real, a real kube-apiserver), asked as the brokers ask
(`POST /v1/token-reviews` with a broker's certificate).

- A ServiceAccount's token for the audience epochlog: authenticated, its user name,
  kept until the token expires (at most a minute); one for another audience, one
  the API server did not sign, and (emulator) an expired one it did sign: refused.
- A client certificate, or no certificate: no review.
- Random bodies get a typed 400 and nothing else (hypothesis); half-sent requests
  are closed by the request and body timeouts and the endpoint keeps answering.
"""

from __future__ import annotations

import asyncio
import json
import ssl
from typing import Any

import aiohttp
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from epochlog.security.tls import TlsFiles, client_context
from tests.conftest import examples
from tests.operator_e2e.conftest import Env, Operator
from tests.operator_e2e.test_endpoint import _read_until_closed

ACCOUNTS = "/api/v1/namespaces/default/serviceaccounts"
PATH = "/v1/token-reviews"


async def _account_token(env: Env, name: str, audience: str) -> str:
    status, _ = await env.api.call("POST", ACCOUNTS, {"metadata": {"name": name}})
    assert status in (201, 409)
    status, issued = await env.api.call(
        "POST",
        f"{ACCOUNTS}/{name}/token",
        {"spec": {"audiences": [audience], "expirationSeconds": 600}},
    )
    assert status == 201, issued
    return str(issued["status"]["token"])


async def ask(
    env: Env, op: Operator, body: bytes | str, *, session: aiohttp.ClientSession | None = None
) -> tuple[int, Any]:
    data = body.encode() if isinstance(body, str) else body
    http = session or env.as_broker(1)
    async with http.post(
        op.url + PATH, data=data, headers={"Content-Type": "application/json"}
    ) as rsp:
        return rsp.status, await rsp.json(content_type=None)


async def test_a_service_account_token_is_reviewed_for_brokers(env: Env) -> None:
    op = await env.operator("--standalone", "--review-tokens")
    good = await _account_token(env, "reader", "epochlog")
    other = await _account_token(env, "writer", "another")
    status, answer = await ask(env, op, json.dumps({"token": good}))
    assert status == 200, answer
    assert answer["authenticated"] is True
    assert answer["username"] == "system:serviceaccount:default:reader"
    assert 0 < answer["cacheMs"] <= 60_000

    status, answer = await ask(env, op, json.dumps({"token": other}))
    assert status == 200, answer
    assert answer["authenticated"] is False
    assert answer["message"]
    head, claims, _ = good.split(".")
    forged = f"{head}.{claims}.{'A' * 86}"
    status, answer = await ask(env, op, json.dumps({"token": forged}))
    assert (status, answer["authenticated"]) == (200, False)


@pytest.mark.emulator_only
async def test_an_expired_token_the_api_server_signed_is_refused(env: Env) -> None:
    """Signed in the emulator's process with a lifetime already over: the TokenReview,
    not the broker's own look at the claims, refuses it."""
    op = await env.operator("--standalone", "--review-tokens")
    status, account = await env.api.call("POST", ACCOUNTS, {"metadata": {"name": "old"}})
    assert status == 201
    token, _ = env.server.handler.tokens.issue(
        "default", "old", account["metadata"]["uid"], ["epochlog"], -1
    )
    status, answer = await ask(env, op, json.dumps({"token": token}))
    assert status == 200, answer
    assert answer["authenticated"] is False
    assert "expired" in answer["message"]


async def test_only_brokers_get_token_reviews(env: Env) -> None:
    op = await env.operator("--standalone", "--review-tokens")
    pki = env.security.pki
    assert pki is not None
    pki.ensure([1], users=("carol",))
    cert, key = pki.user("carol")
    carol = client_context(TlsFiles(str(pki.cluster_ca), str(cert), str(key)))
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=carol)) as http:
        with pytest.raises(aiohttp.ClientError):
            # The heartbeat port takes cluster-CA certificates only: no handshake.
            await ask(env, op, json.dumps({"token": "x"}), session=http)
    operator_cert, operator_key = pki.operator()
    as_operator = client_context(
        TlsFiles(str(pki.cluster_ca), str(operator_cert), str(operator_key))
    )
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=as_operator)) as http:
        status, answer = await ask(env, op, json.dumps({"token": "x"}), session=http)
    assert status == 403
    assert answer["error"]["code"] == "CLUSTER_AUTHORIZATION_FAILED"


async def test_without_review_tokens_there_is_no_such_route(env: Env) -> None:
    op = await env.operator("--standalone")
    async with env.as_broker(1).post(op.url + PATH, json={"token": "x"}) as rsp:
        assert rsp.status == 404


async def test_random_token_reviews_get_typed_answers(env: Env) -> None:
    op = await env.operator("--standalone", "--review-tokens")
    good = await _account_token(env, "reader", "epochlog")
    bodies = st.one_of(
        st.binary(max_size=300),
        st.text(max_size=300).map(str.encode),
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.text(max_size=40),
            lambda inner: (
                st.lists(inner, max_size=4)
                | st.dictionaries(st.sampled_from(["token", "Token", "x"]), inner, max_size=3)
            ),
            max_leaves=10,
        ).map(lambda v: json.dumps(v).encode()),
        st.integers(8193, 20_000).map(lambda n: json.dumps({"token": "a" * n}).encode()),
    )
    loop = asyncio.get_running_loop()
    seen: list[tuple[int, str]] = []

    @settings(
        max_examples=examples(60),
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
        deadline=None,
    )
    @given(bodies)
    def one(body: bytes) -> None:
        status, answer = asyncio.run_coroutine_threadsafe(ask(env, op, body), loop).result(60)
        if status == 200:
            assert answer["authenticated"] is False, (body, answer)
            seen.append((status, "refused"))
            return
        assert status in (400, 413), (body, status, answer)
        assert answer["error"]["code"] in ("INVALID_REQUEST", "RECORD_TOO_LARGE"), answer
        assert answer["error"]["retriable"] is False
        seen.append((status, answer["error"]["code"]))

    await asyncio.to_thread(one)
    assert seen
    # And still answering the real question.
    status, answer = await ask(env, op, json.dumps({"token": good}))
    assert (status, answer["authenticated"]) == (200, True)


async def test_half_sent_token_reviews_are_closed_and_the_endpoint_keeps_answering(
    env: Env,
) -> None:
    op = await env.operator(
        "--standalone",
        "--review-tokens",
        "--request-timeout-ms",
        "1000",
        "--body-timeout-ms",
        "1000",
    )
    good = await _account_token(env, "reader", "epochlog")
    head = f"POST {PATH} HTTP/1.1\r\nHost: x\r\n".encode()
    with_body = head + b'Content-Type: application/json\r\nContent-Length: 500\r\n\r\n{"t'
    tls = env.broker_tls(1)
    assert isinstance(tls, ssl.SSLContext)
    conns = []
    for i in range(100):
        reader, writer = await asyncio.open_connection("127.0.0.1", op.port, ssl=tls)
        writer.write(head if i % 2 else with_body)
        await writer.drain()
        conns.append((reader, writer))
    try:
        # Meanwhile, a broker's question is answered.
        status, answer = await ask(env, op, json.dumps({"token": good}))
        assert (status, answer["authenticated"]) == (200, True)
        async with asyncio.timeout(120):  # far beyond 1 s, far below aiohttp's hour
            answers = await asyncio.gather(*(_read_until_closed(r) for r, _ in conns))
    finally:
        for _, w in conns:
            w.close()
    assert all(a == b"" for i, a in enumerate(answers) if i % 2), "a half-sent header"
    timed_out = [a for i, a in enumerate(answers) if not i % 2]
    assert all(a.startswith(b"HTTP/1.1 408") for a in timed_out), timed_out[:2]
    assert all(b"REQUEST_TIMED_OUT" in a for a in timed_out), timed_out[:2]
