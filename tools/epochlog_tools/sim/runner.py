"""Random fault schedules: one seed, one run, one verdict; and `epochlog sim` over many seeds.

A run starts a 3-broker cluster with two partitions whose settings vary by seed
(minInsyncReplicas 1 or 2, replicaLagTimeMaxMs 2-10 s, explicit or operator
assigned replicas), starts producers, consumers and ListOffsets callers, and
injects faults of the enabled kinds for `duration_ms`. Then it heals
everything (network, pauses, dead processes), lets the cluster settle with the
producers stopped half-way, and runs every check of `checker`, including the
liveness ones that only make sense once the faults are gone.

Fault kinds (`FAULTS`): kill, power-loss, pause, partition, one-way,
controller, lossy-network, lost-answer, double-kill, all-crash,
kill-on-isr-change, recreate, rolling-restart, wipe, preferred-leader,
retention, retention-crash, reassign, delete-inside-batch, unclean-election,
eligible-leader, isr-disk-loss, staggered-kill.

With retention enabled, each partition keeps by time (a few seconds), by size (a
few segments) or everything, drawn per seed (`_retention_settings`), so segments
are deleted and log starts move on every replica while the other faults strike;
the retention fault also calls DeleteRecords at a leader. The brokers' retention
pass runs every 500 ms or at the production interval (5 minutes: never within a
run), the high watermark checkpoint every second or every 5 s, and a follower
waits 0.5 s or 5 s for a leader's answer, drawn per seed: a window that a fast
interval closes stays open for minutes in a real cluster, and the schedules
must find what happens in it.

The controller runs preferred leader election with a short check interval
(`PREFERRED_CHECK_MS`), so leadership moves back to preferred replicas after
failovers of every kind, not only in the preferred-leader fault.
"""

from __future__ import annotations

import functools
import os
import random
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Final

from epochlog.protocol.heartbeat import HeartbeatResponse
from epochlog.resources import PartitionSpec
from epochlog_broker.report_session import DEFAULT_PROGRESS_EVERY
from epochlog_operator.preferred import RebalanceSettings, preferred_replica
from epochlog_tools.checker.checks import Violation
from epochlog_tools.sim.clients import (
    KAFKA_FETCH,
    KAFKA_LIST_OFFSETS,
    KAFKA_OFFSET_FOR_LEADER_EPOCH,
    KAFKA_PRODUCE,
    ClientConfig,
    SimBatchingProducer,
    SimFetchingConsumer,
)
from epochlog_tools.sim.legacy import check_names
from epochlog_tools.sim.nodes import SimConfig
from epochlog_tools.sim.scenario import Sim, spec
from epochlog_tools.sim.world import CONTROLLER, NetworkConfig

FAULTS: Final = {
    "kill": "SIGKILL a broker (often the leader), restart it later",
    "power-loss": "power loss of a broker: unsynced writes lost, some torn; restart later",
    "pause": "SIGSTOP a broker for 0.2-6 s (past the session timeout at times)",
    "partition": "isolate a broker, or split the brokers, both directions",
    "one-way": "cut one direction of one link (broker-broker or broker-controller)",
    "controller": "restart the controller, or cut it off from a leader that still "
    "reaches its followers (Jepsen 2013)",
    "lossy-network": "drop and duplicate 2% of messages for the whole run",
    "double-kill": "kill the leader, then the newly elected leader",
    "all-crash": "power loss of every broker at once; they return one by one",
    "kill-on-isr-change": "kill a follower; moments after it is back in the ISR (at times "
    "cut off from the leader), kill the other members, the leader included",
    "recreate": "delete a Partition and create it again, at times while a broker is down",
    "rolling-restart": "SIGTERM every broker in turn (a controlled shutdown, then a clean "
    "stop), restarting each before the next; at times one is SIGKILLed mid-handover",
    "wipe": "lose the disk of a broker outside the ISR of every partition it hosts, each ISR "
    "keeping a member on its recorded disk (killing a follower and waiting for it to leave "
    "first if none is), then restart it",
    "reassign": "change a partition's replicas (3 <-> 2 replicas, in a new order) or its "
    "replicationFactor with assigned replicas; at times reverted before the move ends",
    "retention": "DeleteRecords at a partition's leader up to an offset at or below its HW "
    "(partitions also keep only a few seconds or a few segments, drawn per seed)",
    "preferred-leader": "SIGKILL a partition's preferred replica while it leads and restart it: "
    "the controller's balance check moves leadership back under load, and at times the old or "
    "the new leader is killed or cut off in the middle of that handover",
    "retention-crash": "power loss of a broker in the middle of a retention pass it runs at "
    "once, at one of its file operations (the log start checkpoint, a segment's files, a "
    "directory sync), at times with torn writes; restart later",
    "delete-inside-batch": "DeleteRecords at a leader at an offset inside one of its batches, "
    "then a replica must fetch from that log start: a follower's disk is lost, or a "
    "reassignment drops a replica and adds it back (its files deleted, or not yet)",
    "unclean-election": "uncleanLeaderElection is switched on for a partition; a follower "
    "dies and leaves the ISR, the others die once more was written, and it comes back alone "
    "to be elected uncleanly, under consumers that read past its log end (KIP-320: they "
    "must find the truncation through leader epochs); then the switch goes off again",
    "lost-answer": "the controller's next one to three heartbeat answers to a broker are lost "
    "(at times only answers that carry assignments or refused ISR proposals); or a follower "
    "is cut off from the controller until fenced while it still fetches, and the answers "
    "refusing its leader's proposals to add it back are lost",
    "eligible-leader": "take a partition's ISR down to its leader while a follower that left "
    "it keeps everything committed: the other followers die, then that one is cut off from "
    "the controller until fenced (it still fetches); then the leader dies and the cut heals: "
    "with minInsyncReplicas 2 the follower leads as an eligible leader replica (KIP-966)",
    "isr-disk-loss": "take a partition's ISR down to its leader (the followers die), then lose "
    "the disks of the leader and of every eligible leader replica, and bring every broker "
    "back: no replica holding what they alone held is left, and the controller elects the "
    "most up-to-date one by unclean recovery",
    "staggered-kill": "kill a follower (the preferred replica when it follows) and, a few "
    "hundred ms later, the leader, which restarts within a second or two: the election comes "
    "before the follower's session expires and must pass over it",
}

