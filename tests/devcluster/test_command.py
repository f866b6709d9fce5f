"""`python -m epochlog.kubeapi.apiserver` as a real process, used by the real kubectl."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
from pathlib import Path

from tests.devcluster.conftest import CRDS, EXAMPLES, Kubectl, kubectl_binary


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def test_command_serves_and_writes_a_kubeconfig(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    port = _free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "epochlog.kubeapi.apiserver",
        "--port",
        str(port),
        "--crds",
        str(CRDS),
        "--kubeconfig",
        str(kubeconfig),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        banner = (await asyncio.wait_for(proc.stdout.readline(), 20)).decode()
        assert f"http://127.0.0.1:{port}" in banner
        assert "development and tests" in banner
        assert f"server: http://127.0.0.1:{port}" in kubeconfig.read_text()
        kubectl = Kubectl(kubectl_binary(), kubeconfig, tmp_path)
        await kubectl.run("apply", "-f", str(EXAMPLES / "partition.yaml"))
        _, out, _ = await kubectl.run("get", "part", "-o", "name")
        assert out.strip() == "partition.epochlog.dev/orders-0"
    finally:
        proc.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(proc.wait(), 10)
    assert code == 0, os.strerror(abs(code)) if code < 0 else code
