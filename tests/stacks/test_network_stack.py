"""Network stack: the VPC every other stack runs in."""

from __future__ import annotations

import pytest
from aws_cdk.assertions import Match

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
    template.has_resource("AWS::Logs::LogGroup", {"DeletionPolicy": "Retain"})


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


def test_endpoint_security_group_admits_https_from_the_vpc_only(synthesized):
    template = synthesized("dev").template("network")
    groups = template.find_resources(
        "AWS::EC2::SecurityGroup", {"Properties": {"GroupDescription": Match.string_like_regexp("Interface endpoints")}}
    )
    (group,) = groups.values()
    assert group["Properties"]["SecurityGroupIngress"] == [
        {"CidrIp": "10.10.0.0/16", "Description": "HTTPS from the VPC", "FromPort": 443, "IpProtocol": "tcp", "ToPort": 443}
    ]