PREFERRED_CHECK_MS: Final = 2000
"""The controller's leader imbalance check interval in random runs (production: 5 min)."""

RETENTION_CHECK_MS: Final = (500, 300_000)
"""The brokers' retention pass interval, drawn per seed: every 500 ms, or the broker's
default of 5 minutes, so never within a run. A pass also writes the log starts that
moved in memory; at the production interval, a window that a fast pass closes in
half a second stays open for the whole run."""

CHECKPOINT_INTERVAL_MS: Final = (1000, 5000)
"""The high watermark checkpoint interval, drawn per seed: fast, or the broker's default."""

REPLICA_REQUEST_TIMEOUT_MS: Final = (500, 5000)
"""How long a follower waits for a leader's answer, drawn per seed: fast, or the
broker's default (`--replica-request-timeout-ms`); fast on a lossy network."""

KAFKA_SHARE: Final = 1 / 3
"""The share of runs whose clients include Kafka's (`ClientConfig.kafka`)."""
KAFKA_STATS: Final = {
    KAFKA_PRODUCE: "kafka_produces",
    KAFKA_FETCH: "kafka_fetches",
    KAFKA_LIST_OFFSETS: "kafka_list_offsets",
    KAFKA_OFFSET_FOR_LEADER_EPOCH: "kafka_epoch_queries",
}
"""A run's count of the Kafka requests its clients had answered, by API."""

LIVENESS_BOUND_MS: Final = 10_000


@dataclass(frozen=True)
class RunSettings:
    faults: frozenset[str] = frozenset(FAULTS)
    legacy: frozenset[str] = frozenset()
    duration_ms: int = 20_000
    settle_ms: int = 12_000


@dataclass
class ScheduleResult:
    seed: int
    violations: list[Violation]
    report: str | None
    acks: int
    reads: int
    faults: int
    sim_ms: int
    events: int
    wall_s: float
    stats: dict[str, int] = field(default_factory=dict)


def build(seed: int, settings: RunSettings) -> Sim:
    """The cluster of a random run, before anything started."""
    rng = random.Random(seed ^ 0x5EED)
    specs = []
    for i in range(2):
        replicas: tuple[int, ...] = ()
        if rng.random() < 0.5:
            first = rng.randint(1, 3)
            replicas = tuple(((first + k - 1) % 3) + 1 for k in range(3))
        specs.append(
            spec(
                "t",
                i,
                replicas=replicas,
                replication_factor=3,
                min_insync_replicas=rng.choice([1, 2, 2]),
                replica_lag_time_max_ms=rng.choice([2000, 4000, 10_000]),
            )
        )
    if "retention" in settings.faults:
        specs = _retention_settings(seed, specs)
    network = NetworkConfig()
    if "lossy-network" in settings.faults and rng.random() < 0.5:
        network = NetworkConfig(drop_rate=0.02, duplicate_rate=0.02)
    # Their own random source: the draws above stay as they were for every seed.
    intervals = random.Random(seed ^ 0x1E7A)
    config = SimConfig(
        rebalance=RebalanceSettings(check_interval_ms=PREFERRED_CHECK_MS),
        # Half the runs find divergence with an epoch query first, half through the
        # fetch (the broker's default); its own random source, as the draws above.
        find_divergence_first=random.Random(seed ^ 0xD1F5).random() < 0.5,
        # Most runs hold offsets-only reports back as brokers do by default; some send
        # every change at once.
        report_progress_every=random.Random(seed ^ 0x9E7A).choice(
            (1, DEFAULT_PROGRESS_EVERY, DEFAULT_PROGRESS_EVERY)
        ),
        retention_check_ms=intervals.choice(RETENTION_CHECK_MS),
        checkpoint_interval_ms=intervals.choice(CHECKPOINT_INTERVAL_MS),
        # A network that keeps dropping messages after the heal keeps the fast timeout: at
        # 5 s for each lost fetch, the settle phase would measure the timeout, not the rules.
        replica_request_timeout_ms=(
            REPLICA_REQUEST_TIMEOUT_MS[0]
            if network.drop_rate
            else intervals.choice(REPLICA_REQUEST_TIMEOUT_MS)
        ),
    )
    # Three runs in four use requests of many partitions, as the client library sends them;
    # the rest one partition per request, as older clients and the CLI do.
    many = random.Random(seed ^ 0x3A11).random() < 0.75
    # One run in three has Kafka clients: a producer, the consumer and the ListOffsets
    # caller speak Kafka's messages, answered through the Kafka listener's translation.
    kafka = random.Random(seed ^ 0x4AF4).random() < KAFKA_SHARE
    return Sim(
        seed,
        brokers=3,
        partitions=specs,
        legacy=settings.legacy,
        network=network,
        config=config,
        clients=ClientConfig(many=many, kafka=kafka),
    )


def _retention_settings(seed: int, specs: list[PartitionSpec]) -> list[PartitionSpec]:
    """Each partition keeps a few seconds, a few 16 KiB segments, or everything (its own
    random source: the draws of the other settings stay as they were for every seed)."""
    rng = random.Random(seed ^ 0x7E7E)
    out = []
    for s in specs:
        settings = rng.choice(
            [
                {"retention_ms": rng.choice([2_000, 5_000])},
                {"retention_ms": -1, "retention_bytes": rng.choice([20_000, 50_000])},
                {"retention_ms": rng.choice([3_000, 8_000]), "retention_bytes": 40_000},
                {},
            ]
        )
        out.append(PartitionSpec.model_validate({**s.model_dump(by_alias=False), **settings}))
    return out


