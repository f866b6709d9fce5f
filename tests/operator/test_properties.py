"""Properties of the decision core under random heartbeat, failure and time sequences.

A small model of brokers (alive or dead, brokerEpoch, log end, what each knows
of the partition's epochs, and the leader's view of its followers) drives the
real `decide` through a `Controller` that behaves like the kopf layer. After
every decision the checks of DESIGN.md that concern the controller must hold.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import event, given, settings
from hypothesis import strategies as st

from epochlog.protocol.heartbeat import IsrProposal, PartitionReport, PartitionRole
from epochlog.resources import PartitionSpec, PartitionStatus
from epochlog_operator.decide import Decision
from epochlog_operator.events import EventReason
from epochlog_operator.liveness import BrokerState, LivenessView

from ..conftest import examples
from .harness import NAME, Controller, leader_report, make_spec

REPLICAS = (1, 2, 3)
BROKERS = (1, 2, 3, 4)


@dataclass
class Broker:
    alive: bool = True
    epoch: int = 1
    log_end: int = 0
    known_leader_epoch: int = 0
    known_partition_epoch: int = 0


@dataclass
class History:
    highest_epoch: int = 0
    leaders: dict[int, int] = field(default_factory=dict)
    """leaderEpoch -> the one broker that led it."""


@dataclass
class World:
    controller: Controller
    now: int = 0
    brokers: dict[int, Broker] = field(default_factory=lambda: {b: Broker() for b in BROKERS})
    caught_up: dict[int, int] = field(default_factory=dict)
    """The leader's view: when each follower last read up to its log end."""
    proposals: set[int] = field(default_factory=set)
    history: History = field(default_factory=History)

    def report(self, b: int) -> PartitionReport | None:
        if b not in REPLICAS:
            return None
        me = self.brokers[b]
        status = self.controller.status
        leading = (
            status is not None
            and status.leader == b
            and me.known_leader_epoch == status.leader_epoch
        )
        if not leading or status is None:
            if me.log_end == 0 and me.known_leader_epoch == 0:
                return None
            return PartitionReport(
                name=NAME,
                role=PartitionRole.FOLLOWER,
                leader_epoch=me.known_leader_epoch,
                partition_epoch=me.known_partition_epoch,
                log_end_offset=me.log_end,
                high_watermark=0,
            )
        proposals = [
            IsrProposal(
                replica=f,
                broker_epoch=self.brokers[f].epoch,
                log_end_offset=self.brokers[f].log_end,
            )
            for f in sorted(self.proposals)
            if f != b
        ]
        caught = {f: t for f, t in self.caught_up.items() if f != b and f in REPLICAS}
        return leader_report(
            status,
            log_end_offset=me.log_end,
            caught_up=caught,
            follower_ends={f: self.brokers[f].log_end for f in caught},
            proposals=proposals,
        ).model_copy(update={"partition_epoch": me.known_partition_epoch})

    def beat(self, b: int) -> None:
        me = self.brokers[b]
        if not me.alive:
            return
        report = self.report(b)
        self.controller.beat(b, self.now, epoch=me.epoch, partitions=[report] if report else [])
        status = self.controller.status
        if b in REPLICAS and status is not None and status.leader_epoch >= me.known_leader_epoch:
            # The response carries the persisted assignment; a broker keeps the
            # newest epochs it has seen (on disk, across restarts).
            if status.leader == b and status.leader_epoch > me.known_leader_epoch:
                # A new leader starts every follower's lag clock when it takes over.
                self.caught_up = dict.fromkeys(REPLICAS, self.now)
            me.known_leader_epoch = status.leader_epoch
            me.known_partition_epoch = status.partition_epoch


faults = st.one_of(
    st.tuples(st.just("kill"), st.sampled_from(BROKERS)),
    st.tuples(st.just("restart"), st.sampled_from(BROKERS)),
    st.tuples(st.just("write"), st.integers(1, 50)),
    st.tuples(st.just("propose"), st.sampled_from(REPLICAS)),
    st.tuples(st.just("restart_controller"), st.just(0)),
    st.tuples(st.just("recreate"), st.just(0)),
)

