"""Simulator fleet stack: load-generation hosts, their Run Command document and results bucket."""

from __future__ import annotations

from aws_cdk import CfnOutput, Stack
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ssm as ssm
from constructs import Construct

from stacks.compliance import PARTITION, acknowledge, attribute_ref, wildcard_resource_finding
from stacks.config import EnvironmentConfig
from stacks.constructs.log_group import grant_run_command_output, log_group
from stacks.constructs.msk_cluster import MskCluster
from stacks.constructs.simulator_fleet import SimulatorFleet
from stacks.naming import (
    SIMULATOR_METRICS_NAMESPACE,
    device_credentials_path,
    device_thing_prefix,
    manage_topics_document_name,
    run_simulator_document_name,
    simulator_fleet_name,
    simulator_fleet_commands_log_group_name,
    simulator_runs_log_group_name,
    topics_token_key_alias,
    topics_token_parameter_name,
)
from stacks.removal import removal_policy

# Each run consumes with its own group, simulator-<run id>-<host>.
CONSUMER_GROUPS = "simulator-*"


def simulator_metric(environment: str, name: str, statistic: str) -> cloudwatch.Metric:
    return cloudwatch.Metric(
        namespace=SIMULATOR_METRICS_NAMESPACE,
        metric_name=name,
        dimensions_map={"Environment": environment},
        statistic=statistic,
    )


class SimulatorFleetStack(Stack):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: EnvironmentConfig,
        vpc: ec2.IVpc,
        kafka: MskCluster,
        bootstrap_parameter: ssm.IStringParameter,
        dashboard: cloudwatch.Dashboard,
        **kwargs,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        settings = config.simulator_fleet
        fleet = SimulatorFleet(
            self,
            "Fleet",
            vpc=vpc,
            fleet_name=simulator_fleet_name(config),
            instance_type=settings.instance_type,
            host_count=settings.host_count,
            kafka_client_security_group=kafka.client_security_group,
            results_retention_days=settings.results_retention_days,
            removal_policy=removal_policy(config),
        )
        self.fleet_role = fleet.role
        kafka.grant_produce(fleet.role, settings.topic)
        kafka.grant_consume(fleet.role, settings.topic, CONSUMER_GROUPS)
        acknowledge(
            fleet.role,
            "AwsSolutions-IAM5",
            "Each simulator run consumes with a group of its own, simulator-<run id>-<host>, so hosts "
            "may use groups by that prefix on this one cluster; no other group, topic or cluster",
            finding=wildcard_resource_finding(
                f"arn:{PARTITION}:kafka:{config.region}:{config.account}:group/{kafka.cluster_name}/*/{CONSUMER_GROUPS}"
            ),
        )
        fleet.add_run_document(
            document_name=run_simulator_document_name(config),
            topic=settings.topic,
            bootstrap_parameter=bootstrap_parameter,
            region=config.region,
            devices_path=device_credentials_path(config),
            thing_prefix=device_thing_prefix(config),
            environment=config.name,
        )
        fleet.add_topics_document(
            document_name=manage_topics_document_name(config),
            bootstrap_parameter=bootstrap_parameter,
            token_parameter_name=topics_token_parameter_name(config),
            token_key_alias=topics_token_key_alias(config),
            region=config.region,
        )

        # telemetry/commands/simulate.py writes each merged fleet report here in embedded metric
        # format; CloudWatch turns it into the metrics graphed below.
        self.runs_log_group = log_group(
            self,
            "RunsLogGroup",
            log_group_name=simulator_runs_log_group_name(config),
            retention_days=config.simulator_fleet.results_retention_days,
            removal_policy=removal_policy(config),
        )

        # The whole output of the documents sent to the hosts (telemetry simulate, topics and the
        # deploy's smoke runs: SendCommand's CloudWatchOutputConfig, telemetry/shared/run_command_output.py).
        # The hosts' SSM agent creates a stream per command, instance and step, and writes it.
        commands = log_group(
            self,
            "CommandsLogGroup",
            log_group_name=simulator_fleet_commands_log_group_name(config),
            retention_days=config.simulator_fleet.results_retention_days,
            removal_policy=removal_policy(config),
        )
        grant_run_command_output(commands, fleet.role)
        acknowledge(
            fleet.role,
            "AwsSolutions-IAM5",
            "The SSM agent names a stream per command it runs (<command id>/<instance id>/<step>/stdout), so "
            "the grant covers the streams of that one log group: create the (existing) group, create, list and "
            "write its streams",
            finding=wildcard_resource_finding(f"{attribute_ref(commands, 'Arn')}:*"),
        )

        dashboard.add_widgets(
            cloudwatch.TextWidget(markdown="## Simulator runs", width=24, height=1),
            cloudwatch.GraphWidget(
                title="Fleet throughput (msg/s)",
                left=[simulator_metric(config.name, "ThroughputMsgsPerSec", "Maximum")],
                width=8,
            ),
            cloudwatch.GraphWidget(
                title="End-to-end latency (ms)",
                left=[
                    simulator_metric(config.name, "E2eLatencyP99Ms", "Maximum"),
                    simulator_metric(config.name, "E2eLatencyMaxMs", "Maximum"),
                ],
                width=8,
            ),
            cloudwatch.GraphWidget(
                title="Messages lost",
                left=[simulator_metric(config.name, "LostMessages", "Maximum")],
                width=8,
            ),
        )
        CfnOutput(self, "ResultsBucket", value=fleet.results.bucket_name)
        CfnOutput(self, "RunDocument", value=run_simulator_document_name(config))
        CfnOutput(self, "TopicsTokenKeyArn", value=fleet.topics_token_key.key_arn,
                  description="The key telemetry topics encrypts its token with: grant operators kms:Encrypt and "
                  "kms:GenerateDataKey on this ARN (an alias ARN in a policy does not authorise the key)")
