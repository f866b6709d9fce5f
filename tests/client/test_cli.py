"""`epochlog produce`, `consume`, `offsets` and `delete-records` as subprocesses against
real brokers, and their answers to bad arguments."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

import pytest

from epochlog.client.errors import DeliveryTimeoutError
from epochlog_tools.cli import main
from tests.broker.cluster import Cluster

pytestmark = pytest.mark.asyncio(loop_scope="package")


@pytest.fixture(autouse=True)
def credentials(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    """The admin's certificate, through the environment variables the commands read."""
    pki = cluster.security.pki
    assert pki is not None
    cert, key = pki.user("admin")
    monkeypatch.setenv("EPOCHLOG_CA", str(pki.cluster_ca))
    monkeypatch.setenv("EPOCHLOG_CERT", str(cert))
    monkeypatch.setenv("EPOCHLOG_KEY", str(key))


async def run(*args: str, stdin: bytes | None = None) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "epochlog_tools.cli",
        *args,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "EPOCHLOG_LOG_LEVEL": "warning"},
    )
    try:
        out, err = await proc.communicate(stdin)
    finally:
        if proc.returncode is None:  # ended by the hang detector: leave no process behind
            proc.kill()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def lines(out: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.splitlines()]


def bootstrap(cluster: Cluster) -> str:
    return ",".join(p.url for p in cluster.brokers.values())


async def test_produce_consume_and_offsets(cluster: Cluster) -> None:
    boot = bootstrap(cluster)
    rc, out, err = await run("produce", "--bootstrap", boot, "--partition", "cli-0", "a", "b")
    assert rc == 0, err
    acked = lines(out)
    assert [(r["partition"], r["offset"]) for r in acked] == [("cli-0", 0), ("cli-0", 1)]
    assert all(r["leaderEpoch"] >= 1 for r in acked)
    assert "2 of 2 records acknowledged (offsets 0..1)" in err

    rc, out, err = await run(
        "produce",
        "--bootstrap",
        boot,
        "--partition",
        "cli-0",
        "--record-key",
        "k",
        "--header",
        "h=1",
        "--binary",
        stdin=b"c\nd\n\ne",
    )
    assert rc == 0, err
    assert [r["offset"] for r in lines(out)] == [2, 3, 4, 5]

    rc, out, err = await run("consume", "--bootstrap", boot, "--partition", "cli-0")
    assert rc == 0, err
    records = lines(out)
    assert [(r["offset"], r["value"]) for r in records] == [
        (0, "a"),
        (1, "b"),
        (2, "c"),
        (3, "d"),
        (4, ""),
        (5, "e"),
    ]
    assert records[2]["key"] == "k"
    assert records[2]["headers"] == {"h": "1"}
    assert records[0]["key"] is None
    assert "6 records (offsets 0..5)" in err

    rc, out, err = await run(
        "consume", "--bootstrap", boot, "--partition", "cli-0", "--from", "2", "--max", "2"
    )
    assert rc == 0, err
    assert [r["value"] for r in lines(out)] == ["c", "d"]

    for at, expected in (("earliest", 0), ("latest", 6)):
        rc, out, err = await run("offsets", "--bootstrap", boot, "--partition", "cli-0", "--at", at)
        assert rc == 0, err
        assert lines(out)[0]["offset"] == expected


async def test_delete_records_moves_the_log_start_and_keeps_what_is_above(
    cluster: Cluster,
) -> None:
    where = ["--bootstrap", bootstrap(cluster), "--partition", "trim-0"]
    rc, out, err = await run("produce", *where, *(f"v{i}" for i in range(6)))
    assert rc == 0, err
    rc, out, err = await run("delete-records", *where, "--before", "4")
    assert rc == 0, err
    [answer] = lines(out)
    assert (answer["partition"], answer["logStartOffset"]) == ("trim-0", 4)
    assert answer["leaderEpoch"] >= 1
    rc, out, _ = await run("offsets", *where, "--at", "earliest")
    assert lines(out)[0]["offset"] == 4
    rc, out, err = await run("consume", *where)
    assert rc == 0, err
    assert [(r["offset"], r["value"]) for r in lines(out)] == [(4, "v4"), (5, "v5")]
    # Below the log start: nothing changes.
    rc, out, err = await run("delete-records", *where, "--before", "1")
    assert (rc, lines(out)[0]["logStartOffset"]) == (0, 4), err
    # Above the high watermark: refused, nothing deleted.
    rc, out, err = await run("delete-records", *where, "--before", "7", "--timeout-ms", "3000")
    assert (rc, out) == (1, "")
    assert "cannot delete records before 7: the high watermark is 6" in err, err
    rc, out, err = await run("delete-records", *where, "--before", "hw")
    assert rc == 0, err
    assert lines(out)[0]["logStartOffset"] == 6
    rc, out, _ = await run("offsets", *where, "--at", "earliest")
    assert lines(out)[0]["offset"] == 6


