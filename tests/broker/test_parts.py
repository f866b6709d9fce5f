"""The broker server's pure parts, without processes: client batches, framing, request
parsing, the replica wire format, the data-directory claim and brokerEpoch, config."""

from __future__ import annotations

import asyncio
import json
import struct
from pathlib import Path
from typing import Any

import pytest

from epochlog.protocol.batch import Record, RecordBatch, encode_batch
from epochlog.protocol.bodies import (
    Encoding,
    HostedPartition,
    HostedRole,
    PartitionsListing,
    ProducerIdentity,
    dump_json,
    encode_produce_body,
)
from epochlog.protocol.epochs import NO_EPOCH, epoch_from_report, reported_epoch
from epochlog.protocol.errors import (
    FencedLeaderEpochError,
    InvalidRequestError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
    StorageError,
    error_answer,
)
from epochlog.protocol.framing import frame, stored, unframe
from epochlog.protocol.heartbeat import HeartbeatResponse, PartitionAssignment
from epochlog_broker.broker import Signal
from epochlog_broker.client_batch import ClientBatch
from epochlog_broker.config import BrokerConfig, parse_listen, parse_peers
from epochlog_broker.core import BrokerCore, ProduceDone, ProducerFields
from epochlog_broker.http_api import (
    acks_param,
    at_param,
    int_param,
    parse_produce_json,
)
from epochlog_broker.identity import DataDirClaim
from epochlog_broker.log.fs import OsFileSystem
from epochlog_broker.replica_wire import (
    SessionFetchBody,
    decode_session_answer,
    encode_session_answer,
    error_from_body,
    parse_body,
    session_body,
    session_request,
)
from epochlog_broker.replication.fetch_session import SessionFetchAnswer, SessionFetchRequest
from epochlog_broker.replication.messages import (
    Acks,
    Batch,
    DivergingEpoch,
    FetchData,
    FetchRequest,
)


def batch(*values: bytes, **kw: int) -> bytearray:
    return encode_batch(
        [
            Record(v, key=b"k", headers=(("h", b"x"),), timestamp=100 + i)
            for i, v in enumerate(values)
        ],
        base_offset=kw.get("base_offset", 0),
        leader_epoch=kw.get("leader_epoch", 0),
        timestamp=1,
        producer_id=kw.get("producer_id", -1),
        producer_epoch=kw.get("producer_epoch", -1),
        base_sequence=kw.get("base_sequence", -1),
    )


# -- client batches ----------------------------------------------------------------------


def test_client_batch_is_stamped_with_offset_epoch_and_a_new_crc() -> None:
    cb = ClientBatch.parse(batch(b"a", b"bb", b"ccc"), max_record_bytes=100)
    assert cb.record_count == 3
    assert cb.producer is None
    handed = cb.stamp(41, 7)
    stamped = RecordBatch.from_bytes(handed.raw, deep=True)
    assert handed.header == stamped.header  # what the log trusts is what the bytes say
    assert (stamped.base_offset, stamped.last_offset, stamped.leader_epoch) == (41, 43, 7)
    assert [r.value for r in stamped.records()] == [b"a", b"bb", b"ccc"]
    assert [r.timestamp for r in stamped.records()] == [100, 101, 102]
    assert stamped.header.first_timestamp == 100
    assert stamped.header.max_timestamp == 102


def test_client_batch_carries_the_idempotent_producer_fields() -> None:
    cb = ClientBatch.parse(
        batch(b"a", producer_id=9, producer_epoch=2, base_sequence=5), max_record_bytes=100
    )
    assert cb.producer == ProducerFields(9, 2, 5)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda b: b[:-1], "runs past the end"),
        (lambda b: b + b"x", "after the batch"),
        (lambda b: b[:20] + bytes([b[20] ^ 1]) + b[21:], "CRC mismatch"),
        (lambda b: b"", "empty body"),
        (lambda b: b"garbage", "truncated batch header"),
    ],
)
def test_client_batch_rejects_bad_framing(mutate, message) -> None:
    with pytest.raises(InvalidRequestError, match=message):
        ClientBatch.parse(bytes(mutate(bytes(batch(b"abc")))), max_record_bytes=100)


