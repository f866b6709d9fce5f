"""Replacing a CA with an overlap, as Strimzi's CA renewal does: the next step from what is
observed. Decisions only, no clock and no I/O.

A CA the operator keeps goes through three phases, each one a state of its Secret
(`CaSet`: which CA signs, which one is trusted beside it):

    Steady        one CA; it signs and is trusted.
    TrustingNew   (a) near its end (`Policy.renew_before`), a new CA is made and trusted
                  beside the old one, which still signs. Waits until every holder (a
                  process that verifies certificates of this CA: brokers, the operator)
                  reports trusting both.
    Reissuing     (b) the new CA signs: every leaf certificate the operator keeps is
                  issued again from it. Waits until each is issued from the new CA and
                  its holder serves it, and, for a CA whose leaves the operator does not
                  all keep (the clients CA: users hold certificates of it),
                  until the old CA ends, so that users have the renewal window to move.
    -> Steady     (c) the old CA is dropped: no longer trusted.

`decide` answers the next `Action` and why; `apply` is the `CaSet` after it. The shell
(`cert_manager`) reads the Secrets and the holders' reports, writes what `apply` gives
(making the key of a new CA for START) and re-issues leaves (`certificates.due`
re-issues every leaf not signed by the signing CA). Whatever order observations come
in, the old CA is dropped only once every leaf comes from the new one and is served,
the new one signs only once every holder trusts it, and something is always trusted
(tests/operator/test_ca_rotation.py).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from datetime import datetime, timedelta


class Phase(enum.StrEnum):
    STEADY = "Steady"
    TRUSTING_NEW = "TrustingNew"
    REISSUING = "Reissuing"


class Action(enum.StrEnum):
    WAIT = "wait"
    START = "start"
    """Make a new CA and trust it beside the signing one."""
    PROMOTE = "promote"
    """The new CA signs; the old one stays trusted."""
    DROP = "drop"
    """The old CA is trusted no more."""


@dataclass(frozen=True)
class CaSet:
    """The CAs of one Secret, by fingerprint."""

    signing: str
    incoming: str | None = None
    """Trusted, not signing yet (TrustingNew)."""
    outgoing: str | None = None
    """Trusted, signing no more (Reissuing)."""

    def __post_init__(self) -> None:
        if self.incoming is not None and self.outgoing is not None:
            raise ValueError("a CA is replaced one at a time: an incoming or an outgoing one")
        if self.signing in (self.incoming, self.outgoing):
            raise ValueError("the signing CA is neither the incoming nor the outgoing one")

    @property
    def phase(self) -> Phase:
        if self.incoming is not None:
            return Phase.TRUSTING_NEW
        if self.outgoing is not None:
            return Phase.REISSUING
        return Phase.STEADY

    @property
    def trusted(self) -> frozenset[str]:
        return frozenset(c for c in (self.signing, self.incoming, self.outgoing) if c)


@dataclass(frozen=True)
class Holder:
    """A process that verifies certificates of this CA, as it last reported."""

    name: str
    trusts: frozenset[str] | None
    """Fingerprints of the CAs it trusts; None: not heard from."""


@dataclass(frozen=True)
class Leaf:
    """A certificate of this CA that the operator keeps in a Secret."""

    name: str
    issued_by: str | None
    """Fingerprint of the CA that signed the certificate in the Secret; None: none there."""
    served: bool
    """Its holder reported serving the certificate the Secret holds."""


@dataclass(frozen=True)
class Policy:
    renew_before: timedelta
    """A CA this close to its end is replaced (30 days of a 365-day CA)."""
    keep_outgoing_until_it_ends: bool = False
    """Users hold certificates of this CA that the operator does not issue: the old CA
    stays trusted until its end (the clients CA)."""


@dataclass(frozen=True)
class Observed:
    now: datetime
    signing_ends: datetime
    """The signing CA's notAfter."""
    outgoing_ends: datetime | None
    holders: tuple[Holder, ...]
    leaves: tuple[Leaf, ...]


@dataclass(frozen=True)
class Decision:
    action: Action
    reason: str


def due(ends: datetime, now: datetime, renew_before: timedelta) -> bool:
    """Whether a CA ending at `ends` is within its renewal window at `now`."""
    return ends - renew_before <= now


def _lagging(holders: tuple[Holder, ...], wanted: frozenset[str]) -> list[str]:
    return [h.name for h in holders if h.trusts is None or not wanted <= h.trusts]


def decide(cas: CaSet, seen: Observed, policy: Policy) -> Decision:
    """The next step for `cas`, and why."""
    if cas.phase is Phase.STEADY:
        if due(seen.signing_ends, seen.now, policy.renew_before):
            return Decision(Action.START, f"the CA ends {seen.signing_ends.isoformat()}")
        return Decision(Action.WAIT, f"the CA ends {seen.signing_ends.isoformat()}")
    if not seen.holders:
        # Every CA has a holder (the brokers); none known is nothing observed.
        return Decision(Action.WAIT, "no process that trusts this CA is known")
    if cas.phase is Phase.TRUSTING_NEW:
        lagging = _lagging(seen.holders, cas.trusted)
        if lagging:
            return Decision(Action.WAIT, f"not trusting the new CA yet: {', '.join(lagging)}")
        return Decision(Action.PROMOTE, "every holder trusts the new CA")
    lagging = _lagging(seen.holders, frozenset({cas.signing}))
    if lagging:
        return Decision(Action.WAIT, f"not trusting the new CA: {', '.join(lagging)}")
    old = [leaf.name for leaf in seen.leaves if leaf.issued_by != cas.signing]
    if old:
        return Decision(Action.WAIT, f"not issued from the new CA yet: {', '.join(old)}")
    unserved = [leaf.name for leaf in seen.leaves if not leaf.served]
    if unserved:
        return Decision(Action.WAIT, f"new certificate not served yet: {', '.join(unserved)}")
    if policy.keep_outgoing_until_it_ends and (
        seen.outgoing_ends is None or seen.now < seen.outgoing_ends
    ):
        ends = seen.outgoing_ends.isoformat() if seen.outgoing_ends else "(unknown)"
        return Decision(
            Action.WAIT, f"certificates users hold from the old CA are trusted until {ends}"
        )
    return Decision(Action.DROP, "every certificate comes from the new CA and is served")


def apply(cas: CaSet, action: Action, new: str | None = None) -> CaSet:
    """`cas` after `action`; START takes the fingerprint of the CA made for it."""
    if action is Action.WAIT:
        return cas
    if action is Action.START:
        if cas.phase is not Phase.STEADY or new is None:
            raise ValueError("a new CA is made in the steady phase, and named")
        return replace(cas, incoming=new)
    if action is Action.PROMOTE:
        if cas.incoming is None:
            raise ValueError("nothing to promote")
        return CaSet(signing=cas.incoming, outgoing=cas.signing)
    if cas.outgoing is None:
        raise ValueError("nothing to drop")
    return CaSet(signing=cas.signing)
