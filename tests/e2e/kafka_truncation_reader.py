"""One Kafka consumer as a process a test can pause (SIGSTOP) across an unclean election:
kafka-python or librdkafka (confluent-kafka), reading one partition from offset 0.

`python -m tests.e2e.kafka_truncation_reader CONFIG_JSON OUT`. The config names the
client (`kafka-python` or `librdkafka`), its offset reset policy (`reset`: kafka-python's
`auto_offset_reset`, librdkafka's `auto.offset.reset`), the bootstrap servers, the
client's TLS settings, the topic and the partition. Each thing the client tells the
application is one JSON line in OUT, flushed at once:

- `{"record": [offset, leader_epoch, value]}`: a record it returned;
- `{"error": {...}}`: an error it raised (kafka-python) or returned (librdkafka) instead,
  with its type or code, its text, and what the client says the position is after it;
- `{"eof": offset}` (librdkafka, `enable.partition.eof`): a fetch at `offset`, the end of
  the partition, came back with nothing;
- `{"position": [offset, leader_epoch]}` (kafka-python): the client moved its position,
  after each fetch it took in, as its own debug log says (it has no public accessor for
  the position's leader epoch, the one it validates and fetches with).

An application whose reset policy resets nothing (kafka-python's `none`, librdkafka's
`error`) has nowhere to read on from after a truncation error: the reader stops there.
Otherwise it reads on until the test ends it.
"""

from __future__ import annotations

import json
import logging
import sys
from typing import IO, Any

NO_RESET = ("none", "error")
POLL_MS = 500
POSITION_UPDATE = "Updating fetch position"
"""The start of kafka-python's debug line for a position update (kafka.consumer.fetcher)."""


def _line(out: IO[str], **what: Any) -> None:
    out.write(json.dumps(what) + "\n")
    out.flush()


class _PositionUpdates(logging.Handler):
    """kafka-python's position updates, from its fetcher's debug log, as position lines."""

    def __init__(self, out: IO[str]) -> None:
        super().__init__(logging.DEBUG)
        self.out = out

    def emit(self, record: logging.LogRecord) -> None:
        if isinstance(record.msg, str) and record.msg.startswith(POSITION_UPDATE):
            _tp, offset, leader_epoch = record.args or (None, None, None)
            _line(self.out, position=[offset, leader_epoch])


def kafka_python(config: dict[str, Any], out: IO[str]) -> None:
    from kafka import KafkaConsumer, TopicPartition
    from kafka.errors import KafkaError, LogTruncationError

    from tests.e2e.kafka_python_resets import install

    install()

    fetcher = logging.getLogger("kafka.consumer.fetcher")
    fetcher.setLevel(logging.DEBUG)
    fetcher.addHandler(_PositionUpdates(out))
    tp = TopicPartition(config["topic"], config["partition"])
    consumer = KafkaConsumer(
        bootstrap_servers=config["bootstrap"],
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset=config["reset"],
        **config["tls"],
    )
    consumer.assign([tp])
    consumer.seek(tp, 0)
    while True:
        try:
            polled = consumer.poll(timeout_ms=POLL_MS)
        except LogTruncationError as exc:
            divergent = {
                f"{p.topic}-{p.partition}": None if o is None else [o.offset, o.leader_epoch]
                for p, o in exc.divergent_offsets.items()
            }
            _line(
                out,
                error={
                    "type": type(exc).__name__,
                    "text": str(exc),
                    "divergent_offsets": divergent,
                    "position": consumer.position(tp),
                },
            )
            if config["reset"] in NO_RESET:
                return
            continue
        except KafkaError as exc:
            _line(out, error={"type": type(exc).__name__, "text": str(exc)})
            continue
        for records in polled.values():
            for r in records:
                _line(out, record=[r.offset, r.leader_epoch, r.value.decode()])


def librdkafka(config: dict[str, Any], out: IO[str]) -> None:
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    truncation = (KafkaError._LOG_TRUNCATION, KafkaError._AUTO_OFFSET_RESET)
    consumer = Consumer(
        {
            **config["tls"],
            "bootstrap.servers": ",".join(config["bootstrap"]),
            "group.id": "kip320-unused",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "auto.offset.reset": config["reset"],
        },
        logger=logging.getLogger("librdkafka"),
    )
    consumer.assign([TopicPartition(config["topic"], config["partition"], 0)])
    while True:
        message = consumer.poll(POLL_MS / 1000)
        if message is None:
            continue
        error = message.error()
        if error is None:
            value = bytes(message.value() or b"").decode()
            _line(out, record=[message.offset(), message.leader_epoch(), value])
            continue
        if error.code() == KafkaError._PARTITION_EOF:
            _line(out, eof=message.offset())
            continue
        (position,) = consumer.position([TopicPartition(config["topic"], config["partition"])])
        _line(
            out,
            error={
                "type": error.name(),
                "code": error.code(),
                "text": error.str(),
                "position": position.offset,
            },
        )
        if error.code() in truncation and config["reset"] in NO_RESET:
            consumer.close()
            return


def main(config_path: str, out_path: str) -> None:
    # The clients' own information and warnings (kafka-python's "Truncation detected"),
    # for the test and its report.
    stderr = logging.StreamHandler(sys.stderr)
    stderr.setLevel(logging.INFO)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", handlers=[stderr])
    with open(config_path) as f:
        config = json.load(f)
    with open(out_path, "a") as out:
        if config["client"] == "kafka-python":
            kafka_python(config, out)
        else:
            librdkafka(config, out)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
