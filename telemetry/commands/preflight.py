"""`telemetry preflight`: check an AWS account the way an environment's first deployment will meet it, before deploying.

One row per check, in one table: the credentials are for the configured account; the configured
zones exist in the region; the account is CDK-bootstrapped (version 6 or later); the certificate
secrets exist and hold the keys the nodes and tools read; the Service Quotas leave room for the
environment at its largest (On-Demand Standard vCPUs for seeds, scaling nodes at their maximum and
the simulator fleet; Elastic IPs for the NAT gateways; MSK brokers) beside what others use (what
the environment's own stacks hold already is part of its need, not counted twice); cluster
management is not open to the internet in production; this machine has the tools; the caller's
own permissions (IAM policy simulation); with --mfa-serial, that the MFA device assumes the topic
administrator role (one AssumeRole, its credentials dropped). Reads only; changes nothing.

Exit codes: 0 no blocker; 1 at least one blocker (each is one line under the table); 2 bad
input (unknown environment, invalid config) or no usable credentials.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import re
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass


from stacks.config import EnvironmentConfig, load_environment, read_environments
from telemetry.shared.cluster_inventory import CERTIFICATE_KEYS, format_table

OK, BLOCKER, WARNING = "ok", "BLOCKER", "warning"
# Every synthesized template asserts it (Rules.CheckBootstrapVersion: "CDK bootstrap stack version 6
# required") and reads it from this parameter of the default synthesizer's qualifier.
BOOTSTRAP_VERSION_PARAMETER = "/cdk-bootstrap/hnb659fds/version"
MIN_BOOTSTRAP_VERSION = 6
# Service Quotas by name (codes are not documented on the service pages; names are).
VCPU_QUOTA = ("ec2", "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances")
EIP_QUOTA = ("ec2", "EC2-VPC Elastic IPs")
BROKER_QUOTA = ("kafka", "Number of brokers per account")  # MSK Developer Guide, "Amazon MSK quota"
# The instance families that quota counts, by the first letter of the family.
STANDARD_FAMILIES = set("acdhimrtz")
CLUSTER_SECRET_KEYS = CERTIFICATE_KEYS


@dataclass(frozen=True)
class Check:
    name: str
    result: str
    detail: str


def check_account(sts, config: EnvironmentConfig) -> Check:
    account = sts.get_caller_identity()["Account"]
    if account != config.account:
        return Check("account", BLOCKER, f"credentials are for {account}; {config.name} deploys to {config.account}")
    return Check("account", OK, account)


def check_zones(ec2, config: EnvironmentConfig) -> Check:
    zones = {z["ZoneName"]: z["State"] for z in ec2.describe_availability_zones()["AvailabilityZones"]}
    missing = [z for z in config.availability_zones if zones.get(z) != "available"]
    if missing:
        return Check("zones", BLOCKER, f"not available in {config.region}: {', '.join(missing)}")
    return Check("zones", OK, ", ".join(config.availability_zones))


def check_bootstrap(ssm, config: EnvironmentConfig) -> Check:
    # The Makefile's target runs the pinned CLI on .venv's Node, after the placeholder refusal: no
    # bare `cdk` is on PATH, and .venv/bin/cdk needs a system Node (telemetry/shared/cdk_cli.py).
    fix = f"run: make bootstrap ENV={config.name}"
    try:
        version = int(ssm.get_parameter(Name=BOOTSTRAP_VERSION_PARAMETER)["Parameter"]["Value"])
    except ssm.exceptions.ParameterNotFound:
        return Check("cdk bootstrap", BLOCKER, f"not bootstrapped ({BOOTSTRAP_VERSION_PARAMETER} missing); {fix}")
    if version < MIN_BOOTSTRAP_VERSION:
        return Check("cdk bootstrap", BLOCKER, f"version {version}, the stacks need {MIN_BOOTSTRAP_VERSION}; {fix}")
    return Check("cdk bootstrap", OK, f"version {version}")


def check_secret(secrets, name: str, keys: Sequence[str]) -> Check:
    label = f"secret {name}"
    try:
        text = secrets.get_secret_value(SecretId=name)["SecretString"]
    except secrets.exceptions.ResourceNotFoundException:
        return Check(label, BLOCKER, "does not exist; create it as docs/deploy.md describes")
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        return Check(label, BLOCKER, f"is not a JSON object with {', '.join(keys)}")
    missing = [key for key in keys if not value.get(key)]
    if missing:
        return Check(label, BLOCKER, f"lacks {', '.join(missing)}")
    return Check(label, OK, "holds " + ", ".join(keys))


class ServiceQuotas:
    """Quota values by service and name, each service listed once: the applied value, or else AWS's
    default. ListServiceQuotas leaves out a quota that has no applied value ("If the applied quota
    value is not available for a quota, the quota is not retrieved", Service Quotas API
    Reference); ListAWSDefaultServiceQuotas lists those."""

    def __init__(self, client) -> None:
        self._client = client
        self._values: dict[str, dict[str, float] | None] = {}  # None: the listing was refused
        self._defaults: dict[str, dict[str, float]] = {}

    def value(self, service: str, name: str) -> float | None:
        if service not in self._values:
            self._values[service] = self._list("list_service_quotas", service)
        applied = self._values[service]
        if applied is None:
            return None  # reported as "not readable", with what is needed
        if name not in applied and service not in self._defaults:
            self._defaults[service] = self._list("list_aws_default_service_quotas", service) or {}
        return applied.get(name, self._defaults.get(service, {}).get(name))

    def defaulted(self, service: str, name: str) -> bool:
        """Whether value() is AWS's default, the applied value not listed (an increase may exist)."""
        return name not in (self._values.get(service) or {}) and name in self._defaults.get(service, {})

    def _list(self, operation: str, service: str) -> dict[str, float] | None:
        try:
            # Value is optional in the model: a quota answered with an ErrorReason instead is left
            # out, and so reported "not readable".
            return {quota["QuotaName"]: quota["Value"]
                    for page in self._client.get_paginator(operation).paginate(ServiceCode=service)
                    for quota in page["Quotas"] if "Value" in quota}  # fmt: skip
        except (self._client.exceptions.AccessDeniedException, self._client.exceptions.NoSuchResourceException):
            return None


