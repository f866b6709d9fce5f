"""What the API server does to an object on create and update, without I/O.

- Create: the server sets uid, creationTimestamp, generation 1 and a name from
  `generateName`; for a type with a status subresource the status sent is
  dropped (only `/status` writes status).
- Update of the main resource keeps the stored status; update of `/status`
  keeps everything but the status. Server-set metadata (uid, creation time,
  generation, deletion timestamp) cannot be changed by clients.
- `metadata.generation` goes up when anything but metadata and status changes
  (for types without a status subresource: anything but metadata), judged
  after pruning: fields the schema drops are no change.
- The uid of an update's body is a precondition (409 when it is another
  object's); a patch cannot change it (422, immutable). An object being
  deleted takes no new finalizers (422).
- Custom objects are pruned, defaulted and validated against their schema;
  unknown fields fail with strict field validation (kubectl's default) and
  come back as warnings otherwise (kopf's case).
"""

from __future__ import annotations

import base64
import binascii
import re
import secrets
import string
import uuid
from datetime import UTC, datetime
from typing import Any, Final

from epochlog.documents import json_copy
from epochlog_tools.kubeapi import errors
from epochlog_tools.kubeapi.errors import ErrorKind, FieldError
from epochlog_tools.kubeapi.registry import SECRETS, ResourceType

_SERVER_META: Final = (
    "uid",
    "creationTimestamp",
    "generation",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "resourceVersion",
    "namespace",
    "name",
)
_DNS_SUBDOMAIN: Final = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)
_DNS_LABEL: Final = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def rfc3339_at(seconds: float) -> str:
    """A time in seconds since the Unix epoch, as the API server writes times."""
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _normalize_time(value: Any, micro: bool) -> Any:
    """Timestamps as the API server returns them: UTC, `Z`, seconds (or microseconds)."""
    if not isinstance(value, str) or not value:
        return value
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return value
    parsed = parsed.astimezone(UTC) if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    return parsed.strftime("%Y-%m-%dT%H:%M:%S.%fZ" if micro else "%Y-%m-%dT%H:%M:%SZ")


def normalize_event(obj: dict[str, Any]) -> None:
    for key in ("firstTimestamp", "lastTimestamp"):
        if key in obj:
            obj[key] = _normalize_time(obj[key], micro=False)
    if "eventTime" in obj:
        obj["eventTime"] = _normalize_time(obj["eventTime"], micro=True)


def check_identity(rt: ResourceType, obj: Any, namespace: str | None) -> dict[str, Any]:
    """The body must be an object of this kind, in the namespace of the URL."""
    if not isinstance(obj, dict):
        raise errors.bad_request("the body of the request must be a JSON object")
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    if api_version is not None and api_version != rt.api_version:
        raise errors.bad_request(
            f"the API version in the data ({api_version}) does not match the expected API "
            f"version ({rt.api_version})"
        )
    if kind is not None and kind != rt.kind:
        raise errors.bad_request(
            f"the kind in the data ({kind}) does not match the expected kind ({rt.kind})"
        )
    meta = obj.setdefault("metadata", {})
    if not isinstance(meta, dict):
        raise errors.bad_request("metadata must be an object")
    if rt.namespaced:
        if meta.get("namespace") not in (None, "", namespace):
            raise errors.bad_request(
                "the namespace of the provided object does not match the namespace sent on "
                "the request"
            )
        meta["namespace"] = namespace
    else:
        meta.pop("namespace", None)
    # The order a real server answers with: apiVersion, kind, metadata, the rest.
    rest = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata")}
    return {"apiVersion": rt.api_version, "kind": rt.kind, "metadata": meta, **rest}


_BASE64: Final = frozenset(string.ascii_letters + string.digits + "+/=")


def secret_data(obj: dict[str, Any]) -> dict[str, Any]:
    """A core/v1 Secret as the API server stores it: `stringData` merged into `data`
    (base64; a key in both takes the stringData value) and dropped, every `data` value
    base64 (400 BadRequest otherwise: the API server fails to decode the body)."""
    data = obj.get("data") or {}
    string_data = obj.pop("stringData", None) or {}
    name = str(obj.get("metadata", {}).get("name", ""))
    problems = []
    if not isinstance(data, dict) or not isinstance(string_data, dict):
        problems.append(FieldError("data", ErrorKind.INVALID, data, "must map keys to values"))
    else:
        for value in data.values():
            try:
                base64.b64decode(str(value), validate=True)
            except (binascii.Error, ValueError):
                text = str(value)
                at = next((i for i, c in enumerate(text) if c not in _BASE64), len(text))
                raise errors.bad_request(
                    'Secret in version "v1" cannot be handled as a Secret: illegal base64 data '
                    f"at input byte {at}"
                ) from None
        for key, value in string_data.items():
            data[key] = base64.b64encode(str(value).encode()).decode()
    if problems:
        raise errors.invalid(SECRETS, name, problems)
    if data:
        obj["data"] = data
    return obj


