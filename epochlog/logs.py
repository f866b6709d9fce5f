"""Structured logging: one event per line, key=value (or JSON with EPOCHLOG_LOG_FORMAT=json).

Every component logs through structlog with the shared names as keys
(partition, leaderEpoch, logEndOffset, highWatermark, ...), so a line can be
grepped and parsed the same way whichever process wrote it.
"""

from __future__ import annotations

import logging
import os
import sys

import structlog


def _stderr_logger(*_args: object) -> structlog.PrintLogger:
    return structlog.PrintLogger(sys.stderr)


def configure(level: str | None = None, fmt: str | None = None) -> None:
    level_name = (level or os.environ.get("EPOCHLOG_LOG_LEVEL", "info")).upper()
    fmt = fmt or os.environ.get("EPOCHLOG_LOG_FORMAT", "logfmt")
    renderer: structlog.typing.Processor
    if fmt == "json":
        renderer = structlog.processors.JSONRenderer()
    else:
        renderer = structlog.processors.LogfmtRenderer(key_order=["ts", "level", "event"])
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", key="ts"),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping().get(level_name, logging.INFO)
        ),
        # Resolve sys.stderr per logger, not once: it may be swapped (tests, daemons).
        logger_factory=_stderr_logger,
        cache_logger_on_first_use=False,
    )


def configure_once() -> None:
    """`configure` from the environment, unless the process has configured logging already:
    for code that runs in processes epochlog did not start (Spark's Python workers)."""
    if not structlog.is_configured():
        configure()