def vcpus(ec2, instance_types: Iterable[str]) -> dict[str, int]:
    wanted = sorted(set(instance_types))
    found = ec2.describe_instance_types(InstanceTypes=wanted)["InstanceTypes"]
    return {t["InstanceType"]: t["VCpuInfo"]["DefaultVCpus"] for t in found}


# Families whose first letter is a standard one but which have On-Demand quotas of their own
# ("Running On-Demand DL|Inf|Trn|HPC instances", EC2 User Guide, "Amazon EC2 service quotas").
OWN_QUOTA_FAMILIES = ("dl", "inf", "trn", "hpc")


def is_standard(instance_type: str) -> bool:
    family = re.match(r"[a-z]+", instance_type).group()  # m6i.xlarge -> m, inf2.xlarge -> inf
    return family[0] in STANDARD_FAMILIES and not family.startswith(OWN_QUOTA_FAMILIES)


# What a stack creates carries the stack's id as a tag ("CloudFormation resource tagging":
# aws:cloudformation:stack-id, -stack-name, -logical-id; the resource schemas of AWS::EC2::EIP,
# AWS::EC2::Instance and AWS::MSK::Cluster declare cloudFormationSystemTags, as cfn-lint's copy of
# them shows), and so does each instance a stack's Auto Scaling group launches ("stack-level tags
# are automatically applied to EC2 instances regardless of the PropagateAtLaunch setting", same
# page). The id, not the name: what a deleted stack retained (production's, stacks/removal.py)
# keeps the old id, and the next deployment creates its replacement beside it.
STACK_ID_TAG = "aws:cloudformation:stack-id"
# The environment's stacks that create what each quota counts (stacks/platform.py names them; a
# test reads the synthesized app).
NAT_STACKS, INSTANCE_STACKS, MSK_STACKS = ("Network",), ("ServiceFabric", "SimulatorFleet"), ("Msk",)


