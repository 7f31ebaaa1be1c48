"""Two environments in one account, as docs/deploy.md offers: nothing of one reaches the other.

dev as shipped, and staging synthesized through the real app into dev's account (its cdk.json entry
with dev's account id; both are in eu-west-1): two whole environments as they would stand side by
side. What each service would decide is asked of the thing that decides it, as far as we can run it:

- AWS IoT: one message broker per account and region carries both environments' devices. A real
  MQTT broker (mosquitto, devtools/local_mosquitto.py) matches each environment's rule filter, as
  synthesized, against what a device of the other may publish (its synthesized device policy's
  Publish resource): the filter matching is the broker's, not ours.
- IAM: every role of one environment's templates, with its identity policies and the AWS managed
  policies it carries (moto's copies of AWS's documents), is evaluated by moto's IAM evaluator
  (moto/iam/access_control.py: explicit Deny first, then Allow; `*` globs) against every resource
  of the other environment that has a name: its parameters (and the names the tools write at run
  time), secrets (the operator's certificate secrets too), keys, queues, tables, log groups, state
  machines, functions, Run Command documents, instances (by the tags the conditions read), topics
  and lake objects. moto ignores conditions other than StringEquals, and applies StringEquals only
  to the values given: an Allow whose condition would not hold still counts as allowing here (so a
  "not permitted" below is not owed to an unevaluated condition); no Deny carries a condition.
- The topic administrator role's trust: the other environment's operators are not named.
"""

from __future__ import annotations

import copy
import fnmatch
import json
import re
from dataclasses import dataclass

import pytest

from stacks.config import load_environment
from stacks.naming import service_fabric_cluster_name
from tests.conftest import cdk_context, synthesize
from tests.msk_authorization import Referenced, resolve

# CDK's own custom-resource providers (S3 auto-delete, the default security group restriction,
# AwsCustomResource) run with AWSLambdaBasicExecutionRole, which may write any log group's streams:
# log writes only, by code CDK ships, so a CloudWatch Logs write of theirs is not counted here.
CDK_PROVIDER_ROLES = ("CustomS3AutoDeleteObjectsCustomResourceProviderRole", "CustomVpcRestrictDefaultSG", "AWS679f53fac002430cb0da5b7982bd2287")
LOG_WRITES = ("logs:CreateLogStream", "logs:PutLogEvents", "logs:CreateLogGroup")


@pytest.fixture(scope="module")
def side_by_side(synthesized, tmp_path_factory):
    environments = copy.deepcopy(cdk_context()["environments"])
    dev = environments["dev"]
    staging = environments["staging"]
    assert staging["region"] == dev["region"]
    staging["account"] = dev["account"]
    staging["msk"]["topic_administrators"] = [
        arn.replace(f"::{cdk_context()['environments']['staging']['account']}:", f"::{dev['account']}:")
        for arn in staging["msk"]["topic_administrators"]
    ]
    shared = synthesize("staging", tmp_path_factory.mktemp("cdk-staging-shared"), environments)
    return {"dev": synthesized("dev"), "staging": shared}, {
        name: load_environment(environments, name) for name in ("dev", "staging")
    }


# ---------------------------------------------------------------------------------------- IoT


def rule_filter(synthesis) -> str:
    from devtools.iot_rule_bridge import KafkaRule

    return KafkaRule.from_template(synthesis.stacks["device_gateway"]).topic_filter


def device_publish_topic(synthesis, config) -> str:
    """The one topic the device policy lets a device publish to, the thing name left as a variable."""
    (policy,) = [r for r in synthesis.stacks["device_gateway"]["Resources"].values() if r["Type"] == "AWS::IoT::Policy"]
    (publish,) = [s for s in policy["Properties"]["PolicyDocument"]["Statement"] if s["Action"] == "iot:Publish"]
    prefix = f"arn:aws:iot:{config.region}:{config.account}:topic/"
    assert publish["Resource"].startswith(prefix)
    return publish["Resource"].removeprefix(prefix)


