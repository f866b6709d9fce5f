"""One operator process: kopf, the decision loop, the peering gate and the HTTP endpoint together.

`run(settings)` is what `epochlog operator` and `python -m epochlog_operator`
call. It logs in (service account, else kubeconfig), opens the heartbeat /
metrics / health endpoint, creates the peering object if it is missing, and
runs kopf with the handlers of `handlers` until SIGTERM or SIGINT. The
decision loop (`Reconciler.run`) and the peering gate run beside kopf in the
same event loop; if either fails, the process stops with an error rather than
go on without deciding.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
from typing import Any

import kopf
import structlog
from aiohttp import web

from epochlog import collector
from epochlog.http_limits import LimitedSite
from epochlog.logs import configure
from epochlog.protocol.heartbeat import TlsReport
from epochlog.security.expiry import CertificateExpiry
from epochlog.security.tls import CertReloader, PeerIdentities, TlsSource, ca_name
from epochlog.tasks import cancel_and_wait
from epochlog_operator.cert_manager import CertificateManager, private_dir
from epochlog_operator.handlers import build_registry, kopf_settings
from epochlog_operator.kube import KubeClient
from epochlog_operator.metrics import Metrics
from epochlog_operator.peering import PeeringGate
from epochlog_operator.reconciler import Reconciler
from epochlog_operator.server import build_app
from epochlog_operator.settings import OperatorSettings, SettingsError
from epochlog_operator.token_review import TokenReviewer
from epochlog_operator.user_controller import UserController, UserSettings

log = structlog.get_logger("epochlog.operator")


def configure_logging(level: str | None = None, fmt: str | None = None) -> None:
    """structlog for the operator, and kopf's and aiohttp's standard logging in the same format."""
    configure(level, fmt)
    fmt = fmt or os.environ.get("EPOCHLOG_LOG_FORMAT", "logfmt")
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer()
        if fmt == "json"
        else structlog.processors.LogfmtRenderer(key_order=["ts", "level", "event", "logger"])
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
            foreign_pre_chain=[
                structlog.stdlib.add_log_level,
                structlog.stdlib.add_logger_name,
                structlog.processors.TimeStamper(fmt="iso", key="ts"),
            ],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    level_name = (level or os.environ.get("EPOCHLOG_LOG_LEVEL", "info")).upper()
    root.setLevel(logging.getLevelNamesMapping().get(level_name, logging.INFO))
    # kopf reports every handler run at INFO on the per-object logger.
    logging.getLogger("kopf.objects").setLevel(max(root.level, logging.WARNING))
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)


def login(settings: OperatorSettings) -> kopf.ConnectionInfo:
    """Credentials for kopf and for the operator's own requests: the same for both."""
    ks = kopf.OperatorSettings()
    if settings.kubeconfig:
        os.environ["KUBECONFIG"] = settings.kubeconfig
        info = kopf.login_with_kubeconfig(settings=ks)
    else:
        info = kopf.login_with_service_account(settings=ks) or kopf.login_with_kubeconfig(
            settings=ks
        )
    if info is None:
        raise SettingsError(
            "no Kubernetes credentials: not in a pod with a service account, and no "
            "--kubeconfig, KUBECONFIG or ~/.kube/config"
        )
    return info


def _kopf_settings(settings: OperatorSettings) -> kopf.OperatorSettings:
    """kopf's settings for this process, without kopf's start-up scan of the cluster.

    kopf lists and watches namespaces and CustomResourceDefinitions to find what it
    serves; this operator names the Partition resource exactly and its namespaces
    explicitly (or serves all of them), so the scan finds nothing new. Turned off, a
    namespaced operator needs no cluster-wide permission at all (the chart's Role).
    """
    ks = kopf_settings(peering_lifetime_s=settings.peering_lifetime_s)
    ks.scanning.disabled = True
    return ks


