"""Reserves the seed address block (stacks/seed_addresses.py) in each private subnet.

An explicit subnet CIDR reservation: EC2 never assigns an address from it on its own, and the seed
nodes take their fixed primary addresses from it. CloudFormation's AWS::EC2::SubnetCidrReservation
is not available in eu-west-1 (cfn-lint's per-region schemas list it, among commercial regions, in
us-east-1 and us-west-2 only), so a custom resource calls the EC2 API instead.
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import custom_resources as cr
from constructs import Construct

from stacks.compliance import PARTITION, acknowledge, wildcard_resource_finding
from stacks.constructs.sdk_call_role import sdk_call_role, skip_sdk_call_checks
from stacks.seed_addresses import seed_block


class SeedBlockReservations(Construct):
    def __init__(self, scope: Construct, construct_id: str, *, subnets: Sequence[ec2.ISubnet]) -> None:
        super().__init__(scope, construct_id)
        stack = Stack.of(self)

        # One role and log group for every reservation: the custom resources of a stack share one
        # provider function, and it runs with the role it was created with.
        role, logs = sdk_call_role(
            self, description="Reserves the seed address block of each private subnet at deploy time"
        )
        # Resource types and condition keys: Service Authorization Reference, "Actions, resources,
        # and condition keys for Amazon EC2" (docs.aws.amazon.com/service-authorization/latest/
        # reference/list_amazonec2.html). CreateSubnetCidrReservation takes the subnet and needs
        # CreateTags on the new reservation to tag it; DeleteSubnetCidrReservation has no resource
        # type, so it is granted on "*", in this region only.
        role.add_to_policy(
            iam.PolicyStatement(
                actions=["ec2:CreateSubnetCidrReservation"],
                resources=[
                    stack.format_arn(service="ec2", resource="subnet", resource_name=subnet.subnet_id)
                    for subnet in subnets
                ],
            )
        )
        role.add_to_policy(
            iam.PolicyStatement(
                actions=["ec2:CreateTags"],
                resources=[stack.format_arn(service="ec2", resource="subnet-cidr-reservation", resource_name="*")],
                conditions={"StringEquals": {"ec2:CreateAction": "CreateSubnetCidrReservation"}},
            )
        )
        role.add_to_policy(
            iam.PolicyStatement(
                actions=["ec2:DeleteSubnetCidrReservation"],
                resources=["*"],
                conditions={"StringEquals": {"ec2:Region": stack.region}},
            )
        )
        acknowledge(
            role,
            "AwsSolutions-IAM5",
            "A reservation's id exists only once it is created; this statement lets the role tag a "
            "reservation only in the CreateSubnetCidrReservation call that creates it (ec2:CreateAction)",
            finding=wildcard_resource_finding(
                f"arn:{PARTITION}:ec2:{stack.region}:{stack.account}:subnet-cidr-reservation/*"
            ),
        )
        acknowledge(
            role,
            "AwsSolutions-IAM5",
            "ec2:DeleteSubnetCidrReservation supports no resource type in the Service Authorization "
            "Reference, so it cannot be granted on a narrower resource; limited to this region",
            finding=wildcard_resource_finding("*"),
        )

        self.reservations: list[cr.AwsCustomResource] = []
        for subnet in subnets:
            reserve = cr.AwsSdkCall(
                service="EC2",
                action="CreateSubnetCidrReservation",
                parameters={
                    "SubnetId": subnet.subnet_id,
                    "Cidr": str(seed_block(subnet.ipv4_cidr_block)),
                    "ReservationType": "explicit",
                    "Description": "Fixed primary addresses of the Service Fabric seed nodes",
                    "TagSpecifications": [
                        {
                            "ResourceType": "subnet-cidr-reservation",
                            "Tags": [{"Key": "Name", "Value": f"{stack.stack_name}-seed-block"}],
                        }
                    ],
                },
                physical_resource_id=cr.PhysicalResourceId.from_response(
                    "SubnetCidrReservation.SubnetCidrReservationId"
                ),
            )
            release = cr.AwsSdkCall(
                service="EC2",
                action="DeleteSubnetCidrReservation",
                parameters={"SubnetCidrReservationId": cr.PhysicalResourceIdReference()},
            )
            # No on_update. The subnet and its block never change for a deployed VPC, so an update
            # could only change the description or tag, and creating again would fail: reservations
            # in one VPC cannot overlap (Amazon VPC User Guide, "Subnet CIDR reservations",
            # docs.aws.amazon.com/vpc/latest/userguide/subnet-cidr-reservation.html). The
            # reservation made on create stays until delete. A replaced subnet (new CIDR or zone)
            # needs a new reservation: give this construct a new id in the same change.
            self.reservations.append(
                cr.AwsCustomResource(
                    self,
                    subnet.node.id,
                    on_create=reserve,
                    on_delete=release,
                    role=role,
                    log_group=logs,
                    install_latest_aws_sdk=False,
                )
            )
            skip_sdk_call_checks(self, "EC2 CreateSubnetCidrReservation and DeleteSubnetCidrReservation")
