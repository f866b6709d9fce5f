"""epochlog's client in a pod of the test cluster, as a user's application: it produces
with the credentials it is given until it is told to stop, and says what each request
got. Shipped to the pod in a ConfigMap and run with the image's Python.

    python user_pod_client.py BOOTSTRAP PARTITIONS

PARTITIONS is comma-separated. The credentials:

- the pod's own: the EpochlogUser's Secret at /etc/epochlog/user (`ca.crt`, `user.crt`,
  `user.key`) when it is mounted, else the projected ServiceAccount token at
  /var/run/secrets/epochlog/token with the cluster CA from the environment
  (`EPOCHLOG_CA_PEM`);
- others in `EPOCHLOG_TOKENS` (JSON `{label: token}`), each presented as a bearer token.

Each round, one client per credential (kept from round to round: its connections stay
open) sends one record to each partition, and a line per request is printed:
`{"t": wall-clock seconds, "as": label ("self" for the pod's own), "partition": ...,
"code": "" or the error code, "offset": ...}`. The first time the pod's own credentials
get a record into the first partition, that partition is read from its start
(`{"read": [values]}`). The rounds go on until /tmp/stop exists.

Nothing here judges: the test reads the printed lines.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from epochlog.client import Client, Consumer, Producer
from epochlog.security.options import Credentials

USER = Path("/etc/epochlog/user")
TOKEN = Path("/var/run/secrets/epochlog/token")
STOP = Path("/tmp/stop")
ROUND_S = 0.5
"""Between rounds: how finely a change is seen."""
REQUEST_MS = 20_000


def say(line: dict[str, Any]) -> None:
    print(json.dumps(line), flush=True)


def own() -> Credentials:
    if (USER / "user.crt").exists():
        return Credentials.of(str(USER / "ca.crt"), str(USER / "user.crt"), str(USER / "user.key"))
    ca = Path("/tmp/ca.crt")
    ca.write_text(os.environ["EPOCHLOG_CA_PEM"])
    return Credentials.of(str(ca), token=TOKEN.read_text().strip())


async def attempt(client: Client, label: str, partition: str, n: int) -> dict[str, Any]:
    line: dict[str, Any] = {"as": label, "partition": partition}
    try:
        async with Producer(client, acks="all", delivery_timeout_ms=REQUEST_MS) as producer:
            done = await producer.send_and_wait(partition, f"{label}-{n}")
        line.update(code="", offset=done.offset, value=f"{label}-{n}")
    except Exception as exc:  # every failure is reported, by its code where it has one
        line.update(code=str(getattr(exc, "code", "") or type(exc).__name__), error=str(exc))
    line["t"] = time.time()
    return line


async def main(bootstrap: str, partitions: list[str]) -> None:
    mine = own()
    assert mine.tls is not None
    credentials = {"self": mine}
    for label, token in json.loads(os.environ.get("EPOCHLOG_TOKENS", "{}")).items():
        credentials[label] = Credentials.of(mine.tls.ca, token=token)
    clients = {
        label: Client([bootstrap], credentials=c, request_timeout_ms=REQUEST_MS)
        for label, c in credentials.items()
    }
    read = False
    n = 0
    try:
        while not STOP.exists():
            for label, client in clients.items():
                for partition in partitions:
                    line = await attempt(client, label, partition, n)
                    say(line)
                    first = label == "self" and partition == partitions[0]
                    if first and not line["code"] and not read:
                        consumer = Consumer(client, partition, start="earliest", max_wait_ms=0)
                        say({"read": [(r.value or b"").decode() for r in await consumer.poll()]})
                        read = True
            n += 1
            await asyncio.sleep(ROUND_S)
    finally:
        for client in clients.values():
            await client.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2].split(",")))