def test_no_device_message_of_one_environment_reaches_the_others_rule(side_by_side, mqtt_pki, tmp_path):
    """Each environment's devices publish where their policy allows; the broker delivers each
    message to the rule filter of its own environment only."""
    from awscrt import mqtt

    from devtools import local_mosquitto
    from simulator.device_certificates import telemetry_topic
    from tests.mqtt_fixtures import THINGS, TopicReader

    syntheses, configs = side_by_side
    filters = {env: rule_filter(syntheses[env]) for env in syntheses}
    assert filters == {"dev": "telemetry/dev/+/data", "staging": "telemetry/staging/+/data"}
    for env, synthesis in syntheses.items():
        # The stand-in's ACL (telemetry_topic) is the synthesized policy's Publish resource.
        assert device_publish_topic(synthesis, configs[env]) == telemetry_topic(env, "${iot:Connection.Thing.ThingName}")

    thing = THINGS[0]
    for sender in syntheses:
        broker = local_mosquitto.start_mosquitto(tmp_path / sender, mqtt_pki, environment=sender, debug=False)
        readers = {env: TopicReader(broker, filters[env]) for env in syntheses}
        try:
            device = broker.device_connection(thing)
            topic = telemetry_topic(sender, thing)
            device.publish(topic, b"{}", mqtt.QoS.AT_LEAST_ONCE)[0].result(10)
            device.disconnect().result(5)
            assert readers[sender].wait_for(1) == [(topic, b"{}")]
            for env, reader in readers.items():
                if env != sender:
                    assert reader.wait_for(0, timeout=0.5) == [], f"{sender}'s device reached {env}'s rule"
        finally:
            for reader in readers.values():
                reader.close()
            broker.stop()


# ---------------------------------------------------------------------------------------- IAM


@dataclass(frozen=True)
class Role:
    stack: str
    logical_id: str
    policy: object  # moto IAMPolicy


def for_moto(statement: dict) -> dict:
    """The statement with its Resource patterns as moto's matcher needs them: moto turns `*` into
    the regular expression `.*` and leaves every other character as a regular expression
    (IAMPolicyStatement._match), while IAM's `?` is one character and `.` only a dot (IAM User Guide,
    "IAM JSON policy elements: Resource"). Escaped here, with `?` as one character."""
    def pattern(value: str) -> str:
        return re.escape(value).replace(r"\*", "*").replace(r"\?", ".")

    if "NotResource" in statement:
        raise AssertionError(f"moto does not evaluate NotResource: {statement}")
    resources = statement.get("Resource")
    if resources is None:
        return statement
    return {**statement, "Resource": [pattern(r) for r in resources] if isinstance(resources, list) else pattern(resources)}


def managed_statements(path: str) -> list[dict]:
    """An AWS managed policy's statements (moto keys them by name, without the path)."""
    from moto.iam.aws_managed_policies import aws_managed_policies_data

    return json.loads(aws_managed_policies_data)[path.rsplit("/", 1)[-1]]["Document"]["Statement"]


def roles_of(synthesis, config) -> list[Role]:
    from moto.iam.access_control import IAMPolicy

    pseudo = Referenced({"AWS::Partition": "aws", "AWS::Region": config.region, "AWS::AccountId": config.account,
                         "AWS::URLSuffix": "amazonaws.com"})
    roles = []
    for part, template in synthesis.stacks.items():
        resources = template["Resources"]
        for logical_id, resource in resources.items():
            if resource["Type"] != "AWS::IAM::Role":
                continue
            statements = []
            for policy in resources.values():
                if policy["Type"] == "AWS::IAM::Policy" and {"Ref": logical_id} in policy["Properties"].get("Roles", []):
                    statements += policy["Properties"]["PolicyDocument"]["Statement"]
            for inline in resource["Properties"].get("Policies", []):
                statements += inline["PolicyDocument"]["Statement"]
            for arn in resource["Properties"].get("ManagedPolicyArns", []):
                text = json.dumps(arn)  # a Fn::Join or Fn::Sub of the partition and the AWS managed policy's path
                assert ":iam::aws:policy/" in text, f"{logical_id}: a customer managed policy is not read here"
                statements += managed_statements(text.split(":iam::aws:policy/")[1].split('"')[0])
            resolved = [for_moto(resolve(s, pseudo=pseudo, imports=Referenced(), attributes=Referenced())) for s in statements]
            assert not [s for s in resolved if s["Effect"] == "Deny" and "Condition" in s], logical_id
            roles.append(Role(part, logical_id, IAMPolicy(json.dumps({"Version": "2012-10-17", "Statement": resolved}))))
    return roles


