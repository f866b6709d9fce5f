"""The operator's I/O loop around `ControllerCore`: what to decide when, and how to persist it.

`Reconciler` owns the running state of an active replica: the `ControllerCore`
(broker sessions and latest heartbeats), the Partitions as last read from the
API server, and the status writes in flight. The decisions themselves are
`ControllerCore.decide`; this module only chooses when to ask and persists the
answer.

When to decide (decisions follow news, not the partition count):
- every Partition once per full reconcile interval, a step per pass, at most
  `full_reconcile_rate` a second (a pass over more Partitions than rate x
  interval takes longer: an idle cluster's decisions must not grow with its
  Partitions); all of them at once when the set of live brokers changes: the
  loop wakes the moment the next broker session
  would expire, so a silent leader is replaced one session timeout after its
  last heartbeat, not one interval later;
- once per reconcile interval, the Partitions that are not quiet
  (`ControllerCore.quiet`: lag clocks run, a proposal waits, no leader) and
  those whose skipped refresh fell due;
- a Partition at once when its resource changed, a heartbeat changed its
  reports (only changed reports travel), or a new broker process of one of its
  replicas registered.

How to persist (`_write`):
- `PUT .../status` with the resourceVersion the decision was made from. On
  409 Conflict the Partition is read again and decided again: the other
  writer's status is the new input, never merged with ours. (When only its
  metadata changed, the inputs are the ones decided on and the same decision
  is written against the new resourceVersion.);
- state changes (leader, ISR, epochs, conditions) are written at once by a
  pool of writers, leader changes ahead of everything else; refreshes of HW,
  log end offsets and lag at most once per status refresh interval per
  Partition, by a smaller pool that waits while state changes are pending,
  the Partition refreshed longest ago first;
- the decision's Events are posted after its status was written, so every
  Event describes a persisted change, and also wait for pending state changes;
- every status write (each retry too) and every Event post first takes a
  token from the API write budget (`budget`, `throttle`): elections, then
  other state changes, then Events, then refreshes. A refresh waits for its
  token before it decides and before its Partition counts as in flight, so a
  refresh waiting for the budget never holds up a state change of its
  Partition.

A replica that stops acting (peering) drops its `ControllerCore`; when it acts
again it starts a new one, which waits one session timeout before fencing
anyone, and re-reads every Partition: it rebuilds from the persisted statuses
and the heartbeats that arrive, as a restarted operator does.

One name, one Partition: brokers know a partition by its name alone, so when
the operator serves several namespaces and two of them hold a Partition of the
same name, the one that claimed the name first (at start: the one served
before, else the oldest) is served and the other is neither decided nor
assigned (`indexed.NameClaims`). Its status says why (Ready False, reason
NameConflict, naming the namespace that holds the name) and a Warning Event
too, once; it takes over the name when the one served is deleted.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import ChainMap, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Final

import aiohttp
import structlog
from pydantic import ValidationError

from epochlog.documents import json_copy
from epochlog.objects import ObjectMeta, metadata_of
from epochlog.protocol.errors import InvalidRequestError, NotControllerError
from epochlog.protocol.heartbeat import BrokerHeartbeat, HeartbeatResponse
from epochlog.resources import ConditionType, PartitionSpec, PartitionStatus
from epochlog.tasks import cancel_and_wait
from epochlog_operator.admission import heartbeat_problem
from epochlog_operator.budget import WriteBudget, WriteKind
from epochlog_operator.conditions import (
    NAME_CONFLICT,
    ConditionCounts,
    name_conflict_message,
    name_conflict_status,
)
from epochlog_operator.controller import ControllerCore
from epochlog_operator.decide import Decision, PartitionInput
from epochlog_operator.events import Event, EventReason
from epochlog_operator.indexed import NameClaims
from epochlog_operator.kube import (
    ConflictError,
    KubeApiError,
    KubeClient,
    NotFoundError,
    Obj,
    TooManyRequestsError,
)
from epochlog_operator.liveness import (
    LATE_SILENCE_LIMIT,
    STALL_CHECK_INTERVAL_MS,
    BrokerState,
    HeartbeatOutcome,
    stall_threshold_ms,
)
from epochlog_operator.metrics import Metrics
from epochlog_operator.settings import OperatorSettings
from epochlog_operator.throttle import WriteThrottle

log = structlog.get_logger("epochlog.operator")

MAX_CONFLICT_RETRIES: Final = 5
MAX_EVENT_PUSH_BACKS: Final = 5
"""An Event pushed back more often than this is dropped (a status write never is)."""
"""Re-read and decide again this often on 409 before leaving the Partition to the next sweep."""
EVENT_POSTERS: Final = 2
"""Events are posted by a few workers, so that a burst of them (a broker failure touches
hundreds of Partitions) does not crowd out the status writes at the API server."""
MAX_QUEUED_EVENTS: Final = 10_000


class StandbyError(NotControllerError):
    """This replica is not the acting one: brokers must heartbeat to the active replica."""


@dataclass(frozen=True, slots=True)
class _Write:
    entry: Entry
    decision: Decision
    term: int


@dataclass
class Entry:
    """One Partition as last read (or written) by this replica."""

    namespace: str
    name: str
    uid: str
    resource_version: str
    body: Obj
    input: PartitionInput | None
    """None when the object cannot be decided (see `problem`)."""
    problem: str | None = None
    last_write: float = -math.inf
    """Monotonic time of this replica's last status write, for the refresh throttle."""


