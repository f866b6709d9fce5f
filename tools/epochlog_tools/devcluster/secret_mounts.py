"""The kubelet's Secret volumes for the embedded cluster's processes, as a process of its own.

With certificates the operator keeps in Secrets (`DevSettings.managed_certificates`),
the brokers and clients of the embedded cluster read them from folders, as pods read
a mounted Secret. `python -m epochlog_tools.devcluster.secret_mounts --api URL
--namespace NS SECRET=DIR ...` writes each Secret's keys into its folder as the
kubelet writes a Secret volume (`volumes.write_volume`: a `..data` symlink switched
atomically) and again whenever the Secret changes, every `--interval-s`. A Secret
that is missing leaves its folder as it is. It runs until SIGTERM, logging one line
per update to standard output.

Its own process, not a task of the command that starts the cluster: the cluster
outlives `epochlog dev up`, and a running broker must keep receiving its renewed
certificates.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import signal
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Final

from epochlog_tools.devcluster.volumes import write_volume

DEFAULT_INTERVAL_S: Final = 0.5
MODE: Final = 0o644
KEY_MODE: Final = 0o600


def read_secret(api: str, namespace: str, name: str) -> dict[str, bytes] | None:
    """The Secret's data, decoded; None while it does not exist."""
    url = f"{api.rstrip('/')}/api/v1/namespaces/{namespace}/secrets/{name}"
    try:
        with urllib.request.urlopen(url, timeout=10) as rsp:
            obj = json.loads(rsp.read())
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        raise
    return {k: base64.b64decode(v) for k, v in (obj.get("data") or {}).items()}


def sync(api: str, namespace: str, mounts: dict[str, Path]) -> list[str]:
    """One pass: every mounted Secret written where it changed; the Secrets written."""
    written = []
    for name, folder in mounts.items():
        data = read_secret(api, namespace, name)
        if data is None:
            continue
        payload = {k: (v, KEY_MODE if k.endswith(".key") else MODE) for k, v in data.items()}
        if write_volume(folder, payload, os.getgid()):
            written.append(name)
    return written


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="secret_mounts", description=__doc__.split("\n")[0])
    parser.add_argument("--api", required=True, help="the API server's base URL")
    parser.add_argument("--namespace", default="default")
    parser.add_argument("--interval-s", type=float, default=DEFAULT_INTERVAL_S)
    parser.add_argument("mounts", nargs="+", metavar="SECRET=DIR")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse(sys.argv[1:] if argv is None else argv)
    mounts = {}
    for spec in args.mounts:
        name, _, folder = spec.partition("=")
        if not name or not folder:
            raise SystemExit(f"not SECRET=DIR: {spec}")
        mounts[name] = Path(folder)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    while not stop.is_set():
        try:
            for name in sync(args.api, args.namespace, mounts):
                print(f"secret_volume_updated secret={name} dir={mounts[name]}", flush=True)
        except (OSError, ValueError) as exc:
            print(f"secret_volume_sync_failed error={exc}", flush=True)
        stop.wait(args.interval_s)
    return 0


if __name__ == "__main__":
    sys.exit(main())
