"""A `BrokerHeartbeat` whose partition reports are found by name in constant time.

Every decision looks up one partition in the latest heartbeat of every broker
(`observations.observe`), and `BrokerHeartbeat.partition` scans the reports
one by one. With a thousand partitions and a few hundred reports per broker
that scan was most of a decision's cost, so the heartbeat endpoint parses
bodies into this subclass, which indexes the reports by name.

The index is rebuilt whenever the `partitions` tuple is not the one it was
built from: `model_copy(update=...)` (which `ControllerCore` uses to drop
refused proposals) copies private attributes as they are, and a stale index
would answer with the reports of the original. Equality ignores the index.
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
