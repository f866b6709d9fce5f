"""Scenarios on the Helm chart as installed, written once for every cluster target.

The `target` fixture is the embedded cluster (`ChartCluster`: the chart rendered
with Helm's engine, its pods run from the built images under podman, on the API
emulator) unless `EPOCHLOG_E2E_KUBECONFIG` names a real cluster's kubeconfig
(`KubeTarget`: installed with Helm's SDK into a fresh namespace, pods through
the kubernetes client). Each scenario installs the chart afresh. Clients run on
this host and reach the brokers by the names they advertise.
"""

from __future__ import annotations

import itertools
import time

import pytest
from cryptography import x509

from e2e.targets import BROKERS, ClusterTarget, registered_brokers, wait_for
from epochlog.objects import to_body
from epochlog.resources import ConditionStatus, ConditionType, PartitionStatus
from epochlog.security.pki import Issued, issue
from epochlog_tools.devcluster.local_workload import SteadyProducer, read_back, verify
from epochlog_tools.devcluster.partitions import partition_manifest


@pytest.fixture
async def chart(target: ClusterTarget) -> ClusterTarget:
    """The chart installed with its default values."""
    await target.install()
    return target


async def _partitions(
    target: ClusterTarget, topic: str, count: int, replicas: tuple[int, ...] = ()
) -> list[str]:
    for i in range(count):
        manifest = partition_manifest(topic, i, replicas=replicas, namespace=target.namespace)
        await target.apply(to_body(manifest))
    names = [f"{topic}-{i}" for i in range(count)]
    for name in names:
        await target.wait_leader(name)
        await _in_sync(target, name)
    return names


async def _in_sync(target: ClusterTarget, name: str) -> PartitionStatus:
    """Wait until every replica of `name` is in its ISR. A scenario's fault comes after:
    a leader killed while it is the ISR's only member can only be elected again."""
    got: list[PartitionStatus] = []

    async def full() -> bool:
        status = await target.partition_status(name)
        if status is None or not status.replicas or set(status.isr) != set(status.replicas):
            return False
        got.append(status)
        return True

    await wait_for(full, f"every replica of {name} in its ISR")
    return got[-1]


async def _produce_and_read_back(target: ClusterTarget, names: list[str], rate: int) -> None:
    """Records acknowledged on every partition, then read back: each exactly once."""
    client = await target.client()
    try:
        producer = await SteadyProducer(client, names, rate=rate).start()
        await producer.wait_each(names)
        await producer.stop()
        logs = {name: await read_back(client, name) for name in names}
    finally:
        await client.close()
    verdict = verify(producer.acks, logs)
    assert verdict.ok, verdict
    assert verdict.acknowledged > 0


async def test_the_chart_installs_serves_clients_and_passes_its_helm_test(
    chart: ClusterTarget,
) -> None:
    names = await _partitions(chart, "orders", 2)
    await _produce_and_read_back(chart, names, rate=100)
    assert await chart.run_helm_tests() == {f"{chart.release}-test-produce-consume": 0}


async def test_a_leader_pod_killed_under_load_loses_nothing(chart: ClusterTarget) -> None:
    (name,) = await _partitions(chart, "kill", 1)
    client = await chart.client()
    try:
        producer = await SteadyProducer(client, [name], rate=100).start()
        await producer.wait_ack(name, min_epoch=1, after=0, timeout=120)
        status = await chart.wait_leader(name)
        assert status.leader is not None
        await chart.kill_pod(f"{chart.release}-broker-{status.leader}")  # grace period 0
        await chart.wait_leader(
            name, not_in=[status.leader], min_leader_epoch=status.leader_epoch + 1
        )
        await producer.wait_ack(
            name, min_epoch=status.leader_epoch + 1, after=time.monotonic(), timeout=120
        )
        await chart.wait_ready()  # the StatefulSet made the pod again; it caught up
        await producer.stop()
        logs = {name: await read_back(client, name)}
    finally:
        await client.close()
    verdict = verify(producer.acks, logs)
    assert verdict.ok, verdict
    assert not producer.failed, producer.failed[:5]


