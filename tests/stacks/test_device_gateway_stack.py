"""Device gateway stack: devices into MSK through an AWS IoT topic rule's Kafka action."""

from __future__ import annotations

import json
import re

import pytest

from stacks.config import load_environment
from stacks.naming import device_credentials_path
from tests.conftest import ENVIRONMENTS, cdk_context
from tests.msk_authorization import resolve

# The VPC destination role's policy as the AWS IoT Developer Guide prints it, "Apache Kafka Virtual
# Private Cloud (VPC) destinations" (https://docs.aws.amazon.com/iot/latest/developerguide/kafka-vpc-destination.html),
# copied here rather than imported so that a change to the construct cannot move both sides.
GUIDE_VPC_DESTINATION_STATEMENTS = [
    {
        "Effect": "Allow",
        "Action": [
            "ec2:CreateNetworkInterface",
            "ec2:DescribeNetworkInterfaces",
            "ec2:DescribeVpcs",
            "ec2:DeleteNetworkInterface",
            "ec2:DescribeSubnets",
            "ec2:DescribeVpcAttribute",
            "ec2:DescribeSecurityGroups",
        ],
        "Resource": "*",
    },
    {
        "Effect": "Allow",
        "Action": "ec2:CreateNetworkInterfacePermission",
        "Resource": "*",
        "Condition": {"StringEquals": {"ec2:ResourceTag/VPCDestinationENI": "true"}},
    },
    {
        "Effect": "Allow",
        "Action": ["ec2:CreateTags"],
        "Resource": "*",
        "Condition": {
            "StringEquals": {"ec2:CreateAction": "CreateNetworkInterface", "aws:RequestTag/VPCDestinationENI": "true"}
        },
    },
]


def resources(synthesized, kind: str, env: str = "dev") -> dict[str, dict]:
    template = synthesized(env).stacks["device_gateway"]
    return {k: v for k, v in template["Resources"].items() if v["Type"] == kind}


def only(synthesized, kind: str, env: str = "dev") -> tuple[str, dict]:
    (item,) = resources(synthesized, kind, env).items()
    return item


def scram_key(synthesized, env: str = "dev") -> tuple[str, dict]:
    (item,) = [(k, v) for k, v in resources(synthesized, "AWS::KMS::Key", env).items() if k.startswith("ScramUser")]
    return item


def rule(synthesized, env: str = "dev") -> dict:
    return only(synthesized, "AWS::IoT::TopicRule", env)[1]["Properties"]


def role_statements(synthesized, logical_prefix: str, env: str = "dev") -> list[dict]:
    (role,) = [v for k, v in resources(synthesized, "AWS::IAM::Role", env).items() if k.startswith(logical_prefix)]
    return [s for p in role["Properties"]["Policies"] for s in p["PolicyDocument"]["Statement"]]


def actions_of(statement: dict) -> set[str]:
    return set([statement["Action"]] if isinstance(statement["Action"], str) else statement["Action"])


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_rule_reads_its_environments_device_topics_and_takes_the_device_id_from_the_topic(synthesized, env):
    payload = rule(synthesized, env)["TopicRulePayload"]
    assert rule(synthesized, env)["RuleName"] == f"telemetry_{env}_device_telemetry"
    # The payload as the device sent it: nothing added whose place in the JSON AWS leaves open.
    assert payload["Sql"] == f"SELECT * FROM 'telemetry/{env}/+/data'"
    assert payload["AwsIotSqlVersion"] == "2016-03-23"
    assert payload["RuleDisabled"] is False


def test_kafka_action_keys_by_device_reads_only_the_topic_and_acks_1(synthesized):
    (action,) = rule(synthesized)["TopicRulePayload"]["Actions"]
    kafka = action["Kafka"]
    assert kafka["Topic"] == "telemetry"
    assert kafka["Key"] == "${topic(3)}"  # telemetry/dev/<thing>/data
    # The thing name, the sink's device id. Nothing from the payload: a template over a field a
    # malformed payload lacks has no documented value ("Substitution templates").
    assert kafka["Headers"] == [{"Key": "iot_thing_name", "Value": "${topic(3)}"}]
    templates = re.findall(r"\$\{([^}]*)\}", json.dumps({k: v for k, v in kafka.items() if k != "ClientProperties"}))
    assert templates and all(re.fullmatch(r"topic\(\d+\)", t) for t in templates), templates
    assert "TelemetryRuleDestination" in kafka["DestinationArn"]["Fn::GetAtt"][0]
    props = kafka["ClientProperties"]
    assert props["acks"] == "1"  # the Kafka action accepts only 0 or 1
    # The one value the action page gives for each: the key as text, the value as the payload's bytes.
    assert (props["key.serializer"], props["value.serializer"]) == ("StringSerializer", "ByteBufferSerializer")
    assert props["security.protocol"] == "SASL_SSL"
    assert props["sasl.mechanism"] == "SCRAM-SHA-512"
    assert props["bootstrap.servers"]["Fn::GetAtt"][1] == "BootstrapBrokerStringSaslScram"


