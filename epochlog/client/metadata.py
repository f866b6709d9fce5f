"""Where each partition's leader is: discovery from the bootstrap brokers, and the cache.

A lookup asks every known broker `GET /v1/partitions` at once. The leader is
the broker that reports the partition with role `leader` at the highest
leader epoch; when followers already know of a newer epoch than any leader
reports (the new leader has not answered, or is not in the bootstrap list),
their hint (`leader` id and `leaderEpoch`) is followed. Broker ids are mapped
to the URL the client reached them at, else to the address they advertise;
when a follower is the only broker we can ask, its NOT_LEADER_OR_FOLLOWER
answer names the leader's address. A bootstrap URL that reaches several
brokers (a Service or load balancer) works too: a refusal from it is
followed to the leader's advertised address.

The cache holds a `PartitionLeader` (URL, leader epoch) per partition;
requests send the epoch, so a broker that is no longer the leader, or the
leader of a newer epoch, says so instead of answering. Error answers update
the cache with their hints (`leader`, `leaderAddress`, `leaderEpoch`);
anything else that points at a stale leader (UNKNOWN_LEADER_EPOCH included:
the epoch we sent is newer than the broker's) drops the entry, and the next
request looks the leader up again. One lookup runs per partition at a time;
concurrent callers share it.

A partition that no reachable broker hosts is retriable for
`metadata_max_wait_s` (brokers that just started have no assignments yet),
then `NoSuchPartitionError`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import structlog

from epochlog.client.errors import (
    BrokerUnreachableError,
    ClientError,
    NoSuchPartitionError,
    TlsHandshakeError,
)
from epochlog.client.records import TopicPartition, decode_answer
from epochlog.client.transport import Transport
from epochlog.protocol.bodies import HostedRole, Params, PartitionsListing
from epochlog.protocol.epochs import NO_EPOCH, epoch_from_report
from epochlog.protocol.errors import (
    AuthenticationFailedError,
    EpochlogError,
    FencedLeaderEpochError,
    LeaderNotAvailableError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    OffsetNotAvailableError,
    RequestTimedOutError,
    TopicAuthorizationFailedError,
    UnknownLeaderEpochError,
)

log = structlog.get_logger("epochlog.client")


PARTITIONS_PATH = "/v1/partitions"


@dataclass(frozen=True, slots=True)
class PartitionLeader:
    """What this client knows of a partition's leader: where to reach it, and its epoch
    (NO_EPOCH when a hint named the leader without one; requests then send none)."""

    partition: str
    url: str
    leader_epoch: int
    broker_id: int | None


@dataclass(frozen=True, slots=True)
class _Seen:
    """One broker's report of one partition."""

    name: str
    url: str
    broker_id: int | None
    role: HostedRole
    leader: int | None
    leader_epoch: int
    """NO_EPOCH when the broker reports none."""
    topic: str | None
    index: int | None
    """The partition's topic and its index there, when the broker has heard them."""


class _Probed(NamedTuple):
    """One probe of every known broker: the reports, the brokers that did not answer
    (URL -> why), and the reports by partition name."""

    seen: list[_Seen]
    failures: dict[str, str]
    by_name: dict[str, list[_Seen]]


