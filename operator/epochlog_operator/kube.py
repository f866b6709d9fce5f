"""The few Kubernetes API calls the operator makes itself, over aiohttp.

kopf watches the Partitions and keeps the peering object alive; everything the
operator writes goes through here, so that each write has exactly the
precondition it needs:

- status: `PUT .../partitions/{name}/status` carrying the resourceVersion and
  uid of the object the decision was made on. The API server answers 409
  Conflict when the object changed since (or was deleted and created again),
  and the caller re-reads and decides again. A PUT replaces the whole status,
  so nothing decided earlier can survive by being merged in;
- core/v1 Events on a Partition, as `kubectl describe` shows them;
- reads: one Partition, all Partitions in scope, the peering objects (read before one
  is created, so a role without `create` suffices where the object exists).

Credentials are kopf's `ConnectionInfo` (kubeconfig or service account), the
same that kopf itself uses.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, Final, Self
from urllib.parse import quote

import aiohttp
import kopf

from epochlog.objects import (
    API_VERSION,
    Event,
    EventSource,
    ObjectMeta,
    ObjectReference,
    PartitionObject,
    PeeringObject,
    metadata_of,
    status_details,
    to_body,
)
from epochlog.resources import KIND, PLURAL

COMPONENT: Final = "epochlog-operator"
_JSON: Final = "application/json"

Obj = dict[str, Any]


class KubeApiError(Exception):
    """The API server refused a request; `status` is the HTTP status, `reason` its Status reason."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message


class ConflictError(KubeApiError):
    """409: the object changed since it was read, or already exists."""


class NotFoundError(KubeApiError):
    """404: the object (or its namespace, or its resource type) does not exist."""


class TooManyRequestsError(KubeApiError):
    """429: the API server pushes back (API Priority and Fairness, or a max-inflight
    limit) and asks for `retry_after` seconds before the next request."""

    def __init__(self, status: int, reason: str, message: str, retry_after: float) -> None:
        super().__init__(status, reason, message)
        self.retry_after = retry_after


DEFAULT_RETRY_AFTER_S: Final = 1.0
"""What a 429 without a usable Retry-After asks for (the API server sends 1)."""
MAX_RETRY_AFTER_S: Final = 60.0
"""Never quieter than this on one answer's word."""


def retry_after_of(header: str | None, body: Any) -> float:
    """Seconds from a Retry-After header (delay-seconds), else the Status's
    `details.retryAfterSeconds`, else the default; within 0..MAX_RETRY_AFTER_S."""
    candidates = [header, status_details(body).retry_after_seconds]
    for value in candidates:
        if value is None:
            continue
        try:
            seconds = float(str(value).strip())
        except ValueError:
            continue
        if seconds == seconds and seconds >= 0:  # not NaN
            return min(seconds, MAX_RETRY_AFTER_S)
    return DEFAULT_RETRY_AFTER_S


def _raise_for(status: int, body: Any, retry_after: str | None = None) -> None:
    reason = ""
    message = ""
    if isinstance(body, Mapping):
        reason = str(body.get("reason") or "")
        message = str(body.get("message") or "")
    message = message or json.dumps(body)[:500]
    if status == 409:
        raise ConflictError(status, reason or "Conflict", message)
    if status == 404:
        raise NotFoundError(status, reason or "NotFound", message)
    if status == 429:
        raise TooManyRequestsError(
            status, reason or "TooManyRequests", message, retry_after_of(retry_after, body)
        )
    raise KubeApiError(status, reason or "Error", message)


def partitions_path(namespace: str | None, name: str | None = None) -> str:
    scope = f"namespaces/{namespace}/" if namespace else ""
    path = f"/apis/{API_VERSION}/{scope}{PLURAL}"
    return f"{path}/{name}" if name else path


def peering_path(name: str, namespace: str | None) -> str:
    if namespace:
        return f"/apis/kopf.dev/v1/namespaces/{namespace}/kopfpeerings/{name}"
    return f"/apis/kopf.dev/v1/clusterkopfpeerings/{name}"