def spec_changes(old: object, new: object, path: str = "spec") -> list[str]:
    """What changed between two specs, one line per changed field, for the log."""
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        changes: list[str] = []
        for key in sorted({*old, *new}, key=str):
            changes += spec_changes(old.get(key), new.get(key), f"{path}.{key}")
        return changes
    return [] if old == new else [f"{path}: {old!r} -> {new!r}"]


def _older(candidate: str, current: str) -> bool:
    """Whether resourceVersion `candidate` is known to precede `current`.

    resourceVersions are opaque; where both are integers (etcd revisions, the
    emulator) a late watch event must not replace a newer object. Otherwise
    the object is taken, and a stale one only costs a 409 on the next write.
    """
    try:
        return int(candidate) < int(current)
    except ValueError:
        return False


def parse_partition(body: Mapping[str, Any]) -> tuple[PartitionInput | None, str | None]:
    """The decision input of a Partition object, or why it cannot be decided."""
    try:
        meta = metadata_of(dict(body))
        spec = PartitionSpec.model_validate(body.get("spec") or {})
        raw = body.get("status")
        status = PartitionStatus.model_validate(raw) if raw else None
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'spec'}: {e['msg']}" for e in exc.errors()
        )
        return None, f"invalid Partition: {problems}"
    if spec.name != meta.name:
        return None, (
            f"the name must be {spec.name!r} (<topic>-<partition>): brokers and heartbeats "
            "know a partition by that name"
        )
    return (
        PartitionInput(
            spec=spec,
            status=status,
            generation=meta.generation if meta.generation is not None else 1,
            resource_version=meta.resource_version or "",
        ),
        None,
    )


def _created(body: Mapping[str, Any]) -> str:
    """The object's creationTimestamp (RFC 3339, so it sorts as text); "" when it has none."""
    meta = body.get("metadata")
    if not isinstance(meta, Mapping):
        return ""
    return ObjectMeta.model_validate(meta).creation_timestamp or ""


def _claim_order(body: Mapping[str, Any]) -> tuple[bool, bool, str, str]:
    """The order in which Partitions read at start claim their names: those whose status
    does not say they waited for the name (the ones served before, so a restart moves no
    name), then the oldest, then by namespace; objects without a creation time last."""
    status = _status_of(body)
    ready = status.condition(ConditionType.READY) if status is not None else None
    waited = ready is not None and ready.reason == NAME_CONFLICT
    created = _created(body)
    meta = body.get("metadata")
    namespace = str(meta.get("namespace") or "") if isinstance(meta, Mapping) else ""
    return waited, created == "", created, namespace


def _status_of(body: Mapping[str, Any]) -> PartitionStatus | None:
    """The object's status, None when it has none or none that is valid."""
    raw = body.get("status")
    if not raw:
        return None
    try:
        return PartitionStatus.model_validate(raw)
    except ValidationError:
        return None


def _same_state(a: PartitionInput, b: PartitionInput) -> bool:
    """Whether two reads of a Partition give `decide` the same input but for resourceVersion."""
    return (a.spec, a.status, a.generation) == (b.spec, b.status, b.generation)


def _needs_assignment(p: PartitionInput) -> bool:
    return not (p.spec.replicas or (p.status is not None and p.status.replicas))


def write_kind(decided_from: PartitionInput | None, decision: Decision) -> WriteKind:
    """The budget's kind of a status write: a new leader or leaderEpoch (none included) is an
    election, any other state change a state change, the rest a refresh."""
    if not decision.material:
        return WriteKind.REFRESH
    before = decided_from.status if decided_from is not None else None
    after = decision.status
    led = (before.leader, before.leader_epoch) if before is not None else (None, 0)
    leads = (after.leader, after.leader_epoch) if after is not None else led
    return WriteKind.ELECTION if leads != led else WriteKind.STATE


_EVENT_METRICS: Final = {
    EventReason.LEADER_ELECTED: ("elections", {"kind": "clean"}),
    EventReason.UNCLEAN_LEADER_ELECTION: ("elections", {"kind": "unclean"}),
    EventReason.UNCLEAN_RECOVERY: ("elections", {"kind": "recovery"}),
    EventReason.PREFERRED_LEADER_ELECTED: ("elections", {"kind": "preferred"}),
    EventReason.ISR_SHRUNK: ("isr_changes", {"change": "shrink"}),
    EventReason.ISR_EXPANDED: ("isr_changes", {"change": "expand"}),
    EventReason.BROKER_FENCED: ("brokers_fenced", {}),
    EventReason.PARTITION_OFFLINE: ("offline", {}),
}