def live_stack_ids(cloudformation, config: EnvironmentConfig, parts: Iterable[str]) -> frozenset[str]:
    """The StackId of each of the environment's stacks `parts` that exists now: DescribeStacks by
    name answers a running stack, and a ValidationError for one that does not exist (CloudFormation
    API Reference: "Deleted stacks: You must specify the unique stack ID")."""
    ids = set()
    for part in parts:
        try:
            stacks = cloudformation.describe_stacks(StackName=f"{config.stack_prefix}-{part}")["Stacks"]
        except cloudformation.exceptions.ClientError as error:
            if error.response["Error"]["Code"] != "ValidationError":
                raise
            continue
        ids.update(stack["StackId"] for stack in stacks)
    return frozenset(ids)


def made_by(tags: list[dict] | dict[str, str] | None, stack_ids: frozenset[str]) -> bool:
    """Whether tags (EC2's Key/Value list, or MSK's map) name one of `stack_ids` as their creator."""
    if isinstance(tags, list):
        tags = {tag["Key"]: tag["Value"] for tag in tags}
    return (tags or {}).get(STACK_ID_TAG) in stack_ids


def standard_vcpus_in_use(ec2, own_stacks: frozenset[str]) -> tuple[int, int]:
    """vCPUs of the standard instances running: (those `own_stacks` launched, everyone else's)."""
    running = [
        (item["InstanceType"], made_by(item.get("Tags"), own_stacks))
        for page in ec2.get_paginator("describe_instances").paginate(
            Filters=[{"Name": "instance-state-name", "Values": ["pending", "running"]}]
        )
        for reservation in page["Reservations"]
        for item in reservation["Instances"]
        # Spot instances count against the Spot quotas, not this On-Demand one (EC2 User Guide,
        # "Amazon EC2 service quotas"); DescribeInstances marks them InstanceLifecycle "spot".
        if item.get("InstanceLifecycle") != "spot"
    ]
    standard = [(t, own) for t, own in running if is_standard(t)]
    if not standard:
        return 0, 0
    per_type = vcpus(ec2, [t for t, _ in standard])
    return (sum(per_type[t] for t, own in standard if own), sum(per_type[t] for t, own in standard if not own))


def check_quota(label: str, quota: float | None, needed: int, in_use: tuple[int, int], unit: str,
                default: bool = False) -> Check:
    """`in_use`: (the environment's own, everyone else's). Only the others' usage and the whole
    environment must fit: what the environment already holds is part of what it needs. `default`:
    `quota` is AWS's default, no applied value being listed, so a shortfall is only a warning."""
    if quota is None:
        return Check(label, WARNING, f"quota not readable; the environment needs {needed} {unit}")
    own, others = in_use
    held = f"{own} of them" if own <= needed else f"{own}"
    detail = (f"needs {needed} {unit}, {held} held by this environment already, {others} in use elsewhere, quota "
              f"{quota:g}" + (" (AWS's default: Service Quotas lists no applied value)" if default else ""))
    if needed + others > quota:
        short = f"{detail}: request an increase of at least {needed + others - quota:g} in Service Quotas"
        return Check(label, WARNING, f"{short}, unless one was applied already") if default else Check(label, BLOCKER, short)
    return Check(label, OK, detail)