rounds = st.lists(
    st.tuples(
        st.sampled_from([0, 100, 500, 500, 500, 1_000, 2_000, 3_500]),  # time passing
        st.sets(st.sampled_from(BROKERS), max_size=2),  # whose heartbeat is lost
        st.sets(st.sampled_from(REPLICAS)),  # followers the leader sees caught up
        st.lists(faults, max_size=2),
        st.integers(0, 5),  # 0: no decision this round
    ),
    min_size=5,
    max_size=50,
)


def check(
    world: World,
    old: PartitionStatus | None,
    decision: Decision,
    view: LivenessView,
    unclean: bool,
    lag_max: int,
) -> None:
    history = world.history
    new = world.controller.status
    if new is None:
        # Never elected, and some replica may yet report epochs: nothing published.
        assert decision.status is None
        return
    before = old or PartitionStatus()
    assert new.leader_epoch >= before.leader_epoch
    assert new.partition_epoch >= before.partition_epoch

    reasons = {e.reason for e in decision.events}
    for reason in sorted(reasons):
        event(reason)
    elected = new.leader is not None and new.leader_epoch != before.leader_epoch
    if elected:
        assert new.leader is not None
        assert view.state(new.leader) is BrokerState.LIVE, "elected a broker that is not live"
        assert new.leader in REPLICAS
        was_unclean = EventReason.UNCLEAN_LEADER_ELECTION in reasons
        assert was_unclean <= unclean
        if before.isr and not was_unclean:
            # Or from the eligible leader replicas: out of the ISR since it fell below
            # minInsyncReplicas, with the high watermark frozen since (KIP-966).
            electable = (*before.isr, *before.eligible_leader_replicas)
            assert new.leader in electable, "elected a broker outside the ISR and the ELR"
        # Above every epoch a reachable replica knows: those are the epochs that
        # brokers have acted on (a fenced broker's may be out of sight for good).
        known = [
            world.brokers[b].known_leader_epoch
            for b in REPLICAS
            if world.brokers[b].alive and view.state(b) is not BrokerState.FENCED
        ]
        assert new.leader_epoch > max(known, default=0), "a leader epoch was reused"
        assert new.leader_epoch > history.highest_epoch
        assert history.leaders.setdefault(new.leader_epoch, new.leader) == new.leader
        history.highest_epoch = new.leader_epoch
    elif new.leader is not None:
        assert new.leader == before.leader

    same_leadership = (
        new.leader is not None
        and new.leader == before.leader
        and new.leader_epoch == before.leader_epoch
    )
    if not same_leadership:
        return
    leader = new.leader
    assert leader is not None
    got = world.controller.heartbeats.get(leader)
    if got is None or view.broker_epoch(leader) != got.heartbeat.broker_epoch:
        return
    report = got.heartbeat.partition(NAME)
    if (
        report is None
        or report.role is not PartitionRole.LEADER
        or report.leader_epoch != before.leader_epoch
    ):
        return
    for f in before.isr:
        if f == leader:
            continue
        progress = report.follower(f)
        if progress is None or progress.last_caught_up_time is None:
            continue
        reported = got.to_controller_time(progress.last_caught_up_time)
        same_process = view.state(f) is BrokerState.LIVE and view.broker_epoch(
            f
        ) == before.isr_broker_epochs.get(f)
        if same_process and view.now_ms - reported <= lag_max:
            event("follower caught up within the window")
            assert f in new.isr, f"follower {f} caught up {view.now_ms - reported} ms ago"
        newest = reported >= before.last_caught_up_time.get(f, 0) and reported >= view.started_ms
        # Lag is measured when the leader's report arrived: a silent leader's followers
        # do not fall behind by its silence.
        if newest and got.received_ms - reported > lag_max:
            event("follower lagging past the window")
            lag = got.received_ms - reported
            assert f not in new.isr, f"follower {f} lagging {lag} ms at the report stayed"


