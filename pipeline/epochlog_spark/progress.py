"""What a streaming query's progress reports say, read in Spark's own field names.

Spark reports each trigger as a StreamingQueryProgress (`query.recentProgress`,
JSON objects); its `durationMs` lists the phases the trigger went through.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def ran_a_batch(progress: Sequence[dict[str, Any]]) -> bool:
    """Some of these progress reports is of a micro-batch that ran (Spark reports the
    `addBatch` phase only then; a trigger that found no data reports without it)."""
    return any("addBatch" in report.get("durationMs", {}) for report in progress)
