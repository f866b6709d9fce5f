"""The scenario API: a fault scenario as a short script against a simulated cluster.

    sim = Sim(seed=7, brokers=3, partitions=[spec("t", 0, replicas=(1, 2, 3))])
    sim.start()                          # controller + brokers, first leader elected
    first = sim.produce("t-0", ["m1"])   # acks=all; runs the world until answered
    sim.kill(1, power_loss=True)         # SIGKILL (and lose unsynced writes)
    sim.wait_for(lambda: sim.leader("t-0") not in (None, 1))
    sim.restart(1)                       # new brokerEpoch, recovers its disk
    sim.partition({1}, {2, 3})           # both directions; sim.cut(a, b) is one-way
    sim.heal_link(2, 1)                  # one link back; sim.heal() heals them all
    sim.wipe(3)                          # broker 3's disk is lost; restart(3) boots it empty
    sim.recreate("t-0")                  # delete the Partition, create it again (no status)
    sim.allow_unclean_election("t-0")    # uncleanLeaderElection on (False: off again)
    held = sim.hold(1, 2)                # the next message 1 -> 2 waits ...
    sim.release(held)                    # ... until now (sim.lose(held): never)
    pending = sim.produce_async("t-0", ["m2"])   # returns at once; the world is not run
    sim.delete_records("t-0", 1)         # DeleteRecords: the new log start, or the error
    sim.wait_for(lambda: pending.done)   # pending.result is a `Produced`
    sim.refusals("t-0")                  # rejected ISR proposals, reasons for no leader
    sim.advance(5_000)
    sim.assert_ok()                      # every check of `checker`, with a report

Everything runs the real code: `BrokerCore` (logs, replication state machines,
checkpoints) on crash-simulating disks, and the controller's `decide`. The
scenario drives time explicitly; nothing happens between calls. Brokers are
numbered from 1, the controller is node 0. `start_clients()` adds background
producers, consumers and ListOffsets callers whose observations the checker
judges along with the scenario's own produce and offset calls.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from epochlog.protocol.errors import EpochlogError
from epochlog.resources import PartitionSpec, PartitionStatus
from epochlog_broker.core import DeleteRecordsDone, ProduceDone, ReadResult
from epochlog_broker.replication.leader import Leader
from epochlog_broker.replication.messages import Acks
from epochlog_tools.checker.checks import Checker, ReplicaLog, Timing, Violation
from epochlog_tools.checker.history import Ack, Deleted, History, OffsetSeen, Refusal
from epochlog_tools.sim.clients import (
    ClientConfig,
    SimBatchingProducer,
    SimConsumer,
    SimFetchingConsumer,
    SimManyOffsetsClient,
    SimOffsetsClient,
    SimProducer,
)
from epochlog_tools.sim.legacy import check_names
from epochlog_tools.sim.nodes import (
    ProduceRequest,
    SimBroker,
    SimConfig,
    SimController,
    SimPartitionStore,
)
from epochlog_tools.sim.world import CONTROLLER, TIMEOUT, Hold, NetworkConfig, Process, World

SCENARIO_CLIENT = 99
AUDIT_INTERVAL_MS = 2000


def spec(
    topic: str,
    index: int,
    *,
    replicas: Sequence[int] = (),
    replication_factor: int | None = None,
    min_insync_replicas: int = 2,
    replica_lag_time_max_ms: int = 10_000,
) -> PartitionSpec:
    return PartitionSpec(
        topic=topic,
        partition=index,
        replicas=tuple(replicas),
        replication_factor=replication_factor or (len(replicas) or 3),
        min_insync_replicas=min_insync_replicas,
        replica_lag_time_max_ms=replica_lag_time_max_ms,
    )


@dataclass(frozen=True, slots=True)
class Produced:
    """The answer to a scenario produce: an acknowledgement, an error, or no answer."""

    base_offset: int | None
    leader_epoch: int | None
    error: EpochlogError | None
    timed_out: bool = False

    @property
    def acked(self) -> bool:
        return self.base_offset is not None


@dataclass(eq=False)
class PendingProduce:
    """A produce in flight (`Sim.produce_async`); `result` arrives as the world runs."""

    partition: str
    values: tuple[str, ...]
    acks: Acks
    result: Produced | None = None

    @property
    def done(self) -> bool:
        return self.result is not None


class Sim:
    def __init__(
        self,
        seed: int = 0,
        *,
        brokers: int = 3,
        partitions: Iterable[PartitionSpec] = (),
        legacy: Iterable[str] = (),
        config: SimConfig | None = None,
        network: NetworkConfig | None = None,
        clients: ClientConfig | None = None,
    ) -> None:
        self.legacy = check_names(frozenset(legacy))
        self.config = config or SimConfig()
        self.world = World(seed, network)
        self.history = History()
        self.store = SimPartitionStore()
        self.specs = list(partitions) or [spec("t", 0)]
        self.controller = SimController(
            self.world, self.store, self.config, self.history, self.legacy
        )
        self.brokers = {
            b: SimBroker(self.world, b, self.config, self.history, self.legacy)
            for b in range(1, brokers + 1)
        }
        self.client_config = clients or ClientConfig()
        self.clients: list[SimProducer | SimConsumer | SimOffsetsClient] = []
        self._lag_max_ms = {s.name: s.replica_lag_time_max_ms for s in self.specs}
        timing = Timing(
            heartbeat_interval_ms=self.config.heartbeat_interval_ms,
            reconcile_interval_ms=self.config.reconcile_interval_ms,
            fetch_wait_ms=self.config.replica_fetch_idle_ms,
            max_network_delay_ms=self.world.net.max_delay_ms,
            caught_up_window_ms=self.config.caught_up_window_ms,
            lossy=self.world.net.drop_rate > 0,
        )
        self.checker = Checker(self.history, timing, self._lag_max_ms)
        self._client = Process(self.world, SCENARIO_CLIENT, "scenario")
        self.healed_at: int | None = None

    # -- lifecycle -------------------------------------------------------------------------

    @property
    def now(self) -> int:
        return self.world.now

    def start(self, *, wait_for_leaders: bool = True) -> Sim:
        self.controller.boot()
        for s in self.specs:
            self.store.create(s)
        for b in self.brokers.values():
            b.boot()
        self._client.begin()
        self.world.after(AUDIT_INTERVAL_MS, self._audit)
        if wait_for_leaders:
            ok = self.wait_for(lambda: all(self.leading(s.name) for s in self.specs), 20_000)
            if not ok:
                raise AssertionError("no leader elected within 20 s of start")
        return self

    def start_clients(self, producers: int = 2, consumers: int = 1, offsets: int = 1) -> None:
        node = 100
        for kind in self._client_kinds(producers, consumers, offsets):
            c = kind(self.world, node, self.store, self.history, self.client_config)
            c.start()
            self.clients.append(c)
            node += 1

    def _client_kinds(
        self, producers: int, consumers: int, offsets: int
    ) -> list[type[SimProducer] | type[SimConsumer] | type[SimOffsetsClient]]:
        """Which clients run: of many partitions per request or of one, and with
        `ClientConfig.kafka` the first producer, the consumers and the ListOffsets
        callers Kafka's."""
        many = self.client_config.many
        producer: type[SimProducer] = SimBatchingProducer if many else SimProducer
        consumer: type[SimConsumer] = SimFetchingConsumer if many else SimConsumer
        offsets_client: type[SimOffsetsClient] = SimManyOffsetsClient if many else SimOffsetsClient
        first_producer = producer
        if self.client_config.kafka:
            # kafka-python builds and decodes their batches: imported only when they run.
            from epochlog_tools.sim import kafka_clients

            first_producer = kafka_clients.SimKafkaProducer
            consumer = kafka_clients.SimKafkaConsumer
            offsets_client = kafka_clients.SimKafkaOffsetsClient
        return [
            *([first_producer] if producers else []),
            *[producer] * max(0, producers - 1),
            *[consumer] * consumers,
            *[offsets_client] * offsets,
        ]

    def stop_producers(self) -> None:
        for c in self.clients:
            if isinstance(c, SimProducer):
                c.stopped = True

    def _audit(self) -> None:
        self.checker.audit(self.now, self.logs(), self.statuses(), self.log_starts())
        self.world.after(AUDIT_INTERVAL_MS, self._audit)

    # -- time ------------------------------------------------------------------------------

    def advance(self, ms: int) -> None:
        self.world.run_for(ms)

    def wait_for(self, condition: Callable[[], bool], timeout_ms: int = 30_000) -> bool:
        """Run until `condition()` holds (True) or `timeout_ms` passed (False)."""
        if condition():
            return True
        return self.world.run_until(self.now + timeout_ms, condition)

    # -- faults ----------------------------------------------------------------------------

    def _fault(self, text: str) -> None:
        self.history.fault(self.now, text)

    def kill(self, broker: int, *, power_loss: bool = False, torn: bool = False) -> None:
        how = "power loss (torn writes)" if torn else "power loss" if power_loss else "SIGKILL"
        self._fault(f"kill broker {broker} ({how})")
        self.brokers[broker].kill(power_loss=power_loss or torn, torn=torn)

    def crash_in_retention(self, broker: int, steps: int, *, torn: bool = False) -> None:
        """Power loss of `broker` in the middle of a retention pass it runs now, at the
        pass's file operation number `steps` (`SimBroker.crash_in_retention`)."""
        how = " (torn writes)" if torn else ""
        self._fault(f"power loss of broker {broker} at step {steps} of a retention pass{how}")
        self.brokers[broker].crash_in_retention(steps, torn=torn)

    def restart(self, broker: int) -> None:
        b = self.brokers[broker]
        if b.alive:
            b.kill()
        self._fault(f"restart broker {broker} (brokerEpoch {b.broker_epoch + 1})")
        b.boot()

    def wipe(self, broker: int) -> None:
        """The broker's disk is lost (the process dies with it); `restart` boots it empty."""
        self._fault(f"wipe the disk of broker {broker}")
        self.history.wiped.setdefault(broker, []).append(self.now)
        self.brokers[broker].wipe()

    def shutdown(self, broker: int) -> None:
        self._fault(f"clean shutdown of broker {broker}")
        self.brokers[broker].shutdown()

    def controlled_shutdown(self, broker: int, timeout_ms: int, then: Callable[[], None]) -> None:
        """SIGTERM: a controlled shutdown, then a clean stop, then `then`."""
        self._fault(f"controlled shutdown of broker {broker}")

        def stopped() -> None:
            self._fault(f"broker {broker} stopped after its controlled shutdown")
            then()

        self.brokers[broker].controlled_shutdown(timeout_ms, stopped)

    def kill_controller(self) -> None:
        self._fault("kill controller")
        self.controller.kill()

    def restart_controller(self) -> None:
        if self.controller.alive:
            self.controller.kill()
        self._fault("restart controller")
        self.controller.boot()

    def pause(self, node: int, ms: int) -> None:
        self._fault(f"pause {_node(node)} for {ms} ms")
        p = self.world.processes[node]
        p.pause(ms)
        self.history.pauses.setdefault(node, []).append((self.now, self.now + ms))

    def cut(self, src: int, dst: int) -> None:
        """Drop every message from `src` to `dst` (one way) until `heal_link` or `heal`."""
        self._fault(f"cut {_node(src)} -> {_node(dst)}")
        self.world.cut(src, dst)
        self.history.cuts.append((src, dst, self.now, None))

    def partition(self, side_a: Iterable[int], side_b: Iterable[int]) -> None:
        """Cut every link between the two sides, both ways."""
        a, b = sorted(side_a), sorted(side_b)
        for x in a:
            for y in b:
                self.cut(x, y)
                self.cut(y, x)

    def isolate(self, node: int) -> None:
        others = [n for n in self.world.processes if n != node]
        self.partition([node], others)

    def heal(self) -> None:
        self._fault("heal the network")
        self.world.heal()
        self.history.cuts = [
            (s, d, t0, t1 if t1 is not None else self.now) for s, d, t0, t1 in self.history.cuts
        ]

    def heal_link(self, src: int, dst: int) -> None:
        """Undo `cut(src, dst)` alone; every other cut stays."""
        self.heal_links([(src, dst)])

    def heal_links(self, links: Iterable[tuple[int, int]]) -> None:
        healed = sorted(set(links))
        self._fault("heal " + ", ".join(f"{_node(s)} -> {_node(d)}" for s, d in healed))
        for src, dst in healed:
            self.world.heal_link(src, dst)
        self.history.cuts = [
            (s, d, t0, self.now if t1 is None and (s, d) in healed else t1)
            for s, d, t0, t1 in self.history.cuts
        ]

    def hold(self, src: int, dst: int, match: Callable[[object], bool] | None = None) -> Hold:
        """Take the next message `src` -> `dst` off the network until `release`; with `match`,
        the next one whose content (a heartbeat, a `FetchRequest`, a `ProduceRequest`, a
        reply's result) it accepts. `hold.captured` tells whether one was taken yet."""
        self._fault(f"hold the next message {_node(src)} -> {_node(dst)}")
        return self.world.hold(src, dst, match)

    def release(self, hold: Hold) -> bool:
        """Deliver the held message now (it still needs the link up and its receiver alive
        when it arrives); True if one was held, else the hold is cancelled."""
        what = type(hold.message).__name__ if hold.captured else "nothing held; cancelled"
        self._fault(f"release the message {_node(hold.src)} -> {_node(hold.dst)} ({what})")
        return self.world.release(hold)

    def lose(self, hold: Hold) -> bool:
        """The held message is lost: never delivered (a hold that caught nothing yet is
        cancelled). True when a message was lost."""
        what = type(hold.message).__name__ if hold.captured else "nothing held; cancelled"
        self._fault(f"lose the message {_node(hold.src)} -> {_node(hold.dst)} ({what})")
        return self.world.discard(hold)

    def delete_partition(self, name: str) -> None:
        """Delete the Partition resource: its status is gone, the brokers keep their data."""
        self._fault(f"delete Partition {name}")
        self.store.delete(name)

    def create_partition(self, partition: PartitionSpec) -> None:
        """Create a Partition (again, if it was deleted: the same history of epochs goes on)."""
        name = partition.name
        known = [s.name for s in self.specs]
        if name in known:
            self.specs[known.index(name)] = partition
            self.history.recreated.setdefault(name, []).append(self.now)
        else:
            self.specs.append(partition)
        self._lag_max_ms[name] = partition.replica_lag_time_max_ms
        self._fault(f"create Partition {name}")
        self.store.create(partition)

    def reassign(self, partition: PartitionSpec) -> None:
        """Change a Partition's replicas or replicationFactor: a reassignment."""
        name = partition.name
        known = [s.name for s in self.specs]
        self.specs[known.index(name)] = partition
        where = list(partition.replicas) or f"{partition.replication_factor} assigned replicas"
        self._fault(f"reassign Partition {name} to {where}")
        self.store.update(partition)

    def allow_unclean_election(self, name: str, allowed: bool = True) -> None:
        """Set a Partition's uncleanLeaderElection (a spec update, as `kubectl edit`)."""
        known = [s.name for s in self.specs]
        partition = self.specs[known.index(name)].model_copy(
            update={"unclean_leader_election": allowed}
        )
        self.specs[known.index(name)] = partition
        self._fault(f"uncleanLeaderElection {'on' if allowed else 'off'} for Partition {name}")
        self.store.update(partition)

    def recreate(self, name: str) -> None:
        """Delete the Partition and create it again from the same spec."""
        known = {s.name: s for s in self.specs}
        self.delete_partition(name)
        self.create_partition(known[name])

    def heal_all(self) -> None:
        """Heal the network, resume paused processes, restart dead ones."""
        self.heal()
        for node, p in self.world.processes.items():
            if p.paused_until > self.now:
                p.resume()
                spans = self.history.pauses.get(node, [])
                if spans:
                    spans[-1] = (spans[-1][0], self.now)
        if not self.controller.alive:
            self.restart_controller()
        for b, broker in self.brokers.items():
            if not broker.alive:
                self.restart(b)
        self.healed_at = self.now

    # -- scenario clients ------------------------------------------------------------------

    def _call(
        self,
        target: int,
        handler: Callable[[Process, Callable[[object], None]], None],
        timeout_ms: int,
        duplicable: bool = True,
    ) -> object:
        box: list[object] = []
        self.world.call(
            self._client, target, handler, box.append, timeout_ms, duplicable=duplicable
        )
        self.world.run_until(self.now + timeout_ms + 1, lambda: bool(box))
        return box[0] if box else TIMEOUT

    def produce(
        self,
        partition: str,
        values: Sequence[str],
        *,
        acks: Acks = Acks.ALL,
        to: int | None = None,
        timeout_ms: int | None = None,
    ) -> Produced:
        """Send `values` to the leader (or broker `to`) and run until the answer."""
        pending = self.produce_async(partition, values, acks=acks, to=to, timeout_ms=timeout_ms)
        wait = timeout_ms or self.config.request_timeout_ms + 500
        self.world.run_until(self.now + wait + 1, lambda: pending.done)
        return pending.result or Produced(None, None, None, timed_out=True)

    def produce_async(
        self,
        partition: str,
        values: Sequence[str],
        *,
        acks: Acks = Acks.ALL,
        to: int | None = None,
        timeout_ms: int | None = None,
    ) -> PendingProduce:
        """Send `values` like `produce`, but return at once: the answer (or the timeout)
        lands in the handle while the world runs (`sim.wait_for(lambda: p.done)`)."""
        status = self.status(partition)
        target = to if to is not None else (status.leader if status else None)
        epoch = status.leader_epoch if status and to is None else None
        pending = PendingProduce(partition, tuple(values), acks)
        for v in values:
            self.history.sent[v] = partition
        if target is None:
            pending.result = Produced(None, None, None, timed_out=True)
            return pending
        vals = list(values)
        self.world.call(
            self._client,
            target,
            lambda dst, reply: _broker(dst).handle_produce(partition, vals, acks, epoch, reply),
            lambda result: self._answered(pending, result),
            timeout_ms or self.config.request_timeout_ms + 500,
            duplicable=False,
            message=ProduceRequest(partition, pending.values, acks),
        )
        return pending

    def _answered(self, pending: PendingProduce, result: object) -> None:
        if isinstance(result, ProduceDone):
            if result.error is not None:
                pending.result = Produced(None, result.leader_epoch, result.error)
                return
            if pending.acks is Acks.ALL:
                for i, v in enumerate(pending.values):
                    self.history.acks.append(
                        Ack(
                            "scenario",
                            pending.partition,
                            v,
                            result.base_offset + i,
                            result.leader_epoch,
                            self.now,
                        )
                    )
            pending.result = Produced(result.base_offset, result.leader_epoch, None)
        elif isinstance(result, EpochlogError):
            pending.result = Produced(None, None, result)
        else:
            pending.result = Produced(None, None, None, timed_out=True)

    def list_offsets(self, partition: str, *, to: int | None = None) -> int | EpochlogError | None:
        """ListOffsets latest from the leader (or broker `to`); None when nothing answered."""
        status = self.status(partition)
        target = to if to is not None else (status.leader if status else None)
        if target is None:
            return None
        result = self._call(
            target,
            lambda dst, reply: _broker(dst).handle_list_offsets(partition, None, reply),
            1000,
        )
        if isinstance(result, tuple):
            offset, epoch = result
            self.history.offsets.append(
                OffsetSeen("scenario", partition, "latest", offset, epoch, target, self.now)
            )
            return int(offset)
        return result if isinstance(result, EpochlogError) else None

    def delete_records(
        self,
        partition: str,
        before_offset: int,
        *,
        to: int | None = None,
        timeout_ms: int | None = None,
    ) -> int | EpochlogError | None:
        """DeleteRecords at the leader (or broker `to`), run until the answer: the new log
        start, once the in-sync replicas' log starts reached it; the typed error
        (REQUEST_TIMED_OUT after `timeout_ms` while they did not: the deletion at the
        leader stands); None when nothing answered. An answered deletion goes into the
        history, for deleted-records-resurfaced."""
        status = self.status(partition)
        target = to if to is not None else (status.leader if status else None)
        epoch = status.leader_epoch if status and to is None else None
        if target is None:
            return None
        wait = timeout_ms or self.config.request_timeout_ms
        result = self._call(
            target,
            lambda dst, reply: _broker(dst).handle_delete_records(
                partition, before_offset, epoch, reply, wait
            ),
            wait + 500,
        )
        if isinstance(result, DeleteRecordsDone):
            if result.error is not None:
                return result.error
            self.history.deletions.append(
                Deleted(
                    "scenario", partition, result.log_start_offset, result.leader_epoch, self.now
                )
            )
            return result.log_start_offset
        return result if isinstance(result, EpochlogError) else None

    def read(self, partition: str, offset: int = 0) -> ReadResult | EpochlogError | None:
        status = self.status(partition)
        if status is None or status.leader is None:
            return None
        leader = status.leader
        result = self._call(
            leader,
            lambda dst, reply: _broker(dst).handle_read(partition, offset, None, reply),
            1000,
        )
        if isinstance(result, ReadResult):
            self.history.offsets.append(
                OffsetSeen(
                    "scenario",
                    partition,
                    "hw",
                    result.high_watermark,
                    result.leader_epoch,
                    leader,
                    self.now,
                )
            )
        return result if isinstance(result, ReadResult | EpochlogError) else None

    # -- inspection ------------------------------------------------------------------------

    def status(self, partition: str) -> PartitionStatus | None:
        return self.store.status(partition)

    def leader(self, partition: str) -> int | None:
        s = self.status(partition)
        return None if s is None else s.leader

    def leading(self, partition: str) -> bool:
        """The recorded leader runs as leader of the recorded leaderEpoch."""
        s = self.status(partition)
        if s is None or s.leader is None or not self.brokers[s.leader].alive:
            return False
        core = self.brokers[s.leader].core
        host = core.partitions.get(partition) if core else None
        role = host.replica.role if host else None
        return isinstance(role, Leader) and role.leader_epoch == s.leader_epoch

    def isr(self, partition: str) -> tuple[int, ...]:
        s = self.status(partition)
        return () if s is None else s.isr

    def log(self, partition: str, broker: int) -> list[str]:
        """Values in a live broker's log (empty if it is down or holds nothing)."""
        state = self.brokers[broker].replica_state(partition)
        return [] if state is None else [v for _o, _e, v in state[0]]

    def high_watermark(self, partition: str, broker: int) -> int | None:
        state = self.brokers[broker].replica_state(partition)
        return None if state is None else state[1]

    def logs(self) -> dict[str, dict[int, ReplicaLog]]:
        out: dict[str, dict[int, ReplicaLog]] = {}
        for s in self.specs:
            for b, broker in self.brokers.items():
                if broker.alive:
                    state = broker.replica_state(s.name)
                    if state is not None:
                        out.setdefault(s.name, {})[b] = state
        return out

    def refusals(self, partition: str | None = None, kind: str | None = None) -> list[Refusal]:
        """What the controller declined so far: rejected ISR proposals ("isr-proposal") and
        each reason it gave for electing nobody ("offline"), oldest first."""
        return [
            r
            for r in self.history.refusals
            if partition in (None, r.partition) and kind in (None, r.kind)
        ]

    def statuses(self) -> dict[str, PartitionStatus | None]:
        return {s.name: self.status(s.name) for s in self.specs}

    def log_starts(self) -> dict[str, dict[int, int]]:
        """Every live replica's log start offset."""
        out: dict[str, dict[int, int]] = {}
        for s in self.specs:
            for b, broker in self.brokers.items():
                start = broker.replica_log_start(s.name) if broker.alive else None
                if start is not None:
                    out.setdefault(s.name, {})[b] = start
        return out

    def replicated(self) -> bool:
        """Every live replica holds its leader's whole log, with the HW at its end."""
        for s in self.specs:
            leader = self.leader(s.name)
            if leader is None or not self.brokers[leader].alive:
                return False
            ref = self.brokers[leader].replica_state(s.name)
            ref_start = self.brokers[leader].replica_log_start(s.name)
            if ref is None or ref_start is None:
                return False
            end = ref_start + len(ref[0])
            status = self.status(s.name)
            for b in status.replicas if status else ():
                broker = self.brokers[b]
                state = broker.replica_state(s.name) if broker.alive else None
                start = broker.replica_log_start(s.name) if broker.alive else None
                if state is None or start is None or state[1] != end:
                    return False
                # Replicas run retention on their own: compare what both still hold.
                common = max(start, ref_start)
                if start + len(state[0]) != end or (
                    state[0][common - start :] != ref[0][common - ref_start :]
                ):
                    return False
        return True

    # -- checking --------------------------------------------------------------------------

    def check(self, liveness_bound_ms: int = 15_000) -> list[Violation]:
        return self.checker.final(
            end=self.now,
            logs=self.logs(),
            statuses=self.statuses(),
            healed_at=self.healed_at,
            liveness_bound_ms=liveness_bound_ms,
            log_starts=self.log_starts(),
        )

    def assert_ok(self) -> None:
        violations = self.check()
        if violations:
            raise AssertionError(self.report(violations))

    def report(self, violations: Sequence[Violation]) -> str:
        from epochlog_tools.sim.report import render

        return render(self, violations)


def _node(node: int) -> str:
    if node == CONTROLLER:
        return "controller"
    if node >= 100 or node == SCENARIO_CLIENT:
        return f"client {node}"
    return f"broker {node}"


def _broker(p: Process) -> SimBroker:
    assert isinstance(p, SimBroker)
    return p
