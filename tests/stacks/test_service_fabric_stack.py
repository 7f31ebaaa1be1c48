"""Service Fabric stack: seed nodes, scaling node group, storage, load balancers, roles, outputs."""

from __future__ import annotations

import ipaddress
import json
import re

import pytest

from stacks.config import load_environment
from tests.conftest import cdk_context

SEEDS = {"dev": 3, "staging": 3, "prod": 5}
PROD_SEED_ADDRESSES = ["10.30.7.224", "10.30.11.224", "10.30.15.224", "10.30.7.225", "10.30.11.225"]


def config(env):
    return load_environment(cdk_context()["environments"], env).service_fabric


def resources(synthesized, env, kind):
    template = synthesized(env).stacks["service_fabric"]
    return {k: r for k, r in template["Resources"].items() if r["Type"] == kind}


def scaling_group(synthesized, env):
    (scaling,) = resources(synthesized, env, "AWS::AutoScaling::AutoScalingGroup").values()
    return scaling


def seed_instances(synthesized, env) -> dict[str, dict]:
    """Seed name -> the properties of its AWS::EC2::Instance."""
    found = {}
    for instance in resources(synthesized, env, "AWS::EC2::Instance").values():
        props = instance["Properties"]
        found[instance_tags(props)["sf:nodename"]] = props
    return found


def tags(group):
    return {t["Key"]: t["Value"] for t in group["Properties"]["Tags"] if t["PropagateAtLaunch"]}


def instance_tags(props):
    return {t["Key"]: t["Value"] for t in props["Tags"]}


def private_subnets(synthesized, env) -> dict[str, str]:
    """Logical id -> CIDR of the network stack's private subnets."""
    network = synthesized(env).stacks["network"]["Resources"]
    return {
        k: r["Properties"]["CidrBlock"]
        for k, r in network.items()
        if r["Type"] == "AWS::EC2::Subnet" and "Private" in json.dumps(r["Properties"]["Tags"])
    }


@pytest.mark.parametrize("env", ["dev", "prod"])
def test_one_instance_per_seed_with_one_interface_at_its_fixed_address(synthesized, env):
    """A seed's fixed address is its primary private address: one interface, no second in the
    same subnet, nothing attached at boot. The address is the one the plan gives (and that the
    network stack reserves), inside the seed block of the private subnet of its zone."""
    from stacks.seed_addresses import seed_block

    seeds = seed_instances(synthesized, env)
    assert sorted(seeds) == [f"seed-{i}" for i in range(SEEDS[env])]
    assert resources(synthesized, env, "AWS::EC2::NetworkInterface") == {}
    assert resources(synthesized, env, "AWS::EC2::NetworkInterfaceAttachment") == {}
    subnets = private_subnets(synthesized, env)
    used_subnets = set()
    for name, props in seeds.items():
        assert "NetworkInterfaces" not in props and "SecondaryPrivateIpAddressCount" not in props
        (subnet_id,) = [k for k in subnets if k in props["SubnetId"]["Fn::ImportValue"]]
        address = ipaddress.ip_address(props["PrivateIpAddress"])
        assert address in seed_block(subnets[subnet_id]), name
        used_subnets.add(subnet_id)
        assert instance_tags(props)["sf:nodetype"] == "PrimaryNodeType"
        assert instance_tags(props)["sf:cluster"] == f"telemetry-{env}-sf"
        assert props["DisableApiTermination"] is True
    assert len(used_subnets) == 3  # spread over all three zones
    if env == "prod":
        assert [seeds[f"seed-{i}"]["PrivateIpAddress"] for i in range(5)] == PROD_SEED_ADDRESSES


