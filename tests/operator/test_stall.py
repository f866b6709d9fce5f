"""The operator's own stall: time in which its process did not run is not counted as the
brokers' silence, and time in which it ran is."""

from __future__ import annotations

import kopf

from epochlog_operator.controller import ControllerCore
from epochlog_operator.kube import KubeClient
from epochlog_operator.liveness import LATE_SILENCE_LIMIT, STALL_CHECK_INTERVAL_MS, BrokerState
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


def _reconciler(clock: Clock, cpu: Clock | None = None) -> tuple[Reconciler, Metrics]:
    """`cpu`: the event loop's CPU time; by default it does not run (a stopped process)."""
    kube = KubeClient(kopf.ConnectionInfo(server="http://127.0.0.1:1"))  # never opened
    metrics = Metrics()
    reconciler = Reconciler(
        OperatorSettings(),
        kube,
        metrics,
        clock=clock,
        monotonic=clock,
        cpu=cpu if cpu is not None else Clock(),
    )
    reconciler.core = ControllerCore.start(reconciler.now_ms(), SESSION_MS)
    return reconciler, metrics


def _beat(reconciler: Reconciler, broker: int) -> None:
    core = reconciler.core
    assert core is not None
    core.liveness, _ = core.liveness.heartbeat(broker, 1, reconciler.now_ms())


def _run_one_session_timeout(
    reconciler: Reconciler, clock: Clock, cpu: Clock | None = None, share: float = 1.0
) -> None:
    """One session timeout of the clock watch looking every interval; the loop's thread
    runs `share` of the time (not at all without `cpu`: the steps are below a stall)."""
    step = STALL_CHECK_INTERVAL_MS / 1000
    for _ in range(int(SESSION_MS / 1000 / step)):
        clock.s += step
        if cpu is not None:
            cpu.s += step * share
        reconciler.observe_clock()


def _heard_then_late(late_s: float, ran: float) -> tuple[Reconciler, Metrics, Clock, Clock]:
    """Broker 1 heard, then the loop comes round `late_s` later, having run `ran` s."""
    clock, cpu = Clock(), Clock()
    reconciler, metrics = _reconciler(clock, cpu)
    _beat(reconciler, 1)
    clock.s += late_s
    cpu.s += ran
    return reconciler, metrics, clock, cpu


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
    _run_one_session_timeout(reconciler, clock)
    assert _state(reconciler, 1) is BrokerState.LIVE
    clock.s += STALL_CHECK_INTERVAL_MS / 1000
    assert _state(reconciler, 1) is BrokerState.FENCED
    assert "epochlog_operator_stalls_total 1" not in metrics.render({})


def test_a_loop_late_because_it_was_busy_fences_nobody_at_once() -> None:
    """One pass of 4 s on the CPU: the brokers' heartbeats waited in the socket."""
    reconciler, metrics, _, _ = _heard_then_late(4, ran=4)
    assert _state(reconciler, 1) is BrokerState.LIVE
    text = metrics.render({})
    assert "epochlog_operator_stalls_total 1" not in text
    assert "epochlog_operator_busy_loops_total 1" in text


def test_a_loop_late_on_every_pass_still_fences_a_dead_broker() -> None:
    """Passes of 1.5 s on the CPU, one after the other (an operator busy for good, as one
    at 10,000 Partitions under writes was): taken for stalls, each forgave the silence
    since the last, and a dead broker was never fenced. It is fenced at the latest
    `LATE_SILENCE_LIMIT` session timeouts after it was last heard."""
    clock, cpu = Clock(), Clock()
    reconciler, _ = _reconciler(clock, cpu)
    _beat(reconciler, 1)
    heard = clock.s
    while _state(reconciler, 1) is BrokerState.LIVE:
        assert clock.s - heard <= LATE_SILENCE_LIMIT * SESSION_MS / 1000, "never fenced"
        clock.s += 1.5
        cpu.s += 1.5
        reconciler.observe_clock()
    assert clock.s - heard > SESSION_MS / 1000


def test_a_late_loop_that_mostly_did_not_run_is_a_stall() -> None:
    """Starved for 8 s of a 10 s gap (a throttled pod that also had work): a stall, and a
    silent broker is fenced one session timeout of running after it."""
    reconciler, metrics, clock, cpu = _heard_then_late(10, ran=2)
    assert _state(reconciler, 1) is BrokerState.LIVE
    assert "epochlog_operator_stalls_total 1" in metrics.render({})
    _run_one_session_timeout(reconciler, clock, cpu, share=0.1)
    assert _state(reconciler, 1) is BrokerState.LIVE
    clock.s += STALL_CHECK_INTERVAL_MS / 1000
    assert _state(reconciler, 1) is BrokerState.FENCED


def test_a_gap_partly_run_and_partly_stalled_is_forgiven_whole() -> None:
    """Heard 0.5 s before a gap of 4.7 s, of which 2.7 s ran and 2 s did not (the busy
    part and the stall in an order nobody knows): fenced for the part it ran, a broker
    whose heartbeats waited in the socket would be (both live brokers were, in a
    failover at 10,000 Partitions)."""
    clock, cpu = Clock(), Clock()
    reconciler, _ = _reconciler(clock, cpu)
    _beat(reconciler, 1)
    clock.s += 0.5
    cpu.s += 0.5
    reconciler.observe_clock()
    clock.s += 4.7
    cpu.s += 2.7
    assert _state(reconciler, 1) is BrokerState.LIVE
