"""pipelines/azure-pipelines.yml, the Azure DevOps pipeline the blueprint ships, checked against
Azure Pipelines' published YAML schema (a pinned copy: schema/SOURCE.md) and against what the
synthesized stacks provide for it."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import jsonschema
import pytest
import yaml
from jsonschema.exceptions import best_match

from tests.conftest import REPO, cdk_context

PIPELINE = REPO / "pipelines" / "azure-pipelines.yml"
SCHEMA = Path(__file__).parent / "schema" / "azure-pipelines-service-schema.json.gz"


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft7Validator:
    return jsonschema.Draft7Validator(json.loads(gzip.decompress(SCHEMA.read_bytes())))


def pipeline() -> dict:
    return yaml.safe_load(PIPELINE.read_text())


def deploy_steps(document: dict) -> list[dict]:
    stage = next(s for s in document["stages"] if s["stage"] == "Deploy")
    return [step for job in stage["jobs"] for step in job["strategy"]["runOnce"]["deploy"]["steps"]]


def test_the_pipeline_is_valid_azure_pipelines_yaml(validator):
    error = best_match(validator.iter_errors(pipeline()))
    if error is not None:  # a step matches no task: say what its own task's schema refused
        causes = [c.message for c in error.context or [] if "Additional properties" in c.message or "required" in c.message]
        pytest.fail(f"{list(error.absolute_path)}: {(causes or [error.message])[0][:300]}")


def test_the_schema_refuses_what_azure_pipelines_would(validator):
    """The check can fail: a task version that does not exist, an input a task does not have."""
    unknown_version = pipeline()
    deploy_steps(unknown_version)[0]["task"] = "ServiceFabricDeploy@9"
    assert best_match(validator.iter_errors(unknown_version)) is not None
    unknown_input = pipeline()
    deploy_steps(unknown_input)[0]["inputs"]["clusterEndpoint"] = "tcp://example:19000"
    assert best_match(validator.iter_errors(unknown_input)) is not None


def test_the_build_refuses_a_package_whose_code_could_read_the_cluster_key():
    document = pipeline()
    (build,) = [s for s in document["stages"] if s["stage"] == "Build"]
    steps = build["jobs"][0]["steps"]
    scripts = [i for i, s in enumerate(steps) if "check_application_manifest.py" in s.get("script", "")]
    package = [i for i, s in enumerate(steps) if "/t:Package" in s.get("inputs", {}).get("msbuildArgs", "")]
    publish = [i for i, s in enumerate(steps) if "publish" in s]
    assert len(scripts) == 1 and package[0] < scripts[0] < publish[0]
    assert "applicationpackage\\ApplicationManifest.xml" in steps[scripts[0]]["script"]


def test_the_deploy_stage_runs_on_a_self_hosted_pool_that_reaches_an_internal_endpoint():
    """Microsoft-hosted agents cannot reach an internal load balancer, and every shipped environment's
    management endpoint is internal: the Deploy stage names a pool (a parameter, by default
    telemetry-<environment>-deploy), never a Microsoft-hosted image."""
    document = pipeline()
    (stage,) = [s for s in document["stages"] if s["stage"] == "Deploy"]
    (job,) = stage["jobs"]
    assert job["pool"] == {"name": "${{ coalesce(parameters.deployPool, format('telemetry-{0}-deploy', parameters.environment)) }}"}
    (pool,) = [p for p in document["parameters"] if p["name"] == "deployPool"]
    assert pool["default"] == ""
    assert all(not e["service_fabric"]["management_internet_facing"] for e in cdk_context()["environments"].values())


def test_the_deploy_step_uses_the_service_connection_of_the_chosen_environment():
    document = pipeline()
    (deploy,) = [s for s in deploy_steps(document) if s["task"].startswith("ServiceFabricDeploy@")]
    assert deploy["inputs"]["serviceConnectionName"] == "$(serviceConnection)"
    assert "${{ parameters.environment }}" in document["variables"]["serviceConnection"]
    (environment,) = [p for p in document["parameters"] if p["name"] == "environment"]
    assert sorted(environment["values"]) == sorted(cdk_context()["environments"])


def test_every_stack_output_the_pipeline_names_exists_in_the_synthesized_stack(synthesized):
    """The comments tell the release owner which ServiceFabric outputs make the service connection."""
    named = set(re.findall(r"<(\w+) output>", PIPELINE.read_text()))
    assert named, "the pipeline names the outputs its service connection is built from"
    for env in cdk_context()["environments"]:
        outputs = synthesized(env).stacks["service_fabric"]["Outputs"]
        assert named <= set(outputs), f"{env}: {sorted(named - set(outputs))} missing"
