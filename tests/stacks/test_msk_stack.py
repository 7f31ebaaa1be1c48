"""MSK stack: the cluster, its configuration, bootstrap broker parameter, alarms and widgets."""

from __future__ import annotations

import json

import pytest
from aws_cdk.assertions import Match

from stacks import capacity, sizing
from stacks.config import load_environment
from stacks.naming import topic_admin_role_name
from tests.conftest import ENVIRONMENTS, cdk_context
from tests.msk_authorization import cluster_arn_attributes, resolve, role_policy_statements
from tests.stacks.test_sizing import changed

BROKERS = {"dev": 3, "staging": 3, "prod": 6}


def cluster(synthesized, env) -> dict:
    (resource,) = synthesized(env).template("msk").find_resources("AWS::MSK::Cluster").values()
    return resource


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_broker_count_type_and_storage_follow_config(synthesized, env):
    props = cluster(synthesized, env)["Properties"]
    assert props["NumberOfBrokerNodes"] == BROKERS[env]
    assert props["ClusterName"] == f"telemetry-{env}"
    assert props["KafkaVersion"] == "3.9.x"
    nodes = props["BrokerNodeGroupInfo"]
    assert nodes["InstanceType"] == ("kafka.m7g.xlarge" if env == "prod" else "kafka.m7g.large")
    # Sized from the workload (test_sizing.py): staging and prod keep 12 h on the brokers and the
    # rest of the topic's retention in the remote tier; dev's 24 h is below MSK's 72 h minimum.
    assert nodes["StorageInfo"]["EBSStorageInfo"]["VolumeSize"] == {"dev": 300, "staging": 1100, "prod": 1600}[env]
    assert props.get("StorageMode") == {"dev": None, "staging": "TIERED", "prod": "TIERED"}[env]
    # One client subnet per zone, in the isolated tier.
    assert len(nodes["ClientSubnets"]) == 3
    assert all("Isolated" in json.dumps(s) for s in nodes["ClientSubnets"])


def test_tls_only_iam_and_scram_auth_and_customer_managed_key(synthesized):
    props = cluster(synthesized, "prod")["Properties"]
    assert props["EncryptionInfo"]["EncryptionInTransit"] == {"ClientBroker": "TLS", "InCluster": True}
    # SCRAM beside IAM for the AWS IoT Kafka action, which cannot sign in with IAM.
    assert props["ClientAuthentication"] == {
        "Sasl": {"Iam": {"Enabled": True}, "Scram": {"Enabled": True}},
        "Unauthenticated": {"Enabled": False},
    }
    key_ref = props["EncryptionInfo"]["EncryptionAtRest"]["DataVolumeKMSKeyId"]
    key_id = key_ref["Fn::GetAtt"][0]
    template = synthesized("prod").stacks["msk"]
    key = template["Resources"][key_id]
    assert key["Type"] == "AWS::KMS::Key"
    assert key["Properties"]["EnableKeyRotation"] is True


def test_monitoring_and_broker_logs(synthesized):
    props = cluster(synthesized, "prod")["Properties"]
    assert props["EnhancedMonitoring"] == "PER_TOPIC_PER_BROKER"
    logs = props["LoggingInfo"]["BrokerLogs"]["CloudWatchLogs"]
    assert logs["Enabled"] is True and "Ref" in logs["LogGroup"]
    synthesized("prod").template("msk").has_resource_properties("AWS::Logs::LogGroup", {"RetentionInDays": 90})


def test_configuration_is_tuned_for_durable_ingestion(synthesized):
    template = synthesized("prod").template("msk")
    ((config_id, config),) = template.find_resources("AWS::MSK::Configuration").items()
    lines = set(config["Properties"]["ServerProperties"].splitlines())
    assert {
        "auto.create.topics.enable=false",
        "default.replication.factor=3",
        "min.insync.replicas=2",
        "unclean.leader.election.enable=false",
        "log.retention.hours=168",
        "allow.everyone.if.no.acl.found=false",
    } <= lines
    assert config["Properties"]["KafkaVersionsList"] == ["3.9.x"]
    info = cluster(synthesized, "prod")["Properties"]["ConfigurationInfo"]
    assert info == {
        "Arn": {"Fn::GetAtt": [config_id, "Arn"]},
        "Revision": {"Fn::GetAtt": [config_id, "LatestRevision.Revision"]},
    }


@pytest.mark.parametrize(("env", "deletion", "replacement"),
                         [("prod", "RetainExceptOnCreate", "Retain"), ("dev", "Delete", "Delete")])