def test_a_deployment_never_replaces_or_stops_a_running_seed(synthesized):
    """Image, user data and instance type live in the seed launch template, and every seed names
    version 1 of it: a new Windows image or preparation script creates a later version, which the
    running seeds never see (ImageId and LaunchTemplate are create-only on AWS::EC2::Instance; a
    replacement could not even start, its fixed address being in use)."""
    seeds = seed_instances(synthesized, "prod")
    templates = resources(synthesized, "prod", "AWS::EC2::LaunchTemplate")
    (seed_template_id,) = [k for k in templates if "SeedNodes" in k]
    for props in seeds.values():
        assert props["LaunchTemplate"] == {"LaunchTemplateId": {"Ref": seed_template_id}, "Version": "1"}
        assert not {"ImageId", "UserData", "InstanceType", "BlockDeviceMappings"} & set(props)
    # No scaling policy or group ever names a seed.
    policies = json.dumps(resources(synthesized, "prod", "AWS::AutoScaling::ScalingPolicy"))
    assert "Seed" not in policies


def test_seeds_are_recovered_by_ec2_and_alarm_when_impaired(synthesized):
    alarms = {a["Properties"]["AlarmName"]: a["Properties"] for a in resources(synthesized, "prod", "AWS::CloudWatch::Alarm").values() if "AlarmName" in a["Properties"]}
    seeds = resources(synthesized, "prod", "AWS::EC2::Instance")
    for index in range(5):
        recovery = alarms[f"telemetry-prod-sf-seed-{index}-recovery"]
        assert (recovery["Namespace"], recovery["MetricName"]) == ("AWS/EC2", "StatusCheckFailed_System")
        (dimension,) = recovery["Dimensions"]
        assert dimension["Name"] == "InstanceId" and dimension["Value"]["Ref"] in seeds
        actions = json.dumps(recovery["AlarmActions"])
        assert ":ec2:recover" in actions and "ImportValue" in actions  # recover, and tell the alarm topic
        impaired = alarms[f"telemetry-prod-sf-seed-{index}-impaired"]
        assert impaired["MetricName"] == "StatusCheckFailed_Instance"
        assert ":ec2:" not in json.dumps(impaired["AlarmActions"])


def test_seed_data_volumes_are_snapshotted_on_a_schedule(synthesized):
    (policy,) = resources(synthesized, "prod", "AWS::DLM::LifecyclePolicy").values()
    details = policy["Properties"]["PolicyDetails"]
    assert details["ResourceTypes"] == ["INSTANCE"]
    assert details["Parameters"] == {"ExcludeBootVolume": True}
    assert details["TargetTags"] == [{"Key": "sf:snapshots", "Value": "telemetry-prod-sf-seeds"}]
    (schedule,) = details["Schedules"]
    assert schedule["CreateRule"] == {"Interval": 12, "IntervalUnit": "HOURS"}
    assert schedule["RetainRule"] == {"Count": 30}
    seeds = seed_instances(synthesized, "prod")
    assert all(instance_tags(p)["sf:snapshots"] == "telemetry-prod-sf-seeds" for p in seeds.values())
    assert "sf:snapshots" not in tags(scaling_group(synthesized, "prod"))


@pytest.mark.parametrize("env", ["dev", "prod"])
def test_scaling_group_starts_empty_with_its_hooks_and_tags_follow_config(synthesized, env):
    """No scaling instance can run before its hooks exist or before a cluster can take it: the
    group is created empty (telemetry/commands/cluster/scale.py applies the configured sizes after bootstrap) and
    its hooks are part of the group, not separate resources created after it."""
    settings = config(env)
    scaling = scaling_group(synthesized, env)
    props = scaling["Properties"]
    assert (props["MinSize"], props["MaxSize"]) == ("0", str(settings.scaling_max_nodes))
    assert "DesiredCapacity" not in props  # a deployment never resets the live size
    assert props["AutoScalingGroupName"] == f"telemetry-{env}-sf-scaling"
    assert tags(scaling) | {"Environment": env} == tags(scaling)
    assert tags(scaling)["sf:nodetype"] == "ScalingNodeType"
    assert tags(scaling)["sf:cluster"] == f"telemetry-{env}-sf"
    assert resources(synthesized, env, "AWS::AutoScaling::LifecycleHook") == {}
    hooks = {h["LifecycleTransition"]: h for h in props["LifecycleHookSpecificationList"]}
    launch = hooks["autoscaling:EC2_INSTANCE_LAUNCHING"]
    terminate = hooks["autoscaling:EC2_INSTANCE_TERMINATING"]
    assert (launch["LifecycleHookName"], launch["DefaultResult"]) == ("sf-join-cluster", "ABANDON")
    # Nobody completing a terminate action retains the instance (test_node_lifecycle_stack.py).
    assert (terminate["LifecycleHookName"], terminate["DefaultResult"]) == ("sf-leave-cluster", "ABANDON")
    assert launch["HeartbeatTimeout"] == terminate["HeartbeatTimeout"] == settings.lifecycle_heartbeat_seconds


