"""The operator's own stall: time in which its process did not run is not counted as the
brokers' silence, and time in which it ran is."""

from __future__ import annotations

import kopf

from epochlog_operator.controller import ControllerCore
from epochlog_operator.kube import KubeClient
from epochlog_operator.liveness import STALL_CHECK_INTERVAL_MS, BrokerState
from epochlog_operator.metrics import Metrics
from epochlog_operator.reconciler import Reconciler
from epochlog_operator.settings import OperatorSettings

SESSION_MS = 3_000


class Clock:
    """One clock for both the wall and the monotonic time the reconciler reads."""

    def __init__(self) -> None:
        self.s = 1_000.0

    def __call__(self) -> float:
        return self.s


def _reconciler(clock: Clock) -> tuple[Reconciler, Metrics]:
    kube = KubeClient(kopf.ConnectionInfo(server="http://127.0.0.1:1"))  # never opened
    metrics = Metrics()
    reconciler = Reconciler(OperatorSettings(), kube, metrics, clock=clock, monotonic=clock)
    reconciler.core = ControllerCore.start(reconciler.now_ms(), SESSION_MS)
    return reconciler, metrics


def _beat(reconciler: Reconciler, broker: int) -> None:
    core = reconciler.core
    assert core is not None
    core.liveness, _ = core.liveness.heartbeat(broker, 1, reconciler.now_ms())


def _state(reconciler: Reconciler, broker: int) -> BrokerState:
    core = reconciler.core
    assert core is not None
    now = reconciler.now_ms()
    return core.liveness.state(broker, now)


def test_a_process_that_did_not_run_past_the_session_timeout_fences_nobody() -> None:
    clock = Clock()
    reconciler, metrics = _reconciler(clock)
    _beat(reconciler, 1)
    clock.s += 10  # SIGSTOP, or a CPU-throttled pod: nothing ran for ten seconds
    assert _state(reconciler, 1) is BrokerState.LIVE
    assert "epochlog_operator_stalls_total 1" in metrics.render({})


def test_a_process_that_runs_fences_a_silent_broker_after_the_session_timeout() -> None:
    clock = Clock()
    reconciler, metrics = _reconciler(clock)
    _beat(reconciler, 1)
    step = STALL_CHECK_INTERVAL_MS / 1000
    for _ in range(int(SESSION_MS / 1000 / step)):
        clock.s += step
        reconciler.observe_clock()  # the clock watch, every interval
    assert _state(reconciler, 1) is BrokerState.LIVE
    clock.s += step
    assert _state(reconciler, 1) is BrokerState.FENCED
    assert "epochlog_operator_stalls_total 1" not in metrics.render({})
