"""Fuzzing a real broker's Kafka listener: whatever bytes arrive, the connection is
answered or closed, the broker goes on, and nothing but whole, valid Produce requests
is written.

Hypothesis sends one connection's worth of bytes to the Kafka listener of a broker of
the embedded cluster (TLS, the admin user's certificate): random bytes; a size prefix
of any value (negative, zero, over the frame limit) before random bytes; valid requests
of every version the listener claims (ApiVersions, Metadata, Produce, Fetch,
ListOffsets, OffsetForLeaderEpoch, DescribeConfigs) cut short, with bytes overwritten
(Fetch only whole: a changed maxWait or minBytes is a long poll, as on Kafka), or run
together with garbage between them. After them comes an ApiVersions v0 probe. Each
connection must end within the broker's body timeout (1 s here) plus a hang
detector's margin, either closed by the broker or with the probe answered; the
broker must still answer a new connection; and the partition must hold the records
written before the fuzzing, unchanged, followed only by records that a Produce of the
drawn requests carried (a Produce whose overwritten bytes still make a valid request
is written, as on Kafka).

Under `make soak` (HYPOTHESIS_PROFILE=soak) it runs fifty times as long.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import struct
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Final

import pytest
import pytest_asyncio
from hypothesis import HealthCheck, event, given, note, settings
from hypothesis import strategies as st

from epochlog_broker.kafka import wire
from epochlog_broker.kafka.listener import HEADER_SLACK
from epochlog_tools.devcluster.local import LocalCluster
from tests.conftest import examples
from tests.e2e.conftest import e2e_settings
from tests.e2e.helpers import create_partition
from tests.e2e.test_kafka_clients import NAME, _batch, _read_all, _request, _user_tls
from tests.kafka.raw import KafkaConnection, request_frame

pytestmark = pytest.mark.asyncio(loop_scope="module")

BODY_TIMEOUT_MS: Final = 1000
MAX_REQUEST_BYTES: Final = 64 * 1024
HANG_S: Final = 60.0
"""A hang detector, far above the body timeout: a connection still open after it was
left hanging."""
PROBE: Final = 0x7EEE0001
"""The probe's correlation id."""
KNOWN: Final = [b"known-%d" % n for n in range(10)]
MANGLED: Final = (
    wire.API_VERSIONS,
    wire.METADATA,
    wire.PRODUCE,
    wire.LIST_OFFSETS,
    wire.OFFSET_FOR_LEADER_EPOCH,
    wire.DESCRIBE_CONFIGS,
)
"""The APIs whose requests are cut and overwritten."""


@dataclass
class Target:
    cluster: LocalCluster
    address: str
    tls: ssl.SSLContext
    leader_epoch: int

    async def connect(self) -> KafkaConnection:
        return await KafkaConnection.open(self.address, self.tls)


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def target(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Target]:
    settings = e2e_settings()
    settings.broker_args = (
        "--body-timeout-ms",
        str(BODY_TIMEOUT_MS),
        "--max-request-bytes",
        str(MAX_REQUEST_BYTES),
    )
    cluster = LocalCluster(tmp_path_factory.mktemp("kafka-fuzz"), brokers=1, settings=settings)
    await cluster.up(example_partitions=False)
    try:
        status = await create_partition(cluster, NAME, (1,), min_insync_replicas=1)
        address = cluster.kafka_bootstrap[0]
        t = Target(cluster, address, _user_tls(cluster), status.leader_epoch)
        conn = await t.connect()
        known = _request(wire.PRODUCE, 9, t.leader_epoch, 0)
        known["topic_data"][0]["partition_data"][0]["records"] = _batch(KNOWN)
        answer = await conn.ask(wire.PRODUCE, 9, **known)
        await conn.close()
        ((written,),) = [r.partition_responses for r in answer.responses]
        assert written.error_code == wire.error("none")
        assert int(written.base_offset) == 0
        yield t
    finally:
        await cluster.down()


def _frame(api: int, version: int, leader_epoch: int) -> bytes:
    return request_frame(api, version, 1, **_request(api, version, leader_epoch, 0))


def _versions(api: int) -> st.SearchStrategy[int]:
    low, high = wire.SUPPORTED[api]
    return st.integers(low, high)


@st.composite
def requests(draw: st.DrawFn, leader_epoch: int, apis: tuple[int, ...]) -> bytes:
    api = draw(st.sampled_from(apis))
    return _frame(api, draw(_versions(api)), leader_epoch)