def test_scaling_follows_cpu_out_and_scales_in_one_node_at_a_time(synthesized):
    policies = {p["Properties"]["PolicyType"]: p["Properties"] for p in resources(synthesized, "prod", "AWS::AutoScaling::ScalingPolicy").values()}
    tracking = policies["TargetTrackingScaling"]["TargetTrackingConfiguration"]
    assert tracking["PredefinedMetricSpecification"]["PredefinedMetricType"] == "ASGAverageCPUUtilization"
    assert tracking["TargetValue"] == 60
    assert tracking["DisableScaleIn"] is True
    simple = policies["SimpleScaling"]
    assert (simple["AdjustmentType"], simple["ScalingAdjustment"], simple["Cooldown"]) == ("ChangeInCapacity", -1, "300")
    alarms = resources(synthesized, "prod", "AWS::CloudWatch::Alarm").values()
    (idle,) = [a["Properties"] for a in alarms if "remove one node" in a["Properties"].get("AlarmDescription", "")]
    assert (idle["Threshold"], idle["ComparisonOperator"]) == (25, "LessThanThreshold")
    assert "ScaleInOneNode" in json.dumps(idle["AlarmActions"])


@pytest.mark.parametrize("env", ["dev", "prod"])
def test_launch_templates_require_imdsv2_encrypt_volumes_and_use_windows_2022(synthesized, env):
    templates = resources(synthesized, env, "AWS::EC2::LaunchTemplate")
    assert len(templates) == 2  # one for the seeds, one for the scaling group
    for template in templates.values():
        data = template["Properties"]["LaunchTemplateData"]
        assert data["MetadataOptions"]["HttpTokens"] == "required"
        assert data["Monitoring"] == {"Enabled": True}
        devices = {d["DeviceName"]: d["Ebs"] for d in data["BlockDeviceMappings"]}
        assert set(devices) == {"/dev/sda1", "xvdb"}
        assert all(ebs["Encrypted"] is True for ebs in devices.values())
        assert devices["xvdb"]["VolumeSize"] == config(env).data_volume_gib
        assert "Windows" in json.dumps(data["ImageId"])
    parameters = json.dumps(synthesized(env).stacks["service_fabric"]["Parameters"])
    assert "/aws/service/ami-windows-latest/Windows_Server-2022-English-Full-Base" in parameters


def node_security_group_id(synthesized, env):
    groups_ = resources(synthesized, env, "AWS::EC2::SecurityGroup")
    (node,) = [k for k in groups_ if k.startswith("NodeSecurityNodeSecurityGroup")]
    return node


