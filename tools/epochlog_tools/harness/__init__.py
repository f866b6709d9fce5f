"""Running epochlog's processes for the local cluster, the tests and the benchmarks.

The one place that builds the command lines of the broker, the operator and the
Kubernetes API emulator and starts, waits for and stops them:

- `commands`: argv builders (`broker_argv`, `operator_argv`, `apiserver_argv`),
  the environment children run in, and each program's health endpoints;
- `process`: `ManagedProcess`, one OS process started with its output in a log
  file (or adopted by pid from a state file): alive, paused, signal, wait, stop
  with SIGTERM then SIGKILL;
- `readiness`: waiting by condition (a health endpoint answers, any check holds)
  for as long as the processes it depends on run, with a deadline only when
  the caller gives one;
- `ports`: free loopback ports, and waiting for one to be released;
- `security`: TLS for every process from one `DevPki` directory, or plaintext;
- `scripted_brokers`: stand-in brokers that speak the heartbeat protocol over
  HTTP without a log, to load or steer a real operator.

The harness talks to the programs through their command lines and HTTP only: it
imports none of the broker, the operator, the simulator or the tests.
"""

from epochlog_tools.harness.commands import (
    APISERVER_READY_PATH,
    HEALTH_PATH,
    READY_PATH,
    apiserver_argv,
    broker_argv,
    child_env,
    operator_argv,
    url,
)
from epochlog_tools.harness.ports import LOOPBACK, free_port, free_ports, port_free, wait_port_free
from epochlog_tools.harness.process import ManagedProcess, StopOutcome
from epochlog_tools.harness.readiness import (
    NotReadyError,
    ProcessExitedError,
    answers,
    wait_healthy,
    wait_until,
)
from epochlog_tools.harness.security import ADMIN, PLAINTEXT, Security

__all__ = [
    "ADMIN",
    "APISERVER_READY_PATH",
    "HEALTH_PATH",
    "LOOPBACK",
    "PLAINTEXT",
    "READY_PATH",
    "ManagedProcess",
    "NotReadyError",
    "ProcessExitedError",
    "Security",
    "StopOutcome",
    "answers",
    "apiserver_argv",
    "broker_argv",
    "child_env",
    "free_port",
    "free_ports",
    "operator_argv",
    "port_free",
    "url",
    "wait_healthy",
    "wait_port_free",
    "wait_until",
]
