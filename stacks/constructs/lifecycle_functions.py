"""The node lifecycle Lambdas: one code package (sf_rest + node_lifecycle + pinned wheels),
built without Docker, and the functions that run it inside the VPC.

The package is built by local bundling: the two packages are copied and
`lambdas/requirements.txt` is installed with pip for the Lambda platform (manylinux
wheels, no compilation), so `cdk synth` needs only the package registry. Tests skip
bundling (`aws:cdk:bundling-stacks: []`).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import aws_cdk as cdk
import jsii
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from stacks.compliance import acknowledge, skip_check, wildcard_resource_finding
from stacks.constructs.log_group import function_role, log_group
from stacks.lifecycle_timing import FUNCTION_TIMEOUT_SECONDS

# AWSLambdaVPCAccessExecutionRole's EC2 actions (version v3 of 2024-01-05; tests compare them with
# moto's copy of the policy); its log actions are left to function_role.
VPC_INTERFACE_ACTIONS = (
    "ec2:CreateNetworkInterface",
    "ec2:DescribeNetworkInterfaces",
    "ec2:DescribeSubnets",
    "ec2:DeleteNetworkInterface",
    "ec2:AssignPrivateIpAddresses",
    "ec2:UnassignPrivateIpAddresses",
)

LAMBDAS = Path(__file__).resolve().parent.parent.parent / "lambdas"
PACKAGES = ("sf_rest", "node_lifecycle")
RUNTIME = lambda_.Runtime.PYTHON_3_14
ARCHITECTURE = lambda_.Architecture.ARM_64
PIP_PLATFORM = "manylinux2014_aarch64"
IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc", ".mypy_cache")


@jsii.implements(cdk.ILocalBundling)
class _PipBundling:
    """Copies the packages and pip-installs the pinned requirements for the Lambda platform."""

    def try_bundle(self, output_dir: str, *, image: cdk.DockerImage, **_: object) -> bool:
        out = Path(output_dir)
        for package in PACKAGES:
            shutil.copytree(LAMBDAS / package, out / package, ignore=IGNORED, dirs_exist_ok=True)
        python_version = RUNTIME.name.removeprefix("python")
        command = [
            sys.executable, "-m", "pip", "install", "--quiet", "--no-compile",
            "--requirement", str(LAMBDAS / "requirements.txt"),
            "--target", str(out),
            "--platform", PIP_PLATFORM, "--implementation", "cp",
            "--python-version", python_version, "--only-binary=:all:",
        ]  # fmt: skip
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise RuntimeError(f"bundling the node lifecycle Lambdas failed: {result.stderr.strip()}")
        return True


def function_code() -> lambda_.Code:
    return lambda_.Code.from_asset(
        str(LAMBDAS),
        exclude=["**/__pycache__", "**/.mypy_cache"],
        bundling=cdk.BundlingOptions(
            # Never pulled: local bundling always succeeds or raises.
            image=RUNTIME.bundling_image,
            local=_PipBundling(),
        ),
    )


class LifecycleFunction(Construct):
    """One Lambda of the node lifecycle: in the private subnets, able to reach the nodes' HTTP
    gateway (through the gateway client security group), logging to a group with retention."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        code: lambda_.Code,
        handler: str,
        description: str,
        environment: Mapping[str, str],
        vpc: ec2.IVpc,
        security_groups: Sequence[ec2.ISecurityGroup],
        log_retention_days: int,
        removal_policy: cdk.RemovalPolicy,
        why_no_dead_letter_queue: str,
        timeout: cdk.Duration = cdk.Duration.seconds(FUNCTION_TIMEOUT_SECONDS),
    ) -> None:
        """`why_no_dead_letter_queue` says what becomes of a failed invocation instead (checkov's
        CKV_AWS_116, skipped on this function with it)."""
        super().__init__(scope, construct_id)
        logs = log_group(
            self, "Logs", retention_days=log_retention_days, removal_policy=removal_policy
        )
        role = function_role(self, "Role", group=logs, description=description)
        # In a VPC the function needs the network interface actions of AWSLambdaVPCAccessExecutionRole,
        # not that policy itself: it also allows writing every log group of the account.
        role.add_to_policy(iam.PolicyStatement(actions=list(VPC_INTERFACE_ACTIONS), resources=["*"]))
        acknowledge(
            role,
            "AwsSolutions-IAM5",
            "The network interface actions of AWSLambdaVPCAccessExecutionRole (Lambda Developer Guide, \"Giving Lambda "
            "functions access to resources in an Amazon VPC\"): Lambda creates and deletes the function's interfaces "
            "before their ids exist, and the Describe actions take no resource",
            finding=wildcard_resource_finding("*"),
        )
        self.function = lambda_.Function(
            self,
            "Function",
            role=role,
            code=code,
            handler=handler,
            runtime=RUNTIME,
            architecture=ARCHITECTURE,
            description=description,
            environment=dict(environment),
            vpc=vpc,
            vpc_subnets=ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS),
            security_groups=list(security_groups),
            timeout=timeout,
            memory_size=256,
            log_group=logs,
            tracing=lambda_.Tracing.ACTIVE,
        )
        skip_check(self.function, "CKV_AWS_116", why_no_dead_letter_queue)
        skip_check(self.function, "CKV_AWS_115", "No reserved concurrency: its invocations are bounded by the lifecycle "
                   "actions and schedules that start them, and a reservation would only throttle a scale event")
        skip_check(self.function, "CKV_AWS_173", "Its environment holds names, ARNs and timings, no secret; Lambda "
                   "encrypts it at rest with its own key")
        skip_check(role.node.find_child("DefaultPolicy"), "CKV_AWS_111", "The unconstrained writes are the network "
                   "interface actions Lambda needs in a VPC (created before their ids exist) and X-Ray's "
                   "PutTraceSegments and PutTelemetryRecords, which take no resource")