@pytest.mark.parametrize("env", ["dev", "prod"])
def test_nodes_reach_out_only_on_the_ports_they_use(synthesized, env):
    """The nodes hold the cluster (admin) certificate: their group names its outbound rules
    (HTTPS and HTTP anywhere; cluster ports, set-up ports and NFS to the groups that admit them)
    instead of allowing everything."""
    node = node_security_group_id(synthesized, env)
    groups_ = resources(synthesized, env, "AWS::EC2::SecurityGroup")
    inline = groups_[node]["Properties"].get("SecurityGroupEgress", [])
    assert all(rule.get("IpProtocol") != "-1" for rule in inline), inline  # not "allow all outbound"
    egress = [r["Properties"] for r in resources(synthesized, env, "AWS::EC2::SecurityGroupEgress").values()
              if r["Properties"]["GroupId"] == {"Fn::GetAtt": [node, "GroupId"]}]  # fmt: skip
    anywhere = {(r["IpProtocol"], r["FromPort"], r["ToPort"]) for r in inline + egress if r.get("CidrIp") == "0.0.0.0/0"}
    assert anywhere == {("tcp", 443, 443), ("tcp", 80, 80)}
    to_group = {}
    for rule in egress:
        if "DestinationSecurityGroupId" in rule:
            target = rule["DestinationSecurityGroupId"]["Fn::GetAtt"][0]
            to_group.setdefault(target, set()).add((rule["IpProtocol"], rule["FromPort"], rule["ToPort"]))
    ingress_from_nodes = {(r["IpProtocol"], r["FromPort"], r["ToPort"])
                          for r in resources(synthesized, env, "AWS::EC2::SecurityGroupIngress").values()
                          if r["Properties"]["GroupId"] == {"Fn::GetAtt": [node, "GroupId"]}
                          and r["Properties"].get("SourceSecurityGroupId") == {"Fn::GetAtt": [node, "GroupId"]}
                          for r in [r["Properties"]]}  # fmt: skip
    assert to_group[node] == ingress_from_nodes  # node to node: what the nodes admit
    (seeds,) = [k for k in groups_ if k.startswith("NodeSecuritySeedSetupSecurityGroup")]
    (scaling,) = [k for k in groups_ if k.startswith("NodeSecurityScalingSetupSecurityGroup")]
    (storage,) = [k for k in groups_ if k.startswith("SharedStorageSecurityGroup")]
    assert to_group[seeds] == {("tcp", 135, 135), ("tcp", 445, 445)}
    assert to_group[scaling] == {("tcp", 445, 445)}
    assert to_group[storage] == {(p, a, b) for p in ("tcp", "udp") for a, b in ((111, 111), (2049, 2049), (20001, 20003))}


def test_cluster_ports_are_open_between_nodes_only(synthesized):
    node = node_security_group_id(synthesized, "prod")
    ingress = [r["Properties"] for r in resources(synthesized, "prod", "AWS::EC2::SecurityGroupIngress").values()
               if r["Properties"]["GroupId"] == {"Fn::GetAtt": [node, "GroupId"]}]
    assert ingress and all("CidrIp" not in rule for rule in ingress)
    from_nodes = {(r["IpProtocol"], r["FromPort"], r["ToPort"]) for r in ingress
                  if r.get("SourceSecurityGroupId") == {"Fn::GetAtt": [node, "GroupId"]}}
    assert from_nodes == {
        ("tcp", 19000, 19003), ("tcp", 19080, 19081), ("tcp", 20000, 30000), ("tcp", 49152, 65534),
    }  # SMB and RPC: only on the set-up groups, per node type (test_node_hardening.py)
    sources = {json.dumps(r["SourceSecurityGroupId"]) for r in ingress}
    assert len(sources) == 4  # nodes, HTTP gateway clients, management and application load balancers


def load_balancers(synthesized, env):
    found = resources(synthesized, env, "AWS::ElasticLoadBalancingV2::LoadBalancer")
    return {lb["Properties"]["Name"]: (k, lb["Properties"]) for k, lb in found.items()}


def listeners_of(synthesized, env, logical_id):
    return sorted(
        l["Properties"]["Port"] for l in resources(synthesized, env, "AWS::ElasticLoadBalancingV2::Listener").values()
        if l["Properties"]["LoadBalancerArn"] == {"Ref": logical_id}
    )


