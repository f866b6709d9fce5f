"""The access policy and the principals of certificates: pure decisions."""

from __future__ import annotations

from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization

from epochlog.security.access import AccessPolicy, Operation, load_policy, token_digest
from epochlog.security.pki import (
    CLUSTER_CA_NAME,
    DevPki,
    Issued,
    issue,
    issue_broker,
    issue_operator,
    issue_user,
    new_ca,
)
from epochlog.security.principal import (
    Kind,
    Principal,
    broker_uri,
    principal_from_certificate,
)

POLICY = {
    "tokens": [{"principal": "User:spark", "sha256": token_digest("s3cret")}],
    "acls": [
        {"principal": "User:spark", "topics": ["orders", "audit.*"], "operations": ["read"]},
        {"principal": "User:*", "topics": ["public"], "operations": ["describe"]},
        {"principal": "User:ops", "topics": ["*"], "operations": ["all"]},
    ],
}


def user(name: str) -> Principal:
    return Principal(Kind.USER, name)


def test_rules_grant_per_topic_and_operation() -> None:
    policy = AccessPolicy.model_validate(POLICY)
    spark = user("spark")
    assert policy.allows(spark, Operation.READ, "orders")
    assert policy.allows(spark, Operation.DESCRIBE, "orders")  # read implies describe
    assert not policy.allows(spark, Operation.WRITE, "orders")
    assert policy.allows(spark, Operation.READ, "audit.eu")
    assert not policy.allows(spark, Operation.READ, "audit")  # a prefix, not the name
    assert not policy.allows(spark, Operation.READ, "orders2")
    assert policy.allows(user("anyone"), Operation.DESCRIBE, "public")
    assert not policy.allows(user("anyone"), Operation.READ, "public")
    assert policy.allows(user("ops"), Operation.WRITE, "anything")
    assert policy.allows(Principal(Kind.BROKER, "3"), Operation.WRITE, "orders")
    assert policy.allows(Principal(Kind.OPERATOR, "operator"), Operation.READ, "orders")
    anonymous = Principal(Kind.ANONYMOUS, "anonymous")
    assert not policy.allows(anonymous, Operation.DESCRIBE, "public")


GROUPS = {
    "acls": [
        {"principal": "User:billing", "topics": ["ledger"], "operations": ["read"]},
        {"principal": "User:billing", "groups": ["billing-*"], "operations": ["read"]},
        {"principal": "User:audit", "groups": ["billing-1"], "operations": ["describe"]},
        {
            "principal": "User:ops",
            "topics": ["ops"],
            "groups": ["ops"],
            "operations": ["all"],
        },
    ],
}


def test_rules_grant_per_group_apart_from_topics() -> None:
    policy = AccessPolicy.model_validate(GROUPS)
    billing, audit, ops = user("billing"), user("audit"), user("ops")
    assert policy.allows_group(billing, Operation.READ, "billing-1")
    assert policy.allows_group(billing, Operation.DESCRIBE, "billing-1")  # read implies it
    assert not policy.allows_group(billing, Operation.WRITE, "billing-1")
    assert not policy.allows_group(billing, Operation.READ, "billing")  # a prefix, not the name
    # A topic rule says nothing of groups of the same name, nor a group rule of topics.
    assert policy.allows(billing, Operation.READ, "ledger")
    assert not policy.allows_group(billing, Operation.READ, "ledger")
    assert not policy.allows(billing, Operation.READ, "billing-1")
    assert policy.allows_group(audit, Operation.DESCRIBE, "billing-1")
    assert not policy.allows_group(audit, Operation.READ, "billing-1")
    # One rule may name both: it grants on each.
    assert policy.allows(ops, Operation.WRITE, "ops")
    assert policy.allows_group(ops, Operation.READ, "ops")
    assert policy.allows_group(ops, Operation.DESCRIBE, "ops")
    assert not policy.allows_group(ops, Operation.READ, "billing-1")
    # Brokers and the operator may do everything; nobody else anything.
    assert policy.allows_group(Principal(Kind.BROKER, "3"), Operation.READ, "billing-1")
    assert policy.allows_group(Principal(Kind.OPERATOR, "operator"), Operation.READ, "x")
    anonymous = Principal(Kind.ANONYMOUS, "anonymous")
    assert not policy.allows_group(anonymous, Operation.DESCRIBE, "billing-1")


def test_a_policy_without_group_rules_grants_no_group() -> None:
    # Policies written before groups had rules keep their meaning for topics; their
    # users get no group until a rule names one (as a Kafka cluster with ACLs on).
    policy = AccessPolicy.model_validate(POLICY)
    assert policy.allows(user("ops"), Operation.READ, "anything")
    assert not policy.allows_group(user("ops"), Operation.DESCRIBE, "anything")
    assert policy.allows_group(Principal(Kind.BROKER, "1"), Operation.READ, "anything")


