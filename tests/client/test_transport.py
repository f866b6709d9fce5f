"""Where the transport dials a broker's name: at the address its owner's map gives now."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from aiohttp import web

from epochlog.client.transport import Transport


@asynccontextmanager
async def _server(host: str, port: int, name: str) -> AsyncIterator[int]:
    async def who(_: web.Request) -> web.Response:
        return web.Response(text=name)

    app = web.Application()
    app.router.add_get("/who", who)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    try:
        yield runner.addresses[0][1]
    finally:
        await runner.cleanup()


async def test_a_name_moved_to_a_new_address_is_dialled_there_at_the_next_connection() -> None:
    """A broker restarted at a new IP (reported by the controller to its peers, or a new
    port-forward for a test's client) is reached there as soon as the map says so: not at
    the address resolved before, which aiohttp keeps for 10 s by default (a rolling
    restart on Kubernetes showed followers timing out on a restarted leader for 6 s)."""
    addresses = {"broker-0.test": "127.0.0.2"}
    transport = Transport(resolve=addresses)
    try:
        async with _server("127.0.0.2", 0, "old") as port:
            url = f"http://broker-0.test:{port}"
            body, _ = await transport.request("GET", url, "/who", timeout_s=10)
            assert body == b"old"
        # The old pod is gone (its connections closed); the name now has another address.
        async with _server("127.0.0.3", port, "new"):
            addresses["broker-0.test"] = "127.0.0.3"
            body, _ = await transport.request("GET", url, "/who", timeout_s=10)
            assert body == b"new"
    finally:
        await transport.close()
