"""STORAGE_ERROR as a client meets it: retriable, as Kafka's KAFKA_STORAGE_ERROR.

A replica offline after a storage error answers STORAGE_ERROR; the operator moves its
leadership to another in-sync replica, so the client forgets the leader it used and
retries there. The broker's answer and the client's decoding agree on that.
"""

from __future__ import annotations

import json

from epochlog.client.errors import error_from_response, is_retriable
from epochlog.protocol.errors import ReplicaOfflineError, StorageError, error_answer


def test_an_offline_replica_is_answered_503_and_decoded_retriable() -> None:
    offline = ReplicaOfflineError(
        "orders-0: the replica on broker 1 is offline after a storage error", partition="orders-0"
    )
    answer = error_answer(offline, leader=1, leader_epoch=3)
    assert offline.http_status == 503
    assert answer.error.retriable
    body = json.dumps(answer.dump()).encode()
    decoded = error_from_response(offline.http_status, body, "https://broker-1")
    assert isinstance(decoded, StorageError)
    assert is_retriable(decoded)
