"""KIP-320 for readers, on real brokers: leader epochs fence stale and future requests, and a
reader finds a log truncated under it through the epochs, not the offsets.

- Reads, ListOffsets and the reader's epoch query answer FENCED_LEADER_EPOCH to an epoch
  older than the leader's and UNKNOWN_LEADER_EPOCH to a newer one; the client, told
  either, finds the leader again and retries (a proxy makes the brokers' listing report
  the wrong epoch once).
- An unclean election under readers (Kafka's LogTruncationException case): replicas 1,
  2, 3 with uncleanLeaderElection; a follower is killed and leaves the ISR; records 20..49
  are acknowledged and read without it; the two others die and the stale follower comes
  back and is elected uncleanly, its log ending at 20; then it takes 40 new records, so
  its log grows back past the readers' position (50) with other records at 20..49.
  ListOffsets says 60 and a read at 50 succeeds: offsets alone see nothing wrong. The
  epochs do: the epoch of the records read ends at 20 in the new leader's log, below the
  position.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from epochlog.client import Consumer, LogTruncationError
from epochlog.client.consumer import RESET
from epochlog.client.ranges import TRUNCATED, RangeChunk, RangeReader
from epochlog.protocol.multi import FETCH_MANY_PATH, decode_fetch_answer
from tests.broker.cluster import Cluster
from tests.broker.controller import spec
from tests.client.helpers import (
    UNCLEAN,
    UNCLEAN_SPEC,
    AnswerDroppingProxy,
    elect_it_and_grow_back,
    leave_a_follower_behind,
    values,
)

NAME = "epochs-0"
MOVED = "moved-0"


async def leader_epoch(cluster: Cluster, broker: int, name: str) -> int:
    epoch = (await cluster.partitions(broker))[name]["leaderEpoch"]
    assert isinstance(epoch, int)
    return epoch


# -- fencing -----------------------------------------------------------------------------


@pytest.mark.asyncio(loop_scope="package")
async def test_reads_offsets_and_epoch_queries_fence_older_epochs_and_refuse_newer_ones(
    cluster: Cluster,
) -> None:
    leader = await cluster.wait_leader(NAME)
    await cluster.produce(NAME, ["a", "b", "c"])
    epoch = await leader_epoch(cluster, leader, NAME)
    requests: dict[str, tuple[str, dict[str, Any]]] = {
        "read": (f"/v1/partitions/{NAME}/records", {"offset": 0}),
        "list-offsets": (f"/v1/partitions/{NAME}/offsets", {"at": "latest"}),
        "epoch-query": (f"/v1/partitions/{NAME}/epochs/{epoch}", {}),
    }
    for what, (path, params) in requests.items():
        for sent, code in ((epoch - 1, "FENCED_LEADER_EPOCH"), (epoch + 1, "UNKNOWN_LEADER_EPOCH")):
            status, raw, _ = await cluster.request(
                "GET", leader, path, params={**params, "leaderEpoch": sent}
            )
            error = json.loads(raw)["error"]
            assert (status, error["code"]) == (409, code), (what, sent, error)
            assert error["retriable"] is True
            assert error["leaderEpoch"] == epoch, (what, error)
        status, _, _ = await cluster.request(
            "GET", leader, path, params={**params, "leaderEpoch": epoch}
        )
        assert status == 200, what


@pytest.mark.asyncio(loop_scope="package")
async def test_the_epoch_query_answers_where_an_epoch_ends(cluster: Cluster) -> None:
    leader = await cluster.wait_leader(NAME)
    end = (await cluster.produce(NAME, ["d"]))["lastOffset"] + 1
    epoch = await leader_epoch(cluster, leader, NAME)
    path = f"/v1/partitions/{NAME}/epochs/{{}}"
    latest = await cluster.call("GET", leader, path.format(epoch))
    assert latest == {"epoch": epoch, "endOffset": end, "leaderEpoch": epoch}
    # A later epoch: the largest at or below it, this one.
    assert await cluster.call("GET", leader, path.format(epoch + 7)) == latest
    # Below the first epoch of the log: none, and where its history begins.
    first = await cluster.call("GET", leader, path.format(0))
    assert (first["epoch"], first["leaderEpoch"]) == (-1, epoch), first
    for bad in ("-1", "x", str(1 << 31)):
        status, raw, _ = await cluster.request("GET", leader, path.format(bad))
        assert (status, json.loads(raw)["error"]["code"]) == (400, "INVALID_REQUEST"), bad


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def failed_over(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Cluster]:
    """A partition whose leader failed over once: its leader epoch is 2 or more, so an epoch
    below it is one a client can hold."""
    cluster = Cluster(tmp_path_factory.mktemp("failed-over"), [spec("moved", 0)])
    async with cluster.serving(MOVED):
        old = await cluster.wait_leader(MOVED)
        await cluster.produce(MOVED, ["before"])
        await cluster.brokers[old].kill()
        await cluster.wait_leader(MOVED, exclude=(old,))
        await cluster.brokers[old].start()
        await cluster.wait_ready()
        await cluster.produce(MOVED, ["after"])
        yield cluster


@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize("shift", [-1, 1], ids=["fenced", "unknown"])
@pytest.mark.parametrize("request_kind", ["read", "list-offsets", "epoch-query"])
async def test_the_client_finds_the_leader_again_and_retries_on_a_wrong_epoch(
    failed_over: Cluster, shift: int, request_kind: str
) -> None:
    """The first listing the client gets reports the leader's epoch off by `shift`: its
    request is refused (FENCED_LEADER_EPOCH below, UNKNOWN_LEADER_EPOCH above), and it
    goes on with the leader's epoch."""
    cluster = failed_over
    leader = await cluster.wait_leader(MOVED)
    epoch = await leader_epoch(cluster, leader, MOVED)
    assert epoch >= 2
    lies = [True]
    fetched: list[int] = []
    """A consumer's reads are fetches of many partitions: each one's answer for MOVED, as
    the status a one-partition read would have had (409: its epoch refused)."""

    def misreport(method: str, path: str, body: bytes) -> bytes:
        if path == FETCH_MANY_PATH:
            fetched.extend(409 if e.error else 200 for e, _ in decode_fetch_answer(body))
            return body
        if path != "/v1/partitions" or not lies:
            return body
        lies.clear()
        doc = json.loads(body)
        for p in doc["partitions"]:
            if p["name"] == MOVED:
                p["leaderEpoch"] += shift
        return json.dumps(doc).encode()

    proxy = await AnswerDroppingProxy(
        cluster.brokers[leader].url, ssl=cluster.security.client_ssl(), rewrite=misreport
    ).start()
    try:
        async with cluster.client(proxy.url, retry_backoff_ms=10) as client:
            if request_kind == "read":
                consumer = Consumer(client, MOVED, start=0, max_wait_ms=0)
                assert await consumer.poll()
                path = FETCH_MANY_PATH
            elif request_kind == "list-offsets":
                assert (await client.list_offsets(MOVED)).leader_epoch == epoch
                path = f"/v1/partitions/{MOVED}/offsets"
            else:
                assert (await client.epoch_end(MOVED, epoch)).leader_epoch == epoch
                path = f"/v1/partitions/{MOVED}/epochs/{epoch}"
            cached = client.metadata.cached(MOVED)
    finally:
        await proxy.stop()
    statuses = (
        fetched if path == FETCH_MANY_PATH else [s for _, p, s in proxy.answered if p == path]
    )
    assert statuses[0] == 409, proxy.answered
    assert statuses[-1] == 200, proxy.answered
    assert cached is not None
    assert cached.leader_epoch == epoch


