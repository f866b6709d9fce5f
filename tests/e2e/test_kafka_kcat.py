"""The Kafka listener on real brokers, judged by kcat (Debian's, on its own librdkafka),
which nobody here wrote, run as a process as a person runs it.

An embedded cluster (API emulator, the real operator, three real brokers) with TLS; kcat
presents a user's certificate from the clients CA (`-X security.protocol=ssl` and the
`ssl.*.location` of the PEM files).

- kcat produces (`-P`, acks=all, idempotent) to both Partitions of a topic, both led by
  one broker, which is SIGKILLed between two runs of kcat: kcat's consumer (`-C -e -J`)
  reads every line once, in the order written, at the offsets epochlog's own HTTP
  client reads them at; kcat's metadata (`-L -J`) shows each Partition's leader,
  replicas and ISR as its status has them, before the kill and after it, and the dead
  broker no more.
- A user the access policy lets write one topic is refused another: kcat exits non-zero
  with Kafka's authorization error, for a write and for a read, and nothing is written.
"""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path
from typing import Any

from epochlog_tools.devcluster.local import LocalCluster
from tests.e2e.conftest import print_logs
from tests.e2e.helpers import carol_cluster, create_partition, status_of, until
from tests.e2e.test_kafka_clients import _read_all

TOPIC = "kcat"
LINES = 200
WAIT_S = 180.0


def _kcat_tls(cluster: LocalCluster, user: str) -> list[str]:
    """kcat's brokers and TLS options for `user`'s certificate."""
    pki = cluster.security.pki
    assert pki is not None
    cert, key = pki.user(user)
    return [
        "-b",
        ",".join(cluster.kafka_bootstrap),
        "-X",
        "security.protocol=ssl",
        "-X",
        f"ssl.ca.location={pki.cluster_ca}",
        "-X",
        f"ssl.certificate.location={cert}",
        "-X",
        f"ssl.key.location={key}",
    ]


