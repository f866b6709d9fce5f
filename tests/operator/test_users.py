"""The decisions about EpochlogUsers: principals, claims, policy entries, renewal, Ready."""

from __future__ import annotations

import datetime
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from epochlog.security.access import AccessPolicy, Operation, ScramEntry, scram_entry
from epochlog.security.pki import issue_user, new_ca
from epochlog.security.principal import Kind, Principal
from epochlog.users import EpochlogUserSpec
from epochlog_operator.users import (
    Credential,
    ObservedUser,
    UserEntries,
    UserKey,
    acl_entries,
    certificate_due,
    claims,
    policy_bytes,
    policy_document,
    principal_of,
    ready_condition,
    user_entries,
    username_of,
)

NOW = datetime.datetime(2030, 1, 1, tzinfo=datetime.UTC)
DAY = datetime.timedelta(days=1)


def observed(
    name: str, spec: dict[str, Any], namespace: str = "ns", created: str = "2030-01-01T00:00:00Z"
) -> ObservedUser:
    return ObservedUser(
        UserKey(namespace, name),
        uid=f"uid-{namespace}-{name}",
        generation=1,
        created=created,
        spec=EpochlogUserSpec.model_validate(spec),
    )


def rule(kind: str, name: str, ops: list[str], pattern: str = "literal") -> dict[str, Any]:
    return {"resource": {"type": kind, "name": name, "patternType": pattern}, "operations": ops}


def test_principals_and_user_names_by_authentication() -> None:
    tls = observed("alice", {"authentication": {"type": "tls"}})
    scram = observed("bob", {"authentication": {"type": "scram-sha-512"}})
    sa = observed(
        "spark",
        {"authentication": {"type": "serviceaccount", "serviceAccount": {"name": "spark"}}},
        namespace="data",
    )
    elsewhere = observed(
        "jobs",
        {
            "authentication": {
                "type": "serviceaccount",
                "serviceAccount": {"name": "runner", "namespace": "ci"},
            }
        },
    )
    assert (username_of(tls), principal_of(tls)) == ("CN=alice", "User:alice")
    assert (username_of(scram), principal_of(scram)) == ("bob", "User:bob")
    assert username_of(sa) == "system:serviceaccount:data:spark"
    assert principal_of(sa) == "User:system:serviceaccount:data:spark"
    assert principal_of(elsewhere) == "User:system:serviceaccount:ci:runner"


def test_the_oldest_user_of_a_principal_holds_it() -> None:
    old = observed("alice", {"authentication": {"type": "tls"}}, "b", "2030-01-01T00:00:00Z")
    new = observed("alice", {"authentication": {"type": "token"}}, "a", "2030-01-02T00:00:00Z")
    other = observed("bob", {"authentication": {"type": "tls"}}, "a", "2030-01-03T00:00:00Z")
    held = claims([new, other, old])
    assert held[old.key] is None
    assert held[other.key] is None
    assert "b/alice" in str(held[new.key])


def test_rules_become_entries_the_policy_decides_with() -> None:
    spec = {
        "authentication": {"type": "tls"},
        "authorization": {
            "acls": [
                rule("topic", "orders", ["write"]),
                rule("topic", "audit.", ["read"], "prefix"),
                rule("group", "billing-", ["read"], "prefix"),
                rule("topic", "*", ["describe"]),
            ]
        },
    }
    user = observed("alice", spec)
    entries = user_entries(user, Credential())
    assert entries is not None
    policy = policy_document(AccessPolicy(), [entries])
    alice = Principal(Kind.USER, "alice")
    assert policy.allows(alice, Operation.WRITE, "orders")
    assert not policy.allows(alice, Operation.READ, "orders")
    assert policy.allows(alice, Operation.READ, "audit.eu")
    assert not policy.allows(alice, Operation.READ, "audit")
    assert policy.allows_group(alice, Operation.READ, "billing-eu")
    assert not policy.allows_group(alice, Operation.READ, "orders")
    assert policy.allows(alice, Operation.DESCRIBE, "anything")
    assert not policy.allows(Principal(Kind.USER, "bob"), Operation.DESCRIBE, "orders")


def test_a_user_adds_nothing_until_its_credential_is_made() -> None:
    token = observed("t", {"authentication": {"type": "token"}})
    scram = observed("s", {"authentication": {"type": "scram-sha-512"}})
    tls = observed("c", {"authentication": {"type": "tls"}})
    assert user_entries(token, None) is None
    assert user_entries(token, Credential()) is None
    assert user_entries(scram, Credential(token_sha256="0" * 64)) is None
    assert user_entries(tls, None) is None
    made = user_entries(token, Credential(token_sha256="a" * 64))
    assert made is not None
    assert made.tokens[0].principal == "User:t"
    entry = ScramEntry.model_validate(scram_entry("s", "pw", "SCRAM-SHA-512", 4096))
    made = user_entries(scram, Credential(scram=entry))
    assert made is not None
    assert made.scram == (entry,)


names = st.from_regex(r"[a-z][a-z0-9]{0,5}", fullmatch=True)
topic_rules = st.lists(
    st.tuples(
        st.sampled_from(["topic", "group"]),
        names,
        st.lists(st.sampled_from([o.value for o in Operation]), min_size=1, max_size=4),
        st.sampled_from(["literal", "prefix"]),
    ),
    max_size=4,
)
users = st.dictionaries(names, topic_rules, max_size=6)


