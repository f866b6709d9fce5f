"""From a rendered Helm chart to the pods a kubelet would run: what each container gets.

Pure: takes the manifests (`helm template` output as objects) and returns
`PodPlan`s: for every pod of every StatefulSet, Deployment and (test hook) Pod,
its name and host name, the DNS names that resolve to it (its StatefulSet
name under the governing Service, and the names of every Service that selects
it), its volumes, and per container the image, command, arguments,
environment, mounts, probes and security settings, exactly as the manifests
say. What only exists once the pod runs (Secrets' contents, `$(VAR)` in
arguments) stays a reference here: `expand` and the runner resolve it.

Whatever the embedded cluster cannot run faithfully is refused with a
`ChartError` naming the object, instead of being run some other way: a
Service whose port differs from its pods' port (Service names resolve to the
pods themselves here), an environment source or volume kind it does not know.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

Obj = Mapping[str, Any]

WORKLOADS: Final = frozenset({"StatefulSet", "Deployment", "Pod"})
STORED: Final = frozenset({"Secret", "KopfPeering", "ClusterKopfPeering", "Partition", "Namespace"})
"""Kinds the API emulator keeps: applied as they are."""
NOT_ENFORCED: Final = frozenset(
    {
        "ServiceAccount",
        "Role",
        "RoleBinding",
        "ClusterRole",
        "ClusterRoleBinding",
        "NetworkPolicy",
        "PodDisruptionBudget",
        "Service",
    }
)
"""Kinds the embedded cluster does not keep: Services become DNS names of the pods they
select; RBAC, network policies and disruption budgets are checked by the chart's tests,
not enforced here."""

_VAR: Final = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


class ChartError(Exception):
    """The rendered chart asks for something the embedded cluster cannot run as asked."""


@dataclass(frozen=True)
class SecretFile:
    secret: str
    key: str
    path: str
    """Relative to the volume's mount path."""
    mode: int


@dataclass(frozen=True)
class Volume:
    name: str
    kind: str
    """"claim" (a per-pod data volume that outlives the pod), "empty" (a scratch folder),
    "memory" (a tmpfs), or "secret" (files of Secrets)."""
    files: tuple[SecretFile, ...] = ()
    size_limit: str | None = None


@dataclass(frozen=True)
class Mount:
    volume: str
    path: str
    read_only: bool = False


@dataclass(frozen=True)
class EnvVar:
    name: str
    value: str | None = None
    secret: tuple[str, str] | None = None
    """(Secret name, key) whose value this variable takes when the pod starts."""


@dataclass(frozen=True)
class Probe:
    path: str
    port: int


@dataclass(frozen=True)
class ContainerPlan:
    name: str
    image: str
    command: tuple[str, ...] | None
    """None: the image's entrypoint."""
    args: tuple[str, ...]
    env: tuple[EnvVar, ...]
    mounts: tuple[Mount, ...]
    ports: Mapping[str, int]
    readiness: Probe | None
    liveness: Probe | None
    user: int | None
    group: int | None
    read_only_root: bool
    drop_all_capabilities: bool
    no_new_privileges: bool


@dataclass(frozen=True)
class PodPlan:
    name: str
    namespace: str
    workload: str
    """"StatefulSet/<name>", "Deployment/<name>" or "Pod/<name>"."""
    hostname: str
    labels: Mapping[str, str]
    aliases: tuple[str, ...]
    containers: tuple[ContainerPlan, ...]
    volumes: tuple[Volume, ...]
    service_account_token: bool
    fs_group: int | None
    grace_s: int
    test_hook: bool = False

    def secrets(self) -> set[str]:
        """Secrets the pod cannot start without (its volumes and environment)."""
        out = {f.secret for v in self.volumes for f in v.files}
        out |= {e.secret[0] for c in self.containers for e in c.env if e.secret}
        return out


@dataclass(frozen=True)
class ChartPlan:
    pods: tuple[PodPlan, ...]
    stored: tuple[Obj, ...]
    """Objects to create in the API server on install, in the order rendered."""
    test_objects: tuple[Obj, ...] = ()
    """Objects of `helm test` hooks, created when the tests run."""
    crds: tuple[Obj, ...] = field(default=())


