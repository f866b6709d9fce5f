"""Where peers connect: each broker's IP as it reported it, from that address only.

Cluster DNS may answer a restarted pod's name with its previous address for as long as it
caches answers (30 s with kubeadm's CoreDNS): a follower that resolves a new leader's name
there fails to fetch for that long and falls out of the ISR. Found on a real cluster in a
rolling restart (e2e/test_chart.py); `BrokerHeartbeat.ip` says how the brokers avoid it.
"""

from __future__ import annotations

import ipaddress

from epochlog.protocol.heartbeat import BrokerHeartbeat, HeartbeatResponse
from epochlog_operator.controller import ControllerCore
from epochlog_operator.server import checked_ip

from .test_report_sessions import heartbeat, inputs, report

IP_2 = ipaddress.ip_address("10.244.0.12")


def with_ip(hb: BrokerHeartbeat, ip: str | None) -> BrokerHeartbeat:
    return hb.model_copy(update={"ip": None if ip is None else ipaddress.ip_address(ip)})


def test_the_answer_carries_each_live_brokers_reported_ip() -> None:
    c = ControllerCore.start(0)
    parts = inputs("a-0")
    c.on_heartbeat(with_ip(heartbeat(1, [report("a-0")]), str(IP_2)), 500, parts)
    three = heartbeat(1, [report("a-0")], broker=3)
    response, _ = c.on_heartbeat(three, 600, parts)
    assert response.brokers == {2: "broker-2:9092", 3: "broker-3:9092"}
    # Broker 3 reported none: it is reached by its name alone.
    assert response.broker_ips == {2: IP_2}


def test_an_answer_without_ips_leaves_them_off_the_wire() -> None:
    body = HeartbeatResponse(brokers={1: "b1:9092"}).model_dump(mode="json")
    assert "brokerIps" not in body
    assert "ip" not in heartbeat(1).model_dump(mode="json")


def test_a_broker_may_name_only_the_address_its_heartbeat_comes_from() -> None:
    hb = with_ip(heartbeat(1), "10.244.0.12")
    assert checked_ip(hb, "10.244.0.12").ip == IP_2
    # Another address (a NAT, a proxy, or a broker pointing peers elsewhere): none.
    assert checked_ip(hb, "10.244.0.99").ip is None
    assert checked_ip(with_ip(heartbeat(1), None), "10.244.0.12").ip is None


def test_an_ip_is_an_ip() -> None:
    wire = heartbeat(1).model_dump(mode="json", by_alias=True)
    for bad in ("broker-2", "10.244.0", "::g"):
        try:
            BrokerHeartbeat.model_validate({**wire, "ip": bad})
        except ValueError:
            continue
        raise AssertionError(f"{bad!r} taken as an IP address")
