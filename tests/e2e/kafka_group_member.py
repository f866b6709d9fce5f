"""One member of a kafka-python consumer group, as a process a test can SIGKILL.

`python -m tests.e2e.kafka_group_member CONFIG_JSON OUT`: subscribes to the topic in
the config with the group's id, and for every poll writes one line per record
(`time partition offset value`, the time in seconds since the epoch) to OUT, flushed,
then commits the positions synchronously (at-least-once, as an application that
commits after processing). A commit refused
by a rebalance is normal for a group member: the next poll rejoins.
"""

from __future__ import annotations

import json
import logging
import sys
import time

from kafka import KafkaConsumer
from kafka.errors import CommitFailedError, KafkaError

from tests.e2e.kafka_python_resets import install


def main(config_path: str, out_path: str) -> None:
    install()
    # Its group's joins, assignments and commit failures, for the test's report.
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="%(asctime)s %(message)s")
    logging.getLogger("kafka.coordinator").setLevel(logging.INFO)
    with open(config_path) as f:
        config = json.load(f)
    consumer = KafkaConsumer(
        config["topic"],
        bootstrap_servers=config["bootstrap"],
        group_id=config["group"],
        client_id=config["client_id"],
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        session_timeout_ms=6000,
        heartbeat_interval_ms=1000,
        max_poll_records=20,
        **config["tls"],
    )
    with open(out_path, "a", buffering=1) as out:
        while True:
            polled = consumer.poll(timeout_ms=500)
            now = time.time()
            for tp, records in polled.items():
                for r in records:
                    out.write(f"{now:.3f} {tp.partition} {r.offset} {r.value.decode()}\n")
            out.flush()
            if not polled:
                continue
            try:
                consumer.commit()
            except CommitFailedError:
                pass
            except KafkaError as exc:
                print(f"commit failed: {exc!r}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