def plan(manifests: Sequence[Obj], *, namespace: str, cluster_domain: str) -> ChartPlan:
    """The pods and stored objects of `manifests` (rendered for `namespace`)."""
    services = [o for o in manifests if o.get("kind") == "Service"]
    pods: list[PodPlan] = []
    stored: list[Obj] = []
    hooks: list[Obj] = []
    crds: list[Obj] = []
    for o in manifests:
        kind = o.get("kind", "")
        if kind in WORKLOADS:
            pods += _pods_of(o, namespace)
        elif kind in STORED:
            (hooks if is_hook(o) else stored).append(o)
        elif kind == "CustomResourceDefinition":
            crds.append(o)
        elif kind not in NOT_ENFORCED:
            raise ChartError(f"{kind} {_name(o)}: the embedded cluster does not run this kind")
    pods = [_with_aliases(p, services, manifests, namespace, cluster_domain) for p in pods]
    return ChartPlan(tuple(pods), tuple(stored), tuple(hooks), tuple(crds))


def cluster_domain(values: Mapping[str, Any]) -> str:
    """The chart's cluster DNS domain (its `clusterDomain` value)."""
    return str(values.get("clusterDomain", "cluster.local"))


def is_hook(o: Obj) -> bool:
    """A Helm hook (made by `helm test`, not by the install)."""
    return "helm.sh/hook" in (o.get("metadata", {}).get("annotations") or {})


def namespace_object(name: str) -> Obj:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


_PLURALS: Final = {
    "Namespace": "namespaces",
    "Secret": "secrets",
    "KopfPeering": "kopfpeerings",
    "ClusterKopfPeering": "clusterkopfpeerings",
    "Partition": "partitions",
}
_CLUSTER_SCOPED: Final = frozenset({"Namespace", "ClusterKopfPeering"})


def collection_path(o: Obj, namespace: str) -> str:
    """The API path an object of a stored kind is created at."""
    kind = o["kind"]
    api = o["apiVersion"]
    group = f"/api/{api}" if "/" not in api else f"/apis/{api}"
    if kind in _CLUSTER_SCOPED:
        return f"{group}/{_PLURALS[kind]}"
    ns = o.get("metadata", {}).get("namespace") or namespace
    return f"{group}/namespaces/{ns}/{_PLURALS[kind]}"


