"""Which failed queries the job starts again (`epochlog_spark.job.restartable`)."""

from __future__ import annotations

from epochlog_spark.job import MAX_RESTARTS, WORKER_START_FAILURE, restartable
from epochlog_spark.progress import ran_a_batch

# What Spark 4 says when the worker that plans a Python data source's batches did not
# connect back within its fixed 10 s (seen on a driver at load average 10 on 2 cores).
WORKER_TIMEOUT = (
    "[STREAM_FAILED] Query [id = 3d47, runId = 9a1c] terminated with exception: "
    "Python worker failed to connect back. SQLSTATE: XXKST"
)


def test_a_worker_that_did_not_start_in_time_is_restarted_a_few_times() -> None:
    assert WORKER_START_FAILURE in WORKER_TIMEOUT
    assert all(restartable(WORKER_TIMEOUT, n) for n in range(MAX_RESTARTS))
    assert not restartable(WORKER_TIMEOUT, MAX_RESTARTS)


def test_any_other_failure_stands() -> None:
    for failure in (
        "epochlog source: OFFSET_OUT_OF_RANGE on orders-0 and failOnDataLoss is true",
        "[STREAM_FAILED] Query terminated with exception: Connection refused",
        "",
    ):
        assert not restartable(failure, 0), failure


# Spark 4's StreamingQueryProgress.durationMs for a trigger that ran a batch, and for one
# that found no new data (only the offsets were asked for).
RAN = {
    "batchId": 3,
    "numInputRows": 120,
    "durationMs": {
        "addBatch": 812,
        "commitOffsets": 31,
        "getBatch": 0,
        "latestOffset": 44,
        "queryPlanning": 19,
        "triggerExecution": 951,
        "walCommit": 29,
    },
}
IDLE = {"batchId": 4, "numInputRows": 0, "durationMs": {"latestOffset": 41, "triggerExecution": 41}}


def test_a_query_that_ran_a_batch_since_its_restart_starts_a_new_row_of_restarts() -> None:
    assert ran_a_batch([IDLE, RAN, IDLE])
    assert not ran_a_batch([IDLE, IDLE])
    assert not ran_a_batch([])
