"""Watches over real HTTP: initial state, resuming from a resourceVersion, selectors, bookmarks."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp

from tests.devcluster.conftest import PARTITIONS, Http, partition

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
    async with watching(http, "timeoutSeconds=1&resourceVersion=1") as watch:
        assert await watch.ended()


async def test_too_old_resource_version_is_410_gone(http: Http, api: Any) -> None:
    store = api.handler.store
    store._log.clear()  # as if the change log had moved on
    for i in range(3):
        await http.ok("POST", PARTITIONS, partition(f"orders-{i}"))
    async with watching(http, "resourceVersion=1") as watch:
        event = await watch.next()
        assert event["type"] == "ERROR"
        assert (event["object"]["code"], event["object"]["reason"]) == (410, "Expired")


async def test_watch_as_table(http: Http) -> None:
    accept = {"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"}
    async with watching(http, "", headers=accept) as watch:
        await http.ok("POST", PARTITIONS, partition("orders-0"))
        event = await watch.next()
        assert event["type"] == "ADDED"
        assert event["object"]["kind"] == "Table"
        assert event["object"]["rows"][0]["cells"][:3] == ["orders-0", "orders", 0]