def test_data_is_retained_in_production_only(synthesized, env, deletion, replacement):
    """Production keeps the cluster when its stack is deleted or it is replaced, but not when the
    operation that created it rolls back (a failed first deployment leaves nothing behind)."""
    assert cluster(synthesized, env)["DeletionPolicy"] == deletion
    assert cluster(synthesized, env)["UpdateReplacePolicy"] == replacement


def test_brokers_admit_only_the_iam_and_scram_ports_from_their_client_groups(synthesized):
    template = synthesized("dev").template("msk")
    groups = template.find_resources("AWS::EC2::SecurityGroup")
    for group in groups.values():
        assert "SecurityGroupIngress" not in group["Properties"], "no inline (CIDR) ingress on any group"
    ingress = template.find_resources("AWS::EC2::SecurityGroupIngress")
    by_port = {}
    for rule in ingress.values():
        props = rule["Properties"]
        assert props["IpProtocol"] == "tcp" and props["FromPort"] == props["ToPort"]
        assert "SourceSecurityGroupId" in props and "CidrIp" not in props
        by_port[props["FromPort"]] = props["SourceSecurityGroupId"]["Fn::GetAtt"][0]
    assert set(by_port) == {9098, 9096} and len(ingress) == 2
    assert by_port[9098].startswith("KafkaClientSecurityGroup")
    assert by_port[9096].startswith("KafkaScramClientSecurityGroup")


def test_bootstrap_brokers_are_read_at_deploy_time_and_published(synthesized):
    template = synthesized("prod").template("msk")
    (lookup,) = template.find_resources("Custom::AWS").values()
    create = json.dumps(lookup["Properties"]["Create"])
    assert '\\"service\\":\\"Kafka\\"' in create and '\\"action\\":\\"GetBootstrapBrokers\\"' in create
    assert "BootstrapBrokerStringSaslIam" in create
    template.has_resource_properties(
        "AWS::SSM::Parameter",
        {
            "Name": "/telemetry-prod/msk/bootstrap-brokers-iam",
            "Type": "String",
            "Value": {"Fn::GetAtt": [Match.any_value(), "BootstrapBrokerStringSaslIam"]},
        },
    )
    # The lookup function's role may call GetBootstrapBrokers and nothing else; on "*", since the
    # action takes no resource in IAM's catalogue (a statement naming the cluster would never match).
    policies = template.find_resources("AWS::IAM::Policy")
    statements = [s for p in policies.values() for s in p["Properties"]["PolicyDocument"]["Statement"]]
    (get_brokers,) = [s for s in statements if s["Action"] == "kafka:GetBootstrapBrokers"]
    assert get_brokers["Resource"] == "*"
    roles = template.find_resources("AWS::IAM::Role")
    assert not any("ManagedPolicyArns" in r["Properties"] for r in roles.values())


@pytest.mark.parametrize("env", ["dev", "prod"])
def test_alarms_cover_cpu_disk_partitions_and_controller(synthesized, env):
    template = synthesized(env).template("msk")
    alarms = template.find_resources("AWS::CloudWatch::Alarm")
    brokers = BROKERS[env]
    assert len(alarms) == 3 * brokers + 3
    text = json.dumps(alarms)
    for metric in ("CpuUser", "CpuSystem", "KafkaDataLogsDiskUsed", "OfflinePartitionsCount",
                   "UnderReplicatedPartitions", "ActiveControllerCount", "BytesInPerSec",
                   "ReplicationBytesInPerSec"):
        assert f'"MetricName": "{metric}"' in text, metric
    for alarm in alarms.values():
        props = alarm["Properties"]
        # Every alarm goes to the environment's alarm topic, imported from the monitoring stack.
        assert len(props["AlarmActions"]) == 1 and "Fn::ImportValue" in props["AlarmActions"][0]
        assert props["OKActions"] == props["AlarmActions"]
        assert props["AlarmName"].startswith(f"telemetry-{env}-msk-")


def test_cpu_alarm_threshold_from_config(synthesized):
    template = synthesized("dev").template("msk")
    template.has_resource_properties(
        "AWS::CloudWatch::Alarm", {"AlarmName": "telemetry-dev-msk-Broker1Cpu", "Threshold": 60, "EvaluationPeriods": 15}
    )
    template.has_resource_properties(
        "AWS::CloudWatch::Alarm", {"AlarmName": "telemetry-dev-msk-Broker3Disk", "Threshold": 85}
    )