def named_resources(synthesis, config) -> list[tuple[tuple[str, ...], str, dict]]:
    """(actions, ARN, condition values) for every resource of the environment that has a name."""
    region, account, prefix = config.region, config.account, config.resource_prefix
    arn = lambda service, rest: f"arn:aws:{service}:{region}:{account}:{rest}"  # noqa: E731
    parameter_reads = ("ssm:GetParameter", "ssm:GetParameters", "ssm:GetParameterHistory", "ssm:PutParameter")
    found = [
        (parameter_reads, arn("ssm", f"parameter/{prefix}/msk/topics-token/0f1e2d3c4b5a69788796a5b4c3d2e1f0"), {}),
        (parameter_reads, arn("ssm", f"parameter/{prefix}/devices/{prefix}-device-000001"), {}),
        (("ssm:GetParametersByPath",), arn("ssm", f"parameter/{prefix}"), {}),
        (("ssm:GetParametersByPath",), arn("ssm", f"parameter/{prefix}/devices"), {}),
        (("secretsmanager:GetSecretValue",), arn("secretsmanager", f"secret:{config.service_fabric.cluster_certificate_secret}-AbCdEf"), {}),
        (("secretsmanager:GetSecretValue",), arn("secretsmanager", f"secret:{config.service_fabric.admin_certificate_secret}-AbCdEf"), {}),
        (("iot:Publish",), arn("iot", f"topic/telemetry/{config.name}/{prefix}-device-000001/data"), {}),
        (("s3:GetObject", "s3:PutObject", "s3:DeleteObject"), f"arn:aws:s3:::{prefix}-lake-bucket/telemetry/x.parquet", {}),
        (("kafka-cluster:Connect", "kafka-cluster:WriteData", "kafka-cluster:ReadData", "kafka-cluster:AlterCluster"),
         arn("kafka", f"cluster/{prefix}-msk/0a1b2c3d-0000-4000-8000-000000000001-2"), {}),
        (("kafka-cluster:WriteData", "kafka-cluster:ReadData"),
         arn("kafka", f"topic/{prefix}-msk/0a1b2c3d-0000-4000-8000-000000000001-2/telemetry"), {}),
    ]
    cluster = service_fabric_cluster_name(config)
    instance_tags = {"ssm:resourceTag/sf:cluster": cluster, "aws:ResourceTag/sf:cluster": cluster,
                     "ssm:resourceTag/sf:nodetype": "ScalingNodeType"}
    found.append((("ssm:SendCommand", "ec2:TerminateInstances"), arn("ec2", "instance/i-0ffffffffffffffff"), instance_tags))
    # CreateTags on an existing instance carries no ec2:CreateAction (set only when tags come with a
    # create call; EC2 User Guide, "Grant permission to tag Amazon EC2 resources during creation"),
    # and the caller picks the tags it asks for: here the VPC destination's. moto passes a condition
    # whose key the context lacks, which IAM does not ("If the key ... is not present in the request
    # context, the values do not match"), so the missing key is given a value no policy names.
    found.append((("ec2:CreateTags",), arn("ec2", "instance/i-0ffffffffffffffff"),
                  {**instance_tags, "ec2:CreateAction": "<not in the request>", "aws:RequestTag/VPCDestinationENI": "true"}))
    for template in synthesis.stacks.values():
        for logical_id, resource in template["Resources"].items():
            kind, properties = resource["Type"], resource.get("Properties", {})
            if kind == "AWS::SSM::Parameter":
                found.append((parameter_reads, arn("ssm", f"parameter/{properties['Name'].lstrip('/')}"), {}))
            elif kind == "AWS::SecretsManager::Secret":
                found.append((("secretsmanager:GetSecretValue", "secretsmanager:PutSecretValue"),
                              arn("secretsmanager", f"secret:{properties['Name']}-AbCdEf"), {}))
            elif kind == "AWS::KMS::Key":
                found.append((("kms:Decrypt", "kms:Encrypt", "kms:GenerateDataKey"), arn("kms", f"key/{prefix}-{logical_id}"), {}))
            elif kind == "AWS::SQS::Queue":
                found.append((("sqs:ReceiveMessage", "sqs:SendMessage", "sqs:DeleteMessage"), arn("sqs", properties["QueueName"]), {}))
            elif kind == "AWS::DynamoDB::GlobalTable":
                found.append((("dynamodb:PutItem", "dynamodb:GetItem", "dynamodb:DeleteItem"), arn("dynamodb", f"table/{properties['TableName']}"), {}))
            elif kind == "AWS::Logs::LogGroup" and isinstance(properties.get("LogGroupName"), str):
                name = properties["LogGroupName"]
                found.append((LOG_WRITES, arn("logs", f"log-group:{name}:log-stream:x"), {}))
                found.append((("logs:GetLogEvents", "logs:FilterLogEvents"), arn("logs", f"log-group:{name}:*"), {}))
            elif kind == "AWS::StepFunctions::StateMachine":
                found.append((("states:StartExecution", "states:StopExecution"), arn("states", f"stateMachine:{properties['StateMachineName']}"), {}))
            elif kind == "AWS::SSM::Document":
                found.append((("ssm:SendCommand",), arn("ssm", f"document/{properties['Name']}"), {}))
            elif kind == "AWS::AutoScaling::AutoScalingGroup":
                name = properties.get("AutoScalingGroupName", f"{prefix}-{logical_id}")
                found.append((("autoscaling:CompleteLifecycleAction", "autoscaling:RecordLifecycleActionHeartbeat",
                               "autoscaling:SetDesiredCapacity", "autoscaling:SetInstanceProtection"),
                              arn("autoscaling", f"autoScalingGroup:0a1b2c3d-0000-4000-8000-000000000001:autoScalingGroupName/{name}"),
                              {"aws:ResourceTag/sf:cluster": cluster}))
            elif kind == "AWS::IoT::TopicRule":
                found.append((("iot:ReplaceTopicRule",), arn("iot", f"rule/{properties['RuleName']}"), {}))
            elif kind == "AWS::KinesisAnalyticsV2::Application":
                found.append((("kinesisanalytics:StartApplication", "kinesisanalytics:UpdateApplication"),
                              arn("kinesisanalytics", f"application/{properties['ApplicationName']}"), {}))
            elif kind == "AWS::IAM::Role" and isinstance(properties.get("RoleName"), str):
                found.append((("sts:AssumeRole", "iam:PassRole"), f"arn:aws:iam::{account}:role/{properties['RoleName']}", {}))
    return found