def check_vcpus(ec2, cloudformation, quotas: ServiceQuotas, config: EnvironmentConfig) -> Check:
    fabric, fleet = config.service_fabric, config.simulator_fleet
    instances = [
        (fabric.seed_instance_type, fabric.seed_node_count),
        (fabric.node_instance_type, fabric.scaling_max_nodes),
        (fleet.instance_type, fleet.host_count),
    ]
    per_type = vcpus(ec2, [t for t, _ in instances])
    needed = sum(per_type[t] * count for t, count in instances if is_standard(t))
    in_use = standard_vcpus_in_use(ec2, live_stack_ids(cloudformation, config, INSTANCE_STACKS))
    return check_quota("on-demand standard vCPUs", quotas.value(*VCPU_QUOTA), needed, in_use, "vCPUs",
                       quotas.defaulted(*VCPU_QUOTA))


def check_elastic_ips(ec2, cloudformation, quotas: ServiceQuotas, config: EnvironmentConfig) -> Check:
    own_stacks = live_stack_ids(cloudformation, config, NAT_STACKS)
    own = [made_by(address.get("Tags"), own_stacks) for address in ec2.describe_addresses()["Addresses"]]
    return check_quota("Elastic IPs (NAT)", quotas.value(*EIP_QUOTA), config.network.nat_gateways,
                       (own.count(True), own.count(False)), "addresses", quotas.defaulted(*EIP_QUOTA))


@dataclass(frozen=True)
class MskClusters:
    """Every MSK cluster of the account and region (ListClustersV2: each with its Provisioned
    broker count and storage), or why AWS would not list them: the two checks that read them say
    so in their rows (the permissions row names the action) instead of ending the run."""

    clusters: tuple[dict, ...]
    refused: str | None = None


def msk_clusters(kafka) -> MskClusters:
    try:
        return MskClusters(tuple(cluster for page in kafka.get_paginator("list_clusters_v2").paginate()
                                 for cluster in page["ClusterInfoList"]))  # fmt: skip
    except kafka.exceptions.ClientError as error:
        return MskClusters((), f"not checked: ListClustersV2 refused: {error}")


def check_brokers(found: MskClusters, cloudformation, quotas: ServiceQuotas, config: EnvironmentConfig) -> Check:
    if found.refused:
        return Check("MSK brokers", WARNING, found.refused)
    own_stacks = live_stack_ids(cloudformation, config, MSK_STACKS)
    brokers = [(cluster.get("Provisioned", {}).get("NumberOfBrokerNodes", 0), made_by(cluster.get("Tags"), own_stacks))
               for cluster in found.clusters]
    in_use = (sum(n for n, own in brokers if own), sum(n for n, own in brokers if not own))
    return check_quota("MSK brokers", quotas.value(*BROKER_QUOTA), config.msk.broker_count, in_use, "brokers",
                       quotas.defaulted(*BROKER_QUOTA))


def deployed_volume_gib(cloudformation, stack_name: str) -> int | None:
    """The broker VolumeSize of the deployed Msk stack's template; None when there is no such stack
    (GetTemplate: "If the template doesn't exist, a ValidationError is returned"). botocore hands a
    JSON template body over parsed (handlers.json_decode_template_body), and CDK writes JSON."""
    try:
        body = cloudformation.get_template(StackName=stack_name)["TemplateBody"]
    except cloudformation.exceptions.ClientError as error:
        if error.response["Error"]["Code"] == "ValidationError":
            return None
        raise
    template = body
    for resource in template.get("Resources", {}).values():
        if resource.get("Type") == "AWS::MSK::Cluster":
            return int(resource["Properties"]["BrokerNodeGroupInfo"]["StorageInfo"]["EBSStorageInfo"]["VolumeSize"])
    return None