def _recrc(buf: bytearray) -> bytearray:
    import zlib

    struct.pack_into(">I", buf, 4, zlib.crc32(memoryview(buf)[8:]))
    return buf


def test_client_batch_rejects_a_record_section_that_does_not_decode() -> None:
    buf = batch(b"abc")
    struct.pack_into(">i", buf, 57 + 12, 1000)  # value length past the batch, CRC fixed
    with pytest.raises(InvalidRequestError, match="record 0 is malformed"):
        ClientBatch.parse(bytes(_recrc(buf)), max_record_bytes=10_000)


def test_client_batch_rejects_attributes_and_bad_producer_fields() -> None:
    buf = batch(b"abc")
    struct.pack_into(">H", buf, 9, 1)
    with pytest.raises(InvalidRequestError, match="attributes"):
        ClientBatch.parse(bytes(_recrc(buf)), max_record_bytes=100)
    with pytest.raises(InvalidRequestError, match="producerId"):
        ClientBatch.parse(
            bytes(batch(b"a", producer_id=3, producer_epoch=-1, base_sequence=0)),
            max_record_bytes=100,
        )


def test_client_batch_rejects_an_oversized_record() -> None:
    with pytest.raises(RecordTooLargeError, match="record 1"):
        ClientBatch.parse(bytes(batch(b"a", b"x" * 200)), max_record_bytes=100)


def test_client_batch_of_records_under_the_limit_is_accepted_whatever_its_total() -> None:
    values = [b"x" * 85, b"y" * 91, b"z" * 85]
    cb = ClientBatch.parse(bytes(batch(*values)), max_record_bytes=100)
    # key "k" (1), header "h"/"x" (6 bytes framing + 2) and the value, per record
    assert cb.value_bytes == sum(1 + 6 + 2 + len(v) for v in values)
    with pytest.raises(RecordTooLargeError, match="record 1 of the batch holds 100 bytes"):
        ClientBatch.parse(bytes(batch(*values)), max_record_bytes=99)


@pytest.mark.parametrize(
    ("at", "fmt", "value", "message"),
    [
        (8, ">i", -2, "negative length"),  # key length
        (12, ">i", -7, "negative length"),  # value length
    ],
)
def test_client_batch_rejects_lengths_below_minus_one(at, fmt, value, message) -> None:
    buf = batch(b"abc", b"de")
    struct.pack_into(fmt, buf, 57 + at, value)
    with pytest.raises(InvalidRequestError, match=f"record 0 is malformed.*{message}"):
        ClientBatch.parse(bytes(_recrc(buf)), max_record_bytes=100)


def test_client_batch_rejects_a_header_name_that_is_not_utf8() -> None:
    buf = batch(b"abc")
    name_at = 57 + 18 + len(b"k") + len(b"abc") + 6  # batch header, record header, key, value
    assert buf[name_at : name_at + 2] == b"hx"
    buf[name_at] = 0xFF
    with pytest.raises(InvalidRequestError, match="record 0 is malformed"):
        ClientBatch.parse(bytes(_recrc(buf)), max_record_bytes=100)


# -- framing and the replica wire --------------------------------------------------------


def test_framed_batches_round_trip_and_are_checked() -> None:
    b1 = RecordBatch.from_bytes(bytes(batch(b"a", b"b", base_offset=0, leader_epoch=1)))
    b2 = RecordBatch.from_bytes(bytes(batch(b"c", base_offset=2, leader_epoch=2)))
    body = frame({"highWatermark": 3}, [stored(b1), stored(b2)])
    header, batches = unframe(body)
    assert header["highWatermark"] == 3
    assert [b.raw for b in batches] == [b1.raw, b2.raw]
    damaged = bytearray(body)
    damaged[-3] ^= 0xFF
    with pytest.raises(InvalidRequestError, match="CRC"):
        unframe(bytes(damaged))
    with pytest.raises(InvalidRequestError, match="after the batches"):
        unframe(body + b"x")
    lying = json.loads(body[4 : 4 + struct.unpack(">I", body[:4])[0]])
    lying["batches"][0][1] = 5
    encoded = json.dumps(lying).encode()
    with pytest.raises(InvalidRequestError, match="holds offsets"):
        unframe(struct.pack(">I", len(encoded)) + encoded + b1.raw + b2.raw)


