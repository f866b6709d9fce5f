"""Which certificates are due (`epochlog_operator.certificates`), and their settings."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime, timedelta

import pytest

from epochlog.security.pki import CLUSTER_CA_NAME, issue, new_ca
from epochlog.security.principal import broker_uri
from epochlog_operator.certificates import CertificateSettings, Leaf, due
from epochlog_operator.settings import (
    OperatorSettings,
    SettingsError,
    add_arguments,
    parse_broker_ids,
)

NOW = datetime.now(UTC)
WINDOW = timedelta(days=30)
CA = new_ca(CLUSTER_CA_NAME)
LEAF = Leaf("epochlog-broker-1", broker_uri(1), ("b1.svc", "10.0.0.1"))


def test_a_good_certificate_is_kept_and_every_other_is_due() -> None:
    good = issue(CA, "b", uris=[LEAF.uri], hosts=LEAF.hosts).cert
    assert due(LEAF, good, CA.cert, NOW, WINDOW) is None
    assert due(LEAF, None, CA.cert, NOW, WINDOW) == "missing"
    short = issue(CA, "b", uris=[LEAF.uri], hosts=LEAF.hosts, days=10).cert
    assert (due(LEAF, short, CA.cert, NOW, WINDOW) or "").startswith("expires ")
    other_ca = new_ca(CLUSTER_CA_NAME)
    foreign = issue(other_ca, "b", uris=[LEAF.uri], hosts=LEAF.hosts).cert
    # Same name, another key: the issuer name alone would not tell them apart.
    assert due(LEAF, foreign, CA.cert, NOW, WINDOW) == "issued by another CA"
    wrong_id = issue(CA, "b", uris=[broker_uri(2)], hosts=LEAF.hosts).cert
    assert due(LEAF, wrong_id, CA.cert, NOW, WINDOW) == f"names another identity than {LEAF.uri}"
    fewer = issue(CA, "b", uris=[LEAF.uri], hosts=["b1.svc"]).cert
    assert due(LEAF, fewer, CA.cert, NOW, WINDOW) == "does not name 10.0.0.1"


def test_the_wanted_certificates_follow_the_settings() -> None:
    s = CertificateSettings(namespace="prod", broker_ids=(0, 1))
    assert [(w.secret, w.hosts) for w in s.wanted()] == [
        ("epochlog-broker-0", ("epochlog-broker-0.epochlog-broker.prod.svc",)),
        ("epochlog-broker-1", ("epochlog-broker-1.epochlog-broker.prod.svc",)),
        ("epochlog-operator", ("epochlog-operator.prod.svc",)),
    ]


def test_broker_ids_are_ids_and_ranges() -> None:
    assert parse_broker_ids("0-2,5") == (0, 1, 2, 5)
    assert parse_broker_ids(" 3 , 1 ") == (1, 3)
    for bad in ("a", "2-1", "1-", "-1"):
        with pytest.raises(SettingsError, match="--broker-ids"):
            parse_broker_ids(bad)


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(argv)


def test_managed_certificates_stand_in_for_the_files_and_need_broker_ids() -> None:
    s = OperatorSettings.from_args(_args("--manage-certificates", "--broker-ids", "0-2"), {})
    assert s.certificate_settings.broker_ids == (0, 1, 2)
    with pytest.raises(SettingsError, match="needs --broker-ids"):
        OperatorSettings.from_args(_args("--manage-certificates"), {})
    with pytest.raises(SettingsError, match="no --ca/--cert/--key"):
        OperatorSettings.from_args(
            _args("--manage-certificates", "--broker-ids", "1", "--ca", "x"), {}
        )
    with pytest.raises(SettingsError, match="contradicts"):
        OperatorSettings.from_args(_args("--manage-certificates", "--plaintext"), {})
    with pytest.raises(SettingsError, match="renew-before-days"):
        OperatorSettings(
            manage_certificates=True, broker_ids="1", certificate_renew_before_days=400
        )