def check_broker_storage(found: MskClusters, cloudformation, config: EnvironmentConfig) -> Check:
    """What the deployment would ask of MSK's broker storage. Storage auto scaling grows the volumes
    past the template's size; CloudFormation sends the template's VolumeSize whenever the broker
    storage in the template changes (cloudformation-coverage-roadmap issue 1129), and MSK refuses a
    size that is not at least 10 GiB above the current one ("Scale up Amazon MSK Standard broker
    storage" says it cannot shrink; the 10 GiB is MSK's error in that issue). So a changed
    msk.ebs_volume_gib below the grown size + 10 GiB would fail the Msk stack's update: a blocker
    here, before any stack is touched."""
    check = "MSK broker storage"
    if found.refused:
        return Check(check, WARNING, found.refused)
    name, stack = config.resource_prefix, f"{config.stack_prefix}-Msk"  # the cluster's name: msk_stack.py
    wanted = config.msk.ebs_volume_gib
    ours = [cluster for cluster in found.clusters if cluster["ClusterName"] == name]
    if not ours:
        return Check(check, OK, f"no cluster {name} yet: it starts with {wanted:,} GiB per broker")
    # Optional in the API's model (StorageInfo, EbsStorageInfo, VolumeSize; no Provisioned at all
    # for a serverless cluster of the same name).
    storage = ours[0].get("Provisioned", {}).get("BrokerNodeGroupInfo", {}).get("StorageInfo", {})
    current = storage.get("EbsStorageInfo", {}).get("VolumeSize")
    # MSK turns tiered storage on in place but never off: "TIERED -> LOCAL" is not an update MSK
    # takes, and disabling it on a topic deletes what the remote tier holds ("Enable and disable
    # tiered storage on an existing Amazon MSK topic"; botocore's Provisioned.StorageMode).
    if ours[0].get("Provisioned", {}).get("StorageMode") == "TIERED" and config.msk.tiered_storage is None:
        return Check(check, BLOCKER, f"cluster {name} uses tiered storage, which MSK cannot turn off: keep "
                     "msk.tiered_storage (removing it would also set guards Kafka refuses on its tiered topics)")
    if current is None:
        return Check(check, WARNING, f"cluster {name} reports no EBS volume size (ListClustersV2); not checked")
    if config.msk.storage_autoscaling_max_gib < current:
        # Application Auto Scaling's MaxCapacity below the volume it already grew: it cannot shrink it.
        return Check(check, BLOCKER, f"msk.storage_autoscaling_max_gib {config.msk.storage_autoscaling_max_gib:,} is "
                     f"below the {current:,} GiB the brokers already hold (volumes never shrink); set at least that")
    try:
        deployed = deployed_volume_gib(cloudformation, stack)
    except cloudformation.exceptions.ClientError as error:
        return Check(check, WARNING, f"not checked: GetTemplate of {stack} refused: {error}")
    if deployed is None:
        # A production cluster outlives its deleted stack (removal.py retains it): the deployment
        # would create a cluster of a name that is taken, not change this one's storage.
        return Check(check, BLOCKER, f"cluster {name} exists outside stack {stack}: the deployment would create "
                     "another of the same name; delete or rename it first")
    if wanted == deployed:
        grown = f"; auto scaling grew it from the template's {deployed:,}" if current > deployed else ""
        return Check("MSK broker storage", OK, f"{current:,} GiB per broker{grown}; the deployment leaves it alone")
    if wanted < current + 10:
        return Check("MSK broker storage", BLOCKER,
                     f"msk.ebs_volume_gib {wanted:,} would be sent to MSK, whose brokers hold {current:,} GiB: MSK "
                     f"refuses less than {current + 10:,}; set at least that, or put back the deployed {deployed:,}")
    return Check("MSK broker storage", OK, f"grows from {current:,} to {wanted:,} GiB per broker "
                 "(not within the cool-down after an auto scaling action, which MSK refuses)")


def check_settings(config: EnvironmentConfig) -> Check:
    """What the real run would refuse in cdk.json (stacks/placeholders.py, the lists its refusals
    use): the shipped placeholders are refused before preflight runs; a production package digest
    left unpinned is refused by the synthesis, after preflight, unless it is named here."""
    from stacks.placeholders import refused_settings

    refused = refused_settings(config)
    if refused:
        return Check("cdk.json settings", BLOCKER, "; ".join(refused))
    return Check("cdk.json settings", OK, "none that a deployment refuses")