class _Nemesis:
    """Injects random faults of the enabled kinds, each with its own recovery."""

    def __init__(self, sim: Sim, kinds: Sequence[str]) -> None:
        self.sim = sim
        self.kinds = [k for k in kinds if k != "lossy-network"]
        self.rng = sim.world.rng
        self.count = 0
        self.unclean_switched_on: set[str] = set()
        """Partitions the unclean-election fault switched uncleanLeaderElection on for: no
        disk is lost meanwhile (`_unclean_election` says why)."""

    def start(self, until_ms: int) -> None:
        self.until = until_ms
        self._next()

    def _next(self) -> None:
        if not self.kinds:
            return
        delay = self.rng.randint(500, 3500)
        if self.sim.now + delay >= self.until:
            return
        self._at(delay, self._strike)

    def _later(self, lo: int, hi: int, fn: Callable[[], None]) -> None:
        self._at(self.rng.randint(lo, hi), fn)

    def _at(self, delay: int, fn: Callable[[], None]) -> None:
        """Run `fn` later, unless the fault phase is over by then (the heal takes over)."""

        def guarded() -> None:
            if self.sim.now < self.until:
                fn()

        self.sim.world.after(delay, guarded)

    def _restart_if_down(self, b: int) -> None:
        if not self.sim.brokers[b].alive:
            self.sim.restart(b)

    def _victim(self) -> int:
        sim = self.sim
        leaders = [sim.leader(s.name) for s in sim.specs]
        live_leaders = [b for b in leaders if b is not None and sim.brokers[b].alive]
        if live_leaders and self.rng.random() < 0.6:
            return self.rng.choice(live_leaders)
        return self.rng.choice(sorted(sim.brokers))

    def _strike(self) -> None:
        sim, rng = self.sim, self.rng
        kind = rng.choice(self.kinds)
        self.count += 1
        b = self._victim()
        if kind in ("kill", "power-loss"):
            if sim.brokers[b].alive:
                if kind == "kill":
                    sim.kill(b)
                else:
                    sim.kill(b, power_loss=True, torn=rng.random() < 0.5)
                self._later(300, 5000, lambda: self._restart_if_down(b))
        elif kind == "pause":
            sim.pause(b, rng.randint(200, 6000))
        elif kind == "partition":
            if rng.random() < 0.5:
                sim.isolate(b)
                cut = [(b, n) for n in sim.world.processes if n != b]
                cut += [(n, b) for n in sim.world.processes if n != b]
            else:
                others = [x for x in sim.brokers if x != b]
                sim.partition([b], others)
                cut = [(b, o) for o in others] + [(o, b) for o in others]
            self._later(1000, 6000, lambda: self._uncut(cut))
        elif kind == "one-way":
            nodes = [*sim.brokers, CONTROLLER]
            src = rng.choice(nodes)
            dst = rng.choice([n for n in nodes if n != src])
            sim.cut(src, dst)
            self._later(1000, 6000, lambda: self._uncut([(src, dst)]))
        elif kind == "controller":
            if rng.random() < 0.5:
                if sim.controller.alive:
                    sim.kill_controller()
                    self._later(200, 3000, self._restart_controller)
            else:
                sim.partition([CONTROLLER], [b])
                self._later(1000, 6000, lambda: self._uncut([(CONTROLLER, b), (b, CONTROLLER)]))
        elif kind == "double-kill":
            self._double_kill(b)
        elif kind == "kill-on-isr-change":
            name = rng.choice(sim.specs).name
            leader = sim.leader(name)
            followers = [m for m in sim.isr(name) if m != leader and sim.brokers[m].alive]
            if leader is not None and followers:
                f = rng.choice(followers)
                sim.kill(f)
                self._later(300, 2000, lambda: self._restart_if_down(f))
                self._watch_isr(name, f, 2000)
        elif kind == "rolling-restart":
            self._roll(rng.sample(sorted(sim.brokers), len(sim.brokers)))
        elif kind == "recreate":
            self._recreate(rng.choice(sim.specs).name)
        elif kind == "wipe":
            self._wipe()
        elif kind == "preferred-leader":
            self._preferred_away(rng.choice(sim.specs).name)
        elif kind == "retention":
            self._delete_records(rng.choice(sim.specs).name)
        elif kind == "reassign":
            self._reassign(rng.choice(sim.specs).name)
        elif kind == "delete-inside-batch":
            self._delete_inside_batch(rng.choice(sim.specs).name)
        elif kind == "unclean-election":
            self._unclean_election(rng.choice(sim.specs).name)
        elif kind == "retention-crash":
            if sim.brokers[b].alive:
                sim.crash_in_retention(b, rng.randint(0, 12), torn=rng.random() < 0.5)
                self._later(300, 5000, lambda: self._restart_if_down(b))
        elif kind == "lost-answer":
            shape = rng.random()
            if shape < 1 / 3:
                self._fence_a_fetching_follower(rng.choice(sim.specs).name)
            else:
                self._lose_answers(b, rng.randint(1, 3), carrying=shape < 2 / 3)
        elif kind == "eligible-leader":
            self._eligible_leader(rng.choice(sim.specs).name)
        elif kind == "isr-disk-loss":
            self._isr_disk_loss(rng.choice(sim.specs).name)
        elif kind == "staggered-kill":
            self._staggered_kill(rng.choice(sim.specs).name)
        elif kind == "all-crash":
            down = [x for x, br in sim.brokers.items() if br.alive]
            for x in down:
                sim.kill(x, power_loss=True, torn=rng.random() < 0.5)
            t = 0
            for x in rng.sample(down, len(down)):
                t += rng.randint(300, 3000)
                self._at(t, functools.partial(self._restart_if_down, x))
        self._next()

    def _lose_answers(
        self,
        b: int,
        count: int,
        *,
        carrying: bool,
        refusals_only: bool = False,
        within_ms: tuple[int, int] = (1000, 5000),
    ) -> None:
        """Lose the controller's next `count` heartbeat answers to `b` (with `carrying`,
        only those that hand out assignments or refuse ISR proposals; with
        `refusals_only`, those that refuse ISR proposals): the heartbeats arrive and
        count, their answers never do."""
        sim = self.sim

        def match(message: object) -> bool:
            if not isinstance(message, HeartbeatResponse):
                return False
            if refusals_only:
                return bool(message.rejected_isr_proposals)
            return not carrying or bool(
                message.assignments or message.rejected_isr_proposals or message.stop_replicas
            )

        holds = [sim.hold(CONTROLLER, b, match) for _ in range(count)]

        def lose() -> None:
            for h in holds:
                sim.lose(h)

        # Not guarded by the fault phase: no hold may outlive it and take answers later.
        sim.world.after(self.rng.randint(*within_ms), lose)

    def _fence_a_fetching_follower(self, name: str) -> None:
        """A follower of `name` is cut off from the controller long enough to be fenced
        while it goes on fetching, so its leader proposes it back under its old
        brokerEpoch and the controller refuses; the answers carrying the refusals to the
        leader are lost. At times the follower is restarted once it is heard again."""
        sim, rng = self.sim, self.rng
        leader = sim.leader(name)
        followers = [m for m in sim.isr(name) if m != leader and sim.brokers[m].alive]
        if leader is None or not followers:
            return
        f = rng.choice(followers)
        sim.cut(f, CONTROLLER)
        timeout = sim.config.session_timeout_ms
        self._lose_answers(
            leader,
            rng.randint(1, 2),
            carrying=True,
            refusals_only=True,
            within_ms=(timeout + 3000, timeout + 8000),
        )
        restart = rng.random() < 0.5

        def heal() -> None:
            self._uncut([(f, CONTROLLER)])
            if restart and sim.brokers[f].alive:
                sim.restart(f)

        self._later(sim.config.session_timeout_ms + 500, sim.config.session_timeout_ms + 4000, heal)

    def _roll(self, order: list[int]) -> None:
        """Restart `order` one by one as a StatefulSet roll does: SIGTERM (a controlled
        shutdown with a timeout), a restart, and the next once the restarted broker is back
        in every ISR it left (or after a while: the fault phase goes on regardless)."""
        sim, rng = self.sim, self.rng
        if not order:
            return
        b, rest = order[0], order[1:]
        if not sim.brokers[b].alive:
            self._later(100, 500, lambda: self._roll(rest))
            return

        def restarted() -> None:
            # Started again even after the fault phase: a run ends with every broker up.
            sim.world.after(rng.randint(0, 300), lambda: self._restart_if_down(b))
            self._later(1000, 4000, lambda: self._roll(rest))

        timeout = rng.choice([500, 3000, 10_000])
        sim.controlled_shutdown(b, timeout, restarted)
        if rng.random() < 0.15:
            # The handover is cut short: the broker dies while leadership moves.
            victim = b if rng.random() < 0.5 else rng.choice(sorted(sim.brokers))
            self._later(0, 600, lambda: self._kill_mid_handover(victim))

    def _kill_mid_handover(self, b: int) -> None:
        if self.sim.brokers[b].alive:
            self.sim.kill(b)
            self._later(300, 3000, lambda: self._restart_if_down(b))

    def _double_kill(self, b: int) -> None:
        sim = self.sim
        if not sim.brokers[b].alive:
            return
        names = [s.name for s in sim.specs if sim.leader(s.name) == b]
        sim.kill(b)
        self._later(2000, 8000, lambda: self._restart_if_down(b))
        name = names[0] if names else sim.specs[0].name

        def second() -> None:
            new = sim.leader(name)
            if new is not None and new != b and sim.brokers[new].alive:
                sim.kill(new)
                self._later(500, 5000, lambda: self._restart_if_down(new))

        # Strike the new leader as soon as it leads, while its followers may still lag.
        self._at(sim.config.session_timeout_ms + self.rng.randint(0, 1500), second)

    def _delete_inside_batch(self, name: str) -> None:
        """DeleteRecords at `name`'s leader at an offset strictly inside one of its batches
        below the HW; then a replica that must fetch from that log start."""
        sim, rng = self.sim, self.rng
        leader = sim.leader(name)
        if leader is None or not sim.brokers[leader].alive:
            return
        high_watermark = sim.high_watermark(name, leader) or 0
        inside = [
            (b, e) for b, e in sim.brokers[leader].batch_bounds(name, high_watermark) if e > b
        ]
        if not inside:
            return
        base, last = rng.choice(inside)
        sim.brokers[leader].delete_records(name, rng.randint(base + 1, last))
        if rng.random() < 0.5:
            self._later(0, 500, self._wipe)
        else:
            self._later(0, 500, lambda: self._drop_and_add_back(name))

    def _drop_and_add_back(self, name: str) -> None:
        """Reassign `name` to one replica fewer (not its leader), and soon back: the replica
        dropped comes back as a new one (or with its files, if it was not stopped yet)."""
        sim, rng = self.sim, self.rng
        if name not in sim.store.items:
            return
        old = self._spec(name)
        status = sim.status(name)
        replicas = list(old.replicas or (status.replicas if status is not None else ()))
        leader = status.leader if status is not None else None
        if len(replicas) < 3 or old.min_insync_replicas > 2:
            return
        drop = rng.choice([r for r in replicas if r != leader])
        kept = tuple(r for r in replicas if r != drop) if old.replicas else ()
        sim.reassign(old.model_copy(update={"replicas": kept, "replication_factor": 2}))
        back = old.model_copy(update={"replicas": (*kept, drop) if old.replicas else ()})
        self._later(0, 3000, lambda: sim.reassign(back) if name in sim.store.items else None)

    def _unclean_election(self, name: str) -> None:
        """uncleanLeaderElection goes on for `name`; a follower dies and leaves the ISR;
        once more was written without it, every other replica dies and it comes back
        alone: the controller elects it uncleanly (the others return after the session
        timeout), and the switch goes off again. Only meanwhile, and no disk is lost
        while it is on: an unclean election of a replica that lost its disk is a
        controller case of its own (`tests/operator/test_storage.py`), kept out of the
        readers' schedules so that a violation here points at the readers."""
        sim, rng = self.sim, self.rng
        leader = sim.leader(name)
        followers = [m for m in sim.isr(name) if m != leader and sim.brokers[m].alive]
        spec = self._spec(name) if name in sim.store.items else None
        if leader is None or not followers or spec is None or spec.unclean_leader_election:
            return
        if any(self._wiped_while_down(b) or self._wiped_lately(b) for b in sim.brokers):
            return
        sim.allow_unclean_election(name)
        self.unclean_switched_on.add(name)
        stale = rng.choice(followers)
        sim.kill(stale)
        self._await_out_of_isr(name, stale, 200)

    def _await_out_of_isr(self, name: str, stale: int, checks_left: int) -> None:
        if self.sim.brokers[stale].alive:
            self._end_unclean(name, stale)  # another fault restarted it: give up
        elif stale not in self.sim.isr(name):
            self._later(300, 2000, lambda: self._elect_alone(name, stale))
        elif checks_left > 0:
            self._at(50, lambda: self._await_out_of_isr(name, stale, checks_left - 1))
        else:
            self._end_unclean(name, stale)

    def _elect_alone(self, name: str, stale: int) -> None:
        sim = self.sim
        status = sim.status(name)
        others = [b for b in (status.replicas if status is not None else ()) if b != stale]
        for b in others:
            if sim.brokers[b].alive:
                sim.kill(b)
                timeout = sim.config.session_timeout_ms
                self._later(
                    timeout + 1000, timeout + 6000, functools.partial(self._restart_if_down, b)
                )
        self._restart_if_down(stale)
        self._await_election(name, stale, 200)

    def _await_election(self, name: str, stale: int, checks_left: int) -> None:
        sim = self.sim
        elected = sim.leader(name) == stale and sim.leading(name)
        if elected or checks_left == 0 or sim.now >= self.until:
            self._end_unclean(name, stale)
        else:
            # Not guarded by the fault phase: the switch goes off whatever happens.
            sim.world.after(50, lambda: self._await_election(name, stale, checks_left - 1))

    def _wiped_lately(self, b: int) -> bool:
        """`b` lost its disk within the last few heartbeats: the controller may still hold
        what it reported before."""
        wiped = self.sim.history.wiped.get(b, [])
        return bool(wiped) and self.sim.now - wiped[-1] < 2 * self.sim.config.session_timeout_ms

    def _end_unclean(self, name: str, stale: int) -> None:
        self.unclean_switched_on.discard(name)
        self._restart_if_down(stale)
        if name in self.sim.store.items and self._spec(name).unclean_leader_election:
            self.sim.allow_unclean_election(name, False)

    def _reassign(self, name: str) -> None:
        """Grow or shrink a partition between 2 and 3 replicas, explicit ones in a new order
        (so leadership moves off a removed leader); at times the old spec comes back while
        the move is under way, a revert."""
        sim, rng = self.sim, self.rng
        if name not in sim.store.items:
            return
        old = self._spec(name)
        rf = max(old.min_insync_replicas, 2 if old.replication_factor == 3 else 3)
        replicas = tuple(rng.sample(sorted(sim.brokers), rf)) if old.replicas else ()
        sim.reassign(old.model_copy(update={"replicas": replicas, "replication_factor": rf}))
        if rng.random() < 0.3:
            self._later(0, 2000, lambda: sim.reassign(old))

    def _recreate(self, name: str) -> None:
        """Delete and create again. A third of the time just so; a third of the time a
        broker dies first, so that the new resource meets a replica that is down; a third
        of the time after a failover whose old leader is back but cut off from the other
        brokers, so that it knows the new epoch while it still holds its old tail.

        Not while every member of its recorded ISR has lost the disk it was in sync on
        (`_isr_disks_lost`): until the controller has recovered it (uncleanly, saying
        so), its status is the only record left of what that ISR acknowledged, and
        deleting it with the operator's memory gone too (a controller restart) leaves
        no record anywhere that a newer ISR existed (simulator seed 9600284: brokers 1 and
        3, t-1's ISR, wiped for t-0's isr-disk-loss, the controller restarted, t-1
        deleted; broker 2's older assignment named it in sync). No design can see that
        loss; the documentation says so (docs/concepts/state.md)."""
        sim, rng = self.sim, self.rng
        if name not in sim.store.items:
            return  # still deleted: its creation is on its way
        if self._isr_disks_lost(name):
            return
        shape = rng.random()
        leader = sim.leader(name)
        if shape < 1 / 3 and leader is not None and sim.brokers[leader].alive:
            sim.kill(leader)
            self._await_failover(name, leader, 100)
            return
        if shape < 2 / 3:
            down = rng.choice(sorted(sim.brokers))
            if sim.brokers[down].alive:
                sim.kill(down)
            self._later(1000, 6000, lambda: self._restart_if_down(down))
        sim.delete_partition(name)
        # Created again even if the fault phase ends first: a run ends with its Partitions.
        sim.world.after(rng.randint(0, 1500), lambda: sim.create_partition(self._spec(name)))

    def _await_failover(self, name: str, old: int, checks_left: int) -> None:
        sim = self.sim
        new = sim.leader(name)
        if new is None or new == old:
            if checks_left > 0:
                self._at(100, lambda: self._await_failover(name, old, checks_left - 1))
            else:
                self._restart_if_down(old)
            return
        others = [b for b in sim.brokers if b != old]
        cut = [(old, b) for b in others] + [(b, old) for b in others]
        for src, dst in cut:
            sim.cut(src, dst)
        self._restart_if_down(old)
        self._later(1000, 6000, lambda: self._uncut(cut))
        self._await_known_epoch(name, old, 40)

    def _await_known_epoch(self, name: str, old: int, checks_left: int) -> None:
        """Re-create once the old leader follows the recorded epoch (or soon anyway)."""
        sim = self.sim
        status = sim.status(name)
        core = sim.brokers[old].core
        host = core.partitions.get(name) if core is not None else None
        knows = (
            status is not None
            and host is not None
            and host.replica.leader_epoch >= status.leader_epoch
        )
        if name not in sim.store.items:
            return  # another re-create of it is under way
        if self._isr_disks_lost(name):
            return  # as in `_recreate`
        if knows or checks_left == 0:
            sim.delete_partition(name)
            sim.world.after(
                self.rng.randint(0, 500), lambda: sim.create_partition(self._spec(name))
            )
        else:
            self._at(50, lambda: self._await_known_epoch(name, old, checks_left - 1))

    def _spec(self, name: str) -> PartitionSpec:
        return next(s for s in self.sim.specs if s.name == name)

    def _outside_every_isr(self, b: int) -> bool:
        """Per the current statuses, `b` is in no ISR (and leads nothing), and every ISR
        still has a member on the disk it was in sync on: wiping `b` then loses one copy
        among others, the single-disk loss the wipe fault models. When every member of an
        ISR lost its disk since it was recorded (a member can be wiped moments before the
        leader's proposal to add it is accepted), the other replicas hold the only copies
        and wiping one of them is a multi-disk loss nothing survives."""
        statuses = [self.sim.status(s.name) for s in self.sim.specs]
        return all(
            st is not None
            and b not in st.isr
            and st.leader != b
            and any(self._disk_intact(m, st.isr_storage_ids.get(m)) for m in st.isr)
            for st in statuses
        )

    def _isr_disks_lost(self, name: str) -> bool:
        """Every member of `name`'s recorded ISR has lost the disk it was in sync on."""
        st = self.sim.status(name)
        return (
            st is not None
            and bool(st.isr)
            and not any(self._disk_intact(m, st.isr_storage_ids.get(m)) for m in st.isr)
        )

    def _disk_intact(self, member: int, recorded: str | None) -> bool:
        """`member` still has the disk the ISR recorded it on."""
        now = self.sim.brokers[member].storage_id
        return now is not None and (recorded is None or now == recorded)

    def _wipe(self) -> None:
        sim, rng = self.sim, self.rng
        if self.unclean_switched_on:
            return
        outside = [
            b
            for b in sorted(sim.brokers)
            if self._outside_every_isr(b) and not self._wiped_while_down(b)
        ]
        if outside:
            self._wipe_now(rng.choice(outside))
            return
        leaders = {sim.leader(s.name) for s in sim.specs}
        followers = [b for b in sorted(sim.brokers) if b not in leaders and sim.brokers[b].alive]
        if not followers:
            return
        f = rng.choice(followers)
        sim.kill(f)
        self._wait_outside(f, 200)

    def _wiped_while_down(self, b: int) -> bool:
        """`b` is down with its disk already lost: wiping it again would add nothing."""
        stops = self.sim.history.broker_stops.get(b, [])
        wiped = self.sim.history.wiped.get(b, [])
        return (
            not self.sim.brokers[b].alive and bool(wiped) and bool(stops) and wiped[-1] >= stops[-1]
        )

    def _wait_outside(self, b: int, checks_left: int) -> None:
        """Wipe `b` once it is out of every ISR; restart it as it is if that never happens
        (or an unclean election is under way)."""
        if self.unclean_switched_on:
            self._restart_if_down(b)
        elif self._outside_every_isr(b):
            self._wipe_now(b)
        elif checks_left > 0:
            self._at(50, lambda: self._wait_outside(b, checks_left - 1))
        else:
            self._restart_if_down(b)

    def _wipe_now(self, b: int) -> None:
        self.sim.wipe(b)
        self._later(300, 5000, lambda: self._restart_if_down(b))

    def _watch_isr(self, name: str, member: int, checks_left: int, left: bool = False) -> None:
        """Wait for `member` to leave the ISR and come back, then strike."""
        sim = self.sim
        leader = sim.leader(name)
        in_isr = member in sim.isr(name)
        if left and in_isr and leader is not None and sim.brokers[leader].alive:
            others = [m for m in sim.isr(name) if m != member]
            # The new member stops hearing from the leader and the others die before
            # the leader hears of the change: whatever the leader acknowledged in
            # between must already count the new member (KIP-497), since it is now
            # the only one left to elect. late-maximal-isr gets this window wrong.
            stall = self.rng.random() < 0.5
            if stall:
                sim.cut(leader, member)
            delay = self.rng.randint(0, 400)
            self._at(delay, lambda: self._kill_restart(*others))
            if stall:
                self._at(delay + 1, lambda: self._uncut([(leader, member)]))
        elif checks_left > 0:
            gone = left or not in_isr
            self._at(10, lambda: self._watch_isr(name, member, checks_left - 1, gone))

    def _preferred_away(self, name: str) -> None:
        """Take leadership away from `name`'s preferred replica (SIGKILL, restart soon), then
        watch for the controller to move it back and at times strike during the handover."""
        sim = self.sim
        preferred = preferred_replica(self._spec(name), sim.status(name))
        if preferred is None or not sim.brokers[preferred].alive:
            return
        if sim.leader(name) == preferred:
            sim.kill(preferred)
            self._later(300, 2500, lambda: self._restart_if_down(preferred))
        status = sim.status(name)
        epoch = status.leader_epoch if status is not None else 0
        self._watch_handover(name, preferred, epoch, 600)

    def _watch_handover(self, name: str, preferred: int, epoch: int, checks_left: int) -> None:
        """Once `preferred` leads `name` again above `epoch`, strike within moments: kill or
        cut off the new leader or the old one, or let the handover be."""
        sim, rng = self.sim, self.rng
        status = sim.status(name)
        moved = status is not None and status.leader == preferred and status.leader_epoch > epoch
        if not moved:
            if checks_left > 0:
                self._at(20, lambda: self._watch_handover(name, preferred, epoch, checks_left - 1))
            return
        assert status is not None
        old = next((e.leader for e in reversed(status.epoch_history[:-1])), None)
        victim = rng.choice([preferred, old] if old is not None else [preferred])
        shape = rng.random()
        if shape < 0.3:
            self._later(0, 300, lambda: self._kill_mid_handover(victim))
        elif shape < 0.5:
            others = [x for x in sim.brokers if x != victim]
            cut = [(victim, o) for o in others] + [(o, victim) for o in others]
            cut += [(victim, CONTROLLER), (CONTROLLER, victim)]

            def isolate() -> None:
                for src, dst in cut:
                    sim.cut(src, dst)
                self._later(500, 4000, lambda: self._uncut(cut))

            self._later(0, 300, isolate)

    def _delete_records(self, name: str) -> None:
        """DeleteRecords at `name`'s leader: up to its HW, or to a random offset below it."""
        sim, rng = self.sim, self.rng
        leader = sim.leader(name)
        if leader is None or not sim.brokers[leader].alive:
            return
        high_watermark = sim.high_watermark(name, leader)
        start = sim.brokers[leader].replica_log_start(name)
        if high_watermark is None or start is None:
            return
        before = -1 if rng.random() < 0.3 else rng.randint(start, max(start, high_watermark))
        sim.brokers[leader].delete_records(name, before)

    def _led_isr(self, name: str) -> tuple[int, list[int]] | None:
        """`name`'s live leader and its live followers in the ISR (None: no live leader)."""
        sim = self.sim
        status = sim.status(name) if name in sim.store.items else None
        if status is None or status.leader is None or not sim.brokers[status.leader].alive:
            return None
        followers = [m for m in status.isr if m != status.leader and sim.brokers[m].alive]
        return status.leader, followers

    def _eligible_leader(self, name: str) -> None:
        """The other followers of `name` die; one, `keep`, is cut off from the controller
        until the ISR drops it (it goes on fetching, so it holds everything committed);
        then the leader dies and the cut heals (`_elr_strike`)."""
        sim, rng = self.sim, self.rng
        led = self._led_isr(name)
        if led is None or not led[1]:
            return
        leader, followers = led
        keep = rng.choice(followers)
        timeout = sim.config.session_timeout_ms
        for f in followers:
            if f != keep:
                sim.kill(f)
                self._later(
                    timeout + 2000, timeout + 8000, functools.partial(self._restart_if_down, f)
                )
        cut = [(keep, CONTROLLER), (CONTROLLER, keep)]
        for src, dst in cut:
            sim.cut(src, dst)
        self._await_dropped(name, leader, keep, cut, 2 * timeout // 50)

    def _await_dropped(
        self, name: str, leader: int, keep: int, cut: list[tuple[int, int]], checks_left: int
    ) -> None:
        sim = self.sim
        if keep not in sim.isr(name) and sim.leader(name) == leader:
            self._later(0, 1000, lambda: self._elr_strike(leader, cut))
        elif checks_left > 0 and sim.leader(name) == leader:
            self._at(50, lambda: self._await_dropped(name, leader, keep, cut, checks_left - 1))
        else:
            self._uncut(cut)

    def _elr_strike(self, leader: int, cut: list[tuple[int, int]]) -> None:
        """The last ISR member dies (back after the session timeout and more: the election
        comes first), and the follower it left behind returns to the controller."""
        sim = self.sim
        timeout = sim.config.session_timeout_ms
        if sim.brokers[leader].alive:
            sim.kill(leader)
            self._later(
                timeout + 1000, timeout + 6000, functools.partial(self._restart_if_down, leader)
            )
        self._later(0, 500, lambda: self._uncut(cut))

    def _isr_disk_loss(self, name: str) -> None:
        """Every follower of `name` dies; once the ISR is its leader alone, the disks of the
        leader and of every eligible leader replica are lost, and every broker comes back."""
        sim = self.sim
        if self.unclean_switched_on:
            return  # an unclean election under way takes a wiped replica's old log end
        led = self._led_isr(name)
        if led is None:
            return
        leader, followers = led
        for f in followers:
            sim.kill(f)
        self._await_alone(name, leader, followers, 2 * sim.config.session_timeout_ms // 50)

    def _await_alone(self, name: str, leader: int, down: list[int], checks_left: int) -> None:
        sim = self.sim
        status = sim.status(name)
        if self.unclean_switched_on or status is None or status.leader != leader:
            for f in down:
                self._later(300, 3000, functools.partial(self._restart_if_down, f))
        elif status.isr == (leader,):
            self._later(200, 2000, lambda: self._wipe_isr(name, leader, down))
        elif checks_left > 0:
            self._at(50, lambda: self._await_alone(name, leader, down, checks_left - 1))
        else:
            for f in down:
                self._restart_if_down(f)

    def _wipe_isr(self, name: str, leader: int, down: list[int]) -> None:
        sim = self.sim
        status = sim.status(name)
        if self.unclean_switched_on or status is None:
            lost: list[int] = []
        else:
            lost = [*status.isr, *status.eligible_leader_replicas]
        for b in lost:
            sim.wipe(b)
        for b in sorted({*lost, *down}):
            self._later(300, 3000, functools.partial(self._restart_if_down, b))

    def _staggered_kill(self, name: str) -> None:
        """A follower of `name` dies (its preferred replica, when that one follows), then
        its leader a few hundred ms later; the leader restarts soon, the follower later."""
        sim, rng = self.sim, self.rng
        led = self._led_isr(name)
        if led is None or not led[1]:
            return
        leader, followers = led
        preferred = preferred_replica(self._spec(name), sim.status(name))
        first = preferred if preferred in followers else rng.choice(followers)
        timeout = sim.config.session_timeout_ms
        sim.kill(first)
        self._later(timeout, timeout + 4000, functools.partial(self._restart_if_down, first))

        def second() -> None:
            if sim.brokers[leader].alive:
                sim.kill(leader)
                self._later(200, 2000, functools.partial(self._restart_if_down, leader))

        self._later(100, 700, second)

    def _kill_restart(self, *brokers: int) -> None:
        for b in brokers:
            if self.sim.brokers[b].alive:
                self.sim.kill(b)
                self._later(1000, 5000, functools.partial(self._restart_if_down, b))

    def _restart_controller(self) -> None:
        if not self.sim.controller.alive:
            self.sim.restart_controller()

    def _uncut(self, links: list[tuple[int, int]]) -> None:
        self.sim.heal_links(links)


def play(seed: int, settings: RunSettings) -> Sim:
    """One random schedule played out: faults, heal, settle; not yet judged."""
    sim = build(seed, settings)
    sim.start()
    sim.start_clients(producers=2, consumers=1, offsets=1)
    nemesis = _Nemesis(sim, sorted(settings.faults))
    nemesis.start(sim.now + settings.duration_ms)
    sim.advance(settings.duration_ms)
    sim.heal_all()
    sim.advance(settings.settle_ms // 2)
    sim.stop_producers()
    sim.advance(settings.settle_ms - settings.settle_ms // 2)
    return sim


def run_seed(seed: int, settings: RunSettings) -> ScheduleResult:
    started = time.perf_counter()
    sim = play(seed, settings)
    violations = sim.check(LIVENESS_BOUND_MS)
    return ScheduleResult(
        seed=seed,
        violations=violations,
        report=sim.report(violations) if violations else None,
        acks=len(sim.history.acks),
        reads=len(sim.history.reads),
        faults=len(sim.history.faults),
        sim_ms=sim.world.elapsed_ms,
        events=sim.world.events_run,
        wall_s=time.perf_counter() - started,
        stats={
            "preferred_elections": sim.controller.preferred_elections,
            "eligible_elections": sim.controller.eligible_elections,
            "recoveries": sim.controller.recoveries,
            "silent_passed_over": sim.controller.silent_passed_over,
            **_many_partition_stats(sim),
            **_kafka_stats(sim),
        },
    )


def _many_partition_stats(sim: Sim) -> dict[str, int]:
    """Requests of more than one partition the clients sent, and produce answers that
    acknowledged some of their partitions and refused others."""
    many = mixed = 0
    for c in sim.clients:
        if isinstance(c, SimBatchingProducer | SimFetchingConsumer):
            many += sum(n for size, n in c.request_sizes.items() if size > 1)
        if isinstance(c, SimBatchingProducer):
            mixed += c.mixed_answers
    return {"many_partition_requests": many, "mixed_answers": mixed}


def _kafka_stats(sim: Sim) -> dict[str, int]:
    """Kafka requests the clients had answered, by API (`KAFKA_STATS`)."""
    out = dict.fromkeys(KAFKA_STATS.values(), 0)
    for c in sim.clients:
        for api, n in c.kafka_requests.items():
            out[KAFKA_STATS[api]] += n
    return out


def _run_quiet(args: tuple[int, RunSettings]) -> ScheduleResult:
    from epochlog.logs import configure

    configure("critical")
    try:
        return run_seed(*args)
    except Exception as exc:
        # The code under test raised: that is a failure of this seed, not of the run.
        seed = args[0]
        report = (
            f"CRASH: {type(exc).__name__}: {exc}\nseed {seed}\n"
            f"replay: epochlog sim --start {seed} --seeds 1 --verbose\n"
            + "".join(traceback.format_exception(exc))
        )
        return ScheduleResult(
            seed=seed,
            violations=[Violation("crash", 0, "-", f"{type(exc).__name__}: {exc}")],
            report=report,
            acks=0,
            reads=0,
            faults=0,
            sim_ms=0,
            events=0,
            wall_s=0.0,
        )


def run_seeds(
    seeds: Sequence[int], settings: RunSettings, jobs: int = 1
) -> Iterator[ScheduleResult]:
    """Run every seed; results arrive in seed order."""
    work = [(s, settings) for s in seeds]
    if jobs <= 1:
        for w in work:
            yield _run_quiet(w)
        return
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        yield from pool.map(_run_quiet, work, chunksize=4)


def main(
    *,
    seeds: int,
    start: int,
    faults: Sequence[str] | None,
    legacy: Sequence[str],
    jobs: int | None,
    duration_ms: int,
    verbose: bool,
    keep_going: bool,
) -> int:
    kinds = frozenset(faults) if faults else frozenset(FAULTS)
    unknown = sorted(kinds - set(FAULTS))
    if unknown:
        print(f"error: unknown fault kind(s) {unknown}; known: {sorted(FAULTS)}", file=sys.stderr)
        return 2
    try:
        legacy_set = check_names(frozenset(legacy))
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    settings = RunSettings(kinds, legacy_set, duration_ms)
    jobs = jobs or min(len(os.sched_getaffinity(0)), max(1, seeds // 4))
    print(
        f"simulating seeds {start}..{start + seeds - 1} on {jobs} process(es); faults "
        f"{','.join(sorted(kinds))}"
        + (f"; legacy {','.join(sorted(legacy_set))}" if legacy_set else ""),
        file=sys.stderr,
    )
    began = time.perf_counter()
    done = failed = acks = events = sim_ms = preferred = 0
    counts = {
        "eligible_elections": 0,
        "recoveries": 0,
        "silent_passed_over": 0,
        "many_partition_requests": 0,
        "mixed_answers": 0,
        "kafka_runs": 0,
        **dict.fromkeys(KAFKA_STATS.values(), 0),
    }
    first_failure: ScheduleResult | None = None
    step = max(1, seeds // 20)
    for result in run_seeds(range(start, start + seeds), settings, jobs):
        done += 1
        acks += result.acks
        events += result.events
        sim_ms += result.sim_ms
        preferred += result.stats.get("preferred_elections", 0)
        for kind in counts:
            counts[kind] += result.stats.get(kind, 0)
        counts["kafka_runs"] += any(result.stats.get(k, 0) for k in KAFKA_STATS.values())
        if result.violations:
            failed += 1
            checks = sorted({v.check for v in result.violations})
            print(f"seed {result.seed}: FAILED {', '.join(checks)}", file=sys.stderr)
            if first_failure is None:
                first_failure = result
                if verbose and result.report:
                    print(result.report)
            if not keep_going:
                break
        elif verbose:
            print(
                f"seed {result.seed}: ok ({result.acks} acks, {result.faults} faults, "
                f"{result.wall_s:.2f} s)",
                file=sys.stderr,
            )
        if done % step == 0 or done == seeds:
            rate = done / max(1e-9, time.perf_counter() - began)
            print(f"  {done}/{seeds} seeds, {failed} failed, {rate:.1f} seeds/s", file=sys.stderr)
    wall = time.perf_counter() - began
    print(
        f"{done} schedule(s), {failed} with violations; {acks} acknowledged records checked; "
        f"{preferred} preferred leader elections; "
        f"{counts['eligible_elections']} from eligible leader replicas, "
        f"{counts['recoveries']} unclean recoveries, "
        f"{counts['silent_passed_over']} passing over a silent ISR member; "
        f"{counts['many_partition_requests']} requests of many partitions, "
        f"{counts['mixed_answers']} answering some partitions acknowledged and some "
        "refused; "
        f"{counts['kafka_runs']} schedule(s) with Kafka clients, whose "
        f"{counts['kafka_produces']} Kafka produces, {counts['kafka_fetches']} fetches, "
        f"{counts['kafka_list_offsets']} ListOffsets and "
        f"{counts['kafka_epoch_queries']} OffsetForLeaderEpoch were answered and judged; "
        f"{sim_ms / 1000:.0f} s simulated in {wall:.1f} s ({events} events)"
    )
    if first_failure is not None:
        if not verbose and first_failure.report:
            print(first_failure.report)
        print(f"FAILED: seed {first_failure.seed}")
        return 1
    return 0