def bytes_in_alarms(template) -> dict[int, dict]:
    """Broker id -> the properties of its bytes-in alarm."""
    alarms = template.find_resources("AWS::CloudWatch::Alarm")
    found = {}
    for alarm in alarms.values():
        props = alarm["Properties"]
        if props["AlarmName"].endswith("BytesIn"):
            (broker,) = {d["Value"] for m in props["Metrics"] if "MetricStat" in m
                         for d in m["MetricStat"]["Metric"]["Dimensions"] if d["Name"] == "Broker ID"}
            found[int(broker)] = props
    return found


def test_prod_pages_per_broker_when_the_brokers_take_in_more_than_sizing_assumed(synthesized):
    """Issue 45: a compression ratio declared too high is found by an alarm, not by a full disk."""
    config = load_environment(cdk_context()["environments"], "prod")
    alarms = bytes_in_alarms(synthesized("prod").template("msk"))
    assert sorted(alarms) == list(range(1, BROKERS["prod"] + 1))
    # The fullest broker's 24 replicas of 48 partitions at 73,800 msg/s of 512 bytes at 1.5x, times 1.5.
    assert sizing.broker_bytes_in_alarm_bytes_s(config) == pytest.approx(73_800 * 512 / 1.5 / 48 * 24 * 1.5)
    for broker, props in alarms.items():
        assert props["Threshold"] == pytest.approx(sizing.broker_bytes_in_alarm_bytes_s(config))
        assert props["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
        assert props["EvaluationPeriods"] == 3 and props["TreatMissingData"] == "notBreaching"
        (expression,) = [m for m in props["Metrics"] if "Expression" in m]
        stats = [m["MetricStat"] for m in props["Metrics"] if "MetricStat" in m]
        # What the volume fills with: client bytes into its leaders plus replication into its followers.
        assert sorted(s["Metric"]["MetricName"] for s in stats) == ["BytesInPerSec", "ReplicationBytesInPerSec"]
        assert all(s["Period"] == 300 and s["Stat"] == "Average" for s in stats)
        assert all({d["Name"]: d["Value"] for d in s["Metric"]["Dimensions"]}
                   == {"Cluster Name": "telemetry-prod", "Broker ID": str(broker)} for s in stats)
        assert "+" in expression["Expression"]
        description = props["AlarmDescription"]
        assert "more than sizing assumed at workload.compression_ratio 1.5" in description
        assert "`telemetry compression`" in description and "`telemetry capacity --env prod`" in description
        # Replication is counted, so long copying pages too, and the text says so.
        assert "A partition reassignment, or a replaced broker rebuilding its replicas" in description
        assert len(description) <= 1024  # AlarmDescription's maximum (CloudWatch PutMetricAlarm)


def test_the_bytes_in_threshold_follows_the_declared_ratio_and_a_ratio_too_high_by_the_margin_reaches_it():
    config = load_environment(cdk_context()["environments"], "prod")
    declared = config.workload.compression_ratio
    threshold = sizing.broker_bytes_in_alarm_bytes_s(config)
    assert sizing.broker_bytes_in_alarm_bytes_s(changed("prod", workload__compression_ratio=2 * declared)) == (
        pytest.approx(threshold / 2))
    topic = sizing.sink_topic(config)

    def fullest_broker_bytes_s(ratio: float) -> float:
        """What the fullest broker takes in at the declared peak if payloads compress `ratio`: the
        model's storage path (GiB an hour the fullest broker keeps)."""
        truth = changed("prod", workload__compression_ratio=ratio)
        workload = sizing.workload_of(truth, rate=truth.workload.peak_messages_per_second)
        return capacity.broker_gib_per_hour(workload, partitions=topic.partitions,
                                            replication_factor=topic.replication_factor,
                                            broker_count=config.msk.broker_count) * capacity.GIB / 3600  # fmt: skip

    # As declared, the brokers stay below the alarm at the peak; a ratio 1.5x too optimistic pages.
    assert fullest_broker_bytes_s(declared) < threshold
    assert fullest_broker_bytes_s(declared / sizing.BYTES_IN_ALARM_MARGIN) == pytest.approx(threshold)
    assert sizing.BYTES_IN_ALARM_MARGIN == 1.5


def test_at_default_monitoring_the_bytes_in_alarm_counts_the_leaders_clients_write_only():
    """DEFAULT publishes no ReplicationBytesInPerSec: the alarm takes the fullest broker's leaders."""
    from aws_cdk import App, Stack
    from aws_cdk import aws_cloudwatch as cloudwatch
    from aws_cdk import aws_sns as sns
    from aws_cdk.assertions import Template

    from stacks.constructs.msk_monitoring import MskMonitoring

    config = changed("prod", msk__enhanced_monitoring="DEFAULT")
    full = sizing.broker_bytes_in_alarm_bytes_s(load_environment(cdk_context()["environments"], "prod"))
    # 8 leaders of the fullest broker's 24 replicas.
    assert sizing.broker_bytes_in_alarm_bytes_s(config) == pytest.approx(full / 3)
    stack = Stack(App(), "Monitoring")
    MskMonitoring(stack, "Msk", cluster_name="c", broker_count=6, cpu_alarm_percent=60, disk_alarm_percent=85,
                  bytes_in_alarm_bytes_s=sizing.broker_bytes_in_alarm_bytes_s(config),
                  bytes_in_counts_replication=sizing.bytes_in_counts_replication(config), compression_ratio=1.5,
                  environment="prod", alarm_topic=sns.Topic(stack, "Topic"),
                  dashboard=cloudwatch.Dashboard(stack, "Dashboard"))  # fmt: skip
    alarms = bytes_in_alarms(Template.from_stack(stack))
    assert len(alarms) == 6
    for props in alarms.values():
        names = [m["MetricStat"]["Metric"]["MetricName"] for m in props["Metrics"] if "MetricStat" in m]
        assert names == ["BytesInPerSec"]
        assert props["Threshold"] == pytest.approx(full / 3)
        assert "(from clients)" in props["AlarmDescription"]


# What telemetry/commands/topics.py's Kafka requests need (MSK Developer Guide, "Semantics of IAM
# authorization policy actions and resources"): Metadata, DescribeConfigs, CreateTopics,
# CreatePartitions, IncrementalAlterConfigs; and the required actions those rows name.
TOPIC_ADMIN_TOPIC_ACTIONS = {
    "kafka-cluster:DescribeTopic",
    "kafka-cluster:CreateTopic",
    "kafka-cluster:AlterTopic",
    "kafka-cluster:DescribeTopicDynamicConfiguration",
    "kafka-cluster:AlterTopicDynamicConfiguration",
}


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_the_topic_administrator_holds_exactly_the_topic_and_acl_actions(synthesized, env):
    config = load_environment(cdk_context()["environments"], env)
    template = synthesized(env).stacks["msk"]
    (role_id,) = [
        logical_id
        for logical_id, resource in template["Resources"].items()
        if resource["Type"] == "AWS::IAM::Role" and logical_id.startswith("TopicAdministratorRole")
    ]
    role = template["Resources"][role_id]["Properties"]
    assert role["RoleName"] == topic_admin_role_name(config)  # telemetry/commands/topics.py --assume-role's name
    assert "ManagedPolicyArns" not in role and "PermissionsBoundary" not in role
    pseudo = {"AWS::Partition": "aws", "AWS::Region": config.region, "AWS::AccountId": config.account}
    # Only the environment's operators named in config, with MFA; no service, no other account.
    assert resolve(role["AssumeRolePolicyDocument"]["Statement"], pseudo=pseudo, imports={}) == [
        {
            "Action": "sts:AssumeRole",
            "Condition": {
                "Bool": {"aws:MultiFactorAuthPresent": "true"},
                "ArnLike": {"aws:PrincipalArn": [f"arn:aws:iam::{config.account}:user/telemetry-{env}-operators/*"]},
            },
            "Effect": "Allow",
            "Principal": {"AWS": f"arn:aws:iam::{config.account}:root"},
        }
    ]

    cluster_arn = f"arn:aws:kafka:{config.region}:{config.account}:cluster/{config.resource_prefix}/uuid-1"
    statements = resolve(
        role_policy_statements(template, role_id),
        pseudo=pseudo,
        imports={},
        attributes=cluster_arn_attributes(template, cluster_arn),
    )
    granted = set()
    for statement in statements:
        assert set(statement) == {"Effect", "Action", "Resource"}, statement  # no Condition, NotAction
        assert statement["Effect"] == "Allow"
        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        resources = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
        granted |= {(action, resource) for action in actions for resource in resources}
    topic_prefix = f"arn:aws:kafka:{config.region}:{config.account}:topic/{config.resource_prefix}/uuid-1/"
    # Connect, plus the SCRAM users' ACLs: Describe/Create/DeleteAcls need Kafka's DESCRIBE and
    # ALTER on the cluster.
    cluster_actions = ("kafka-cluster:Connect", "kafka-cluster:DescribeCluster", "kafka-cluster:AlterCluster")
    assert granted == {(action, cluster_arn) for action in cluster_actions} | {
        (action, topic_prefix + topic.name) for action in TOPIC_ADMIN_TOPIC_ACTIONS for topic in config.msk.topics
    }
    outputs = template["Outputs"]
    assert outputs["TopicAdministratorRoleArn"]["Value"] == {"Fn::GetAtt": [role_id, "Arn"]}
