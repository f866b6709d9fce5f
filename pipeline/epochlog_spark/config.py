"""The pipeline job's settings and its command line, shared by `spark-submit job.py` and
`epochlog pipeline run` (no Spark needed to read them)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path

from epochlog.security.options import add_tls_arguments


@dataclass(frozen=True)
class JobConfig:
    bootstrap: str
    topic: str
    output: str
    """Directory: one Parquet table per query under it."""
    checkpoint: str
    """Directory: one checkpoint per query under it."""
    trigger_interval: str = "5 seconds"
    available_now: bool = False
    """Process what the topic holds now, then stop (Trigger.AvailableNow)."""
    window: str = "1 minute"
    watermark: str = "1 minute"
    starting_offsets: str = "earliest"
    source_options: dict[str, str] = field(default_factory=dict)
    ca: str | None = None
    cert: str | None = None
    key: str | None = None
    token: str | None = None

    def credential_options(self) -> dict[str, str]:
        """The source options `ca`, `cert`, `key` and `token` that are set."""
        given = {"ca": self.ca, "cert": self.cert, "key": self.key, "token": self.token}
        return {k: v for k, v in given.items() if v}

    def path(self, query: str) -> str:
        return str(Path(self.output) / query)

    def checkpoint_of(self, query: str) -> str:
        return str(Path(self.checkpoint) / query)


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    p = parser or argparse.ArgumentParser(
        prog="job.py", description="epochlog's order pipeline (spark-submit entry point)"
    )
    p.add_argument("--bootstrap", required=True, help="broker URLs, comma separated")
    p.add_argument("--topic", default="orders", help="topic of order events (default orders)")
    p.add_argument("--output", required=True, help="directory of the Parquet outputs")
    p.add_argument("--checkpoint", required=True, help="directory of the checkpoints")
    p.add_argument(
        "--trigger-interval", default="5 seconds", help="micro-batch interval (default 5 seconds)"
    )
    p.add_argument(
        "--available-now",
        action="store_true",
        help="process what the topic holds now, then stop",
    )
    p.add_argument("--window", default="1 minute", help="revenue window (default 1 minute)")
    p.add_argument("--watermark", default="1 minute", help="lateness allowed (default 1 minute)")
    p.add_argument(
        "--starting-offsets",
        default="earliest",
        help="earliest, latest or JSON per partition, for a new checkpoint (default earliest)",
    )
    p.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="another option of the epochlog source (repeatable)",
    )
    add_tls_arguments(p, server=False)
    return p


def config_from_args(args: argparse.Namespace) -> JobConfig:
    extra: dict[str, str] = {}
    for item in args.option:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise SystemExit(f"--option {item!r}: expected NAME=VALUE")
        extra[name] = value
    return JobConfig(
        bootstrap=args.bootstrap,
        topic=args.topic,
        output=args.output,
        checkpoint=args.checkpoint,
        trigger_interval=args.trigger_interval,
        available_now=args.available_now,
        window=args.window,
        watermark=args.watermark,
        starting_offsets=args.starting_offsets,
        source_options=extra,
        ca=args.ca,
        cert=args.cert,
        key=args.key,
        token=args.token,
    )