def test_scram_credentials_come_from_get_secret_under_the_rule_role(synthesized):
    (action,) = rule(synthesized)["TopicRulePayload"]["Actions"]
    props = action["Kafka"]["ClientProperties"]
    secret_id, _ = only(synthesized, "AWS::SecretsManager::Secret")
    for field in ("username", "password"):
        parts = props[f"sasl.scram.{field}"]["Fn::Join"][1]
        assert parts[0] == "${get_secret('"
        assert parts[1] == {"Ref": secret_id}
        assert parts[2] == f"', 'SecretString', '{field}', '"
        assert parts[3]["Fn::GetAtt"][0].startswith("TelemetryRuleRuleRole")
        assert parts[4] == "')}"
    assert "password" not in json.dumps(synthesized("dev").stacks["device_gateway"]["Outputs"]).lower()


def test_error_action_sends_every_failed_message_as_json_to_its_own_queue(synthesized):
    (error_key,) = rule(synthesized)["TopicRulePayload"]["ErrorAction"]
    error = rule(synthesized)["TopicRulePayload"]["ErrorAction"]["Sqs"]
    queues = resources(synthesized, "AWS::SQS::Queue")
    assert error_key == "Sqs"
    assert error["QueueUrl"]["Ref"].startswith("FailedDeliveriesQueue")
    assert error["QueueUrl"]["Ref"] in queues
    assert error["UseBase64"] is False  # the body is the error action message, JSON
    assert error["RoleArn"]["Fn::GetAtt"][0].startswith("TelemetryRuleRuleRole")
    outputs = synthesized("dev").stacks["device_gateway"]["Outputs"]
    assert outputs["FailedDeliveriesQueueUrl"]["Value"] == error["QueueUrl"]


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_the_failed_deliveries_queue_keeps_14_days_encrypted_over_tls_and_prod_keeps_it(synthesized, env):
    error = rule(synthesized, env)["TopicRulePayload"]["ErrorAction"]["Sqs"]
    queue = resources(synthesized, "AWS::SQS::Queue", env)[error["QueueUrl"]["Ref"]]
    assert queue["Properties"]["QueueName"] == f"telemetry-{env}-device-failed-deliveries"
    assert queue["Properties"]["MessageRetentionPeriod"] == 14 * 24 * 3600  # the most SQS allows
    assert queue["Properties"]["SqsManagedSseEnabled"] is True
    assert queue["DeletionPolicy"] == ("RetainExceptOnCreate" if env == "prod" else "Delete")
    (policy,) = resources(synthesized, "AWS::SQS::QueuePolicy", env).values()
    (deny,) = policy["Properties"]["PolicyDocument"]["Statement"]
    assert deny["Effect"] == "Deny" and deny["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}


def test_failed_deliveries_alarm_while_waiting_and_four_days_before_sqs_deletes_them(synthesized):
    alarms = {a["Properties"]["AlarmName"]: a["Properties"] for a in resources(synthesized, "AWS::CloudWatch::Alarm").values()
              if isinstance(a["Properties"].get("AlarmName"), str)}
    waiting = alarms["telemetry-dev-device-gateway-FailedDeliveriesWaiting"]
    expiring = alarms["telemetry-dev-device-gateway-FailedDeliveriesExpiring"]
    for alarm in (waiting, expiring):
        assert alarm["TreatMissingData"] == "notBreaching"
    # Visible and in flight (held by a replay, or left hidden by one that was killed) both wait.
    assert {metric for _, metric, _, _ in watched(waiting)} == {
        "ApproximateNumberOfMessagesVisible", "ApproximateNumberOfMessagesNotVisible"}
    (expression,) = [q["Expression"] for q in waiting["Metrics"] if "Expression" in q]
    assert expression == "visible + hidden" and waiting["Threshold"] == 1
    assert watched(expiring) == [("AWS/SQS", "ApproximateAgeOfOldestMessage", {"QueueName"}, "Maximum")]
    assert expiring["Threshold"] == 10 * 24 * 3600


def test_vpc_destination_uses_private_subnets_the_scram_client_group_and_a_network_role(synthesized):
    _, destination = only(synthesized, "AWS::IoT::TopicRuleDestination")
    vpc = destination["Properties"]["VpcProperties"]
    assert destination["Properties"]["Status"] == "ENABLED"
    assert len(vpc["SubnetIds"]) == 3
    assert all("PrivateSubnet" in json.dumps(s) for s in vpc["SubnetIds"])
    (group,) = vpc["SecurityGroups"]
    assert "ScramClientSecurityGroup" in json.dumps(group)  # imported from the MSK stack
    assert vpc["RoleArn"]["Fn::GetAtt"][0].startswith("TelemetryRuleDestinationRole")


def normalized(statement: dict) -> tuple:
    """A statement as IAM reads it: the order of actions and of condition values does not matter."""
    as_set = lambda v: frozenset([v] if isinstance(v, str) else v)  # noqa: E731
    condition = statement.get("Condition", {})
    return (
        statement["Effect"],
        as_set(statement["Action"]),
        as_set(statement["Resource"]),
        frozenset((op, key, as_set(values)) for op, pairs in condition.items() for key, values in pairs.items()),
    )


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_vpc_destination_role_is_the_iot_guides_policy_statement_for_statement(synthesized, env):
    statements = role_statements(synthesized, "TelemetryRuleDestinationRole", env)
    assert sorted(map(normalized, statements), key=repr) == sorted(
        map(normalized, GUIDE_VPC_DESTINATION_STATEMENTS), key=repr
    )


def allowed(statements: list[dict], action: str, context: dict[str, str]) -> bool:
    """Whether an identity policy of Allow statements allows `action` on a request with `context`,
    by the IAM User Guide's rules ("Policy evaluation logic"; "IAM JSON policy elements: Condition
    operators"): some statement names the action (case-insensitively) and every condition holds;
    within a condition every key must match one of its values; key names are case-insensitive,
    StringEquals values case-sensitive; a key absent from the request matches nothing. Anything
    else (Deny, NotAction, another operator, a narrower Resource) is refused, not approximated."""
    request = {k.lower(): v for k, v in context.items()}
    for statement in statements:
        if statement["Effect"] != "Allow" or "NotAction" in statement or statement["Resource"] != "*":
            raise NotImplementedError(f"not evaluated here: {statement}")
        if action.lower() not in {a.lower() for a in actions_of(statement)}:
            continue
        conditions = statement.get("Condition", {})
        if set(conditions) - {"StringEquals"}:
            raise NotImplementedError(f"not evaluated here: {conditions}")
        pairs = conditions.get("StringEquals", {})
        if all(
            request.get(key.lower()) in ([values] if isinstance(values, str) else values)
            for key, values in pairs.items()
        ):
            return True
    return False


def test_vpc_destination_role_lets_the_rules_engine_tag_and_share_only_its_own_interfaces(synthesized):
    """The requests EC2 authorizes when the rules engine creates a tagged interface and then shares
    it, and the ones the role must still refuse. Tags given to CreateNetworkInterface are authorized
    as ec2:CreateTags with ec2:CreateAction (Amazon EC2 User Guide, "Grant permission to tag Amazon
    EC2 resources during creation"). The "Apache Kafka" rule action page's policy has no CreateTags:
    under it a tagged create is refused, and any interface may be shared."""
    statements = role_statements(synthesized, "TelemetryRuleDestinationRole")
    assert allowed(statements, "ec2:CreateNetworkInterface", {})
    created_with_tag = {"ec2:CreateAction": "CreateNetworkInterface", "aws:RequestTag/VPCDestinationENI": "true"}
    assert allowed(statements, "ec2:CreateTags", created_with_tag)
    # Tagging an interface that already exists, or with any other value, or at another create: refused.
    assert not allowed(statements, "ec2:CreateTags", {"aws:RequestTag/VPCDestinationENI": "true"})
    assert not allowed(statements, "ec2:CreateTags", {**created_with_tag, "aws:RequestTag/VPCDestinationENI": "false"})
    assert not allowed(statements, "ec2:CreateTags", {**created_with_tag, "ec2:CreateAction": "RunInstances"})
    assert not allowed(statements, "ec2:CreateTags", {"ec2:CreateAction": "CreateNetworkInterface"})
    # Sharing only the rules engine's interfaces.
    assert allowed(statements, "ec2:CreateNetworkInterfacePermission", {"ec2:ResourceTag/VPCDestinationENI": "true"})
    assert not allowed(statements, "ec2:CreateNetworkInterfacePermission", {})
    assert not allowed(statements, "ec2:CreateNetworkInterfacePermission", {"ec2:ResourceTag/VPCDestinationENI": "false"})
    assert not allowed(statements, "ec2:DeleteTags", created_with_tag)


def test_rule_role_reads_exactly_its_secret_and_writes_exactly_its_queue(synthesized):
    secret_id, _ = only(synthesized, "AWS::SecretsManager::Secret")
    key_id, _ = scram_key(synthesized)
    by_actions = {frozenset(actions_of(s)): s for s in role_statements(synthesized, "TelemetryRuleRuleRole")}
    assert set(by_actions) == {
        frozenset({"secretsmanager:GetSecretValue", "secretsmanager:DescribeSecret"}),
        frozenset({"kms:Decrypt"}),
        frozenset({"sqs:SendMessage"}),
    }
    assert by_actions[frozenset({"secretsmanager:GetSecretValue", "secretsmanager:DescribeSecret"})]["Resource"] == {
        "Ref": secret_id
    }
    decrypt = by_actions[frozenset({"kms:Decrypt"})]
    assert decrypt["Resource"] == {"Fn::GetAtt": [key_id, "Arn"]}
    assert decrypt["Condition"]["StringEquals"]["kms:ViaService"] == "secretsmanager.eu-west-1.amazonaws.com"
    send = by_actions[frozenset({"sqs:SendMessage"})]
    assert send["Resource"]["Fn::GetAtt"][0].startswith("FailedDeliveriesQueue")


def test_only_this_accounts_iot_rule_may_assume_the_rule_role(synthesized):
    (role,) = [v for k, v in resources(synthesized, "AWS::IAM::Role").items() if k.startswith("TelemetryRuleRuleRole")]
    (trust,) = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Principal"] == {"Service": "iot.amazonaws.com"}
    assert trust["Condition"]["StringEquals"] == {"aws:SourceAccount": "111111111111"}
    assert trust["Condition"]["ArnLike"]["aws:SourceArn"].endswith(":rule/telemetry_dev_device_telemetry")


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_scram_secret_is_named_for_msk_encrypted_with_its_own_key_and_associated(synthesized, env):
    secret_id, secret = only(synthesized, "AWS::SecretsManager::Secret", env)
    key_id, key = scram_key(synthesized, env)
    props = secret["Properties"]
    assert props["Name"] == f"AmazonMSK_telemetry-{env}-device-gateway"
    assert props["KmsKeyId"] == {"Fn::GetAtt": [key_id, "Arn"]}
    generated = props["GenerateSecretString"]
    assert json.loads(generated["SecretStringTemplate"]) == {"username": "iot-device-gateway"}
    assert generated["GenerateStringKey"] == "password"
    assert key["Properties"]["EnableKeyRotation"] is True
    _, association = only(synthesized, "AWS::MSK::BatchScramSecret", env)
    assert association["Properties"]["SecretArnList"] == [{"Ref": secret_id}]
    assert "Kafka" in json.dumps(association["Properties"]["ClusterArn"])  # imported from the MSK stack
    # The rule signs in only once the secret is associated.
    assert any(d.startswith("ScramUserAssociation") for d in rule_resource(synthesized, env).get("DependsOn", []))


def rule_resource(synthesized, env):
    return only(synthesized, "AWS::IoT::TopicRule", env)[1]


def test_key_lets_msk_decrypt_only_through_secrets_manager(synthesized):
    _, key = scram_key(synthesized)
    (msk,) = [s for s in key["Properties"]["KeyPolicy"]["Statement"] if s.get("Sid") == "AllowMskToReadTheScramSecret"]
    assert set(msk["Action"]) == {"kms:Decrypt", "kms:DescribeKey"}
    assert "AWSServiceRoleForKafka" in json.dumps(msk["Principal"])
    assert msk["Condition"] == {"StringEquals": {"kms:ViaService": "secretsmanager.eu-west-1.amazonaws.com"}}


def test_device_policy_connects_as_its_own_thing_and_publishes_only_its_topic(synthesized):
    _, policy = only(synthesized, "AWS::IoT::Policy")
    assert policy["Properties"]["PolicyName"] == "telemetry-dev-device"
    connect, publish = policy["Properties"]["PolicyDocument"]["Statement"]
    assert (connect["Effect"], connect["Action"]) == ("Allow", "iot:Connect")
    assert connect["Resource"] == "arn:aws:iot:eu-west-1:111111111111:client/${iot:Connection.Thing.ThingName}"
    assert connect["Condition"] == {
        "Bool": {"iot:Connection.Thing.IsAttached": "true"},
        # Only things of this environment (the attribute telemetry devices provision sets).
        "StringEquals": {"iot:Connection.Thing.Attributes[environment]": "dev"},
    }
    assert (publish["Effect"], publish["Action"]) == ("Allow", "iot:Publish")
    assert publish["Resource"] == (
        "arn:aws:iot:eu-west-1:111111111111:topic/telemetry/dev/${iot:Connection.Thing.ThingName}/data"
    )
    assert publish["Condition"] == {"StringEquals": {"iot:Connection.Thing.Attributes[environment]": "dev"}}


def test_msk_cluster_adds_a_scram_listener_beside_iam_reachable_from_the_scram_group_only(synthesized):
    template = synthesized("dev").stacks["msk"]
    (cluster,) = [v for v in template["Resources"].values() if v["Type"] == "AWS::MSK::Cluster"]
    auth = cluster["Properties"]["ClientAuthentication"]
    assert auth["Sasl"] == {"Iam": {"Enabled": True}, "Scram": {"Enabled": True}}
    assert auth["Unauthenticated"] == {"Enabled": False}
    assert cluster["Properties"]["EncryptionInfo"]["EncryptionInTransit"]["ClientBroker"] == "TLS"
    ingress = [
        v["Properties"] for v in template["Resources"].values() if v["Type"] == "AWS::EC2::SecurityGroupIngress"
    ]
    scram = [r for r in ingress if r["FromPort"] == 9096]
    assert len(scram) == 1 and scram[0]["ToPort"] == 9096
    assert scram[0]["SourceSecurityGroupId"]["Fn::GetAtt"][0].startswith("KafkaScramClientSecurityGroup")


ALARMS = {
    "telemetry-dev-device-gateway-KafkaActionFailures": "Failure",
    "telemetry-dev-device-gateway-ErrorActionFailures": "ErrorActionFailure",
    "telemetry-dev-device-gateway-RuleThrottles": "RuleMessageThrottled",
}

DESTINATION_ALARMS = {
    "telemetry-dev-device-gateway-DestinationCheckFailed",
    "telemetry-dev-device-gateway-DestinationReEnabled",
    "telemetry-dev-device-gateway-DestinationCheckNotRunning",
    "telemetry-dev-device-gateway-FailedDeliveriesWaiting",
    "telemetry-dev-device-gateway-FailedDeliveriesExpiring",
}
QUOTA_ALARMS = {
    "telemetry-dev-device-gateway-PublishThrottles",
    "telemetry-dev-device-gateway-ConnectThrottles",
    "telemetry-dev-device-gateway-PublishRateNearQuota",
    "telemetry-dev-device-gateway-ConnectRateNearQuota",
}


def alarms_by_name(synthesized) -> dict[str, dict]:
    return {a["Properties"]["AlarmName"]: a["Properties"] for a in resources(synthesized, "AWS::CloudWatch::Alarm").values()}


# AWS IoT Developer Guide, "AWS IoT metrics and dimensions": each metric's dimensions as the page
# gives them ("Rule metrics": RuleName; "Rule action metrics": RuleName and ActionType; "Message
# broker metrics": Protocol). The page lists no ActionType values.
DOCUMENTED_DIMENSIONS = {
    # Lambda Developer Guide, "Types of metrics for Lambda functions": Errors by FunctionName.
    "Errors": {"FunctionName"},
    "Invocations": {"FunctionName"},
    # Our own, from lambdas/device_gateway/destination_keeper.py's Embedded Metric Format line.
    "TopicRuleDestinationReEnabled": {"Environment"},
    # SQS Developer Guide, "Available CloudWatch metrics for Amazon SQS": by QueueName; a gauge,
    # so its alarms take the Maximum.
    "ApproximateNumberOfMessagesVisible": {"QueueName"},
    "ApproximateNumberOfMessagesNotVisible": {"QueueName"},
    "ApproximateAgeOfOldestMessage": {"QueueName"},
    "RuleMessageThrottled": {"RuleName"},
    "TopicMatch": {"RuleName"},
    "ParseError": {"RuleName"},
    "Success": {"RuleName", "ActionType"},
    "Failure": {"RuleName", "ActionType"},
    "ErrorActionSuccess": {"RuleName", "ActionType"},
    "ErrorActionFailure": {"RuleName", "ActionType"},
    "PublishIn.Throttle": {"Protocol"},
    "PublishIn.Success": {"Protocol"},
    "Connect.Throttle": {"Protocol"},
    "Connect.ClientIDThrottle": {"Protocol"},
    "Connect.Success": {"Protocol"},
}
INSIGHTS = re.compile(
    r'^SELECT SUM\((?P<metric>[\w.]+)\) FROM SCHEMA\("(?P<namespace>[^"]+)", (?P<dims>[\w, ]+)\) '
    r"WHERE RuleName = '(?P<rule>[^']+)'$"
)


def watched(alarm: dict) -> list[tuple[str, str, set[str], str]]:
    """(namespace, metric, dimension names, statistic) of every metric an alarm reads."""
    found = []
    if "MetricName" in alarm:
        found.append((alarm["Namespace"], alarm["MetricName"], {d["Name"] for d in alarm["Dimensions"]}, alarm["Statistic"]))
    for query in alarm.get("Metrics", []):
        if "MetricStat" in query:
            stat = query["MetricStat"]
            metric = stat["Metric"]
            found.append((metric["Namespace"], metric["MetricName"], {d["Name"] for d in metric["Dimensions"]}, stat["Stat"]))
        elif query["Expression"].startswith("SELECT"):
            match = INSIGHTS.match(query["Expression"])
            assert match, query["Expression"]
            assert match["rule"] == "telemetry_dev_device_telemetry"
            dims = {d.strip() for d in match["dims"].split(",")}
            found.append((match["namespace"], match["metric"], dims, "Sum"))
    return found


def test_rule_failures_and_error_action_failures_alarm_to_the_alarm_topic(synthesized):
    alarms = alarms_by_name(synthesized)
    assert set(alarms) == set(ALARMS) | QUOTA_ALARMS | DESTINATION_ALARMS
    for name, metric in ALARMS.items():
        alarm = alarms[name]
        (query,) = alarm["Metrics"]
        assert watched(alarm) == [("AWS/IoT", metric, DOCUMENTED_DIMENSIONS[metric], "Sum")]
        if "MetricStat" in query:  # a rule metric: RuleName is its one dimension
            assert query["MetricStat"]["Metric"]["Dimensions"] == [{"Name": "RuleName", "Value": "telemetry_dev_device_telemetry"}]
        else:  # an action metric: every ActionType of the rule, whatever AWS calls it
            assert query["Period"] == 300
        assert alarm["Threshold"] == 1
        assert "AlarmsTopic" in json.dumps(alarm["AlarmActions"])
        assert "AlarmsTopic" in json.dumps(alarm["OKActions"])


def test_every_gateway_alarm_reads_a_metric_by_the_dimensions_the_service_documents(synthesized):
    for name, alarm in alarms_by_name(synthesized).items():
        for namespace, metric, dimensions, statistic in watched(alarm):
            assert namespace == {
                "Errors": "AWS/Lambda",
                "Invocations": "AWS/Lambda",
                "TopicRuleDestinationReEnabled": "Telemetry/DeviceGateway",
                "ApproximateNumberOfMessagesVisible": "AWS/SQS",
                "ApproximateNumberOfMessagesNotVisible": "AWS/SQS",
                "ApproximateAgeOfOldestMessage": "AWS/SQS",
            }.get(metric, "AWS/IoT"), name
            assert DOCUMENTED_DIMENSIONS[metric] == dimensions, name
            # every count is summed per period; the queue's gauges take their Maximum
            assert statistic == ("Maximum" if namespace == "AWS/SQS" else "Sum"), name


def test_mqtt_throttles_and_rates_near_the_account_quotas_alarm(synthesized):
    settings = load_environment(cdk_context()["environments"], "dev").device_gateway
    alarms = alarms_by_name(synthesized)

    def metric_stats(alarm: dict) -> dict[str, tuple[str, int]]:
        return {
            q["Id"]: (q["MetricStat"]["Metric"]["MetricName"], q["MetricStat"]["Period"])
            for q in alarm["Metrics"]
            if "MetricStat" in q
        }

    for alarm in (alarms[name] for name in QUOTA_ALARMS):
        for query in (q for q in alarm["Metrics"] if "MetricStat" in q):
            metric = query["MetricStat"]["Metric"]
            assert metric["Namespace"] == "AWS/IoT"
            assert metric["Dimensions"] == [{"Name": "Protocol", "Value": "MQTT"}]
            assert query["MetricStat"]["Stat"] == "Sum"
        assert "AlarmsTopic" in json.dumps(alarm["AlarmActions"])

    publish_throttles = alarms["telemetry-dev-device-gateway-PublishThrottles"]
    assert list(metric_stats(publish_throttles).values()) == [("PublishIn.Throttle", 300)]
    assert publish_throttles["Threshold"] == 1
    connect = alarms["telemetry-dev-device-gateway-ConnectThrottles"]
    assert sorted(name for name, _ in metric_stats(connect).values()) == ["Connect.ClientIDThrottle", "Connect.Throttle"]
    assert connect["Threshold"] == 1

    for name, metric, quota in (
        ("PublishRateNearQuota", "PublishIn.Success", settings.publish_quota_per_s),
        ("ConnectRateNearQuota", "Connect.Success", settings.connect_quota_per_s),
    ):
        alarm = alarms[f"telemetry-dev-device-gateway-{name}"]
        # One-minute sums divided by 60 (a rate per second) against the configured share of the quota.
        assert list(metric_stats(alarm).values()) == [(metric, 60)]
        (expression,) = [q["Expression"] for q in alarm["Metrics"] if "Expression" in q]
        assert expression == "m / 60"
        assert alarm["Threshold"] == quota * settings.quota_alarm_percent / 100
        assert alarm["EvaluationPeriods"] == 3


def test_dashboard_names_the_rule_literally(synthesized):
    monitoring = synthesized("dev").stacks["monitoring"]
    (dashboard,) = [v for v in monitoring["Resources"].values() if v["Type"] == "AWS::CloudWatch::Dashboard"]
    body = json.dumps(dashboard["Properties"]["DashboardBody"])
    assert "telemetry_dev_device_telemetry" in body
    assert "ErrorActionFailure" in body
    assert "DeviceGateway" not in json.dumps(monitoring.get("Parameters", {}))


def test_fleet_hosts_read_device_credentials_under_their_path_only_and_decrypt_through_ssm(synthesized):
    config = load_environment(cdk_context()["environments"], "dev")
    template = synthesized("dev").stacks["device_gateway"]
    ((key_id, key),) = [(k, v) for k, v in resources(synthesized, "AWS::KMS::Key").items() if k.startswith("DeviceCredentials")]
    assert key["Properties"]["EnableKeyRotation"] is True
    ((_, policy),) = [(k, v) for k, v in resources(synthesized, "AWS::IAM::Policy").items() if k.startswith("FleetReads")]
    (role,) = policy["Properties"]["Roles"]
    assert "Fn::ImportValue" in role  # the simulator fleet stack's role
    pseudo = {"AWS::Partition": "aws", "AWS::Region": config.region, "AWS::AccountId": config.account}
    statements = resolve(
        policy["Properties"]["PolicyDocument"]["Statement"], pseudo=pseudo, imports={},
        attributes={f"{key_id}.Arn": "KEY"},
    )  # fmt: skip
    path = f"arn:aws:ssm:{config.region}:{config.account}:parameter{device_credentials_path(config)}"
    assert statements == [
        {"Action": "ssm:GetParametersByPath", "Effect": "Allow", "Resource": path},
        {"Action": ["ssm:GetParameter", "ssm:GetParameters"], "Effect": "Allow", "Resource": f"{path}/*"},
        {
            "Action": "kms:Decrypt",
            "Condition": {"StringEquals": {"kms:ViaService": f"ssm.{config.region}.amazonaws.com"}},
            "Effect": "Allow",
            "Resource": "KEY",
        },
    ]
    outputs = template["Outputs"]
    assert outputs["DeviceCredentialsKeyArn"]["Value"] == {"Fn::GetAtt": [key_id, "Arn"]}
    assert outputs["DeviceCredentialsPath"]["Value"] == device_credentials_path(config)


def test_a_payload_that_carries_device_id_passes_the_rule_unchanged_with_the_thing_name_beside_it(synthesized):
    """The synthesized rule, evaluated as AWS documents it (devtools/iot_rule_bridge.py): the device's
    own device_id stays as sent, and the thing name travels in the key and a header."""
    from simulator.payload import TelemetryTemplate
    from devtools.iot_rule_bridge import KafkaRule

    rule_ = KafkaRule.from_template(synthesized("dev").stacks["device_gateway"])
    template = TelemetryTemplate(run_id="r", producer_id="h", process_index=0, devices=[0], message_bytes=300)
    payload = template.render(0, 3, 1_764_000_000_000_000_000, 0)
    topic = "telemetry/dev/thing-0/data"
    document = KafkaRule.message(payload)

    assert rule_.select(topic, document) == json.loads(payload)
    assert rule_.substitute(rule_.key, topic, document) == "thing-0"
    assert {k: rule_.substitute(v, topic, document) for k, v in rule_.headers} == {"iot_thing_name": "thing-0"}


def test_the_rule_takes_a_malformed_payload_as_sent_keyed_by_the_topic(synthesized):
    """A payload that is not JSON goes through `SELECT *` as binary ("Working with binary payloads"),
    and one without the reading's fields as it is: the action reads only the topic, so neither
    fails it. A `${field}` template over either would have no documented value: refused."""
    import dataclasses

    from devtools.iot_rule_bridge import KafkaRule, UndocumentedRuleBehaviour

    shipped = KafkaRule.from_template(synthesized("dev").stacks["device_gateway"])
    topic = "telemetry/dev/thing-0/data"
    for payload in (b"\xff\xfe binary", b"not json", b'{"seq": 1}'):
        document = KafkaRule.message(payload)
        written = shipped.value(topic, payload, document)
        assert (json.loads(written) == document) if document is not None else (written == payload)
        assert shipped.substitute(shipped.key, topic, document) == "thing-0"
        assert [shipped.substitute(v, topic, document) for _, v in shipped.headers] == ["thing-0"]
    with_field = dataclasses.replace(shipped, headers=(("device_sent_ns", "${sent_ns}"),))
    with pytest.raises(UndocumentedRuleBehaviour, match="not JSON"):
        with_field.substitute(with_field.headers[0][1], topic, KafkaRule.message(b"not json"))
    with pytest.raises(UndocumentedRuleBehaviour, match="not in the payload"):
        with_field.substitute(with_field.headers[0][1], topic, KafkaRule.message(b'{"seq": 1}'))
    with pytest.raises(UndocumentedRuleBehaviour, match="not an object"):
        KafkaRule.message(b"[1, 2]")


def test_the_rule_stand_in_refuses_an_alias_that_repeats_a_payload_key(synthesized):
    """The old rule's alias, SELECT *, topic(n) AS device_id, over a payload with device_id: the SQL reference
    does not say which key the output keeps, so the stand-in refuses to guess (and the sink rejects
    duplicate keys)."""
    import dataclasses

    from devtools.iot_rule_bridge import KafkaRule, UndocumentedRuleBehaviour

    shipped = KafkaRule.from_template(synthesized("dev").stacks["device_gateway"])
    old = dataclasses.replace(shipped, select_items=("*", "topic(3) AS device_id"))
    with pytest.raises(UndocumentedRuleBehaviour, match="'topic\\(3\\) AS device_id' names a key the payload already has"):
        old.select("telemetry/dev/thing-0/data", {"device_id": "thing-0", "seq": 1})
    assert old.select("telemetry/dev/thing-0/data", {"seq": 1}) == {"seq": 1, "device_id": "thing-0"}


def test_the_destination_is_checked_hourly_by_a_function_that_may_touch_only_it(synthesized):
    template = synthesized("dev").stacks["device_gateway"]
    (destination_id, _) = only(synthesized, "AWS::IoT::TopicRuleDestination")
    (function,) = [
        r["Properties"] for r in resources(synthesized, "AWS::Lambda::Function").values()
        if r["Properties"].get("Handler") == "destination_keeper.handler"
    ]  # fmt: skip
    assert function["Environment"]["Variables"]["DESTINATION_ARN"] == {"Fn::GetAtt": [destination_id, "Arn"]}
    (schedule,) = [
        r["Properties"] for r in resources(synthesized, "AWS::Events::Rule").values()
        if r["Properties"].get("ScheduleExpression")
    ]  # fmt: skip
    assert schedule["ScheduleExpression"] == "rate(1 hour)"
    statements = [
        st for r in resources(synthesized, "AWS::IAM::Policy").values()
        if r["Properties"]["PolicyName"].startswith("DestinationKeeper")
        for st in r["Properties"]["PolicyDocument"]["Statement"]
    ]  # fmt: skip
    (role_id,) = [k for k in resources(synthesized, "AWS::IAM::Role") if k.startswith("TelemetryRuleDestinationRole")]
    (logs_id,) = [k for k in resources(synthesized, "AWS::Logs::LogGroup") if k.startswith("DestinationKeeperLogs")]
    (key_id,) = [k for k in resources(synthesized, "AWS::KMS::Key") if k.startswith("LogsKey")]
    assert statements == [
        {
            # Its own log group only (no AWSLambdaBasicExecutionRole: every log group of the account).
            "Action": ["logs:CreateLogStream", "logs:PutLogEvents"],
            "Effect": "Allow",
            "Resource": {"Fn::GetAtt": [logs_id, "Arn"]},
        },
        {
            # That group's key, through CloudWatch Logs only.
            "Action": ["kms:Decrypt", "kms:Encrypt", "kms:GenerateDataKey"],
            "Condition": {"StringEquals": {"kms:ViaService": "logs.eu-west-1.amazonaws.com"}},
            "Effect": "Allow",
            "Resource": {"Fn::GetAtt": [key_id, "Arn"]},
        },
        {
            "Action": ["iot:GetTopicRuleDestination", "iot:UpdateTopicRuleDestination"],
            "Effect": "Allow",
            "Resource": {"Fn::GetAtt": [destination_id, "Arn"]},
        },
        {
            # Enabling rebuilds the destination's network interfaces under its role.
            "Action": "iam:PassRole",
            "Condition": {"StringEquals": {"iam:PassedToService": "iot.amazonaws.com"}},
            "Effect": "Allow",
            "Resource": {"Fn::GetAtt": [role_id, "Arn"]},
        },
    ]  # fmt: skip
    assert "TopicRuleDestination" in json.dumps(template["Resources"][destination_id])


def test_a_destination_check_that_stops_running_alarms_after_two_silent_hours(synthesized):
    """Lambda publishes Invocations only for periods with invocations: no data is the signal."""
    alarms = {a["Properties"]["AlarmName"]: a["Properties"] for a in resources(synthesized, "AWS::CloudWatch::Alarm").values()
              if isinstance(a["Properties"].get("AlarmName"), str)}
    alarm = alarms["telemetry-dev-device-gateway-DestinationCheckNotRunning"]
    assert (alarm["Namespace"], alarm["MetricName"], alarm["Statistic"]) == ("AWS/Lambda", "Invocations", "Sum")
    assert (alarm["Period"], alarm["EvaluationPeriods"]) == (3600, 2)
    assert (alarm["ComparisonOperator"], alarm["Threshold"]) == ("LessThanThreshold", 1)
    assert alarm["TreatMissingData"] == "breaching"
