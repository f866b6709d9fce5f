"""The `epochlog` command line.

Subcommands so far:
  epochlog log check DIR      verify every batch of a partition directory (read-only)
  epochlog log dump DIR       print records (or batch headers) from an offset
  epochlog log repair DIR     cut a damaged log at the damage (stopped broker; asks first)
  epochlog demo               end to end: a leader SIGKILLed under acks=all and a Spark job
  epochlog demo --storage     storage walkthrough: appends, a power loss, recovery
  epochlog sim                random fault schedules in the deterministic simulator
  epochlog broker             run a broker (HTTP API, replication, heartbeats)
  epochlog operator           run the controller (kopf) with its heartbeat endpoint
  epochlog produce            send records (acks=all by default, idempotent)
  epochlog consume            read records up to the high watermark
  epochlog offsets            earliest / latest offsets of a partition
  epochlog dev up             start the embedded cluster (API emulator, operator, brokers)
  epochlog dev status         its processes and partitions (leader, epoch, ISR, HW)
  epochlog dev kill|pause|resume|restart NAME   faults on one of its processes
  epochlog dev down           stop it
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Coroutine, Sequence
from typing import Any

from epochlog import __version__
from epochlog.logs import configure
from epochlog.protocol.errors import EpochlogError
from epochlog.resources import DEFAULT_KAFKA_OFFSETS_PARTITIONS, KAFKA_OFFSETS_TOPIC
from epochlog.security.options import add_tls_arguments, server_security


def _cmd_access_scram(args: argparse.Namespace) -> int:
    import json

    from epochlog.security.access import MIN_SCRAM_ITERATIONS, scram_entry

    if args.iterations < MIN_SCRAM_ITERATIONS:
        print(f"--iterations must be at least {MIN_SCRAM_ITERATIONS}", file=sys.stderr)
        return 2
    password = sys.stdin.readline().rstrip("\n")
    if not password:
        print("give the password on standard input", file=sys.stderr)
        return 2
    entry = scram_entry(args.user, password, args.mechanism, args.iterations)
    print(json.dumps(entry, indent=2))
    return 0


def _cmd_log_check(args: argparse.Namespace) -> int:
    from epochlog_broker.log.fs import OsFileSystem
    from epochlog_broker.log.inspect import SegmentCheck, check_partition_dir

    def progress(sc: SegmentCheck) -> None:
        print(
            f"  {sc.name}: {sc.batches} batches, {sc.records} records, "
            f"offsets {sc.base_offset}..{sc.next_offset - 1}, index {sc.index}",
            file=sys.stderr,
        )

    print(f"checking {args.dir}", file=sys.stderr)
    result = check_partition_dir(OsFileSystem(), args.dir, progress)
    print(f"log end offset: {result.log_end_offset}")
    print(f"leader epochs: {[(e.epoch, e.start_offset) for e in result.epochs.entries]}")
    print(f"leader-epoch-checkpoint: {result.epoch_checkpoint}")
    if result.torn_tail:
        print(f"torn tail: {result.torn_tail}")
    for p in result.problems:
        print(f"PROBLEM: {p}")
    print("OK" if result.ok else "DAMAGED")
    return 0 if result.ok else 1


def _cmd_log_dump(args: argparse.Namespace) -> int:
    from epochlog_broker.log.fs import OsFileSystem
    from epochlog_broker.log.inspect import check_partition_dir
    from epochlog_broker.log.segment import iter_batches, segment_name

    fs = OsFileSystem()
    # Read-only: walk the segments directly instead of opening (and recovering) the log.
    result = check_partition_dir(fs, args.dir)
    shown = 0
    for sc in result.segments:
        if sc.next_offset <= args.offset:
            continue
        f = fs.open(f"{args.dir}/{segment_name(sc.base_offset)}")
        try:
            for item in iter_batches(f, 0, sc.size, sc.base_offset):
                if not isinstance(item, tuple):
                    break
                pos, h = item
                if h.next_offset <= args.offset:
                    continue
                if args.batches:
                    print(json.dumps({"position": pos, **h._asdict()}))
                    shown += 1
                else:
                    from epochlog.protocol.batch import decode_records
                    from epochlog.protocol.bodies import Encoding, record_json

                    for r in decode_records(f.pread(h.size, pos), h):
                        if r.offset < args.offset:
                            continue
                        print(json.dumps(record_json(r, Encoding.UTF8)))
                        shown += 1
                        if shown >= args.max:
                            return 0
                if shown >= args.max:
                    return 0
        finally:
            f.close()
    return 0


def _repair_targets(root: str, partition: str | None) -> tuple[str, list[str]]:
    """(data directory, partition directories) that `log repair` looks at."""
    from epochlog_broker.log.segment import parse_segment_name

    root = os.path.abspath(root)
    if partition is not None:
        return root, [os.path.join(root, partition)]
    if any(parse_segment_name(n) is not None for n in os.listdir(root)):
        return os.path.dirname(root), [root]
    dirs = sorted(os.path.join(root, n) for n in os.listdir(root))
    return root, [d for d in dirs if os.path.isdir(d)]


def _confirmed(args: argparse.Namespace) -> bool:
    if args.yes:
        return True
    if not sys.stdin.isatty():
        print("not repaired: run again with --yes to confirm", file=sys.stderr)
        return False
    return input("discard this data? [y/N] ").strip().lower() in ("y", "yes")


def _cmd_log_repair(args: argparse.Namespace) -> int:
    from epochlog_broker.identity import in_use
    from epochlog_broker.log.fs import OsFileSystem
    from epochlog_broker.log.repair import apply_repair, plan_repair

    data_dir, dirs = _repair_targets(args.dir, args.partition)
    if in_use(data_dir):
        print(f"{data_dir} is in use by a running broker: stop it first", file=sys.stderr)
        return 2
    fs = OsFileSystem()
    plans = [p for p in (plan_repair(fs, d) for d in dirs) if p is not None]
    if not plans:
        print("nothing to repair: no damaged segment found")
        return 0
    for plan in plans:
        print(f"will discard: {plan.describe()}")
    print(
        "the replica fetches the discarded records again from its leader when the broker "
        "starts; records no other replica holds are lost"
    )
    if not _confirmed(args):
        print("nothing changed")
        return 1
    for plan in plans:
        apply_repair(fs, plan)
        print(f"repaired {plan.directory}: log end offset is now {plan.first_offset}")
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    if args.storage:
        from epochlog_tools.demo import run_demo

        return run_demo(args.state_dir)
    from epochlog_tools.demo import run_cluster_demo
    from epochlog_tools.devcluster.local_cli import settings_from_args

    if args.log_level is None:
        configure("warning", args.log_format)
    return run_cluster_demo(
        args.state_dir,
        settings=settings_from_args(args),
        duration_s=args.duration,
        min_records=args.min_records,
        keep=args.keep,
        spark=args.spark,
        images=args.images,
    )


def _cmd_pipeline_run(args: argparse.Namespace) -> int:
    from epochlog_spark.config import config_from_args

    config = config_from_args(args)
    try:
        from epochlog_spark.job import Job
        from epochlog_spark.session import local_session
    except ImportError as exc:
        print(
            f"error: Spark is not installed ({exc}): pip install 'epochlog[spark]'", file=sys.stderr
        )
        return 2
    spark = local_session(args.master, "epochlog-orders")
    job = Job(spark, config)
    print(
        f"pipeline: queries {', '.join(job.queries)} running on {args.master}; outputs in "
        f"{config.output}, checkpoints in {config.checkpoint}"
        + ("" if config.available_now else "; Ctrl-C stops them"),
        flush=True,
    )
    try:
        job.wait()
    except KeyboardInterrupt:
        print("pipeline: stopped", flush=True)
    finally:
        spark.stop()
    return 0


def _cmd_sim(args: argparse.Namespace) -> int:
    from epochlog_tools.sim.runner import main as sim_main

    faults = [f for arg in args.faults or [] for f in arg.split(",") if f]
    return sim_main(
        seeds=args.seeds,
        start=args.start,
        faults=faults or None,
        legacy=args.legacy,
        jobs=args.jobs,
        duration_ms=args.duration_ms,
        verbose=args.verbose,
        keep_going=args.keep_going,
    )


def _sim_epilog() -> str:
    from epochlog_tools.sim.legacy import LEGACY
    from epochlog_tools.sim.runner import FAULTS

    faults = "\n".join(f"  {k:<14} {v}" for k, v in FAULTS.items())
    legacy = "\n".join(f"  {k:<19} {v}" for k, v in LEGACY.items())
    return (
        f"fault kinds (--faults, default all):\n{faults}\n\n"
        f"legacy behaviours (--legacy, simulator only; the checker must catch each):\n{legacy}\n\n"
        "exit status: 0 when every schedule passed every check, 1 on a violation "
        "(the failing seed and a report are printed), 2 on bad arguments"
    )


def _ip_address(value: str) -> str | None:
    import ipaddress

    if not value:
        return None  # an empty environment variable: none known
    try:
        return str(ipaddress.ip_address(value))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not an IP address: {value!r}") from exc


def _broker_id(value: str) -> int:
    """An id, or "hostname": the digits that end the host name (a StatefulSet's ordinal)."""
    import re
    import socket

    if value == "hostname":
        match = re.search(r"(\d+)$", socket.gethostname())
        if match is None:
            raise argparse.ArgumentTypeError(
                f"host name {socket.gethostname()!r} does not end with a number"
            )
        return int(match.group(1))
    if not value.isdigit():
        raise argparse.ArgumentTypeError(f"broker id must be a number or 'hostname', got {value!r}")
    return int(value)


def _probe_listen(value: str | None) -> dict[str, Any]:
    if not value:
        return {}
    from epochlog_broker.config import parse_listen

    host, port = parse_listen(value)
    return {"probe_host": host, "probe_port": port}


def _http_limits(args: argparse.Namespace) -> Any:
    """The listener limits the flags set (`epochlog.http_limits`), defaults for the others."""
    from epochlog.http_limits import HttpLimits

    given = {
        "request_timeout_s": None
        if args.request_timeout_ms is None
        else args.request_timeout_ms / 1000,
        "body_timeout_s": None if args.body_timeout_ms is None else args.body_timeout_ms / 1000,
        "max_connections": args.max_connections,
    }
    return HttpLimits(**{k: v for k, v in given.items() if v is not None})


def _cmd_broker(args: argparse.Namespace) -> int:
    import dataclasses

    from epochlog_broker.config import BrokerConfig, parse_listen, parse_peers
    from epochlog_broker.server import run_broker

    if args.id is None:
        print("error: --id (or EPOCHLOG_BROKER_ID) is required", file=sys.stderr)
        return 2
    controller = ",".join(args.controller or [os.environ.get("EPOCHLOG_CONTROLLER_URL", "")])
    if not controller.strip(", "):
        print("error: --controller (or EPOCHLOG_CONTROLLER_URL) is required", file=sys.stderr)
        return 2
    try:
        tls, policy = server_security(args)
        host, port = parse_listen(args.listen)
        config = BrokerConfig(
            broker_id=_broker_id(str(args.id)),
            data_dir=args.data_dir,
            controller_url=controller,
            host=host,
            port=port,
            advertised_address=args.advertised_address,
            ip=args.ip,
            peers=parse_peers(args.peers or [], "https" if tls else "http"),
            peer_address_template=args.peer_address_template,
            heartbeat_interval_ms=args.heartbeat_interval_ms,
            checkpoint_interval_ms=args.checkpoint_interval_ms,
            retention_check_interval_ms=args.retention_check_interval_ms,
            reassignment_throttle_bytes=args.reassignment_throttle_bytes,
            max_record_bytes=args.max_record_bytes,
            max_request_bytes=args.max_request_bytes,
            http=_http_limits(args),
            tls=tls,
            access_policy=policy,
            access_policy_file=args.access_policy,
            service_account_tokens=args.service_account_tokens,
            tls_reload_interval_s=args.cert_reload_interval_ms / 1000,
            controlled_shutdown_timeout_s=max(0, args.controlled_shutdown_timeout_ms) / 1000,
            rack=args.rack or None,
            kafka_port=None if args.kafka_port in (None, "") else int(args.kafka_port),
            kafka_advertised_address=args.kafka_advertised_address or None,
            kafka_offsets_partitions=int(args.kafka_offsets_partitions),
            kafka_offsets_rewrite_records=int(args.kafka_offsets_rewrite_records),
            **_probe_listen(args.probe_listen),
        )
        if args.segment_bytes is not None:
            config = dataclasses.replace(
                config, log=dataclasses.replace(config.log, segment_bytes=args.segment_bytes)
            )
    except (ValueError, argparse.ArgumentTypeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return run_broker(config)


def _cmd_operator(args: argparse.Namespace) -> int:
    from epochlog_operator.main import run
    from epochlog_operator.settings import OperatorSettings

    return run(OperatorSettings.from_args(args), args.log_level, args.log_format)


def _credentials(args: argparse.Namespace) -> Any:
    from epochlog.security.options import client_credentials

    try:
        return client_credentials(args)
    except ValueError as exc:
        raise SystemExit(f"error: {exc}") from None


def _run_client_command(main: Coroutine[Any, Any, int]) -> int:
    import asyncio

    try:
        return asyncio.run(main)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def _cmd_produce(args: argparse.Namespace) -> int:
    from epochlog.client.commands import produce

    values = args.values or None
    if values is None and sys.stdin.isatty() and not args.quiet:
        print("reading records from stdin, one per line (Ctrl-D ends)", file=sys.stderr)
    return _run_client_command(
        produce(
            args.bootstrap,
            args.partition,
            values=values,
            stdin=sys.stdin,
            out=sys.stdout,
            err=sys.stderr,
            acks=args.acks,
            key=args.record_key,
            headers=dict(args.header or []),
            linger_ms=args.linger_ms,
            batch_size=args.batch_size,
            delivery_timeout_ms=args.timeout_ms,
            binary=args.binary,
            quiet=args.quiet,
            credentials=_credentials(args),
            resolve=args.resolve,
        )
    )


def _cmd_consume(args: argparse.Namespace) -> int:
    from epochlog.client.commands import consume

    return _run_client_command(
        consume(
            args.bootstrap,
            args.partition,
            out=sys.stdout,
            err=sys.stderr,
            start=args.start,
            max_records=args.max,
            follow=args.follow,
            binary=args.binary,
            b64=args.base64,
            max_wait_ms=args.max_wait_ms,
            retry_timeout_ms=args.timeout_ms,
            quiet=args.quiet,
            credentials=_credentials(args),
            resolve=args.resolve,
        )
    )


def _one_line_options(args: argparse.Namespace) -> dict[str, Any]:
    """What `offsets` and `delete-records` take from the common client options."""
    return {
        "out": sys.stdout,
        "err": sys.stderr,
        "timeout_ms": args.timeout_ms,
        "credentials": _credentials(args),
        "resolve": args.resolve,
    }


def _cmd_offsets(args: argparse.Namespace) -> int:
    from epochlog.client.commands import offsets

    return _run_client_command(
        offsets(args.bootstrap, args.partition, at=args.at, **_one_line_options(args))
    )


def _cmd_delete_records(args: argparse.Namespace) -> int:
    from epochlog.client.commands import delete_records

    return _run_client_command(
        delete_records(
            args.bootstrap, args.partition, before=args.before, **_one_line_options(args)
        )
    )


def _add_client_commands(sub: Any) -> None:
    from epochlog.client import commands as c

    env_bootstrap = os.environ.get("EPOCHLOG_BOOTSTRAP")

    def common(p: argparse.ArgumentParser, timeout_help: str) -> None:
        p.add_argument(
            "--bootstrap",
            type=c.bootstrap_arg,
            # A string default goes through `type` too, so a bad variable is a usage error.
            default=env_bootstrap or None,
            required=not env_bootstrap,
            metavar="URL[,URL...]",
            help="broker URLs to find the partition's leader from (env EPOCHLOG_BOOTSTRAP)",
        )
        p.add_argument(
            "--partition", type=c.partition_arg, required=True, help="partition name, e.g. orders-0"
        )
        p.add_argument(
            "--resolve",
            type=c.resolve_arg,
            default=os.environ.get("EPOCHLOG_RESOLVE") or None,
            metavar="HOST=ADDR[,...]",
            help="connect to ADDR for broker name HOST, as curl's --resolve (env EPOCHLOG_RESOLVE)",
        )
        p.add_argument(
            "--timeout-ms", type=c.positive_int, default=30_000, metavar="MS", help=timeout_help
        )
        add_tls_arguments(p, server=False)

    produce = sub.add_parser(
        "produce",
        help="send records to a partition; prints each record's offset as a JSON line",
        description="Send records (the VALUE arguments, else one per line of stdin) to the "
        "partition's leader, with retries across leader changes and without duplicates "
        "(idempotent producer). Prints {partition, offset, leaderEpoch} per record, in order.",
    )
    common(produce, "give up on a record not acknowledged after this long (default 30000)")
    produce.add_argument("values", nargs="*", metavar="VALUE", help="record values")
    produce.add_argument("--acks", choices=["all", "leader", "none"], default="all")
    produce.add_argument("--record-key", default=None, help="key of every record")
    produce.add_argument(
        "--header", type=c.header_arg, action="append", metavar="NAME=VALUE", help="repeatable"
    )
    produce.add_argument("--linger-ms", type=c.non_negative_int, default=5)
    produce.add_argument("--batch-size", type=c.positive_int, default=128 * 1024, metavar="BYTES")
    produce.add_argument("--binary", action="store_true", help="send binary record batches")
    produce.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")
    produce.set_defaults(func=_cmd_produce)

    consume = sub.add_parser(
        "consume",
        help="print a partition's records as JSON lines",
        description="Read committed records (below the high watermark) from the partition's "
        "leader, following leader changes, and print them as JSON lines. Stops at the high "
        "watermark unless --follow.",
    )
    common(consume, "give up when the leader stays unavailable this long (default 30000)")
    consume.add_argument(
        "--from",
        dest="start",
        type=c.start_arg,
        default="earliest",
        metavar="earliest|latest|OFFSET",
        help="where to start (default earliest)",
    )
    consume.add_argument("--max", type=c.positive_int, default=None, help="stop after N records")
    consume.add_argument("--follow", action="store_true", help="keep waiting for new records")
    consume.add_argument("--max-wait-ms", type=c.non_negative_int, default=500, metavar="MS")
    consume.add_argument("--binary", action="store_true", help="fetch binary record batches")
    consume.add_argument("--base64", action="store_true", help="print keys and values as base64")
    consume.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")
    consume.set_defaults(func=_cmd_consume)

    offsets = sub.add_parser(
        "offsets",
        help="print a partition's earliest or latest offset, or the offset at a time",
        description="ListOffsets: the earliest offset, the latest (the high watermark), or the "
        "first offset whose record time is at or after MS (ms since the epoch).",
    )
    common(offsets, "give up when no leader answers within this long (default 30000)")
    offsets.add_argument(
        "--at",
        type=c.at_arg,
        default="latest",
        metavar="earliest|latest|MS",
        help="default latest",
    )
    offsets.set_defaults(func=_cmd_offsets)

    trim = sub.add_parser(
        "delete-records",
        help="delete a partition's records below an offset (moves its log start offset)",
        description="DeleteRecords, as Kafka's kafka-delete-records: every record below "
        "OFFSET is deleted on every replica and the partition's log start offset moves there. "
        "Only committed records can go (OFFSET at most the high watermark); an OFFSET below "
        "the log start changes nothing. Prints {partition, logStartOffset, leaderEpoch}.",
    )
    common(trim, "give up when no leader answers within this long (default 30000)")
    trim.add_argument(
        "--before",
        type=c.before_arg,
        required=True,
        metavar="OFFSET|hw",
        help="delete the records below OFFSET; hw: below the high watermark",
    )
    trim.set_defaults(func=_cmd_delete_records)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="epochlog",
        description="epochlog: a replicated, partitioned log that does not lose acknowledged data",
    )
    parser.add_argument("--version", action="version", version=f"epochlog {__version__}")
    parser.add_argument("--log-level", default=None, help="debug, info, warning, error")
    parser.add_argument("--log-format", default=None, choices=["logfmt", "json"])
    sub = parser.add_subparsers(dest="command", required=True)

    access = sub.add_parser("access", help="make entries of the access policy")
    access_sub = access.add_subparsers(dest="access_command", required=True)
    scram = access_sub.add_parser(
        "scram",
        help="a SASL/SCRAM credential for Kafka clients, from a password on stdin",
        description="Print the access policy's `scram` entry (JSON) for a user whose "
        "password is read from standard input: salt, iterations and the keys a broker "
        "checks a SCRAM exchange against, never the password (as Kafka's "
        "kafka-configs --add-config SCRAM-SHA-512=[password=...] stores it).",
    )
    scram.add_argument("--user", required=True, help="the user's name (principal User:NAME)")
    scram.add_argument(
        "--mechanism", default="SCRAM-SHA-512", choices=["SCRAM-SHA-512", "SCRAM-SHA-256"]
    )
    scram.add_argument("--iterations", type=int, default=8192, help="at least 4096")
    scram.set_defaults(func=_cmd_access_scram)

    log_p = sub.add_parser("log", help="inspect partition directories on disk")
    log_sub = log_p.add_subparsers(dest="log_command", required=True)
    check = log_sub.add_parser("check", help="verify every batch of a partition directory")
    check.add_argument("dir")
    check.set_defaults(func=_cmd_log_check)
    dump = log_sub.add_parser("dump", help="print records of a partition directory as JSON lines")
    dump.add_argument("dir")
    dump.add_argument("--offset", type=int, default=0, help="first offset to print")
    dump.add_argument("--max", type=int, default=100, help="at most this many lines")
    dump.add_argument("--batches", action="store_true", help="print batch headers, not records")
    dump.set_defaults(func=_cmd_log_dump)
    repair = log_sub.add_parser(
        "repair",
        help="discard a damaged log from the damage on (on a stopped broker's data directory)",
        description="Cut the log of each damaged partition at its first damaged byte, so "
        "that the broker starts the replica again and fetches the rest from the leader. "
        "Prints what it discards (file, offsets, record count) and asks first.",
    )
    repair.add_argument("dir", help="a broker's data directory, or one partition directory")
    repair.add_argument("--partition", default=None, help="only this partition of DIR")
    repair.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    repair.set_defaults(func=_cmd_log_repair)

    from epochlog_tools.devcluster.local_cli import add_dev_commands, add_timing_arguments

    demo = sub.add_parser(
        "demo",
        help="end to end: produce with acks=all, SIGKILL a leader, read everything back",
        description="Start the embedded cluster in a fresh state directory, create a topic "
        "(replicationFactor 3), produce with acks=all while the leader of one partition is "
        "SIGKILLed and the Spark order pipeline reads the topic, read everything back and "
        "check that no acknowledged record was lost or doubled and that the job's outputs "
        "equal the log (exit 1 if not), then stop the cluster. --storage runs the storage "
        "walkthrough instead (appends, a torn write, simulated power losses).",
    )
    demo.add_argument("--state-dir", default=None, help="where to keep the demo's data")
    demo.add_argument("--storage", action="store_true", help="run the storage walkthrough instead")
    demo.add_argument(
        "--duration",
        type=float,
        default=3.0,
        metavar="S",
        help="seconds to produce before and after the failover (default 3)",
    )
    demo.add_argument(
        "--min-records",
        type=int,
        default=0,
        metavar="N",
        help="produce before and after the failover also until N more records were "
        "acknowledged (on a slow machine, --duration alone may give few)",
    )
    demo.add_argument(
        "--keep", action="store_true", help="keep the state directory (logs, data) afterwards"
    )
    demo.add_argument(
        "--images",
        action="store_true",
        help="run the brokers from the built broker image (`make images`) under podman",
    )
    demo.add_argument(
        "--no-spark",
        dest="spark",
        action="store_false",
        help="leave out the Spark act (it is left out anyway without pyspark or Java)",
    )
    add_timing_arguments(demo)
    demo.set_defaults(func=_cmd_demo)

    from epochlog_spark.config import build_parser as add_job_arguments

    pipeline_p = sub.add_parser("pipeline", help="the Spark job that consumes order events")
    pipeline_sub = pipeline_p.add_subparsers(dest="pipeline_command", required=True)
    run = pipeline_sub.add_parser(
        "run",
        help="run the order pipeline with Spark in local mode",
        description="Run the order pipeline (revenue per minute and category, an audit copy of "
        "every record, dead letters; Parquet, exactly once) with Spark in local mode in this "
        "process. On a cluster, run pipeline/epochlog_spark/job.py with spark-submit and the "
        "same arguments.",
    )
    add_job_arguments(run)
    run.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    run.set_defaults(func=_cmd_pipeline_run)

    sim = sub.add_parser(
        "sim",
        help="run random fault schedules in the deterministic simulator",
        description="Run the real broker and controller code in a deterministic simulator "
        "through random fault schedules and check every run.",
        epilog=_sim_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sim.add_argument("--seeds", type=int, default=100, help="how many schedules (default 100)")
    sim.add_argument("--start", type=int, default=0, help="first seed (default 0)")
    sim.add_argument(
        "--faults", action="append", help="fault kinds to inject, comma separated (default all)"
    )
    sim.add_argument(
        "--legacy",
        action="append",
        default=[],
        metavar="NAME",
        help="bring back an old behaviour (repeatable); see below",
    )
    sim.add_argument("--jobs", type=int, default=None, help="parallel processes (default: cores)")
    sim.add_argument(
        "--duration-ms", type=int, default=20_000, help="simulated fault phase per schedule"
    )
    sim.add_argument("--verbose", action="store_true", help="one line per seed; full report")
    sim.add_argument(
        "--keep-going", action="store_true", help="run every seed even after a failure"
    )
    sim.set_defaults(func=_cmd_sim)

    env = os.environ.get
    broker = sub.add_parser(
        "broker",
        help="run a broker: store and replicate partitions, serve the HTTP API",
        description="Run a broker process. It heartbeats to the controller, takes the "
        "partitions the controller assigns to it, replicates them from their leaders, and "
        "serves the HTTP API. SIGTERM stops it cleanly: a controlled shutdown first (its "
        "leaderships move to other in-sync replicas while it keeps serving), then flush, "
        "checkpoints, close.",
    )
    broker.add_argument(
        "--id",
        default=env("EPOCHLOG_BROKER_ID"),
        help="broker id, or 'hostname' for the "
        "number that ends the host name (env EPOCHLOG_BROKER_ID)",
    )
    broker.add_argument(
        "--data-dir", default=env("EPOCHLOG_DATA_DIR", "/data"), help="partition logs live here"
    )
    broker.add_argument(
        "--listen", default=env("EPOCHLOG_LISTEN", "0.0.0.0:8080"), help="HOST:PORT to serve on"
    )
    broker.add_argument(
        "--probe-listen",
        default=env("EPOCHLOG_PROBE_LISTEN"),
        metavar="HOST:PORT",
        help="also serve /healthz, /readyz, /metrics and /openapi.json (only those) here",
    )
    broker.add_argument(
        "--kafka-port",
        type=int,
        default=env("EPOCHLOG_KAFKA_PORT"),
        metavar="PORT",
        help="also listen for the Kafka protocol on this port of the --listen host, with "
        "the same TLS and principals (env EPOCHLOG_KAFKA_PORT; default: no Kafka listener)",
    )
    broker.add_argument(
        "--kafka-advertised-address",
        default=env("EPOCHLOG_KAFKA_ADVERTISED_ADDRESS"),
        metavar="HOST:PORT",
        help="where Kafka clients are told to reach this broker (default HOST:KAFKA_PORT)",
    )
    broker.add_argument(
        "--kafka-offsets-partitions",
        type=int,
        default=env("EPOCHLOG_KAFKA_OFFSETS_PARTITIONS", str(DEFAULT_KAFKA_OFFSETS_PARTITIONS)),
        metavar="N",
        help=f"Partitions of {KAFKA_OFFSETS_TOPIC} that hold consumer groups' offsets; the "
        "same on every broker, and those Partitions must exist (default "
        f"{DEFAULT_KAFKA_OFFSETS_PARTITIONS})",
    )
    broker.add_argument(
        "--kafka-offsets-rewrite-records",
        type=int,
        default=env("EPOCHLOG_KAFKA_OFFSETS_REWRITE_RECORDS", "10000"),
        metavar="N",
        help="rewrite an offsets Partition this broker coordinates once it holds more than N "
        "records and twice the offsets it keeps: its offsets appended again, the records "
        "below them deleted, as Kafka compacts __consumer_offsets (default 10000)",
    )
    broker.add_argument(
        "--controller",
        "--controller-url",
        dest="controller",
        action="append",
        default=None,
        help="base URL of the controller's heartbeat endpoint; repeat or comma-separate for "
        "the operator's replicas, a host name may resolve to several (a headless Service): "
        "heartbeats find the acting one (env EPOCHLOG_CONTROLLER_URL)",
    )
    broker.add_argument(
        "--advertised-address",
        default=env("EPOCHLOG_ADVERTISED_ADDRESS"),
        help="base URL others reach this broker at (default http://HOST:PORT)",
    )
    broker.add_argument(
        "--ip",
        type=_ip_address,
        default=env("EPOCHLOG_BROKER_IP"),
        help="IP address peers reach this broker at, reported to the controller so that "
        "peers need not resolve the advertised name (a pod's status.podIP; env "
        "EPOCHLOG_BROKER_IP)",
    )
    broker.add_argument(
        "--peers",
        action="append",
        metavar="ID=URL[,ID=URL...]",
        default=[p for p in [env("EPOCHLOG_PEERS")] if p],
        help="where other brokers are (repeatable; env EPOCHLOG_PEERS)",
    )
    broker.add_argument(
        "--peer-address-template",
        default=env("EPOCHLOG_PEER_ADDRESS_TEMPLATE"),
        metavar="URL",
        help="base URL of broker {id} when --peers does not list it, e.g. "
        "http://epochlog-broker-{id}.epochlog-broker:8080",
    )
    broker.add_argument("--heartbeat-interval-ms", type=int, default=500)
    broker.add_argument("--checkpoint-interval-ms", type=int, default=5000)
    broker.add_argument(
        "--retention-check-interval-ms",
        type=int,
        default=300_000,
        help="how often retention looks for segments to delete (default 300000)",
    )
    broker.add_argument(
        "--reassignment-throttle-bytes",
        type=int,
        default=int(env("EPOCHLOG_REASSIGNMENT_THROTTLE_BYTES") or 0),
        metavar="BYTES_PER_S",
        help="as a leader, serve replicas that a reassignment adds at most this many bytes "
        "per second in all (0: no limit)",
    )
    broker.add_argument(
        "--max-record-bytes", type=int, default=1 << 20, help="largest record accepted"
    )
    broker.add_argument(
        "--max-request-bytes", type=int, default=16 << 20, help="largest request body read"
    )
    broker.add_argument(
        "--request-timeout-ms",
        type=int,
        help="close a connection without a complete request's headers for this long "
        "(half-sent or idle; default 30000)",
    )
    broker.add_argument(
        "--body-timeout-ms",
        type=int,
        help="answer 408 to a request whose body has not arrived this long after its headers "
        "(default 30000)",
    )
    broker.add_argument(
        "--max-connections",
        type=int,
        help="close new connections at once while this many are open (default 1024)",
    )
    broker.add_argument("--segment-bytes", type=int, default=None, help="segment file size")
    broker.add_argument(
        "--controlled-shutdown-timeout-ms",
        type=int,
        default=int(env("EPOCHLOG_CONTROLLED_SHUTDOWN_TIMEOUT_MS", "20000")),
        help="on SIGTERM, first wait up to this long while the controller moves this "
        "broker's leaderships to other ISR members and takes it out of every ISR; keep it "
        "below the pod's termination grace period (0: stop at once; default 20000; env "
        "EPOCHLOG_CONTROLLED_SHUTDOWN_TIMEOUT_MS)",
    )
    broker.add_argument(
        "--rack",
        default=env("EPOCHLOG_RACK", ""),
        help="this broker's rack or zone; the operator puts a partition's replicas on as many "
        "racks as there are (Kafka's broker.rack; env EPOCHLOG_RACK; default none)",
    )
    add_tls_arguments(broker, server=True)
    broker.add_argument(
        "--cert-reload-interval-ms",
        type=int,
        default=5000,
        help="look for a rotated certificate and key, and a changed access policy, this "
        "often (default 5000)",
    )
    broker.add_argument(
        "--service-account-tokens",
        action="store_true",
        default=env("EPOCHLOG_SERVICE_ACCOUNT_TOKENS", "") == "true",
        help="take ServiceAccount tokens (audience epochlog) as bearer tokens, asking the "
        "operator (its --review-tokens) who they stand for; needs --access-policy (env "
        "EPOCHLOG_SERVICE_ACCOUNT_TOKENS)",
    )
    broker.set_defaults(func=_cmd_broker)

    from epochlog_operator.settings import add_arguments as add_operator_arguments

    operator_p = sub.add_parser(
        "operator",
        help="run the operator: Partition resources, heartbeats, elections and ISR",
        description="Run the epochlog operator (kopf): it answers broker heartbeats, fences "
        "silent brokers, elects leaders, tracks the ISR and writes it all to Partition status. "
        "Several replicas may run; kopf peering lets one act at a time.",
    )
    add_operator_arguments(operator_p)
    operator_p.set_defaults(func=_cmd_operator)
    _add_client_commands(sub)
    add_dev_commands(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    configure(args.log_level, args.log_format)
    try:
        rc: int = args.func(args)
    except EpochlogError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return rc


if __name__ == "__main__":
    sys.exit(main())
