"""The broker's OpenAPI document: kept in the repository, built from the wire models, and
naming every route the server has."""

from __future__ import annotations

import json
from pathlib import Path

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