class Reconciler:
    def __init__(
        self,
        settings: OperatorSettings,
        kube: KubeClient,
        metrics: Metrics,
        *,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        cpu: Callable[[], float] = time.thread_time,
    ) -> None:
        self.settings = settings
        self.kube = kube
        self.metrics = metrics
        self._clock = clock
        self._monotonic = monotonic
        self._cpu = cpu
        """CPU time of the thread the event loop runs on (s): what it spent running."""
        self._running_at: tuple[float, float] | None = None
        """When this process last noted that it runs (monotonic s), and the event loop's
        CPU time then: `observe_clock`."""
        self.core: ControllerCore | None = None
        self.entries: dict[str, Entry] = {}
        self.inputs: dict[str, PartitionInput] = {}
        """The decidable Partitions by name: what heartbeat answers and assignment read."""
        self.dirty: set[str] = set()
        self.in_flight: set[str] = set()
        self.after_write: set[str] = set()
        """Partitions to decide once their write under way is answered. Kept apart from
        `dirty`: a pass looks at each dirty name, and after a failure thousands of
        Partitions can have a write out while every answer wakes a pass."""
        self.conditions = ConditionCounts()
        """How many Partitions served have each counted condition True (for the metrics)."""
        self.claims = NameClaims()
        """Which namespace serves each Partition name (brokers know partitions by name)."""
        self.unserved: dict[tuple[str, str], Obj] = {}
        """(namespace, name) -> the latest read of a Partition whose name another holds."""
        self._unserved_queue: asyncio.Queue[tuple[str, str]] = asyncio.Queue()
        self._unserved_queued: set[tuple[str, str]] = set()
        self._planned: dict[str, PartitionInput] = {}
        """Assignments decided and being written (see `_tick`)."""
        self._wake = asyncio.Event()
        self._write_queue: asyncio.PriorityQueue[tuple[int, int, _Write]] = asyncio.PriorityQueue()
        self._write_seq = 0
        self._workers: list[asyncio.Task[None]] = []
        self._refresh_queue: asyncio.PriorityQueue[tuple[float, int, str]] = asyncio.PriorityQueue()
        """(time of the last write, sequence, name): the longest unrefreshed first."""
        self._refresh_queued: set[str] = set()
        """Names queued for a refresh or being refreshed: a sweep does not queue them again."""
        self._refresh_seq = 0
        self.throttle = WriteThrottle(
            WriteBudget(settings.api_writes_per_second, settings.api_write_burst, monotonic()),
            monotonic,
        )
        self._material = 0
        """Material writes queued or running: refreshes and Events wait while there are any."""
        self._material_idle = asyncio.Event()
        self._material_idle.set()
        self._events: asyncio.Queue[tuple[Obj, Event]] = asyncio.Queue(maxsize=MAX_QUEUED_EVENTS)
        self._closed = False
        self._term = 0
        """Bumped on every activation and deactivation: writes of an earlier term stop."""
        self._next_sweep = 0.0
        self._next_full = 0.0
        self._audit: deque[str] = deque()
        """The rest of the current round of the full pass, decided a step at a time."""
        self._audit_step = 0
        self.watched: dict[str, int] = {}
        """Partitions that are not quiet, with when each is next decided if nothing
        changes (`ControllerCore.wake_ms`, this controller's clock; 0: every pass)."""
        self._refresh_at: dict[str, float] = {}
        """Monotonic time a skipped refresh falls due, per Partition."""
        self._live: tuple[int, ...] = ()
        self._in_grace = False
        self.last_loop = monotonic()

    # -- state ------------------------------------------------------------------------------

    @property
    def active(self) -> bool:
        return self.core is not None

    def now_ms(self) -> int:
        """The time, for anything that judges liveness: a stall of this process since it
        last looked is noted first (`observe_clock`)."""
        self.observe_clock()
        return self._wall_ms()

    def _wall_ms(self) -> int:
        return int(self._clock() * 1000)

    def healthy(self) -> bool:
        """The loop has come round recently (it wakes at least once per reconcile interval)."""
        limit = max(5.0, 10 * self.settings.reconcile_interval_ms / 1000)
        return self._monotonic() - self.last_loop < limit

    def observe_clock(self) -> None:
        """Note that this process runs. After a stall (the process stopped, starved or
        throttled longer than `stall_threshold_ms`), brokers' silence during it is not
        counted (`Liveness.paused`): their heartbeats were waiting for this process, and
        fencing them all at once would be an outage of this process's making. Called before
        anything that judges liveness, and every `STALL_CHECK_INTERVAL_MS` while idle.

        A stall is time the event loop did not run: the time since the last look less
        the CPU time its thread spent meanwhile. A loop that was late because it was busy
        ran all along: brokers' heartbeats may wait in its socket all the same, so their
        silence then is not counted either, but only for a while after each was last
        heard (`Liveness.late`). Taken for a stall, a controller busy for good (as one at
        10,000 Partitions under writes was) forgave every silence and never fenced a dead
        broker."""
        mono, cpu = self._monotonic(), self._cpu()
        seen, self._running_at = self._running_at, (mono, cpu)
        core = self.core
        if core is None or seen is None:
            return
        gap_ms = int((mono - seen[0]) * 1000)
        threshold = stall_threshold_ms(core.liveness.session_timeout_ms)
        if gap_ms <= threshold:
            return
        stalled_ms = gap_ms - max(0, int((cpu - seen[1]) * 1000))
        now = self._wall_ms()
        if stalled_ms <= threshold:
            core.liveness = core.liveness.late(now - gap_ms, now)
            self.metrics.busy_loops.inc()
            log.warning(
                "operator loop late",
                lateMs=gap_ms,
                ranMs=gap_ms - stalled_ms,
                why="it was busy: brokers' silence meanwhile is forgiven only until "
                f"{LATE_SILENCE_LIMIT} session timeouts after each was last heard",
            )
            return
        # Which part of the gap it ran in is not known: all of it is forgiven.
        core.liveness = core.liveness.paused(now - gap_ms, now)
        self.metrics.stalls.inc()
        log.warning(
            "operator stalled",
            stalledMs=stalled_ms,
            lateMs=gap_ms,
            sessionTimeoutMs=core.liveness.session_timeout_ms,
            brokers=sorted(core.liveness.sessions),
            why="brokers' silence while this process did not run is not counted against them",
        )

    async def _watch_clock(self) -> None:
        while True:
            self.observe_clock()
            await asyncio.sleep(STALL_CHECK_INTERVAL_MS / 1000)

    def heartbeat_ages(self) -> dict[int, float]:
        core = self.core
        if core is None:
            return {}
        view = core.liveness.view(self.now_ms())
        ages = {}
        for broker in core.liveness.sessions:
            silence = view.silence_ms(broker)
            if silence is not None:
                ages[broker] = max(0, silence) / 1000
        return ages

    def broker_states(self) -> dict[int, BrokerState]:
        """Live or fenced, for each broker this replica has heard from (none while standing
        by: only the acting replica knows)."""
        core = self.core
        if core is None:
            return {}
        view = core.liveness.view(self.now_ms())
        return {broker: view.state(broker) for broker in sorted(core.liveness.sessions)}

    def condition_counts(self) -> dict[ConditionType, int]:
        """Partitions with each counted condition True (none while standing by: a replica
        standing by is not told of changes, and what it last read may be stale)."""
        return self.conditions.counts() if self.core is not None else {}

    async def activate(self) -> None:
        """Start acting: read every Partition, start a new ControllerCore (and its grace period)."""
        if self._closed:
            return
        objs = await self.kube.list_partitions(self.settings.namespaces)
        self.entries.clear()
        self.inputs.clear()
        self.dirty.clear()
        self.after_write.clear()
        self.claims.clear()
        self.conditions.clear()
        self.unserved.clear()
        # Of two Partitions with one name, the one served before keeps it, else the older.
        for obj in sorted(objs, key=_claim_order):
            self.observe(obj)
        self._term += 1
        self.core = ControllerCore.start(
            self.now_ms(),
            self.settings.broker_session_timeout_ms,
            self.settings.rebalance,
            self.settings.heartbeat_interval_ms,
        )
        self._next_sweep = 0.0
        self._next_full = 0.0
        self._audit.clear()
        self.watched.clear()
        self._refresh_at.clear()
        self._live = ()
        self._in_grace = True
        self.metrics.active.set(1)
        self.metrics.partitions.set(len(self.entries))
        log.info(
            "acting",
            partitions=len(self.entries),
            graceMs=self.settings.broker_session_timeout_ms,
        )
        self._wake.set()

    def deactivate(self, why: str) -> None:
        if self.core is None:
            return
        self.core = None
        self._term += 1
        self.metrics.active.set(0)
        log.info("standing by", reason=why)

    # -- Partitions from the API server ---------------------------------------------------

    def observe(self, body: Mapping[str, Any], *, mark: bool = True) -> None:
        """Take a Partition as read from the API server (watch, list, get or write response)."""
        meta = metadata_of(dict(body))
        name = meta.name or ""
        namespace = meta.namespace or ""
        uid = meta.uid or ""
        rv = meta.resource_version or ""
        if not name:
            return
        serving = self.claims.claim(name, namespace, _created(body))
        if serving != namespace:
            # Brokers know partitions by name alone: one name, one Partition.
            self._hold(namespace, name, body, serving, check=mark)
            return
        old = self.entries.get(name)
        if (
            old is not None
            and old.uid == uid
            and (old.resource_version == rv or _older(rv, old.resource_version))
        ):
            return
        decided, problem = parse_partition(body)
        if problem is not None and (old is None or old.problem != problem):
            log.error(
                "cannot decide partition", partition=name, namespace=namespace, problem=problem
            )
        entry = Entry(namespace, name, uid, rv, json_copy(dict(body)), decided, problem)
        if old is not None and old.uid == uid:
            entry.last_write = old.last_write
            if meta.generation != metadata_of(old.body).generation:
                log.info(
                    "partition spec changed",
                    partition=name,
                    namespace=namespace,
                    generation=meta.generation,
                    changes=spec_changes(old.body.get("spec"), body.get("spec")),
                )
        else:
            spec = body.get("spec")
            log.info(
                "partition observed",
                partition=name,
                namespace=namespace,
                generation=meta.generation,
                spec=spec if isinstance(spec, dict) else None,
            )
        self.entries[name] = entry
        self.conditions.set(name, decided.status if decided is not None else None)
        if decided is None:
            self.inputs.pop(name, None)
        else:
            self.inputs[name] = decided
        self.metrics.partitions.set(len(self.entries))
        if mark:
            self._mark(name)

    def _hold(
        self, namespace: str, name: str, body: Mapping[str, Any], serving: str, *, check: bool
    ) -> None:
        """Keep the latest read of a Partition not served because `serving` holds its name;
        `check`: see that its status says so."""
        key = (namespace, name)
        meta = metadata_of(dict(body))
        held = self.unserved.get(key)
        if held is None:
            log.error(
                "partition name served from another namespace; this one is not assigned",
                partition=name,
                namespace=namespace,
                servedNamespace=serving,
            )
        else:
            was = metadata_of(held)
            rv, held_rv = meta.resource_version or "", was.resource_version or ""
            if was.uid == meta.uid and (rv == held_rv or _older(rv, held_rv)):
                return
        self.unserved[key] = json_copy(dict(body))
        if check and key not in self._unserved_queued:
            self._unserved_queued.add(key)
            self._unserved_queue.put_nowait(key)

    def forget(self, namespace: str, name: str, uid: str | None = None) -> None:
        held = self.unserved.get((namespace, name))
        if held is not None:
            if uid and metadata_of(held).uid != uid:
                return
            del self.unserved[(namespace, name)]
            self.claims.release(name, namespace)
            log.info("partition forgotten", partition=name, namespace=namespace)
            return
        old = self.entries.get(name)
        if old is None or old.namespace != namespace or (uid and old.uid != uid):
            return
        del self.entries[name]
        self.conditions.forget(name)
        self.inputs.pop(name, None)
        self.dirty.discard(name)
        self.after_write.discard(name)
        self.watched.pop(name, None)
        self._refresh_at.pop(name, None)
        self.metrics.partitions.set(len(self.entries))
        log.info("partition forgotten", partition=name, namespace=namespace)
        heir = self.claims.release(name, namespace)
        body = self.unserved.pop((heir, name), None) if heir is not None else None
        if body is not None:
            log.warning(
                "partition name now served from another namespace",
                partition=name,
                namespace=heir,
                releasedBy=namespace,
            )
            self.observe(body)

    def _mark(self, name: str) -> None:
        if name in self.in_flight:
            self.after_write.add(name)  # `_write` marks it when answered
            return
        self.dirty.add(name)
        self._wake.set()

    # -- heartbeats -----------------------------------------------------------------------

    def heartbeat(self, heartbeat: BrokerHeartbeat) -> HeartbeatResponse:
        """Record a broker's heartbeat and answer with its persisted assignments."""
        core = self.core
        if core is None:
            self.metrics.heartbeats.inc(outcome="standby")
            raise StandbyError(
                "this operator replica is standing by; the active replica answers heartbeats",
                identity=self.settings.identity,
            )
        problem = heartbeat_problem(heartbeat, self.now_ms(), self.settings.heartbeat_bounds)
        if problem is not None:
            raise InvalidRequestError(problem)
        response, result = core.on_heartbeat(heartbeat, self.now_ms(), self.inputs)
        outcome = result.outcome
        self.metrics.heartbeats.inc(outcome=str(outcome))
        if outcome is not HeartbeatOutcome.RENEWED:
            log.info(
                "broker heartbeat",
                outcome=str(outcome),
                broker=heartbeat.broker_id,
                brokerEpoch=heartbeat.broker_epoch,
                previousBrokerEpoch=result.previous_broker_epoch,
                address=heartbeat.address,
            )
        # Reports that changed (only those travel), and every Partition of a new process.
        for name in core.take_changed():
            if name in self.inputs:
                self._mark(name)
        self._progressed(core.take_progressed())
        return response

    def _progressed(self, names: set[str]) -> None:
        """Partitions whose reports moved in offsets alone: a status refresh is all they
        may need, so they wait for one (decided when written) instead of a decision now.
        Those decided every pass anyway (`watched`) or about to be are left alone."""
        mono = self._monotonic()
        refresh = self.settings.status_refresh_interval_ms / 1000
        for name in names:
            entry = self.entries.get(name)
            if entry is None or entry.input is None or name in self.dirty or name in self.watched:
                continue
            if name in self.in_flight:
                self._mark(name)  # decided again once the write is answered
            elif mono - entry.last_write >= refresh:
                self._queue_refresh(entry)
            else:
                due = entry.last_write + refresh
                self._refresh_at[name] = min(self._refresh_at.get(name, due), due)

    # -- the loop ---------------------------------------------------------------------------

    async def run(self) -> None:
        self._workers = [
            asyncio.create_task(self._writer(), name=f"status writer {i}")
            for i in range(self.settings.write_concurrency)
        ]
        self._workers += [
            asyncio.create_task(self._refresher(), name=f"status refresher {i}")
            for i in range(max(1, self.settings.write_concurrency // 2))
        ]
        self._workers += [
            asyncio.create_task(self._event_poster(), name=f"event poster {i}")
            for i in range(EVENT_POSTERS)
        ]
        self._workers.append(
            asyncio.create_task(self._unserved_writer(), name="name conflict writer")
        )
        self._workers.append(asyncio.create_task(self._watch_clock(), name="clock watch"))
        try:
            while not self._closed:
                try:
                    async with asyncio.timeout(self._next_wait()):
                        await self._wake.wait()
                except TimeoutError:
                    pass
                self._wake.clear()
                self.last_loop = self._monotonic()
                if self.core is not None:
                    self._tick(self.core)
        finally:
            await cancel_and_wait(self._workers)

    def _next_wait(self) -> float:
        interval = self.settings.reconcile_interval_ms / 1000
        core = self.core
        if core is None:
            return interval
        wait = max(0.0, self._next_sweep - self._monotonic())
        now = self.now_ms()
        liveness = core.liveness
        deadlines = [liveness.started_ms + liveness.session_timeout_ms]
        deadlines += [
            s.last_heartbeat_ms + liveness.session_timeout_ms
            for s in liveness.sessions.values()
            if not s.expired
        ]
        # Wake just after the first session that would expire: liveness fences only
        # a broker silent for more than the timeout.
        upcoming = [d - now + 1 for d in deadlines if d - now + 1 > 0]
        if upcoming:
            wait = min(wait, min(upcoming) / 1000)
        return min(wait, interval)

    def _audited(self, mono: float) -> set[str]:
        """This sweep's step of the full pass: every Partition once per full reconcile
        interval, spread over it, at most `full_reconcile_rate` a second."""
        interval = self.settings.full_reconcile_interval_ms / 1000
        if not self._audit and mono >= self._next_full:
            self._audit = deque(self.entries)
            self._next_full = mono + interval
            sweep = self.settings.reconcile_interval_ms / 1000
            per_second = min(len(self._audit) / interval, self.settings.full_reconcile_rate)
            self._audit_step = max(1, math.ceil(per_second * sweep))
        step = min(self._audit_step, len(self._audit))
        return {self._audit.popleft() for _ in range(step)}

    def _tick(self, core: ControllerCore) -> None:
        now = self.now_ms()
        mono = self._monotonic()
        view = core.liveness.view(now)
        live = view.live_brokers()
        in_grace = view.in_grace
        full = not self._next_full or live != self._live or in_grace != self._in_grace
        if live != self._live:
            log.info("live brokers", brokers=list(live), before=list(self._live))
        if self._in_grace and not in_grace:
            # From now on a broker not heard from is fenced, not waited for.
            log.info("grace period over", brokers=list(live))
        self._live = live
        self._in_grace = in_grace
        news = self.dirty
        woken: set[str] = set()
        audited: set[str] = set()
        if full:
            names = list(self.entries)
            self._next_full = mono + self.settings.full_reconcile_interval_ms / 1000
            self._next_sweep = mono + self.settings.reconcile_interval_ms / 1000
            self._audit.clear()
            self.dirty = set()
        elif mono >= self._next_sweep:
            # Quiet Partitions (a leader whose followers are all caught up, nothing
            # proposed) change with news only: their reports, their resource or a broker
            # session. The others run lag clocks: each is decided when a lag could pass
            # its limit or its refresh falls due, and those waiting on a leader every pass.
            self._next_sweep = mono + self.settings.reconcile_interval_ms / 1000
            woken = {n for n, at in self.watched.items() if at <= now}
            due = {n for n, at in self._refresh_at.items() if at <= mono}
            audited = self._audited(mono)
            names = sorted(news | woken | due | audited)
            self.dirty = set()
        else:
            names = sorted(news)
            self.dirty = set()
        moves = core.plan_preferred(now, self.inputs)
        for move in moves:
            log.info(
                "preferred leader election",
                partition=move.name,
                leader=move.source,
                leaderEpoch=move.leader_epoch,
                preferred=move.target,
            )
        moved = {m.name for m in moves}
        if moves:
            names = sorted({*names, *moved})
        started = time.perf_counter()
        # Assignment reads every other Partition's replicas; it must also see the
        # assignments decided but not yet written, or Partitions created together
        # would all be placed from the same picture of the load.
        others = ChainMap(self._planned, self.inputs)
        refresh = self.settings.status_refresh_interval_ms / 1000
        writes: list[tuple[WriteKind, Entry, Decision]] = []
        for name in names:
            entry = self.entries.get(name)
            if entry is None or entry.input is None:
                continue
            if name in self.in_flight:
                self.after_write.add(name)
                continue
            p = entry.input
            assigning = _needs_assignment(p)
            decision = core.decide(name, p, now, others if assigning else None)
            self.metrics.decisions.inc(cause=_cause(name, full, news, woken, moved, audited))
            refresh_only = decision.status is not None and not decision.material
            at = core.next_look_ms(
                name,
                p,
                decision,
                now,
                self.settings.status_refresh_interval_ms,
                # Queued below or at `_refresh_at`, or waiting for the write budget.
                refresh_pending=refresh_only or name in self._refresh_queued,
            )
            if at is None:
                self.watched.pop(name, None)
            else:
                self.watched[name] = at
            if decision.status is None:
                self._refresh_at.pop(name, None)
                continue
            if not decision.material:
                if mono - entry.last_write >= refresh:
                    self._refresh_at.pop(name, None)
                    self._queue_refresh(entry)
                else:
                    self._refresh_at[name] = entry.last_write + refresh
                continue
            self._refresh_at.pop(name, None)
            if assigning:
                self._planned[name] = PartitionInput(
                    p.spec, decision.status, p.generation, p.resource_version
                )
            writes.append((write_kind(p, decision), entry, decision))
        if full:
            self.metrics.sweep_seconds.set(time.perf_counter() - started)
        self.metrics.partitions_watched.set(len(self.watched))
        for kind, entry, decision in writes:
            self.in_flight.add(entry.name)
            self._material += 1
            self._material_idle.clear()
            # Partitions whose leader changes are written first, also before writes
            # queued by earlier passes: without a leader they take no writes at all.
            self._write_seq += 1
            write = _Write(entry, decision, self._term)
            self._write_queue.put_nowait((kind.priority, self._write_seq, write))

    async def _writer(self) -> None:
        while True:
            _, _, w = await self._write_queue.get()
            await self._write(w.entry, w.decision, w.term, material=True)

    def _queue_refresh(self, entry: Entry) -> None:
        if entry.name not in self._refresh_queued:
            self._refresh_queued.add(entry.name)
            self._refresh_seq += 1
            self._refresh_queue.put_nowait((entry.last_write, self._refresh_seq, entry.name))

    def _refresh_due(self, name: str) -> tuple[ControllerCore, Entry] | None:
        core = self.core
        entry = self.entries.get(name)
        if core is None or entry is None or entry.input is None or name in self.in_flight:
            return None
        refresh = self.settings.status_refresh_interval_ms / 1000
        if self._monotonic() - entry.last_write < refresh:
            return None
        return core, entry

    async def _refresher(self) -> None:
        """Write due refreshes, a few at a time, deciding each again at the moment of writing.

        Refreshes queue here instead of being written from the sweep: a thousand of
        them falling due together must not stand in front of an election, nor hold
        their Partitions "in flight" (undecidable) while they wait for a slot or for
        the write budget.
        """
        while True:
            _, _, name = await self._refresh_queue.get()
            try:
                await self._material_idle.wait()
                due = self._refresh_due(name)
                if due is None:
                    continue
                waited = await self.throttle.acquire(WriteKind.REFRESH, due[1].last_write)
                # The budget may have kept it waiting long: everything may have changed.
                decided = self._decide_refresh(name)
                if decided is None:
                    self.throttle.give_back()
                    continue
                entry, decision = decided
                self._count_write(WriteKind.REFRESH, waited)
                self.in_flight.add(name)
                await self._write(entry, decision, self._term, granted=True)
            finally:
                self._refresh_queued.discard(name)

    def _decide_refresh(self, name: str) -> tuple[Entry, Decision] | None:
        """The refresh to write now, if the Partition is still due and has one."""
        due = self._refresh_due(name)
        if due is None:
            return None
        core, entry = due
        p = entry.input
        assert p is not None
        others = ChainMap(self._planned, self.inputs) if _needs_assignment(p) else None
        decision = core.decide(name, p, self.now_ms(), others)
        self.metrics.decisions.inc(cause="refresh")
        if decision.status is None:
            return None
        return entry, decision

    async def _take(self, kind: WriteKind, order: float = 0.0) -> None:
        """Wait until the API write budget lets one write of `kind` go."""
        self._count_write(kind, await self.throttle.acquire(kind, order))

    def _count_write(self, kind: WriteKind, waited: float) -> None:
        self.metrics.api_writes.inc(kind=str(kind))
        self.metrics.api_write_wait.inc(waited, kind=str(kind))

    def count_waiting(self) -> None:
        """Set the gauges of writes waiting for the budget (at scrape time)."""
        budget = self.throttle.budget
        now = self._monotonic()
        for kind in WriteKind:
            self.metrics.api_writes_waiting.set(budget.waiting_of(kind), kind=str(kind))
            oldest = budget.oldest(kind)
            age = 0.0 if oldest is None else max(0.0, now - oldest)
            self.metrics.api_write_queue_age.set(age, kind=str(kind))

    async def close(self) -> None:
        """Stop the loop and every write and event post in flight."""
        self.deactivate("closing")
        self._closed = True
        self._wake.set()
        await cancel_and_wait(self._workers)

    # -- writes -----------------------------------------------------------------------------

    async def _write(
        self,
        entry: Entry,
        decision: Decision,
        term: int,
        *,
        material: bool = False,
        granted: bool = False,
    ) -> None:
        """`granted`: the first attempt already has its token from the write budget."""
        name = entry.name
        try:
            await self._write_until_settled(entry, decision, term, granted)
        except (aiohttp.ClientError, TimeoutError) as exc:
            self.metrics.write_errors.inc(status="network")
            log.warning("status write failed", partition=name, error=repr(exc))
        finally:
            self.in_flight.discard(name)
            self._planned.pop(name, None)
            if name in self.after_write:
                self.after_write.discard(name)
                self.dirty.add(name)
            if name in self.dirty:
                # Something came up while the write was out: decide it now.
                self._wake.set()
            if material:
                self._material -= 1
                if self._material == 0:
                    self._material_idle.set()

    async def _write_until_settled(
        self, entry: Entry, decision: Decision, term: int, granted: bool
    ) -> None:
        name = entry.name
        conflicts = 0
        while conflicts <= MAX_CONFLICT_RETRIES:
            if term != self._term or decision.status is None:
                return
            if decision.resource_version is None:
                return
            kind = write_kind(entry.input, decision)
            if not granted:
                await self._take(kind)
                if term != self._term:
                    return
            granted = False
            status = decision.status.model_dump(mode="json", by_alias=True)
            try:
                written = await self.kube.replace_status(
                    entry.body, status, decision.resource_version
                )
            except TooManyRequestsError as exc:
                # The same write again once the quiet the API server asked for is over
                # (every other write waits for it too).
                self._pushed_back(exc, kind, name)
                continue
            except ConflictError:
                conflicts += 1
                self.metrics.conflicts.inc()
                log.info(
                    "status write conflict; deciding again",
                    partition=name,
                    resourceVersion=decision.resource_version,
                )
                fresh = await self.kube.get_partition(entry.namespace, name)
                if fresh is None:
                    self.forget(entry.namespace, name, entry.uid)
                    return
                self.observe(fresh, mark=False)
                core = self.core
                current = self.entries.get(name)
                if term != self._term or core is None or current is None or current.input is None:
                    return
                decided_from, entry = entry.input, current
                p = current.input
                if decided_from is not None and _same_state(decided_from, p):
                    # Only metadata changed (kopf's annotations, labels): the inputs are
                    # the ones decided on, and so is the decision. Deciding again could
                    # place a new Partition elsewhere, from a picture of the load that
                    # already counts this decision's placement.
                    decision = replace(decision, resource_version=p.resource_version)
                    continue
                others = ChainMap(self._planned, self.inputs) if _needs_assignment(p) else None
                decision = core.decide(name, p, self.now_ms(), others)
                self.metrics.decisions.inc(cause="conflict")
                if decision.status is not None and not decision.material:
                    # Someone else just wrote: a refresh can wait for the next sweep.
                    return
                continue
            except NotFoundError:
                self.forget(entry.namespace, name, entry.uid)
                return
            except KubeApiError as exc:
                self.metrics.write_errors.inc(status=str(exc.status))
                log.error(
                    "status write refused",
                    partition=name,
                    status=exc.status,
                    reason=exc.reason,
                    message=exc.message,
                )
                return
            self._written(entry, decision, written)
            return
        # Still conflicting: the next sweep decides it again.
        self.dirty.add(name)

    async def _unserved_writer(self) -> None:
        while True:
            key = await self._unserved_queue.get()
            self._unserved_queued.discard(key)
            try:
                await self._write_name_conflict(*key)
            except (aiohttp.ClientError, TimeoutError) as exc:
                self.metrics.write_errors.inc(status="network")
                log.warning(
                    "status write failed", partition=key[1], namespace=key[0], error=repr(exc)
                )

    async def _write_name_conflict(self, namespace: str, name: str) -> None:
        """Write the NameConflict status of a Partition not served, unless it has it, and
        post the Warning Event once it is written."""
        for _ in range(MAX_CONFLICT_RETRIES + 1):
            body = self.unserved.get((namespace, name))
            serving = self.claims.serving(name)
            if self.core is None or body is None or serving is None or serving == namespace:
                return
            meta = metadata_of(body)
            status = name_conflict_status(
                _status_of(body),
                name=name,
                serving_namespace=serving,
                generation=meta.generation if meta.generation is not None else 1,
                now_ms=self.now_ms(),
            )
            if status is None:
                return
            term = self._term
            await self._take(WriteKind.STATE)
            if term != self._term:
                return
            try:
                written = await self.kube.replace_status(
                    body, status.model_dump(mode="json", by_alias=True), meta.resource_version or ""
                )
            except TooManyRequestsError as exc:
                self._pushed_back(exc, WriteKind.STATE, name)
                continue
            except ConflictError:
                self.metrics.conflicts.inc()
                fresh = await self.kube.get_partition(namespace, name)
                if fresh is None:
                    self.forget(namespace, name, meta.uid)
                    return
                self.observe(fresh, mark=False)
                continue
            except NotFoundError:
                self.forget(namespace, name, meta.uid)
                return
            except KubeApiError as exc:
                self.metrics.write_errors.inc(status=str(exc.status))
                log.error(
                    "status write refused",
                    partition=name,
                    namespace=namespace,
                    status=exc.status,
                    reason=exc.reason,
                    message=exc.message,
                )
                return
            self.observe(written, mark=False)
            self.metrics.status_writes.inc(kind="material")
            event = Event.warning(EventReason.NAME_CONFLICT, name_conflict_message(name, serving))
            log.warning(
                str(event.reason), partition=name, namespace=namespace, message=event.message
            )
            try:
                self._events.put_nowait((written, event))
            except asyncio.QueueFull:
                log.warning("event dropped: too many queued", reason=str(event.reason))
            return

    def _written(self, entry: Entry, decision: Decision, written: Obj) -> None:
        status = decision.status
        assert status is not None
        entry.last_write = self._monotonic()
        self.observe(written, mark=False)
        kind = "material" if decision.material else "refresh"
        self.metrics.status_writes.inc(kind=kind)
        if decision.material:
            ready = status.condition(ConditionType.READY)
            log.info(
                "status written",
                partition=entry.name,
                leader=status.leader,
                leaderEpoch=status.leader_epoch,
                partitionEpoch=status.partition_epoch,
                isr=list(status.isr),
                replicas=list(status.replicas),
                highWatermark=status.high_watermark,
                ready=ready.reason if ready is not None else None,
            )
        for event in decision.events:
            self._record_event(entry, written, status, event)

    def _record_event(
        self, entry: Entry, written: Obj, status: PartitionStatus, event: Event
    ) -> None:
        counted = _EVENT_METRICS.get(event.reason)
        if counted is not None:
            family, labels = counted
            getattr(self.metrics, family).inc(**labels)
        log.info(
            str(event.reason),
            partition=entry.name,
            leader=status.leader,
            leaderEpoch=status.leader_epoch,
            partitionEpoch=status.partition_epoch,
            message=event.message,
        )
        try:
            self._events.put_nowait((written, event))
        except asyncio.QueueFull:
            log.warning("event dropped: too many queued", reason=str(event.reason))

    async def _event_poster(self) -> None:
        while True:
            obj, event = await self._events.get()
            # Status first: Events of a burst wait until its writes are done.
            await self._material_idle.wait()
            for _ in range(MAX_EVENT_PUSH_BACKS + 1):
                await self._take(WriteKind.EVENT)
                if await self._post_event(obj, event):
                    break

    async def _post_event(self, obj: Obj, event: Event) -> bool:
        """Post one Event; False when the API server pushed back (post it again later)."""
        try:
            await self.kube.post_event(
                obj,
                type_=str(event.type),
                reason=str(event.reason),
                message=event.message,
                instance=self.settings.identity,
            )
        except TooManyRequestsError as exc:
            self._pushed_back(exc, WriteKind.EVENT, metadata_of(obj).name or "")
            return False
        except (KubeApiError, aiohttp.ClientError, TimeoutError) as exc:
            log.warning("event not posted", reason=str(event.reason), error=repr(exc))
            return True
        self.metrics.events_posted.inc(reason=str(event.reason))
        return True

    def _pushed_back(self, exc: TooManyRequestsError, kind: WriteKind, name: str) -> None:
        """The API server answered 429: every write waits for the time it asked."""
        self.metrics.api_push_backs.inc(kind=str(kind))
        self.throttle.push_back(exc.retry_after)
        log.warning(
            "api server pushed back",
            partition=name,
            kind=str(kind),
            retryAfterSeconds=exc.retry_after,
            message=exc.message,
        )


def _cause(
    name: str, full: bool, news: set[str], woken: set[str], moved: set[str], audited: set[str]
) -> str:
    """Why a pass decides `name` (the decisions metric's label)."""
    if full:
        return "full"
    if name in news:
        return "news"
    if name in moved:
        return "preferred"
    if name in woken:
        return "wake"
    return "full" if name in audited else "refresh-due"