@pytest.mark.parametrize("env", ["dev", "staging", "prod"])
def test_management_load_balancer_listens_on_19000_and_19080_for_management_cidrs_only(synthesized, env):
    balancers = load_balancers(synthesized, env)
    assert set(balancers) == {f"telemetry-{env}-mgmt", f"telemetry-{env}-apps"}
    logical_id, props = balancers[f"telemetry-{env}-mgmt"]
    assert props["Type"] == "network"
    assert props["Scheme"] == "internal"
    assert listeners_of(synthesized, env, logical_id) == [19000, 19080]
    attributes = {a["Key"]: a["Value"] for a in props["LoadBalancerAttributes"]}
    assert attributes["load_balancing.cross_zone.enabled"] == "true"
    assert attributes["access_logs.s3.enabled"] == "true"
    # Production's endpoints cannot be deleted by a stack update gone wrong.
    for _, balancer in balancers.values():
        protection = {a["Key"]: a["Value"] for a in balancer["LoadBalancerAttributes"]}.get("deletion_protection.enabled")
        assert protection == ("true" if env == "prod" else "false"), (env, protection)
    (group_ref,) = props["SecurityGroups"]
    group = synthesized(env).stacks["service_fabric"]["Resources"][group_ref["Fn::GetAtt"][0]]["Properties"]
    cidrs = {(r["CidrIp"], r["FromPort"]) for r in group["SecurityGroupIngress"]}
    assert cidrs == {(c, p) for c in config(env).management_cidrs for p in (19000, 19080)}
    assert "0.0.0.0/0" not in json.dumps(group)
    target_groups = [t["Properties"] for t in resources(synthesized, env, "AWS::ElasticLoadBalancingV2::TargetGroup").values()]
    health = {t["Port"]: (t["HealthCheckProtocol"], t["HealthCheckPort"]) for t in target_groups}
    assert health[19000] == ("TCP", "19000") and health[19080] == ("TCP", "19080")


def test_application_load_balancer_forwards_configured_ports_to_every_node(synthesized):
    logical_id, props = load_balancers(synthesized, "prod")["telemetry-prod-apps"]
    assert props["Scheme"] == "internet-facing"
    assert listeners_of(synthesized, "prod", logical_id) == [443, 8883]
    assert load_balancers(synthesized, "dev")["telemetry-dev-apps"][1]["Scheme"] == "internal"
    assert len(scaling_group(synthesized, "prod")["Properties"]["TargetGroupARNs"]) == 4  # 19000, 19080, 443, 8883
    # Seeds are instance targets of every target group: reached on their fixed primary address.
    seeds = set(resources(synthesized, "prod", "AWS::EC2::Instance"))
    for target_group in resources(synthesized, "prod", "AWS::ElasticLoadBalancingV2::TargetGroup").values():
        props = target_group["Properties"]
        assert props["TargetType"] == "instance"
        assert {t["Id"]["Ref"] for t in props["Targets"]} == seeds


def test_load_balancer_access_logs_go_to_a_secure_bucket(synthesized):
    policies = json.dumps(resources(synthesized, "prod", "AWS::S3::BucketPolicy"))
    assert "delivery.logs.amazonaws.com" in policies
    assert policies.count('"aws:SecureTransport": "false"') == 2
    buckets = resources(synthesized, "prod", "AWS::S3::Bucket").values()
    logs = next(b for b in buckets if "LoggingConfiguration" in b["Properties"])
    assert logs["Properties"]["LifecycleConfiguration"]["Rules"][0]["ExpirationInDays"] == 365
    assert logs["DeletionPolicy"] == "RetainExceptOnCreate"


