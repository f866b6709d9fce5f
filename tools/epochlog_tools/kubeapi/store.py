"""Object storage with resource versions, a change log and watch subscriptions.

Objects live in kmock's `ObjectsArray` (so in-process tests can inspect
`api.objects[resource, namespace, name]` and its history). On top of it this
module keeps what a real API server has and kmock does not: one cluster-wide
resourceVersion counter stamped on every write, a bounded window of recent
changes per resource type so that a watch can resume from a resourceVersion,
and subscriptions that receive every later change.

The window is what a real server's watch cache (and etcd's compaction) keeps: a
watch from a resourceVersion older than the changes still kept is answered with
one `410 Expired` ERROR event ("too old resource version: N (M)"), and the client
lists again for a fresh resourceVersion. It is counted in changes, not time, so
that tests can reach it without waiting.

All methods are synchronous: the emulator runs on one event loop, so each
write, and each "replay then subscribe" of a new watch, is atomic.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Final

from kmock import ObjectsArray, resource

from epochlog.documents import json_copy
from epochlog_tools.kubeapi.errors import expired
from epochlog_tools.kubeapi.registry import ResourceType

WATCH_WINDOW: Final = 1_000
"""Changes kept per resource type for watches that resume (the watch cache's window)."""
HISTORY_KEPT: Final = 8


@dataclass(frozen=True)
class Change:
    """One write as watches see it: `old` is the previous state (None for ADDED)."""

    rv: int
    type: str  # ADDED, MODIFIED, DELETED
    rt_key: tuple[str, str]
    namespace: str | None
    obj: dict[str, Any]
    old: dict[str, Any] | None


@dataclass(eq=False)
class Subscription:
    rt_key: tuple[str, str]
    namespace: str | None
    queue: asyncio.Queue[Change | None] = field(default_factory=asyncio.Queue)

    def wants(self, change: Change) -> bool:
        return change.rt_key == self.rt_key and (
            self.namespace is None or change.namespace == self.namespace
        )


def rt_key(rt: ResourceType) -> tuple[str, str]:
    """Storage identity of a resource type: versions of one group and plural share objects."""
    return (rt.group, rt.plural)


class Store:
    def __init__(self, objects: ObjectsArray, *, window: int = WATCH_WINDOW) -> None:
        if window < 1:
            raise ValueError(f"the watch window must keep at least one change, not {window}")
        self.objects = objects
        self.rv = 0
        self.window = window
        self._logs: dict[tuple[str, str], deque[Change]] = {}
        # Per resource type: the newest resourceVersion whose change is no longer kept.
        self._compacted: dict[tuple[str, str], int] = {}
        self._subscriptions: set[Subscription] = set()

    @staticmethod
    def _key(rt: ResourceType, namespace: str | None, name: str) -> Any:
        return (resource(rt.group, rt.version, rt.plural), namespace, name)

    def next_rv(self) -> str:
        self.rv += 1
        return str(self.rv)

    def get(self, rt: ResourceType, namespace: str | None, name: str) -> dict[str, Any] | None:
        key = self._key(rt, namespace, name)
        if key not in self.objects or self.objects[key].deleted:
            return None
        raw: dict[str, Any] = json_copy(self.objects[key].raw)
        return raw

    def items(self, rt: ResourceType, namespace: str | None) -> list[dict[str, Any]]:
        """Objects of `rt` in `namespace` (None: all), ordered by namespace and name."""
        found = []
        for (res, ns, name), obj in self.objects.items():
            if (res.group, res.plural) != rt_key(rt) or obj.deleted:
                continue
            if namespace is not None and ns != namespace:
                continue
            found.append(((ns or "", name), obj))
        found.sort(key=lambda pair: pair[0])
        return [json_copy(obj.raw) for _, obj in found]

    def _emit(self, change: Change) -> None:
        log = self._logs.setdefault(change.rt_key, deque())
        log.append(change)
        while len(log) > self.window:
            self._compacted[change.rt_key] = log.popleft().rv
        for sub in list(self._subscriptions):
            if sub.wants(change):
                sub.queue.put_nowait(change)

    def write(self, rt: ResourceType, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        """Store `obj` (already stamped with a new resourceVersion) as created or modified."""
        meta = obj["metadata"]
        key = self._key(rt, meta.get("namespace"), meta["name"])
        if key not in self.objects:
            self.objects[key] = json_copy(obj)
        else:
            history = self.objects[key].history
            history.append(json_copy(obj))
            if len(history) > HISTORY_KEPT:
                del history[: len(history) - HISTORY_KEPT]
        self._emit(
            Change(
                int(meta["resourceVersion"]),
                "ADDED" if old is None else "MODIFIED",
                rt_key(rt),
                meta.get("namespace"),
                json_copy(obj),
                old,
            )
        )

    def remove(self, rt: ResourceType, obj: dict[str, Any]) -> None:
        """Delete `obj`; its resourceVersion must already be the deletion's new one."""
        meta = obj["metadata"]
        key = self._key(rt, meta.get("namespace"), meta["name"])
        self.objects[key].delete()
        self._emit(
            Change(
                int(meta["resourceVersion"]),
                "DELETED",
                rt_key(rt),
                meta.get("namespace"),
                json_copy(obj),
                json_copy(obj),
            )
        )

    def forget(self, rt: ResourceType) -> None:
        """Drop all traces of a resource type whose CRD was deleted (its objects are gone)."""
        for key in [k for k in self.objects if (k[0].group, k[0].plural) == rt_key(rt)]:
            del self.objects[key]

    def subscribe(
        self, rt: ResourceType, namespace: str | None, since: int | None
    ) -> tuple[list[Change], Subscription]:
        """Changes after `since` still in the window, and a subscription to the later ones.

        ApiError 410 Expired when changes after `since` are no longer kept.
        """
        replay: list[Change] = []
        sub = Subscription(rt_key(rt), namespace)
        if since is not None and since < self.rv:
            compacted = self._compacted.get(sub.rt_key, 0)
            if since < compacted:
                raise expired(f"too old resource version: {since} ({compacted})")
            log = self._logs.get(sub.rt_key, ())
            replay = [c for c in log if c.rv > since and sub.wants(c)]
        self._subscriptions.add(sub)
        return replay, sub

    def unsubscribe(self, sub: Subscription) -> None:
        self._subscriptions.discard(sub)

    def end_watches(self, key: tuple[str, str]) -> None:
        """End the watches of one resource type: each of its subscribers gets a None."""
        for sub in [s for s in self._subscriptions if s.rt_key == key]:
            sub.queue.put_nowait(None)
            self._subscriptions.discard(sub)

    def close_subscriptions(self) -> None:
        """End every watch (on shutdown): each subscriber gets a None."""
        for sub in self._subscriptions:
            sub.queue.put_nowait(None)
        self._subscriptions.clear()

    def all_objects(self) -> Iterator[tuple[tuple[str, str], str | None, dict[str, Any]]]:
        for (res, ns, _name), obj in list(self.objects.items()):
            if not obj.deleted:
                yield (str(res.group), str(res.plural)), ns, json_copy(obj.raw)
