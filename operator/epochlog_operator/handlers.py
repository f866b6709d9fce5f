"""kopf handlers for Partitions: they only tell the `Reconciler` what the API server holds.

kopf watches the Partitions (and pauses while another replica has the
peering), and each handler passes the object on: `resume` for objects found
at start, `create` and `update` for new objects and spec changes, `event` for
every other change (status written by another replica, for instance), and
`delete` to forget one. No handler decides or writes anything, and none
returns a value, so kopf never patches a status: the status belongs to the
decisions alone. The delete handler is optional, so kopf puts no finalizer on
Partitions and deleting one is immediate.

Handlers are coroutines: kopf would run plain functions in a thread pool, and
the Reconciler belongs to the event loop.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Final

import kopf
import structlog

from epochlog.protocol.wire import wire_name
from epochlog.resources import GROUP, PLURAL, VERSION
from epochlog_operator.reconciler import Reconciler

log = structlog.get_logger("epochlog.operator.handlers")

ANNOTATIONS_PREFIX: Final = "operator.epochlog.dev"


def kopf_settings(*, peering_lifetime_s: int, identity: str) -> kopf.OperatorSettings:
    settings = kopf.OperatorSettings()
    # kopf's own bookkeeping goes into annotations: the status is pruned to the
    # CRD's schema and is written by the decisions only.
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(
        prefix=ANNOTATIONS_PREFIX
    )
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=ANNOTATIONS_PREFIX, key="last-handled-configuration"
    )
    settings.persistence.finalizer = f"{ANNOTATIONS_PREFIX}/finalizer"
    settings.posting.reporting_component = "epochlog-operator"
    settings.posting.reporting_instance = identity
    settings.peering.lifetime = peering_lifetime_s
    return settings


def build_registry(
    reconciler: Reconciler,
    connection: kopf.ConnectionInfo,
    on_cleanup: Callable[[], Awaitable[None]] | None = None,
) -> kopf.OperatorRegistry:
    """kopf's handlers for one operator; `on_cleanup` runs when kopf stops."""
    registry = kopf.OperatorRegistry()

    @kopf.on.login(registry=registry, id="epochlog-login")
    async def login(**_: Any) -> kopf.ConnectionInfo:
        return connection

    @kopf.on.resume(GROUP, VERSION, PLURAL, registry=registry, id="partition-resumed")
    async def resumed(body: kopf.Body, **_: Any) -> None:
        reconciler.observe(body)

    @kopf.on.create(GROUP, VERSION, PLURAL, registry=registry, id="partition-created")
    async def created(
        body: kopf.Body, name: str, namespace: str | None, spec: kopf.Spec, **_: Any
    ) -> None:
        log.info(
            "partition created",
            partition=name,
            namespace=namespace,
            replication_factor=spec.get(wire_name("replication_factor")),
            replicas=spec.get("replicas"),
        )
        reconciler.observe(body)

    @kopf.on.update(
        GROUP, VERSION, PLURAL, field="spec", registry=registry, id="partition-spec-changed"
    )
    async def updated(
        body: kopf.Body, name: str, namespace: str | None, diff: kopf.Diff, **_: Any
    ) -> None:
        changes = [
            f"{op} {'.'.join(map(str, path))}: {old!r} -> {new!r}" for op, path, old, new in diff
        ]
        log.info("partition spec changed", partition=name, namespace=namespace, changes=changes)
        reconciler.observe(body)

    @kopf.on.delete(
        GROUP, VERSION, PLURAL, optional=True, registry=registry, id="partition-deleted"
    )
    async def deleted(name: str, namespace: str | None, uid: str, **_: Any) -> None:
        reconciler.forget(namespace or "", name, uid)

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

    @kopf.on.cleanup(registry=registry, id="epochlog-cleanup")
    async def cleanup(**_: Any) -> None:
        reconciler.deactivate("operator stopping")
        if on_cleanup is not None:
            await on_cleanup()

    return registry