@pytest.mark.parametrize("env", ["dev", "prod"])
def test_shared_storage_is_fsx_for_openzfs_over_nfs3_reached_by_nodes_only(synthesized, env):
    """Windows' NFS client speaks v3, EFS only v4: the nodes get FSx for OpenZFS, and no EFS."""
    settings = config(env)
    assert resources(synthesized, env, "AWS::EFS::FileSystem") == {}
    assert resources(synthesized, env, "AWS::EFS::MountTarget") == {}
    (file_system,) = resources(synthesized, env, "AWS::FSx::FileSystem").values()
    props = file_system["Properties"]
    assert props["FileSystemType"] == "OPENZFS"
    assert props["StorageCapacity"] == settings.shared_storage_gib
    assert "KmsKeyId" in props
    zfs = props["OpenZFSConfiguration"]
    assert zfs["DeploymentType"] == settings.shared_storage_deployment
    assert zfs["ThroughputCapacity"] == settings.shared_storage_throughput_mbps
    assert zfs["AutomaticBackupRetentionDays"] == settings.shared_storage_backup_days > 0
    (export,) = zfs["RootVolumeConfiguration"]["NfsExports"]
    clients = sorted(c["Clients"] for c in export["ClientConfigurations"])
    network = synthesized(env).stacks["network"]["Resources"]
    private = sorted(
        r["Properties"]["CidrBlock"]
        for r in network.values()
        if r["Type"] == "AWS::EC2::Subnet"
        and {"Key": "aws-cdk:subnet-type", "Value": "Private"} in r["Properties"].get("Tags", [])
    )
    assert clients == private and len(clients) == 3  # the node subnets, nothing wider
    assert all("no_root_squash" in c["Options"] for c in export["ClientConfigurations"])
    assert file_system["DeletionPolicy"] == ("RetainExceptOnCreate" if env == "prod" else "Delete")
    # NFS (portmapper, nfs, mount/lock/status daemons), TCP and UDP, from the node group only.
    node = node_security_group_id(synthesized, env)
    storage_group = props["SecurityGroupIds"][0]["Fn::GetAtt"][0]
    ingress = [
        (r["IpProtocol"], r["FromPort"], r["ToPort"], json.dumps(r["SourceSecurityGroupId"]))
        for r in (x["Properties"] for x in resources(synthesized, env, "AWS::EC2::SecurityGroupIngress").values())
        if r["GroupId"] == {"Fn::GetAtt": [storage_group, "GroupId"]}
    ]
    source = json.dumps({"Fn::GetAtt": [node, "GroupId"]})
    assert sorted(ingress) == sorted(
        (protocol, low, high, source) for protocol in ("tcp", "udp") for low, high in ((111, 111), (2049, 2049), (20001, 20003))
    )


def role_statements(synthesized, env, role_prefix):
    statements = []
    for policy in resources(synthesized, env, "AWS::IAM::Policy").values():
        if any(role_prefix in json.dumps(r) for r in policy["Properties"]["Roles"]):
            statements += policy["Properties"]["PolicyDocument"]["Statement"]
    return statements


def actions(statements):
    return {a for s in statements for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])}


def test_node_roles_hold_only_what_a_node_needs(synthesized):
    from stacks.constructs.instance_core import AGENT_ACTIONS

    scaling = [s for s in role_statements(synthesized, "prod", "ScalingNodeRole") if s["Effect"] == "Allow"]
    assert actions(scaling) == {
        "secretsmanager:GetSecretValue", "secretsmanager:DescribeSecret", "logs:CreateLogStream",
        "logs:PutLogEvents", "cloudwatch:PutMetricData",
        # The SSM agent's Run Command output (create-cluster, cluster-nodes): it finds the group
        # (a list call) and lists its streams, on the node log group (log_group.py).
        "logs:DescribeLogGroups", "logs:DescribeLogStreams",
        # The SSM agent (AmazonSSMManagedInstanceCore's actions), and its parameter reads narrowed
        # to the environment's own parameters (instance_core.py).
        *(action for group in AGENT_ACTIONS for action in group), "ssm:GetParameter", "ssm:GetParameters",
        # The node log group's key, through CloudWatch Logs only (log_group.grant_key_through_logs).
        "kms:Encrypt", "kms:Decrypt", "kms:GenerateDataKey",
    }
    key = next(s for s in scaling if "kms:Encrypt" in actions([s]))
    assert key["Condition"] == {"StringEquals": {"kms:ViaService": "logs.eu-west-1.amazonaws.com"}}
    streams = next(s for s in scaling if "logs:DescribeLogStreams" in actions([s]))
    assert "NodeLogs" in json.dumps(streams["Resource"])
    secret = next(s for s in scaling if "secretsmanager:GetSecretValue" in actions([s]))
    assert "secret:telemetry-prod/service-fabric/cluster-certificate-??????" in json.dumps(secret["Resource"])
    metrics = next(s for s in scaling if "cloudwatch:PutMetricData" in actions([s]))
    assert metrics["Condition"] == {"StringEquals": {"cloudwatch:namespace": "Telemetry/ServiceFabricNodes"}}
    parameters = next(s for s in scaling if "ssm:GetParameter" in actions([s]))
    arn = "arn:aws:ssm:eu-west-1:333333333333:parameter/telemetry-prod"
    assert sorted(parameters["Resource"]) == [f"{arn}/applications/*", f"{arn}/msk/bootstrap-brokers-iam",
                                              f"{arn}/service-fabric/gateway-thumbprint"]  # fmt: skip
    seed = [s for s in role_statements(synthesized, "prod", "SeedNodeRole") if s["Effect"] == "Allow"]
    assert actions(seed) == actions(scaling)  # a seed's address needs no EC2 permission at all
    roles = resources(synthesized, "prod", "AWS::IAM::Role")
    assert not [k for k, r in roles.items() if "NodeRole" in k and r["Properties"].get("ManagedPolicyArns")]


