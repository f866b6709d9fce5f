"""The Kubernetes API as an HTTP handler: kmock's `KubernetesEmulator` with real-server semantics.

kmock provides the HTTP plumbing, request parsing and recording, the discovery
endpoints (`/api`, `/apis`, `/apis/<group>[/<version>]`, fed from the resource
registry here), object storage with history, and the reaction DSL, so tests can
still inject faults (`api["patch", kmock.resource(...)] << 500`) ahead of the
emulated behaviour. kmock's own object handling merges every write into the
object; this class replaces it, for resource paths, with what a real API
server does (see `objects`, `store`): resourceVersion on every write and 409 on
a stale one, the status subresource, `metadata.generation`, finalizers and
deletion timestamps, schema validation with CEL rules, namespaces, Events with
field selectors, immutable Secrets, ServiceAccount tokens (TokenRequest and
TokenReview, `tokens`), watches that resume from a resourceVersion within the window
the store keeps, server-side apply (`apply`), what a DELETE answers (a `Status`
once the object is gone), `Table` output for `kubectl get`, and CRDs as objects
(creating one serves its resource).
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import aiohttp.web
import attrs
import yaml
from kmock import KubernetesEmulator, Request, ResourceInfo, resource
from kmock._internal import dsl, enums, parsing, rendering
from typing_extensions import override

from epochlog.documents import json_copy
from epochlog_tools.kubeapi import errors, objects
from epochlog_tools.kubeapi.apply import ApplyConflicts, apply
from epochlog_tools.kubeapi.errors import ApiError, ErrorKind, FieldError
from epochlog_tools.kubeapi.openapi import openapi_group_version, openapi_index
from epochlog_tools.kubeapi.patches import (
    APPLY,
    STRATEGIC,
    accepted_patch_types,
    apply_patch,
    patch_type,
)
from epochlog_tools.kubeapi.registry import (
    BUILTINS,
    CRDS,
    EVENTS,
    NAMESPACES,
    SECRETS,
    SERVICEACCOUNTS,
    TOKENREVIEWS,
    CrdError,
    ResourceType,
    types_of_crd,
)
from epochlog_tools.kubeapi.selectors import field_matcher, label_matcher
from epochlog_tools.kubeapi.store import WATCH_WINDOW, Change, Store, rt_key
from epochlog_tools.kubeapi.tables import NAME_COLUMN, table
from epochlog_tools.kubeapi.tokens import (
    DEFAULT_EXPIRATION_S,
    ISSUER,
    TokenIssuer,
    request_problems,
    review,
)

DEFAULT_NAMESPACES: Final = ("default", "kube-system", "kube-public", "kube-node-lease")
# Namespaces a real cluster refuses to delete.
_UNDELETABLE: Final = frozenset({"default", "kube-system", "kube-public"})
# Requests kept for inspection (kmock records every request; a dev server runs for hours).
REQUESTS_KEPT: Final = 2000

_RESOURCE_PATH: Final = re.compile(r"/api/v1/.+|/apis/[^/]+/[^/]+/.+")
_OPENAPI_PATH: Final = re.compile(r"/openapi/v3(/.*)?")
_JSON: Final = "application/json"

Matcher = Callable[[Mapping[str, Any]], bool]


@dataclass(frozen=True)
class Route:
    group: str
    version: str
    plural: str
    namespace: str | None = None
    name: str | None = None
    subresource: str | None = None


def parse_route(path: str) -> Route | None:
    """Resource paths: `/api/v1/...` and `/apis/<group>/<version>/...`."""
    parts = [p for p in path.split("/") if p]
    if len(parts) >= 3 and parts[0] == "api":
        group, version, rest = "", parts[1], parts[2:]
    elif len(parts) >= 4 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    namespace = None
    if rest[0] == "namespaces" and len(rest) >= 3:
        namespace, rest = rest[1], rest[2:]
    plural, name = rest[0], rest[1] if len(rest) > 1 else None
    subresource = "/".join(rest[2:]) or None
    return Route(group, version, plural, namespace, name, subresource)


def _header(request: Request, name: str) -> str:
    for key, value in request.headers.items():
        if key.lower() == name.lower():
            return value
    return ""


def _wants_table(request: Request) -> bool:
    return "as=Table" in _header(request, "Accept").replace(" ", "")


def _ok(payload: Any, status: int = 200, warnings: list[str] | None = None) -> rendering.Response:
    # kmock copies a returned Response's headers onto the reaction's own Response, so
    # every header is always given (None leaves it out) lest one leak into the next reply.
    warning = ", ".join("299 - " + json.dumps(w) for w in warnings or [])
    return rendering.Response(
        status=status,
        payload=payload,
        headers={"Content-Type": _JSON, "Warning": warning or None},
    )


def _error(exc: ApiError) -> rendering.Response:
    return _ok(exc.status(), status=exc.code)


def _json_body(request: Request) -> Any:
    content_type = _header(request, "Content-Type").split(";")[0].strip().lower()
    if "protobuf" in content_type or "cbor" in content_type:
        # Clients (kubectl for built-in kinds) fall back to JSON on a 415.
        raise errors.unsupported_media_type(content_type)
    if not request.body:
        return None
    try:
        return json.loads(request.body)
    except ValueError:
        try:
            return yaml.safe_load(request.body)
        except yaml.YAMLError as exc:
            raise errors.bad_request(f"the request body is neither JSON nor YAML: {exc}") from exc


@attrs.define(kw_only=True)
class KubernetesApi(KubernetesEmulator):
    """The emulated API server's request handler; serve it with `kmock.Server` (see `apiserver`).

    `watch_window`: changes kept per resource type for watches that resume (see `store`).
    """

    watch_window: int = attrs.field(default=WATCH_WINDOW)
    _types: dict[tuple[str, str, str], ResourceType] = attrs.field(factory=dict, init=False)
    _store: Store | None = attrs.field(default=None, init=False)
    _listeners: list[Callable[[Request], None]] = attrs.field(factory=list, init=False)
    tokens: TokenIssuer = attrs.field(factory=TokenIssuer, init=False)
    """The service-account key: signs TokenRequests' tokens, checks TokenReviews'."""

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        self._store = Store(self._objects, window=self.watch_window)
        for rt in BUILTINS:
            self._register(rt)
        for ns in DEFAULT_NAMESPACES:
            self.create_object(NAMESPACES, {"metadata": {"name": ns}})
        # Above kmock's own fallbacks, below any reaction a test adds.
        (self.fallback**1)[_RESOURCE_PATH] << self._serve_resource
        (self.fallback**1)["get", _OPENAPI_PATH] << self._serve_openapi

    @property
    def store(self) -> Store:
        assert self._store is not None  # set in __attrs_post_init__
        return self._store

    # -- registry ----------------------------------------------------------------------

    def _register(self, rt: ResourceType) -> None:
        self._types[(rt.group, rt.version, rt.plural)] = rt
        self.resources[resource(rt.group, rt.version, rt.plural)] = ResourceInfo(
            namespaced=rt.namespaced,
            kind=rt.kind,
            singular=rt.singular,
            verbs=set(rt.verbs),
            shortnames=set(rt.short_names),
            categories=set(rt.categories),
            subresources=set(rt.subresources),
        )

    def _unregister(self, rt: ResourceType) -> None:
        self._types.pop((rt.group, rt.version, rt.plural), None)
        self.resources.pop(resource(rt.group, rt.version, rt.plural), None)

    def types(self) -> list[ResourceType]:
        return list(self._types.values())

    def type_of(self, group: str, version: str, plural: str) -> ResourceType:
        rt = self._types.get((group, version, plural))
        if rt is None:
            raise errors.no_such_resource()
        return rt

    @override
    def _get_resources(self) -> list[resource]:
        # Only what is registered: kmock would also announce types of stored objects.
        return [r for r in self._resources if isinstance(r, resource)]

    # -- request entry -------------------------------------------------------------------

    def listen(self, listener: Callable[[Request], None]) -> None:
        """Call `listener(request)` for every request as it arrives, before it is served.

        The requests kept for inspection are trimmed (REQUESTS_KEPT); a test that measures
        how many requests of a kind arrive over a long run counts them here instead.
        """
        self._listeners.append(listener)

    @override
    async def __call__(self, raw_request: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        # kmock's request parser fails on the namespaces collection (`/api/v1/namespaces`),
        # so requests are parsed here; the rest is kmock's handler.
        body = await raw_request.read()
        try:
            k8s = parsing.parse_path(raw_request.path)
        except ValueError:
            route = parse_route(raw_request.path)
            assert route is not None  # only resource paths trip kmock's parser
            k8s = parsing.ParsedPath(route.group, route.version, route.plural)
        try:
            data = json.loads(body) if body else None
        except ValueError:
            data = None
        method = enums.method(raw_request.method)
        request = Request(
            id=len(self._requests),
            raw_request=raw_request,
            url=raw_request.url,
            method=method,
            params=dict(raw_request.query),
            headers=dict(raw_request.headers),
            cookies=dict(raw_request.cookies),
            data=data,
            body=body,
            text=body.decode("utf-8", errors="replace"),
            action=parsing.guess_k8s(k8s, method, dict(raw_request.query)),
            resource=None
            if k8s.group is None
            else resource(group=k8s.group, version=k8s.version, plural=k8s.plural),
            namespace=k8s.namespace,
            name=k8s.name,
            subresource=k8s.subresource,
        )
        for listener in self._listeners:
            listener(request)
        self._requests.append(request)
        self._trim_requests()
        try:
            return await self._handle(request)
        except Exception as exc:
            return await self._render_error(exc)

    def _trim_requests(self) -> None:
        if len(self._requests) > REQUESTS_KEPT:
            del self._requests[: -REQUESTS_KEPT // 2]
        for payload in self._payloads:
            kept = payload._requests
            if len(kept) > REQUESTS_KEPT:
                del kept[: -REQUESTS_KEPT // 2]

    @override
    async def _handle(self, request: rendering.Request) -> aiohttp.web.StreamResponse:
        # KubernetesEmulator._handle is skipped: it merges writes into kmock's objects
        # itself. This is RawHandler._handle, but for how it finds the reactions a request
        # belongs to (`_admits`).
        priorities = [payload.priorities for payload in self._payloads]
        longest = max((len(p) for p in priorities), default=0)
        ranks = [tuple(-p for p in ps) + (0,) * (longest - len(ps)) for ps in priorities]
        for index in sorted(range(len(ranks)), key=lambda i: ranks[i]):
            payload = self._payloads[index]
            if payload._disabled.is_set() or not self._admits(payload._source, request):
                continue
            try:
                return await payload(request)
            except rendering.ReactionMismatchError:  # a mismatch, or a reaction used up
                payload._disabled.set()
            except NotImplementedError:  # matched, but nothing to answer with
                pass
        raise NotImplementedError("no reaction matches the request")

    def _admits(self, view: Any, request: rendering.Request) -> bool:
        """Whether `view` lists `request`, as kmock's `request in view` answers. That scans
        every request kept (REQUESTS_KEPT) through the view's filters, for every reaction,
        on every request: most of a status write's cost. A view that is a chain of filters
        and priorities over this handler (every reaction the emulator and the tests set up)
        is decided by its filters' criteria on this request alone."""
        node = view
        while node is not self:
            if type(node) is dsl.Filter:
                if not node.criteria(request):
                    return False
            elif type(node) is not dsl.Priority:
                return request in view
            node = node._source
        return True

    @override
    async def _serve_server_version(self, request: rendering.Request) -> rendering.Payload:
        return {
            "major": "1",
            "minor": "34",
            "gitVersion": "v1.34.0+epochlog-devcluster",
            "gitTreeState": "clean",
            "platform": "linux/amd64",
        }

    @override
    async def _serve_version(self, request: rendering.Request) -> rendering.Payload:
        # kmock lists subresources with the short names and verbs of their resource, which
        # makes kubectl warn that `part` is ambiguous; a real server lists them bare.
        assert request.resource is not None  # a discovery path always names a group/version
        group, version = request.resource.group, request.resource.version
        served = [rt for rt in self.types() if (rt.group, rt.version) == (group, version)]
        if not served:
            return _error(errors.no_such_resource())
        entries: list[dict[str, Any]] = []
        for rt in sorted(served, key=lambda t: t.plural):
            entries.append(
                {
                    "name": rt.plural,
                    "singularName": rt.singular,
                    "namespaced": rt.namespaced,
                    "kind": rt.kind,
                    "verbs": list(rt.verbs),
                    **({"shortNames": list(rt.short_names)} if rt.short_names else {}),
                    **({"categories": list(rt.categories)} if rt.categories else {}),
                }
            )
            for sub in sorted(rt.subresources):
                if rt is SERVICEACCOUNTS:
                    entries.append(
                        {
                            "name": f"{rt.plural}/{sub}",
                            "singularName": "",
                            "namespaced": True,
                            "group": "authentication.k8s.io",
                            "version": "v1",
                            "kind": "TokenRequest",
                            "verbs": ["create"],
                        }
                    )
                    continue
                entries.append(
                    {
                        "name": f"{rt.plural}/{sub}",
                        "singularName": "",
                        "namespaced": rt.namespaced,
                        "kind": rt.kind,
                        "verbs": ["get", "patch", "update"],
                    }
                )
        return {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": f"{group}/{version}" if group else str(version),
            "resources": entries,
        }

    async def _serve_openapi(self, request: Request) -> rendering.Payload:
        path = request.url.path.rstrip("/")
        if path == "/openapi/v3":
            return openapi_index(self.types())
        gv = path[len("/openapi/v3/") :]
        doc = openapi_group_version(self.types(), gv)
        if doc is None:
            return _error(errors.no_such_resource())
        return doc

    async def _serve_resource(self, request: Request) -> rendering.Response:
        try:
            route = parse_route(request.url.path)
            if route is None:
                raise errors.no_such_resource()
            rt = self.type_of(route.group, route.version, route.plural)
            if route.namespace is not None and not rt.namespaced:
                raise errors.no_such_resource()
            if route.subresource is not None and route.subresource not in rt.subresources:
                raise errors.no_such_resource()
            method = str(request.method.value).upper()
            if rt is TOKENREVIEWS or route.subresource == "token":
                if method != "POST" or (rt is TOKENREVIEWS) != (route.name is None):
                    raise errors.method_not_allowed(
                        f"the server does not allow this method on the requested resource: {method}"
                    )
                if rt is TOKENREVIEWS:
                    return self._token_review(request)
                return self._token_request(route, request)
            if method == "GET":
                if request.params.get("watch") in ("true", "1"):
                    return await self._watch(rt, route, request)
                if route.name is None:
                    return self._list(rt, route, request)
                return self._get(rt, route, request)
            if method == "POST" and route.name is None:
                if rt.namespaced and route.namespace is None:
                    raise errors.method_not_allowed("create needs a namespace in the path")
                return self._create(rt, route, request)
            if method == "PUT" and route.name is not None:
                return self._update(rt, route, request)
            if method == "PATCH" and route.name is not None:
                return self._patch(rt, route, request)
            if method == "DELETE" and route.name is not None and route.subresource is None:
                return self._delete(rt, route, request)
            raise errors.method_not_allowed(
                f"the server does not allow this method on the requested resource: {method}"
            )
        except ApiError as exc:
            return _error(exc)

    # -- ServiceAccount tokens ----------------------------------------------------------

    def _token_request(self, route: Route, request: Request) -> rendering.Response:
        """POST .../serviceaccounts/{name}/token: a signed token for the ServiceAccount."""
        rt = SERVICEACCOUNTS
        account = self._existing(rt, route)
        body = _json_body(request) or {}
        spec = body.get("spec") if isinstance(body, dict) else None
        problems = request_problems(spec)
        if problems:
            raise errors.invalid(rt, route.name or "", problems)
        spec = dict(spec or {})
        seconds = int(spec.get("expirationSeconds", DEFAULT_EXPIRATION_S))
        audiences = list(spec.get("audiences") or [])
        token, expires = self.tokens.issue(
            route.namespace or "",
            route.name or "",
            str(account["metadata"]["uid"]),
            audiences,
            seconds,
        )
        return _ok(
            {
                "kind": "TokenRequest",
                "apiVersion": "authentication.k8s.io/v1",
                "metadata": {
                    "name": route.name,
                    "namespace": route.namespace,
                    "creationTimestamp": None,
                },
                "spec": {
                    "audiences": audiences or [ISSUER],
                    "expirationSeconds": seconds,
                    "boundObjectRef": spec.get("boundObjectRef"),
                },
                "status": {"token": token, "expirationTimestamp": objects.rfc3339_at(expires)},
            },
            status=201,
        )

    def _token_review(self, request: Request) -> rendering.Response:
        """POST /apis/authentication.k8s.io/v1/tokenreviews: who a token stands for."""
        body = _json_body(request) or {}
        spec = body.get("spec") if isinstance(body, dict) else None

        def account_uid(namespace: str, name: str) -> str | None:
            found = self.store.get(SERVICEACCOUNTS, namespace, name)
            return None if found is None else str(found["metadata"].get("uid"))

        return _ok(
            {
                "kind": "TokenReview",
                "apiVersion": "authentication.k8s.io/v1",
                "metadata": {"creationTimestamp": None},
                "spec": spec if isinstance(spec, dict) else {},
                "status": review(self.tokens, spec, account_uid),
            },
            status=201,
        )

    # -- reads ---------------------------------------------------------------------------

    def _get(self, rt: ResourceType, route: Route, request: Request) -> rendering.Response:
        assert route.name is not None
        obj = self.store.get(rt, route.namespace, route.name)
        if obj is None:
            raise errors.not_found(rt, route.name)
        if _wants_table(request):
            return _ok(self._table(rt, [obj], request))
        return _ok(obj)

    def _matcher(self, rt: ResourceType, request: Request, name: str | None = None) -> Matcher:
        labels = label_matcher(request.params.get("labelSelector"))
        fields = field_matcher(
            request.params.get("fieldSelector"), rt.selectable_fields, rt.field_aliases
        )
        return lambda obj: (
            labels(obj)
            and fields(obj)
            and (name is None or (obj.get("metadata") or {}).get("name") == name)
        )

    def _table(
        self, rt: ResourceType, items: list[dict[str, Any]], request: Request, **kw: Any
    ) -> dict[str, Any]:
        return table(
            (NAME_COLUMN, *rt.columns),
            items,
            include_object=request.params.get("includeObject", "Metadata"),
            resource_version=str(self.store.rv),
            **kw,
        )

    def _list(self, rt: ResourceType, route: Route, request: Request) -> rendering.Response:
        match = self._matcher(rt, request)
        items = [o for o in self.store.items(rt, route.namespace) if match(o)]
        token = None
        start = 0
        if request.params.get("continue"):
            try:
                start = int(json.loads(base64.b64decode(request.params["continue"]))["start"])
            except (ValueError, KeyError, TypeError) as exc:
                raise errors.bad_request("invalid continue token") from exc
        limit = int(request.params.get("limit") or 0)
        remaining = None
        if limit > 0 and start + limit < len(items):
            token = base64.b64encode(json.dumps({"start": start + limit}).encode()).decode()
            remaining = len(items) - start - limit
        page = items[start : start + limit] if limit > 0 else items[start:]
        if _wants_table(request):
            return _ok(self._table(rt, page, request, continue_token=token))
        meta: dict[str, Any] = {"resourceVersion": str(self.store.rv)}
        if token:
            meta["continue"] = token
            meta["remainingItemCount"] = remaining
        return _ok(
            {
                "apiVersion": rt.api_version,
                "kind": f"{rt.kind}List",
                "metadata": meta,
                "items": page,
            }
        )

    async def _watch(self, rt: ResourceType, route: Route, request: Request) -> rendering.Response:
        params = request.params
        match = self._matcher(rt, request, name=route.name)
        raw_since = params.get("resourceVersion", "")
        since = None
        if raw_since not in ("", "0"):
            try:
                since = int(raw_since)
            except ValueError as exc:
                raise errors.bad_request(f"invalid resourceVersion {raw_since!r}") from exc
        send_initial = params.get("sendInitialEvents") == "true" or since is None
        bookmarks = params.get("allowWatchBookmarks") == "true"
        as_table = _wants_table(request)
        timeout = float(params["timeoutSeconds"]) if params.get("timeoutSeconds") else None
        try:
            replay, sub = self.store.subscribe(rt, route.namespace, None if send_initial else since)
        except ApiError as exc:
            gone = exc.status()
            return _ok(_once({"type": "ERROR", "object": gone}))
        initial = (
            [o for o in self.store.items(rt, route.namespace) if match(o)] if send_initial else []
        )
        initial_rv = self.store.rv
        first = True

        def encode(kind: str, obj: dict[str, Any]) -> bytes:
            nonlocal first
            if as_table and kind in ("ADDED", "MODIFIED", "DELETED"):
                obj = self._table(rt, [obj], request, with_columns=first)
                first = False
            return json.dumps({"type": kind, "object": obj}).encode() + b"\n"

        def bookmark(rv: int, initial_end: bool) -> bytes:
            meta: dict[str, Any] = {"resourceVersion": str(rv)}
            if initial_end:
                meta["annotations"] = {"k8s.io/initial-events-end": "true"}
            body = {"kind": rt.kind, "apiVersion": rt.api_version, "metadata": meta}
            return json.dumps({"type": "BOOKMARK", "object": body}).encode() + b"\n"

        async def stream() -> AsyncIterator[bytes]:
            try:
                yield b""  # send the headers now: a quiet watch is still a watch
                for obj in initial:
                    yield encode("ADDED", obj)
                if params.get("sendInitialEvents") == "true" and bookmarks:
                    yield bookmark(initial_rv, initial_end=True)
                for logged in replay:
                    event = _translate(logged, match)
                    if event is not None:
                        yield encode(*event)
                loop = asyncio.get_running_loop()
                deadline = None if timeout is None else loop.time() + timeout
                while True:
                    wait = None if deadline is None else max(0.0, deadline - loop.time())
                    try:
                        async with asyncio.timeout(wait):
                            change: Change | None = await sub.queue.get()
                    except TimeoutError:
                        return
                    if change is None:
                        return
                    event = _translate(change, match)
                    if event is not None:
                        yield encode(*event)
            finally:
                self.store.unsubscribe(sub)

        return _ok(stream())

    # -- writes --------------------------------------------------------------------------

    def create_object(
        self,
        rt: ResourceType,
        body: Any,
        namespace: str | None = None,
        *,
        field_validation: str = "Strict",
        dry_run: bool = False,
    ) -> tuple[dict[str, Any], list[str]]:
        """Create an object as a POST would; returns it and the warnings. Raises ApiError."""
        obj = objects.check_identity(rt, json_copy(body), namespace)
        if rt is SECRETS:
            obj = objects.secret_data(obj)
        if rt.namespaced:
            if not namespace:
                raise errors.method_not_allowed("create needs a namespace")
            if self.store.get(NAMESPACES, None, namespace) is None:
                raise errors.not_found(NAMESPACES, namespace)
        obj = objects.prepare_create(rt, obj, "0")
        warnings = objects.validate(rt, obj, field_validation)
        name = obj["metadata"]["name"]
        if self.store.get(rt, namespace if rt.namespaced else None, name) is not None:
            raise errors.already_exists(rt, name)
        new_types: list[ResourceType] = []
        if rt is CRDS:
            new_types = self._crd_types(obj)
            obj["status"] = _crd_status(obj)
        if dry_run:
            return obj, warnings
        obj["metadata"]["resourceVersion"] = self.store.next_rv()
        self.store.write(rt, obj, None)
        for new in new_types:
            self._register(new)
        return obj, warnings

    def _crd_types(self, crd: dict[str, Any]) -> list[ResourceType]:
        try:
            return types_of_crd(crd)
        except CrdError as exc:
            name = str(crd["metadata"].get("name", ""))
            raise errors.invalid(
                CRDS, name, [FieldError(exc.field_path, ErrorKind.INVALID, detail=exc.detail)]
            ) from exc

    def _create(self, rt: ResourceType, route: Route, request: Request) -> rendering.Response:
        body = _json_body(request)
        objects.check_type_meta(rt, body, request.body or b"")
        obj, warnings = self.create_object(
            rt,
            body,
            route.namespace,
            field_validation=request.params.get("fieldValidation", "Warn"),
            dry_run=request.params.get("dryRun") == "All",
        )
        return _ok(obj, status=201, warnings=warnings)

    def _existing(self, rt: ResourceType, route: Route) -> dict[str, Any]:
        assert route.name is not None
        old = self.store.get(rt, route.namespace, route.name)
        if old is None:
            raise errors.not_found(rt, route.name)
        return old

    def _update(self, rt: ResourceType, route: Route, request: Request) -> rendering.Response:
        old = self._existing(rt, route)
        sent = _json_body(request)
        objects.check_type_meta(rt, sent, request.body or b"")
        body = objects.check_identity(rt, sent, route.namespace)
        name = route.name or ""
        if body["metadata"].get("name") not in (None, name):
            raise errors.bad_request(
                f"the name of the object ({body['metadata'].get('name')}) does not match the "
                f"name on the URL ({name})"
            )
        body["metadata"]["name"] = name
        sent_rv = body["metadata"].get("resourceVersion")
        if not sent_rv and rt not in BUILTINS:
            raise errors.invalid(
                rt,
                name,
                [
                    FieldError(
                        "metadata.resourceVersion",
                        ErrorKind.INVALID,
                        0,
                        "must be specified for an update",
                    )
                ],
            )
        # The uid is a precondition, checked before the resourceVersion (as etcd3's store does).
        objects.check_uid_precondition(rt, old, body)
        if sent_rv and sent_rv != old["metadata"]["resourceVersion"]:
            raise errors.conflict(rt, name)
        return self._commit(rt, old, body, route.subresource, request)

    def _patch(self, rt: ResourceType, route: Route, request: Request) -> rendering.Response:
        content_type = _header(request, "Content-Type")
        strategic = rt in BUILTINS
        # The patch type is checked before the object is looked up: an apply of an object
        # that does not exist is a 415 here, never a 404.
        kind = patch_type(content_type)
        if kind == APPLY:
            return self._apply(rt, route, request)
        if kind == STRATEGIC and not strategic:
            raise errors.unsupported_patch_type(accepted_patch_types(strategic=False))
        old = self._existing(rt, route)
        patched = apply_patch(old, content_type, _json_body(request), strategic=strategic)
        name = route.name or ""
        meta = patched.get("metadata")
        if not isinstance(meta, dict):
            raise errors.unprocessable("the patch removed metadata")
        objects.check_patched_uid(rt, old, patched)
        sent_rv = meta.get("resourceVersion")
        if sent_rv and sent_rv != old["metadata"]["resourceVersion"]:
            raise errors.conflict(rt, name)
        if meta.get("name") != name:
            raise errors.bad_request("the name of the object cannot be changed by a patch")
        return self._commit(rt, old, patched, route.subresource, request)

    def _apply(self, rt: ResourceType, route: Route, request: Request) -> rendering.Response:
        """Server-side apply (see `apply`): create or merge, owned fields, conflicts."""
        manager = request.params.get("fieldManager") or ""
        if not manager:
            raise errors.field_manager_required()
        config = objects.check_identity(rt, _json_body(request), route.namespace)
        name = route.name or ""
        if config["metadata"].get("name") not in (None, name):
            raise errors.bad_request(
                f"the name of the object ({config['metadata'].get('name')}) does not match the "
                f"name on the URL ({name})"
            )
        config["metadata"]["name"] = name
        current = self.store.get(rt, route.namespace, name)
        if current is None and route.subresource is not None:
            raise errors.not_found(rt, name)
        if route.subresource == "status":
            top: tuple[str, ...] = ("status",)
        else:
            skip = {"apiVersion", "kind"} | ({"status"} if rt.has_status else set())
            top = tuple(k for k in config if k not in skip)
        try:
            applied = apply(
                current,
                config,
                manager=manager,
                api_version=rt.api_version,
                top=top,
                subresource=route.subresource,
                force=request.params.get("force") == "true",
                now=objects.now_rfc3339(),
            )
        except ApplyConflicts as exc:
            causes = [(c.field, c.with_manager) for c in exc.conflicts]
            raise errors.apply_conflict(str(exc), causes) from exc
        field_validation = request.params.get("fieldValidation", "Warn")
        dry_run = request.params.get("dryRun") == "All"
        if current is None:
            obj, warnings = self.create_object(
                rt,
                {"apiVersion": rt.api_version, "kind": rt.kind, **applied},
                route.namespace,
                field_validation=field_validation,
                dry_run=dry_run,
            )
            return _ok(obj, status=201, warnings=warnings)
        sent_rv = config["metadata"].get("resourceVersion")
        if sent_rv and sent_rv != current["metadata"]["resourceVersion"]:
            raise errors.conflict(rt, name)
        result, warnings = self.update_object(
            rt,
            current,
            applied,
            route.subresource,
            field_validation=field_validation,
            dry_run=dry_run,
        )
        return _ok(result, warnings=warnings)

    def _commit(
        self,
        rt: ResourceType,
        old: dict[str, Any],
        body: dict[str, Any],
        subresource: str | None,
        request: Request,
    ) -> rendering.Response:
        result, warnings = self.update_object(
            rt,
            old,
            body,
            subresource,
            field_validation=request.params.get("fieldValidation", "Warn"),
            dry_run=request.params.get("dryRun") == "All",
        )
        return _ok(result, warnings=warnings)

    def update_object(
        self,
        rt: ResourceType,
        old: dict[str, Any],
        body: dict[str, Any],
        subresource: str | None,
        *,
        field_validation: str = "Strict",
        dry_run: bool = False,
    ) -> tuple[dict[str, Any], list[str]]:
        """Replace `old` by `body` (main resource or status), as an accepted PUT does."""
        identified = objects.check_identity(rt, body, old["metadata"].get("namespace"))
        if rt is SECRETS:
            identified = objects.secret_data(identified)
            objects.check_immutable_secret(old, identified)
        obj = objects.merge_update(rt, old, identified, subresource)
        objects.check_no_new_finalizers(rt, old, obj)
        warnings = objects.validate(rt, obj, field_validation)
        objects.bump_generation(rt, old, obj)
        new_types: list[ResourceType] | None = None
        if rt is CRDS:
            new_types = self._crd_types(obj)
            obj["status"] = old.get("status") or _crd_status(obj)
        if objects.same_object(obj, old) or dry_run:
            return (old if not dry_run else obj), warnings
        meta = obj["metadata"]
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            meta["resourceVersion"] = self.store.next_rv()
            self._remove(rt, obj)
            return obj, warnings
        meta["resourceVersion"] = self.store.next_rv()
        self.store.write(rt, obj, old)
        if new_types is not None:
            for gone in self._types_of_stored_crd(old):
                self._unregister(gone)
            for new in new_types:
                self._register(new)
            if obj.get("spec") != old.get("spec"):
                # A changed CRD gets new storage in kube-apiserver, which ends the watches
                # of its resources: watchers reconnect and see the new schema.
                for new in new_types:
                    self.store.end_watches(rt_key(new))
        return obj, warnings

    def _types_of_stored_crd(self, crd: dict[str, Any]) -> list[ResourceType]:
        try:
            return types_of_crd(crd)
        except CrdError:
            return []

    def _delete(self, rt: ResourceType, route: Route, request: Request) -> rendering.Response:
        old = self._existing(rt, route)
        options = _json_body(request) or {}
        pre = options.get("preconditions") if isinstance(options, dict) else None
        name = route.name or ""
        if isinstance(pre, dict):
            if pre.get("uid") and pre["uid"] != old["metadata"].get("uid"):
                raise errors.conflict(
                    rt,
                    name,
                    f"Precondition failed: UID in precondition: {pre['uid']}, UID in object "
                    f"meta: {old['metadata'].get('uid')}",
                )
            if pre.get("resourceVersion") and pre["resourceVersion"] != old["metadata"].get(
                "resourceVersion"
            ):
                raise errors.conflict(rt, name)
        if rt is NAMESPACES and name in _UNDELETABLE:
            raise errors.forbidden(rt, name, "this namespace may not be deleted")
        if request.params.get("dryRun") == "All":
            held = bool(old["metadata"].get("finalizers"))
            marking = held and not old["metadata"].get("deletionTimestamp")
            return _ok(_delete_answer(rt, objects.mark_deleted(rt, old) if marking else old, held))
        obj, held = self.delete_object(rt, old)
        return _ok(_delete_answer(rt, obj, held))

    def delete_object(self, rt: ResourceType, old: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        """Delete `old`, or only mark it deleted while it has finalizers.

        Returns the object as last stored and whether finalizers hold it.
        """
        meta = old["metadata"]
        if meta.get("finalizers"):
            if meta.get("deletionTimestamp"):
                return old, True
            obj = objects.mark_deleted(rt, old)
            obj["metadata"]["resourceVersion"] = self.store.next_rv()
            self.store.write(rt, obj, old)
            return obj, True
        obj = json_copy(old)
        obj["metadata"]["resourceVersion"] = self.store.next_rv()
        self._remove(rt, obj)
        return obj, False

    def _remove(self, rt: ResourceType, obj: dict[str, Any]) -> None:
        if rt is NAMESPACES:
            ns = obj["metadata"]["name"]
            for other in self.types():
                if other.namespaced:
                    for item in self.store.items(other, ns):
                        item["metadata"]["resourceVersion"] = self.store.next_rv()
                        self.store.remove(other, item)
        self.store.remove(rt, obj)
        if rt is CRDS:
            for gone in self._types_of_stored_crd(obj):
                for item in self.store.items(gone, None):
                    item["metadata"]["resourceVersion"] = self.store.next_rv()
                    self.store.remove(gone, item)
                self._unregister(gone)
                self.store.forget(gone)

    def post_event(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        """Create a core/v1 Event (a convenience for tests and tools in the same process)."""
        obj, _ = self.create_object(EVENTS, body, namespace)
        return obj


def _crd_status(crd: dict[str, Any]) -> dict[str, Any]:
    now = objects.now_rfc3339()
    spec = crd.get("spec") or {}
    return {
        "acceptedNames": json_copy(spec.get("names") or {}),
        "conditions": [
            {
                "type": "NamesAccepted",
                "status": "True",
                "reason": "NoConflicts",
                "message": "no conflicts found",
                "lastTransitionTime": now,
            },
            {
                "type": "Established",
                "status": "True",
                "reason": "InitialNamesAccepted",
                "message": "the initial names have been accepted",
                "lastTransitionTime": now,
            },
        ],
        "storedVersions": [v.get("name") for v in spec.get("versions") or [] if v.get("storage")],
    }


def _delete_answer(rt: ResourceType, obj: dict[str, Any], held: bool) -> dict[str, Any]:
    """What a real server answers to a DELETE of one object.

    The generic registry answers the object while finalizers hold it, and a `Status`
    of success naming it (`details.kind` is the plural, as the registry sets it) once
    it is gone; pods and a few other built-ins return the deleted object instead, none
    of which the emulator serves. Namespaces and CRDs have finalizers of their own
    controllers (the namespace and CRD cleanup controllers): the server answers them as
    Terminating. The emulator finishes those at once, as if the controllers had run.
    """
    if held:
        return obj
    meta = obj["metadata"]
    if rt is NAMESPACES:
        shown = objects.mark_deleted(rt, obj)
        shown["status"] = {**(shown.get("status") or {}), "phase": "Terminating"}
        return shown
    if rt is CRDS:
        shown = objects.mark_deleted(rt, obj)
        shown["metadata"]["finalizers"] = ["customresourcecleanup.apiextensions.k8s.io"]
        conditions = [
            c
            for c in (shown.get("status") or {}).get("conditions") or []
            if c.get("type") != "Terminating"
        ]
        conditions.append(
            {
                "type": "Terminating",
                "status": "True",
                "reason": "InstanceDeletionPending",
                "message": "CustomResourceDefinition marked for deletion; CustomResource "
                "deletion will begin soon",
                "lastTransitionTime": objects.now_rfc3339(),
            }
        )
        shown["status"] = {**(shown.get("status") or {}), "conditions": conditions}
        return shown
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": {
            "name": meta["name"],
            **({"group": rt.group} if rt.group else {}),
            "kind": rt.plural,
            "uid": meta.get("uid", ""),
        },
    }


def _translate(change: Change, match: Matcher) -> tuple[str, dict[str, Any]] | None:
    """The watch event a change makes for a watcher with this selector, if any.

    As on a real server, an object that starts matching a selector is ADDED and
    one that stops matching is DELETED for that watcher.
    """
    now = match(change.obj)
    before = change.old is not None and match(change.old)
    if change.type == "DELETED":
        return ("DELETED", change.obj) if now else None
    if change.type == "ADDED":
        return ("ADDED", change.obj) if now else None
    if now and before:
        return ("MODIFIED", change.obj)
    if now:
        return ("ADDED", change.obj)
    if before:
        return ("DELETED", change.obj)
    return None


async def _once(event: dict[str, Any]) -> AsyncIterator[bytes]:
    yield json.dumps(event).encode() + b"\n"


__all__ = ["DEFAULT_NAMESPACES", "KubernetesApi", "Route", "parse_route"]