def test_session_answers_round_trip_with_each_partitions_batches() -> None:
    b1 = RecordBatch.from_bytes(bytes(batch(b"a", base_offset=4, leader_epoch=3)))
    b2 = RecordBatch.from_bytes(bytes(batch(b"b", b"c", base_offset=5, leader_epoch=3)))
    b3 = RecordBatch.from_bytes(bytes(batch(b"x", base_offset=0, leader_epoch=1)))
    answer = SessionFetchAnswer(
        7,
        (
            ("t-0", FetchData(3, 5, (Batch(4, 4, 3, b1), Batch(5, 6, 3, b2)))),
            ("t-1", DivergingEpoch(3, 5, 2, 10)),
            ("t-2", FetchData(1, 9)),
            ("t-3", FetchData(1, 0, (Batch(0, 0, 1, b3),))),
        ),
    )
    decoded = decode_session_answer(encode_session_answer(answer))
    assert decoded == answer
    with_error = SessionFetchAnswer(7, (("t-4", FencedLeaderEpochError("old", leader=2)),))
    ((name, error),) = decode_session_answer(encode_session_answer(with_error)).partitions
    assert name == "t-4"
    assert isinstance(error, FencedLeaderEpochError)
    assert error.leader == 2


def test_session_answer_whose_header_miscounts_its_batches_is_refused() -> None:
    b1 = RecordBatch.from_bytes(bytes(batch(b"a", base_offset=0, leader_epoch=1)))
    body = frame(
        {
            "sessionId": 1,
            "partitions": [
                {
                    "partition": "t-0",
                    "type": "data",
                    "leaderEpoch": 1,
                    "highWatermark": 1,
                    "batchCount": 2,
                }
            ],
        },
        [stored(b1)],
    )
    with pytest.raises(InvalidRequestError, match="batches"):
        decode_session_answer(body)
    with pytest.raises(InvalidRequestError, match="leaderEpoch is not an integer"):
        decode_session_answer(
            frame({"sessionId": 1, "partitions": [{"partition": "t-0", "type": "?"}]}, [])
        )


def test_session_body_is_strict_and_errors_come_back_typed() -> None:
    with pytest.raises(InvalidRequestError, match="fetchOffset"):
        parse_body(
            SessionFetchBody,
            b'{"replicaId":1,"brokerEpoch":1,"partitions":'
            b'[{"partition":"t-0","leaderEpoch":1,"fetchOffset":"3","persistedLogEndOffset":3}]}',
        )
    with pytest.raises(InvalidRequestError, match="persistedLogEndOffset"):
        parse_body(
            SessionFetchBody,
            b'{"replicaId":1,"brokerEpoch":1,"partitions":'
            b'[{"partition":"t-0","leaderEpoch":1,"fetchOffset":3}]}',
        )
    with pytest.raises(InvalidRequestError, match="maxWaitMs"):
        parse_body(SessionFetchBody, b'{"replicaId":1,"brokerEpoch":1,"maxWaitMs":-1}')
    request = SessionFetchRequest(
        1,
        2,
        3,
        4,
        (("t-0", FetchRequest(1, 2, 5, 6, 4, persisted_log_end_offset=5, log_start_offset=2)),),
        ("t-1",),
        500,
        100,
        10,
    )
    assert (
        session_request(parse_body(SessionFetchBody, json.dumps(session_body(request)).encode()))
        == request
    )
    error = error_from_body(
        409,
        json.dumps(FencedLeaderEpochError("old", leader=2, leaderEpoch=5).to_dict()).encode(),
    )
    assert isinstance(error, FencedLeaderEpochError)
    assert error.details["leaderEpoch"] == 5
    assert error_from_body(502, b"<html>bad gateway</html>") is None


