"""Port forwarding for clients on this host: a local listener whose connections reach a pod.

`PortForward` listens on a local address and, for every connection accepted,
asks `connect` (run in a thread: the kubernetes client is blocking) for a
socket that reaches the pod's port, then carries bytes both ways until either
side closes. Opening one upstream per connection, rather than one for the
listener's life, lets a pod be deleted and made again under the same name: the
next connection reaches the new one, as `kubectl port-forward pod/NAME` does not.

With the kubernetes client, `connect` is `kube_connector(...)`: a
`kubernetes.stream.portforward` websocket per connection, its socket detached
from the client's wrapper so that closing it ends the websocket too.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import structlog

log = structlog.get_logger("e2e.forward")

CHUNK = 64 * 1024


class ForwardError(Exception):
    """No connection to the pod could be made; the local connection is closed."""


Connect = Callable[[], socket.socket]


def kube_connector(core: Callable[[], Any], namespace: str, pod: str, port: int) -> Connect:
    """A `Connect` through the API server's port-forward subresource of `pod` (`core`: makes
    a `kubernetes.client.CoreV1Api` on a client no other thread uses)."""
    from kubernetes.client.exceptions import ApiException
    from kubernetes.stream import portforward
    from websocket import WebSocketException

    def connect() -> socket.socket:
        try:
            pf = portforward(
                core().connect_get_namespaced_pod_portforward, pod, namespace, ports=str(port)
            )
        except (ApiException, WebSocketException, OSError) as exc:
            raise ForwardError(f"port-forward to {namespace}/{pod}:{port}: {exc}") from exc
        # The wrapper only hides TCP options an AF_UNIX socket refuses; the socket under it
        # is what asyncio needs. Detached, its descriptor is ours to close.
        return socket.socket(fileno=pf.socket(port).detach())

    return connect


@dataclass
class PortForward:
    host: str
    port: int
    connect: Connect
    name: str = ""
    _server: asyncio.Server | None = field(init=False, default=None)
    _pipes: set[asyncio.Task[None]] = field(init=False, default_factory=set)

    async def start(self) -> PortForward:
        self._server = await asyncio.start_server(self._accepted, self.host, self.port)
        return self

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        for task in list(self._pipes):
            task.cancel()
        await asyncio.gather(*self._pipes, return_exceptions=True)

    async def _accepted(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._pipes.add(task)
        try:
            await self._carry(reader, writer)
        finally:
            self._pipes.discard(task)

    async def _carry(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            upstream = await asyncio.to_thread(self.connect)
            up_reader, up_writer = await asyncio.open_connection(sock=upstream)
        except (ForwardError, OSError) as exc:
            log.warning("forward_failed", forward=self.name, error=str(exc))
            writer.close()
            return
        pumps = [
            asyncio.create_task(_pump(reader, up_writer)),
            asyncio.create_task(_pump(up_reader, writer)),
        ]
        try:
            # Either side closing ends the connection: HTTP clients never half-close, and a
            # pod that goes away must show as a closed connection, not a silent one.
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in pumps:
                task.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)
            for w in (writer, up_writer):
                w.close()
                with contextlib.suppress(OSError, ConnectionError):
                    await w.wait_closed()


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(OSError, ConnectionError):
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()
