"""Requests of many partitions as the client sends them: one request to one leader broker.

`produce`, `fetch` and `list_offsets` each send one request carrying many
partitions (`epochlog.protocol.multi`) and return each partition's outcome in
the order asked: its answer, or its typed error (`client.errors.is_retriable`
tells which to try again). A request that fails as a whole (unreachable, a
400) raises, as a one-partition request does. An answer that does not list
exactly the partitions asked, in order, is an `UnexpectedResponseError`.

Grouping partitions by leader and retrying the ones that failed are the
callers' (`Producer`, `Client.list_offsets_many`, the readers).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from epochlog.client.errors import UnexpectedResponseError, partition_error
from epochlog.client.metadata import PartitionLeader
from epochlog.client.records import (
    BATCH_CONTENT_TYPE,
    BatchesAnswer,
    OffsetAndEpoch,
    PartitionBatch,
    decode_answer,
    produce_many_body,
)
from epochlog.client.transport import Transport
from epochlog.protocol.bodies import Params, ReadAnswer
from epochlog.protocol.epochs import NO_EPOCH
from epochlog.protocol.errors import EpochlogError
from epochlog.protocol.multi import (
    FETCH_MANY_PATH,
    LIST_OFFSETS_MANY_PATH,
    PRODUCE_MANY_PATH,
    FetchAsk,
    FetchMany,
    ListOffsetsManyAnswer,
    OffsetQuery,
    ProduceManyAnswer,
    decode_fetch_answer,
    encode_fetch_many,
    encode_list_offsets_many,
)


@dataclass(frozen=True, slots=True)
class Produced:
    """One partition's produce answer: its offsets (None with acks=none) and the epoch."""

    base_offset: int | None
    last_offset: int | None
    leader_epoch: int


def known_epoch(leader: PartitionLeader) -> int | None:
    """The leader epoch a request carries for this leader (None: the client knows none)."""
    return None if leader.leader_epoch == NO_EPOCH else leader.leader_epoch


def _check_order(asked: Sequence[str], answered: Sequence[str], where: str) -> None:
    if list(asked) != list(answered):
        raise UnexpectedResponseError(
            f"{where}: answered partitions {list(answered)[:5]} for {list(asked)[:5]}"
        )


async def produce(
    transport: Transport,
    url: str,
    parts: Sequence[PartitionBatch],
    *,
    acks: str,
    timeout_ms: int,
    binary: bool,
    margin_s: float,
) -> list[Produced | Exception]:
    """One produce of `parts` at the broker at `url`, answered by `timeout_ms` (plus
    `margin_s` for the trip)."""
    body, ctype, params = produce_many_body(parts, binary=binary)
    answer, _ = await transport.request(
        "POST",
        url,
        PRODUCE_MANY_PATH,
        params={Params.ACKS: acks, Params.TIMEOUT_MS: str(timeout_ms), **params},
        body=body,
        content_type=ctype,
        timeout_s=timeout_ms / 1000 + margin_s,
    )
    where = url + PRODUCE_MANY_PATH
    parsed = decode_answer(ProduceManyAnswer, answer, where)
    _check_order([p.partition for p in parts], [p.partition for p in parsed.partitions], where)
    out: list[Produced | Exception] = []
    for entry in parsed.partitions:
        if entry.error is not None:
            out.append(partition_error(entry.error))
        elif entry.leader_epoch is None:
            out.append(UnexpectedResponseError(f"{where}: {entry.partition} without an epoch"))
        else:
            out.append(Produced(entry.base_offset, entry.last_offset, entry.leader_epoch))
    return out


async def list_offsets(
    transport: Transport,
    url: str,
    asks: Sequence[tuple[PartitionLeader, str | int]],
    *,
    timeout_s: float,
) -> list[OffsetAndEpoch | Exception]:
    """ListOffsets of many partitions at the broker at `url`: (leader, at) each."""
    queries = [OffsetQuery(leader.partition, at, known_epoch(leader)) for leader, at in asks]
    answer, _ = await transport.request(
        "POST",
        url,
        LIST_OFFSETS_MANY_PATH,
        body=encode_list_offsets_many(queries),
        content_type="application/json",
        timeout_s=timeout_s,
    )
    where = url + LIST_OFFSETS_MANY_PATH
    parsed = decode_answer(ListOffsetsManyAnswer, answer, where)
    _check_order([q.partition for q in queries], [p.partition for p in parsed.partitions], where)
    out: list[OffsetAndEpoch | Exception] = []
    for entry in parsed.partitions:
        if entry.error is not None:
            out.append(partition_error(entry.error))
        elif entry.offset is None or entry.leader_epoch is None:
            out.append(UnexpectedResponseError(f"{where}: {entry.partition} without an offset"))
        else:
            out.append(OffsetAndEpoch(entry.offset, entry.leader_epoch))
    return out


async def fetch(
    transport: Transport,
    url: str,
    asks: Sequence[tuple[PartitionLeader, int, int]],
    *,
    max_wait_ms: int,
    max_bytes: int,
    timeout_s: float,
) -> list[BatchesAnswer | Exception]:
    """A fetch of many partitions at the broker at `url`: (leader, offset, its max bytes)
    each; every batch is checked (framing, CRC). Each partition's first batch may start
    below its offset, and its last may reach past its high watermark."""
    wanted = [
        FetchAsk(leader.partition, offset, known_epoch(leader), partition_max_bytes)
        for leader, offset, partition_max_bytes in asks
    ]
    answer, ctype = await transport.request(
        "POST",
        url,
        FETCH_MANY_PATH,
        body=encode_fetch_many(FetchMany(wanted, max_wait_ms, max_bytes)),
        content_type="application/json",
        accept=BATCH_CONTENT_TYPE,
        timeout_s=max_wait_ms / 1000 + timeout_s,
    )
    where = url + FETCH_MANY_PATH
    if ctype != BATCH_CONTENT_TYPE:
        raise UnexpectedResponseError(f"{where}: answered {ctype}, not batches")
    try:
        parts = decode_fetch_answer(answer)
    except EpochlogError as exc:
        raise UnexpectedResponseError(f"{where}: {exc.message}") from None
    _check_order([w.partition for w in wanted], [e.partition for e, _ in parts], where)
    out: list[BatchesAnswer | Exception] = []
    for entry, batches in parts:
        if entry.error is not None:
            out.append(partition_error(entry.error))
        elif entry.high_watermark is None or entry.log_start_offset is None:
            out.append(UnexpectedResponseError(f"{where}: {entry.partition} without its offsets"))
        elif entry.leader_epoch is None:
            out.append(UnexpectedResponseError(f"{where}: {entry.partition} without an epoch"))
        else:
            out.append(
                ReadAnswer(
                    batches, entry.high_watermark, entry.log_start_offset, entry.leader_epoch
                )
            )
    return out