@settings(max_examples=examples(300))
@given(
    steps=rounds,
    unclean=st.booleans(),
    lag_max=st.sampled_from([1_000, 2_500, 10_000]),
)
def test_random_heartbeats_and_failures_keep_epochs_and_elections_safe(
    steps: list[tuple[int, set[int], set[int], list[tuple[str, int]], int]],
    unclean: bool,
    lag_max: int,
) -> None:
    spec = make_spec(unclean_leader_election=unclean, replica_lag_time_max_ms=lag_max)
    w = World(Controller(spec))
    for dt, lost, caught, round_faults, decide in steps:
        w.now += dt
        for action, arg in round_faults:
            apply_fault(w, spec, action, arg)
        status = w.controller.status
        if status is not None and status.leader is not None and w.brokers[status.leader].alive:
            leader = w.brokers[status.leader]
            for f in caught:
                if w.brokers[f].alive and f != status.leader:
                    w.brokers[f].log_end = max(w.brokers[f].log_end, leader.log_end)
                    w.caught_up[f] = w.now
        for b in BROKERS:
            if b not in lost:
                w.beat(b)
        if decide:
            old = w.controller.status
            view = w.controller.liveness.view(w.now)
            decision = w.controller.decide(w.now)
            check(w, old, decision, view, unclean, lag_max)
            if decision.material:
                w.proposals.clear()


def apply_fault(w: World, spec: PartitionSpec, action: str, arg: int) -> None:
    if action == "kill":
        w.brokers[arg].alive = False
    elif action == "restart":
        w.brokers[arg].alive = True
        w.brokers[arg].epoch += 1
    elif action == "write":
        status = w.controller.status
        if status is not None and status.leader is not None:
            w.brokers[status.leader].log_end += arg
    elif action == "propose":
        w.proposals.add(arg)
    elif action == "restart_controller":
        w.controller = Controller(spec, started_ms=w.now, status=w.controller.status)
    elif action == "recreate":
        w.controller = Controller(spec, started_ms=w.now, status=None)
        w.caught_up.clear()
        w.history.highest_epoch = 0  # a new status lineage
        w.history.leaders.clear()


@settings(max_examples=examples(200))
@given(
    rounds=st.lists(
        st.tuples(
            st.sampled_from([0, 250, 500, 1_000, 1_500, 2_500]),
            st.sets(st.sampled_from((2, 3, 4, 5))),
        ),
        min_size=1,
        max_size=60,
    ),
    lag_max=st.sampled_from([1_000, 2_500, 5_000]),
)
def test_followers_leave_exactly_when_their_lag_exceeds_the_window_and_rejoin_on_proposal(
    rounds: list[tuple[int, set[int]]], lag_max: int
) -> None:
    """A live leader, live followers; each round, some followers catch up. A follower is
    in the ISR after a decision iff it has caught up within replicaLagTimeMaxMs (or just
    rejoined on the leader's proposal)."""
    followers = (2, 3, 4, 5)
    spec = make_spec(
        replicas=(1, *followers),
        replication_factor=5,
        replica_lag_time_max_ms=lag_max,
    )
    c = Controller(spec)
    c.beat_all(0, brokers=(1, *followers))
    c.decide(0)
    assert c.current.leader == 1
    assert c.current.isr == (1, *followers)
    caught_up = dict.fromkeys(followers, 0)  # the new leader starts every follower's clock
    now = 0
    for dt, caught in rounds:
        now += dt
        status = c.current
        for f in caught:
            caught_up[f] = now
        proposals = [
            IsrProposal(replica=f, broker_epoch=1, log_end_offset=0)
            for f in sorted(caught)
            if f not in status.isr
        ]
        c.beat(1, now, partitions=[leader_report(status, caught_up=caught_up, proposals=proposals)])
        for f in followers:
            c.beat(f, now)
        before = status
        d = c.decide(now)
        after = c.current
        for f in followers:
            if f in before.isr:
                assert (f in after.isr) == (now - caught_up[f] <= lag_max), (f, now, caught_up)
            else:
                assert (f in after.isr) == (f in caught), (f, now)
        assert after.leader == 1
        assert after.leader_epoch == 1
        changed = after.isr != before.isr
        assert after.partition_epoch == before.partition_epoch + int(changed)
        assert (EventReason.ISR_SHRUNK in {e.reason for e in d.events}) == bool(
            set(before.isr) - set(after.isr)
        )
