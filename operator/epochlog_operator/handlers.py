"""kopf handlers for Partitions and EpochlogUsers: they only tell the `Reconciler` (and the
`UserController`) what the API server holds.

kopf watches the Partitions (and pauses while another replica has the
peering), and one event-watching handler passes every object on: the objects
found at start, new ones, changed ones, and deleted ones (to forget them). No
handler decides or writes anything, so the status belongs to the decisions
alone, and kopf itself writes nothing to a Partition.

Only event-watching handlers, on purpose: kopf's change-detecting handlers
(create, update, resume, delete) keep their bookkeeping in the object (an
annotation patch per create and per spec change, another per object when an
operator starts) and post an Event per handler run. With thousands of
Partitions those are thousands of API writes outside the operator's write
budget (`budget`), in the same burst as the elections. Spec changes are
noticed by the reconciler, which compares generations (`Reconciler.observe`).

For the same reason kopf keeps no diff base (`NoDiffBase`): it builds one per
watch event for change-detecting handlers (a deep copy of the whole object,
status included, whatever handlers there are), about a tenth of the
operator's time during a failover's elections at 1,000 Partitions.

Handlers are coroutines: kopf would run plain functions in a thread pool, and
the Reconciler belongs to the event loop.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Final, cast

import kopf

from epochlog import users
from epochlog.resources import GROUP, PLURAL, VERSION
from epochlog_operator.reconciler import Reconciler
from epochlog_operator.user_controller import UserController

ANNOTATIONS_PREFIX: Final = "operator.epochlog.dev"


class NoDiffBase(kopf.DiffBaseStorage):
    """No essence built, kept or read: only change-detecting handlers diff, and there are
    none."""

    def build(
        self, *, body: kopf.Body, extra_fields: Iterable[Any] | None = None
    ) -> kopf.BodyEssence:
        return cast(kopf.BodyEssence, {})

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        return None

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        return None


def kopf_settings(*, peering_lifetime_s: int) -> kopf.OperatorSettings:
    settings = kopf.OperatorSettings()
    settings.persistence.diffbase_storage = NoDiffBase()
    # No handler needs one, so kopf adds no finalizer (and removes this one if found).
    settings.persistence.finalizer = f"{ANNOTATIONS_PREFIX}/finalizer"
    # The reconciler posts the operator's Events, within the write budget; kopf's own
    # (one per handler run) would not be.
    settings.posting.enabled = False
    settings.peering.lifetime = peering_lifetime_s
    return settings


def build_registry(
    reconciler: Reconciler,
    connection: kopf.ConnectionInfo,
    on_cleanup: Callable[[], Awaitable[None]] | None = None,
    user_controller: UserController | None = None,
) -> kopf.OperatorRegistry:
    """kopf's handlers for one operator; `on_cleanup` runs when kopf stops; EpochlogUsers
    are watched when a `user_controller` keeps them (--manage-users)."""
    registry = kopf.OperatorRegistry()

    @kopf.on.login(registry=registry, id="epochlog-login")
    async def login(**_: Any) -> kopf.ConnectionInfo:
        return connection

    @kopf.on.event(GROUP, VERSION, PLURAL, registry=registry, id="partition-watched")
    async def watched(event: kopf.RawEvent, **_: Any) -> None:
        obj = event.get("object")
        if not isinstance(obj, dict):
            return
        if event.get("type") == "DELETED":
            meta = obj.get("metadata") or {}
            reconciler.forget(
                str(meta.get("namespace") or ""), str(meta.get("name") or ""), meta.get("uid")
            )
        else:
            reconciler.observe(obj)

    if user_controller is not None:
        controller = user_controller

        @kopf.on.event(GROUP, VERSION, users.PLURAL, registry=registry, id="user-watched")
        async def user_watched(event: kopf.RawEvent, **_: Any) -> None:
            obj = event.get("object")
            if not isinstance(obj, dict):
                return
            if event.get("type") == "DELETED":
                meta = obj.get("metadata") or {}
                controller.forget(
                    str(meta.get("namespace") or ""), str(meta.get("name") or ""), meta.get("uid")
                )
            else:
                controller.observe(dict(obj))

    @kopf.on.cleanup(registry=registry, id="epochlog-cleanup")
    async def cleanup(**_: Any) -> None:
        reconciler.deactivate("operator stopping")
        if on_cleanup is not None:
            await on_cleanup()

    return registry
