"""API errors of the emulator, rendered as Kubernetes `Status` objects.

Clients (kubectl, kopf, the kubernetes client) decide what to do from the HTTP
code and `reason` of a `Status`, and show its `message`; both follow what a real
API server sends, e.g. `409 Conflict` for a stale resourceVersion and
`422 Invalid` with one cause per offending field.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from epochlog_tools.kubeapi.registry import ResourceType


class ErrorKind(enum.Enum):
    """Kinds of field errors, as Kubernetes names them in messages and in causes."""

    INVALID = ("Invalid value", "FieldValueInvalid")
    TYPE_INVALID = ("Invalid value", "FieldValueTypeInvalid")
    REQUIRED = ("Required value", "FieldValueRequired")
    NOT_SUPPORTED = ("Unsupported value", "FieldValueNotSupported")
    DUPLICATE = ("Duplicate value", "FieldValueDuplicate")
    TOO_MANY = ("Too many", "FieldValueTooMany")
    TOO_LONG = ("Too long", "FieldValueTooLong")
    FORBIDDEN = ("Forbidden", "FieldValueForbidden")

    @property
    def label(self) -> str:
        return self.value[0]

    @property
    def reason(self) -> str:
        return self.value[1]


class _NoValue:
    def __repr__(self) -> str:
        return "<no value>"


NO_VALUE: Final = _NoValue()


def go_value(value: Any) -> str:
    """A value the way Kubernetes prints it in field errors (JSON-ish, types for objects)."""
    if isinstance(value, dict):
        return '"object"'
    if isinstance(value, list):
        return '"array"'
    return json.dumps(value)


@dataclass(frozen=True)
class FieldError:
    """One invalid field: `spec.minInsyncReplicas: Invalid value: ...: detail`."""

    path: str
    kind: ErrorKind
    value: Any = NO_VALUE
    detail: str = ""

    def __str__(self) -> str:
        text = f"{self.path}: {self.kind.label}"
        if self.value is not NO_VALUE:
            text += f": {go_value(self.value)}"
        if self.detail:
            text += f": {self.detail}"
        return text

    def cause(self) -> dict[str, str]:
        body = str(self)[len(self.path) + 2 :]
        return {"reason": self.kind.reason, "message": body, "field": self.path}


@dataclass
class ApiError(Exception):
    """An error answered as a `Status` with this HTTP code and reason."""

    code: int
    reason: str
    message: str
    details: dict[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        return f"{self.code} {self.reason}: {self.message}"

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details:
            body["details"] = self.details
        return body


def _details(rt: ResourceType, name: str | None) -> dict[str, Any]:
    # As the API server's StatusDetails: name, group and kind, each omitted when empty.
    details: dict[str, Any] = {"name": name} if name else {}
    if rt.group:
        details["group"] = rt.group
    details["kind"] = rt.plural
    return details


def not_found(rt: ResourceType, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{rt.qualified} "{name}" not found', _details(rt, name))


def no_such_resource() -> ApiError:
    return ApiError(404, "NotFound", "the server could not find the requested resource")


def already_exists(rt: ResourceType, name: str) -> ApiError:
    return ApiError(
        409, "AlreadyExists", f'{rt.qualified} "{name}" already exists', _details(rt, name)
    )


def conflict(rt: ResourceType, name: str, why: str | None = None) -> ApiError:
    why = why or (
        "the object has been modified; please apply your changes to the latest version "
        "and try again"
    )
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {rt.qualified} "{name}": {why}',
        _details(rt, name),
    )


def invalid(rt: ResourceType, name: str, errors: list[FieldError]) -> ApiError:
    what = f'{rt.kind}.{rt.group} "{name}"' if rt.group else f'{rt.kind} "{name}"'
    listed = str(errors[0]) if len(errors) == 1 else "[" + ", ".join(map(str, errors)) + "]"
    details: dict[str, Any] = {"name": name, "group": rt.group, "kind": rt.kind}
    if not rt.group:
        del details["group"]
    details["causes"] = [e.cause() for e in errors]
    return ApiError(422, "Invalid", f"{what} is invalid: {listed}", details)


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def unprocessable(message: str) -> ApiError:
    """A patch that cannot be applied (e.g. a failed JSON-patch `test`), as the API server says."""
    return ApiError(422, "Invalid", message)


def expired(message: str) -> ApiError:
    return ApiError(410, "Expired", message)


def method_not_allowed(message: str) -> ApiError:
    return ApiError(405, "MethodNotAllowed", message)


def unsupported_media_type(content_type: str) -> ApiError:
    return ApiError(
        415,
        "UnsupportedMediaType",
        f"the body of the request was in an unknown format: {content_type}",
    )


def unsupported_patch_type(accepted: Sequence[str]) -> ApiError:
    """A PATCH in a format this resource does not take (strategic merge on a custom resource)."""
    return ApiError(
        415,
        "UnsupportedMediaType",
        "the body of the request was in an unknown format - accepted media types include: "
        + ", ".join(accepted),
    )


def apply_conflict(message: str, causes: list[tuple[str, str]]) -> ApiError:
    """Server-side apply of fields other managers own: `causes` are (field, manager note)."""
    return ApiError(
        409,
        "Conflict",
        message,
        {
            "causes": [
                {"reason": "FieldManagerConflict", "message": note, "field": field}
                for field, note in causes
            ]
        },
    )


def field_manager_required() -> ApiError:
    return ApiError(
        422,
        "Invalid",
        'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required '
        "for apply patch",
        {
            "group": "meta.k8s.io",
            "kind": "PatchOptions",
            "causes": [
                {
                    "reason": "FieldValueRequired",
                    "message": "Required value: is required for apply patch",
                    "field": "fieldManager",
                }
            ],
        },
    )


def forbidden(rt: ResourceType, name: str, why: str) -> ApiError:
    return ApiError(403, "Forbidden", f'{rt.qualified} "{name}" is forbidden: {why}')
