"""Leader epochs: the one sentinel for "no epoch", and how reports spell it.

The controller hands out leader epochs 1, 2, 3, ... (an `epochHistory`
entry's epoch is positive), so no real epoch is below 1.

`NO_EPOCH` is what the broker, its log and the client hold when there is no
epoch: the latest epoch of an empty log, the epoch of a replica that has no
assignment yet, the epoch of a leader the client found without one. It is -1,
not 0, because the log's epoch history, the `leader-epoch-checkpoint` and the
replica fetch body (`lastFetchedEpoch`, the offsets-for-leader-epoch query
and answer) already use -1 as the undefined epoch of KIP-101/279, and because
it sorts below every real epoch, so the newest of several epochs is a plain
`max`.

The Partition status, heartbeats, the brokers' partition listing and the
leader-epoch metric are non-negative by contract (the CRD's schema says
`minimum: 0` and the operator validates heartbeats against the same models):
there no epoch is spelt 0. `reported_epoch` is the one conversion into that
spelling and `epoch_from_report` the one conversion back.
"""

from __future__ import annotations

from typing import Final

NO_EPOCH: Final = -1
"""No leader epoch (KIP-279's UNDEFINED_EPOCH)."""

REPORTED_NO_EPOCH: Final = 0
"""No leader epoch as the Partition status, heartbeats and the partition listing spell it."""


def reported_epoch(epoch: int) -> int:
    """`epoch` as the status, heartbeats, the partition listing and metrics spell it."""
    return max(epoch, REPORTED_NO_EPOCH)


def epoch_from_report(epoch: int) -> int:
    """An epoch read from a status, heartbeat or partition listing, with NO_EPOCH for none."""
    return epoch if epoch > REPORTED_NO_EPOCH else NO_EPOCH
