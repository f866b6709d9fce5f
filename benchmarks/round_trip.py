"""The CPU one request costs: an HTTPS round trip through aiohttp next to a framed TLS stream.

Replication, produce and heartbeats are HTTPS requests through aiohttp. Under
load a broker makes or serves hundreds of them a second (a fetch session
request per answer with data, a produce request per batch), and its CPU goes
with their count more than with the records they carry. This bench measures
what one request costs on this machine, as two processes on loopback with
mutual TLS (the brokers' certificates from a fresh `DevPki`):

- https: `POST` of a body to an aiohttp server over one pooled connection,
  answered with a body of the same size, one request after the other;
- framed: the same bodies as length-prefixed frames both ways over one TLS
  stream (`asyncio` streams), what a persistent replication stream would cost.

Printed per transport: CPU ms per round trip of the client and of the server
(process CPU from getrusage and /proc), wall ms per round trip, and the ratio of
the https total to the framed total (the framed stream is the baseline), also
written to `build/bench/round_trip.json` (`benchmarks.results`). The transports
alternate, `--runs` times each. Run with
`python -m benchmarks.round_trip [--requests N] [--size B]`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import ssl
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp
from aiohttp import web

from benchmarks import results
from epochlog.security.pki import DevPki
from epochlog.security.tls import TlsFiles, client_context, server_context
from epochlog_tools.harness import free_ports

TRANSPORTS = ("https", "framed")
FRAME = struct.Struct(">I")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _files(pki: DevPki, broker_id: int) -> TlsFiles:
    cert, key = pki.broker(broker_id)
    return TlsFiles(ca=str(pki.cluster_ca), cert=str(cert), key=str(key))


# -- the server process -----------------------------------------------------------------------


async def _serve(transport: str, port: int, size: int, ctx: ssl.SSLContext) -> None:
    answer = b"a" * size
    if transport == "https":

        async def handle(request: web.Request) -> web.Response:
            await request.read()
            return web.Response(body=answer)

        app = web.Application()
        app.router.add_post("/rt", handle)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port, ssl_context=ctx).start()
    else:

        async def stream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                while True:
                    (n,) = FRAME.unpack(await reader.readexactly(FRAME.size))
                    await reader.readexactly(n)
                    writer.write(FRAME.pack(len(answer)) + answer)
            except (asyncio.IncompleteReadError, ConnectionError):
                writer.close()

        await asyncio.start_server(stream, "127.0.0.1", port, ssl=ctx)
    print("ready", flush=True)
    await asyncio.Event().wait()


# -- the client -----------------------------------------------------------------------------------


@dataclass
class Measured:
    transport: str
    client_ms: float
    server_ms: float
    wall_ms: float

    @property
    def total_ms(self) -> float:
        return self.client_ms + self.server_ms


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


async def _requests(
    transport: str, port: int, body: bytes, count: int, ctx: ssl.SSLContext
) -> None:
    if transport == "https":
        connector = aiohttp.TCPConnector(ssl=ctx, limit=1)
        async with aiohttp.ClientSession(connector=connector) as session:
            for _ in range(count):
                async with session.post(f"https://127.0.0.1:{port}/rt", data=body) as rsp:
                    await rsp.read()
        return
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx)
    try:
        for _ in range(count):
            writer.write(FRAME.pack(len(body)) + body)
            (n,) = FRAME.unpack(await reader.readexactly(FRAME.size))
            await reader.readexactly(n)
    finally:
        writer.close()


def measure(pki: DevPki, transport: str, count: int, size: int) -> Measured:
    (port,) = free_ports(1)
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "benchmarks.round_trip",
            "--serve",
            transport,
            "--port",
            str(port),
            "--size",
            str(size),
            "--pki",
            str(pki.directory),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        if server.stdout.readline().strip() != "ready":
            raise RuntimeError(f"the {transport} server did not start")
        ctx = client_context(_files(pki, 2))
        body = b"q" * size
        # A warm-up: the handshake and the first requests are not what is measured.
        asyncio.run(_requests(transport, port, body, 50, ctx))
        server_before = _cpu_s(server.pid)
        cpu_before = time.process_time()
        wall_before = time.perf_counter()
        asyncio.run(_requests(transport, port, body, count, ctx))
        wall = time.perf_counter() - wall_before
        cpu = time.process_time() - cpu_before
        server_cpu = _cpu_s(server.pid) - server_before
    finally:
        server.terminate()
        server.wait()
    per = 1000 / count
    return Measured(transport, cpu * per, server_cpu * per, wall * per)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--requests", type=int, default=3000, help="round trips per run")
    parser.add_argument("--size", type=int, default=300, help="body bytes each way")
    parser.add_argument("--runs", type=int, default=3, help="runs of each transport")
    parser.add_argument("--serve", choices=TRANSPORTS, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--pki", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        pki = DevPki(Path(args.pki))
        ctx = server_context(_files(pki, 1), require_client_cert=True)
        asyncio.run(_serve(args.serve, args.port, args.size, ctx))
        return 0
    stamp = results.Stamp.now()
    with tempfile.TemporaryDirectory(prefix="epochlog-round-trip-") as tmp:
        pki = DevPki(Path(tmp)).ensure([1, 2])
        results_by_transport: dict[str, list[Measured]] = {t: [] for t in TRANSPORTS}
        for run in range(args.runs):
            for transport in TRANSPORTS:
                m = measure(pki, transport, args.requests, args.size)
                results_by_transport[transport].append(m)
                print(
                    f"run {run + 1} {transport}: client {m.client_ms:.3f} ms, server "
                    f"{m.server_ms:.3f} ms of CPU, {m.wall_ms:.3f} ms wall per round trip",
                    file=sys.stderr,
                )
    print(
        f"one round trip, {args.size} B each way, mutual TLS on loopback, medians of "
        f"{args.runs} runs of {args.requests}:"
    )
    print(f"{'transport':<10} {'client CPU ms':>14} {'server CPU ms':>14} {'wall ms':>9}")
    medians = {}
    for transport, runs in results_by_transport.items():
        client = statistics.median(m.client_ms for m in runs)
        server = statistics.median(m.server_ms for m in runs)
        wall = statistics.median(m.wall_ms for m in runs)
        medians[transport] = client + server
        print(f"{transport:<10} {client:>14.3f} {server:>14.3f} {wall:>9.3f}")
    print(f"CPU of an https round trip / a framed one: {medians['https'] / medians['framed']:.1f}")
    results.write(as_result(stamp, args, results_by_transport))
    return 0


def as_result(
    stamp: results.Stamp, args: argparse.Namespace, measured: dict[str, list[Measured]]
) -> results.Result[results.Row]:
    """The JSON of one run (`benchmarks.results`): the framed stream is the baseline."""

    def cpu(transport: str) -> list[float]:
        return [m.client_ms + m.server_ms for m in measured[transport]]

    framed, https = statistics.median(cpu("framed")), statistics.median(cpu("https"))
    return results.Result[results.Row](
        benchmark="round_trip",
        date=stamp.date,
        machine=stamp.machine,
        parameters=results.parameters(args, leave_out=("serve", "port", "pki")),
        baselines={
            "framed": results.Baseline(
                label="framed TLS stream, client + server CPU per round trip",
                unit="ms",
                value=framed,
                runs=cpu("framed"),
            )
        },
        figures={
            "https": results.Figure(
                label="aiohttp HTTPS, client + server CPU per round trip", unit="ms", value=https
            )
        },
        ratios={
            "https_over_framed": results.Ratio(
                label="CPU of an https round trip / a framed one",
                value=https / framed,
                baseline="framed",
            )
        },
        goals=[],
        rows=[
            {
                "run": n + 1,
                "transport": m.transport,
                "client_cpu_ms": m.client_ms,
                "server_cpu_ms": m.server_ms,
                "wall_ms": m.wall_ms,
            }
            for transport in TRANSPORTS
            for n, m in enumerate(measured[transport])
        ],
        notes=[],
        status=0,
    )


if __name__ == "__main__":
    sys.exit(main())
