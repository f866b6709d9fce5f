"""Small tools for fault scenarios on the simulator: one-link heals, timed faults, inspection."""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Iterable

from epochlog.resources import PartitionStatus
from epochlog_broker.log.checkpoints import REPLICATION_OFFSET_CHECKPOINT, read_high_watermarks
from epochlog_broker.replication.follower import Follower
from epochlog_broker.replication.leader import Leader
from epochlog_broker.replication.replica import Offline
from epochlog_tools.checker.checks import Violation
from epochlog_tools.sim.scenario import Sim

DATA_DIR = "/data"


def uncut(sim: Sim, src: int, dst: int) -> None:
    """Heal the one directed link `src` -> `dst`, leaving every other cut in place."""
    sim.world.cuts.discard((src, dst))
    sim.history.cuts = [
        (s, d, t0, sim.now if t1 is None and (s, d) == (src, dst) else t1)
        for s, d, t0, t1 in sim.history.cuts
    ]
    sim.history.fault(sim.now, f"heal {src} -> {dst}")


def at(sim: Sim, delay_ms: int, fault: Callable[[], None]) -> None:
    """Inject `fault` `delay_ms` from now, while a blocking call (a produce) runs the world."""
    sim.world.after(delay_ms, fault)


def status(sim: Sim, partition: str) -> PartitionStatus:
    """The partition's status as the controller last wrote it (it must have written one)."""
    s = sim.status(partition)
    assert s is not None, f"no status for {partition}"
    return s


def role(sim: Sim, partition: str, broker: int) -> Leader | Follower | Offline | None:
    """The replica role a live broker runs for `partition` (None if down or not hosted)."""
    core = sim.brokers[broker].core
    if not sim.brokers[broker].alive or core is None or partition not in core.partitions:
        return None
    return core.partitions[partition].replica.role


def leader_role(sim: Sim, partition: str, broker: int) -> Leader:
    r = role(sim, partition, broker)
    assert isinstance(r, Leader), f"broker {broker} is not leading {partition}: {r!r}"
    return r


def follower_role(sim: Sim, partition: str, broker: int) -> Follower | None:
    r = role(sim, partition, broker)
    return r if isinstance(r, Follower) else None


def leads(sim: Sim, partition: str, broker: int) -> bool:
    """`broker` is the recorded leader and runs as leader of the recorded epoch."""
    return sim.leader(partition) == broker and sim.leading(partition)


def epochs(sim: Sim, partition: str, broker: int) -> list[int]:
    """The leader epoch of every record in a live broker's log, in offset order."""
    state = sim.brokers[broker].replica_state(partition)
    return [] if state is None else [e for _o, e, _v in state[0]]


def acked(sim: Sim, partition: str) -> dict[int, str]:
    """Offset -> value of every record acknowledged (acks=all) in `partition`."""
    return {a.offset: a.value for a in sim.history.acks if a.partition == partition}


def holds_all_acked(sim: Sim, partition: str, broker: int) -> bool:
    log = sim.log(partition, broker)
    return all(o < len(log) and log[o] == v for o, v in acked(sim, partition).items())


def checkpoint_file(sim: Sim, broker: int) -> dict[str, int]:
    """The broker's replication-offset-checkpoint as it is on its disk (up or down)."""
    path = posixpath.join(DATA_DIR, REPLICATION_OFFSET_CHECKPOINT)
    return read_high_watermarks(sim.brokers[broker].fs, path) or {}


def checks(violations: Iterable[Violation]) -> set[str]:
    return {v.check for v in violations}


class LogLengths:
    """Records the shortest log a broker held for a partition while the world ran.

    Use `watch(condition)` as the condition of `sim.wait_for`: it samples after every
    simulated event, so a truncation followed by a refetch is seen.
    """

    def __init__(self, sim: Sim, partition: str, broker: int) -> None:
        self.sim = sim
        self.partition = partition
        self.broker = broker
        self.shortest: int | None = None

    def sample(self) -> None:
        if self.sim.brokers[self.broker].alive:
            n = len(self.sim.log(self.partition, self.broker))
            self.shortest = n if self.shortest is None else min(self.shortest, n)

    def watch(self, condition: Callable[[], bool]) -> Callable[[], bool]:
        def run() -> bool:
            self.sample()
            return condition()

        return run
