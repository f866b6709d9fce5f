"""The operator's HTTP endpoint: broker heartbeats, Prometheus metrics, liveness and readiness.

- `POST /v1/heartbeat`: body a `BrokerHeartbeat` (JSON, camelCase), answer a
  `HeartbeatResponse` with the broker's assignments as persisted. A body that
  is not JSON, not an object, or does not match the model gets 400 with
  `{"error": {"code": "INVALID_REQUEST", "message", "retriable": false,
  "errors": [{"field", "message"}]}}`; a replica that is standing by answers
  503 LEADER_NOT_AVAILABLE (retriable), so that brokers go to the active one.
- `GET /metrics`: Prometheus text.
- `GET /healthz`: 200 while the decision loop comes round (liveness probe).
- `GET /readyz`: 200 only on the acting replica, so that a Service in front
  of several replicas sends heartbeats to it alone.
"""

from __future__ import annotations

from typing import Final

import structlog
from aiohttp import web
from pydantic import ValidationError

from epochlog.http_limits import HttpLimits, read_body
from epochlog.protocol.errors import (
    ClusterAuthorizationFailedError,
    EpochlogError,
    InvalidRequestError,
)
from epochlog.protocol.heartbeat import BrokerHeartbeat
from epochlog.security.principal import Principal
from epochlog.security.tls import PeerIdentities
from epochlog_operator.indexed import IndexedHeartbeat
from epochlog_operator.metrics import CONTENT_TYPE, Metrics
from epochlog_operator.reconciler import Reconciler

log = structlog.get_logger("epochlog.operator.server")

# A heartbeat grows with the partitions a broker hosts (about 200 bytes each).
MAX_BODY: Final = 64 * 1024 * 1024


def _field(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(body)"


def _message(msg: str) -> str:
    # pydantic prefixes the messages of model validators.
    return msg.removeprefix("Value error, ")


def invalid_heartbeat(exc: ValidationError) -> InvalidRequestError:
    problems = [{"field": _field(e["loc"]), "message": _message(e["msg"])} for e in exc.errors()]
    first = problems[0]
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return InvalidRequestError(
        f"invalid heartbeat: {first['field']}: {first['message']}{more}", errors=problems
    )


def _error(exc: EpochlogError) -> web.Response:
    return web.json_response(exc.to_dict(), status=exc.http_status)


def parse_heartbeat(body: bytes) -> IndexedHeartbeat:
    """The heartbeat in a request body; InvalidRequestError naming what is wrong."""
    try:
        return IndexedHeartbeat.model_validate_json(body)
    except ValidationError as exc:
        errors = exc.errors()
        first = errors[0] if errors else None
        if first is not None and first["type"] == "json_invalid":
            raise InvalidRequestError(f"the body is not JSON: {first['ctx']['error']}") from exc
        if first is not None and first["type"] == "model_type" and not first["loc"]:
            kind = type(first["input"]).__name__
            raise InvalidRequestError(
                f"the body must be a JSON object (a BrokerHeartbeat), not {kind}"
            ) from exc
        raise invalid_heartbeat(exc) from exc


def check_sender(sender: Principal | None, hb: BrokerHeartbeat) -> None:
    """A heartbeat speaks for the broker whose certificate sent it, and only for an
    address that certificate names."""
    if sender is None or sender.broker_id != hb.broker_id:
        raise ClusterAuthorizationFailedError(
            f"a heartbeat for broker {hb.broker_id} must come with broker {hb.broker_id}'s "
            f"certificate, not {sender or 'none'}",
            broker=hb.broker_id,
        )
    if not sender.may_advertise(hb.address):
        raise ClusterAuthorizationFailedError(
            f"broker {hb.broker_id} advertises {hb.address!r}, a host its certificate does "
            f"not name (it names {', '.join(sender.dns_names + sender.ip_addresses) or 'none'})",
            broker=hb.broker_id,
        )


def build_app(
    reconciler: Reconciler,
    metrics: Metrics,
    limits: HttpLimits | None = None,
    *,
    probes_only: bool = False,
    peers: PeerIdentities | None = None,
) -> web.Application:
    """The operator's routes; with `probes_only`, health, readiness and metrics alone (the
    probe listener, which stays open when the heartbeat port asks for credentials).

    `peers`: the heartbeat port speaks TLS and a heartbeat is taken only from the
    certificate of the broker it names, for an address that certificate names."""
    limits = limits or HttpLimits()

    async def heartbeat(request: web.Request) -> web.Response:
        try:
            hb = parse_heartbeat(await read_body(request, limits))
            if peers is not None:
                check_sender(peers.of_transport(request.transport), hb)
            response = reconciler.heartbeat(hb)
        except InvalidRequestError as exc:
            metrics.heartbeats.inc(outcome="invalid")
            log.warning("invalid heartbeat", remote=request.remote, error=exc.message)
            return _error(exc)
        except ClusterAuthorizationFailedError as exc:
            metrics.heartbeats.inc(outcome="refused")
            log.warning("heartbeat refused", remote=request.remote, error=exc.message)
            return _error(exc)
        except EpochlogError as exc:
            return _error(exc)
        return web.Response(
            body=response.model_dump_json(by_alias=True), content_type="application/json"
        )

    async def render_metrics(request: web.Request) -> web.Response:
        reconciler.count_waiting()
        text = metrics.render(reconciler.heartbeat_ages())
        return web.Response(body=text.encode(), headers={"Content-Type": CONTENT_TYPE})

    async def healthz(request: web.Request) -> web.Response:
        if reconciler.healthy():
            return web.Response(text="ok\n")
        return web.Response(text="decision loop stalled\n", status=503)

    async def readyz(request: web.Request) -> web.Response:
        if reconciler.active:
            return web.Response(text="active\n")
        return web.Response(text="standing by\n", status=503)

    app = web.Application(client_max_size=MAX_BODY)
    if not probes_only:
        app.router.add_post("/v1/heartbeat", heartbeat)
    app.router.add_get("/metrics", render_metrics)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    return app