class Metadata:
    def __init__(
        self,
        transport: Transport,
        bootstrap: Sequence[str],
        *,
        probe_timeout_s: float = 2.0,
        metadata_max_wait_s: float = 5.0,
    ) -> None:
        if not bootstrap:
            raise ValueError("at least one bootstrap broker URL is needed")
        self._transport = transport
        self._urls: list[str] = []
        for url in bootstrap:
            self._add_url(url)
        self._broker_urls: dict[int, str] = {}
        """Broker id -> the URL it answered at (or, until then, the address it advertises)."""
        self._reached: set[int] = set()
        self._leaders: dict[str, PartitionLeader] = {}
        self._lookups: dict[str, asyncio.Task[PartitionLeader]] = {}
        self._probing: asyncio.Task[_Probed] | None = None
        self._unhosted_since: dict[str, float] = {}
        self._probe_timeout_s = probe_timeout_s
        self._metadata_max_wait_s = metadata_max_wait_s

    @property
    def urls(self) -> list[str]:
        return list(self._urls)

    def _add_url(self, url: str) -> None:
        url = url.rstrip("/")
        if url not in self._urls:
            self._urls.append(url)

    def cached(self, partition: str) -> PartitionLeader | None:
        return self._leaders.get(partition)

    async def leader(self, partition: str) -> PartitionLeader:
        """The cached leader, or the result of a lookup (raises a typed error)."""
        cached = self._leaders.get(partition)
        if cached is not None:
            return cached
        task = self._lookups.get(partition)
        if task is None:
            task = asyncio.get_running_loop().create_task(self._lookup(partition))
            self._lookups[partition] = task
            task.add_done_callback(lambda _t: self._lookups.pop(partition, None))
            task.add_done_callback(_retrieved)
        # Shielded: one caller giving up must not cancel the lookup the others wait for.
        return await asyncio.shield(task)

    def _set(self, leader: PartitionLeader, why: str) -> None:
        old = self._leaders.get(leader.partition)
        self._leaders[leader.partition] = leader
        if old is None or (old.url, old.leader_epoch) != (leader.url, leader.leader_epoch):
            event = log.info if old is not None and old.url != leader.url else log.debug
            event(
                "leader_found",
                partition=leader.partition,
                leader=leader.broker_id,
                leaderEpoch=leader.leader_epoch,
                url=leader.url,
                why=why,
            )

    def invalidate(self, partition: str, leader: PartitionLeader | None = None) -> None:
        """Forget the cached leader (only if it is still `leader`, when given)."""
        current = self._leaders.get(partition)
        if current is not None and (leader is None or current == leader):
            del self._leaders[partition]

    def on_error(self, partition: str, used: PartitionLeader | None, exc: BaseException) -> None:
        """Learn from a failed request to `used`: follow the error's hint or forget."""
        if not isinstance(exc, EpochlogError):
            # Unreachable, or not epochlog's answer: look again.
            if used is not None:
                self.invalidate(partition, used)
            return
        hint_id = exc.leader
        hint_epoch = NO_EPOCH if exc.leader_epoch is None else exc.leader_epoch
        if isinstance(
            exc,
            RequestTimedOutError | NotEnoughReplicasError | NotEnoughReplicasAfterAppendError,
        ):
            # Said by the leader we asked, which stays the leader: the followers are slow
            # or out of the ISR. Nothing to look up again.
            return
        if isinstance(exc, UnknownLeaderEpochError):
            # Our epoch is newer than the broker's: usually the assignment has not reached
            # it yet, but the epoch we hold may also name a leader that never took over
            # (the controller moved on). Look again (KIP-320: FENCED and UNKNOWN alike);
            # a lookup that finds the same leader and epoch costs one listing.
            if used is not None:
                self.invalidate(partition, used)
            return
        if isinstance(exc, OffsetNotAvailableError):
            return
        if isinstance(exc, NotLeaderOrFollowerError | FencedLeaderEpochError):
            known = self._leaders.get(partition)
            fresher = hint_epoch != NO_EPOCH and (known is None or known.leader_epoch <= hint_epoch)
            for url in self._urls_for(hint_id, exc.leader_address):
                # A hint naming the URL that just refused (and not a newer epoch there)
                # would send us round in a circle; that happens when one URL reaches
                # several brokers (a load balancer): then the advertised address is next.
                circular = (
                    used is not None
                    and url == used.url
                    and isinstance(exc, NotLeaderOrFollowerError)
                    and hint_epoch <= used.leader_epoch
                )
                if fresher and not circular:
                    leader = PartitionLeader(partition, url, hint_epoch, hint_id)
                    self._set(leader, why=str(exc.code))
                    return
        if used is not None:
            self.invalidate(partition, used)

    def _urls_for(self, broker_id: int | None, address: str | None) -> list[str]:
        """Where broker `broker_id` may be reached, best first: the URL it answered us at,
        then the address a peer gave for it."""
        urls: list[str] = []
        if broker_id is not None and broker_id in self._broker_urls:
            urls.append(self._broker_urls[broker_id])
        if address:
            address = address.rstrip("/")
            if broker_id is not None:
                self._broker_urls.setdefault(broker_id, address)
            if address not in urls:
                urls.append(address)
        return urls

    # -- lookup ----------------------------------------------------------------------------

    async def describe(self, url: str) -> PartitionsListing:
        body, _ = await self._transport.request(
            "GET", url, PARTITIONS_PATH, timeout_s=self._probe_timeout_s
        )
        return decode_answer(PartitionsListing, body, url + PARTITIONS_PATH)

    async def _probe(self) -> _Probed:
        """Every known broker's reports, and the failure of each broker that did not answer.

        Lookups that start while a probe is out share it: a client writing to a thousand
        partitions at once asks each broker for its listing once, not once per partition,
        and each lookup finds its partition's reports by name, not by going through every
        report of the listing (a failover of thousands of partitions took minutes so)."""
        task = self._probing
        if task is None or task.done():
            task = asyncio.get_running_loop().create_task(self._probe_once())
            task.add_done_callback(_retrieved)
            self._probing = task
        return await asyncio.shield(task)

    async def _probe_once(self) -> _Probed:
        urls = list(self._urls)
        answers = await asyncio.gather(*(self.describe(u) for u in urls), return_exceptions=True)
        refused = [
            a for a in answers if isinstance(a, AuthenticationFailedError | TlsHandshakeError)
        ]
        if refused and len(refused) == len(answers):
            # Credentials do not get better by asking again: say so at once.
            raise refused[0]
        seen: list[_Seen] = []
        failures: dict[str, str] = {}
        for url, answer in zip(urls, answers, strict=True):
            if isinstance(answer, BaseException):
                if not isinstance(answer, ClientError | EpochlogError):
                    raise answer
                failures[url] = str(answer)
                continue
            broker_id = answer.broker_id
            # The URL we reached it at wins over what it advertises (which may be an
            # address only other brokers can reach).
            if broker_id is not None and broker_id not in self._reached:
                self._broker_urls[broker_id] = url
                self._reached.add(broker_id)
            seen.extend(
                _Seen(
                    name=p.name,
                    url=url,
                    broker_id=broker_id,
                    role=p.role,
                    leader=p.leader,
                    leader_epoch=epoch_from_report(p.leader_epoch),
                    topic=p.topic,
                    index=p.partition,
                )
                for p in answer.partitions
            )
            if broker_id is not None and answer.address:
                self._broker_urls.setdefault(broker_id, answer.address.rstrip("/"))
        by_name: dict[str, list[_Seen]] = {}
        for s in seen:
            by_name.setdefault(s.name, []).append(s)
        self._learn_leaders(seen)
        return _Probed(seen, failures, by_name)

    async def topic_partitions(self) -> tuple[list[TopicPartition], dict[str, str]]:
        """Every partition a reachable broker lists with its topic and index, by name, and
        the failure of each broker that did not answer. Replicas whose broker has not heard
        their topic yet are left out (another replica of the same partition usually says)."""
        seen, failures, _by_name = await self._probe()
        found = {
            s.name: TopicPartition(s.topic, s.index, s.name)
            for s in seen
            if s.topic is not None and s.index is not None
        }
        return sorted(found.values()), failures

    async def _lookup(self, partition: str) -> PartitionLeader:
        seen, failures, by_name = await self._probe()
        mine = by_name.get(partition, [])
        if not seen and failures and len(failures) == len(self._urls):
            detail = "; ".join(f"{u}: {e}" for u, e in failures.items())
            raise BrokerUnreachableError(f"no bootstrap broker answered: {detail}")
        if not mine:
            await self._check_access(partition, [s.url for s in seen] or list(self._urls))
            now = time.monotonic()
            since = self._unhosted_since.setdefault(partition, now)
            if now - since >= self._metadata_max_wait_s and not failures:
                self._unhosted_since.pop(partition, None)
                raise NoSuchPartitionError(
                    f"no broker hosts partition {partition!r} (asked {', '.join(self._urls)})"
                )
            raise LeaderNotAvailableError(
                f"no reachable broker hosts {partition!r} yet"
                + (f" ({len(failures)} did not answer)" if failures else "")
            )
        self._unhosted_since.pop(partition, None)
        leaders = [s for s in mine if s.role is HostedRole.LEADER]
        best = max(leaders, key=lambda s: s.leader_epoch, default=None)
        hints = [s for s in mine if s.leader is not None]
        newest = max(hints, key=lambda s: s.leader_epoch, default=None)
        if best is not None and (newest is None or newest.leader_epoch <= best.leader_epoch):
            leader = PartitionLeader(partition, best.url, best.leader_epoch, best.broker_id)
            self._set(leader, why="lookup")
            return leader
        if newest is not None and newest.leader is not None:
            url = self._broker_urls.get(newest.leader)
            if url is None:
                url = await self._ask_for_leader_address(partition, newest)
            if url is not None:
                self._add_url(url)
                broker = newest.broker_id if url == newest.url else newest.leader
                leader = PartitionLeader(partition, url, newest.leader_epoch, broker)
                self._set(leader, why="follower hint")
                return leader
        raise LeaderNotAvailableError(f"{partition}: no leader known yet")

    def _learn_leaders(self, seen: Sequence[_Seen]) -> None:
        """Cache the leader of every partition a listing shows led and none is cached for,
        as a Kafka client keeps every partition of a metadata answer: the next partition
        asked for needs no probe of its own."""
        best: dict[str, _Seen] = {}
        newest: dict[str, int] = {}
        for s in seen:
            newest[s.name] = max(newest.get(s.name, s.leader_epoch), s.leader_epoch)
            if s.role is HostedRole.LEADER and (
                s.name not in best or s.leader_epoch > best[s.name].leader_epoch
            ):
                best[s.name] = s
        for name, s in best.items():
            # A replica that knows a newer epoch than the leader reports: leave it to the
            # lookup of that partition, which follows the hint.
            if name not in self._leaders and s.leader_epoch >= newest[name]:
                self._set(PartitionLeader(name, s.url, s.leader_epoch, s.broker_id), "listing")

    async def _check_access(self, partition: str, urls: Sequence[str]) -> None:
        """A listing holds only what the principal may describe: for a partition none
        lists, ask one broker directly, whose TOPIC_AUTHORIZATION_FAILED (or
        AUTHENTICATION_FAILED) is the answer to give, as a Kafka client gets it from
        its metadata request."""
        if not urls:
            return
        try:
            await self._transport.request(
                "GET",
                urls[0],
                f"/v1/partitions/{partition}/offsets",
                params={Params.AT: "latest"},
                timeout_s=self._probe_timeout_s,
            )
        except (TopicAuthorizationFailedError, AuthenticationFailedError):
            raise
        except (ClientError, EpochlogError):
            return

    async def _ask_for_leader_address(self, partition: str, follower: _Seen) -> str | None:
        """The leader's URL as `follower` knows it: its NOT_LEADER_OR_FOLLOWER answer names
        it (`leaderAddress`) when the leader is not among the brokers we can ask."""
        try:
            await self._transport.request(
                "GET",
                follower.url,
                f"/v1/partitions/{partition}/offsets",
                params={Params.AT: "latest"},
                timeout_s=self._probe_timeout_s,
            )
        except NotLeaderOrFollowerError as exc:
            urls = self._urls_for(exc.leader, exc.leader_address)
            return urls[0] if urls else None
        except (ClientError, EpochlogError):
            return None
        # It answered as the leader: it became one since it described itself.
        return follower.url


def _retrieved(task: asyncio.Task[Any]) -> None:
    """Mark a shared task's failure as seen: when every caller waiting on it gave up (a
    timeout), nobody else would, and asyncio would report it at garbage collection."""
    if not task.cancelled():
        task.exception()