def check_management_cidrs(config: EnvironmentConfig) -> Check:
    cidrs = config.service_fabric.management_cidrs
    world = [c for c in cidrs if ipaddress.ip_network(c).prefixlen == 0]
    if world and config.production:
        return Check("management CIDRs", BLOCKER, f"{', '.join(world)} opens cluster management to the internet")
    if world:
        return Check("management CIDRs", WARNING, f"{', '.join(world)}: open to the internet (allowed outside production)")
    return Check("management CIDRs", OK, ", ".join(cidrs))


# What `telemetry deploy` and the day-2 commands call with the operator's own credentials (the
# stacks themselves are deployed by the CDK bootstrap's roles, which the operator assumes).
OPERATOR_ACTIONS = (
    "cloudformation:DescribeStacks", "cloudformation:GetTemplate", "cloudformation:DescribeStackResources",
    "kafka:ListClustersV2", "ec2:DescribeAvailabilityZones", "ec2:DescribeInstances", "ec2:DescribeInstanceAttribute",
    "ssm:GetParameter", "ssm:PutParameter", "ssm:DeleteParameter", "ssm:SendCommand", "ssm:GetCommandInvocation",
    "ssm:ListCommands", "ssm:CancelCommand", "ssm:DescribeInstanceInformation",
    "secretsmanager:DescribeSecret", "secretsmanager:GetSecretValue", "servicequotas:ListServiceQuotas",
    "servicequotas:ListAWSDefaultServiceQuotas",
    "kinesisanalytics:DescribeApplication", "kinesisanalytics:StartApplication",
    "kinesisanalytics:DescribeApplicationOperation", "kinesisanalytics:ListApplicationOperations",
    "autoscaling:DescribeAutoScalingGroups", "autoscaling:DescribeScalingActivities",
    "autoscaling:UpdateAutoScalingGroup",
    # The fleet's reports, and the smoke run's records read back from the telemetry bucket (its KMS key).
    "s3:ListBucket", "s3:GetObject", "kms:Decrypt",
    # The smoke run over MQTT: its devices provisioned if missing (their keys in SecureString
    # parameters under the device credentials key), IoT's endpoint and counts of the run.
    "iot:ListThings", "iot:GetPolicy", "iot:CreateThing", "iot:CreateKeysAndCertificate", "iot:AttachPolicy",
    "iot:AttachThingPrincipal", "iot:ListThingPrincipals", "iot:ListAttachedPolicies", "iot:ListPrincipalThings",
    "iot:DescribeCertificate", "iot:DescribeEndpoint", "ssm:GetParametersByPath",
    # ... and repaired if an interrupted run left one half made.
    "iot:DetachPolicy", "iot:DetachThingPrincipal", "iot:UpdateCertificate", "iot:DeleteCertificate",
    # The fleet document's results bucket; the topic administrator role checked before assuming it.
    "ssm:DescribeDocument", "iam:GetRole",
    "kms:Encrypt", "kms:GenerateDataKey", "cloudwatch:GetMetricData",
    # A Run Command output GetCommandInvocation cut short, read whole from its log group.
    "logs:GetLogEvents",
)  # fmt: skip
# The CDK bootstrap's roles the CLI assumes (default qualifier), and the topic administrator.
CDK_ROLES = ("deploy-role", "file-publishing-role", "lookup-role")


def caller_principal(iam, caller_arn: str) -> str | None:
    """The IAM principal whose policies IAM simulates for these credentials: a user as it is, an
    assumed role's role (its ARN, with its path, from GetRole); None for root or a federated user."""
    kind, _, rest = caller_arn.split(":", 5)[5].partition("/")
    if kind == "user":
        return caller_arn
    if kind == "assumed-role":
        return str(iam.get_role(RoleName=rest.split("/")[0])["Role"]["Arn"])
    return None


