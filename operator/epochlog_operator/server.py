"""The operator's HTTP endpoint: broker heartbeats, Prometheus metrics, liveness and readiness.

- `POST /v1/heartbeat`: body a `BrokerHeartbeat` (JSON, camelCase), answer a
  `HeartbeatResponse` with the broker's assignments as persisted. A body that
  is not JSON, not an object, or does not match the model gets 400 with
  `{"error": {"code": "INVALID_REQUEST", "message", "retriable": false,
  "errors": [{"field", "message"}]}}`; a replica that is standing by answers
  503 NOT_CONTROLLER (retriable), takes nothing from the heartbeat and closes
  the connection, so that the broker moves on to its next controller address.
- `POST /v1/token-reviews` (with `--review-tokens`): body a `TokenReviewRequest`,
  answer a `TokenReviewAnswer` (`token_review`); only from a broker's certificate
  (403 CLUSTER_AUTHORIZATION_FAILED otherwise, before the body is read), bodies of
  at most `MAX_BODY_BYTES` (413); any replica answers, acting or standing by.
- `GET /metrics`: Prometheus text (`epochlog_operator_active` says which
  replica acts).
- `GET /healthz`: 200 while the decision loop comes round (liveness probe).
- `GET /readyz`: 200 on every healthy replica, acting or standing by
  (`peering.readiness`), with the role in the body (`acting`, or `standing by
  (<who acts>)`); 503 with the reason otherwise. Every replica being Ready is
  what lets a Deployment of several replicas roll out and report healthy;
  brokers do not rely on readiness to find the acting one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, TypeVar

import structlog
from aiohttp import web
from pydantic import ValidationError

from epochlog.http_limits import HttpLimits, read_body
from epochlog.protocol.errors import (
    ClusterAuthorizationFailedError,
    EpochlogError,
    InvalidRequestError,
    NotControllerError,
    RecordTooLargeError,
)
from epochlog.protocol.heartbeat import BrokerHeartbeat, TlsReport
from epochlog.protocol.token_review import (
    MAX_BODY_BYTES,
    TOKEN_REVIEW_PATH,
    TokenReviewRequest,
)
from epochlog.security.expiry import CertificateExpiry
from epochlog.security.principal import Kind, Principal
from epochlog.security.tls import PeerIdentities
from epochlog_operator.indexed import IndexedHeartbeat
from epochlog_operator.metrics import CONTENT_TYPE, Metrics, state_families
from epochlog_operator.reconciler import Reconciler
from epochlog_operator.token_review import TokenReviewer

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


def parse_token_review(body: bytes) -> TokenReviewRequest:
    """The question in a request body; InvalidRequestError naming what is wrong."""
    try:
        return TokenReviewRequest.model_validate_json(body)
    except ValidationError as exc:
        problems = [
            {"field": _field(e["loc"]), "message": _message(e["msg"])} for e in exc.errors()
        ]
        first = problems[0]
        raise InvalidRequestError(
            f"invalid token review: {first['field']}: {first['message']}", errors=problems
        ) from exc


def check_broker(sender: Principal | None) -> None:
    """Token reviews are the brokers' questions: only a broker's certificate may ask."""
    if sender is None or sender.kind is not Kind.BROKER:
        raise ClusterAuthorizationFailedError(
            "token reviews are asked by brokers, with a broker's certificate, "
            f"not {sender or 'none'}"
        )


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


H = TypeVar("H", bound=BrokerHeartbeat)


def checked_ip(hb: H, remote: str | None) -> H:
    """The heartbeat with its `ip` only when the heartbeat came from that address: peers
    connect there, so a broker may name no address but its own. Behind a NAT or a proxy
    the two differ and peers go by the advertised name alone."""
    if hb.ip is None or (remote is not None and str(hb.ip) == remote):
        return hb
    if (hb.broker_id, str(hb.ip)) not in _IGNORED_IPS:  # once, not every heartbeat
        _IGNORED_IPS.add((hb.broker_id, str(hb.ip)))
        log.warning("heartbeat ip ignored", broker=hb.broker_id, ip=str(hb.ip), remote=remote)
    return hb.model_copy(update={"ip": None})


_IGNORED_IPS: set[tuple[int, str]] = set()


def build_app(
    reconciler: Reconciler,
    metrics: Metrics,
    limits: HttpLimits | None = None,
    *,
    probes_only: bool = False,
    peers: PeerIdentities | None = None,
    readiness: Callable[[], tuple[bool, str]] | None = None,
    certificates: CertificateExpiry | None = None,
    tls_reports: dict[int, TlsReport] | None = None,
    tokens: TokenReviewer | None = None,
) -> web.Application:
    """The operator's routes; with `probes_only`, health, readiness and metrics alone (the
    probe listener, which stays open when the heartbeat port asks for credentials).

    `peers`: the heartbeat port speaks TLS and a heartbeat is taken only from the
    certificate of the broker it names, for an address that certificate names.
    `readiness`: whether the replica is Ready and its role or why not (the peering gate's
    `PeeringGate.readiness`); without it a replica is Ready by its role alone.
    `certificates`: the operator's certificate files, whose ends /metrics exports.
    `tls_reports`: where each broker's last report of what it trusts and serves is kept
    (a CA replacement steps on them).

    `tokens`: answers brokers' questions about ServiceAccount tokens (`--review-tokens`)."""
    limits = limits or HttpLimits()

    def role() -> tuple[bool, str]:
        if readiness is not None:
            return readiness()
        return True, "acting" if reconciler.active else "standing by"

    async def heartbeat(request: web.Request) -> web.Response:
        try:
            hb = parse_heartbeat(await read_body(request, limits))
            if peers is not None:
                check_sender(peers.of_transport(request.transport), hb)
            hb = checked_ip(hb, request.remote)
            response = reconciler.heartbeat(hb)
            if tls_reports is not None and hb.tls is not None:
                tls_reports[hb.broker_id] = hb.tls
        except InvalidRequestError as exc:
            metrics.heartbeats.inc(outcome="invalid")
            log.warning("invalid heartbeat", remote=request.remote, error=exc.message)
            return _error(exc)
        except ClusterAuthorizationFailedError as exc:
            metrics.heartbeats.inc(outcome="refused")
            log.warning("heartbeat refused", remote=request.remote, error=exc.message)
            return _error(exc)
        except NotControllerError as exc:
            # Closing the connection sends the broker's next attempt through a new one:
            # behind a load-balancing Service it may reach another replica.
            answer = _error(exc)
            answer.force_close()
            return answer
        except EpochlogError as exc:
            return _error(exc)
        return web.Response(
            body=response.model_dump_json(by_alias=True), content_type="application/json"
        )

    async def token_review(request: web.Request) -> web.Response:
        assert tokens is not None  # routed only with a reviewer
        try:
            if peers is not None:
                check_broker(peers.of_transport(request.transport))
            if request.content_length is not None and request.content_length > MAX_BODY_BYTES:
                raise RecordTooLargeError(
                    f"a token review of {request.content_length} bytes (at most {MAX_BODY_BYTES})"
                )
            body = await read_body(request, limits)
            if len(body) > MAX_BODY_BYTES:
                raise RecordTooLargeError(
                    f"a token review of {len(body)} bytes (at most {MAX_BODY_BYTES})"
                )
            answer = await tokens.review(parse_token_review(body).token)
        except ClusterAuthorizationFailedError as exc:
            log.warning("token review refused", remote=request.remote, error=exc.message)
            return _error(exc)
        except EpochlogError as exc:
            return _error(exc)
        return web.Response(
            body=answer.model_dump_json(by_alias=True), content_type="application/json"
        )

    async def render_metrics(request: web.Request) -> web.Response:
        reconciler.count_waiting()
        state = state_families(
            reconciler.broker_states(),
            reconciler.condition_counts(),
            certificates.not_after() if certificates is not None else {},
        )
        text = metrics.render(reconciler.heartbeat_ages(), state)
        return web.Response(body=text.encode(), headers={"Content-Type": CONTENT_TYPE})

    async def healthz(request: web.Request) -> web.Response:
        if reconciler.healthy():
            return web.Response(text="ok\n")
        return web.Response(text="decision loop stalled\n", status=503)

    async def readyz(request: web.Request) -> web.Response:
        if not reconciler.healthy():
            return web.Response(text="decision loop stalled\n", status=503)
        ready, detail = role()
        return web.Response(text=detail + "\n", status=200 if ready else 503)

    app = web.Application(client_max_size=MAX_BODY)
    if not probes_only:
        app.router.add_post("/v1/heartbeat", heartbeat)
        if tokens is not None:
            app.router.add_post(TOKEN_REVIEW_PATH, token_review)
    app.router.add_get("/metrics", render_metrics)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    return app
