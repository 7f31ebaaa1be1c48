"""The Flink job's shaded jar as an S3 asset, built with Maven on the machine that synthesizes.

Local bundling: the CDK calls `MavenPackage.try_bundle`, which runs Maven and copies the jar into
the asset's output directory. There is no Docker fallback: the build succeeds or synthesis stops
with Maven's own error. The asset hash is the fingerprint of the sources (not of the jar, whose
bytes change on every build), so an unchanged job does not redeploy and restart the application.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import aws_cdk as cdk
import jsii
from aws_cdk import aws_s3_assets as s3_assets
from constructs import Construct

REPO = Path(__file__).resolve().parent.parent.parent
FLINK_PROJECT = REPO / "flink"
JAR_NAME = "telemetry-sink.jar"
# Build output and IDE state are not sources: leaving them out keeps the hash stable.
NOT_SOURCES = ["target", ".idea", "*.iml", ".classpath", ".project", ".settings"]


@jsii.implements(cdk.ILocalBundling)
class MavenPackage:
    def __init__(self, project: Path, jar_name: str) -> None:
        self._project = project
        self._jar_name = jar_name

    # jsii passes the bundling options as one positional struct; they are not needed here.
    def try_bundle(self, output_dir: str, _options: object = None, **_kwargs: object) -> bool:
        mvn = shutil.which("mvn")
        if mvn is None:
            raise RuntimeError(f"building {self._jar_name} needs Maven (mvn) on PATH")
        command = [mvn, "-q", "-f", str(self._project / "pom.xml"), "package", "-DskipTests"]
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0:
            tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-30:])
            raise RuntimeError(f"{' '.join(command[1:])} failed ({result.returncode}):\n{tail}")
        jar = self._project / "target" / self._jar_name
        if not jar.is_file():
            raise RuntimeError(f"Maven finished but {jar} is missing; check the shade plugin's finalName")
        shutil.copy2(jar, Path(output_dir) / self._jar_name)
        return True


def flink_jar_asset(scope: Construct, construct_id: str, *, project: Path = FLINK_PROJECT) -> s3_assets.Asset:
    return s3_assets.Asset(
        scope,
        construct_id,
        path=str(project),
        exclude=NOT_SOURCES,
        asset_hash_type=cdk.AssetHashType.SOURCE,
        bundling=cdk.BundlingOptions(
            # Never pulled: local bundling above either builds the jar or raises.
            image=cdk.DockerImage.from_registry("none"),
            local=MavenPackage(project, JAR_NAME),
            output_type=cdk.BundlingOutput.ARCHIVED,
        ),
    )
