"""An upgrade over statuses with int times: the operator reads them and writes RFC 3339.

Before, `lastCaughtUpTime` and `epochHistory[].time` were ints (ms since the
Unix epoch) in the CRD and in every stored status. The emulator is given that
CRD, stores such a status, then gets the current CRD applied over it, as an
upgrade does: stored objects keep their ints. The operator started then must
decide from that status (epochs go on from it) and its first write turns every
time into RFC 3339 with milliseconds.
"""

from __future__ import annotations

import copy
import re
import time
from typing import Any

from epochlog.crd import CRD_NAME, partition_crd
from epochlog.resources import rfc3339_ms
from tests.operator_e2e.conftest import PARTITIONS, Env
from tests.waiting import until

CRD_PATH = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{CRD_NAME}"
RFC3339_MS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
MS_TIME: dict[str, Any] = {"type": "integer", "minimum": 0}


def _crd_with_ms_times() -> dict[str, Any]:
    """The CRD as it was while the times were ints."""
    crd = copy.deepcopy(partition_crd())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    status = schema["properties"]["status"]["properties"]
    status["lastCaughtUpTime"]["additionalProperties"] = dict(MS_TIME)
    status["epochHistory"]["items"]["properties"]["time"] = dict(MS_TIME)
    return crd


async def _apply_crd(env: Env, crd: dict[str, Any]) -> None:
    current = await env.api.ok("GET", CRD_PATH)
    crd = copy.deepcopy(crd)
    crd["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
    await env.api.ok("PUT", CRD_PATH, crd)


async def test_an_upgraded_operator_goes_on_from_int_times_and_writes_rfc3339(env: Env) -> None:
    await _apply_crd(env, _crd_with_ms_times())
    created = await env.api.create("orders-0", replicas=[1, 2, 3])
    now = int(time.time() * 1000)
    history = [
        {"epoch": 1, "leader": 2, "startOffset": 0, "time": now - 60_000},
        {"epoch": 2, "leader": 1, "startOffset": 5, "time": now - 30_001},
    ]
    legacy = {
        "leader": 1,
        "leaderEpoch": 2,
        "partitionEpoch": 3,
        "isr": [1, 2, 3],
        "replicas": [1, 2, 3],
        "lastCaughtUpTime": {"2": now - 1, "3": now - 2},
        "epochHistory": history,
    }
    body = {**created, "status": legacy}
    written = await env.api.ok("PUT", f"{PARTITIONS}/orders-0/status", body)
    assert written["status"]["epochHistory"][1]["time"] == now - 30_001
    await _apply_crd(env, partition_crd())
    stored = await env.api.get("orders-0")
    assert stored is not None
    assert stored["status"]["lastCaughtUpTime"] == {"2": now - 1, "3": now - 2}

    op = await env.operator("--standalone")
    async with env.cluster([1, 2, 3]):

        async def rewritten() -> dict[str, Any] | None:
            obj = await env.api.get("orders-0")
            status = (obj or {}).get("status") or {}
            times = [e["time"] for e in status.get("epochHistory", [])]
            times += list((status.get("lastCaughtUpTime") or {}).values())
            if times and all(isinstance(t, str) for t in times):
                return status
            return None

        status = await until(rewritten, "a status write with RFC 3339 times", 10)
        assert status is not None
    # The elections recorded before keep their times, now as RFC 3339 with milliseconds.
    assert status["epochHistory"][:2] == [{**e, "time": rfc3339_ms(e["time"])} for e in history]
    for t in [e["time"] for e in status["epochHistory"]] + list(
        status["lastCaughtUpTime"].values()
    ):
        assert RFC3339_MS.match(t), t
    assert status["leaderEpoch"] >= 2
    assert status["partitionEpoch"] >= 3
    assert "cannot decide partition" not in op.log.read_text()
