"""Network stack: the VPC every other stack runs in."""

from __future__ import annotations

import ipaddress
import json

import boto3
import pytest
from aws_cdk.assertions import Match
from botocore import xform_name
from botocore.validate import ParamValidator

from stacks.seed_addresses import seed_block
from tests.conftest import ENVIRONMENTS

NAT_GATEWAYS = {"dev": 1, "staging": 1, "prod": 3}
CIDRS = {"dev": "10.10.0.0/16", "staging": "10.20.0.0/16", "prod": "10.30.0.0/16"}


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_vpc_spans_three_zones_in_three_tiers(synthesized, env):
    template = synthesized(env).template("network")
    template.has_resource_properties("AWS::EC2::VPC", {"CidrBlock": CIDRS[env]})
    subnets = template.find_resources("AWS::EC2::Subnet")
    assert len(subnets) == 9
    zones = {s["Properties"]["AvailabilityZone"] for s in subnets.values()}
    assert zones == {"eu-west-1a", "eu-west-1b", "eu-west-1c"}
    tiers = sorted(
        tag["Value"]
        for s in subnets.values()
        for tag in s["Properties"]["Tags"]
        if tag["Key"] == "aws-cdk:subnet-type"
    )
    assert tiers == ["Isolated"] * 3 + ["Private"] * 3 + ["Public"] * 3
    template.resource_count_is("AWS::EC2::NatGateway", NAT_GATEWAYS[env])


def test_flow_logs_capture_all_traffic_with_configured_retention(synthesized):
    template = synthesized("prod").template("network")
    template.has_resource_properties(
        "AWS::EC2::FlowLog", {"ResourceType": "VPC", "TrafficType": "ALL", "LogDestinationType": "cloud-watch-logs"}
    )
    template.has_resource_properties("AWS::Logs::LogGroup", {"RetentionInDays": 365})
    template.has_resource("AWS::Logs::LogGroup", {"DeletionPolicy": "RetainExceptOnCreate", "UpdateReplacePolicy": "Retain"})


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_the_flow_log_role_serves_this_accounts_flow_logs_only_and_writes_its_group(synthesized, env):
    """Amazon VPC User Guide, "IAM role for publishing flow logs to CloudWatch Logs": the trust with
    aws:SourceAccount and aws:SourceArn (the flow log's id a wildcard until it exists)."""
    template = synthesized(env).template("network")
    (flow_log,) = template.find_resources("AWS::EC2::FlowLog").values()
    role_id = flow_log["Properties"]["DeliverLogsPermissionArn"]["Fn::GetAtt"][0]
    role = template.find_resources("AWS::IAM::Role")[role_id]
    (statement,) = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    account = statement["Condition"]["StringEquals"]["aws:SourceAccount"]
    assert statement["Principal"] == {"Service": "vpc-flow-logs.amazonaws.com"} and account.isdigit()
    assert statement["Condition"]["ArnLike"] == {"aws:SourceArn": f"arn:aws:ec2:eu-west-1:{account}:vpc-flow-log/*"}
    group_id = flow_log["Properties"]["LogGroupName"]["Ref"]
    policies = [p for p in template.find_resources("AWS::IAM::Policy").values() if {"Ref": role_id} in p["Properties"]["Roles"]]
    written = {a for p in policies for st in p["Properties"]["PolicyDocument"]["Statement"]
               if json.dumps(st["Resource"]).count(group_id) for a in st["Action"]}  # fmt: skip
    assert {"logs:CreateLogStream", "logs:PutLogEvents"} <= written, written


def test_endpoints_keep_aws_traffic_inside_the_vpc(synthesized):
    template = synthesized("dev").template("network")
    template.has_resource_properties(
        "AWS::EC2::VPCEndpoint",
        {"VpcEndpointType": "Gateway", "ServiceName": Match.object_like({"Fn::Join": Match.any_value()})},
    )
    interfaces = template.find_resources("AWS::EC2::VPCEndpoint", {"Properties": {"VpcEndpointType": "Interface"}})
    services = sorted(e["Properties"]["ServiceName"].rsplit(".", 1)[-1] for e in interfaces.values())
    assert services == ["ec2messages", "kafka", "logs", "secretsmanager", "ssm", "ssmmessages", "sts"]
    assert all(e["Properties"]["PrivateDnsEnabled"] for e in interfaces.values())
    # Where the service documents endpoint policies: this account's principals only.
    account_only = {
        e["Properties"]["ServiceName"].rsplit(".", 1)[-1]: e["Properties"]["PolicyDocument"]["Statement"]
        for e in interfaces.values() if "PolicyDocument" in e["Properties"]
    }
    assert sorted(account_only) == ["logs", "secretsmanager", "ssm", "sts"]
    for statements in account_only.values():
        assert statements == [{"Action": "*", "Effect": "Allow", "Principal": {"AWS": "*"}, "Resource": "*",
                               "Condition": {"StringEquals": {"aws:PrincipalAccount": "111111111111"}}}]


def test_endpoint_security_group_admits_https_from_the_vpc_only(synthesized):
    template = synthesized("dev").template("network")
    groups = template.find_resources(
        "AWS::EC2::SecurityGroup", {"Properties": {"GroupDescription": Match.string_like_regexp("Interface endpoints")}}
    )
    (group,) = groups.values()
    assert group["Properties"]["SecurityGroupIngress"] == [
        {"CidrIp": "10.10.0.0/16", "Description": "HTTPS from the VPC", "FromPort": 443, "IpProtocol": "tcp", "ToPort": 443}
    ]