def node_role_policy(synthesized, role: str):
    """The node role's statements as IAM reads them (the partition resolved), for moto's evaluator."""
    from moto.iam.access_control import IAMPolicy

    from tests.msk_authorization import Elsewhere, Referenced, resolve

    pseudo = Referenced({"AWS::Partition": "aws", "AWS::Region": "eu-west-1", "AWS::AccountId": "333333333333",
                         "AWS::URLSuffix": "amazonaws.com"})
    statements = [resolve(s, pseudo=pseudo, imports=Elsewhere(), attributes=Elsewhere())
                  for s in role_statements(synthesized, "prod", role)]
    return IAMPolicy(json.dumps({"Version": "2012-10-17", "Statement": statements}))


@pytest.mark.parametrize("role", ["SeedNodeRole", "ScalingNodeRole"])
def test_a_node_reads_its_environments_parameters_and_not_the_platforms_secret_ones(synthesized, role):
    """The role's own statements (no AmazonSSMManagedInstanceCore, whose parameter reads on "*" it
    leaves out), evaluated with moto's IAM evaluator (Deny first, then Allow) for the names the
    tools write: its environment's parameters only, and of those not the platform's secrets."""
    from moto.iam.access_control import PermissionResult

    policy = node_role_policy(synthesized, role)
    arn = "arn:aws:ssm:eu-west-1:333333333333:parameter"
    for name in ("/telemetry-prod/msk/topics-token/0f1e2d3c4b5a69788796a5b4c3d2e1f0", "/telemetry-dev/msk/topics-token/x",
                 "/telemetry-prod/devices/telemetry-prod-device-000001", "/telemetry-staging/devices/telemetry-staging-device-000007",
                 # another environment's, another application's
                 "/telemetry-staging/msk/bootstrap-brokers-iam", "/payroll/database-password",
                 # its own environment's, but not one its applications read (added later: a secret)
                 "/telemetry-prod/msk/topics-reconciled", "/telemetry-prod/some-later-secret"):
        for action in ("ssm:GetParameter", "ssm:GetParameters"):
            assert policy.is_action_permitted(action, f"{arn}{name}") != PermissionResult.PERMITTED, (action, name)
    # Another region's, and any path read at all (a path read returns what lies under it, denies on
    # the children notwithstanding).
    assert policy.is_action_permitted(
        "ssm:GetParameter", "arn:aws:ssm:us-east-1:333333333333:parameter/telemetry-prod/msk/bootstrap-brokers-iam"
    ) != PermissionResult.PERMITTED
    for path in ("/telemetry-prod", "/telemetry-prod/msk", "/"):
        assert policy.is_action_permitted("ssm:GetParametersByPath", f"{arn}{path}") != PermissionResult.PERMITTED, path
    # A seed reads whether the cluster was created (prepare_node.ps1, before a deployment account); no other node does.
    created = policy.is_action_permitted("ssm:GetParameter", f"{arn}/telemetry-prod/service-fabric/cluster-created")
    assert (created == PermissionResult.PERMITTED) is (role == "SeedNodeRole")
    # What a node's applications read stays readable: the gateway thumbprint, the brokers, their settings.
    for name in ("/telemetry-prod/service-fabric/gateway-thumbprint", "/telemetry-prod/msk/bootstrap-brokers-iam",
                 "/telemetry-prod/applications/ingest/max-batch"):
        assert policy.is_action_permitted("ssm:GetParameter", f"{arn}{name}") == PermissionResult.PERMITTED, name


