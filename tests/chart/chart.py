"""The Helm chart in helm/epochlog, rendered offline with Helm's own engine (helm-python-sdk).

`render(values, namespace)` is `helm template`: the chart's default values merged
with `values`, checked against values.schema.json, and every template rendered,
test hooks included. `manifests` parses the output into objects; the finders pick
objects and containers out of them for the tests.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Final

import helm_python as helm
import yaml

REPO: Final = Path(__file__).resolve().parents[2]
CHART: Final = REPO / "helm" / "epochlog"
RELEASE: Final = "epochlog"

Obj = dict[str, Any]


def render(
    values: Mapping[str, Any] | None = None, *, namespace: str = "streams", name: str = RELEASE
) -> dict[str, str]:
    """Template path -> rendered text, as `helm template` would print it."""
    with helm.Chart.load(CHART) as chart:
        return chart.render(dict(values or {}), name=name, namespace=namespace, is_install=True)


def manifests(rendered: Mapping[str, str]) -> list[Obj]:
    """Every object of the rendered templates (NOTES.txt is text, not a manifest)."""
    objects: list[Obj] = []
    for path, text in sorted(rendered.items()):
        if path.endswith("NOTES.txt"):
            continue
        objects += [doc for doc in yaml.safe_load_all(text) if doc]
    return objects


def objects_of(values: Mapping[str, Any] | None = None, **kw: Any) -> list[Obj]:
    return manifests(render(values, **kw))


def find(objects: list[Obj], kind: str, name: str | None = None) -> list[Obj]:
    return [
        o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)
    ]


def one(objects: list[Obj], kind: str, name: str | None = None) -> Obj:
    found = find(objects, kind, name)
    assert len(found) == 1, f"{len(found)} {kind} named {name}: {[o['metadata'] for o in found]}"
    return found[0]


def containers(objects: list[Obj]) -> Iterator[tuple[Obj, Obj]]:
    """(workload, container) for every container of every pod the chart makes."""
    for o in objects:
        spec = o.get("spec") or {}
        pod = spec.get("template", {}).get("spec") if "template" in spec else None
        if o["kind"] == "Pod":
            pod = spec
        if pod:
            for c in pod.get("initContainers", []) + pod.get("containers", []):
                yield o, c


def operator_container(objects: list[Obj]) -> Obj:
    deployment = one(objects, "Deployment", f"{RELEASE}-operator")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return dict(container)


def flags(args: list[str]) -> dict[str, str | None]:
    """`--name=value` and bare `--name` arguments by name."""
    out: dict[str, str | None] = {}
    for arg in args:
        assert arg.startswith("--"), arg
        name, sep, value = arg.partition("=")
        out[name] = value if sep else None
    return out
