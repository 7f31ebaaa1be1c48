"""The reaper: a scheduled run of the reaper function (node_lifecycle.handlers.reaper). It starts an
execution for a lifecycle action left waiting with none (its event lost), then counts zombies."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_lambda as lambda_
from constructs import Construct


class ZombieReaper(Construct):
    def __init__(
        self, scope: Construct, construct_id: str, *, function: lambda_.IFunction, interval_minutes: int
    ) -> None:
        super().__init__(scope, construct_id)
        self.schedule = events.Rule(
            self,
            "Schedule",
            description="Starts executions for lifecycle actions whose event was lost; counts Service Fabric nodes "
            "whose machines are gone (zombies) for the alarms",
            schedule=events.Schedule.rate(cdk.Duration.minutes(interval_minutes)),
            # EventBridge does not retry its delivery; Lambda still retries a failed asynchronous
            # run twice (Lambda Developer Guide, "Asynchronous invocation"), and the next
            # scheduled run follows anyway. Every part of a run is safe to repeat.
            targets=[targets.LambdaFunction(function, retry_attempts=0)],
        )