def check_immutable_secret(old: dict[str, Any], new: dict[str, Any]) -> None:
    """A Secret marked `immutable: true` keeps its data and the mark (422 Invalid, as
    ValidateSecretUpdate answers); it can only be deleted."""
    if old.get("immutable") is not True:
        return
    name = str(old["metadata"].get("name", ""))
    why = "field is immutable when `immutable` is set"
    problems = []
    if new.get("immutable") is not True:
        problems.append(FieldError("immutable", ErrorKind.FORBIDDEN, detail=why))
    if (new.get("data") or {}) != (old.get("data") or {}):
        problems.append(FieldError("data", ErrorKind.FORBIDDEN, detail=why))
    if problems:
        raise errors.invalid(SECRETS, name, problems)


def _check_metadata(rt: ResourceType, obj: dict[str, Any]) -> list[FieldError]:
    meta = obj["metadata"]
    problems = []
    name = meta.get("name")
    pattern = _DNS_LABEL if rt.plural == "namespaces" else _DNS_SUBDOMAIN
    limit = 63 if rt.plural == "namespaces" else 253
    if not isinstance(name, str) or not name:
        problems.append(
            FieldError(
                "metadata.name", ErrorKind.REQUIRED, detail="name or generateName is required"
            )
        )
    elif len(name) > limit or not pattern.match(name):
        problems.append(
            FieldError(
                "metadata.name",
                ErrorKind.INVALID,
                name,
                "a lowercase RFC 1123 "
                + ("label" if rt.plural == "namespaces" else "subdomain")
                + " must consist of lower case alphanumeric characters, '-' or '.', and must "
                "start and end with an alphanumeric character",
            )
        )
    for field in ("labels", "annotations"):
        values = meta.get(field)
        if values is None:
            continue
        if not isinstance(values, dict) or not all(isinstance(v, str) for v in values.values()):
            problems.append(
                FieldError(
                    f"metadata.{field}", ErrorKind.INVALID, values, "must map strings to strings"
                )
            )
    finalizers = meta.get("finalizers")
    if finalizers is not None and (
        not isinstance(finalizers, list) or not all(isinstance(f, str) for f in finalizers)
    ):
        problems.append(
            FieldError(
                "metadata.finalizers", ErrorKind.INVALID, finalizers, "must be a list of strings"
            )
        )
    return problems


def validate(rt: ResourceType, obj: dict[str, Any], field_validation: str) -> list[str]:
    """Prune, default and validate in place; returns warnings; raises 400/422 on failure."""
    name = str(obj["metadata"].get("name") or "")
    problems = _check_metadata(rt, obj)
    warnings: list[str] = []
    if rt.schema is not None:
        unknown = rt.schema.prune(obj)
        if unknown and field_validation == "Strict":
            listed = ", ".join(f'unknown field "{u}"' for u in unknown)
            raise errors.bad_request(
                f'{rt.kind} in version "{rt.version}" cannot be handled as a {rt.kind}: '
                f"strict decoding error: {listed}"
            )
        if field_validation != "Ignore":
            warnings += [f'unknown field "{u}"' for u in unknown]
        rt.schema.default(obj)
        problems += rt.schema.validate(obj)
    if problems:
        raise errors.invalid(rt, name, problems)
    return warnings


def prepare_create(rt: ResourceType, obj: dict[str, Any], rv: str) -> dict[str, Any]:
    """Server-set fields of a new object (after `check_identity`)."""
    meta = obj["metadata"]
    if not meta.get("name") and meta.get("generateName"):
        alphabet = string.ascii_lowercase + string.digits
        meta["name"] = str(meta["generateName"]) + "".join(
            secrets.choice(alphabet) for _ in range(5)
        )
    for key in ("uid", "deletionTimestamp", "deletionGracePeriodSeconds", "generation"):
        meta.pop(key, None)
    meta["uid"] = str(uuid.uuid4())
    meta["creationTimestamp"] = now_rfc3339()
    meta["resourceVersion"] = rv
    if rt.tracks_generation:
        meta["generation"] = 1
    if rt.has_status and rt.plural != "namespaces":
        obj.pop("status", None)
    if rt.plural == "namespaces":
        obj["spec"] = {"finalizers": ["kubernetes"]}
        obj["status"] = {"phase": "Active"}
    if rt.plural == "events":
        normalize_event(obj)
    return obj


