"""`python -m epochlog_tools.kubeapi.apiserver` as a real process, used by the real kubectl."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

from epochlog_tools.harness import apiserver_argv, free_port
from tests.devcluster.conftest import CRDS, EXAMPLES, Kubectl, kubectl_binary


async def test_command_serves_and_writes_a_kubeconfig(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    port = free_port()
    # Its output is read here (the banner), so it is started here rather than with its
    # output in a log file.
    proc = await asyncio.create_subprocess_exec(
        *apiserver_argv(port=port, crds=CRDS, kubeconfig=kubeconfig),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        banner = (await proc.stdout.readline()).decode()
        assert f"http://127.0.0.1:{port}" in banner
        assert "development and tests" in banner
        assert f"server: http://127.0.0.1:{port}" in kubeconfig.read_text()
        kubectl = Kubectl(kubectl_binary(), kubeconfig, tmp_path)
        await kubectl.run("apply", "-f", str(EXAMPLES / "partition.yaml"))
        _, out, _ = await kubectl.run("get", "part", "-o", "name")
        assert out.strip() == "partition.epochlog.dev/orders-0"
    finally:
        proc.send_signal(signal.SIGTERM)
        code = await proc.wait()
    assert code == 0, os.strerror(abs(code)) if code < 0 else code
