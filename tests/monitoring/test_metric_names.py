"""Every metric the chart's dashboard and alert rules name is one a running cluster exports.

The embedded cluster (API emulator, the real operator, three real brokers, TLS)
starts once for this module: a Partition is made, records are written with
acks=all and read back, then /metrics of the operator and of every broker is
scraped and the cluster stopped. The names in the dashboard's and the rules'
PromQL (tests/monitoring/promql.py) are checked against what was scraped, and the
metrics the alerts rest on are checked for the values the cluster's state gives
them. A copy of the dashboard with one name wrong fails the same check.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
import pytest
from cryptography import x509

from epochlog.client import Client, Producer
from epochlog_tools.devcluster.local import LocalCluster
from epochlog_tools.devcluster.local_workload import read_back
from tests.e2e.conftest import e2e_settings, print_logs
from tests.e2e.helpers import create_partition
from tests.monitoring.promql import DASHBOARD, Exported, missing, names_used

PARTITION = "metrics-0"
RECORDS = [f"record-{i}" for i in range(20)]


async def _scrape(url: str) -> str:
    async with aiohttp.ClientSession() as http, http.get(url + "/metrics") as rsp:
        assert rsp.status == 200, url
        return await rsp.text()


async def _run_and_scrape(state_dir: Path) -> tuple[dict[str, str], dict[str, Path]]:
    """/metrics of every broker and the operator after records went through, by process;
    and the certificate files each was given."""
    cluster = LocalCluster(state_dir, brokers=3, settings=e2e_settings())
    assert cluster.tls
    try:
        await cluster.up(example_partitions=False)
        await create_partition(cluster, PARTITION, [1, 2, 3])
        async with Client(cluster.bootstrap, credentials=cluster.credentials) as client:
            async with Producer(client, acks="all") as producer:
                futures = [await producer.send(PARTITION, v) for v in RECORDS]
                for f in futures:
                    await f
            records = await read_back(client, PARTITION)
        assert [v for _, v in records] == RECORDS
        scraped = {}
        for name, info in cluster.processes.items():
            if info.role in ("broker", "operator"):
                scraped[name] = await _scrape(cluster.probe_url(name))
        pki = cluster.pki_dir
        certificates = {"operator": pki / "operator.crt"} | {
            f"broker-{b}": pki / f"broker-{b}.crt" for b in (1, 2, 3)
        }
        return scraped, certificates
    except BaseException:
        print_logs(cluster)
        raise
    finally:
        await cluster.down()


@pytest.fixture(scope="module")
def scraped(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, str], dict[str, Path]]:
    return asyncio.run(_run_and_scrape(tmp_path_factory.mktemp("monitoring") / "cluster"))


def _exported(texts: dict[str, str]) -> Exported:
    exported = Exported()
    for text in texts.values():
        exported.add(text)
    return exported


def test_every_metric_the_dashboard_and_the_alerts_name_is_exported(
    scraped: tuple[dict[str, str], dict[str, Path]],
) -> None:
    texts, _ = scraped
    assert set(texts) == {"operator", "broker-1", "broker-2", "broker-3"}
    used = names_used()
    assert len(used) >= 20
    assert missing(used, _exported(texts)) == {}


def test_a_wrong_name_in_a_copy_of_the_dashboard_fails_the_check(
    scraped: tuple[dict[str, str], dict[str, Path]], tmp_path: Path
) -> None:
    texts, _ = scraped
    exported = _exported(texts)
    text = DASHBOARD.read_text()
    # A misspelt gauge, and a histogram suffix on a family that is no histogram.
    for right, wrong in (
        ("epochlog_broker_high_watermark_age_seconds", "epochlog_broker_high_watermark_age"),
        ("epochlog_fsync_seconds_bucket", "epochlog_broker_ready_bucket"),
    ):
        assert right in text
        copy = tmp_path / f"{wrong}.json"
        copy.write_text(text.replace(right, wrong))
        assert set(missing(names_used(dashboard=copy), exported)) == {wrong}
        assert exported.has(right)


def _samples(exported: Exported, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {tuple(sorted(labels.items())): v for labels, v in exported.samples.get(name, [])}


def test_the_alerts_metrics_say_what_the_cluster_is(
    scraped: tuple[dict[str, str], dict[str, Path]],
) -> None:
    """Nothing offline, under minInsyncReplicas or fenced, no storage fault, nothing waits
    for a highWatermark after the writes were acknowledged; each process exports the end of
    the certificate it was given."""
    texts, certificates = scraped
    operator = _exported({"operator": texts["operator"]})
    assert _samples(operator, "epochlog_operator_broker_fenced") == {
        (("broker", str(b)),): 0.0 for b in (1, 2, 3)
    }
    conditions = _samples(operator, "epochlog_operator_partition_conditions")
    assert {labels[0][1] for labels in conditions} == {
        "Offline",
        "UnderMinIsr",
        "UnderReplicated",
        "Reassigning",
    }
    assert set(conditions.values()) == {0.0}
    for process, path in certificates.items():
        exported = _exported({process: texts[process]})
        ends = _samples(exported, "epochlog_certificate_expiry_timestamp_seconds")
        own = x509.load_pem_x509_certificate(path.read_bytes()).not_valid_after_utc.timestamp()
        assert ends[(("certificate", "own"),)] == own, process
        assert (("certificate", "cluster-ca"),) in ends
        if process == "operator":
            continue
        assert (("certificate", "clients-ca"),) in ends
        faulted = _samples(exported, "epochlog_broker_faulted_replicas")
        assert faulted == {(("fault", k),): 0.0 for k in ("disk-full", "io-error", "damaged")}, (
            process
        )
        assert _samples(exported, "epochlog_broker_storage_faults_total") == {(): 0.0}
        assert _samples(exported, "epochlog_broker_high_watermark_waiting_partitions") == {(): 0.0}
        assert _samples(exported, "epochlog_broker_high_watermark_age_seconds") == {(): 0.0}
        size = _samples(exported, "epochlog_broker_volume_size_bytes")[()]
        available = _samples(exported, "epochlog_broker_volume_available_bytes")[()]
        assert 0 < available <= size