def check_permissions(session, config: EnvironmentConfig) -> Check:
    """IAM policy simulation of the caller (SimulatePrincipalPolicy: its identity policies,
    permissions boundary and the Organizations SCPs that apply, IAM API Reference); resource
    policies are not in it. Only an explicit deny of an action is a blocker: an implicit deny may
    be a policy scoped to the resources the journey will name (simulated here against "*"), or to
    conditions the simulation is not told (MissingContextValues, such as aws:MultiFactorAuthPresent),
    so it is a warning that lists the actions."""
    from botocore.exceptions import BotoCoreError, ClientError

    from stacks.naming import topic_admin_role_name

    iam = session.client("iam")
    try:
        caller = session.client("sts").get_caller_identity()["Arn"]
        principal = caller_principal(iam, caller)
        if principal is None:
            return Check("your permissions", WARNING, f"{caller} cannot be simulated: the run finds out as it goes")
        account = config.account
        roles = [f"arn:aws:iam::{account}:role/cdk-hnb659fds-{role}-{account}-{config.region}" for role in CDK_ROLES]
        roles.append(f"arn:aws:iam::{account}:role/{topic_admin_role_name(config)}")
        denied: dict[str, list[str]] = {"explicitDeny": [], "implicitDeny": []}
        for actions, resources in ((OPERATOR_ACTIONS, ["*"]), (("sts:AssumeRole",), roles)):
            pages = iam.get_paginator("simulate_principal_policy").paginate(
                PolicySourceArn=principal, ActionNames=list(actions), ResourceArns=resources)
            for page in pages:
                for result in page["EvaluationResults"]:
                    if result["EvalDecision"] != "allowed":
                        denied[result["EvalDecision"]].append(
                            result["EvalActionName"] + (f" on {result['EvalResourceName']}" if resources != ["*"] else ""))
    except (BotoCoreError, ClientError) as error:
        return Check("your permissions", WARNING, f"cannot simulate them ({one_line_error(error)}): the run finds out "
                     "as it goes (iam:GetRole and iam:SimulatePrincipalPolicy let preflight check)")
    if denied["explicitDeny"]:
        return Check("your permissions", BLOCKER,
                     f"{principal} is explicitly denied {', '.join(sorted(set(denied['explicitDeny'])))}")
    if denied["implicitDeny"]:
        return Check("your permissions", WARNING,
                     f"{principal} is not allowed {', '.join(sorted(set(denied['implicitDeny'])))} on any resource "
                     "(a policy scoped to resources or conditions the simulation does not know may still allow them)")
    return Check("your permissions", OK, f"{principal}: every call of the journey allowed")


def one_line_error(error: BaseException) -> str:
    return " ".join(str(error).split())


def check_topic_admin(session, config: EnvironmentConfig, mfa_serial: str | None,
                      read_code: Callable[[str], str] | None = None) -> Check:
    """The MFA device can assume the topic administrator role, as `telemetry topics` will: one
    AssumeRole with the device's code (15 minutes, the credentials dropped at once). Its trust
    policy requires MFA, which a policy simulation cannot prove (the caller's MFA is not in the
    request). Skipped, with what to pass, without --mfa-serial; a warning before the Msk stack
    has created the role."""
    from botocore.exceptions import BotoCoreError, ClientError

    from telemetry.shared.declared_topics import assume_topic_admin, declared_environment
    from simulator.errors import SimulatorError
    from stacks.naming import topic_admin_role_name

    label, role = "topic administrator (MFA)", topic_admin_role_name(config)
    if not mfa_serial:
        return Check(label, WARNING, f"not checked: pass --mfa-serial ARN and preflight assumes {role} once with a code")
    iam = session.client("iam")
    try:
        iam.get_role(RoleName=role)
    except iam.exceptions.NoSuchEntityException:
        return Check(label, WARNING, f"{role} does not exist yet (the Msk stack creates it): check again after deploying")
    except (BotoCoreError, ClientError) as error:
        return Check(label, WARNING, f"cannot read {role} ({one_line_error(error)}); trying to assume it")
    try:
        assume_topic_admin(declared_environment(config.name), mfa_serial, read_code=read_code, session=session,
                           duration_s=900)
    except SimulatorError as error:  # TopicError: one line naming the role and STS's answer
        return Check(label, BLOCKER, str(error))
    # STS is reported to refuse a code it has already accepted (no API page says so): say to wait.
    return Check(label, OK, f"{mfa_serial} assumed {role} (the credentials were dropped; telemetry topics "
                 "needs the next code)")


