"""Whether this replica acts: kopf's peering rule, applied to the decision loop and heartbeats.

kopf keeps every replica's keep-alive in the status of a peering object
(`ClusterKopfPeering`, or a `KopfPeering` per namespace for a namespaced
operator): `{identity: {priority, lifetime, lastseen}}`. It pauses its own
handlers while another live replica has a higher priority, or the same one.
The decision loop and the heartbeat endpoint run beside kopf, not inside its
handlers, so `PeeringGate` reads the same object and applies the same rule
(`acts`), and switches the `Reconciler` on and off with it.

The two views may differ for a moment (each polls on its own). That is safe:
every status write carries the resourceVersion it was decided from, so two
replicas that both act can never both write a decision made on the same
object.

Readiness (`readiness`): every healthy replica is Ready, the acting one and
those standing by alike, so that a Deployment of several replicas rolls out
and reports healthy. Healthy means the gate's view of the peering object is
fresh (a check succeeded within the peering lifetime: a replica that cannot
read it cannot know whether to act) and, for a standalone replica, that it
acts. Brokers find the acting replica among the Ready ones by themselves: a
standing-by replica answers their heartbeats with NOT_CONTROLLER.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Final, NamedTuple

import aiohttp
import structlog

from epochlog_operator.kube import KubeApiError, KubeClient
from epochlog_operator.reconciler import Reconciler
from epochlog_operator.settings import OperatorSettings

log = structlog.get_logger("epochlog.operator.peering")

POLL_S: Final = 1.0


def _parse_time(raw: object) -> datetime | None:
    if not isinstance(raw, str):
        return None
    try:
        parsed = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def acts(
    peers: Mapping[str, Any], identity: str, priority: int, now: datetime
) -> tuple[bool, list[str]]:
    """Whether `identity` may act given the peers' keep-alives; and who blocks it.

    The rule of kopf's peering: a live peer (seen within its lifetime) with a
    higher or equal priority pauses this one.
    """
    blockers = []
    for peer, info in peers.items():
        if peer == identity or not isinstance(info, Mapping):
            continue
        seen = _parse_time(info.get("lastseen"))
        lifetime = info.get("lifetime", 60)
        if seen is None or not isinstance(lifetime, int):
            continue
        if seen + timedelta(seconds=lifetime) <= now:
            continue
        other = info.get("priority", 0)
        if isinstance(other, int) and other >= priority:
            blockers.append(peer)
    return not blockers, sorted(blockers)


class Readiness(NamedTuple):
    """What /readyz answers: whether the replica is Ready, and why (its role when it is)."""

    ready: bool
    detail: str


ACTING: Final = "acting"
STANDING_BY: Final = "standing by"


def readiness(
    *,
    acting: bool,
    standalone: bool,
    checked_s: float | None,
    now_s: float,
    lifetime_s: float,
    blockers: tuple[str, ...] = (),
) -> Readiness:
    """Ready while the replica knows its role: a standalone one once it acts; one with
    peering while its last successful check of the peering object (`checked_s`,
    monotonic) is younger than the peering lifetime, acting or standing by."""
    if standalone:
        return Readiness(True, ACTING) if acting else Readiness(False, "not acting yet")
    if checked_s is None:
        return Readiness(False, "peering not checked yet")
    age = now_s - checked_s
    if age >= lifetime_s:
        return Readiness(False, f"peering not checked for {age:.0f}s")
    if acting:
        return Readiness(True, ACTING)
    return Readiness(True, f"{STANDING_BY} ({', '.join(blockers) or 'not announced yet'})")


class PeeringGate:
    def __init__(
        self,
        settings: OperatorSettings,
        kube: KubeClient,
        reconciler: Reconciler,
        *,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.kube = kube
        self.reconciler = reconciler
        self._monotonic = monotonic
        self.checked_s: float | None = None
        """Monotonic time of the last successful check of the peering object."""
        self.blockers: tuple[str, ...] = ()
        """The live peers that keep this replica standing by, as of that check."""

    def readiness(self) -> Readiness:
        return readiness(
            acting=self.reconciler.active,
            standalone=self.settings.standalone,
            checked_s=self.checked_s,
            now_s=self._monotonic(),
            lifetime_s=self.settings.peering_lifetime_s,
            blockers=self.blockers,
        )

    def _scopes(self) -> tuple[str | None, ...]:
        return tuple(self.settings.namespaces) or (None,)

    async def ensure_objects(self) -> None:
        """Create the peering objects kopf will keep alive; kopf waits for them to exist."""
        for ns in self._scopes():
            await self.kube.ensure_peering(self.settings.peering_name, ns)

    async def run(self) -> None:
        if self.settings.standalone:
            await self._activate_with_retries()
            return
        while True:
            try:
                await self._poll()
            except (KubeApiError, aiohttp.ClientError, TimeoutError) as exc:
                # Without the API server this replica can write nothing anyway; keep
                # the current state rather than flap.
                log.warning("peering check failed", error=repr(exc))
            await asyncio.sleep(POLL_S)

    async def _activate_with_retries(self) -> None:
        while True:
            try:
                await self.reconciler.activate()
                return
            except (KubeApiError, aiohttp.ClientError, TimeoutError) as exc:
                log.warning("cannot read Partitions yet", error=repr(exc))
                await asyncio.sleep(POLL_S)

    async def _poll(self) -> None:
        now = datetime.now(UTC)
        may_act = True
        blockers: list[str] = []
        announced = True
        for ns in self._scopes():
            obj = await self.kube.get_peering(self.settings.peering_name, ns)
            if obj is None:
                await self.kube.ensure_peering(self.settings.peering_name, ns)
                may_act = False
                announced = False
                continue
            peers = obj.get("status") or {}
            announced = announced and self.settings.identity in peers
            ok, blocked_by = acts(peers, self.settings.identity, self.settings.priority, now)
            may_act = may_act and ok
            blockers += blocked_by
        # Act only once kopf has announced this replica: the others can see it then.
        may_act = may_act and announced
        self.blockers = tuple(blockers)
        self.checked_s = self._monotonic()
        if may_act and not self.reconciler.active:
            log.info("peering: this replica acts", identity=self.settings.identity)
            await self.reconciler.activate()
        elif not may_act and self.reconciler.active:
            why = f"peers with priority at least ours: {blockers}" if blockers else "not announced"
            self.reconciler.deactivate(why)
