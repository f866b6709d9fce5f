"""Kubernetes RBAC, as much of it as the chart uses: which request a rule allows.

`access_of` turns one HTTP request to the API server into the attributes the
authorizer judges (verb, API group, resource[/subresource], namespace, name),
as the API server's request-info resolver does: GET is get, list or watch; a
list or watch restricted to one object by `fieldSelector=metadata.name=X` is
judged with that name; a create has no name. `allows` is the RBAC rule match
(resourceNames included). `Grant` is one (verb, group, resource, name) a rule
gives, to find what a role grants that nothing used.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

from epochlog_tools.kubeapi.emulator import parse_route

# Paths every authenticated user may read (the default system:discovery role).
DISCOVERY_PREFIXES = ("/api", "/apis", "/version", "/openapi")


@dataclass(frozen=True, order=True)
class Access:
    verb: str
    group: str
    resource: str
    """`plural` or `plural/subresource`."""
    namespace: str | None
    name: str | None

    def __str__(self) -> str:
        where = f" in {self.namespace}" if self.namespace else " (cluster)"
        name = f" {self.name}" if self.name else ""
        return f"{self.verb} {self.group or 'core'}/{self.resource}{name}{where}"


def access_of(method: str, path: str, query: str) -> Access | None:
    """The authorizer's view of a request; None for discovery (non-resource) paths."""
    route = parse_route(path)
    if route is None:
        assert path.startswith(DISCOVERY_PREFIXES), f"not a resource nor discovery: {path}"
        return None
    params = {k: v[-1] for k, v in parse_qs(query).items()}
    name = route.name
    method = method.upper()
    if method == "GET":
        verb = "watch" if params.get("watch") in ("true", "1") else "get" if name else "list"
        if name is None and verb in ("list", "watch"):
            name = _selected_name(params.get("fieldSelector", ""))
    else:
        verb = {
            "POST": "create",
            "PUT": "update",
            "PATCH": "patch",
            "DELETE": "delete" if name else "deletecollection",
        }[method]
    resource = route.plural + (f"/{route.subresource}" if route.subresource else "")
    return Access(verb, route.group, resource, route.namespace, name if verb != "create" else None)


def _selected_name(selector: str) -> str | None:
    for term in selector.split(","):
        key, sep, value = term.partition("=")
        if sep and key.strip() == "metadata.name":
            return value.strip().lstrip("=")
    return None


def _matches(items: Iterable[str], value: str) -> bool:
    return any(item in ("*", value) for item in items)


def rule_allows(rule: Mapping[str, Any], access: Access) -> bool:
    names = rule.get("resourceNames") or []
    return (
        _matches(rule.get("apiGroups") or [], access.group)
        and _matches(rule.get("resources") or [], access.resource)
        and _matches(rule.get("verbs") or [], access.verb)
        and (not names or (access.name is not None and access.name in names))
    )


@dataclass(frozen=True)
class Role:
    """A Role's rules (in `namespace`) or a ClusterRole's (namespace None: everywhere)."""

    kind: str
    name: str
    namespace: str | None
    rules: tuple[Mapping[str, Any], ...]

    def allows(self, access: Access) -> bool:
        if self.namespace is not None and access.namespace != self.namespace:
            return False
        return any(rule_allows(rule, access) for rule in self.rules)


@dataclass(frozen=True, order=True)
class Grant:
    verb: str
    group: str
    resource: str
    name: str | None

    def used_by(self, access: Access) -> bool:
        return (self.verb, self.group, self.resource) == (
            access.verb,
            access.group,
            access.resource,
        ) and (self.name is None or self.name == access.name)


def grants(role: Role) -> Iterator[Grant]:
    for rule in role.rules:
        for group in rule.get("apiGroups") or []:
            for resource in rule.get("resources") or []:
                for verb in rule.get("verbs") or []:
                    for name in rule.get("resourceNames") or [None]:
                        yield Grant(verb, group, resource, name)


def roles_bound_to(objects: list[dict[str, Any]], account: str, namespace: str) -> list[Role]:
    """The Roles and ClusterRoles that the rendered bindings give ServiceAccount `account`."""
    by_name = {
        (o["kind"], o["metadata"]["name"]): o
        for o in objects
        if o["kind"] in ("Role", "ClusterRole")
    }
    roles = []
    for binding in objects:
        if binding["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        subjects = binding.get("subjects") or []
        if not any(
            s["kind"] == "ServiceAccount" and s["name"] == account and s["namespace"] == namespace
            for s in subjects
        ):
            continue
        ref = binding["roleRef"]
        role = by_name[(ref["kind"], ref["name"])]
        # A RoleBinding grants in its own namespace, whatever role it refers to.
        scope = binding["metadata"]["namespace"] if binding["kind"] == "RoleBinding" else None
        roles.append(
            Role(role["kind"], role["metadata"]["name"], scope, tuple(role.get("rules") or ()))
        )
    return roles