# -- an unclean election under readers ---------------------------------------------------


@pytest_asyncio.fixture
async def unclean(tmp_path: Path) -> AsyncIterator[Cluster]:
    async with Cluster(tmp_path, [UNCLEAN_SPEC], session_timeout_ms=1500).serving(UNCLEAN) as c:
        yield c


async def read_to(consumer: Consumer, end: int) -> list[str]:
    got: list[str] = []
    while consumer.position != end:
        got += values(await consumer.poll())
    return got


async def range_values(reader: RangeReader) -> list[tuple[int, str]]:
    out: list[tuple[int, str]] = []
    chunk: RangeChunk
    async for chunk in reader:
        for b in chunk.batches:
            out += [
                (r.offset, (r.value or b"").decode())
                for r in b.records()
                if chunk.start <= r.offset < chunk.end
            ]
    return out


async def test_readers_find_an_unclean_truncation_through_epochs_though_the_log_grew_back(
    unclean: Cluster,
) -> None:
    cluster = unclean
    stale = await leave_a_follower_behind(cluster)
    client = cluster.client(request_timeout_ms=5000, retry_backoff_ms=20, retry_backoff_max_ms=200)
    strict = Consumer(client, UNCLEAN, start=0, max_wait_ms=0, retry_timeout_ms=30_000)
    lenient = Consumer(client, UNCLEAN, start=0, max_wait_ms=0, binary=True, on_truncation=RESET)
    read = [f"first-{n}" for n in range(20)] + [f"second-{n}" for n in range(30)]
    assert await read_to(strict, 50) == read
    assert await read_to(lenient, 50) == read
    epoch = strict.consumed.last_epoch
    assert epoch == lenient.consumed.last_epoch >= 1

    await elect_it_and_grow_back(cluster, stale)
    new_epoch = await leader_epoch(cluster, stale, UNCLEAN)
    assert new_epoch > epoch

    # Offsets alone: the log reaches past both readers, and a read at 50 succeeds.
    assert (await client.list_offsets(UNCLEAN)).offset == 60
    blind = RangeReader(client, UNCLEAN, 50, 60, max_wait_ms=0)
    assert await range_values(blind) == [(50 + n, f"third-{30 + n}") for n in range(10)]

    with pytest.raises(LogTruncationError) as caught:
        await strict.poll()
    error = caught.value
    assert (error.partition, error.position, error.divergence_offset) == (UNCLEAN, 50, 20)
    assert (error.epoch, error.leader_epoch, error.epoch_end[1]) == (epoch, new_epoch, 20)
    assert f"{UNCLEAN}: the log was truncated under the reader" in str(error)
    assert "offsets 20..49" in str(error)
    assert strict.position == 50, "a strict consumer stays where it is"

    assert await lenient.poll() == []
    [reported] = lenient.truncations
    assert reported.divergence_offset == 20
    assert lenient.position == 20
    assert await read_to(lenient, 60) == [f"third-{n}" for n in range(40)]

    # A range planned with the epoch of the record below it: the same, found before the
    # first read; without failing, the loss is noted and the range read as it is now.
    with pytest.raises(LogTruncationError, match=r"offsets 20\.\.49"):
        await range_values(RangeReader(client, UNCLEAN, 50, 60, start_epoch=epoch))
    noted = RangeReader(client, UNCLEAN, 50, 60, start_epoch=epoch, fail_on_data_loss=False)
    assert await range_values(noted) == [(50 + n, f"third-{30 + n}") for n in range(10)]
    [loss] = noted.losses
    assert (loss.first, loss.end, loss.reason) == (20, 50, TRUNCATED)

    # A consumer started again at 50 with the epoch of the record below it (as after a
    # restart from a committed offset and epoch) validates before its first read.
    resumed = Consumer(client, UNCLEAN, max_wait_ms=0)
    await resumed.seek(50, leader_epoch=epoch)
    with pytest.raises(LogTruncationError, match=r"offsets 20\.\.49"):
        await resumed.poll()
    again = Consumer(client, UNCLEAN, max_wait_ms=0)
    await again.seek(50, leader_epoch=new_epoch)
    assert values(await again.poll()) == [f"third-{n}" for n in range(30, 40)]
    await client.close()
