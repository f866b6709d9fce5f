"""A Kafka connection at the byte level for tests: requests built with kio's classes
of any version (`epochlog_broker.kafka.wire.build`), frames sent as they are, answers
decoded with kio. It lets a test speak every version the listener claims, and send what
no well-behaved client would."""

from __future__ import annotations

import asyncio
import contextlib
import io
import ssl
import struct
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer

from epochlog_broker.kafka import wire


class KafkaConnection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.correlation = 0

    @classmethod
    async def open(cls, address: str, tls: ssl.SSLContext | None) -> KafkaConnection:
        host, _, port = address.rpartition(":")
        reader, writer = await asyncio.open_connection(host, int(port), ssl=tls)
        return cls(reader, writer)

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(ConnectionError, ssl.SSLError):
            await self.writer.wait_closed()

    def frame(self, api_key: int, version: int, **values: Any) -> tuple[bytes, int]:
        """A request frame (size prefix included) and its correlation id."""
        self.correlation += 1
        return request_frame(api_key, version, self.correlation, **values), self.correlation

    async def send_raw(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def answer(self, api_key: int, version: int, correlation: int) -> Any:
        (size,) = struct.unpack(">i", await self.reader.readexactly(4))
        data = await self.reader.readexactly(size)
        schema: Any = load_response_schema(api_key, version)
        header, used = entity_reader(schema.__header_schema__)(data, 0)
        assert header.correlation_id == correlation
        body, size_read = entity_reader(schema)(data, used)
        assert used + size_read == len(data)
        return body

    async def ask(self, api_key: int, version: int, **values: Any) -> Any:
        data, correlation = self.frame(api_key, version, **values)
        await self.send_raw(data)
        return await self.answer(api_key, version, correlation)

    async def closed_by_peer(self) -> bool:
        """Whether the broker ended the connection (EOF) rather than answering."""
        try:
            data = await self.reader.read(1)
        except (ConnectionError, ssl.SSLError):
            return True
        return data == b""


def request_frame(api_key: int, version: int, correlation: int, **values: Any) -> bytes:
    """A request frame of `api_key` in `version`, size prefix included."""
    schema: Any = load_request_schema(api_key, version)
    header_schema = schema.__header_schema__
    out = io.BytesIO()
    entity_writer(header_schema)(
        out,
        wire.build(
            header_schema,
            request_api_key=api_key,
            request_api_version=version,
            correlation_id=correlation,
            client_id="epochlog-tests",
        ),
    )
    entity_writer(schema)(out, wire.build(schema, **values))
    body = out.getvalue()
    return struct.pack(">i", len(body)) + body
