"""`check_observations`, the checker subset the real-process runs use, on small histories.

No processes here: these pin that what the fault tests rely on is really
checked from client observations, status versions and final replica logs alone.
"""

from __future__ import annotations

from epochlog.resources import PartitionStatus
from epochlog_tools.checker.checks import ReplicaLog, check_observations
from epochlog_tools.checker.history import (
    Ack,
    History,
    OffsetSeen,
    Read,
    StatusWrite,
    UncleanElection,
)

P = "t-0"


def history(values: list[str]) -> History:
    h = History()
    for v in values:
        h.sent[v] = P
    return h


def logs(*replicas: list[str], hw: int | None = None) -> dict[str, dict[int, ReplicaLog]]:
    return {
        P: {
            b + 1: ([(o, 1, v) for o, v in enumerate(r)], len(r) if hw is None else hw)
            for b, r in enumerate(replicas)
        }
    }


def status(leader: int | None, epoch: int) -> PartitionStatus:
    return PartitionStatus(
        leader=leader, leader_epoch=epoch, partition_epoch=epoch, isr=(1, 2, 3), replicas=(1, 2, 3)
    )


def checks(h: History, final: dict[str, dict[int, ReplicaLog]], leader: int = 1) -> list[str]:
    found = check_observations(h, end=100, logs=final, statuses={P: status(leader, 1)})
    return [v.check for v in found]


def test_a_clean_history_passes() -> None:
    h = history(["a", "b"])
    h.acks += [Ack("p", P, "a", 0, 1, 1), Ack("p", P, "b", 1, 1, 2)]
    h.reads += [Read("c", P, 0, "a", 3), Read("c", P, 1, "b", 4)]
    h.offsets += [
        OffsetSeen("o", P, "latest", 1, 1, 1, 2),
        OffsetSeen("o", P, "latest", 2, 1, 1, 3),
    ]
    h.status_writes += [StatusWrite(P, status(1, 1), 0)]
    assert checks(h, logs(["a", "b"], ["a", "b"], ["a", "b"])) == []


def test_a_lost_acknowledged_record_and_an_unreplicated_one_are_found() -> None:
    h = history(["a", "b"])
    h.acks += [Ack("p", P, "a", 0, 1, 1), Ack("p", P, "b", 1, 1, 2)]
    assert checks(h, logs(["a"], ["a", "b"], ["a", "b"])) == ["acked-lost", "not-replicated"]


def test_offsets_going_back_and_duplicates_and_divergence_are_found() -> None:
    h = history(["a", "b", "x"])
    h.offsets += [
        OffsetSeen("o", P, "hw", 5, 2, 2, 10),
        OffsetSeen("o", P, "latest", 4, 1, 1, 11),
    ]
    found = checks(h, logs(["a", "b", "a"], ["a", "x", "a"], hw=2))
    assert set(found) == {"offset-went-back", "duplicate", "diverged"}


def test_epochs_from_status_versions_are_checked() -> None:
    h = history([])
    h.status_writes += [
        StatusWrite(P, status(1, 2), 1),
        StatusWrite(P, status(2, 2), 2),
        StatusWrite(P, status(2, 1), 3),
    ]
    assert set(checks(h, {})) == {"epoch-reused", "epoch-went-back"}


def test_a_deposed_leaders_offset_after_an_unclean_election_it_missed_is_not_a_step_back() -> None:
    """Broker 1 is elected uncleanly in leaderEpoch 4 at offset 59 (time 10); broker 3,
    deposed from epoch 3 and not told yet, still answers latest 72 at time 15. The new
    leader's 59 at time 20 is what the unclean election lost, not a step back; the same
    answers without that election are one."""
    h = history([])
    h.offsets += [
        OffsetSeen("o", P, "latest", 72, 3, 3, 15),
        OffsetSeen("o", P, "latest", 59, 4, 1, 20),
    ]
    assert "offset-went-back" in checks(h, {})
    h.unclean_elections.append(UncleanElection(10, P, 4, 1, 59))
    assert "offset-went-back" not in checks(h, {})
    # A deposed leader answering after a newer leader is still a step back.
    h.offsets.append(OffsetSeen("o", P, "latest", 58, 3, 3, 25))
    assert "offset-went-back" in checks(h, {})
