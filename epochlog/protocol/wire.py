"""The base of every JSON model epochlog exchanges: camelCase on the wire, snake_case in Python.

Resources (`epochlog.resources`) and heartbeats (`epochlog.protocol.heartbeat`) derive from
`WireModel`. One rule for all of them: Python attributes are snake_case and the
JSON name of each field is generated from it with pydantic's `to_camel`
(`leader_epoch` <-> `leaderEpoch`). Models accept either spelling on input and
always dump camelCase, so `model_dump(mode="json")` is exactly what goes into a
Kubernetes object or an HTTP body. JSON objects keyed by broker id have string
keys on the wire ("1") and int keys in Python.

Models are frozen value types. Numbers are strict (a `true` or `"3"` is not an
int) so that a malformed object fails with a message naming the field; map keys
are the one exception, because JSON object keys are always strings. Unknown
fields are ignored so that mixed versions can talk during a rolling upgrade;
models written by people (a Partition spec) forbid them to catch typos.

The integers of the broker's HTTP API have widths (`NonNegInt64`, `NonNegInt32`,
...; "wire widths" below): a value outside its width is refused where it is
parsed, as any other malformed field.
"""

from __future__ import annotations

from typing import Annotated, Any, Final, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

NonNegativeInt = Annotated[int, Field(strict=True, ge=0)]
"""Offsets, epochs, counts and times in ms since the Unix epoch."""

PositiveInt = Annotated[int, Field(strict=True, ge=1)]

BrokerId = Annotated[int, Field(strict=True, ge=0)]
"""A broker's id; replicas of a partition are named by the id of the broker holding them."""

BrokerKey = Annotated[int, Field(ge=0)]
"""A broker id used as a map key: a string of digits on the wire, an int in Python."""

# -- wire widths ---------------------------------------------------------------------------
#
# Every integer of the broker's HTTP API (its bodies, answers and query parameters) has a
# width: the one Kafka gives the same field where there is one (offsets, producer ids,
# brokerEpoch and timestamps int64; leader and partition epochs, broker ids, partition
# indexes, sequences and byte limits int32; producer epochs int16), and what the record
# batch stores it in (`protocol.batch`). A value outside it is an invalid request, refused
# by the model that parses it, not a failure deep in the broker. The OpenAPI document
# shows each width as the field's minimum and maximum.

INT16_MAX: Final = (1 << 15) - 1
INT32_MAX: Final = (1 << 31) - 1
INT64_MIN: Final = -(1 << 63)
INT64_MAX: Final = (1 << 63) - 1

Int64 = Annotated[int, Field(strict=True, ge=INT64_MIN, le=INT64_MAX)]
"""Timestamps (ms since the Unix epoch; Kafka's -1 for none)."""
NonNegInt16 = Annotated[int, Field(strict=True, ge=0, le=INT16_MAX)]
"""Producer epochs."""
NonNegInt32 = Annotated[int, Field(strict=True, ge=0, le=INT32_MAX)]
"""Broker ids, leader and partition epochs, partition indexes, sequences."""
NonNegInt64 = Annotated[int, Field(strict=True, ge=0, le=INT64_MAX)]
"""Offsets, producer ids, brokerEpochs, fetch session ids and counts."""
PositiveInt32 = Annotated[int, Field(strict=True, ge=1, le=INT32_MAX)]
"""Byte limits and timeouts in ms."""


class IntRange(NamedTuple):
    """The integers a query parameter takes (a body's fields say theirs in their types)."""

    minimum: int
    maximum: int

    def schema(self) -> dict[str, Any]:
        """As JSON Schema (and OpenAPI) writes it."""
        return {"type": "integer", "minimum": self.minimum, "maximum": self.maximum}


def wire_name(attribute: str) -> str:
    """The JSON name of a model attribute (`leader_epoch` -> `leaderEpoch`)."""
    return to_camel(attribute)


class WireModel(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
        frozen=True,
        extra="ignore",
    )


def describe_validation_error(exc: ValidationError) -> str:
    """One line per problem, naming the field by its wire name: "records.0.value: Input
    should be ..."."""
    parts = []
    for err in exc.errors(include_url=False)[:5]:
        where = ".".join(str(p) for p in err["loc"])
        parts.append(f"{where}: {err['msg']}" if where else str(err["msg"]))
    more = exc.error_count() - len(parts)
    if more > 0:
        parts.append(f"and {more} more")
    return "; ".join(parts)
