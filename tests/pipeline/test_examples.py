"""The example manifests for running the pipeline on Kubernetes: valid objects, and
arguments the job accepts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]
import pyspark
import pytest
import yaml

from epochlog_spark.config import build_parser, config_from_args
from epochlog_tools.cli import build_parser as cli_parser

EXAMPLES = Path(__file__).parents[2] / "examples" / "spark"


def docs(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((EXAMPLES / name).read_text()) if d]


def test_the_deployment_is_valid_and_runs_the_job_with_its_arguments() -> None:
    objects = docs("pipeline-deployment.yaml")
    for doc in objects:
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
    (volume,) = spec["template"]["spec"]["volumes"]
    assert volume["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]


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
