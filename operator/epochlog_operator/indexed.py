"""Indexes by partition name: a heartbeat's reports, and the namespace serving each name.

`IndexedHeartbeat`: a `BrokerHeartbeat` whose partition reports are found by
name in constant time. Every decision looks up one partition in the latest
heartbeat of every broker (`observations.observe`), and
`BrokerHeartbeat.partition` scans the reports one by one. With a thousand
partitions and a few hundred reports per broker that scan was most of a
decision's cost, so the heartbeat endpoint parses bodies into this subclass,
which indexes the reports by name.

The index is rebuilt whenever the `partitions` tuple is not the one it was
built from: `model_copy(update=...)` (which `ControllerCore` uses to drop
refused proposals) copies private attributes as they are, and a stale index
would answer with the reports of the original. Equality ignores the index.

`NameClaims`: brokers, heartbeats and their on-disk layout know a partition by
its name alone (`<topic>-<partition>`), so an operator serving several
namespaces serves a name from one of them only. The first namespace to claim
a name serves it (an operator that starts lets the Partitions served before
claim first, then the oldest); a Partition of the same name in another
namespace waits, unassigned, and takes over when the one served is deleted:
the oldest waiting one first.
"""

from __future__ import annotations

from pydantic import PrivateAttr

from epochlog.protocol.heartbeat import BrokerHeartbeat, PartitionReport


class IndexedHeartbeat(BrokerHeartbeat):
    _index: tuple[tuple[PartitionReport, ...], dict[str, PartitionReport]] | None = PrivateAttr(
        default=None
    )

    def partition(self, name: str) -> PartitionReport | None:
        # The private-attribute dict is read directly: pydantic's attribute lookup for
        # private names costs more than the dictionary lookup it guards.
        private = self.__pydantic_private__
        assert private is not None  # the model has a private attribute
        parts = self.partitions
        index: tuple[tuple[PartitionReport, ...], dict[str, PartitionReport]] | None
        index = private["_index"]
        if index is None or index[0] is not parts:
            index = (parts, {p.name: p for p in parts})
            private["_index"] = index
        return index[1].get(name)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, IndexedHeartbeat):
            return NotImplemented
        return self.__dict__ == other.__dict__

    __hash__ = BrokerHeartbeat.__hash__


class NameClaims:
    """Which namespace serves each Partition name, and which wait for it."""

    def __init__(self) -> None:
        self._claims: dict[str, dict[str, str]] = {}
        """name -> {namespace: creationTimestamp}; the first namespace serves the name."""

    def claim(self, name: str, namespace: str, created: str | None = None) -> str:
        """Claim `name` for `namespace` (again: nothing changes); the namespace serving it."""
        claims = self._claims.setdefault(name, {})
        claims.setdefault(namespace, created or "")
        return next(iter(claims))

    def serving(self, name: str) -> str | None:
        claims = self._claims.get(name)
        return next(iter(claims)) if claims else None

    def waiting(self, name: str) -> tuple[str, ...]:
        """The namespaces whose Partition of this name is not served."""
        return tuple(self._claims.get(name, {}))[1:]

    def release(self, name: str, namespace: str) -> str | None:
        """Drop `namespace`'s claim; the namespace serving `name` now, if any.

        When the one served goes, the waiting claim created first (then by namespace)
        takes over; an unknown creation time comes last.
        """
        claims = self._claims.get(name)
        if claims is None or namespace not in claims:
            return self.serving(name)
        served = next(iter(claims)) == namespace
        del claims[namespace]
        if not claims:
            del self._claims[name]
            return None
        if served:
            heir = min(claims, key=lambda ns: (claims[ns] == "", claims[ns], ns))
            self._claims[name] = {heir: claims[heir]} | claims
        return next(iter(self._claims[name]))

    def clear(self) -> None:
        self._claims.clear()
