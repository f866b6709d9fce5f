"""The epochlog client: producers, consumers and ListOffsets over the brokers' HTTP API.

- `client`: `Client`, the shared core (HTTP session, leader cache, retries,
  `list_offsets`);
- `producer`: `Producer`, batching, acks, retries and idempotence;
- `consumer`: `Consumer`, reads one partition up to the high watermark and
  never goes backwards; a log truncated under it (an unclean election) is found
  through leader epochs (`divergence`, KIP-320) and raised as `LogTruncationError`;
- `sync`: blocking `SyncClient`, `SyncProducer`, `SyncConsumer` for scripts;
- `metadata`: leader discovery and the leader cache;
- `records`, `transport`, `errors`: what travels, how, and what can go wrong.

Broker errors come back as the typed `epochlog.protocol.errors` classes
(`ERRORS_BY_CODE`); the client's own are in `epochlog.client.errors`.
"""

from epochlog.client.client import EARLIEST, LATEST, Client
from epochlog.client.consumer import Consumer
from epochlog.client.errors import (
    BrokerUnreachableError,
    CertificateRefusedError,
    ClientError,
    DeliveryTimeoutError,
    LogTruncationError,
    NoSuchPartitionError,
    OffsetsWentBackError,
    ProducerClosedError,
    RetriesExhaustedError,
    TlsHandshakeError,
)
from epochlog.client.producer import Producer
from epochlog.client.records import ConsumerRecord, OffsetAndEpoch, RecordMetadata, TopicPartition
from epochlog.client.sync import SyncClient, SyncConsumer, SyncProducer
from epochlog.security.options import Credentials

__all__ = [
    "EARLIEST",
    "LATEST",
    "BrokerUnreachableError",
    "CertificateRefusedError",
    "Client",
    "ClientError",
    "Consumer",
    "ConsumerRecord",
    "Credentials",
    "DeliveryTimeoutError",
    "LogTruncationError",
    "NoSuchPartitionError",
    "OffsetAndEpoch",
    "OffsetsWentBackError",
    "Producer",
    "ProducerClosedError",
    "RecordMetadata",
    "RetriesExhaustedError",
    "SyncClient",
    "SyncConsumer",
    "SyncProducer",
    "TlsHandshakeError",
    "TopicPartition",
]
