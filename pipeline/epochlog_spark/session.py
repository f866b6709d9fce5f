"""A SparkSession for running the source and the job in this process (local mode).

`local_session` starts Spark in local mode with what this library needs: the
Python workers run the interpreter that runs this code (so they import the
same epochlog and pyarrow), times in UTC, no web UI, few shuffle partitions,
and the `epochlog` format registered. On a cluster, `spark-submit` builds the
session and the job registers the format itself (`epochlog_spark.job`).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence

from pyspark.sql import SparkSession

from epochlog_spark.source import register

SHORT_RUN_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
"""JVM options for a run of a minute or two (the demo, tests): the client compiler alone
and one GC thread spend less CPU than the JIT's top tier would win back in that time."""


def local_session(
    master: str = "local[2]",
    app_name: str = "epochlog",
    *,
    shuffle_partitions: int = 2,
    log_level: str = "WARN",
    worker_env: Mapping[str, str] | None = None,
    java_options: str = "",
    jars: Sequence[str] = (),
) -> SparkSession:
    """A local session; `worker_env` is added to the environment of Spark's Python workers
    (the JVM started here hands its own environment to them), not to this process's.
    `java_options` go to the JVM and `jars` on its class path (`spark.jars`: other data
    sources, such as Spark's own Kafka source), both taken only by the JVM this call
    starts (none runs yet)."""
    # Workers are started by the JVM from these variables; the driver's own interpreter
    # is the one with epochlog installed.
    env = {"PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    env.update(worker_env or {})
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update({k: v for k, v in env.items() if saved[k] is None or k in (worker_env or {})})
    try:
        builder = (
            SparkSession.builder.master(master)
            .appName(app_name)
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.session.timeZone", "UTC")
            .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
            .config("spark.driver.extraJavaOptions", f"-Duser.timezone=UTC {java_options}".strip())
        )
        if jars:
            builder = builder.config("spark.jars", ",".join(jars))
        spark = builder.getOrCreate()
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    spark.sparkContext.setLogLevel(log_level)
    register(spark)
    return spark