def check_tools() -> Check:
    """What deploying from this machine runs: the CDK CLI on the checkout's Node, Maven and Java
    for the synthesis (telemetry/shared/cdk_cli.py)."""
    from telemetry.shared.cdk_cli import missing_tools

    missing = missing_tools()
    if missing:
        return Check("tools", BLOCKER, "; ".join(missing))
    return Check("tools", OK, "CDK CLI on .venv's Node, mvn, java")


def preflight(config: EnvironmentConfig, session, mfa_serial: str | None = None,
              read_code: Callable[[str], str] | None = None) -> list[Check]:
    ec2, quotas = session.client("ec2"), ServiceQuotas(session.client("service-quotas"))
    secrets = session.client("secretsmanager")
    clusters = msk_clusters(session.client("kafka"))  # read by the broker and storage checks
    cloudformation = session.client("cloudformation")
    fabric = config.service_fabric
    return [
        check_tools(),
        check_settings(config),
        check_account(session.client("sts"), config),
        check_permissions(session, config),
        check_topic_admin(session, config, mfa_serial, read_code),
        check_zones(ec2, config),
        check_bootstrap(session.client("ssm"), config),
        check_secret(secrets, fabric.cluster_certificate_secret, CLUSTER_SECRET_KEYS),
        check_secret(secrets, fabric.admin_certificate_secret, CERTIFICATE_KEYS),
        check_vcpus(ec2, cloudformation, quotas, config),
        check_elastic_ips(ec2, cloudformation, quotas, config),
        check_brokers(clusters, cloudformation, quotas, config),
        check_broker_storage(clusters, cloudformation, config),
        check_management_cidrs(config),
    ]


def report(config: EnvironmentConfig, checks: Sequence[Check]) -> int:
    print(format_table(("CHECK", "RESULT", "DETAIL"), [(c.name, c.result, c.detail) for c in checks]))
    blockers = [c for c in checks if c.result == BLOCKER]
    for check in blockers:
        print(f"blocker: {check.name}: {check.detail}", file=sys.stderr)
    print(f"{config.name} ({config.account}, {config.region}): {len(blockers)} blocker(s)")
    return 1 if blockers else 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--mfa-serial", metavar="ARN",
                        help="your MFA device: preflight then assumes the topic administrator role once, as "
                        "telemetry topics will (the code is read from the terminal)")


def run(args: argparse.Namespace, session_factory: Callable[[str], object]) -> int:
    from telemetry.shared.errors import UsageError
    from stacks.placeholders import refusal

    config = load_environment(read_environments(), args.env)
    placeholder = refusal(config)
    if placeholder:  # before any AWS call: the checks would ask the example account
        raise UsageError(placeholder)
    checks = preflight(config, session_factory(config.region), getattr(args, "mfa_serial", None))
    if getattr(args, "format", "text") != "json":
        return report(config, checks)
    blockers = sum(1 for c in checks if c.result == BLOCKER)
    from telemetry.shared.output import document

    document({"environment": config.name, "account": config.account, "region": config.region,
              "checks": [asdict(c) for c in checks], "blockers": blockers})
    return 1 if blockers else 0


if __name__ == "__main__":  # run by path, as before the one front door
    from telemetry.shared.errors import moved

    raise SystemExit(moved("preflight"))
