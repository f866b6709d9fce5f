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
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Final

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


class PeeringGate:
    def __init__(
        self, settings: OperatorSettings, kube: KubeClient, reconciler: Reconciler
    ) -> None:
        self.settings = settings
        self.kube = kube
        self.reconciler = reconciler

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
        if may_act and not self.reconciler.active:
            log.info("peering: this replica acts", identity=self.settings.identity)
            await self.reconciler.activate()
        elif not may_act and self.reconciler.active:
            why = f"peers with priority at least ours: {blockers}" if blockers else "not announced"
            self.reconciler.deactivate(why)
