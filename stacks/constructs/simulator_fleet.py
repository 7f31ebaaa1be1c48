"""The simulator fleet: Amazon Linux hosts that run the telemetry simulator on SSM Run Command."""

from __future__ import annotations

from pathlib import Path

import yaml
from aws_cdk import Duration, RemovalPolicy, Stack, Tags
from aws_cdk import aws_autoscaling as autoscaling
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3_assets as s3_assets
from aws_cdk import aws_ssm as ssm
from constructs import Construct

from stacks.constructs.instance_core import grant_instance_core
from stacks.compliance import acknowledge, attribute_ref, wildcard_resource_finding
from stacks.constructs.command_document import command_document
from stacks.constructs.secure_bucket import SecureBucket
from stacks.naming import FLEET_TAG

REPO = Path(__file__).resolve().parent.parent.parent
SIMULATOR_PACKAGE = REPO / "simulator"
DOCUMENTS = REPO / "stacks" / "documents"
RUN_DOCUMENT = DOCUMENTS / "run_simulator.yaml"
TOPICS_DOCUMENT = DOCUMENTS / "manage_topics.yaml"
INSTALL_SCRIPT = DOCUMENTS / "install_simulator.sh"
INSTALL_MARKER = "# {install the simulator package}"


def render_document(path: Path, defaults: dict[str, str]) -> dict:
    """A Run Command document of the fleet with the stack's values as parameter defaults and the
    shared install of the simulator package in place of its marker line."""
    document = yaml.safe_load(path.read_text())
    parameters = document["parameters"]
    unknown = set(defaults) - set(parameters)
    if unknown:
        raise ValueError(f"{path.name} has no parameters {sorted(unknown)}")
    for name, value in defaults.items():
        parameters[name]["default"] = value
    unrendered = [name for name, spec in parameters.items() if spec.get("default") == "rendered"]
    if unrendered:
        raise ValueError(f"{path.name}: no value given for {unrendered}")
    for step in document["mainSteps"]:
        step["inputs"]["runCommand"] = [_with_install(script, path) for script in step["inputs"]["runCommand"]]
    return document


def _with_install(script: str, path: Path) -> str:
    lines = script.split("\n")
    marked = [i for i, line in enumerate(lines) if line.strip() == INSTALL_MARKER]
    if len(marked) != 1:
        raise ValueError(f"{path.name}: the script needs the line {INSTALL_MARKER!r} once")
    indent = lines[marked[0]][: -len(lines[marked[0]].lstrip())]
    install = [indent + line if line else line for line in INSTALL_SCRIPT.read_text().rstrip("\n").split("\n")]
    return "\n".join(lines[: marked[0]] + install + lines[marked[0] + 1 :])


def render_run_document(defaults: dict[str, str]) -> dict:
    """The simulator's Run Command document with the stack's values as parameter defaults."""
    return render_document(RUN_DOCUMENT, defaults)



def grant_parameter_read(parameter: ssm.IStringParameter, role: iam.IRole) -> None:
    """GetParameter(s) on the one parameter: the CDK's grant_read adds DescribeParameters, which takes no
    resource ("*" only, Service Authorization Reference), so on a parameter's ARN it grants nothing."""
    role.add_to_principal_policy(iam.PolicyStatement(actions=["ssm:GetParameter", "ssm:GetParameters"],
                                                     resources=[parameter.parameter_arn]))  # fmt: skip

