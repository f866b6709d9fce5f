"""The broker's probe listener (`--probe-listen`): health, readiness, metrics and the API
document, and nothing else, on a port of their own."""

from __future__ import annotations

from pathlib import Path

import aiohttp

from epochlog_tools.harness import free_ports, url
from tests.broker.cluster import Cluster
from tests.broker.controller import spec
from tests.broker.test_openapi import DOCUMENT

NAME = "probes-0"


async def test_the_probe_listener_serves_probes_and_nothing_else(tmp_path: Path) -> None:
    (port,) = free_ports(1)
    probes = url(port)
    async with Cluster(
        tmp_path,
        [spec("probes", 0, (1,), min_insync_replicas=1)],
        broker_ids=(1,),
        extra_args=["--probe-listen", f"127.0.0.1:{port}"],
    ).serving(NAME) as c:
        async with aiohttp.ClientSession() as http:
            async with http.get(probes + "/healthz") as rsp:
                assert rsp.status == 200
                assert (await rsp.json())["status"] == "ok"
            async with http.get(probes + "/readyz") as rsp:
                assert rsp.status == 200
            async with http.get(probes + "/metrics") as rsp:
                assert rsp.status == 200
                assert "epochlog_broker_epoch" in await rsp.text()
            async with http.get(probes + "/openapi.json") as rsp:
                assert await rsp.text() == DOCUMENT.read_text()
            # The API is not there: records neither read nor written through it.
            async with http.get(probes + "/v1/partitions") as rsp:
                assert rsp.status == 404
                assert (await rsp.json())["error"]["code"] == "INVALID_REQUEST"
            path = f"/v1/partitions/{NAME}/records"
            async with http.post(probes + path, json={"records": [{"value": "x"}]}) as rsp:
                assert rsp.status == 404
        # The API port serves as before.
        await c.produce(NAME, ["via-api"])
        assert [r["value"] for r in await c.read_all(NAME, 1)] == ["via-api"]
