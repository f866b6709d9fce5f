"""What the scale benchmark reads from a running embedded cluster, without touching its code.

- `cpu_seconds`, `rss_bytes`: a process's CPU time and resident memory, from
  /proc/PID/stat and /proc/PID/status;
- `scrape`: one /metrics page (the Prometheus text format) as a `Scrape`, whose
  `total` sums the samples of one name and labels, None when there is none;
- `PartitionWatch`: the emulator's watch API on Partitions, keeping the latest
  status of each, how many status changes it saw, when the last material one
  (leader, epochs, ISR, replicas, conditions) was, and every ISR shrink (with
  when); and waiting on a condition over those statuses.

The benchmark reads these before and after its windows and reports deltas.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from epochlog.resources import PartitionStatus
from epochlog_tools.devcluster.partitions import NAMESPACE, PartitionEvent, partitions_path

WAKE_S = 0.5
"""`until` looks at its condition at least this often, also when no event arrives (the
condition may depend on the clock or on something other than the watch)."""


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of the process, all its threads; 0 once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    # The command name is in parentheses and may contain spaces: count fields after it.
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def runqueue_wait_seconds(pid: int) -> float:
    """Time the process's main thread (a broker's or the operator's event loop) was ready to
    run and waited for a CPU (schedstat); 0 once it is gone or where the kernel keeps none."""
    try:
        fields = Path(f"/proc/{pid}/schedstat").read_text().split()
    except OSError:
        return 0.0
    return int(fields[1]) / 1e9 if len(fields) > 1 else 0.0


def rss_bytes(pid: int) -> int | None:
    """VmRSS of the process; None once it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024  # the kernel writes kB
    return None


@dataclass(frozen=True)
class Scrape:
    """One /metrics page: every sample as (name, labels, value)."""

    samples: tuple[tuple[str, dict[str, str], float], ...]

    def total(self, name: str, **labels: str) -> float | None:
        """The sum of the samples named `name` that carry `labels`; None when none does
        (the process does not export the metric, or has not counted anything yet)."""
        found = [
            value
            for sample, have, value in self.samples
            if sample == name and all(have.get(k) == v for k, v in labels.items())
        ]
        return sum(found) if found else None

    def by_label(self, name: str, label: str) -> dict[str, float]:
        """The samples named `name` summed by the value of `label`."""
        out: dict[str, float] = {}
        for sample, have, value in self.samples:
            if sample == name and label in have:
                out[have[label]] = out.get(have[label], 0.0) + value
        return out


async def scrape(http: aiohttp.ClientSession, base_url: str) -> Scrape:
    async with http.get(base_url + "/metrics") as rsp:
        rsp.raise_for_status()
        text = await rsp.text()
    return Scrape(
        tuple(
            (s.name, dict(s.labels), float(s.value))
            for family in text_string_to_metric_families(text)
            for s in family.samples
        )
    )


@dataclass(frozen=True)
class IsrShrink:
    at: float
    """time.monotonic() when the watch saw it."""
    partition: str
    before: tuple[int, ...]
    after: tuple[int, ...]


@dataclass
class PartitionWatch:
    """Partitions of one namespace as the emulator's watch API reports them."""

    status: dict[str, PartitionStatus] = field(default_factory=dict)
    shrinks: list[IsrShrink] = field(default_factory=list)
    events: int = 0
    """ADDED and MODIFIED events seen with a status."""
    last_material: float = field(default_factory=time.monotonic)
    """When the last event changed more than the refreshed figures (HW, lag, their times)."""
    _changed: asyncio.Event = field(default_factory=asyncio.Event)
    _task: asyncio.Task[None] | None = None

    def start(self, http: aiohttp.ClientSession, api_url: str) -> None:
        self._task = asyncio.create_task(self._run(http, api_url))

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, aiohttp.ClientError):
                await self._task

    async def _run(self, http: aiohttp.ClientSession, api_url: str) -> None:
        """Watch until cancelled, resuming from the last resourceVersion seen when the stream
        ends, and from a fresh list when the emulator no longer has that version."""
        rv = ""
        path = api_url + partitions_path(NAMESPACE)
        while True:
            query = f"?watch=true&resourceVersion={rv}" if rv else "?watch=true"
            async with http.get(path + query, timeout=aiohttp.ClientTimeout()) as rsp:
                rsp.raise_for_status()
                async for line in rsp.content:
                    if not line.strip():
                        continue
                    raw = json.loads(line)
                    if raw.get("type") == "ERROR":
                        rv = ""  # 410 Gone: start again from a list
                        break
                    if raw.get("type") == "BOOKMARK":
                        continue
                    event = PartitionEvent.model_validate(raw)
                    rv = event.object.metadata.resource_version or rv
                    self._apply(event)

    def _apply(self, event: PartitionEvent) -> None:
        name = event.object.metadata.name
        status = event.status
        if status is None or not name:
            return
        now = time.monotonic()
        before = self.status.get(name)
        if before is not None and before.isr and set(before.isr) - set(status.isr):
            self.shrinks.append(IsrShrink(now, name, before.isr, status.isr))
        if before is None or _material(before) != _material(status):
            self.last_material = now
        self.status[name] = status
        self.events += 1
        self._changed.set()

    async def until(self, check: Callable[[], bool], what: str, timeout_s: float) -> float:
        """Seconds until `check()` holds, looked at on every event; TimeoutError naming
        `what` after `timeout_s`."""
        start = time.monotonic()
        while not check():
            if self._task is not None and self._task.done():
                # A watch that died would leave every wait to its timeout: say why now.
                self._task.result()
                raise RuntimeError("the Partition watch ended")
            left = timeout_s - (time.monotonic() - start)
            if left <= 0:
                raise TimeoutError(f"timed out after {timeout_s:g} s waiting for {what}")
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), min(left, WAKE_S))
        return time.monotonic() - start

    async def settled(self, for_s: float, timeout_s: float) -> bool:
        """Until no status changed materially for `for_s`; False when that did not happen
        within `timeout_s`."""
        with contextlib.suppress(TimeoutError):
            await self.until(
                lambda: time.monotonic() - self.last_material >= for_s,
                "settled statuses",
                timeout_s,
            )
            return True
        return False


def _material(s: PartitionStatus) -> tuple[object, ...]:
    return (s.leader, s.leader_epoch, s.partition_epoch, s.isr, s.replicas, s.conditions)
