"""The broker's on-disk storage: partition logs of CRC-checked record batches.

`PartitionLog` is the entry point. Everything here goes through the
`FileSystem` interface of `fs`, so the same code runs on the real disk
(`OsFileSystem`) and on the crash-simulating layer (`CrashFileSystem`) that
tests and the deterministic simulator use.
"""

from epochlog.protocol.batch import LogRecord, Record, RecordBatch
from epochlog_broker.log.config import LogConfig
from epochlog_broker.log.epochs import EpochEntry, EpochHistory
from epochlog_broker.log.fs import FileSystem, OsFileSystem
from epochlog_broker.log.partition_log import AppendResult, PartitionLog, RecoveryReport
from epochlog_broker.log.simfs import CrashFileSystem

__all__ = [
    "AppendResult",
    "CrashFileSystem",
    "EpochEntry",
    "EpochHistory",
    "FileSystem",
    "LogConfig",
    "LogRecord",
    "OsFileSystem",
    "PartitionLog",
    "Record",
    "RecordBatch",
    "RecoveryReport",
]
