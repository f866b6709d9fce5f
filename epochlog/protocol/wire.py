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
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

NonNegativeInt = Annotated[int, Field(strict=True, ge=0)]
"""Offsets, epochs, counts and times in ms since the Unix epoch."""

PositiveInt = Annotated[int, Field(strict=True, ge=1)]

BrokerId = Annotated[int, Field(strict=True, ge=0)]
"""A broker's id; replicas of a partition are named by the id of the broker holding them."""

BrokerKey = Annotated[int, Field(ge=0)]
"""A broker id used as a map key: a string of digits on the wire, an int in Python."""


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
