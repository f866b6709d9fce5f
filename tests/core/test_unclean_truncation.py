"""A replica truncated below its high watermark after an unclean election.

Simulator seed 2300203: a broker whose epoch-1 log was committed up to 19 followed the
unclean leader of epoch 2 and was truncated to 0, but kept 19 as its high watermark.
Elected in epoch 3 with 8 records of which only one was committed, it started leading
with a high watermark of 8 and acknowledged records that the ISR member it was still
waiting for did not hold; that member led next and they were gone.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from epochlog.protocol.batch import Record
from epochlog.protocol.heartbeat import HeartbeatResponse
from epochlog_broker.core import BrokerCore
from epochlog_broker.log.checkpoints import HighWatermarkCheckpoint
from epochlog_broker.log.fs import OsFileSystem
from epochlog_broker.replication.messages import Acks
from tests.core import test_broker_core as broker_core
from tests.core.test_broker_core import NAME, core

REPLICAS = (3, 1, 2)


def assign(
    leader: int, epoch: int, isr: tuple[int, ...], pe: int | None = None
) -> HeartbeatResponse:
    return broker_core.assign(leader, epoch, isr, pe, replicas=REPLICAS)


def produce(leader: BrokerCore, *values: str, request_id: int) -> None:
    leader.produce(
        NAME,
        [Record(v.encode()) for v in values],
        acks=Acks.LEADER,
        timeout_ms=1000,
        now_ms=1,
        request_id=request_id,
    )
    leader.flush()


def follow_until(leader: BrokerCore, follower: BrokerCore, log_end: int) -> None:
    """Run the follower's session with `leader` until its log ends at `log_end`, synced,
    in the leader's latest epoch."""
    for now in range(10, 60):
        follower.flush()
        log, lead = follower.partitions[NAME].log, leader.partitions[NAME].log
        if (
            log.persisted_log_end_offset == log_end
            and log.epochs.latest_epoch == lead.epochs.latest_epoch
        ):
            return
        [due] = follower.session_requests()
        request = follower.session_request(due.leader_id)
        assert request is not None
        served = leader.handle_session_fetch(request, now)
        follower.on_session_answer(due.leader_id, request, served.answer)
    raise AssertionError(f"the follower never reached {log_end}")


@pytest.mark.parametrize(
    "held", [0, 2], ids=["the-unclean-leader-held-nothing", "it-held-part-of-epoch-1"]
)
def test_a_truncation_below_the_high_watermark_lowers_it_durably_first(
    tmp_path: Path, held: int
) -> None:
    """`held`: how much of epoch 1 the unclean leader had fetched. With nothing, the
    follower starts over at the leader's log start; with some, it truncates to the
    divergence point. Either way its high watermark must come down with its log."""
    old = core(tmp_path, 3)
    unclean = core(tmp_path, 2)
    if held:
        old.on_heartbeat_response(assign(3, 1, (3, 2)), 0)
        unclean.on_heartbeat_response(assign(3, 1, (3, 2)), 0)
        produce(old, "a", "b", request_id=1)
        follow_until(old, unclean, held)
        follow_until(old, unclean, held)  # its next fetch tells the leader it holds them
    old.on_heartbeat_response(assign(3, 1, (3,), pe=2), 0)
    produce(old, *"abcde"[held:], request_id=2)
    assert old.checkpoint_high_watermarks() == {NAME: 5}

    # Epoch 2's leader was elected uncleanly. Broker 1 is in its ISR and never fetches,
    # so nothing of epoch 2 is committed.
    unclean.on_heartbeat_response(assign(2, 2, (2, 3, 1)), 0)
    produce(unclean, "x", "y", "z", request_id=3)
    old.on_heartbeat_response(assign(2, 2, (2, 3, 1)), 0)
    follow_until(unclean, old, held + 3)
    values = [r.value for r in old.partitions[NAME].log.read_records(held)]
    assert values == [b"x", b"y", b"z"]

    host = old.partitions[NAME]
    assert host.replica.high_watermark == held, "epoch 2's records are not committed"
    # Lowered on disk with the truncation: a crash right after it must not bring 5 back.
    on_disk = HighWatermarkCheckpoint.load(OsFileSystem(), str(tmp_path / "b3"))
    assert (on_disk.get(NAME) or 0) == held
    assert old.checkpoint_high_watermarks() == {NAME: held}

    # Elected in epoch 3 with broker 1 still in the ISR: it must wait for broker 1.
    old.on_heartbeat_response(assign(3, 3, (3, 1, 2)), 0)
    assert host.replica.high_watermark == held
    done = old.produce(
        NAME, [Record(b"w")], acks=Acks.ALL, timeout_ms=1000, now_ms=100, request_id=4
    )
    assert done == []
    assert old.flush() == [], "broker 1 holds nothing of epoch 2: no acknowledgement"