def test_error_answers_fill_in_the_leader_hint_and_keep_the_errors_own() -> None:
    refused = NotLeaderOrFollowerError("not here", leader=2, leader_epoch=5)
    assert refused.details == {"leader": 2, "leaderEpoch": 5}
    body = error_answer(
        refused, leader=7, leader_epoch=9, leader_url=lambda b: f"http://broker-{b}"
    ).dump()
    assert body["error"] == {
        "code": "NOT_LEADER_OR_FOLLOWER",
        "message": "not here",
        "retriable": True,
        "leader": 2,
        "leaderEpoch": 5,
        "leaderAddress": "http://broker-2",
    }
    error = error_from_body(409, json.dumps(body).encode())
    assert isinstance(error, NotLeaderOrFollowerError)
    assert (error.leader, error.leader_epoch, error.leader_address) == (2, 5, "http://broker-2")
    unknown = error_answer(InvalidRequestError("bad"), leader=None, leader_epoch=None).dump()
    assert unknown["error"]["leader"] is None
    assert unknown["error"]["leaderEpoch"] is None
    assert "leaderAddress" not in unknown["error"]


def test_an_errors_offset_and_epoch_hints_are_ints_or_nothing() -> None:
    # What a body read back carries under a hint's name is followed only when it is an
    # int: not a string, and not a bool (an int to Python).
    fenced = FencedLeaderEpochError("old", leader=True, leader_epoch="5")
    assert (fenced.leader, fenced.leader_epoch) == (None, None)
    out = OffsetOutOfRangeError("out", log_start_offset=3, log_end_offset=False)
    assert (out.log_start_offset, out.log_end_offset) == (3, None)
    assert (out.leader, out.leader_epoch) == (None, None)  # not said


def test_no_epoch_is_reported_as_zero_and_read_back_as_no_epoch() -> None:
    assert reported_epoch(NO_EPOCH) == 0
    assert reported_epoch(3) == 3
    assert epoch_from_report(0) == NO_EPOCH
    assert epoch_from_report(3) == 3


def test_partition_listing_names_the_follower_state_of_followers_only() -> None:
    listing = PartitionsListing(
        broker_id=1,
        broker_epoch=5,
        address="http://broker-1",
        partitions=(
            HostedPartition(name="a-0", role=HostedRole.LEADER, leader=1, leader_epoch=2),
            HostedPartition(name="b-0", role=HostedRole.FOLLOWER, follower_state="fetching"),
        ),
    )
    wire = json.loads(dump_json(listing))
    assert wire["brokerId"] == 1
    assert "followerState" not in wire["partitions"][0]
    assert wire["partitions"][1]["followerState"] == "fetching"
    assert PartitionsListing.model_validate(wire) == listing


# -- request parsing ---------------------------------------------------------------------


def test_produce_json_is_parsed_into_records() -> None:
    body = json.dumps(
        {
            "records": [
                {"key": "k", "value": "v", "headers": {"h": "1"}},
                {"value": "w"},
                {"key": None, "value": ""},
            ]
        }
    ).encode()
    records, producer, size = parse_produce_json(body, encoding=Encoding.UTF8, max_record_bytes=10)
    assert records == [
        Record(b"v", b"k", (("h", b"1"),)),
        Record(b"w", None, ()),
        Record(b"", None, ()),
    ]
    assert producer is None
    assert size == 5


def test_produce_json_written_by_the_client_is_read_by_the_broker() -> None:
    body = encode_produce_body(
        [{"key": None, "value": "v", "headers": {"h": "1"}}], ProducerIdentity(7, 1, 3)
    )
    records, producer, _ = parse_produce_json(body, encoding=Encoding.UTF8, max_record_bytes=10)
    assert records == [Record(b"v", None, (("h", b"1"),))]
    assert producer == ProducerFields(7, 1, 3)