class SimulatorFleet(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        vpc: ec2.IVpc,
        fleet_name: str,
        instance_type: str,
        host_count: int,
        kafka_client_security_group: ec2.ISecurityGroup,
        results_retention_days: int,
        removal_policy: RemovalPolicy,
    ) -> None:
        super().__init__(scope, construct_id)
        self.fleet_name = fleet_name

        self.results = SecureBucket(
            self, "Results", removal_policy=removal_policy, expiration_days=results_retention_days
        ).bucket
        self.package = s3_assets.Asset(
            self, "Package", path=str(SIMULATOR_PACKAGE), exclude=["__pycache__", "*.pyc"]
        )

        self.role = iam.Role(
            self,
            "HostRole",
            assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"),
            description=f"Hosts of {fleet_name}: SSM agent, simulator package, MSK, results upload",
        )
        # The agent's actions without the managed policy's parameter reads on "*": a host reads the
        # parameters its documents name, granted where each is used (instance_core.py).
        acknowledge(self.role, "AwsSolutions-IAM5", grant_instance_core(self.role), finding=wildcard_resource_finding("*"))
        # Narrower than the grant_* helpers: read this one package object, write run reports.
        self.role.add_to_policy(
            iam.PolicyStatement(
                actions=["s3:GetObject"],
                resources=[self.package.bucket.arn_for_objects(self.package.s3_object_key)],
            )
        )
        self.role.add_to_policy(
            iam.PolicyStatement(actions=["s3:PutObject"], resources=[self.results.arn_for_objects("runs/*")])
        )
        acknowledge(
            self.role,
            "AwsSolutions-IAM5",
            "Hosts upload one report per run to runs/<run id>/<instance id>.json; run ids are chosen "
            "per run, so the key is a prefix. Put only, in the fleet's own results bucket",
            finding=wildcard_resource_finding(f"{attribute_ref(self.results, 'Arn')}/runs/*"),
        )

        security_group = ec2.SecurityGroup(
            self,
            "HostSecurityGroup",
            vpc=vpc,
            description=f"Hosts of {fleet_name}: no inbound; HTTPS out (SSM, S3, package index)",
            allow_all_outbound=False,
        )
        security_group.add_egress_rule(ec2.Peer.any_ipv4(), ec2.Port.tcp(443), "HTTPS to AWS APIs and PyPI")
        # `--transport mqtt` publishes as devices to the AWS IoT Core data endpoint: MQTT over TLS
        # with client certificates on port 8883 (AWS IoT Developer Guide, "Protocol port mappings").
        security_group.add_egress_rule(ec2.Peer.any_ipv4(), ec2.Port.tcp(8883), "MQTT over TLS to AWS IoT Core")

        launch_template = ec2.LaunchTemplate(
            self,
            "LaunchTemplate",
            machine_image=ec2.MachineImage.latest_amazon_linux2023(),
            instance_type=ec2.InstanceType(instance_type),
            role=self.role,
            security_group=security_group,
            require_imdsv2=True,
            detailed_monitoring=True,
            block_devices=[
                ec2.BlockDevice(
                    device_name="/dev/xvda",
                    volume=ec2.BlockDeviceVolume.ebs(
                        30, encrypted=True, volume_type=ec2.EbsDeviceVolumeType.GP3, delete_on_termination=True
                    ),
                )
            ],
        )
        launch_template.connections.add_security_group(kafka_client_security_group)

        self.hosts = autoscaling.AutoScalingGroup(
            self,
            "Hosts",
            vpc=vpc,
            vpc_subnets=ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS),
            launch_template=launch_template,
            min_capacity=host_count,
            max_capacity=host_count,
        )
        acknowledge(
            self.hosts,
            "AwsSolutions-AS3",
            "A fixed-size load generator (min = max) with no scaling policy; a replaced host shows up "
            "in the next run's report, which names every host that took part",
        )
        Tags.of(self.hosts).add(FLEET_TAG, fleet_name)

    def run_document_content(
        self, *, topic: str, bootstrap_parameter: str, region: str, devices_path: str, thing_prefix: str, environment: str
    ) -> dict:
        return render_run_document(
            {
                "topic": topic,
                "bootstrapParameter": bootstrap_parameter,
                "resultsBucket": self.results.bucket_name,
                "simulatorPackage": self.package.s3_object_url,
                "region": region,
                "devicesPath": devices_path,
                "thingPrefix": thing_prefix,
                "environment": environment,
            }
        )

    def add_run_document(
        self,
        *,
        document_name: str,
        topic: str,
        bootstrap_parameter: ssm.IStringParameter,
        region: str,
        devices_path: str,
        thing_prefix: str,
        environment: str,
    ) -> ssm.CfnDocument:
        grant_parameter_read(bootstrap_parameter, self.role)
        return command_document(
            self,
            "RunDocument",
            name=document_name,
            content=self.run_document_content(
                topic=topic,
                bootstrap_parameter=bootstrap_parameter.parameter_name,
                region=region,
                devices_path=devices_path,
                thing_prefix=thing_prefix,
                environment=environment,
            ),
        )

    def add_topics_document(
        self,
        *,
        document_name: str,
        bootstrap_parameter: ssm.IStringParameter,
        token_parameter_name: str,
        token_key_alias: str,
        region: str,
    ) -> ssm.CfnDocument:
        """The document `telemetry topics` sends to one host. The host may read the token
        parameters under `token_parameter_name` (one per run, each existing only while its
        command runs); it may not write or delete them.

        The workstation encrypts each with the key made here, not the AWS managed aws/ssm key: that
        key's policy lets every principal of the account decrypt through Parameter Store (SSM User
        Guide, "Restricting decryption of SecureString parameter values"), and any role of the account
        allowed to read parameters (AmazonSSMManagedInstanceCore reads them all; the platform's own
        instance roles no longer carry it, instance_core.py) could read the token. This key's policy is
        CDK's default (the account, so IAM policies decide), and only this fleet's role is given
        Decrypt: through Parameter Store, for a parameter under the token path (Parameter Store's
        encryption context is PARAMETER_ARN, "How AWS Systems Manager Parameter Store uses AWS
        KMS"). A Service Fabric node, or another environment's host, reads the parameter and
        cannot decrypt it."""
        grant_parameter_read(bootstrap_parameter, self.role)
        stack = Stack.of(self)
        tokens = stack.format_arn(service="ssm", resource="parameter", resource_name=f"{token_parameter_name.lstrip('/')}/*")
        self.role.add_to_policy(iam.PolicyStatement(actions=["ssm:GetParameter"], resources=[tokens]))
        self.topics_token_key = key = kms.Key(
            self,
            "TopicsTokenKey",
            alias=token_key_alias,
            description=f"Encrypts the topic administrator's MSK token `telemetry topics` leaves for {self.fleet_name}",
            enable_key_rotation=True,
            removal_policy=RemovalPolicy.DESTROY,  # it encrypts nothing that outlives a command
            pending_window=Duration.days(7),
        )
        self.role.add_to_policy(iam.PolicyStatement(
            actions=["kms:Decrypt"], resources=[key.key_arn],
            conditions={"StringEquals": {"kms:ViaService": f"ssm.{region}.amazonaws.com"},
                        "StringLike": {"kms:EncryptionContext:PARAMETER_ARN": tokens}},
        ))  # fmt: skip
        acknowledge(
            self.role,
            "AwsSolutions-IAM5",
            "Each `telemetry topics` run leaves its MSK token in a parameter of its own under this path (named "
            "by the run, so two runs never read or delete each other's), deleted when its command ends",
            finding=wildcard_resource_finding(tokens),
        )
        return command_document(
            self,
            "TopicsDocument",
            name=document_name,
            content=render_document(
                TOPICS_DOCUMENT,
                {
                    "tokenParameter": token_parameter_name,
                    "bootstrapParameter": bootstrap_parameter.parameter_name,
                    "simulatorPackage": self.package.s3_object_url,
                    "region": region,
                },
            ),
        )

