"""The epochlog images under podman: building them, and running one as a watched process.

- `build_images` runs scripts/images.sh (buildah; idempotent, so an unchanged tree
  costs a few seconds of cache hits and a changed one is rebuilt before it is tested);
- `PODMAN_RUN` is the `podman run` command line that works on these machines:
  rootful, the runc runtime (crun refuses the hybrid cgroup hierarchy), open-file and
  process limits within the machine's hard limits (podman's defaults are above them
  and raising them is not permitted), the host's network (the processes meet on
  loopback, as the local cluster's do), never a pull (no registry is reachable), and
  the Helm chart's restrictions (read-only root, no capabilities);
- `Container` runs `podman run` in the foreground as a `ManagedProcess`, so that its
  output goes to a log file and waits give up when it exits, and `stop` is
  `podman stop` (the image's STOPSIGNAL, SIGTERM, to the process that is PID 1).
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from epochlog_tools.devcluster import podman as pm
from epochlog_tools.devcluster.podman import BROKER_IMAGE, IMAGE_UID, OPERATOR_IMAGE, podman
from epochlog_tools.harness import ManagedProcess

REPO: Final = Path(__file__).resolve().parents[1]
TLS_DIR: Final = "/etc/epochlog/tls"
"""Where the tests mount the certificates in a container."""

PODMAN_RUN: Final = (
    *pm.RUN,
    "--network",
    "host",
    # As the Helm chart runs them: a read-only root file system (podman puts a tmpfs on
    # /tmp, as the chart's emptyDir), no capabilities, no privilege escalation.
    "--read-only",
    "--cap-drop=all",
    "--security-opt=no-new-privileges",
)
__all__ = ["BROKER_IMAGE", "IMAGE_UID", "OPERATOR_IMAGE", "PODMAN_RUN", "REPO", "TLS_DIR"]


class ImageBuildError(Exception):
    """scripts/images.sh failed; the message ends with its output."""


def build_images() -> None:
    """Build (or bring up to date) both images with scripts/images.sh."""
    done = subprocess.run(
        [str(REPO / "scripts" / "images.sh")],
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise ImageBuildError(
            f"scripts/images.sh exited with {done.returncode}:\n{done.stdout}{done.stderr}"
        )


@dataclass
class Container:
    """One container of `image`, run with `PODMAN_RUN` and the image's entrypoint."""

    image: str
    args: Sequence[str]
    """Arguments after the entrypoint (`epochlog broker` / `epochlog operator`)."""
    log: Path
    env: Mapping[str, str] = field(default_factory=dict)
    volumes: Sequence[str] = ()
    """`podman run --volume` specifications, HOST:CONTAINER:ro or HOST:CONTAINER:rw."""
    name: str = field(default_factory=lambda: f"epochlog-e2e-{uuid.uuid4().hex[:12]}")
    process: ManagedProcess = field(init=False)

    def __post_init__(self) -> None:
        self.process = ManagedProcess(self.argv, self.log, name=self.name)

    @property
    def argv(self) -> list[str]:
        volumes = [arg for v in self.volumes for arg in ("--volume", v)]
        env = [arg for k, v in self.env.items() for arg in ("--env", f"{k}={v}")]
        return [*PODMAN_RUN, "--name", self.name, *volumes, *env, self.image, *self.args]

    def start(self) -> None:
        self.process.start()

    def main_pid(self) -> int:
        """The host pid of the container's PID 1 (the epochlog process)."""
        return int(podman("inspect", "--format", "{{.State.Pid}}", self.name))

    async def stop(self, grace_s: float = 30.0) -> int | None:
        """`podman stop`: SIGTERM, SIGKILL after `grace_s`; the exit code of `podman run`,
        which is the container's (0 for a clean stop, 137 when it had to be killed)."""
        if self.process.alive:
            await asyncio.to_thread(
                subprocess.run,
                ["podman", "stop", "--time", str(int(grace_s)), self.name],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                check=False,
            )
        return await self.process.wait()

    def remove(self) -> None:
        """Whatever happened: no container of this name is left (running or not)."""
        subprocess.run(
            ["podman", "rm", "--force", "--ignore", "--time", "0", self.name],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            check=False,
        )
        if self.process.alive:
            self.process.send(signal.SIGKILL)