def test_produce_json_with_base64_and_producer_fields() -> None:
    body = json.dumps(
        {
            "records": [{"value": "AAH/", "headers": {"h": "AA=="}}],
            "producerId": 1,
            "producerEpoch": 0,
            "baseSequence": 10,
        }
    ).encode()
    records, producer, _ = parse_produce_json(body, encoding=Encoding.BASE64, max_record_bytes=10)
    assert records[0].value == b"\x00\x01\xff"
    assert records[0].headers == (("h", b"\x00"),)
    assert producer == ProducerFields(1, 0, 10)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"{not json", "Invalid JSON"),
        (b"[1]", "Input should be an object"),
        (b"{}", "records: Field required"),
        (b'{"records":[]}', "at least 1 item"),
        (b'{"records":[{"value":5}]}', "records.0.value: Input should be a valid string"),
        (b'{"records":[{"value":"a","key":1}]}', "records.0.key"),
        (b'{"records":[{"value":"a","headers":{"h":1}}]}', "records.0.headers.h"),
        (b'{"records":[{"value":"a","vaule":"b"}]}', "records.0.vaule: Extra inputs"),
        (b'{"records":[{"value":"a"}],"producerId":1}', "go together"),
        (
            b'{"records":[{"value":"a"}],"producerId":1,"producerEpoch":70000,"baseSequence":0}',
            "producerEpoch",
        ),
    ],
)
def test_produce_json_errors_name_the_field(body: bytes, message: str) -> None:
    with pytest.raises(InvalidRequestError, match=message):
        parse_produce_json(body, encoding=Encoding.UTF8, max_record_bytes=10)


def test_produce_json_limits() -> None:
    with pytest.raises(RecordTooLargeError, match=r"records\.1"):
        parse_produce_json(
            b'{"records":[{"value":"a"},{"value":"12345678901"}]}',
            encoding=Encoding.UTF8,
            max_record_bytes=10,
        )
    with pytest.raises(InvalidRequestError, match="not valid base64"):
        parse_produce_json(
            b'{"records":[{"value":"!!"}]}', encoding=Encoding.BASE64, max_record_bytes=10
        )


def test_query_parameters() -> None:
    assert int_param({"n": "5"}, "n", minimum=0) == 5
    assert int_param({}, "n", 7) == 7
    with pytest.raises(InvalidRequestError, match="n must be an integer"):
        int_param({"n": "x"}, "n")
    with pytest.raises(InvalidRequestError, match="required"):
        int_param({}, "n")
    with pytest.raises(InvalidRequestError, match="<= 3"):
        int_param({"n": "4"}, "n", maximum=3)
    with pytest.raises(InvalidRequestError, match="acks"):
        acks_param({"acks": "some"})
    assert at_param({"at": "123"}) == 123
    assert at_param({}) == "latest"
    with pytest.raises(InvalidRequestError, match="at must be"):
        at_param({"at": "-5"})


# -- identity and config -----------------------------------------------------------------


def test_broker_epoch_grows_across_claims_and_survives_a_slow_clock(tmp_path: Path) -> None:
    claim = DataDirClaim(str(tmp_path), 1)
    claim.acquire()
    first = claim.next_epoch(now_ms=1000)
    assert first == 1000
    assert claim.next_epoch(now_ms=500) == 1001  # the clock went back
    claim.release()
    again = DataDirClaim(str(tmp_path), 1)
    again.acquire()
    assert again.next_epoch(now_ms=10) == 1002
    again.release()


def test_data_dir_is_exclusive_and_bound_to_its_broker_id(tmp_path: Path) -> None:
    claim = DataDirClaim(str(tmp_path), 1)
    claim.acquire()
    claim.next_epoch()
    with pytest.raises(StorageError, match="in use"):
        DataDirClaim(str(tmp_path), 1).acquire()
    claim.release()
    with pytest.raises(StorageError, match="belongs to broker 1"):
        DataDirClaim(str(tmp_path), 2).acquire()


