"""The producer on NOT_ENOUGH_REPLICAS_AFTER_APPEND (KIP-966): the batch was appended but
not acknowledged, so its outcome is unknown. The producer keeps the leader it used,
retries the same batch with the same producer id, epoch and sequence, and resolves the
records only when a retry is answered: with the first copy's offsets, one copy in all."""

from __future__ import annotations

import asyncio
import json

import pytest

from epochlog.client import Producer
from epochlog.client.errors import error_from_response
from epochlog.protocol.errors import NotEnoughReplicasAfterAppendError
from epochlog.protocol.multi import PRODUCE_MANY_PATH
from tests.broker.cluster import Cluster
from tests.client.helpers import AFTER_APPEND_BODY, AnswerDroppingProxy, read_all, values

PARTITION = "shrunk-0"


def test_after_append_answer_comes_back_typed_and_retriable() -> None:
    error = error_from_response(503, AFTER_APPEND_BODY, "http://broker")
    assert isinstance(error, NotEnoughReplicasAfterAppendError)
    assert error.retriable


async def _proxy_of_the_leader(cluster: Cluster) -> AnswerDroppingProxy:
    """A proxy of the broker that leads PARTITION, as a client that reaches it sees it.

    A broker a busy machine starved may still call itself leader after the controller
    moved leadership away (the shared cluster fences on missed heartbeats): the listing
    the client reads through the proxy is what counts, so take one that names it leader.
    """
    while True:
        leader = await cluster.wait_leader(PARTITION)
        proxy = await AnswerDroppingProxy(
            cluster.brokers[leader].url, refuse_after_append=2, ssl=cluster.security.client_ssl()
        ).start()
        async with cluster.client(proxy.url) as client:
            found = await client.metadata.leader(PARTITION)
        if found.url == proxy.url:
            proxy.requests.clear()
            return proxy
        await proxy.stop()


@pytest.mark.asyncio(loop_scope="package")
async def test_producer_retries_not_enough_replicas_after_append_and_writes_one_copy(
    cluster: Cluster,
) -> None:
    proxy = await _proxy_of_the_leader(cluster)
    try:
        async with cluster.client(proxy.url) as client:
            async with Producer(client, linger_ms=50, retry_backoff_ms=10) as producer:
                futures = [await producer.send(PARTITION, f"once-{i}") for i in range(10)]
                metas = await asyncio.gather(*futures)
            got = await read_all(client, PARTITION)
        # Two attempts were appended and refused; the third was answered with the offsets
        # of the first copy.
        assert (proxy.refused, proxy.produce_requests) == (2, 3)
        identities = {
            (part["producerId"], part["producerEpoch"], part["baseSequence"])
            for doc in map(json.loads, proxy.produce_bodies)
            for part in doc["partitions"]
        }
        assert len(identities) == 1, f"the retries changed the batch's identity: {identities}"
        first_post = proxy.requests.index(("POST", PRODUCE_MANY_PATH))
        lookups = [r for r in proxy.requests[first_post:] if r == ("GET", "/v1/partitions")]
        assert lookups == [], "the leader that answered is still the leader"
        assert values(got) == [f"once-{i}" for i in range(10)]
        assert [m.offset for m in metas] == [r.offset for r in got]
    finally:
        await proxy.stop()