async def serve(settings: OperatorSettings) -> None:
    connection = login(settings)
    failures: list[BaseException] = []
    kopf_task: asyncio.Task[None] | None = None

    def stop_on_failure(task: asyncio.Task[Any]) -> None:
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            log.error("operator task failed; stopping", task=task.get_name(), error=repr(exc))
            failures.append(exc)
            if kopf_task is not None:
                kopf_task.cancel()

    async with KubeClient(connection) as kube:
        metrics = Metrics()
        reconciler = Reconciler(settings, kube, metrics)
        gate = PeeringGate(settings, kube, reconciler)
        certificates = None
        tls_reports: dict[int, TlsReport] = {}
        if settings.manage_certificates:
            certificates = CertificateManager(
                kube,
                settings.certificate_settings,
                private_dir(),
                metrics=metrics,
                reports=tls_reports,
            )
            await certificates.reconcile()
        users = _user_controller(settings, kube, reconciler) if settings.manage_users else None
        tokens = TokenReviewer(kube) if settings.review_tokens else None
        tls = certificates.operator_files() if certificates else settings.tls
        peers = PeerIdentities(ca_name(tls.ca)) if tls else None
        expiry = CertificateExpiry(tls) if tls else None
        runner = web.AppRunner(
            build_app(
                reconciler,
                metrics,
                settings.http,
                peers=peers,
                readiness=gate.readiness,
                certificates=expiry,
                tls_reports=tls_reports,
                tokens=tokens,
            ),
            access_log=None,
            **settings.http.runner_args(),
        )
        await runner.setup()
        runners = [runner]
        source = TlsSource(tls, require_client_cert=True, owner="operator") if tls else None
        server_tls = source.server if source else None
        if certificates is not None:
            certificates.own = source
        site = LimitedSite(
            runner,
            settings.listen_address,
            settings.listen_port,
            settings.http,
            ssl_context=server_tls,
        )
        await site.start()
        reloader = None
        if source is not None:
            reloader = CertReloader(source)
            reloader.start()
        else:
            log.warning(
                "plaintext heartbeat port",
                note="no TLS: anyone who reaches this port can pose as any broker",
            )
        if settings.probe_port is not None:
            probes = web.AppRunner(
                build_app(
                    reconciler,
                    metrics,
                    settings.http,
                    probes_only=True,
                    readiness=gate.readiness,
                    certificates=expiry,
                ),
                access_log=None,
                **settings.http.runner_args(),
            )
            await probes.setup()
            runners.append(probes)
            probe_site = LimitedSite(
                probes, settings.listen_address, settings.probe_port, settings.http
            )
            await probe_site.start()
        tasks: list[asyncio.Task[None]] = []
        closed = False

        async def close() -> None:
            nonlocal closed
            if not closed:
                closed = True
                if reloader is not None:
                    await reloader.stop()
                await reconciler.close()
                for r in runners:
                    await r.cleanup()

        try:
            log.info(
                "operator starting",
                identity=settings.identity,
                listen=[f"{a[0]}:{a[1]}" for a in runner.addresses if isinstance(a, tuple)],
                server=kube.server,
                namespaces=list(settings.namespaces) or "all",
                standalone=settings.standalone,
                priority=settings.priority,
                sessionTimeoutMs=settings.broker_session_timeout_ms,
                statusRefreshIntervalMs=settings.status_refresh_interval_ms,
                reconcileIntervalMs=settings.reconcile_interval_ms,
                apiWritesPerSecond=settings.api_writes_per_second,
                apiWriteBurst=settings.api_write_burst,
            )
            if not settings.standalone:
                await gate.ensure_objects()
            loops = [("decision loop", reconciler.run()), ("peering gate", gate.run())]
            if certificates is not None:
                interval = settings.certificate_check_interval_s
                loops.append(("certificates", certificates.run(interval)))
            if users is not None:
                loops.append(("users", users.run()))
            for name, coro in loops:
                task = asyncio.create_task(coro, name=name)
                task.add_done_callback(stop_on_failure)
                tasks.append(task)
            # kopf takes every task created after it starts for its own and waits up to
            # 5 s for them on exit: the loop and the gate start before it, and what they
            # and the HTTP server start later is closed by kopf's cleanup handler.
            kopf_task = asyncio.create_task(
                kopf.operator(
                    registry=build_registry(reconciler, connection, close, users),
                    settings=_kopf_settings(settings),
                    # kopf's Identity is a NewType of str that kopf does not export.
                    identity=settings.identity,  # type: ignore[arg-type]
                    standalone=settings.standalone,
                    priority=settings.priority,
                    peering_name=None if settings.standalone else settings.peering_name,
                    clusterwide=settings.clusterwide,
                    namespaces=list(settings.namespaces),
                ),
                name="kopf",
            )
            with contextlib.suppress(asyncio.CancelledError):
                await kopf_task
        finally:
            reconciler.deactivate("operator stopped")
            await cancel_and_wait(tasks)
            await close()
    if failures:
        raise failures[0]


def _user_controller(
    settings: OperatorSettings, kube: KubeClient, reconciler: Reconciler
) -> UserController:
    return UserController(
        kube,
        UserSettings(
            namespace=settings.certificates_namespace,
            prefix=settings.certificate_prefix,
            policy_secret=settings.policy_secret,
            base_file=settings.access_policy_base,
            policy_file=settings.access_policy_file,
            validity_days=settings.certificate_validity_days,
            renew_before_days=settings.certificate_renew_before_days,
            check_interval_s=settings.users_check_interval_s,
        ),
        active=lambda: reconciler.active,
    )


def run(
    settings: OperatorSettings, log_level: str | None = None, log_format: str | None = None
) -> int:
    configure_logging(log_level, log_format)
    collector.tune()
    try:
        asyncio.run(serve(settings))
    except SettingsError:
        raise
    except Exception as exc:
        log.error("operator failed", error=repr(exc))
        return 1
    return 0
