"""A kafka-python 3.0.12 bug that stops a client for good after a broker dies, and its cure.

When a broker is SIGKILLed while kafka-python sets up a connection to it (TCP and TLS
done, ApiVersions in flight), the kernel's reset reaches kafka-python as the socket's
own `ConnectionResetError`. `KafkaConnectionManager._connect` hands that exception as
it is to `KafkaConnection.connection_lost`, so the requests waiting on the connection,
a MetadataRequest among them, fail with an `OSError` rather than `KafkaConnectionError`.
`ClusterMetadata._refresh_loop` retries only `KafkaError`: the loop ends, the client
never asks for metadata again, and a consumer fetches from the dead broker for ever
(seen as a group member stuck on one partition for minutes while the Partition had a
new leader, whose Metadata every broker answered).

This is a fault of the client, not of the protocol the tests judge: any Kafka broker
killed at that moment resets the connection the same way. `install()` makes a lost
connection's `OSError` the `KafkaConnectionError` kafka-python means it to be, in the
test process (the `kafka_python_resets` fixture) and in the client processes the tests
start. Remove it once kafka-python wraps the error itself.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from kafka.errors import KafkaConnectionError
from kafka.net.connection import KafkaConnection

ConnectionLost = Callable[[KafkaConnection, BaseException | None], Any]


def wrapping(original: ConnectionLost) -> ConnectionLost:
    """`connection_lost` that passes a socket error on as `KafkaConnectionError`."""

    @functools.wraps(original)
    def connection_lost(self: KafkaConnection, exc: BaseException | None) -> Any:
        if isinstance(exc, OSError):
            wrapped = KafkaConnectionError(str(exc))
            wrapped.__cause__ = exc
            exc = wrapped
        return original(self, exc)

    connection_lost.wraps_os_errors = True  # type: ignore[attr-defined]
    return connection_lost


def install() -> None:
    """For a client process: patch `KafkaConnection.connection_lost`, once."""
    if not getattr(KafkaConnection.connection_lost, "wraps_os_errors", False):
        KafkaConnection.connection_lost = wrapping(KafkaConnection.connection_lost)
