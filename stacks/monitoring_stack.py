"""Monitoring stack: the alarm topic every stack alarms to and the environment's dashboard.

Later stacks add their widgets to `dashboard`. Their metrics name resources by the physical
names config gives them (`telemetry-<env>-...`), never by tokens, so the dashboard does not make
this stack depend on theirs while theirs depend on the alarm topic here.
"""

from __future__ import annotations

from aws_cdk import Stack
from aws_cdk import aws_cloudwatch as cloudwatch
from constructs import Construct

from stacks.config import EnvironmentConfig
from stacks.constructs.alarm_topic import AlarmTopic
from stacks.removal import removal_policy


class MonitoringStack(Stack):
    def __init__(self, scope: Construct, construct_id: str, *, config: EnvironmentConfig, **kwargs) -> None:
        super().__init__(scope, construct_id, **kwargs)
        alarms = AlarmTopic(
            self,
            "Alarms",
            topic_name=f"{config.resource_prefix}-alarms",
            email_addresses=config.monitoring.alarm_emails,
            removal_policy=removal_policy(config),
        )
        # The construct, for stacks that publish to the topic themselves (`alarms.grant_publish`);
        # the topic, for alarm actions.
        self.alarms = alarms
        self.alarm_topic = alarms.topic
        self.dashboard = cloudwatch.Dashboard(
            self,
            "Dashboard",
            dashboard_name=config.resource_prefix,
            default_interval=None,
        )
