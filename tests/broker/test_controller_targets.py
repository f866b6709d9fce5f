"""Which controller address a broker's heartbeats go to (`controller_targets`, no I/O).

A broker given several controller URLs, or a host name that resolves to
several addresses, sticks to the endpoint that answered last, moves on at the
first failure or NOT_CONTROLLER, tries every endpoint within one round before
it waits a heartbeat interval, and verifies TLS against the URL's host name
when it connects to a resolved address.
"""

from __future__ import annotations

import pytest

from epochlog_broker.config import BrokerConfig
from epochlog_broker.controller_targets import (
    ControllerEndpoint,
    ControllerTargets,
    ControllerUrlError,
    Failure,
    split_controller_urls,
)

A = "https://op-0.example:8081"
B = "https://op-1.example:8081"
HEADLESS = "https://epochlog-operator-heartbeat.ns.svc:8081"


def test_urls_come_repeated_or_comma_separated_in_order_without_duplicates() -> None:
    assert split_controller_urls([f"{A}, {B}/", A]) == (A, B)
    assert BrokerConfig(1, "/tmp/x", f"{A},{B}").controller_urls == (A, B)
    for bad in ("", " , ", "op-0:8081", "ftp://op-0"):
        with pytest.raises(ControllerUrlError):
            split_controller_urls([bad])
    with pytest.raises(ValueError, match="is not http"):
        BrokerConfig(1, "/tmp/x", "not a url")


def test_heartbeats_stick_to_the_endpoint_that_answered() -> None:
    t = ControllerTargets((A, B))
    t.answered(t.endpoints[1])
    for _ in range(3):
        assert t.current.url == B
        t.answered(t.current)
    assert t.misses == 0


def test_a_standing_by_replica_sends_the_next_heartbeat_to_the_next_address_at_once() -> None:
    t = ControllerTargets((A, B))
    assert t.current.url == A
    assert t.failed(t.current, Failure.NOT_CONTROLLER) is True  # try B now, not next interval
    assert t.current.url == B
    t.answered(t.current)
    assert t.current.url == B
    # B stops acting (killed): back to A at once; A acts now.
    assert t.failed(t.current, Failure.UNREACHABLE) is True
    assert t.current.url == A


def test_a_whole_round_without_an_answer_waits_then_starts_the_next_round() -> None:
    t = ControllerTargets((A, B, "http://10.0.0.3:8081"))
    tried = []
    again = True
    while again:
        tried.append(t.current.url)
        again = t.failed(t.current, Failure.TIMED_OUT)
    assert tried == [A, B, "http://10.0.0.3:8081"]
    assert t.current.url == A  # the next round starts where the list does
    assert t.failed(t.current, Failure.UNREACHABLE) is True


def test_a_failure_reported_for_an_endpoint_no_longer_current_does_not_skip_one() -> None:
    t = ControllerTargets((A, B))
    stale = t.current
    t.failed(stale, Failure.TIMED_OUT)
    assert t.current.url == B
    t.failed(stale, Failure.TIMED_OUT)  # a late report about A
    assert t.current.url == B


def test_a_host_name_becomes_one_endpoint_per_address_and_tls_checks_the_name() -> None:
    t = ControllerTargets((HEADLESS,))
    assert t.hosts_to_resolve(0) == ("epochlog-operator-heartbeat.ns.svc",)
    t.resolved({"epochlog-operator-heartbeat.ns.svc": ["10.1.0.7", "10.1.0.9", "10.1.0.7"]}, 0)
    assert [e.address for e in t.endpoints] == ["10.1.0.7", "10.1.0.9"]
    e = t.current
    assert e.request_url("/v1/heartbeat") == "https://10.1.0.7:8081/v1/heartbeat"
    assert e.server_hostname == "epochlog-operator-heartbeat.ns.svc"
    assert e.host_header == "epochlog-operator-heartbeat.ns.svc:8081"
    v6 = ControllerEndpoint(HEADLESS, "fd00::7")
    assert v6.request_url("/v1/heartbeat") == "https://[fd00::7]:8081/v1/heartbeat"
    plain = ControllerEndpoint("http://op.ns.svc:8081", "10.1.0.7")
    assert plain.server_hostname is None
    literal = ControllerTargets(("https://127.0.0.1:8081",))
    assert literal.hosts_to_resolve(0) == ()
    assert literal.current.server_hostname is None
    assert literal.current.request_url("/v1/heartbeat") == "https://127.0.0.1:8081/v1/heartbeat"


def test_names_are_resolved_again_after_a_failure_or_an_interval_and_keep_the_current() -> None:
    name = "epochlog-operator-heartbeat.ns.svc"
    t = ControllerTargets((HEADLESS,), resolve_interval_ms=30_000, retry_resolve_ms=1_000)
    t.resolved({name: ["10.1.0.7", "10.1.0.9"]}, 0)
    t.failed(t.current, Failure.NOT_CONTROLLER)
    t.answered(t.current)
    assert t.current.address == "10.1.0.9"
    assert t.hosts_to_resolve(29_999) == ()
    assert t.hosts_to_resolve(30_000) == (name,)
    # The answering replica keeps its place whatever order the resolver answers in.
    t.resolved({name: ["10.1.0.9", "10.1.0.7"]}, 30_000)
    assert t.current.address == "10.1.0.9"
    # It goes away: after its failure the name is looked up again (not before 1 s),
    # and a replacement replica is found.
    t.failed(t.current, Failure.UNREACHABLE)
    assert t.hosts_to_resolve(30_500) == ()
    assert t.hosts_to_resolve(31_000) == (name,)
    t.resolved({name: ["10.1.0.7", "10.1.0.12"]}, 31_000)
    assert [e.address for e in t.endpoints] == ["10.1.0.7", "10.1.0.12"]
    assert t.current.address == "10.1.0.7"
    # A lookup that finds nothing keeps what was known.
    t.resolved({name: []}, 32_000)
    assert [e.address for e in t.endpoints] == ["10.1.0.7", "10.1.0.12"]


def test_an_unresolved_name_is_tried_by_its_url() -> None:
    t = ControllerTargets((HEADLESS, B))
    assert [e.address for e in t.endpoints] == [None, None]
    assert t.current.request_url("/v1/heartbeat") == HEADLESS + "/v1/heartbeat"
