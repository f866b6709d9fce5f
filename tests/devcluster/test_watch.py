"""Watches over real HTTP: initial state, resuming from a resourceVersion, selectors, bookmarks.

And the window of changes a watch can resume from: older resourceVersions are
`410 Expired`, and kopf and kubectl, the clients the project runs against the
emulator, cope with that as they do on a real server.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import kopf
import pytest
from kmock import Request

from epochlog_tools.kubeapi.apiserver import ApiServer
from tests.devcluster.conftest import CRDS, PARTITIONS, Http, Kubectl, kubectl_binary, partition
from tests.waiting import until, until_true

MERGE = "application/merge-patch+json"


class Watch:
    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self.response = response

    # No time limit on reading the stream (tests/waiting.py): the hang detector ends a
    # watch that never sends what a test awaits.
    async def next(self) -> dict[str, Any]:
        line = await self.response.content.readline()
        assert line, "the watch stream ended"
        event: dict[str, Any] = json.loads(line)
        return event

    async def ended(self) -> bool:
        return await self.response.content.readline() == b""


@asynccontextmanager
async def watching(
    http: Http, query: str, path: str = PARTITIONS, **kw: Any
) -> AsyncIterator[Watch]:
    async with http.session.get(f"{path}?watch=true&{query}", **kw) as rsp:
        assert rsp.status == 200
        yield Watch(rsp)


async def test_watch_resumes_after_a_resource_version(http: Http) -> None:
    a = await http.ok("POST", PARTITIONS, partition("orders-0"))
    await http.ok(
        "PATCH",
        f"{PARTITIONS}/orders-0/status",
        {"status": {"highWatermark": 1}},
        content_type=MERGE,
    )
    await http.ok("POST", PARTITIONS, partition("orders-1"))
    since = a["metadata"]["resourceVersion"]
    async with watching(http, f"resourceVersion={since}") as watch:
        first, second = await watch.next(), await watch.next()
        assert (first["type"], first["object"]["status"]["highWatermark"]) == ("MODIFIED", 1)
        assert (second["type"], second["object"]["metadata"]["name"]) == ("ADDED", "orders-1")
        await http.ok("DELETE", f"{PARTITIONS}/orders-0")
        third = await watch.next()
        assert (third["type"], third["object"]["metadata"]["name"]) == ("DELETED", "orders-0")
        assert int(third["object"]["metadata"]["resourceVersion"]) > int(
            second["object"]["metadata"]["resourceVersion"]
        )


async def test_watch_without_version_starts_with_the_current_state(http: Http) -> None:
    await http.ok("POST", PARTITIONS, partition("orders-0"))
    async with watching(http, "") as watch:
        event = await watch.next()
        assert (event["type"], event["object"]["metadata"]["name"]) == ("ADDED", "orders-0")
        await http.ok(
            "PATCH",
            f"{PARTITIONS}/orders-0",
            {"metadata": {"labels": {"a": "b"}}},
            content_type=MERGE,
        )
        event = await watch.next()
        assert event["type"] == "MODIFIED"
        assert event["object"]["metadata"]["labels"] == {"a": "b"}


async def test_initial_events_end_with_a_bookmark(http: Http) -> None:
    await http.ok("POST", PARTITIONS, partition("orders-0"))
    query = "sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan"
    async with watching(http, query) as watch:
        assert (await watch.next())["type"] == "ADDED"
        bookmark = await watch.next()
        assert bookmark["type"] == "BOOKMARK"
        assert bookmark["object"]["metadata"]["annotations"] == {
            "k8s.io/initial-events-end": "true"
        }


async def test_watch_filters_namespace_and_selectors(http: Http) -> None:
    await http.ok("POST", "/api/v1/namespaces", {"metadata": {"name": "other"}})
    rv = (await http.ok("GET", PARTITIONS))["metadata"]["resourceVersion"]
    query = f"resourceVersion={rv}&labelSelector=tier%3Dgold"
    async with watching(http, query) as watch:
        await http.ok(
            "POST", "/apis/epochlog.dev/v1alpha1/namespaces/other/partitions", partition("x-0")
        )
        await http.ok("POST", PARTITIONS, partition("orders-0"))
        # Gaining the label makes it appear to this watch, losing it makes it go.
        labelled = {"metadata": {"labels": {"tier": "gold"}}}
        await http.ok("PATCH", f"{PARTITIONS}/orders-0", labelled, content_type=MERGE)
        event = await watch.next()
        assert (event["type"], event["object"]["metadata"]["name"]) == ("ADDED", "orders-0")
        unlabelled = {"metadata": {"labels": {"tier": None}}}
        await http.ok("PATCH", f"{PARTITIONS}/orders-0", unlabelled, content_type=MERGE)
        assert (await watch.next())["type"] == "DELETED"


async def test_watch_ends_after_timeout_seconds(http: Http) -> None:
    version = (await http.ok("GET", PARTITIONS))["metadata"]["resourceVersion"]
    async with watching(http, f"timeoutSeconds=1&resourceVersion={version}") as watch:
        assert await watch.ended()


async def test_watch_as_table(http: Http) -> None:
    accept = {"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"}
    async with watching(http, "", headers=accept) as watch:
        await http.ok("POST", PARTITIONS, partition("orders-0"))
        event = await watch.next()
        assert event["type"] == "ADDED"
        assert event["object"]["kind"] == "Table"
        assert event["object"]["rows"][0]["cells"][:3] == ["orders-0", "orders", 0]


# -- the window of changes a watch can resume from ----------------------------------------------

WINDOW = 3


@pytest.fixture
async def small() -> AsyncIterator[tuple[ApiServer, Http]]:
    """An emulator that keeps only WINDOW changes per resource type for resuming watches."""
    async with (
        ApiServer(crds=CRDS, watch_window=WINDOW) as api,
        aiohttp.ClientSession(base_url=api.url) as session,
    ):
        yield api, Http(session)


async def _status_writes(http: Http, count: int) -> None:
    for i in range(count):
        body = {"status": {"highWatermark": i + 1}}
        await http.ok("PATCH", f"{PARTITIONS}/orders-0/status", body, content_type=MERGE)


async def test_watch_from_a_compacted_version_is_410_expired_and_ends(
    small: tuple[ApiServer, Http],
) -> None:
    _, http = small
    created = await http.ok("POST", PARTITIONS, partition("orders-0"))
    since = created["metadata"]["resourceVersion"]
    await _status_writes(http, WINDOW + 1)
    async with watching(http, f"resourceVersion={since}") as watch:
        event = await watch.next()
        assert event["type"] == "ERROR"
        error = event["object"]
        assert (error["kind"], error["code"], error["reason"]) == ("Status", 410, "Expired")
        assert re.fullmatch(rf"too old resource version: {since} \(\d+\)", error["message"])
        assert await watch.ended()
    # A list gives a resourceVersion a watch can start from.
    fresh = (await http.ok("GET", PARTITIONS))["metadata"]["resourceVersion"]
    async with watching(http, f"resourceVersion={fresh}") as watch:
        await _status_writes(http, 1)
        assert (await watch.next())["type"] == "MODIFIED"


@pytest.mark.emulator_only
async def test_a_watch_resumes_from_within_the_window(small: tuple[ApiServer, Http]) -> None:
    _, http = small
    await http.ok("POST", PARTITIONS, partition("orders-0"))
    await _status_writes(http, WINDOW)
    listed = await http.ok("GET", PARTITIONS)
    kept_from = int(listed["metadata"]["resourceVersion"]) - WINDOW
    async with watching(http, f"resourceVersion={kept_from}") as watch:
        replayed = [await watch.next() for _ in range(WINDOW)]
    assert [e["object"]["status"]["highWatermark"] for e in replayed] == [1, 2, 3]


@pytest.mark.emulator_only
async def test_the_window_is_per_resource_type(small: tuple[ApiServer, Http]) -> None:
    _, http = small
    created = await http.ok("POST", PARTITIONS, partition("orders-0"))
    since = created["metadata"]["resourceVersion"]
    for i in range(WINDOW * 3):  # other kinds' changes do not push partitions' out
        await http.ok("POST", "/api/v1/namespaces", {"metadata": {"name": f"team-{i}"}})
    async with watching(http, f"resourceVersion={since}") as watch:
        await http.ok("POST", PARTITIONS, partition("orders-1"))
        event = await watch.next()
        assert (event["type"], event["object"]["metadata"]["name"]) == ("ADDED", "orders-1")


def _on_first_partitions_watch(api: ApiServer, writes: int) -> list[Request]:
    """Make `writes` Partitions as the first watch of them arrives, before it is served.

    A client's watch then starts from a resourceVersion the window no longer covers:
    deterministically what a watch that reconnects after a busy while meets. Returns the
    list of requests for Partitions heard so far (lists and watches).
    """
    heard: list[Request] = []
    rt = api.handler.type_of("epochlog.dev", "v1alpha1", "partitions")

    def listener(request: Request) -> None:
        if request.url.path != PARTITIONS or str(request.method.value).upper() != "GET":
            return
        heard.append(request)
        is_watch = request.params.get("watch") in ("true", "1")
        if is_watch and sum(1 for r in heard if r.params.get("watch")) == 1:
            for i in range(writes):
                api.handler.create_object(rt, partition(f"orders-{i}"), "default")

    api.handler.listen(listener)
    return heard


@pytest.mark.emulator_only
async def test_kopf_lists_again_after_410(small: tuple[ApiServer, Http]) -> None:
    api, _ = small
    heard = _on_first_partitions_watch(api, WINDOW + 1)
    registry = kopf.OperatorRegistry()
    seen: set[str] = set()

    @kopf.on.login(registry=registry)
    def login(**_: Any) -> kopf.ConnectionInfo:
        return kopf.ConnectionInfo(server=api.url, default_namespace="default")

    @kopf.on.event("epochlog.dev", "v1alpha1", "partitions", registry=registry)
    def record(name: str, **_: Any) -> None:
        seen.add(name)

    settings = kopf.OperatorSettings()
    settings.posting.enabled = False
    stop = asyncio.Event()
    operator = asyncio.create_task(
        kopf.operator(
            registry=registry,
            settings=settings,
            standalone=True,
            namespaces=["default"],
            stop_flag=stop,
        )
    )
    try:
        expected = {f"orders-{i}" for i in range(WINDOW + 1)}
        await until_true(lambda: seen == expected, "kopf sees the Partitions after a re-list", 20)
        # The first watch was answered 410; kopf listed again and watched from the new version.
        assert sum(1 for r in heard if not r.params.get("watch")) >= 2
        await until_true(
            lambda: sum(1 for r in heard if r.params.get("watch")) >= 2, "kopf watches again", 20
        )
        second = [r for r in heard if r.params.get("watch")][1]
        rt = api.handler.type_of("epochlog.dev", "v1alpha1", "partitions")
        last = api.handler.store.get(rt, "default", f"orders-{WINDOW}")
        assert last is not None
        # It resumed from the fresh list's version, not from the expired one.
        assert int(second.params["resourceVersion"]) >= int(last["metadata"]["resourceVersion"])
    finally:
        stop.set()
        await asyncio.wait_for(operator, 30)


@pytest.mark.emulator_only
async def test_kubectl_get_watch_reports_an_expired_version(
    small: tuple[ApiServer, Http], tmp_path: Path
) -> None:
    api, _ = small
    _on_first_partitions_watch(api, WINDOW + 1)
    kubectl = Kubectl(kubectl_binary(), api.write_kubeconfig(tmp_path / "kubeconfig"), tmp_path)
    # kubectl shows the ERROR event's Status and ends the watch, as against a real server.
    _, out, err = await kubectl.run("get", "partitions", "--watch")
    assert re.search(r"Failure\s+Expired\s+too old resource version: \d+ \(\d+\)", out), (out, err)


# -- a changed CRD ----------------------------------------------------------------------------

WIDGETS_CRD = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com"


def _widget_crd(description: str) -> dict[str, Any]:
    schema = {
        "type": "object",
        "description": description,
        "x-kubernetes-preserve-unknown-fields": True,
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": schema},
                }
            ],
        },
    }


async def test_a_changed_crd_ends_the_watches_of_its_resources(http: Http) -> None:
    """kube-apiserver builds new storage for a CRD whose spec changed and ends the watches
    of the old one: a watcher reconnects and sees objects through the new schema."""
    await http.ok("POST", WIDGETS_CRD.rsplit("/", 1)[0], _widget_crd("first"))

    async def established() -> bool:
        crd = await http.ok("GET", WIDGETS_CRD)
        conditions = (crd.get("status") or {}).get("conditions") or []
        return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

    await until(established, "the CRD is established", 30)
    widgets = "/apis/example.com/v1/namespaces/default/widgets"

    async def listed() -> Any:
        status, body = await http.call("GET", widgets)
        return body if status == 200 else None

    rv = (await until(listed, "the widgets resource is served", 30))["metadata"]["resourceVersion"]
    async with watching(http, f"resourceVersion={rv}", path=widgets) as watch:
        current = await http.ok("GET", WIDGETS_CRD)
        changed = _widget_crd("second")
        changed["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        await http.ok("PUT", WIDGETS_CRD, changed)
        assert await watch.ended()
