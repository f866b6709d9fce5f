"""`python -m epochlog_operator [flags]`: run the operator (the same as `epochlog operator`)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from epochlog.protocol.errors import EpochlogError
from epochlog_operator.settings import OperatorSettings, add_arguments


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m epochlog_operator",
        description="The epochlog operator: kopf handlers for Partitions, broker heartbeats, "
        "leader election and ISR tracking persisted in Partition status.",
    )
    parser.add_argument("--log-level", default=None, help="debug, info, warning, error")
    parser.add_argument("--log-format", default=None, choices=["logfmt", "json"])
    add_arguments(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        settings = OperatorSettings.from_args(args)
        from epochlog_operator.main import run

        return run(settings, args.log_level, args.log_format)
    except EpochlogError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