async def test_a_rolling_restart_under_load_loses_nothing_keeps_every_isr_and_hands_over(
    chart: ClusterTarget,
) -> None:
    names = await _partitions(chart, "roll", 3)
    client = await chart.client()
    watch = await chart.isr_watch()
    try:
        producer = await SteadyProducer(client, names, rate=150).start()
        await producer.wait_each(names)
        rolled = time.monotonic()
        await chart.rollout_restart(BROKERS)
        await producer.wait_each(names, after=time.monotonic())
        await producer.stop()
        # A figure, not a verdict (how long depends on the machine): the longest time a
        # partition went without an acknowledgement while the brokers rolled.
        gaps = [
            b.at - a.at
            for name in names
            for a, b in itertools.pairwise(
                sorted((x for x in producer.acks if x.partition == name), key=lambda x: x.at)
            )
            if b.at >= rolled
        ]
        print(f"rolling restart: longest wait between acknowledgements {max(gaps):.2f} s")
        logs = {name: await read_back(client, name) for name in names}
    finally:
        await watch.stop()
        await client.close()
    verdict = verify(producer.acks, logs)
    assert verdict.ok, verdict
    assert not producer.failed, producer.failed[:5]
    assert not watch.low, watch.low[:5]
    for b in range(3):
        text = await chart.pod_log(f"{chart.release}-broker-{b}")
        assert "controlled_shutdown_completed" in text, f"broker {b} did not hand over"


async def test_a_renewed_broker_certificate_reaches_the_running_broker(
    target: ClusterTarget,
) -> None:
    """A broker certificate near its end is renewed by the operator in the broker's
    Secret; the Secret volume brings it to the running pod (the kubelet's job), the broker
    takes it up without a restart, and clients and replication go on over TLS."""
    # The operator looks at its certificates every 2 s instead of every hour.
    await target.install({"tls": {"certificateCheckIntervalSeconds": 2}})
    chart = target
    names = await _partitions(chart, "renew", 1)
    pod = f"{chart.release}-broker-1"
    held = await chart.secret(pod)
    ca_secret = await chart.secret(f"{chart.release}-cluster-ca")
    assert held is not None
    assert ca_secret is not None
    ca = Issued.from_pem(ca_secret["ca.crt"], ca_secret["ca.key"])
    current = x509.load_pem_x509_certificate(held["tls.crt"])
    san = current.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    # The same names from the same CA with a day left: the operator renews 30 days early.
    short = issue(
        ca,
        current.subject.rfc4514_string().removeprefix("CN="),
        uris=san.get_values_for_type(x509.UniformResourceIdentifier),
        hosts=[
            *san.get_values_for_type(x509.DNSName),
            *map(str, san.get_values_for_type(x509.IPAddress)),
        ],
        days=1,
    )
    await chart.replace_secret(
        pod, {**held, "tls.crt": short.cert_pem(), "tls.key": short.key_pem()}
    )
    renewed: list[x509.Certificate] = []

    async def renewal() -> bool:
        data = await chart.secret(pod)
        cert = x509.load_pem_x509_certificate(data["tls.crt"]) if data else None
        if cert is None or cert.serial_number in (short.cert.serial_number, current.serial_number):
            return False
        renewed[:] = [cert]
        return True

    await wait_for(renewal, f"the operator to renew {pod}'s certificate")
    serial = str(renewed[0].serial_number)

    async def taken_up() -> bool:
        return any(
            "certificate_reloaded" in line and serial in line
            for line in (await chart.pod_log(pod)).splitlines()
        )

    await wait_for(taken_up, f"{pod} to load the renewed certificate")
    # Clients, and the replicas fetching from broker 1 or broker 1 fetching, go on.
    await _produce_and_read_back(chart, names, rate=50)
    await _in_sync(chart, names[0])


async def test_elections_go_on_after_the_operator_pod_is_killed(chart: ClusterTarget) -> None:
    (name,) = await _partitions(chart, "op", 1)
    first = await _in_sync(chart, name)
    assert first.leader is not None
    await chart.kill_pod(await chart.acting_operator())
    await chart.wait_ready()  # a replica acts again: the one made again, or one standing by
    await chart.kill_pod(f"{chart.release}-broker-{first.leader}")
    moved = await chart.wait_leader(
        name, not_in=[first.leader], min_leader_epoch=first.leader_epoch + 1
    )
    assert moved.leader_epoch > first.leader_epoch