def _now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class KubeClient:
    """An aiohttp session to the API server; `async with` opens and closes it."""

    def __init__(self, info: kopf.ConnectionInfo, *, timeout_s: float = 10.0) -> None:
        self._info = info
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._session: aiohttp.ClientSession | None = None

    @property
    def server(self) -> str:
        return self._info.server.rstrip("/")

    async def __aenter__(self) -> Self:
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=32, ssl=self._info.as_ssl_context()),
            headers={**self._info.as_http_headers(), "User-Agent": COMPONENT},
            proxy=self._info.proxy_url,
            trust_env=self._info.trust_env,
            timeout=self._timeout,
        )
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def request(
        self, method: str, path: str, body: Any = None, *, content_type: str = _JSON
    ) -> Any:
        if self._session is None:
            raise RuntimeError("the Kubernetes client is not open")
        data = None if body is None else json.dumps(body)
        async with self._session.request(
            method, self.server + path, data=data, headers={"Content-Type": content_type}
        ) as rsp:
            text = await rsp.text()
            try:
                payload = json.loads(text) if text else None
            except ValueError:
                payload = {"message": text[:500]}
            if rsp.status >= 400:
                _raise_for(rsp.status, payload, rsp.headers.get("Retry-After"))
            return payload

    # -- Partitions -----------------------------------------------------------------------

    async def get_partition(self, namespace: str, name: str) -> Obj | None:
        try:
            obj: Obj = await self.request("GET", partitions_path(namespace, name))
        except NotFoundError:
            return None
        return obj

    async def list_partitions(self, namespaces: tuple[str, ...]) -> list[Obj]:
        """Every Partition in the given namespaces, or in all namespaces when none are given."""
        items: list[Obj] = []
        for ns in namespaces or (None,):
            cont = ""
            while True:
                query = "?limit=500" + (f"&continue={quote(cont)}" if cont else "")
                page = await self.request("GET", partitions_path(ns) + query)
                for item in page.get("items") or []:
                    # List items leave out apiVersion and kind on some servers.
                    items.append({**to_body(PartitionObject()), **item})
                cont = (page.get("metadata") or {}).get("continue") or ""
                if not cont:
                    break
        return items

    async def replace_status(
        self, obj: Obj, status: Mapping[str, Any], resource_version: str
    ) -> Obj:
        """Write `status` to `obj` unless it changed since `resource_version` (ConflictError)."""
        meta = metadata_of(obj)
        namespace, name = meta.namespaced_name()
        body = PartitionObject(
            metadata=ObjectMeta(
                name=name,
                namespace=namespace,
                uid=meta.uid,
                resource_version=resource_version,
            ),
            spec=obj.get("spec"),
            status=dict(status),
        )
        path = partitions_path(namespace, name) + "/status"
        result: Obj = await self.request("PUT", path, to_body(body))
        return result

    # -- Events ---------------------------------------------------------------------------

    async def post_event(
        self,
        obj: Obj,
        *,
        type_: str,
        reason: str,
        message: str,
        instance: str,
        kind: str = KIND,
        api_version: str = API_VERSION,
    ) -> None:
        """An Event on `obj` (a Partition unless `kind` and `api_version` say otherwise)."""
        meta = metadata_of(obj)
        namespace, name = meta.namespaced_name()
        now = _now_rfc3339()
        event = Event(
            metadata=ObjectMeta(generate_name=f"{name}.", namespace=namespace),
            involved_object=ObjectReference(
                api_version=api_version,
                kind=kind,
                name=name,
                namespace=namespace,
                uid=meta.uid,
                resource_version=meta.resource_version,
            ),
            type=type_,
            reason=reason,
            # The API server refuses longer messages.
            message=message[:1024],
            source=EventSource(component=COMPONENT),
            reporting_component=COMPONENT,
            reporting_instance=instance[:128],
            first_timestamp=now,
            last_timestamp=now,
        )
        await self.request("POST", f"/api/v1/namespaces/{namespace}/events", to_body(event))

    # -- peering --------------------------------------------------------------------------

    async def get_peering(self, name: str, namespace: str | None) -> Obj | None:
        try:
            obj: Obj = await self.request("GET", peering_path(name, namespace))
        except NotFoundError:
            return None
        return obj

    async def ensure_peering(self, name: str, namespace: str | None) -> None:
        """Create the peering object if it is missing (the CRD must be installed).

        It is read first: where the object is made beforehand (the Helm chart makes it),
        the operator's role needs no `create` on peering objects.
        """
        if await self.get_peering(name, namespace) is not None:
            return
        kind = "KopfPeering" if namespace else "ClusterKopfPeering"
        peering = PeeringObject(kind=kind, metadata=ObjectMeta(name=name, namespace=namespace))
        collection = peering_path(name, namespace).rsplit("/", 1)[0]
        with contextlib.suppress(ConflictError):
            await self.request("POST", collection, to_body(peering))
