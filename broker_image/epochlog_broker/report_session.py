"""Which partition reports a broker's next heartbeat carries: its side of the report session.

The controller keeps the latest report of every partition a broker hosts; a
heartbeat needs to carry only the reports that differ from what the
controller acknowledged (see `epochlog.protocol.heartbeat`). `ReportSession`
decides that from a cheap fingerprint per partition (a tuple of everything the
report would say), so a broker hosting thousands of idle partitions builds and
sends no report at all, and keeps the controller's copy exact:

- what was sent is acknowledged only by an answer; a heartbeat that went
  unanswered may still have been taken (a late delivery), so its reports are
  sent again, as are those of a heartbeat still in flight;
- a full heartbeat replaces the controller's copy, so it is acknowledged as a
  whole, and one that went unanswered is followed by another full one;
- an answer requiring a full report (a restarted controller) or naming another
  session starts over with a full one;
- every `full_every` heartbeats a full one resynchronises both sides anyway;
- a report whose steady part (`steady`: all but the offsets, which move with every
  write) is what the controller holds waits for the next heartbeat that carries
  progress, one in `progress_every`: under writes to every partition nearly every
  report changes in every heartbeat, and the offsets alone change no decision (the
  operator shows them at its status refresh pace). Reports named `urgent` go at
  once all the same: a follower that lost its leader holds the log end an unclean
  election would choose by.

A broker that knows which fingerprints may have changed since the last heartbeat
says so (`changed`), and the session looks only at those, at the ones it held
back or lost on the way, and at the ones in flight: an idle broker's heartbeat
then costs nothing per hosted partition.

Pure: no clock, no I/O; the broker's heartbeat loop calls it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Hashable, Mapping
from dataclasses import dataclass, field
from typing import Final

DEFAULT_FULL_REPORT_EVERY: Final = 120
"""Heartbeats between two full ones (a minute at the default 500 ms interval)."""

DEFAULT_PROGRESS_EVERY: Final = 5
"""Heartbeats between two that carry reports changed in their offsets alone (2.5 s at
the default 500 ms interval, half the operator's default status refresh interval)."""


_NONE: Final = object()


@dataclass(frozen=True, slots=True)
class ReportPlan:
    """What the next heartbeat carries."""

    seq: int
    full: bool
    session_id: int
    answered: int
    names: tuple[str, ...]
    """Partitions whose report the heartbeat carries."""
    removed: tuple[str, ...]


@dataclass(slots=True)
class _Sent:
    full: bool
    keys: dict[str, Hashable]
    removed: tuple[str, ...]


@dataclass
class ReportSession:
    full_every: int = DEFAULT_FULL_REPORT_EVERY
    session_id: int = 0
    seq: int = 0
    answered: int = 0
    acked: dict[str, Hashable] = field(default_factory=dict)
    """The fingerprint of each report the controller holds, as far as answers tell."""
    in_flight: dict[int, _Sent] = field(default_factory=dict)
    full_needed: bool = True
    since_full: int = 0
    progress_every: int = DEFAULT_PROGRESS_EVERY
    steady: Callable[[Hashable], Hashable] | None = None
    """A report's fingerprint without its offsets; None: every change is sent at once."""
    since_progress: int = 0
    held_back: set[str] = field(default_factory=set)
    """Partitions whose report may differ from what the controller holds and that no
    heartbeat in flight carries: held back for progress, or in a heartbeat that went
    unanswered. Only `prepare` with `changed` reads it."""

    @property
    def next_full(self) -> bool:
        """Whether the next heartbeat carries every report (the caller then fingerprints
        every partition anew)."""
        return self.full_needed or self.session_id == 0 or self.since_full + 1 >= self.full_every

    def prepare(
        self,
        keys: Mapping[str, Hashable],
        urgent: Collection[str] = (),
        changed: Collection[str] | None = None,
    ) -> ReportPlan:
        """The next heartbeat, given the fingerprint of every hosted partition's report;
        the reports of `urgent` ones are not held back for progress. With `changed`, only
        those fingerprints may differ from the ones given to the previous `prepare`, and
        only those partitions may have come or gone since."""
        full = self.next_full
        self.seq += 1
        self.since_full += 1
        if full:
            names = tuple(sorted(keys))
            removed: tuple[str, ...] = ()
            self.since_full = 0
            self.since_progress = 0
            # Until its answer the controller holds the reports acknowledged before:
            # what changed or was held back is looked at again.
            self.held_back.update(changed or ())
        elif changed is not None:
            names, removed = self._changed_only(keys, urgent, changed)
        else:
            # A report in a heartbeat not answered yet may or may not be the controller's:
            # sending it again keeps the copy exact whichever way that heartbeat goes.
            unsure = {n for sent in self.in_flight.values() for n in sent.keys}
            self.since_progress += 1
            progress = self.steady is None or self.since_progress >= self.progress_every
            if progress:
                self.since_progress = 0
            names = tuple(
                sorted(
                    n
                    for n, k in keys.items()
                    if n in unsure or self._due(n, k, progress or n in urgent)
                )
            )
            removed = tuple(sorted(n for n in self.acked.keys() | unsure if n not in keys))
        self.in_flight[self.seq] = _Sent(full, {n: keys[n] for n in names}, removed)
        return ReportPlan(
            seq=self.seq,
            full=full,
            session_id=0 if full else self.session_id,
            answered=self.answered,
            names=names,
            removed=removed,
        )

    def _changed_only(
        self, keys: Mapping[str, Hashable], urgent: Collection[str], changed: Collection[str]
    ) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """`prepare`'s choice, looking at the partitions that may need a report alone."""
        unsure = {n for sent in self.in_flight.values() for n in sent.keys}
        removing = {n for sent in self.in_flight.values() for n in sent.removed}
        self.since_progress += 1
        progress = self.steady is None or self.since_progress >= self.progress_every
        if progress:
            self.since_progress = 0
        candidates = self.held_back.union(changed, unsure, urgent, removing)
        names = []
        removed = []
        held_back = set()
        for n in sorted(candidates):
            k = keys.get(n, _NONE)
            if k is _NONE:
                if n in self.acked or n in unsure:
                    removed.append(n)
            elif n in unsure or self._due(n, k, progress or n in urgent):
                names.append(n)
            elif self.acked.get(n, _NONE) != k:
                held_back.add(n)
        self.held_back = held_back
        return tuple(names), tuple(removed)

    def _due(self, name: str, key: Hashable, progress: bool) -> bool:
        acked = self.acked.get(name, _NONE)
        if acked is _NONE:
            return True
        if acked == key:
            return False
        return progress or self.steady is None or self.steady(acked) != self.steady(key)

    def on_answer(self, seq: int, session_id: int, full_report_required: bool) -> None:
        """The controller answered heartbeat `seq`."""
        sent = self.in_flight.pop(seq, None)
        for older in [s for s in self.in_flight if s < seq]:
            self.on_failure(older)
        if sent is None:
            return  # answered after a later heartbeat was: that one carried its reports
        if full_report_required:
            self._start_over()
            return
        if sent.full:
            # What changed after this heartbeat was prepared may have been named to a
            # later full one, which looks at no names, and the controller's copy is now
            # this one: every report it held before or holds now is looked at once more.
            self.held_back.update(self.acked.keys(), sent.keys)
            self.acked = dict(sent.keys)
            self.session_id = session_id
            self.full_needed = False
        elif session_id != self.session_id:
            self._start_over()
            return
        else:
            self.acked.update(sent.keys)
            for name in sent.removed:
                self.acked.pop(name, None)
                self.held_back.add(name)  # hosted again since, its report goes anew
        self.answered = seq

    def on_failure(self, seq: int) -> None:
        """Heartbeat `seq` went unanswered; the controller may have taken it or not."""
        sent = self.in_flight.pop(seq, None)
        if sent is None:
            return
        if sent.full:
            self._start_over()
            return
        for name in sent.keys:
            self.acked.pop(name, None)
        self.held_back.update(sent.keys)
        self.held_back.update(sent.removed)

    def _start_over(self) -> None:
        self.full_needed = True
        self.session_id = 0
        self.acked.clear()
