"""The CA replacement state machine (`epochlog_operator.ca_rotation`): phases in order,
with production settings, and under any order of observations a world of holders
that reload late and report later never has one member refuse another's
certificate, and never trusts nothing."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from hypothesis import event, given, settings
from hypothesis import strategies as st

from epochlog_operator.ca_rotation import (
    Action,
    CaSet,
    Holder,
    Leaf,
    Observed,
    Phase,
    Policy,
    apply,
    decide,
)

START = datetime(2030, 1, 1, tzinfo=UTC)
YEAR = timedelta(days=365)
PRODUCTION = Policy(renew_before=timedelta(days=30))
CLIENTS = Policy(renew_before=timedelta(days=30), keep_outgoing_until_it_ends=True)


@dataclass
class Member:
    """A broker or the operator: the bundle it loaded, the certificate it serves (by the
    CA that issued it), and what it last reported of both."""

    name: str
    trusts: frozenset[str]
    serves: str
    reported: tuple[frozenset[str], str] | None = None


@dataclass
class World:
    """The CA Secret, one leaf Secret per member, and the members."""

    cas: CaSet
    ends: dict[str, datetime]
    leaves: dict[str, str]
    members: list[Member]
    policy: Policy
    now: datetime = START
    names: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    log: list[Action] = field(default_factory=list)

    @classmethod
    def new(cls, n: int, policy: Policy = PRODUCTION, first_ends: datetime = START + YEAR) -> World:
        members = [Member(f"m{i}", frozenset({"ca0"}), "ca0") for i in range(n)]
        return cls(
            CaSet("ca0"), {"ca0": first_ends}, {m.name: "ca0" for m in members}, members, policy
        )

    def observed(self) -> Observed:
        return Observed(
            now=self.now,
            signing_ends=self.ends[self.cas.signing],
            outgoing_ends=self.ends.get(self.cas.outgoing or ""),
            holders=tuple(
                Holder(m.name, m.reported[0] if m.reported else None) for m in self.members
            ),
            leaves=tuple(
                Leaf(
                    m.name,
                    self.leaves[m.name],
                    m.reported is not None and m.reported[1] == self.leaves[m.name],
                )
                for m in self.members
            ),
        )

    def operator_round(self) -> None:
        decision = decide(self.cas, self.observed(), self.policy)
        new = None
        if decision.action is Action.START:
            new = f"ca{next(self.names)}"
            self.ends[new] = self.now + YEAR
        if decision.action is Action.DROP:
            # Never before every leaf comes from the signing CA and is served.
            assert all(leaf == self.cas.signing for leaf in self.leaves.values())
            assert all(m.reported and m.reported[1] == self.cas.signing for m in self.members)
            if self.policy.keep_outgoing_until_it_ends:
                assert self.now >= self.ends[self.cas.outgoing or ""]
        if decision.action is Action.PROMOTE:
            assert all(m.reported and self.cas.trusted <= m.reported[0] for m in self.members)
        self.cas = apply(self.cas, decision.action, new)
        self.log.append(decision.action)
        # The shell re-issues every leaf not signed by the signing CA in the same round.
        for name in self.leaves:
            self.leaves[name] = self.cas.signing

    def reload(self, i: int) -> None:
        m = self.members[i]
        m.trusts, m.serves = self.cas.trusted, self.leaves[m.name]

    def report(self, i: int) -> None:
        m = self.members[i]
        m.reported = (m.trusts, m.serves)

    def check(self) -> None:
        assert self.cas.signing in self.cas.trusted
        for a in self.members:
            assert a.trusts, f"{a.name} trusts nothing"
            for b in self.members:
                # Every certificate served is trusted by every member.
                assert a.serves in b.trusts, (a, b, self.cas)


EVENT = st.one_of(
    st.tuples(st.just("round"), st.just(0)),
    st.tuples(st.just("reload"), st.integers(0, 3)),
    st.tuples(st.just("report"), st.integers(0, 3)),
    st.tuples(st.just("days"), st.integers(1, 60)),
    # Every member reloads, then reports: what a quiet while of kubelet syncs and
    # heartbeats does, so that short schedules reach the later phases too.
    st.tuples(st.just("settle"), st.just(0)),
)


@settings(max_examples=400, deadline=None)
@given(
    members=st.integers(1, 4),
    keep=st.booleans(),
    events=st.lists(EVENT, min_size=30, max_size=200),
)
def test_any_order_of_observations_keeps_every_certificate_trusted(
    members: int, keep: bool, events: list[tuple[str, int]]
) -> None:
    # The first CA near its end, so that short schedules go through whole rotations.
    world = World.new(members, CLIENTS if keep else PRODUCTION, START + timedelta(days=35))
    for kind, arg in events:
        if kind == "round":
            world.operator_round()
        elif kind == "reload":
            world.reload(arg % members)
        elif kind == "report":
            world.report(arg % members)
        elif kind == "settle":
            for i in range(members):
                world.reload(i)
            for i in range(members):
                world.report(i)
        else:
            world.now += timedelta(days=arg)
        world.check()
    event(f"drops: {world.log.count(Action.DROP)}")


def test_with_production_settings_a_year_old_ca_is_replaced_within_days() -> None:
    """Daily rounds, every member reloading and reporting each day: the rotation starts
    30 days before the CA's end and is over three days later."""
    world = World.new(3)
    phases: dict[Phase, datetime] = {}
    while world.now < START + 2 * YEAR:
        world.operator_round()
        phases.setdefault(world.cas.phase, world.now)
        if world.cas.phase is Phase.STEADY and world.cas.signing != "ca0":
            break
        for i in range(3):
            world.reload(i)
            world.report(i)
        world.check()
        world.now += timedelta(days=1)
    assert phases[Phase.TRUSTING_NEW] == START + YEAR - timedelta(days=30)
    assert phases[Phase.REISSUING] == START + YEAR - timedelta(days=29)
    assert world.cas == CaSet("ca1")
    assert world.now == START + YEAR - timedelta(days=28)
    assert world.now < world.ends["ca0"]


def test_the_clients_ca_stays_trusted_until_it_ends() -> None:
    world = World.new(2, CLIENTS)
    world.now = START + YEAR - timedelta(days=30)
    world.operator_round()
    for i in range(2):
        world.reload(i)
        world.report(i)
    world.operator_round()
    assert world.cas.phase is Phase.REISSUING
    for i in range(2):
        world.reload(i)
        world.report(i)
    world.operator_round()
    decision = decide(world.cas, world.observed(), CLIENTS)
    assert decision.action is Action.WAIT
    assert "until" in decision.reason
    world.now = world.ends["ca0"]
    world.operator_round()
    assert world.cas == CaSet("ca1")


def test_nothing_heard_is_nothing_observed() -> None:
    seen = Observed(START, START + YEAR, None, holders=(), leaves=())
    assert decide(CaSet("a", incoming="b"), seen, PRODUCTION).action is Action.WAIT
    unheard = Observed(START, START + YEAR, None, (Holder("broker-1", None),), ())
    assert decide(CaSet("a", incoming="b"), unheard, PRODUCTION).action is Action.WAIT
    assert decide(CaSet("b", outgoing="a"), unheard, PRODUCTION).action is Action.WAIT
