"""The Kubernetes object envelopes epochlog reads and writes besides the Partition's own fields.

`epochlog.resources` models what is inside a Partition (spec, status); this
module models the parts every Kubernetes object shares, the core/v1 Event the
operator posts and the core/v1 Secrets it keeps certificates and users' credentials
in, with the same naming rule (`epochlog.protocol.wire`): snake_case in Python, camelCase on the
wire. The operator and the local cluster
build request bodies from these models and read `metadata` through them, so that
no Kubernetes field name is spelled by hand outside the models.

Objects read from the API server carry many more fields than these; unknown
fields are ignored on input, and `None` fields are left out of the bodies we
send (`to_body`).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from epochlog.protocol.wire import WireModel
from epochlog.resources import GROUP, KIND, VERSION

API_VERSION = f"{GROUP}/{VERSION}"
"""apiVersion of the Partition resource."""


class OwnerReference(WireModel):
    """meta/v1 OwnerReference: the object whose deletion collects this one."""

    api_version: str
    kind: str
    name: str
    uid: str
    controller: bool | None = None
    block_owner_deletion: bool | None = None


class ObjectMeta(WireModel):
    """The `metadata` of a Kubernetes object, the fields epochlog uses."""

    name: str | None = None
    generate_name: str | None = None
    namespace: str | None = None
    uid: str | None = None
    resource_version: str | None = None
    generation: int | None = None
    creation_timestamp: str | None = None
    deletion_timestamp: str | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    owner_references: tuple[OwnerReference, ...] | None = None

    def namespaced_name(self) -> tuple[str, str]:
        """(namespace, name) of an object that has both, as every stored Partition does."""
        if not self.name or not self.namespace:
            raise ValueError(f"object without a namespace and name: {self!r}")
        return self.namespace, self.name


class ObjectReference(WireModel):
    """core/v1 ObjectReference: the object an Event is about."""

    api_version: str
    kind: str
    name: str
    namespace: str | None = None
    uid: str | None = None
    resource_version: str | None = None


class EventSource(WireModel):
    component: str


class Event(WireModel):
    """core/v1 Event, as `kubectl describe` lists it under the object."""

    api_version: str = "v1"
    kind: str = "Event"
    metadata: ObjectMeta
    involved_object: ObjectReference
    type: str
    reason: str
    message: str
    source: EventSource
    reporting_component: str
    reporting_instance: str
    first_timestamp: str
    last_timestamp: str
    count: int = 1


class PartitionObject(WireModel):
    """A Partition as a whole object; `spec` and `status` stay raw JSON here, because
    the operator must be able to write a status next to a spec that no longer validates."""

    api_version: str = API_VERSION
    kind: str = KIND
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: dict[str, Any] | None = None
    status: dict[str, Any] | None = None


class PeeringObject(WireModel):
    """kopf's (Cluster)KopfPeering object, created empty; kopf fills it."""

    api_version: str = "kopf.dev/v1"
    kind: str
    metadata: ObjectMeta


class SecretObject(WireModel):
    """core/v1 Secret; `data` values are base64, as the API holds them."""

    api_version: str = "v1"
    kind: str = "Secret"
    metadata: ObjectMeta
    type: str = "Opaque"
    data: dict[str, str] = Field(default_factory=dict)


class TokenReviewSpec(WireModel):
    token: str
    audiences: tuple[str, ...] = ()


class TokenReviewUser(WireModel):
    username: str = ""


class TokenReviewStatus(WireModel):
    authenticated: bool = False
    user: TokenReviewUser = Field(default_factory=TokenReviewUser)
    audiences: tuple[str, ...] = ()
    error: str = ""


class TokenReviewObject(WireModel):
    """authentication.k8s.io/v1 TokenReview: who the API server says a token stands for."""

    api_version: str = "authentication.k8s.io/v1"
    kind: str = "TokenReview"
    spec: TokenReviewSpec
    status: TokenReviewStatus | None = None


class StatusDetails(WireModel):
    """meta/v1 StatusDetails, the part of an API server's error answer (a Status) epochlog
    reads: how long a 429 Too Many Requests asks the client to wait."""

    retry_after_seconds: Any = None
    """An int on a real API server; anything else is not trusted (read as absent)."""


def status_details(body: Any) -> StatusDetails:
    """The `details` of a Status body (empty when it is not one, or has none)."""
    details = body.get("details") if isinstance(body, dict) else None
    return StatusDetails.model_validate(details if isinstance(details, dict) else {})


def to_body(model: WireModel) -> dict[str, Any]:
    """The JSON body for a request: camelCase names, unset (None) fields left out."""
    body: dict[str, Any] = model.model_dump(mode="json", exclude_none=True)
    return body


def metadata_of(obj: dict[str, Any]) -> ObjectMeta:
    """The `metadata` of an object read from the API server (empty when it has none)."""
    return ObjectMeta.model_validate(obj.get("metadata") or {})