async def _kcat(*args: str, stdin: bytes = b"") -> tuple[int, str, str]:
    """kcat run to its end with `stdin`: exit code, stdout, stderr."""
    proc = await asyncio.create_subprocess_exec(
        "kcat",
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate(stdin)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def _consume(tls: list[str], topic: str) -> dict[int, list[tuple[int, bytes]]]:
    """Every record of `topic`, read by kcat from the beginning to the end (`-e`), as
    (offset, value) by partition."""
    code, out, err = await _kcat(*tls, "-C", "-t", topic, "-o", "beginning", "-e", "-J")
    assert code == 0, err
    read: dict[int, list[tuple[int, bytes]]] = {}
    for line in out.splitlines():
        record = json.loads(line)
        read.setdefault(record["partition"], []).append(
            (record["offset"], record["payload"].encode())
        )
    return read


async def _metadata(tls: list[str], topic: str) -> dict[str, Any]:
    code, out, err = await _kcat(*tls, "-L", "-J", "-t", topic)
    assert code == 0, err
    answer: dict[str, Any] = json.loads(out)
    return answer


def _partitions(metadata: dict[str, Any]) -> dict[int, tuple[int, list[int], list[int]]]:
    """(leader, replicas, ISR) by partition, as kcat's `-L -J` shows them (the ISR is
    a set: sorted)."""
    (topic,) = metadata["topics"]
    return {
        p["partition"]: (
            p["leader"],
            [r["id"] for r in p["replicas"]],
            sorted(r["id"] for r in p["isrs"]),
        )
        for p in topic["partitions"]
    }


async def _as_the_status_has_them(
    cluster: LocalCluster, indexes: range
) -> dict[int, tuple[int, list[int], list[int]]]:
    out = {}
    for i in indexes:
        status = await status_of(cluster, f"{TOPIC}-{i}")
        assert status.leader is not None
        out[i] = (status.leader, list(status.replicas), sorted(status.isr))
    return out


def _lines(partition: int, run: int) -> list[bytes]:
    return [b"p%d-run%d-%d" % (partition, run, i) for i in range(LINES)]


async def _produce(tls: list[str], topic: str, partition: int, lines: list[bytes]) -> None:
    """`kcat -P` writing `lines` to one partition, acks=all and idempotent; it exits 0
    once every line is acknowledged."""
    code, _out, err = await _kcat(
        *tls,
        "-P",
        "-t",
        topic,
        "-p",
        str(partition),
        "-X",
        "acks=all",
        "-X",
        "enable.idempotence=true",
        stdin=b"".join(line + b"\n" for line in lines),
    )
    # kcat exits non-zero when a line is not delivered; it also reports, and gets past,
    # a broker of the bootstrap list that is down.
    assert code == 0, err
    assert "Delivery failed" not in err, err


async def _shown_as_the_status_has_them(
    cluster: LocalCluster, tls: list[str], partitions: range, brokers: set[int]
) -> dict[str, Any] | None:
    """kcat's metadata once it lists `brokers` and the Partitions as their status has
    them. The listener builds Metadata from the brokers' own listings (asked at most once
    a second), so it may trail the status for a moment, as a Kafka broker's metadata
    cache trails its controller."""
    answer = await _metadata(tls, TOPIC)
    if {b["id"] for b in answer["brokers"]} != brokers:
        return None
    same = _partitions(answer) == await _as_the_status_has_them(cluster, partitions)
    return answer if same else None


async def test_kcat_writes_through_a_leader_sigkill_and_reads_and_lists_what_epochlog_has(
    local_cluster: LocalCluster,
) -> None:
    cluster = local_cluster
    # Both led by broker 1; after its kill one moves to broker 2, the other to broker 3.
    for index, order in {0: (1, 2, 3), 1: (1, 3, 2)}.items():
        await create_partition(cluster, f"{TOPIC}-{index}", order)
    tls = _kcat_tls(cluster, "admin")
    partitions = range(2)
    listed = await until(
        lambda: _shown_as_the_status_has_them(cluster, tls, partitions, {1, 2, 3}),
        WAIT_S,
        "kcat's metadata as the status has it",
    )
    assert sorted(b["id"] for b in listed["brokers"]) == [1, 2, 3]

    for p in partitions:
        await _produce(tls, TOPIC, p, _lines(p, 0))
    before = {p: await status_of(cluster, f"{TOPIC}-{p}") for p in partitions}
    cluster.kill("broker-1", signal.SIGKILL)
    for p in partitions:
        await _produce(tls, TOPIC, p, _lines(p, 1))

    # Every line once, each partition's in the order written, at offsets 0, 1, ...; kcat
    # reads what epochlog's own client reads.
    read = await _consume(tls, TOPIC)
    for p in partitions:
        name = f"{TOPIC}-{p}"
        assert read[p] == list(enumerate(_lines(p, 0) + _lines(p, 1))), name
        assert await _read_all(cluster, name) == read[p], name

    # The new leaders and the shrunk ISRs, once the status has them all, are what kcat is
    # shown, and the dead broker is listed no more.
    for p in partitions:
        new = await status_of(cluster, f"{TOPIC}-{p}")
        assert new.leader != 1, new
        assert new.leader_epoch > before[p].leader_epoch, new

    async def settled() -> bool:
        statuses = [await status_of(cluster, f"{TOPIC}-{p}") for p in partitions]
        return all(1 not in s.isr for s in statuses)

    await until(settled, WAIT_S, "broker 1 out of every ISR")

    listed = await until(
        lambda: _shown_as_the_status_has_them(cluster, tls, partitions, {2, 3}),
        WAIT_S,
        "kcat's metadata without broker 1, as the status has it",
    )
    shown = _partitions(listed)
    assert {shown[0][0], shown[1][0]} == {2, 3}


async def test_kcat_is_refused_a_topic_the_access_policy_does_not_give_its_user(
    tmp_path: Path,
) -> None:
    cluster = carol_cluster(tmp_path, TOPIC)
    await cluster.up(example_partitions=False)
    try:
        await create_partition(cluster, f"{TOPIC}-0", (1, 2, 3))
        await create_partition(cluster, "secret-0", (2, 3, 1))
        carol = _kcat_tls(cluster, "carol")
        await _produce(carol, TOPIC, 0, [b"by-carol"])
        code, _out, err = await _kcat(
            *carol,
            "-P",
            "-t",
            "secret",
            "-p",
            "0",
            "-X",
            "acks=all",
            "-X",
            "enable.idempotence=true",
            stdin=b"not-allowed\n",
        )
        assert code != 0
        assert "Topic authorization failed" in err, err
        # Reading is refused alike.
        code, out, err = await _kcat(*carol, "-C", "-t", "secret", "-p", "0", "-e")
        assert code != 0
        assert out == ""
        assert "Topic authorization failed" in err, err
        # carol's metadata shows her topic and not the other.
        code, out, err = await _kcat(*carol, "-L", "-J")
        assert code == 0, err
        assert [t["topic"] for t in json.loads(out)["topics"]] == [TOPIC]
        # What she was refused wrote nothing; what she was allowed is there.
        assert await _read_all(cluster, "secret-0") == []
        assert await _read_all(cluster, f"{TOPIC}-0") == [(0, b"by-carol")]
        assert (await _consume(_kcat_tls(cluster, "admin"), TOPIC)) == {0: [(0, b"by-carol")]}
    except BaseException:
        print_logs(cluster)
        raise
    finally:
        await cluster.down()
