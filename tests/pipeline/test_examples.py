"""The example manifests for running the pipeline on Kubernetes: valid objects, and
arguments the job accepts."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]
import pyspark
import pytest
import yaml

from epochlog.crd import user_crd
from epochlog.users import EpochlogUserSpec
from epochlog_spark.config import build_parser, config_from_args
from epochlog_tools.cli import build_parser as cli_parser
from epochlog_tools.kubeapi.registry import types_of_crd

EXAMPLES = Path(__file__).parents[2] / "examples" / "spark"


def docs(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((EXAMPLES / name).read_text()) if d]


def test_the_deployment_is_valid_and_runs_the_job_with_its_arguments() -> None:
    objects = docs("pipeline-deployment.yaml")
    for doc in objects:
        if doc["kind"] == "EpochlogUser":
            continue  # a custom resource: its models check it, below
        kubernetes_validate.validate(doc, kubernetes_validate.latest_version(), strict=True)
    (deployment,) = [d for d in objects if d["kind"] == "Deployment"]
    (claim,) = [d for d in objects if d["kind"] == "PersistentVolumeClaim"]
    spec = deployment["spec"]
    assert spec["replicas"] == 1
    assert spec["strategy"]["type"] == "Recreate"
    (container,) = spec["template"]["spec"]["containers"]
    args = cli_parser().parse_args(["pipeline", "run", *container["args"]])
    config = config_from_args(args)
    mounted = container["volumeMounts"][0]["mountPath"]
    assert config.checkpoint.startswith(mounted)
    assert config.output.startswith(mounted)
    work, secret = spec["template"]["spec"]["volumes"]
    assert work["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
    # Its credentials are the EpochlogUser's Secret, named after the user, as mounted.
    (user,) = [d for d in objects if d["kind"] == "EpochlogUser"]
    spec_ = EpochlogUserSpec.model_validate(user["spec"])
    assert spec_.authentication.type == "tls"
    assert secret["secret"]["secretName"] == user["metadata"]["name"]
    user_mount = container["volumeMounts"][1]["mountPath"]
    for path, key in ((config.ca, "ca.crt"), (config.cert, "user.crt"), (config.key, "user.key")):
        assert path == f"{user_mount}/{key}"
    assert [r.resource.name for r in spec_.authorization.acls] == [config.topic]


def test_the_users_example_is_what_the_api_server_and_the_operator_take() -> None:
    users = [d for d in yaml.safe_load_all((EXAMPLES.parent / "users.yaml").read_text()) if d]
    kinds = {d["metadata"]["name"]: d["spec"]["authentication"]["type"] for d in users}
    assert kinds == {"alice": "tls", "billing": "scram-sha-512"}
    (rt,) = types_of_crd(user_crd())
    assert rt.schema is not None
    for doc in users:
        EpochlogUserSpec.model_validate(doc["spec"])
        obj = copy.deepcopy(doc)
        assert not rt.schema.prune(obj)
        rt.schema.default(obj)
        assert not rt.schema.validate(obj)


def test_the_spark_application_passes_arguments_the_job_accepts() -> None:
    (app,) = docs("sparkapplication.yaml")
    assert app["kind"] == "SparkApplication"
    spec = app["spec"]
    config = config_from_args(build_parser().parse_args(spec["arguments"]))
    assert config.topic == "orders"
    assert spec["mainApplicationFile"] == "local:///opt/epochlog/job.py"
    assert spec["sparkVersion"] == pyspark.__version__


@pytest.mark.parametrize("name", ["pipeline-deployment.yaml", "sparkapplication.yaml"])
def test_examples_name_the_pipeline_image(name: str) -> None:
    built = (Path(__file__).parents[2] / "pipeline" / "Dockerfile").read_text()
    assert "-t epochlog-pipeline " in built
    assert "image: epochlog-pipeline:" in (EXAMPLES / name).read_text()
