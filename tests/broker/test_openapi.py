"""The broker's OpenAPI document: kept in the repository, built from the wire models, and
naming every route the server has."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from epochlog.protocol.openapi import broker_openapi, render
from epochlog_broker.broker import Broker
from epochlog_broker.config import BrokerConfig
from epochlog_broker.server import build_app

DOCUMENT = Path(__file__).resolve().parents[2] / "openapi" / "broker.json"


def test_the_document_in_the_repository_is_the_one_the_models_make() -> None:
    assert DOCUMENT.read_text() == render(), (
        "openapi/broker.json is out of date: python -m epochlog.protocol.openapi "
        "> openapi/broker.json"
    )


def test_every_route_of_the_server_is_described(tmp_path: Path) -> None:
    broker = Broker(BrokerConfig(broker_id=1, data_dir=str(tmp_path), controller_url="http://x"))
    app = build_app(broker)
    served = {
        (route.method.lower(), route.resource.canonical)
        for route in app.router.routes()
        if route.resource is not None and route.method != "HEAD"
    }
    paths = broker_openapi()["paths"]
    described = {(m, p) for p, ops in paths.items() for m in ops if m != "parameters"}
    assert served == described


def test_every_reference_resolves() -> None:
    doc = broker_openapi()
    schemas = doc["components"]["schemas"]
    text = json.dumps(doc)
    refs = {part.split('"')[0] for part in text.split('"#/components/schemas/')[1:]}
    assert refs
    assert refs <= set(schemas), refs - set(schemas)


def _integers(node: Any, where: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every integer schema in `node`, wherever it sits (properties, items, anyOf branches,
    parameters, request and answer bodies), with where it is."""
    if isinstance(node, dict):
        kind = node.get("type")
        if kind == "integer" or (isinstance(kind, list) and "integer" in kind):
            yield where, node
        for key, value in node.items():
            yield from _integers(value, f"{where}/{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _integers(value, f"{where}/{i}")


def test_every_integer_says_its_wire_range() -> None:
    """A producerId of 2**70 was taken as valid and failed deep in the broker (HTTP 500):
    every integer a body, an answer or a parameter carries says the range the broker
    stores and handles, and the models refuse what is outside it."""
    found = list(_integers(broker_openapi()))
    assert len(found) > 40, found
    missing = [where for where, schema in found if not {"minimum", "maximum"} <= schema.keys()]
    assert not missing, missing
