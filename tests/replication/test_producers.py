"""Idempotent producer state: retries are recognised, gaps and zombies refused."""

from __future__ import annotations

import pytest

from epochlog.protocol.errors import OutOfOrderSequenceError, ProducerFencedError
from epochlog_broker.replication.producers import KEEP, NO_PRODUCER, ProducerStates


def test_a_retried_batch_is_found_with_its_offsets() -> None:
    s = ProducerStates()
    assert s.check(7, 0, 0, 3) is None
    s.record(7, 0, 0, 3, base_offset=10, leader_epoch=2)
    again = s.check(7, 0, 0, 3)
    assert again is not None
    assert (again.base_offset, again.last_offset, again.leader_epoch) == (10, 12, 2)
    assert s.check(7, 0, 3, 1) is None


def test_a_gap_in_sequences_is_refused() -> None:
    s = ProducerStates()
    s.record(7, 0, 0, 3, 10, 1)
    with pytest.raises(OutOfOrderSequenceError) as exc:
        s.check(7, 0, 5, 1)
    assert exc.value.details["expectedSequence"] == 3


def test_an_older_producer_epoch_is_fenced_and_a_newer_starts_afresh() -> None:
    s = ProducerStates()
    s.record(7, 1, 0, 2, 0, 1)
    with pytest.raises(ProducerFencedError):
        s.check(7, 0, 2, 1)
    assert s.check(7, 2, 0, 1) is None
    s.record(7, 2, 0, 1, 2, 1)
    with pytest.raises(ProducerFencedError):
        s.check(7, 1, 2, 1)


def test_only_the_last_batches_are_remembered() -> None:
    s = ProducerStates()
    for i in range(KEEP + 2):
        s.record(7, 0, i, 1, i, 1)
    assert s.check(7, 0, KEEP + 1, 1) is not None
    with pytest.raises(OutOfOrderSequenceError):
        s.check(7, 0, 0, 1)


def test_batches_without_a_producer_are_never_deduplicated() -> None:
    s = ProducerStates()
    s.record(NO_PRODUCER, -1, -1, 1, 0, 1)
    assert s.check(NO_PRODUCER, -1, -1, 1) is None
    assert s.producers == {}


def test_rebuild_follows_the_log() -> None:
    s = ProducerStates.rebuild([(7, 0, 0, 2, 0, 1), (8, 0, 5, 1, 2, 1), (7, 0, 2, 2, 3, 2)])
    found = s.check(7, 0, 2, 2)
    assert found is not None
    assert found.base_offset == 3
    assert s.check(8, 0, 6, 1) is None