@st.composite
def connection_bytes(draw: st.DrawFn, leader_epoch: int) -> bytes:
    """What one connection sends before the probe."""
    kind = draw(st.sampled_from(["bytes", "size", "cut", "overwritten", "run together"]))
    event(kind)
    if kind == "bytes":
        return draw(st.binary(max_size=600))
    if kind == "size":
        limit = MAX_REQUEST_BYTES + HEADER_SLACK
        size = draw(
            st.sampled_from([0, -1, limit, limit + 1, 1 << 30, -(2**31)])
            | st.integers(-(2**31), 2**31 - 1)
        )
        return struct.pack(">i", size) + draw(st.binary(max_size=200))
    good = draw(requests(leader_epoch, MANGLED))
    if kind == "cut":
        return good[: draw(st.integers(0, len(good) - 1))]
    if kind == "overwritten":
        out = bytearray(good)
        for _ in range(draw(st.integers(1, 4))):
            out[draw(st.integers(0, len(out) - 1))] = draw(st.integers(0, 255))
        return bytes(out)
    whole = draw(st.lists(requests(leader_epoch, (*MANGLED, wire.FETCH)), min_size=1, max_size=3))
    garbage = draw(st.binary(max_size=40))
    return b"".join(whole[:1]) + garbage + b"".join(whole[1:])


async def _outcome(conn: KafkaConnection) -> str:
    """'closed' when the broker ended the connection, 'answered' when the probe's answer
    came (answers to the requests before it are read past)."""
    try:
        while True:
            (size,) = struct.unpack(">i", await conn.reader.readexactly(4))
            data = await conn.reader.readexactly(size)
            if struct.unpack(">i", data[:4])[0] == PROBE:
                return "answered"
    except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
        return "closed"


@pytest.fixture(scope="module")
def sent_values() -> set[bytes]:
    """The values a Produce of `_request` carries, in any version."""
    low, high = wire.SUPPORTED[wire.PRODUCE]
    return {b"v%d" % v for v in range(low, high + 1)}


@given(data=st.data())
@settings(max_examples=examples(40), suppress_health_check=list(HealthCheck), deadline=None)
async def test_random_bytes_on_the_kafka_listener_end_cleanly_and_write_nothing_else(
    target: Target, sent_values: set[bytes], data: st.DataObject
) -> None:
    sent = data.draw(connection_bytes(target.leader_epoch), label="bytes")
    note(f"{len(sent)} bytes: {sent[:80]!r}")
    conn = await target.connect()
    try:
        probe = struct.pack(">ihhih", 10, wire.API_VERSIONS, 0, PROBE, -1)
        with contextlib.suppress(ConnectionError, ssl.SSLError):
            # Closed while still sending: its outcome reads as closed.
            await conn.send_raw(sent + probe)
        try:
            outcome = await asyncio.wait_for(_outcome(conn), HANG_S)
        except TimeoutError:
            pytest.fail(f"the connection was neither answered nor closed in {HANG_S} s")
        event(outcome)
    finally:
        await conn.close()
    # The broker goes on: a new connection is answered.
    fresh = await target.connect()
    versions = await fresh.ask(wire.API_VERSIONS, 3, **_request(wire.API_VERSIONS, 3, 0, 0))
    await fresh.close()
    assert versions.error_code == wire.error("none")
    # What was written before is there, unchanged; after it only what a Produce carried.
    values = [v for _o, v in await _read_all(target.cluster, NAME)]
    assert values[: len(KNOWN)] == KNOWN
    assert set(values[len(KNOWN) :]) <= sent_values, values[len(KNOWN) :]


@pytest.mark.parametrize("sent", [1, 2, 3])
async def test_a_frame_cut_inside_its_size_is_closed_within_the_body_timeout(
    target: Target, sent: int
) -> None:
    """Found by the property above: a connection that sent one to three bytes of a frame's
    4-byte size was held until the listener's idle timeout (10 minutes), not the body
    timeout a frame has once it began."""
    conn = await target.connect()
    try:
        await conn.send_raw(b"\x00" * sent)
        closed = await asyncio.wait_for(conn.closed_by_peer(), HANG_S)
    except TimeoutError:
        pytest.fail(f"a frame cut after {sent} byte(s) of its size was held over {HANG_S} s")
    finally:
        await conn.close()
    assert closed
