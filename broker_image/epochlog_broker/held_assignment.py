"""`assignment-checkpoint`: the last assignment a broker was handed for a partition, on disk.

The Partition status is the controller's record; each broker keeps its own copy
of the part it was told (leader, leaderEpoch, partitionEpoch, ISR, replicas,
the ISR's storage ids, the eligible leader replicas and theirs), so that a
controller that lost the status, even while every broker restarted, can restore
it from the brokers (see the operator's `restore`). The file lives in the
partition's directory and is written atomically, as the other checkpoints,
whenever the broker takes a new assignment:

    epochlog-assignment-checkpoint v1
    8
    leader 2
    leader-epoch 4
    partition-epoch 7
    isr 2
    replicas 1,2,3
    isr-storage-ids 2=5f0c8a52-...
    eligible-leader-replicas 3
    eligible-leader-replica-storage-ids 3=0b1c...
    crc32 1a2b3c4d

A file written before the last two lines existed reads as an assignment without
eligible leader replicas.

It is a record for the controller, never an instruction: a restarted broker
takes no role from it, only reports it. A damaged file is reported as absent
(and logged); the controller then knows less, which can only make it wait.
"""

from __future__ import annotations

import posixpath
from typing import Final

import structlog

from epochlog.protocol.heartbeat import HeldAssignment
from epochlog_broker.log.checkpoints import CheckpointError, _parse, _render, atomic_write
from epochlog_broker.log.fs import FileSystem, read_all

ASSIGNMENT_CHECKPOINT: Final = "assignment-checkpoint"
_KIND: Final = "assignment-checkpoint"

log = structlog.get_logger("epochlog.broker")


def write_held(fs: FileSystem, partition_dir: str, held: HeldAssignment) -> None:
    """Replace the partition's checkpoint, atomically and durably."""
    atomic_write(fs, held_path(partition_dir), render_held(held))


def held_path(partition_dir: str) -> str:
    return posixpath.join(partition_dir, ASSIGNMENT_CHECKPOINT)


def render_held(held: HeldAssignment) -> bytes:
    """The checkpoint's content; a caller that writes many at once (`BrokerCore`'s answers)
    writes, syncs and renames them itself, in the order `atomic_write` does."""
    return _render(_KIND, _lines(held))


def _lines(held: HeldAssignment) -> list[str]:
    return [
        f"leader {'-' if held.leader is None else held.leader}",
        f"leader-epoch {held.leader_epoch}",
        f"partition-epoch {held.partition_epoch}",
        f"isr {_ids(held.isr)}",
        f"replicas {_ids(held.replicas)}",
        f"isr-storage-ids {_storage_ids(held.isr_storage_ids)}",
        f"eligible-leader-replicas {_ids(held.eligible_leader_replicas)}",
        "eligible-leader-replica-storage-ids "
        + _storage_ids(held.eligible_leader_replica_storage_ids),
    ]


def read_held(fs: FileSystem, partition_dir: str) -> HeldAssignment | None:
    path = posixpath.join(partition_dir, ASSIGNMENT_CHECKPOINT)
    if not fs.exists(path):
        return None
    try:
        fields = dict(_parse(_KIND, path, read_all(fs, path)))
        return HeldAssignment(
            leader=None if fields["leader"] == "-" else int(fields["leader"]),
            leader_epoch=int(fields["leader-epoch"]),
            partition_epoch=int(fields["partition-epoch"]),
            isr=_parse_ids(fields["isr"]),
            replicas=_parse_ids(fields["replicas"]),
            isr_storage_ids=_parse_storage_ids(fields["isr-storage-ids"]),
            eligible_leader_replicas=_parse_ids(fields.get("eligible-leader-replicas", "-")),
            eligible_leader_replica_storage_ids=_parse_storage_ids(
                fields.get("eligible-leader-replica-storage-ids", "-")
            ),
        )
    except (CheckpointError, KeyError, ValueError) as exc:
        log.warning("assignment_checkpoint_damaged", path=path, error=str(exc))
        return None


def _ids(ids: tuple[int, ...]) -> str:
    return ",".join(str(i) for i in ids) or "-"


def _parse_ids(text: str) -> tuple[int, ...]:
    return () if text == "-" else tuple(int(i) for i in text.split(","))


def _storage_ids(ids: dict[int, str]) -> str:
    return ",".join(f"{b}={s}" for b, s in sorted(ids.items())) or "-"


def _parse_storage_ids(text: str) -> dict[int, str]:
    if text == "-":
        return {}
    return {int(b): s for b, s in (e.split("=", 1) for e in text.split(","))}