async def test_consume_follow_waits_for_new_records(cluster: Cluster) -> None:
    boot = bootstrap(cluster)
    env_boot = ["--bootstrap", boot, "--partition", "cli-0"]
    rc, out, _ = await run("offsets", *env_boot, "--at", "earliest")
    assert lines(out)[0]["offset"] == 0
    rc, out, _ = await run("offsets", *env_boot)
    latest = lines(out)[0]["offset"]
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        *("-m", "epochlog_tools.cli", "consume", *env_boot, "--from", "latest", "--follow"),
        *("--max", "2"),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "EPOCHLOG_LOG_LEVEL": "warning"},
    )
    try:
        # The consumer says where it starts once it resolved "latest"; records produced
        # after that line are its to read.
        assert proc.stderr is not None
        said = (await proc.stderr.readline()).decode()
        assert said == f"consume cli-0: following from offset {latest}\n", said
        assert proc.returncode is None
        rc, _, err = await run("produce", *env_boot, "f1", "f2")
        assert rc == 0, err
        out_b, err_b = await proc.communicate()
    finally:
        if proc.returncode is None:  # ended by the hang detector: leave no process behind
            proc.kill()
    assert proc.returncode == 0, err_b.decode()
    got = [(r["offset"], r["value"]) for r in lines(out_b.decode())]
    assert got == [(latest, "f1"), (latest + 1, "f2")]
    # Progress lines may come first on a slow machine; the summary comes last.
    summary = err_b.decode().splitlines()[-1]
    assert summary.startswith("consume cli-0: 2 records"), err_b.decode()


async def test_a_partition_nobody_hosts_is_a_clear_error(cluster: Cluster) -> None:
    rc, out, err = await run(
        "offsets",
        "--bootstrap",
        bootstrap(cluster),
        "--partition",
        "nosuch-0",
        "--timeout-ms",
        "800",
    )
    assert rc == 2
    assert out == ""
    assert "no broker hosts partition 'nosuch-0'" in err


async def test_unreachable_brokers_are_a_clear_error() -> None:
    # Long enough for a refused connection to be seen even on a busy machine; with less,
    # the leader lookup may still be under way when the delivery timeout ends.
    rc, _, err = await run(
        "produce",
        "--bootstrap",
        "http://127.0.0.1:1",
        "--partition",
        "cli-0",
        "--timeout-ms",
        "3000",
        "x",
    )
    assert rc == 1
    assert "not acknowledged within" in err
    assert "Cannot connect" in err


async def test_a_timeout_without_words_is_named() -> None:
    err = DeliveryTimeoutError("orders-0: 1 records not acknowledged within 0.3 s", TimeoutError())
    assert str(err).endswith("(last error: TimeoutError)")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["produce", "--partition", "a-0", "v"], "arguments are required: --bootstrap"),
        (["produce", "--bootstrap", "broker:80", "--partition", "a-0"], "is not http://HOST"),
        (["consume", "--bootstrap", "http://h:1", "--partition", "A_0"], "invalid partition name"),
        (["consume", "--bootstrap", "http://h:1", "--partition", "a-0", "--from", "-3"], "--from"),
        (["consume", "--bootstrap", "http://h:1", "--partition", "a-0", "--max", "0"], "> 0"),
        (["offsets", "--bootstrap", "http://h:1", "--partition", "a-0", "--at", "noon"], "--at"),
        (["produce", "--bootstrap", "http://h:1", "--partition", "a-0", "--acks", "2"], "--acks"),
        (["produce", "--bootstrap", "http://h:1", "--partition", "a-0", "--header", "x"], "NAME="),
        (["delete-records", "--bootstrap", "http://h:1", "--partition", "a-0"], "--before"),
        (
            ["delete-records", "--bootstrap", "http://h:1", "--partition", "a-0", "--before", "-2"],
            "an offset >= 0, or hw",
        ),
    ],
)
async def test_bad_arguments(
    args: list[str],
    message: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("EPOCHLOG_BOOTSTRAP", raising=False)
    with pytest.raises(SystemExit) as info:
        main(args)
    assert info.value.code == 2
    assert message in capsys.readouterr().err
