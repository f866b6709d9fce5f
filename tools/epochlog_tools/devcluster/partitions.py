"""Partition objects as the local cluster and its users read and write them, typed.

The envelope (`metadata`, `apiVersion`, `kind`) comes from `epochlog.objects`,
the spec and status from `epochlog.resources`, so that nothing here or in the
callers spells a field name by hand:

- `partitions_path`, `partition_path`: where they are in the API;
- `partition_manifest`: the object `LocalCluster.apply` creates (only the spec
  fields given are sent, the API server's defaults fill in the rest);
- `Partition`: an object read back, spec and status parsed;
- `PartitionEvent`: one line of a watch on Partitions;
- `PartitionRow`: the columns `epochlog dev status` shows (and prints as JSON).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from epochlog.objects import API_VERSION, ObjectMeta, PartitionObject
from epochlog.protocol.wire import BrokerId, NonNegativeInt, WireModel
from epochlog.resources import (
    DEFAULT_MIN_INSYNC_REPLICAS,
    DEFAULT_REPLICATION_FACTOR,
    GROUP,
    KIND,
    PLURAL,
    VERSION,
    ConditionType,
    PartitionSpec,
    PartitionStatus,
)

NAMESPACE = "default"


def partitions_path(namespace: str | None = None) -> str:
    """The API path of the Partitions of `namespace` (of every namespace when None)."""
    where = f"/namespaces/{namespace}" if namespace else ""
    return f"/apis/{GROUP}/{VERSION}{where}/{PLURAL}"


def partition_path(name: str, namespace: str = NAMESPACE) -> str:
    """The API path of one Partition."""
    return f"{partitions_path(namespace)}/{name}"


def partition_manifest(
    topic: str,
    index: int,
    *,
    replication_factor: int = DEFAULT_REPLICATION_FACTOR,
    min_insync_replicas: int = DEFAULT_MIN_INSYNC_REPLICAS,
    replica_lag_time_max_ms: int | None = None,
    replicas: Sequence[int] = (),
    unclean_leader_election: bool = False,
    namespace: str = NAMESPACE,
    retention_ms: int | None = None,
    retention_bytes: int | None = None,
    segment_bytes: int | None = None,
) -> PartitionObject:
    """A Partition `<topic>-<index>` to create; `replicas` fixes the replica order (preferred
    leader first) instead of letting the operator assign them. Retention and segment
    settings left None keep the CRD's defaults."""
    settings: dict[str, Any] = {
        "replication_factor": replication_factor,
        "min_insync_replicas": min_insync_replicas,
    }
    for key, value in (
        ("retention_ms", retention_ms),
        ("retention_bytes", retention_bytes),
        ("segment_bytes", segment_bytes),
    ):
        if value is not None:
            settings[key] = value
    if replica_lag_time_max_ms is not None:
        settings["replica_lag_time_max_ms"] = replica_lag_time_max_ms
    if replicas:
        settings["replicas"] = tuple(replicas)
    if unclean_leader_election:
        settings["unclean_leader_election"] = True
    spec = PartitionSpec(topic=topic, partition=index, **settings)
    return PartitionObject(
        metadata=ObjectMeta(name=spec.name, namespace=namespace),
        spec=spec.model_dump(mode="json", exclude_unset=True),
    )


class Partition(WireModel):
    """A Partition object read from the API server."""

    api_version: str = API_VERSION
    kind: str = KIND
    metadata: ObjectMeta
    spec: PartitionSpec
    status: PartitionStatus | None = None
    """None until the operator first writes one."""

    @property
    def name(self) -> str:
        return self.metadata.name or self.spec.name

    @property
    def namespace(self) -> str:
        return self.metadata.namespace or NAMESPACE


class PartitionEvent(WireModel):
    """One event of a watch on Partitions ("ADDED", "MODIFIED", "DELETED", ...)."""

    type: str
    object: PartitionObject

    @property
    def status(self) -> PartitionStatus | None:
        """The status an ADDED or MODIFIED event carries, if any."""
        if self.type not in ("ADDED", "MODIFIED") or not self.object.status:
            return None
        return PartitionStatus.model_validate(self.object.status)


class PartitionRow(WireModel):
    """One line of `epochlog dev status` (the columns of `kubectl get partitions`)."""

    name: str
    namespace: str
    topic: str
    partition: NonNegativeInt
    leader: BrokerId | None
    leader_epoch: NonNegativeInt
    isr: tuple[BrokerId, ...]
    replicas: tuple[BrokerId, ...]
    high_watermark: NonNegativeInt
    status: str | None
    """The Ready condition's reason."""

    @classmethod
    def of(cls, p: Partition) -> PartitionRow:
        status = p.status or PartitionStatus()
        ready = status.condition(ConditionType.READY)
        return cls(
            name=p.name,
            namespace=p.namespace,
            topic=p.spec.topic,
            partition=p.spec.partition,
            leader=status.leader,
            leader_epoch=status.leader_epoch,
            isr=status.isr,
            replicas=status.replicas,
            high_watermark=status.high_watermark,
            status=ready.reason if ready is not None else None,
        )
