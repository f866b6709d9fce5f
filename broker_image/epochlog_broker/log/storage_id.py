"""The data directory's storage id: which disk a broker's replicas live on.

A broker keeps its partitions in one data directory. The directory is named by
a storage id, a UUID written once, atomically, when the directory is first used
(`meta.properties`, as Kafka's directory id in its meta.properties). The id
outlives broker restarts and is gone with the disk: a broker that comes back
under the same broker id but with another storage id lost its data, and the
controller treats each of its replicas as a new one (out of the ISR, never
elected, never counted, until it has caught up as a follower).

The file has the checkpoint files' shape and CRC line:

    epochlog-meta v1
    1
    storage-id 5f0c8a52-77c3-4c31-9a0e-5d1f1c8b2f4e
    crc32 1a2b3c4d

A damaged file stops the broker with a `StorageIdError` naming the file: a new
id would make every replica on the disk a new one, and keeping the old data
under an id nobody can check is not safe either; an operator decides (docs/concepts/state.md,
"Storage identity"). A directory written before storage ids existed
has no file and gets a new id on its first start.
"""

from __future__ import annotations

import posixpath
import uuid
from collections.abc import Callable
from typing import Final

from epochlog_broker.log.checkpoints import CheckpointError, _parse, _render, atomic_write
from epochlog_broker.log.fs import FileSystem, read_all

META_FILE: Final = "meta.properties"
_KIND: Final = "meta"


class StorageIdError(CheckpointError):
    """The data directory's id file is damaged: the broker must not start on it."""


def new_storage_id() -> str:
    return str(uuid.uuid4())


def load_or_format(
    fs: FileSystem, data_dir: str, make_id: Callable[[], str] = new_storage_id
) -> tuple[str, bool]:
    """(storage id of `data_dir`, whether it was created now)."""
    path = posixpath.join(data_dir, META_FILE)
    if fs.exists(path):
        return read_storage_id(fs, path), False
    storage_id = make_id()
    atomic_write(fs, path, _render(_KIND, [f"storage-id {storage_id}"]))
    return storage_id, True


def read_storage_id(fs: FileSystem, path: str) -> str:
    try:
        fields = dict(_parse(_KIND, path, read_all(fs, path)))
    except CheckpointError as exc:
        raise StorageIdError(exc.message, path=path) from None
    value = fields.get("storage-id")
    if value is None:
        raise StorageIdError(f"damaged {path}: no storage-id line", path=path)
    try:
        return str(uuid.UUID(value))
    except ValueError:
        raise StorageIdError(
            f"damaged {path}: storage-id {value[:40]!r} is not a UUID", path=path
        ) from None