def expand(text: str, env: Mapping[str, str]) -> str:
    """`$(NAME)` replaced by the variable's value, as the kubelet does in commands and
    arguments (an unknown name stays as written; `$$` is a literal `$`)."""

    def one(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        return env.get(m.group(1), m.group(0))

    return _VAR.sub(one, text)


# -- pods ----------------------------------------------------------------------------


def _name(o: Obj) -> str:
    return str(o.get("metadata", {}).get("name", "?"))


def _pods_of(o: Obj, namespace: str) -> list[PodPlan]:
    kind, name = o["kind"], _name(o)
    workload = f"{kind}/{name}"
    if kind == "Pod":
        hooks = str(o["metadata"].get("annotations", {}).get("helm.sh/hook", ""))
        return [
            _pod(name, name, o["metadata"], o["spec"], workload, namespace, "test" in hooks, ())
        ]
    spec = o["spec"]
    template = spec["template"]
    replicas = int(spec.get("replicas", 1))
    claims = tuple(
        Volume(t["metadata"]["name"], "claim") for t in spec.get("volumeClaimTemplates", [])
    )
    pods = []
    for i in range(replicas):
        # StatefulSet pods are <name>-<ordinal> (also their host name); a Deployment's
        # have a hash in a real cluster, an index here.
        pod = f"{name}-{i}"
        meta = template["metadata"]
        if kind == "StatefulSet":
            # The labels the StatefulSet controller gives each pod (a Service may select
            # one pod by its name).
            labels = {
                **meta.get("labels", {}),
                "statefulset.kubernetes.io/pod-name": pod,
                "apps.kubernetes.io/pod-index": str(i),
            }
            meta = {**meta, "labels": labels}
        pods.append(_pod(pod, pod, meta, template["spec"], workload, namespace, False, claims))
    return pods


def _pod(
    name: str,
    hostname: str,
    meta: Obj,
    spec: Obj,
    workload: str,
    namespace: str,
    test_hook: bool,
    claims: tuple[Volume, ...],
) -> PodPlan:
    security = spec.get("securityContext", {})
    volumes = [*claims, *(_volume(v, name) for v in spec.get("volumes", []))]
    known = {v.name for v in volumes}
    containers = []
    for c in [*spec.get("initContainers", []), *spec.get("containers", [])]:
        plan = _container(c, security, name, namespace, meta.get("labels", {}))
        missing = [m.volume for m in plan.mounts if m.volume not in known]
        if missing:
            raise ChartError(f"pod {name}: container {plan.name} mounts unknown volumes {missing}")
        containers.append(plan)
    return PodPlan(
        name=name,
        namespace=namespace,
        workload=workload,
        hostname=hostname,
        labels=dict(meta.get("labels", {})),
        aliases=(),
        containers=tuple(containers),
        volumes=tuple(volumes),
        service_account_token=bool(spec.get("automountServiceAccountToken", True)),
        fs_group=security.get("fsGroup"),
        grace_s=int(spec.get("terminationGracePeriodSeconds", 30)),
        test_hook=test_hook,
    )


def _volume(v: Obj, pod: str) -> Volume:
    name = v["name"]
    if "emptyDir" in v:
        empty = v["emptyDir"] or {}
        kind = "memory" if empty.get("medium") == "Memory" else "empty"
        return Volume(name, kind, size_limit=empty.get("sizeLimit"))
    if "secret" in v:
        return Volume(name, "secret", _secret_files(v["secret"], v["secret"]["secretName"]))
    if "projected" in v:
        files: list[SecretFile] = []
        default = v["projected"].get("defaultMode", 0o644)
        for source in v["projected"].get("sources", []):
            if "secret" not in source:
                raise ChartError(f"pod {pod}: volume {name}: only Secrets are projected here")
            s = source["secret"]
            files += _secret_files({"defaultMode": default, **s}, s["name"])
        return Volume(name, "secret", tuple(files))
    if "persistentVolumeClaim" in v:
        return Volume(v["persistentVolumeClaim"]["claimName"], "claim")
    raise ChartError(f"pod {pod}: volume {name}: kind {sorted(v)} is not supported here")


def _secret_files(source: Obj, secret: str) -> tuple[SecretFile, ...]:
    mode = int(source.get("defaultMode", 0o644))
    items = source.get("items")
    if not items:
        # Every key of the Secret, named as the key: known once the Secret is read.
        return (SecretFile(secret, "*", "", mode),)
    return tuple(
        SecretFile(secret, i["key"], i.get("path", i["key"]), int(i.get("mode", mode)))
        for i in items
    )


def _container(
    c: Obj, pod_security: Obj, pod: str, namespace: str, labels: Mapping[str, str]
) -> ContainerPlan:
    security = {**pod_security, **c.get("securityContext", {})}
    ports = {
        p.get("name", str(p["containerPort"])): int(p["containerPort"]) for p in c.get("ports", [])
    }
    env = []
    for e in c.get("env", []):
        if "value" in e or "valueFrom" not in e:
            env.append(EnvVar(e["name"], str(e.get("value", ""))))
            continue
        source = e["valueFrom"]
        if "fieldRef" in source:
            path = source["fieldRef"]["fieldPath"]
            env.append(EnvVar(e["name"], _field(path, pod, namespace, labels, e["name"])))
        elif "secretKeyRef" in source:
            ref = source["secretKeyRef"]
            env.append(EnvVar(e["name"], secret=(ref["name"], ref["key"])))
        else:
            raise ChartError(f"pod {pod}: env {e['name']}: source {sorted(source)} not supported")
    capabilities = security.get("capabilities", {}).get("drop", [])
    return ContainerPlan(
        name=c["name"],
        image=c["image"],
        command=tuple(c["command"]) if "command" in c else None,
        args=tuple(str(a) for a in c.get("args", [])),
        env=tuple(env),
        mounts=tuple(
            Mount(m["name"], m["mountPath"], bool(m.get("readOnly", False)))
            for m in c.get("volumeMounts", [])
        ),
        ports=ports,
        readiness=_probe(c.get("readinessProbe"), ports, pod),
        liveness=_probe(c.get("livenessProbe"), ports, pod),
        user=security.get("runAsUser"),
        group=security.get("runAsGroup"),
        read_only_root=bool(security.get("readOnlyRootFilesystem", False)),
        drop_all_capabilities="ALL" in capabilities,
        no_new_privileges=security.get("allowPrivilegeEscalation") is False,
    )


def _field(path: str, pod: str, namespace: str, labels: Mapping[str, str], env: str) -> str:
    if path == "metadata.name":
        return pod
    if path == "metadata.namespace":
        return namespace
    if (label := re.fullmatch(r"metadata\.labels\['([^']+)'\]", path)) is not None:
        # A label the pod does not carry is an empty value, as a kubelet gives it. The
        # node topology labels a real cluster copies onto pods (KEP-4742) do not exist
        # here: there are no nodes.
        return labels.get(label.group(1), "")
    if path == "status.podIP":
        # Podman gives the address when the container starts, after its environment is
        # set: none here (a broker then goes by its peers' names alone, which podman's
        # DNS keeps current).
        return ""
    raise ChartError(f"pod {pod}: env {env}: fieldRef {path} is not supported here")


def _probe(p: Obj | None, ports: Mapping[str, int], pod: str) -> Probe | None:
    if not p:
        return None
    get = p.get("httpGet")
    if get is None:
        raise ChartError(f"pod {pod}: only httpGet probes are run here, not {sorted(p)}")
    port = get["port"]
    number = ports.get(port) if isinstance(port, str) else int(port)
    if number is None:
        raise ChartError(f"pod {pod}: probe port {port} is not a port of the container")
    return Probe(str(get.get("path", "/")), number)


# -- names ---------------------------------------------------------------------------


def _with_aliases(
    p: PodPlan, services: Sequence[Obj], manifests: Sequence[Obj], namespace: str, domain: str
) -> PodPlan:
    names: list[str] = []
    governing = _governing_service(p, manifests)
    for s in services:
        selector = s["spec"].get("selector") or {}
        if not selector or any(p.labels.get(k) != v for k, v in selector.items()):
            continue
        svc = _name(s)
        _check_ports(s, p)
        if svc == governing:
            # A StatefulSet pod's own name under its governing (headless) Service.
            names += [
                f"{p.hostname}.{svc}.{namespace}.svc",
                f"{p.hostname}.{svc}.{namespace}.svc.{domain}",
            ]
        if s["spec"].get("clusterIP") != "None" or svc != governing:
            names += [
                svc,
                f"{svc}.{namespace}",
                f"{svc}.{namespace}.svc",
                f"{svc}.{namespace}.svc.{domain}",
            ]
    return dataclasses.replace(p, aliases=tuple(dict.fromkeys(names)))


def _governing_service(p: PodPlan, manifests: Sequence[Obj]) -> str | None:
    kind, _, name = p.workload.partition("/")
    if kind != "StatefulSet":
        return None
    for o in manifests:
        if o.get("kind") == "StatefulSet" and _name(o) == name:
            return str(o["spec"].get("serviceName")) or None
    return None


def _check_ports(service: Obj, p: PodPlan) -> None:
    ports = {n: v for c in p.containers for n, v in c.ports.items()}
    for sp in service["spec"].get("ports", []):
        target = sp.get("targetPort", sp["port"])
        number = ports.get(target) if isinstance(target, str) else int(target)
        if number != int(sp["port"]):
            raise ChartError(
                f"Service {_name(service)} maps port {sp['port']} to {target} ({number}) of pod "
                f"{p.name}: the embedded cluster resolves Service names to the pods themselves, "
                "so a Service's port must be its pods' port"
            )


def at_version_of(o: Obj, held: Obj) -> Obj:
    """A copy of `o` that replaces `held`: it names the resourceVersion read, as an update
    of a custom resource must."""
    body: Obj = json.loads(json.dumps(o))
    body["metadata"]["resourceVersion"] = held["metadata"]["resourceVersion"]
    return body
