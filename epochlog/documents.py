"""Copies of JSON documents: the objects the API emulator stores, reads back and patches,
and the Partitions the operator keeps as it read them.

Every read and write of the emulator copies an object (a caller must never hold
the stored one), several times per write, and the operator copies every watch
event's object. `copy.deepcopy` walks them in Python and was a sizeable
part of a status write's cost; an orjson round trip copies a JSON document in C.
Values orjson does not take (integers beyond 64 bits, which a request body can
carry before validation refuses it) are copied the slow way.
"""

from __future__ import annotations

import copy
from typing import TypeVar

import orjson

T = TypeVar("T")


def json_copy(value: T) -> T:
    """A deep copy of a JSON document (dicts with string keys, lists, scalars)."""
    try:
        copied: T = orjson.loads(orjson.dumps(value))
    except TypeError:
        return copy.deepcopy(value)
    return copied
