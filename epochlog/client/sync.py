"""Blocking wrappers for scripts: the async client on an event loop in a background thread.

`SyncClient` starts one daemon thread running an event loop and an async
`Client` on it; `SyncProducer` and `SyncConsumer` run their async
counterparts there and block the caller until each call is done. Calls from
several threads are fine: each one is handed to the loop in the order made.

    with SyncProducer("http://127.0.0.1:8080") as producer:
        meta = producer.send("orders-0", "hello").result()
    with SyncConsumer("http://127.0.0.1:8080", "orders-0", start="earliest") as consumer:
        for record in consumer.poll():
            ...
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine, Iterator, Mapping, Sequence
from typing import Any, TypeVar

from epochlog.client.client import LATEST, Client
from epochlog.client.consumer import Consumer
from epochlog.client.producer import Producer
from epochlog.client.records import ConsumerRecord, OffsetAndEpoch, RecordMetadata

T = TypeVar("T")


class _LoopThread:
    """An event loop running forever in a daemon thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._main, name="epochlog-client-loop", daemon=True)
        self._thread.start()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T], timeout_s: float | None = None) -> T:
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("a blocking client call from inside the client's own loop")
        return self.submit(coro).result(timeout_s)

    def stop(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        if not self._thread.is_alive():
            self.loop.close()


class SyncClient:
    """A `Client` with blocking methods; `producer()` and `consumer()` share it."""

    def __init__(self, bootstrap: str | Sequence[str], **options: Any) -> None:
        self._thread = _LoopThread()
        try:
            self.client: Client = self._thread.run(_make_client(bootstrap, options))
        except BaseException:
            self._thread.stop()
            raise

    def __enter__(self) -> SyncClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def run(self, coro: Coroutine[Any, Any, T], timeout_s: float | None = None) -> T:
        return self._thread.run(coro, timeout_s)

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return self._thread.submit(coro)

    def list_offsets(
        self, partition: str, at: str | int = LATEST, *, timeout_ms: int | None = None
    ) -> OffsetAndEpoch:
        return self.run(self.client.list_offsets(partition, at, timeout_ms=timeout_ms))

    def producer(self, **options: Any) -> SyncProducer:
        return SyncProducer(self, **options)

    def consumer(self, partition: str, **options: Any) -> SyncConsumer:
        return SyncConsumer(self, partition, **options)

    def close(self) -> None:
        if not self._thread.loop.is_closed():
            self.run(self.client.close())
            self._thread.stop()


async def _make_client(bootstrap: str | Sequence[str], options: Mapping[str, Any]) -> Client:
    return Client(bootstrap, **options)


async def _make_producer(client: Client, options: Mapping[str, Any]) -> Producer:
    return Producer(client, **options)


async def _make_consumer(client: Client, partition: str, options: Mapping[str, Any]) -> Consumer:
    return Consumer(client, partition, **options)


def _own_client(
    bootstrap: SyncClient | str | Sequence[str], options: dict[str, Any]
) -> tuple[SyncClient, bool]:
    if isinstance(bootstrap, SyncClient):
        return bootstrap, False
    client_options = {
        k: options.pop(k)
        for k in ("request_timeout_ms", "retry_backoff_ms", "retry_backoff_max_ms", "credentials")
        if k in options
    }
    return SyncClient(bootstrap, **client_options), True


class SyncProducer:
    """`Producer` with blocking calls; `send` returns a concurrent.futures.Future."""

    def __init__(self, bootstrap: SyncClient | str | Sequence[str], **options: Any) -> None:
        self._sync, self._owns = _own_client(bootstrap, options)
        try:
            self.producer: Producer = self._sync.run(_make_producer(self._sync.client, options))
        except BaseException:
            if self._owns:
                self._sync.close()
            raise

    def __enter__(self) -> SyncProducer:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def send(
        self,
        partition: str,
        value: str | bytes,
        *,
        key: str | bytes | None = None,
        headers: Mapping[str, str | bytes] | None = None,
    ) -> concurrent.futures.Future[RecordMetadata]:
        """Queue a record (blocking only while the buffer is full); the future resolves
        when it is acknowledged."""
        return self._sync.submit(
            self.producer.send_and_wait(partition, value, key=key, headers=headers)
        )

    def send_and_wait(
        self,
        partition: str,
        value: str | bytes,
        *,
        key: str | bytes | None = None,
        headers: Mapping[str, str | bytes] | None = None,
    ) -> RecordMetadata:
        return self.send(partition, value, key=key, headers=headers).result()

    def flush(self) -> None:
        self._sync.run(self.producer.flush())

    def close(self, timeout_s: float | None = None) -> None:
        self._sync.run(self.producer.close(timeout_s))
        if self._owns:
            self._sync.close()


class SyncConsumer:
    """`Consumer` with blocking calls; iterating yields records forever (follows the log)."""

    def __init__(
        self, bootstrap: SyncClient | str | Sequence[str], partition: str, **options: Any
    ) -> None:
        self._sync, self._owns = _own_client(bootstrap, options)
        try:
            self.consumer: Consumer = self._sync.run(
                _make_consumer(self._sync.client, partition, options)
            )
        except BaseException:
            if self._owns:
                self._sync.close()
            raise

    def __enter__(self) -> SyncConsumer:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    @property
    def position(self) -> int | None:
        return self.consumer.position

    @property
    def high_watermark(self) -> int:
        return self.consumer.high_watermark

    def poll(self, max_wait_ms: int | None = None) -> list[ConsumerRecord]:
        return self._sync.run(self.consumer.poll(max_wait_ms))

    def seek(self, to: int | str) -> int:
        return self._sync.run(self.consumer.seek(to))

    def __iter__(self) -> Iterator[ConsumerRecord]:
        while True:
            yield from self.poll()

    def close(self) -> None:
        self._sync.run(self.consumer.close())
        if self._owns:
            self._sync.close()
