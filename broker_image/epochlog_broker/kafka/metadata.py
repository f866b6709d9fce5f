"""The cluster as a Kafka Metadata answer shows it, from the brokers' own listings.

A Kafka client learns every partition's leader from any broker's Metadata answer. An
epochlog broker knows the replicas it hosts; the cluster is what all brokers host.
`ClusterView` asks each live peer (the brokers the controller's last heartbeat answer
named) for its `GET /v1/partitions` listing with this broker's certificate, as the
HTTP client's leader lookup does, and keeps the result for `ttl_s` so that a burst of
Metadata requests costs one round of listings (one round runs at a time). Nothing is
asked on an idle cluster: the cost is per Metadata request, not per partition per
second.

`topics` is pure: listings in, per topic the partitions with the leader (the broker
that reports itself leader at the highest leader epoch), the leader epoch, replicas and
ISR; a partition nobody leads is LEADER_NOT_AVAILABLE, as Kafka answers during an
election.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

import aiohttp
import structlog

from epochlog.protocol.bodies import HostedRole, PartitionsListing

log = structlog.get_logger("epochlog.broker")

NO_LEADER = -1


@dataclass(frozen=True, slots=True)
class KafkaPartition:
    index: int
    name: str
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class KafkaBroker:
    node_id: int
    host: str
    port: int


def brokers(listings: Iterable[PartitionsListing]) -> list[KafkaBroker]:
    """Every broker whose listing names a Kafka listener."""
    out = {}
    for listing in listings:
        if listing.broker_id is None or not listing.kafka_address:
            continue
        host, _, port = listing.kafka_address.rpartition(":")
        if host and port.isdigit():
            out[listing.broker_id] = KafkaBroker(listing.broker_id, host.strip("[]"), int(port))
    return [out[b] for b in sorted(out)]


def topics(listings: Iterable[PartitionsListing]) -> dict[str, list[KafkaPartition]]:
    """Per topic, its partitions by index, as the listings show them."""
    best: dict[tuple[str, int], tuple[tuple[int, int, int], KafkaPartition]] = {}
    for listing in listings:
        if listing.broker_id is None:
            continue
        for p in listing.partitions:
            if p.topic is None or p.partition is None:
                continue
            leads = p.role is HostedRole.LEADER
            leader = listing.broker_id if leads else NO_LEADER
            entry = KafkaPartition(
                p.partition, p.name, leader, p.leader_epoch, tuple(p.replicas), tuple(p.isr)
            )
            # A leader's own word beats a follower's, a newer epoch an older one.
            rank = (int(leads), p.leader_epoch, p.partition_epoch)
            key = (p.topic, p.partition)
            if key not in best or rank > best[key][0]:
                best[key] = (rank, entry)
    out: dict[str, list[KafkaPartition]] = {}
    for (topic, _index), (_rank, entry) in sorted(best.items()):
        out.setdefault(topic, []).append(entry)
    return out


Listings = Callable[[], Awaitable[list[PartitionsListing]]]


class ClusterView:
    """Every broker's listing, this one's and its live peers', kept for `ttl_s`."""

    def __init__(
        self,
        own: Callable[[], PartitionsListing],
        peers: Callable[[], dict[int, str]],
        session: Callable[[], aiohttp.ClientSession],
        *,
        ttl_s: float = 1.0,
        timeout_s: float = 5.0,
    ) -> None:
        self._own = own
        self._peers = peers
        self._session = session
        self.ttl_s = ttl_s
        self.timeout_s = timeout_s
        self._cached: tuple[float, list[PartitionsListing]] | None = None
        self._round: asyncio.Task[list[PartitionsListing]] | None = None

    def forget(self) -> None:
        """Ask again next time (a client was told a leader that is not one)."""
        self._cached = None

    async def listings(self) -> list[PartitionsListing]:
        now = time.monotonic()
        if self._cached is not None and now - self._cached[0] < self.ttl_s:
            return self._cached[1]
        if self._round is None or self._round.done():
            self._round = asyncio.get_running_loop().create_task(self._ask_all())
        # Shielded: a client that hangs up does not cancel the round others wait for.
        return await asyncio.shield(self._round)

    async def _ask_all(self) -> list[PartitionsListing]:
        started = time.monotonic()
        peers = self._peers()
        answers = await asyncio.gather(*(self._ask(b, url) for b, url in peers.items()))
        out = [self._own(), *(a for a in answers if a is not None)]
        self._cached = (started, out)
        return out

    async def _ask(self, broker_id: int, url: str) -> PartitionsListing | None:
        try:
            async with self._session().get(
                f"{url}/v1/partitions", timeout=aiohttp.ClientTimeout(total=self.timeout_s)
            ) as resp:
                body = await resp.read()
                if resp.status != 200:
                    log.warning("kafka_metadata_peer_refused", peer=broker_id, status=resp.status)
                    return None
            return PartitionsListing.model_validate_json(body)
        except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as exc:
            # A broker that does not answer is left out, as Kafka leaves out a fenced one.
            log.warning("kafka_metadata_peer_unreachable", peer=broker_id, error=str(exc))
            return None