def _content(rt: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
    """What counts for `generation`: all but metadata, and status if it is a subresource."""
    skip = {"metadata", "apiVersion", "kind"} | ({"status"} if rt.has_status else set())
    return {k: v for k, v in obj.items() if k not in skip}


def merge_update(
    rt: ResourceType, old: dict[str, Any], new: dict[str, Any], subresource: str | None
) -> dict[str, Any]:
    """The object after an update with body `new`: kept server fields, status rules, generation."""
    if subresource == "status":
        result = json_copy(old)
        if "status" in new:
            result["status"] = json_copy(new["status"])
        else:
            result.pop("status", None)
        # Field ownership of the status is recorded through the status subresource too.
        if "managedFields" in new["metadata"]:
            result["metadata"]["managedFields"] = json_copy(new["metadata"]["managedFields"])
        return result
    result = json_copy(new)
    meta = result.setdefault("metadata", {})
    for key in _SERVER_META:
        if key in old["metadata"]:
            meta[key] = old["metadata"][key]
        else:
            meta.pop(key, None)
    if rt.has_status:
        if "status" in old:
            result["status"] = json_copy(old["status"])
        else:
            result.pop("status", None)
    if rt.plural == "events":
        normalize_event(result)
    return result


def bump_generation(rt: ResourceType, old: dict[str, Any], obj: dict[str, Any]) -> None:
    """Count a change of the content in `obj`'s generation (after pruning and defaulting)."""
    if rt.tracks_generation and _content(rt, obj) != _content(rt, old):
        obj["metadata"]["generation"] = int(old["metadata"].get("generation", 1)) + 1


def check_uid_precondition(rt: ResourceType, old: dict[str, Any], body: dict[str, Any]) -> None:
    """An update's body that names a uid must name the stored object's (409 otherwise)."""
    sent, stored = body["metadata"].get("uid"), old["metadata"].get("uid")
    if sent and sent != stored:
        raise errors.conflict(
            rt,
            str(old["metadata"].get("name", "")),
            f"Precondition failed: UID in precondition: {sent}, UID in object meta: {stored}",
        )


def check_patched_uid(rt: ResourceType, old: dict[str, Any], patched: dict[str, Any]) -> None:
    """A patch cannot change the uid: ValidateObjectMetaUpdate finds it immutable."""
    sent, stored = patched["metadata"].get("uid"), old["metadata"].get("uid")
    if sent != stored:
        name = str(old["metadata"].get("name", ""))
        value = sent if sent is not None else ""
        raise errors.invalid(
            rt, name, [FieldError("metadata.uid", ErrorKind.INVALID, value, "field is immutable")]
        )


def check_type_meta(rt: ResourceType, body: Any, raw: bytes) -> None:
    """A custom object's body names its kind and apiVersion: the API server decodes it by
    them (400 otherwise, in its words); a built-in kind's may leave them out."""
    if rt.schema is None or not isinstance(body, dict):
        return
    if not body.get("kind"):
        text = raw.decode(errors="replace")
        start = text if len(text) <= 30 else f"{text[:30]} ..."
        raise errors.bad_request(
            f"the object provided is unrecognized (must be of type {rt.kind}): Object 'Kind' "
            f"is missing in '{text}' ({start})"
        )
    if body.get("apiVersion") != rt.api_version:
        raise errors.bad_request(
            f"the API version in the data ({body.get('apiVersion') or ''}) does not match the "
            f"expected API version ({rt.api_version})"
        )


def check_no_new_finalizers(rt: ResourceType, old: dict[str, Any], obj: dict[str, Any]) -> None:
    """An object being deleted may lose finalizers but gain none (422 Forbidden)."""
    if not old["metadata"].get("deletionTimestamp"):
        return
    before = set(old["metadata"].get("finalizers") or [])
    added = sorted(set(obj["metadata"].get("finalizers") or []) - before)
    if added:
        listed = ", ".join(f'"{f}"' for f in added)
        problem = errors.invalid(
            rt,
            str(old["metadata"].get("name", "")),
            [
                FieldError(
                    "metadata.finalizers",
                    ErrorKind.FORBIDDEN,
                    detail="no new finalizers can be added if the object is being deleted, "
                    f"found new finalizers []string{{{listed}}}",
                )
            ],
        )
        if rt.schema is not None:
            # kube-apiserver 1.35 checks a custom object's metadata twice and lists the
            # cause twice (its message once).
            problem.details["causes"] *= 2
        raise problem


def same_object(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Equal but for resourceVersion: such an update changes nothing and is not a write."""
    strip_a, strip_b = json_copy(a), json_copy(b)
    strip_a["metadata"].pop("resourceVersion", None)
    strip_b["metadata"].pop("resourceVersion", None)
    return strip_a == strip_b


def mark_deleted(rt: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
    """Deletion of an object with finalizers: it stays, with a deletionTimestamp."""
    result = json_copy(obj)
    meta = result["metadata"]
    meta["deletionTimestamp"] = now_rfc3339()
    meta["deletionGracePeriodSeconds"] = 0
    if rt.tracks_generation:
        meta["generation"] = int(meta.get("generation", 1)) + 1
    return result