def _entries(spec_of: dict[str, list[Any]]) -> list[UserEntries]:
    out = []
    for name, rules in spec_of.items():
        spec = {
            "authentication": {"type": "tls"},
            "authorization": {"acls": [rule(k, n, o, p) for k, n, o, p in rules]},
        }
        made = user_entries(observed(name, spec), Credential())
        assert made is not None
        out.append(made)
    return out


@given(users, st.randoms())
def test_the_policy_depends_on_the_users_not_on_their_order(
    spec_of: dict[str, list[Any]], rnd: Any
) -> None:
    entries = _entries(spec_of)
    shuffled = list(entries)
    rnd.shuffle(shuffled)
    one = policy_bytes(policy_document(AccessPolicy(), entries))
    assert one == policy_bytes(policy_document(AccessPolicy(), shuffled))
    # What is written loads back as the same policy.
    assert AccessPolicy.model_validate_json(one) == policy_document(AccessPolicy(), entries)


@given(users, names, st.sampled_from(["topic", "group"]), names, st.sampled_from(list(Operation)))
def test_a_user_gets_exactly_what_one_of_its_rules_grants(
    spec_of: dict[str, list[Any]], who: str, kind: str, name: str, op: Operation
) -> None:
    policy = policy_document(AccessPolicy(), _entries(spec_of))
    principal = Principal(Kind.USER, who)
    granted = policy.allows(principal, op, name) if kind == "topic" else None
    if kind == "group":
        granted = policy.allows_group(principal, op, name)

    def grants(k: str, n: str, ops: list[str], p: str) -> bool:
        if k != kind or not (name.startswith(n) if p == "prefix" else name == n):
            return False
        implied = set(ops) | ({"describe"} if set(ops) & {"read", "write", "all"} else set())
        return op.value in implied or "all" in implied

    expected = any(grants(*r) for r in spec_of.get(who, []))
    assert granted == expected


@given(users, users)
def test_removing_a_user_removes_exactly_its_entries(
    first: dict[str, list[Any]], second: dict[str, list[Any]]
) -> None:
    both = {**first, **second}
    gone = next(iter(second), None)
    rest = {k: v for k, v in both.items() if k != gone}
    policy = policy_document(AccessPolicy(), _entries(rest))
    if gone is not None:
        assert all(a.principal != f"User:{gone}" for a in policy.acls)
    assert policy == policy_document(
        AccessPolicy(), [e for e in _entries(both) if e.key.name != gone]
    )


def test_the_base_policy_comes_first_and_stays() -> None:
    base = AccessPolicy.model_validate(
        {"acls": [{"principal": "User:admin", "topics": ["*"], "operations": ["all"]}]}
    )
    entries = _entries({"alice": [("topic", "orders", ["read"], "literal")]})
    policy = policy_document(base, entries)
    assert policy.acls[0] == base.acls[0]
    assert [a.principal for a in policy.acls] == ["User:admin", "User:alice"]


def test_acl_entries_keep_one_entry_per_rule() -> None:
    spec = EpochlogUserSpec.model_validate(
        {
            "authentication": {"type": "token"},
            "authorization": {
                "acls": [
                    rule("topic", "a", ["read", "read", "write"]),
                    rule("group", "g", ["all"]),
                ]
            },
        }
    )
    entries = acl_entries("User:x", spec.authorization)
    assert [(e.topics, e.groups, e.operations) for e in entries] == [
        (("a",), (), (Operation.READ, Operation.WRITE)),
        ((), ("g",), (Operation.ALL,)),
    ]


def test_a_certificate_is_due_when_missing_expiring_foreign_or_for_someone_else() -> None:
    ca = new_ca("clients")
    other = new_ca("clients")
    now = datetime.datetime.now(datetime.UTC)
    held = issue_user(ca, "alice")
    window = 30 * DAY
    assert certificate_due("alice", None, ca.cert, now, window) == "missing"
    assert certificate_due("alice", held.cert, ca.cert, now, window) is None
    assert certificate_due("alice", held.cert, other.cert, now, window) == "issued by another CA"
    assert "another user" in str(certificate_due("bob", held.cert, ca.cert, now, window))
    later = held.cert.not_valid_after_utc - window + datetime.timedelta(seconds=1)
    assert str(certificate_due("alice", held.cert, ca.cert, later, window)).startswith("expires")
    before = held.cert.not_valid_after_utc - window - datetime.timedelta(seconds=1)
    assert certificate_due("alice", held.cert, ca.cert, before, window) is None


@given(st.lists(st.booleans(), min_size=1, max_size=20))
def test_ready_moves_its_transition_time_only_when_its_status_does(
    flips: list[bool],
) -> None:
    previous = None
    for i, ready in enumerate(flips):
        now = f"2030-01-01T00:00:{i:02d}Z"
        cond = ready_condition(previous, ready=ready, reason="R", message="", generation=i, now=now)
        if previous is None or previous.status != cond.status:
            assert cond.last_transition_time == now
        else:
            assert cond.last_transition_time == previous.last_transition_time
        assert cond.observed_generation == i
        previous = cond