# What the AwsCustomResource handler puts in place of cr.PhysicalResourceIdReference().
PHYSICAL_ID_MARKER = "PHYSICAL:RESOURCEID:"


def sdk_call(value, refs: dict[str, str], physical_id: str = "") -> dict:
    """An AwsCustomResource call from the template: its JSON string, or an Fn::Join of strings and
    Refs, with each Ref replaced by refs[logical id] and the physical id reference by physical_id."""
    if isinstance(value, dict):
        separator, parts = value["Fn::Join"]
        value = separator.join(part if isinstance(part, str) else refs[part["Ref"]] for part in parts)
    return json.loads(value.replace(PHYSICAL_ID_MARKER, physical_id))


def seed_block_reservations(template) -> dict[str, tuple[str, dict]]:
    """Logical id -> (logical id of the subnet it reserves in, its properties) of each reservation."""
    found = {}
    for logical_id, resource in template.find_resources("Custom::AWS").items():
        create = resource["Properties"]["Create"]
        parts = create["Fn::Join"][1] if isinstance(create, dict) else []
        refs = [part["Ref"] for part in parts if isinstance(part, dict)]
        if sdk_call(create, {ref: ref for ref in refs})["action"] == "CreateSubnetCidrReservation":
            (subnet,) = refs
            found[logical_id] = (subnet, resource["Properties"])
    return found


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_each_private_subnet_reserves_its_seed_block_before_any_endpoint(synthesized, env):
    template = synthesized(env).template("network")
    subnets = template.find_resources("AWS::EC2::Subnet")
    private = {
        logical_id
        for logical_id, subnet in subnets.items()
        if {"Key": "aws-cdk:subnet-type", "Value": "Private"} in subnet["Properties"]["Tags"]
    }
    reservations = seed_block_reservations(template)
    assert sorted(subnet for subnet, _ in reservations.values()) == sorted(private)
    for subnet, properties in reservations.values():
        cidr = subnets[subnet]["Properties"]["CidrBlock"]
        assert ipaddress.ip_network(cidr).subnet_of(ipaddress.ip_network(CIDRS[env]))
        parameters = sdk_call(properties["Create"], {subnet: "subnet-0"})["parameters"]
        assert parameters["Cidr"] == str(seed_block(cidr))
        assert parameters["ReservationType"] == "explicit"

    interfaces = template.find_resources("AWS::EC2::VPCEndpoint", {"Properties": {"VpcEndpointType": "Interface"}})
    assert len(interfaces) == 7
    for endpoint in interfaces.values():
        assert set(reservations) <= set(endpoint.get("DependsOn", []))


def test_reservation_calls_are_valid_ec2_requests(synthesized):
    template = synthesized("dev").template("network")
    ec2 = boto3.client("ec2", region_name="eu-west-1").meta.service_model
    reservations = seed_block_reservations(template)
    assert len(reservations) == 3
    for subnet, properties in reservations.values():
        create = sdk_call(properties["Create"], {subnet: "subnet-0123456789abcdef0"})
        delete = sdk_call(properties["Delete"], {}, physical_id="scr-0123456789abcdef0")
        for call in (create, delete):
            assert call["service"] == "EC2"
            operation = ec2.operation_model(call["action"])  # raises for an action EC2 does not have
            report = ParamValidator().validate(call["parameters"], operation.input_shape)
            assert not report.has_errors(), report.generate_report()

        # The validator checks types and required members, not enumerations.
        request = ec2.operation_model(create["action"]).input_shape.members
        assert create["parameters"]["ReservationType"] in request["ReservationType"].enum
        resource_types = request["TagSpecifications"].member.members["ResourceType"].enum
        assert {tags["ResourceType"] for tags in create["parameters"]["TagSpecifications"]} <= set(resource_types)


def test_reservation_calls_reserve_and_release_the_block_in_ec2(synthesized, moto_session):
    template = synthesized("dev").template("network")
    subnets = template.find_resources("AWS::EC2::Subnet")
    ec2 = moto_session.client("ec2")
    vpc_id = ec2.create_vpc(CidrBlock=CIDRS["dev"])["Vpc"]["VpcId"]
    reservations = seed_block_reservations(template)
    assert len(reservations) == 3
    for subnet, properties in reservations.values():
        cidr = subnets[subnet]["Properties"]["CidrBlock"]
        subnet_id = ec2.create_subnet(VpcId=vpc_id, CidrBlock=cidr)["Subnet"]["SubnetId"]

        create = sdk_call(properties["Create"], {subnet: subnet_id})
        response = getattr(ec2, xform_name(create["action"]))(**create["parameters"])
        physical_id = response
        for key in create["physicalResourceId"]["responsePath"].split("."):
            physical_id = physical_id[key]
        reserved = ec2.get_subnet_cidr_reservations(SubnetId=subnet_id)["SubnetIpv4CidrReservations"]
        assert [(r["SubnetCidrReservationId"], r["Cidr"], r["ReservationType"]) for r in reserved] == [
            (physical_id, str(seed_block(cidr)), "explicit")
        ]

        delete = sdk_call(properties["Delete"], {}, physical_id=physical_id)
        getattr(ec2, xform_name(delete["action"]))(**delete["parameters"])
        assert ec2.get_subnet_cidr_reservations(SubnetId=subnet_id)["SubnetIpv4CidrReservations"] == []
