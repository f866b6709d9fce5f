"""The source's options (`epochlog_spark.options`): Kafka's names and defaults, and a
message naming the option for each mistake."""

from __future__ import annotations

import pytest

from epochlog_spark.options import (
    EARLIEST_OFFSET,
    OptionError,
    SourceOptions,
    parse_options,
)

BASE = {"bootstrap": "http://127.0.0.1:9092", "topic": "orders"}


def test_defaults_are_those_of_kafkas_source() -> None:
    options = parse_options(BASE, "stream")
    assert options.bootstrap == ("http://127.0.0.1:9092",)
    assert options.topic == ("orders",)
    assert options.starting("stream") == "latest"
    assert options.starting("batch") == "earliest"
    assert options.ending() == "latest"
    assert options.fail_on_data_loss is True
    assert options.include_headers is False
    assert options.max_records_per_trigger is None


def test_names_are_case_insensitive_and_kafkas_alias_is_accepted() -> None:
    options = parse_options(
        BASE
        | {
            "STARTINGOFFSETS": "earliest",
            "maxOffsetsPerTrigger": "500",
            "failondataloss": "False",
            "minPartitions": "4",
            "includeHeaders": "true",
        },
        "stream",
    )
    assert options == SourceOptions(
        bootstrap=("http://127.0.0.1:9092",),
        topic=("orders",),
        starting_offsets="earliest",
        max_records_per_trigger=500,
        fail_on_data_loss=False,
        min_partitions=4,
        include_headers=True,
    )


def test_offsets_json_per_partition() -> None:
    options = parse_options(BASE | {"startingOffsets": '{"orders": {"0": 23, "1": -2}}'}, None)
    assert options.starting_offsets == {("orders", 0): 23, ("orders", 1): EARLIEST_OFFSET}


def test_explicit_partitions_by_name() -> None:
    options = parse_options(
        {"bootstrap": "http://127.0.0.1:9092", "partitions": "orders-0, orders-3,orders-0"}, None
    )
    assert options.partitions == ("orders-0", "orders-3")


@pytest.mark.parametrize(
    ("given", "mode", "named"),
    [
        ({"topic": "orders"}, None, "option bootstrap: is required"),
        ({"bootstrap": "http://h:1"}, None, "option topic: give exactly one"),
        (BASE | {"partitions": "orders-0"}, None, "option topic: give exactly one"),
        (
            BASE | {"startingOfsets": "earliest"},
            None,
            "startingOfsets: unknown option; did you mean startingOffsets",
        ),
        (
            BASE | {"startingOffsets": "{oops"},
            None,
            "option startingOffsets: is not earliest, latest or JSON",
        ),
        (
            BASE | {"startingOffsets": '{"orders": {"0": -3}}'},
            None,
            "startingOffsets: orders/0: -3",
        ),
        (
            BASE | {"startingOffsets": '{"Orders": {"0": 1}}'},
            None,
            "startingOffsets: invalid topic",
        ),
        (BASE | {"startingOffsets": "[1]"}, None, "startingOffsets: must be a JSON object"),
        (BASE | {"endingOffsets": "earliest"}, None, "endingOffsets: earliest is not allowed"),
        (BASE | {"endingOffsets": "latest"}, "stream", "endingOffsets: is for batch queries"),
        (BASE | {"startingOffsets": "latest"}, "batch", "startingOffsets: latest is not allowed"),
        (BASE | {"maxRecordsPerTrigger": "10"}, "batch", "maxRecordsPerTrigger: is for streaming"),
        (BASE | {"maxRecordsPerTrigger": "0"}, None, "maxRecordsPerTrigger: must be at least 1"),
        (BASE | {"minPartitions": "many"}, None, "minPartitions: 'many' is not an integer"),
        (BASE | {"failOnDataLoss": "yes"}, None, "failOnDataLoss: must be true or false"),
        (BASE | {"maxOffsetsPerTrigger": "1", "maxRecordsPerTrigger": "2"}, None, "given twice"),
        (BASE | {"bootstrap": "ftp://h:1"}, None, "option bootstrap: "),
        ({"bootstrap": "http://h:1", "topic": "Orders"}, None, "option topic: invalid topic"),
        ({"bootstrap": "http://h:1", "topic": " , "}, None, "option topic: is empty"),
        ({"bootstrap": "http://h:1", "partitions": "a/b"}, None, "option partitions: "),
    ],
)
def test_a_bad_option_is_named(given: dict[str, str], mode: str | None, named: str) -> None:
    with pytest.raises(OptionError, match=named.replace("{", r"\{").replace("[", r"\[")):
        parse_options(given, mode)  # type: ignore[arg-type]


def test_spark_path_option_is_ignored() -> None:
    assert parse_options(BASE | {"path": "x"}, None) == parse_options(BASE, None)