def test_tokens_are_known_by_their_digest_only() -> None:
    policy = AccessPolicy.model_validate(POLICY)
    assert policy.token_principal("s3cret") == user("spark")
    assert policy.token_principal("s3cret ") is None
    assert policy.token_principal("") is None
    assert "s3cret" not in AccessPolicy.model_validate(POLICY).model_dump_json()


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("acls: [{principal: spark, topics: [a], operations: [read]}]", "is not User:<name>"),
        ("acls: [{principal: 'User:a', topics: [a], operations: [steal]}]", "operations.0"),
        ("acls: [{principal: 'User:a', topics: [], operations: [read], extra: 1}]", "extra"),
        ("tokens: [{principal: 'User:a', sha256: abc}]", "tokens.0.sha256"),
        (
            "acls: [{principal: 'User:a', operations: [read]}]",
            "acls.0: Value error, a rule names the topics or the groups it grants on",
        ),
        ("acls: [{principal: 'User:a', groups: [''], operations: [read]}]", "acls.0.groups.0"),
        ("acls: [{principal: 'User:a', groups: [g], operations: [delete]}]", "operations.0"),
        ("acls: [unclosed", "is not valid .yaml"),
    ],
)
def test_a_bad_policy_file_names_the_file_and_the_problem(
    tmp_path: Path, text: str, problem: str
) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    with pytest.raises(ValueError, match="access policy") as err:
        load_policy(path)
    assert str(path) in str(err.value)
    assert problem in str(err.value)


def test_a_rule_names_topics_or_groups_or_both(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(
        "acls:\n"
        "  - {principal: 'User:a', groups: ['billing-*'], operations: [read]}\n"
        "  - {principal: 'User:b', topics: [], operations: [read]}\n"  # valid, grants nothing
    )
    policy = load_policy(path)
    assert policy.allows_group(user("a"), Operation.READ, "billing-eu")
    assert not policy.allows(user("a"), Operation.READ, "billing-eu")
    assert not policy.allows(user("b"), Operation.READ, "x")
    assert not policy.allows_group(user("b"), Operation.READ, "x")


@pytest.mark.parametrize("name", ["policy.yaml", "policy.json"])
@pytest.mark.parametrize("text", ["", "\n  \n"])
def test_an_empty_policy_file_is_refused_not_taken_for_a_policy_that_grants_nothing(
    tmp_path: Path, name: str, text: str
) -> None:
    # A policy rewritten in place is empty for a moment: a broker that read it then
    # shut every client out (401) until the next valid write.
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ValueError, match="is empty"):
        load_policy(path)
    path.write_text("{}")
    assert load_policy(path) == AccessPolicy()


def test_a_missing_policy_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="No such file"):
        load_policy(tmp_path / "nope.json")


def _der(issued: Issued) -> bytes:
    return issued.cert.public_bytes(serialization.Encoding.DER)


def test_certificates_name_their_principal_and_only_the_cluster_ca_names_brokers() -> None:
    cluster = new_ca(CLUSTER_CA_NAME)
    clients = new_ca("epochlog clients CA")
    name = cluster.cert.subject
    broker = principal_from_certificate(_der(issue_broker(cluster, 3)), name)
    assert broker == Principal(Kind.BROKER, "3", ("localhost",), ("127.0.0.1", "::1"))
    assert broker.broker_id == 3
    assert broker.may_advertise("https://127.0.0.1:8080")
    assert broker.may_advertise("https://LOCALHOST:8080")
    assert not broker.may_advertise("https://10.0.0.1:8080")
    assert not broker.may_advertise("broker-3:8080")  # no scheme: no host to check
    operator = principal_from_certificate(_der(issue_operator(cluster)), name)
    assert operator is not None
    assert operator.kind is Kind.OPERATOR
    assert principal_from_certificate(_der(issue_user(clients, "alice")), name) == user("alice")
    # A clients-CA certificate that claims a broker's identity is just a user.
    claim = issue(clients, "mallory", uris=[broker_uri(1)])
    assert principal_from_certificate(_der(claim), name) == user("mallory")
    # A cluster certificate that names nobody epochlog knows is nobody.
    assert (
        principal_from_certificate(_der(issue(cluster, "x", uris=["spiffe://x/y"])), name) is None
    )
    leading_zero = issue(cluster, "b", uris=["spiffe://epochlog/broker/01"])
    assert principal_from_certificate(_der(leading_zero), name) is None


def test_the_dev_pki_keeps_what_exists_and_keys_are_private(tmp_path: Path) -> None:
    pki = DevPki(tmp_path / "pki").ensure([1, 2])
    cert, key = pki.broker(1)
    first = cert.read_bytes()
    assert key.stat().st_mode & 0o777 == 0o600
    DevPki(tmp_path / "pki").ensure([1, 2, 3])
    assert cert.read_bytes() == first
    assert pki.broker(3)[0].exists()
