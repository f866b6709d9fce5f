"""podman as the embedded cluster's container runtime: the flags these machines need.

`RUN` is the start of every `podman run`: rootful, the runc runtime (crun refuses
the hybrid cgroup hierarchy here), open-file and process limits within the
machine's hard limits (podman's defaults are above them and raising them is not
permitted), never a pull (the images are built here, `make images`). The rest
of a container's command line comes from what it runs: a pod of the Helm chart
(`epochlog_tools.devcluster.pods`) or a test's container.

The other functions are thin calls of the podman command; they raise
`PodmanError` with podman's message.
"""

from __future__ import annotations

import subprocess
from typing import Final

from epochlog import __version__

RUN: Final = (
    "podman",
    "run",
    "--rm",
    "--pull=never",
    "--runtime",
    "runc",
    "--ulimit",
    "nofile=1024:1024",
    "--ulimit",
    "nproc=1024:1024",
)
BROKER_IMAGE: Final = f"localhost/epochlog-broker:{__version__}"
OPERATOR_IMAGE: Final = f"localhost/epochlog-operator:{__version__}"
IMAGE_UID: Final = 10001
"""The images' unprivileged user and group: mounted files must be readable by it."""


class PodmanError(Exception):
    """A podman command failed; the message is podman's."""


def podman(*args: str, check: bool = True) -> str:
    """Run `podman ARGS`; its standard output, stripped."""
    done = subprocess.run(
        ["podman", *args], stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False
    )
    if check and done.returncode != 0:
        raise PodmanError(f"podman {' '.join(args)}: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout.strip()


def image_exists(image: str) -> bool:
    """Built here (False too when podman is not installed)."""
    try:
        done = subprocess.run(
            ["podman", "image", "exists", image], stdin=subprocess.DEVNULL, check=False
        )
    except FileNotFoundError:
        return False
    return done.returncode == 0


def create_network(name: str) -> str:
    """A bridge network with DNS (container names and aliases resolve inside it); its
    gateway address, which is this host's address on it."""
    if (
        subprocess.run(
            ["podman", "network", "exists", name], stdin=subprocess.DEVNULL, check=False
        ).returncode
        != 0
    ):
        podman("network", "create", name)
    return podman("network", "inspect", "--format", "{{range .Subnets}}{{.Gateway}}{{end}}", name)


def remove_network(name: str) -> None:
    podman("network", "rm", "--force", name, check=False)


def address(container: str) -> str | None:
    """The container's address on its network; None when it does not run."""
    out = podman(
        "inspect",
        "--format",
        "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}",
        container,
        check=False,
    )
    return out or None


def state(container: str) -> str | None:
    """ "running", "paused", "exited", ...; None when there is no such container."""
    return podman("inspect", "--format", "{{.State.Status}}", container, check=False) or None


def stop(container: str, grace_s: float) -> None:
    """SIGTERM (the image's STOPSIGNAL) to the container's PID 1, SIGKILL after `grace_s`."""
    podman("stop", "--time", str(max(0, round(grace_s))), container, check=False)


def kill(container: str) -> None:
    """SIGKILL at once (a pod deleted with grace period 0)."""
    podman("kill", "--signal", "KILL", container, check=False)


def remove(container: str) -> None:
    """Whatever happened: no container of this name is left, running or not."""
    podman("rm", "--force", "--ignore", "--time", "0", container, check=False)
