"""A Kafka client run in a pod of the test cluster: kafka-python (nobody here wrote it),
shipped to the pod as a zip beside this file, reaching the brokers as users' pods do:
bootstrap through the client Service's Kafka port, then each broker at the address it
advertises, over TLS with a user certificate from the clients CA.

    python kafka_pod_client.py BOOTSTRAP TOPIC PARTITIONS RECORDS GROUP PREFIX

1. An idempotent acks=all producer writes RECORDS records `PREFIX-<n>` round robin over
   the topic's PARTITIONS partitions; each acknowledgement is printed as
   `["ack", partition, offset, value]`.
2. Every committed offset the group GROUP has is printed (`["committed_before", ...]`),
   as a new member of the group finds it.
3. A consumer in GROUP reads from its committed offsets (the earliest where it has none)
   until it has every record this run wrote, printing each as `["read", partition,
   offset, value]`, commits, and prints what is committed then (`["committed", ...]`).

Nothing here judges: the test reads the printed lines.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from kafka import KafkaConsumer, KafkaProducer, TopicPartition

USER = "/etc/epochlog/user"
HANG_S = 600.0
"""How long the consumer polls for the records before giving up: a hang detector."""


def say(*fields: Any) -> None:
    print(json.dumps(list(fields)), flush=True)


def main(
    bootstrap: str, topic: str, partitions: int, records: int, group: str, prefix: str
) -> None:
    tls = {
        "security_protocol": "SSL",
        "ssl_cafile": f"{USER}/ca.crt",
        "ssl_certfile": f"{USER}/tls.crt",
        "ssl_keyfile": f"{USER}/tls.key",
    }
    producer = KafkaProducer(
        bootstrap_servers=[bootstrap], acks="all", enable_idempotence=True, **tls
    )
    sent = [
        (value, producer.send(topic, value=value.encode(), partition=n % partitions))
        for n in range(records)
        for value in [f"{prefix}-{n}"]
    ]
    for value, future in sent:
        md = future.get(timeout=HANG_S)
        say("ack", md.partition, md.offset, value)
    producer.close()

    parts = [TopicPartition(topic, p) for p in range(partitions)]
    consumer = KafkaConsumer(
        bootstrap_servers=[bootstrap],
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        **tls,
    )
    for tp in parts:
        say("committed_before", tp.partition, consumer.committed(tp))
    consumer.subscribe([topic])
    wanted = {value for value, _ in sent}
    deadline = time.monotonic() + HANG_S
    while wanted and time.monotonic() < deadline:
        for tp, batch in consumer.poll(timeout_ms=1000).items():
            for record in batch:
                value = record.value.decode()
                wanted.discard(value)
                say("read", tp.partition, record.offset, value)
    consumer.commit()
    for tp in parts:
        say("committed", tp.partition, consumer.committed(tp))
    consumer.close()
    say("missing", sorted(wanted))


if __name__ == "__main__":
    bootstrap, topic, partitions, records, group, prefix = sys.argv[1:7]
    main(bootstrap, topic, int(partitions), int(records), group, prefix)