@pytest.mark.parametrize(("reader", "owner"), [("dev", "staging"), ("staging", "dev")])
def test_no_role_of_one_environment_may_touch_the_others_resources(side_by_side, reader, owner):
    from moto.iam.access_control import PermissionResult

    syntheses, configs = side_by_side
    roles = roles_of(syntheses[reader], configs[reader])
    targets = named_resources(syntheses[owner], configs[owner])
    assert len(roles) > 15 and len(targets) > 40
    reached = []
    for role in roles:
        for actions, resource, conditions in targets:
            for action in actions:
                if action in LOG_WRITES and role.logical_id.startswith(CDK_PROVIDER_ROLES):
                    continue
                if role.policy.is_action_permitted(action, resource, incoming_condition_values=conditions) == PermissionResult.PERMITTED:
                    reached.append(f"{role.stack}/{role.logical_id} {action} {resource}")
    assert reached == [], "\n".join(reached)


def test_the_check_sees_a_grant_across_environments():
    """The evaluation above can fail: a role allowed the other environment's parameters is caught."""
    from moto.iam.access_control import IAMPolicy, PermissionResult

    leaky = IAMPolicy(json.dumps({"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Action": "ssm:GetParameter*", "Resource": "arn:aws:ssm:eu-west-1:111111111111:parameter/telemetry-*"}]}))
    assert leaky.is_action_permitted(
        "ssm:GetParameter", "arn:aws:ssm:eu-west-1:111111111111:parameter/telemetry-staging/msk/bootstrap-brokers-iam"
    ) == PermissionResult.PERMITTED


def test_the_topic_administrator_is_assumed_by_its_own_environments_operators_only(side_by_side):
    """The trust policy's ArnLike on aws:PrincipalArn, as IAM matches it (case-sensitive `*` and `?`,
    IAM User Guide, "IAM JSON policy elements: Condition operators", ARN condition operators)."""
    syntheses, configs = side_by_side
    operators = {env: f"arn:aws:iam::{configs[env].account}:user/telemetry-{env}-operators/alice" for env in syntheses}
    for env, synthesis in syntheses.items():
        (role,) = [r for r in synthesis.stacks["msk"]["Resources"].values() if r["Type"] == "AWS::IAM::Role"
                   and r["Properties"].get("RoleName") == f"{configs[env].resource_prefix}-msk-topic-admin"]
        (statement,) = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
        patterns = statement["Condition"]["ArnLike"]["aws:PrincipalArn"]
        assert statement["Condition"]["Bool"] == {"aws:MultiFactorAuthPresent": "true"}
        for who, arn in operators.items():
            assert any(fnmatch.fnmatchcase(arn, p) for p in patterns) == (who == env), (env, who)
