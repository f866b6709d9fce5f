"""The operator's I/O-free parts: settings, the peering rule, heartbeat parsing, metrics."""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from epochlog.protocol.errors import InvalidRequestError
from epochlog.security.pki import DevPki
from epochlog_operator.indexed import IndexedHeartbeat
from epochlog_operator.metrics import Metrics
from epochlog_operator.peering import acts
from epochlog_operator.reconciler import parse_partition
from epochlog_operator.server import parse_heartbeat
from epochlog_operator.settings import OperatorSettings, SettingsError, add_arguments

HEARTBEAT = {
    "brokerId": 1,
    "brokerEpoch": 2,
    "address": "broker-1:8080",
    "timeMs": 5,
    "partitions": [
        {
            "name": f"t-{i}",
            "role": "follower",
            "leaderEpoch": i,
            "logEndOffset": 0,
            "highWatermark": 0,
        }
        for i in range(3)
    ],
}


def _args(*argv: str, plaintext: bool = True) -> argparse.Namespace:
    """Parsed operator flags; `--plaintext` added unless told not to (these tests are about
    other settings)."""
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args([*argv, *(["--plaintext"] if plaintext else [])])


def test_the_operator_needs_tls_or_an_explicit_plaintext(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="TLS is on by default: give --ca, --cert and --key"):
        OperatorSettings.from_args(_args(plaintext=False), {})
    pki = DevPki(tmp_path).ensure([1])
    cert, key = pki.operator()
    flags = ("--ca", str(pki.cluster_ca), "--cert", str(cert), "--key", str(key))
    tls = OperatorSettings.from_args(_args(*flags, plaintext=False), {}).tls
    assert tls is not None
    assert tls.cert == str(cert)
    env = {"EPOCHLOG_CA": str(pki.cluster_ca), "EPOCHLOG_CERT": str(cert), "EPOCHLOG_KEY": str(key)}
    assert OperatorSettings.from_args(_args(plaintext=False), env).tls == tls
    with pytest.raises(SettingsError, match="contradict"):
        OperatorSettings.from_args(_args(*flags), {})
    with pytest.raises(SettingsError, match="does not exist"):
        OperatorSettings.from_args(
            _args("--ca", str(tmp_path / "nope.crt"), *flags[2:], plaintext=False), {}
        )


def test_flags_override_the_environment_which_overrides_defaults() -> None:
    env = {
        "EPOCHLOG_BROKER_SESSION_TIMEOUT_MS": "4000",
        "EPOCHLOG_HEARTBEAT_INTERVAL_MS": "200",
        "EPOCHLOG_NAMESPACES": "a, b",
        "EPOCHLOG_STANDALONE": "true",
    }
    s = OperatorSettings.from_args(_args("--broker-session-timeout-ms", "6000"), env)
    assert s.broker_session_timeout_ms == 6000
    assert s.heartbeat_interval_ms == 200
    assert s.namespaces == ("a", "b")
    assert s.standalone is True
    assert s.status_refresh_interval_ms == 5000
    assert not s.clusterwide
    assert OperatorSettings.from_args(_args("--namespace", "x"), {}).namespaces == ("x",)
    assert OperatorSettings.from_args(_args(), {}).clusterwide


def test_bad_settings_name_the_setting() -> None:
    with pytest.raises(SettingsError, match="EPOCHLOG_LISTEN_PORT must be an integer"):
        OperatorSettings.from_args(_args(), {"EPOCHLOG_LISTEN_PORT": "http"})
    with pytest.raises(SettingsError, match="at least twice --heartbeat-interval-ms"):
        OperatorSettings(heartbeat_interval_ms=600, broker_session_timeout_ms=1000)
    with pytest.raises(SettingsError, match="--reconcile-interval-ms must be positive"):
        OperatorSettings(reconcile_interval_ms=0)


def test_the_api_write_budget_comes_from_flags_or_the_environment() -> None:
    defaults = OperatorSettings.from_args(_args(), {})
    assert (defaults.api_writes_per_second, defaults.api_write_burst) == (20, 30)
    env = {"EPOCHLOG_API_WRITES_PER_SECOND": "2.5", "EPOCHLOG_API_WRITE_BURST": "4"}
    s = OperatorSettings.from_args(_args(), env)
    assert (s.api_writes_per_second, s.api_write_burst) == (2.5, 4)
    s = OperatorSettings.from_args(_args("--api-writes-per-second", "50"), env)
    assert (s.api_writes_per_second, s.api_write_burst) == (50, 4)
    with pytest.raises(SettingsError, match="EPOCHLOG_API_WRITES_PER_SECOND must be a number"):
        OperatorSettings.from_args(_args(), {"EPOCHLOG_API_WRITES_PER_SECOND": "fast"})
    for rate in (0.0, float("nan")):
        with pytest.raises(SettingsError, match="--api-writes-per-second must be positive"):
            OperatorSettings(api_writes_per_second=rate)
    with pytest.raises(SettingsError, match="--api-writes-per-second must be a finite number"):
        OperatorSettings.from_args(_args("--api-writes-per-second", "inf"), {})
    with pytest.raises(SettingsError, match="--api-write-burst must be positive"):
        OperatorSettings(api_write_burst=0)


