"""Publishes the cluster's IAM bootstrap broker string, which CloudFormation does not expose."""

from __future__ import annotations

from aws_cdk import aws_iam as iam
from aws_cdk import aws_ssm as ssm
from aws_cdk import custom_resources as cr
from constructs import Construct

from stacks.constructs.sdk_call_role import sdk_call_role


class BootstrapBrokers(Construct):
    def __init__(
        self, scope: Construct, construct_id: str, *, cluster_arn: str, broker_count: int, parameter_name: str
    ) -> None:
        super().__init__(scope, construct_id)

        get_brokers = cr.AwsSdkCall(
            service="Kafka",
            action="GetBootstrapBrokers",
            parameters={"ClusterArn": cluster_arn},
            # The broker count is part of the id so that adding brokers re-reads the list.
            physical_resource_id=cr.PhysicalResourceId.of(f"{cluster_arn}/brokers-{broker_count}"),
            output_paths=["BootstrapBrokerStringSaslIam"],
        )
        # The function may call GetBootstrapBrokers on this one cluster, nothing more.
        role, logs = sdk_call_role(self, description="Reads the MSK bootstrap brokers at deploy time")
        self.lookup = cr.AwsCustomResource(
            self,
            "Lookup",
            on_update=get_brokers,
            role=role,
            log_group=logs,
            policy=cr.AwsCustomResourcePolicy.from_statements(
                [
                    iam.PolicyStatement(actions=["kafka:GetBootstrapBrokers"], resources=[cluster_arn]),
                ]
            ),
            install_latest_aws_sdk=False,
        )
        self.iam_brokers = self.lookup.get_response_field("BootstrapBrokerStringSaslIam")
        self.parameter = ssm.StringParameter(
            self,
            "Parameter",
            parameter_name=parameter_name,
            description="MSK bootstrap brokers for SASL/IAM clients (port 9098)",
            string_value=self.iam_brokers,
        )