def test_nodes_reach_kafka_through_its_client_group(synthesized):
    for template in resources(synthesized, "dev", "AWS::EC2::LaunchTemplate").values():
        assert "ClientSecurityGroup" in json.dumps(template["Properties"]["LaunchTemplateData"]["SecurityGroupIds"])


def test_outputs_give_the_management_explorer_and_application_endpoints(synthesized):
    outputs = synthesized("prod").stacks["service_fabric"]["Outputs"]
    assert json.dumps(outputs["ManagementEndpoint"]["Value"]).endswith('":19000"]]}')
    assert '"https://"' in json.dumps(outputs["ExplorerUrl"]["Value"])
    assert ":19080/Explorer" in json.dumps(outputs["ExplorerUrl"]["Value"])
    assert "DNSName" in json.dumps(outputs["ApplicationEndpoint"]["Value"])
    assert '"https://"' in json.dumps(outputs["HttpGatewayEndpoint"]["Value"])
    seeds = json.loads(outputs["Seeds"]["Value"])
    assert [s["address"] for s in seeds] == PROD_SEED_ADDRESSES
    assert [s["name"] for s in seeds] == [f"seed-{i}" for i in range(5)]
    assert seeds[3]["fault_domain"] == seeds[0]["fault_domain"] != seeds[1]["fault_domain"]  # one per zone
    assert outputs["ClusterCertificateSecret"]["Value"] == "telemetry-prod/service-fabric/cluster-certificate"
    assert outputs["CreateClusterDocumentName"]["Value"] == "telemetry-prod-create-sf-cluster"


def test_alarms_on_impaired_seeds_and_an_unreachable_management_endpoint(synthesized):
    alarms = [a["Properties"] for a in resources(synthesized, "prod", "AWS::CloudWatch::Alarm").values()]
    seed_alarms = [a for a in alarms if a.get("MetricName", "").startswith("StatusCheckFailed")]
    assert len(seed_alarms) == 10
    endpoint = [a for a in alarms if a.get("MetricName") == "HealthyHostCount"]
    assert len(endpoint) == 1
    for alarm in seed_alarms + endpoint:
        assert "ImportValue" in json.dumps(alarm["AlarmActions"])  # the monitoring stack's topic


def test_dashboard_shows_the_cluster_by_literal_names(synthesized):
    (dashboard,) = [r for r in synthesized("prod").stacks["monitoring"]["Resources"].values() if r["Type"] == "AWS::CloudWatch::Dashboard"]
    body = json.dumps(dashboard["Properties"]["DashboardBody"])
    assert "Service Fabric cluster `telemetry-prod-sf`" in body
    assert "telemetry-prod-sf-scaling" in body
    assert "alarm:telemetry-prod-sf-seed-4-recovery" in body and "alarm:telemetry-prod-sf-seed-4-impaired" in body
    assert "net/telemetry-prod-mgmt/" in body and "net/telemetry-prod-apps/" in body
    # Only pseudo parameters: a reference to this stack would make monitoring depend on it.
    assert "ImportValue" not in body
    assert set(re.findall(r'"Ref": "([^"]+)"', body)) <= {"AWS::Region", "AWS::Partition", "AWS::AccountId"}


def test_create_cluster_document_is_rendered_with_this_environment(synthesized):
    documents = {d["Properties"]["Name"]: d for d in resources(synthesized, "prod", "AWS::SSM::Document").values()}
    assert set(documents) == {"telemetry-prod-create-sf-cluster", "telemetry-prod-sf-cluster-nodes"}
    props = documents["telemetry-prod-create-sf-cluster"]["Properties"]
    params = props["Content"]["parameters"]
    assert "rendered" not in json.dumps(params)
    # The seeds' generated deployment password, not the certificate secret (#33).
    assert "certificateSecret" not in params
    assert params["deploymentSecret"]["default"] == "telemetry-prod/service-fabric/seed-deployment-password"
    assert params["deploymentAccount"]["default"] == "sfdeploy"
