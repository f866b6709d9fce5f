"""A readable account of a failed run: the violation, the schedule, the replicas' logs,
and what the clients sent (the Kafka requests answered, by client and API)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from epochlog_tools.checker.checks import Violation

if TYPE_CHECKING:
    from epochlog_tools.sim.scenario import Sim


def _epochs(records: list[tuple[int, int, str]]) -> str:
    runs: list[str] = []
    last = None
    for offset, epoch, _v in records:
        if epoch != last:
            runs.append(f"e{epoch}@{offset}")
            last = epoch
    return " ".join(runs) or "-"


def render(sim: Sim, violations: Sequence[Violation], *, max_faults: int = 60) -> str:
    start = sim.world.start_ms
    first = violations[0]
    lines = [
        f"VIOLATION {first.check} in {first.partition} at t=+{first.time - start} ms",
        f"  {first.message}",
        f"seed {sim.world.seed}" + (f", legacy {sorted(sim.legacy)}" if sim.legacy else ""),
        "replay: epochlog sim --start "
        f"{sim.world.seed} --seeds 1"
        + "".join(f" --legacy {name}" for name in sorted(sim.legacy))
        + " --verbose",
    ]
    if len(violations) > 1:
        lines.append(f"{len(violations) - 1} further violation(s):")
        lines += [
            f"  [{v.check}] +{v.time - start} ms {v.partition}: {v.message}"
            for v in violations[1:8]
        ]
    lines.append("schedule:")
    faults = sim.history.faults
    for f in faults[:max_faults]:
        lines.append(f"  +{f.time - start:>7} ms  {f.description}")
    if len(faults) > max_faults:
        lines.append(f"  ... {len(faults) - max_faults} more")
    lines.append("partitions:")
    for s in sim.specs:
        status = sim.status(s.name)
        if status is None:
            lines.append(f"  {s.name}: no status")
            continue
        history = ", ".join(
            f"e{e.epoch}:b{e.leader}@{e.start_offset}(+{e.time - start}ms)"
            for e in status.epoch_history
        )
        lines.append(
            f"  {s.name}: leader {status.leader} leaderEpoch {status.leader_epoch} "
            f"partitionEpoch {status.partition_epoch} isr {list(status.isr)} "
            + (
                f"elr {list(status.eligible_leader_replicas)} "
                if status.eligible_leader_replicas
                else ""
            )
            + f"highWatermark {status.high_watermark} minIsr {s.min_insync_replicas}"
        )
        lines.append(f"    elections: {history}")
        for b, broker in sorted(sim.brokers.items()):
            state = broker.replica_state(s.name) if broker.alive else None
            if state is None:
                lines.append(f"    broker {b}: {'down' if not broker.alive else 'no replica'}")
                continue
            records, high_watermark = state
            tail = ", ".join(f"{o}={v}" for o, _e, v in records[-4:])
            lines.append(
                f"    broker {b} (brokerEpoch {broker.broker_epoch}): logEnd {len(records)} "
                f"highWatermark {high_watermark} epochs [{_epochs(records)}] tail [{tail}]"
            )
    acked = sum(1 for a in sim.history.acks)
    lines.append(f"acknowledged records: {acked}; records read: {len(sim.history.reads)}")
    kafka = _kafka_requests(sim)
    if kafka:
        lines.append(
            "Kafka requests answered: " + ", ".join(f"{api} {n}" for api, n in kafka.items())
        )
    return "\n".join(lines)


def _kafka_requests(sim: Sim) -> dict[str, int]:
    """The Kafka requests the run's Kafka clients had answered, by API, by client."""
    out: dict[str, int] = {}
    for c in sim.clients:
        for api, n in sorted(c.kafka_requests.items()):
            key = f"{c.name} {api}"
            out[key] = out.get(key, 0) + n
    return out