async def test_a_broker_added_under_load_leads_a_new_partition_and_leaves_once_moved_off(
    chart: ClusterTarget,
) -> None:
    """docs/operating/reassignment.md and upgrades.md, as a user runs them: a broker
    added with `helm upgrade` registers and takes a new Partition; later its replicas are
    moved off with `kubectl patch`, the documented check finds none left on it, and the
    StatefulSet is scaled back down. Nothing acknowledged is lost, and every Partition
    ends with a full ISR on the brokers that stay."""
    names = await _partitions(chart, "grow", 2)
    client = await chart.client()
    try:
        producer = await SteadyProducer(client, names, rate=100).start()
        await producer.wait_each(names)
        # helm upgrade --set broker.replicas=4: broker 3 starts, and as the pod template
        # changed (broker 3's certificate is mounted too) brokers 2, 1, 0 roll.
        await chart.scale_brokers(4)

        async def registered() -> bool:
            return 3 in registered_brokers(await chart.operator_metrics())

        await wait_for(registered, "broker 3 to heartbeat to the operator")
        # Moving existing partitions onto broker 3 is a reassignment; a new Partition may
        # name it, preferred leader first.
        (grown,) = await _partitions(chart, "grown", 1, replicas=(3, 0, 1))
        status = await chart.wait_leader(grown)
        assert status.leader == 3, status
        writer = await SteadyProducer(client, [grown], rate=50).start()
        await writer.wait_each([grown])
        await producer.wait_each(names, after=time.monotonic())

        # Broker 3 goes again: its replica moves off first (leadership with it).
        await chart.patch_partition(grown, {"replicas": [0, 1, 2]})

        async def moved() -> bool:
            s = await chart.partition_status(grown)
            if s is None or s.replicas != (0, 1, 2):
                return False
            reassigning = s.condition(ConditionType.REASSIGNING)
            return reassigning is not None and reassigning.status is ConditionStatus.FALSE

        await wait_for(moved, f"{grown} moved off broker 3")
        # The documented check before scaling down (docs/operating/upgrades.md): no
        # Partition names broker 3.
        for name in [*names, grown]:
            now = await chart.partition_status(name)
            assert now is not None
            assert 3 not in now.replicas, (name, now.replicas)
        await writer.wait_each([grown], after=time.monotonic())
        await chart.scale_brokers(3)
        await producer.wait_each(names, after=time.monotonic())
        await writer.wait_each([grown], after=time.monotonic())
        await writer.stop()
        await producer.stop()
        logs = {name: await read_back(client, name) for name in [*names, grown]}
    finally:
        await client.close()
    for name in [*names, grown]:
        await _in_sync(chart, name)
    verdict = verify(producer.acks, {name: logs[name] for name in names})
    assert verdict.ok, verdict
    assert not producer.failed, producer.failed[:5]
    on_new = verify(writer.acks, {grown: logs[grown]})
    assert on_new.ok, on_new
    assert on_new.acknowledged > 0
    assert not writer.failed, writer.failed[:5]


async def test_uninstall_leaves_the_data_and_a_new_install_serves_it(
    target: ClusterTarget,
) -> None:
    await target.install()
    names = await _partitions(target, "kept", 2)
    client = await target.client()
    try:
        producer = await SteadyProducer(client, names, rate=100).start()
        await producer.wait_each(names)
        await producer.stop()
    finally:
        await client.close()
    await target.uninstall()
    volumes = await target.data_volumes()
    assert all(f"data-{target.release}-broker-{b}" in volumes for b in range(3)), volumes

    # Installed again over the same volumes. The Partitions are applied again (the API
    # emulator kept nothing; on a real cluster they are still there) and their status
    # comes back from what the brokers hold.
    await target.install()
    await _partitions(target, "kept", 2)
    client = await target.client()
    try:
        logs = {name: await read_back(client, name) for name in names}
    finally:
        await client.close()
    verdict = verify(producer.acks, logs)
    assert verdict.ok, verdict
    assert verdict.acknowledged > 0
