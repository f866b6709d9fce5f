"""The garbage collector's settings of the long-running processes (operator, broker, API
emulator).

CPython's full collection walks every object the process holds. The operator keeps
every Partition's object and decision input, a broker every partition's log and
replica state, and both replace many of them as they work, which keeps the
collector's third generation busy: at 1,000 Partitions under load a full collection
took about 200 ms of the operator's event loop (14 in one run of the scale bench, 13 %
of its CPU), a pause every heartbeat and status write waits out, longer with more
Partitions.
Almost nothing these processes drop is cyclic (reference counting frees the rest at
once), so full collections run a hundred times less often; the young generations keep
their defaults, whose collections are short.
"""

from __future__ import annotations

import gc
from typing import Final

FULL_COLLECTION_EVERY: Final = 1000
"""Second-generation collections between two full ones (CPython's default: 10)."""


def tune() -> None:
    """Apply the settings above; the first two thresholds stay as they are."""
    young, middle, _full = gc.get_threshold()
    gc.set_threshold(young, middle, FULL_COLLECTION_EVERY)