def test_config_parsing_and_peer_urls() -> None:
    assert parse_listen("127.0.0.1:9000") == ("127.0.0.1", 9000)
    assert parse_listen(":9000") == ("0.0.0.0", 9000)
    assert parse_listen("[::1]:9000") == ("::1", 9000)
    with pytest.raises(ValueError, match="HOST:PORT"):
        parse_listen("9000")
    peers = parse_peers(["1=127.0.0.1:1,2=http://h:2", "3=https://x:3/"])
    assert peers == {1: "http://127.0.0.1:1", 2: "http://h:2", 3: "https://x:3/"}
    cfg = BrokerConfig(
        broker_id=1,
        data_dir="/d",
        controller_url="http://c",
        port=9001,
        peers=peers,
        peer_address_template="http://broker-{id}.b:8080",
    )
    assert cfg.peer_url(1) == "http://127.0.0.1:9001"
    assert cfg.peer_url(3) == "https://x:3"
    assert cfg.peer_url(7) == "http://broker-7.b:8080"


async def test_signal_wakes_every_waiter_and_times_out() -> None:
    sig = Signal()
    assert await sig.wait(0.01) is False
    waiters = [asyncio.create_task(sig.wait(5)) for _ in range(3)]
    await asyncio.sleep(0)
    sig.notify()
    assert await asyncio.gather(*waiters) == [True, True, True]


# -- core additions used by the server ---------------------------------------------------


def _sole_leader(tmp_path: Path) -> BrokerCore:
    core = BrokerCore(broker_id=1, broker_epoch=1, fs=OsFileSystem(), data_dir=str(tmp_path))
    core.open()
    core.on_heartbeat_response(
        HeartbeatResponse(
            assignments=(
                PartitionAssignment(
                    name="p-0",
                    leader=1,
                    leader_epoch=3,
                    partition_epoch=3,
                    isr=(1,),
                    replicas=(1,),
                    min_insync_replicas=1,
                ),
            )
        ),
        0,
    )
    return core


class _Untouchable(dict[str, Any]):
    """The hosted partitions of an idle broker: `dirty` must not walk them."""

    def values(self) -> Any:
        raise AssertionError("an idle broker's dirty check walked every partition")


def test_an_idle_brokers_dirty_check_does_not_walk_its_partitions(tmp_path: Path) -> None:
    core = _sole_leader(tmp_path)
    core.produce("p-0", [Record(b"a")], acks=Acks.ALL, timeout_ms=1000, now_ms=1, request_id=7)
    assert core.dirty
    core.flush()
    assert not core.dirty
    hosted = core.partitions
    core.partitions = _Untouchable(hosted)
    assert not core.dirty  # asked after every call that returns effects
    core.partitions = hosted
    core.produce("p-0", [Record(b"b")], acks=Acks.ALL, timeout_ms=1000, now_ms=2, request_id=8)
    assert core.dirty
    core.close()


def test_core_flush_in_three_steps_acknowledges_like_flush(tmp_path: Path) -> None:
    core = _sole_leader(tmp_path)
    effects = core.produce(
        "p-0", [Record(b"a")], acks=Acks.ALL, timeout_ms=1000, now_ms=1, request_id=7
    )
    assert effects == []
    assert core.dirty
    names = core.begin_flush()
    assert names == ["p-0"]
    assert not core.dirty
    [(name, persisted)] = core.sync_logs(names)
    assert (name, persisted) == ("p-0", 1)
    done = core.end_flush("p-0", persisted)
    assert done == [ProduceDone(7, "p-0", 0, 0, 3)]
    core.close()


def test_core_appends_a_prepared_batch_stamped_with_offset_and_epoch(tmp_path: Path) -> None:
    core = _sole_leader(tmp_path)
    core.produce("p-0", [Record(b"first")], acks=Acks.NONE, timeout_ms=1, now_ms=1, request_id=1)
    prepared = ClientBatch.parse(batch(b"x", b"y"), max_record_bytes=100)
    effects = core.produce("p-0", prepared, acks=Acks.NONE, timeout_ms=1, now_ms=1, request_id=2)
    assert effects == [ProduceDone(2, "p-0", 1, 2, 3)]
    core.flush()
    result = core.read_batches("p-0", 2)
    assert [b.base_offset for b in result.batches] == [1]
    assert [(r.offset, r.value, r.leader_epoch) for r in result.batches[0].records()] == [
        (1, b"x", 3),
        (2, b"y", 3),
    ]
    assert result.high_watermark == 3
    core.close()
