"""The broker's claim on its data directory, and its brokerEpoch.

`DataDirClaim` holds an exclusive `flock` on `<data_dir>/.lock` for the life of
the process, so two brokers can never write the same logs, and keeps
`broker.meta` (`BrokerMeta` as JSON: brokerId, brokerEpoch). Opening refuses a
directory that belongs to another broker id: a volume mounted on the wrong pod
would otherwise be replicated over as if it were this broker's.

`next_epoch()` returns a brokerEpoch larger than every earlier one of this
directory and not below the wall clock in ms, and makes it durable before
returning (temp file, fsync, rename, fsync of the directory). The controller
takes a smaller epoch for a late message from a dead process, so the epoch
must grow across restarts; the clock floor keeps that true even when the
directory was wiped.
"""

from __future__ import annotations

import fcntl
import os
import time

from pydantic import ValidationError

from epochlog.protocol.errors import StorageError
from epochlog.protocol.wire import BrokerId, NonNegativeInt, WireModel, describe_validation_error

LOCK_FILE = ".lock"
META_FILE = "broker.meta"


class BrokerMeta(WireModel):
    """`broker.meta`: the broker the directory belongs to and its last brokerEpoch."""

    broker_id: BrokerId | None = None
    broker_epoch: NonNegativeInt = 0


class DataDirClaim:
    def __init__(self, data_dir: str, broker_id: int) -> None:
        self.data_dir = data_dir
        self.broker_id = broker_id
        self._lock_fd: int | None = None
        self._epoch = 0

    def acquire(self) -> None:
        os.makedirs(self.data_dir, exist_ok=True)
        fd = os.open(os.path.join(self.data_dir, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise StorageError(
                f"data directory {self.data_dir} is in use by another broker process"
            ) from None
        self._lock_fd = fd
        meta = self._read_meta()
        owner = meta.broker_id
        if owner is not None and owner != self.broker_id:
            self.release()
            raise StorageError(
                f"data directory {self.data_dir} belongs to broker {owner}, not {self.broker_id}"
            )
        self._epoch = meta.broker_epoch

    def release(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def _read_meta(self) -> BrokerMeta:
        path = os.path.join(self.data_dir, META_FILE)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return BrokerMeta()
        except OSError as exc:
            raise StorageError(f"cannot read {path}: {exc}") from exc
        try:
            return BrokerMeta.model_validate_json(data)
        except ValidationError as exc:
            raise StorageError(f"{path}: {describe_validation_error(exc)}") from exc

    def next_epoch(self, now_ms: int | None = None) -> int:
        if self._lock_fd is None:
            raise RuntimeError("DataDirClaim.acquire() was not called")
        now = int(time.time() * 1000) if now_ms is None else now_ms
        epoch = max(self._epoch + 1, now)
        body = BrokerMeta(broker_id=self.broker_id, broker_epoch=epoch).model_dump_json().encode()
        path = os.path.join(self.data_dir, META_FILE)
        tmp = path + ".tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, body)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        dfd = os.open(self.data_dir, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
        self._epoch = epoch
        return epoch


def in_use(data_dir: str) -> bool:
    """Whether a broker process holds the claim on `data_dir` right now."""
    path = os.path.join(data_dir, LOCK_FILE)
    if not os.path.exists(path):
        return False
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False
