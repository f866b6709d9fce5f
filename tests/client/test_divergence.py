"""KIP-320's rule for readers (`epochlog.client.divergence`): what a leader's epoch ends say
about the records a reader consumed, with the leader's log played by an epoch history.

The leader answers as `Leader.epoch_end_for_reader` does: the largest epoch at or below the
one asked for and where it ends (the next epoch's start, or the log end), or NO_EPOCH and
where its history begins when that is above the epoch asked for.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from epochlog.client.divergence import (
    MAX_EPOCHS,
    UNDEFINED_OFFSET,
    Ask,
    ConsumedEpochs,
    EpochEnd,
    EpochStart,
    Verdict,
    first_question,
    judge,
)
from epochlog.protocol.epochs import NO_EPOCH


def answer(
    history: Sequence[tuple[int, int]], log_end: int, epoch: int, leader_epoch: int = 9
) -> EpochEnd:
    """Where `epoch` ends in a leader's log of epoch `history` ((epoch, start offset), oldest
    first) ending at `log_end`."""
    if not history:
        return EpochEnd(NO_EPOCH, UNDEFINED_OFFSET, leader_epoch)
    if epoch < history[0][0]:
        return EpochEnd(NO_EPOCH, history[0][1], leader_epoch)
    held = [i for i, (e, _) in enumerate(history) if e <= epoch][-1]
    end = history[held + 1][1] if held + 1 < len(history) else log_end
    return EpochEnd(history[held][0], end, leader_epoch)


def validate(
    consumed: ConsumedEpochs,
    position: int,
    history: Sequence[tuple[int, int]],
    log_end: int,
) -> tuple[int | None, list[int]]:
    """The divergence offset, and the epochs asked about, in order."""
    asked: list[int] = []
    step = first_question(consumed, position)
    while isinstance(step, Ask):
        asked.append(step.epoch)
        step = judge(consumed, position, step, answer(history, log_end, step.epoch))
    return step.divergence_offset, asked


def read(*runs: tuple[int, int, int]) -> ConsumedEpochs:
    """A reader that consumed, for each (epoch, first, end), offsets first..end-1 of it."""
    consumed = ConsumedEpochs()
    for epoch, first, end in runs:
        for offset in range(first, end):
            consumed.consumed(epoch, offset)
    return consumed


def test_a_reader_that_consumed_nothing_has_nothing_to_validate() -> None:
    assert first_question(ConsumedEpochs(), 40) == Verdict(None)


def test_records_of_an_epoch_the_leader_holds_past_the_position_are_its() -> None:
    consumed = read((1, 0, 20), (3, 20, 50))
    assert validate(consumed, 50, [(1, 0), (3, 20), (5, 80)], 120) == (None, [3])


def test_an_epoch_ending_below_the_position_diverges_where_it_ends() -> None:
    """Kafka's LogTruncationException: epoch 1 ends at 20 on the new leader, whose log grew
    back to 60 in epoch 2: offsets alone (60 > 50) would see nothing wrong."""
    consumed = read((1, 0, 50))
    assert validate(consumed, 50, [(1, 0), (2, 20)], 60) == (20, [1])


def test_an_epoch_the_leader_never_had_diverges_where_the_reader_entered_it() -> None:
    """The reader read epoch 3 from offset 10; the new leader went from epoch 2 (ending at
    30, past the reader's position) to 4: none of the reader's epoch-3 records are its,
    although epoch 2 ends above the position."""
    consumed = read((1, 0, 10), (3, 10, 25))
    assert validate(consumed, 25, [(1, 0), (2, 10), (4, 30)], 40) == (10, [3, 1])


def test_the_search_goes_on_below_until_the_logs_agree() -> None:
    """The epoch below diverges too: epoch 1 ends at 3 on the leader, at 5 for the reader
    (who read 3..4 in epoch 1 where the leader has epoch 2)."""
    consumed = read((1, 0, 5), (3, 5, 12))
    assert validate(consumed, 12, [(1, 0), (2, 3), (4, 30)], 40) == (3, [3, 1])


def test_a_leader_history_beginning_above_the_epochs_read() -> None:
    """The leader's log started over at 50 (the records below were deleted): nothing below
    50 can be compared; records the reader read at or past 50 are not the leader's."""
    history = [(4, 50)]
    assert validate(read((1, 0, 45)), 45, history, 70) == (None, [1])
    assert validate(read((1, 0, 50)), 50, history, 70) == (None, [1])
    assert validate(read((1, 0, 60)), 60, history, 70) == (50, [1])
    assert validate(read((1, 55, 60)), 60, history, 70) == (55, [1])


def test_a_leader_without_any_epoch_vouches_for_nothing() -> None:
    assert validate(read((2, 10, 20)), 20, [], 0) == (10, [2])


def test_an_answer_to_another_question_is_refused() -> None:
    consumed = read((1, 0, 5))
    with pytest.raises(ValueError, match="does not follow"):
        judge(consumed, 5, Ask(7, 5), EpochEnd(1, 5, 2))


def test_consumed_epochs_keep_the_first_offset_of_each_epoch_and_the_newest_ones() -> None:
    consumed = read((1, 0, 3), (2, 3, 5), (4, 5, 6))
    assert consumed.entries == (EpochStart(1, 0), EpochStart(2, 3), EpochStart(4, 5))
    assert consumed.last_epoch == 4
    assert consumed.epoch_before(5) == EpochStart(2, 3)
    consumed.truncate(4)
    assert list(consumed.entries) == [EpochStart(1, 0), EpochStart(2, 3)]
    many = read(*((e, e, e + 1) for e in range(1, MAX_EPOCHS + 10)))
    assert len(many) == MAX_EPOCHS
    assert many.entries[0] == EpochStart(10, 10)


def test_consuming_again_below_what_was_consumed_forgets_what_lies_above() -> None:
    consumed = read((1, 0, 10), (2, 10, 20))
    consumed.consumed(3, 12)  # offsets 12..19 of epoch 2 are forgotten, 10..11 stay
    assert consumed.entries == (EpochStart(1, 0), EpochStart(2, 10), EpochStart(3, 12))
    consumed.consumed(1, 13)  # an older epoch past a newer one: the history restarts there
    assert list(consumed.entries) == [EpochStart(1, 13)]