def test_older_replicas_get_higher_default_priorities() -> None:
    assert OperatorSettings().priority > OperatorSettings().priority - 1
    from epochlog_operator.settings import default_priority

    assert default_priority(1000.0) > default_priority(1000.5)


def test_a_live_peer_with_higher_or_equal_priority_blocks() -> None:
    now = datetime(2030, 1, 1, tzinfo=UTC)
    seen = (now - timedelta(seconds=5)).isoformat()
    stale = (now - timedelta(seconds=90)).isoformat()
    peers = {
        "me": {"priority": 10, "lifetime": 60, "lastseen": seen},
        "low": {"priority": 5, "lifetime": 60, "lastseen": seen},
        "dead": {"priority": 99, "lifetime": 60, "lastseen": stale},
    }
    assert acts(peers, "me", 10, now) == (True, [])
    peers["same"] = {"priority": 10, "lifetime": 60, "lastseen": seen}
    assert acts(peers, "me", 10, now) == (False, ["same"])
    peers["high"] = {"priority": 11, "lifetime": 60, "lastseen": seen}
    assert acts(peers, "me", 10, now) == (False, ["high", "same"])


def test_the_index_follows_copies_with_other_reports() -> None:
    hb = IndexedHeartbeat.model_validate(HEARTBEAT)
    report = hb.partition("t-1")
    assert report is not None
    assert report.leader_epoch == 1
    assert hb.partition("t-9") is None
    changed = hb.model_copy(
        update={
            "partitions": tuple(p.model_copy(update={"leader_epoch": 7}) for p in hb.partitions)
        }
    )
    copied = changed.partition("t-1")
    assert copied is not None
    assert copied.leader_epoch == 7
    assert hb == IndexedHeartbeat.model_validate(HEARTBEAT)
    assert hb != changed


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"", "the body is not JSON"),
        (b"{", "the body is not JSON"),
        (b"null", "must be a JSON object (a BrokerHeartbeat), not NoneType"),
        (b'"hb"', "must be a JSON object (a BrokerHeartbeat), not str"),
        (json.dumps({**HEARTBEAT, "timeMs": -1}).encode(), "invalid heartbeat: timeMs: "),
        (
            json.dumps({**HEARTBEAT, "partitions": [{"name": "t-0"}]}).encode(),
            "invalid heartbeat: partitions[0].role: Field required (and 3 more)",
        ),
    ],
)
def test_malformed_heartbeat_bodies(body: bytes, message: str) -> None:
    with pytest.raises(InvalidRequestError) as err:
        parse_heartbeat(body)
    assert message in err.value.message
    assert err.value.to_dict()["error"]["code"] == "INVALID_REQUEST"


def test_a_partition_named_otherwise_than_topic_index_is_not_decided() -> None:
    body = {
        "metadata": {"name": "orders-1", "resourceVersion": "3", "generation": 2},
        "spec": {"topic": "orders", "partition": 0},
    }
    decided, problem = parse_partition(body)
    assert decided is None
    assert problem is not None
    assert "'orders-0'" in problem
    body["metadata"]["name"] = "orders-0"
    decided, problem = parse_partition(body)
    assert problem is None
    assert decided is not None
    assert (decided.generation, decided.resource_version, decided.status) == (2, "3", None)


def test_metrics_render_as_prometheus_text() -> None:
    m = Metrics()
    m.elections.inc(kind="clean")
    m.elections.inc(kind="clean")
    m.status_writes.inc(kind="refresh")
    m.api_writes.inc(kind="election")
    m.api_write_wait.inc(0.125, kind="refresh")
    text = m.render({2: 0.25})
    assert "# TYPE epochlog_operator_elections_total counter" in text
    assert 'epochlog_operator_elections_total{kind="clean"} 2' in text
    assert 'epochlog_operator_status_writes_total{kind="refresh"} 1' in text
    assert 'epochlog_operator_broker_heartbeat_age_seconds{broker="2"} 0.25' in text
    assert 'epochlog_operator_api_writes_total{kind="election"} 1' in text
    assert 'epochlog_operator_api_write_wait_seconds_total{kind="refresh"} 0.125' in text
    assert text.endswith("\n")
