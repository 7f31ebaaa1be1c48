"""Keeps the device gateway's VPC topic rule destination enabled.

AWS IoT disables a VPC destination by itself: "If a VPC topic rule destination doesn't receive any
traffic for 30 days in a row, it will be disabled", and "If any resources used by the VPC
destination change, the destination will be disabled" (AWS IoT Developer Guide, "Virtual private
cloud (VPC) destinations"). CloudFormation sees that only as drift, and every device message then
fails the Kafka action. This function runs on a schedule, reads the destination's status and acts:

- ENABLED: nothing to do;
- IN_PROGRESS (the service is creating its network interfaces; "After a few minutes, its status
  will change to either ERROR ... or ENABLED", on creation): nothing to do for STUCK_AFTER; a
  destination still IN_PROGRESS after that fails the run;
- DISABLED: UpdateTopicRuleDestination with status ENABLED ("DISABLED ... You can set status to
  ENABLED by calling UpdateTopicRuleDestination", AWS IoT API Reference, TopicRuleDestination),
  and one Embedded Metric Format line that counts it, so the operator hears of it;
- ERROR, DELETING, or anything else: raises DestinationUnusable. Enabling cannot fix those (ERROR
  only moves to IN_PROGRESS, which is the HTTP destinations' confirmation; a VPC destination in
  ERROR has a network or role problem, named in its `statusReason`), so the failed run is the alarm.

Errors the API reference lists for both calls (InternalException, ServiceUnavailableException,
UnauthorizedException, InvalidRequestException; ConflictingResourceUpdateException for the update)
are left to botocore's standard retries and then fail the run: the schedule runs again within the
hour, and every run is safe to repeat.
"""

from __future__ import annotations

import datetime
import json
import os
import time

METRIC_NAMESPACE = "Telemetry/DeviceGateway"
REENABLED_METRIC = "TopicRuleDestinationReEnabled"
STUCK_AFTER = datetime.timedelta(hours=1)


class DestinationUnusable(Exception):
    """The destination is in a state enabling cannot fix."""


def keep_enabled(iot, arn: str, now: datetime.datetime | None = None) -> str:
    """Reads the destination and re-enables it when AWS IoT disabled it; what it found or did."""
    destination = iot.get_topic_rule_destination(arn=arn)["topicRuleDestination"]
    status = destination.get("status", "")
    if status == "ENABLED":
        return status
    if status == "IN_PROGRESS":
        since = destination.get("lastUpdatedAt")
        now = now or datetime.datetime.now(datetime.timezone.utc)
        if since is None or now - since < STUCK_AFTER:
            return status
        raise DestinationUnusable(
            f"topic rule destination {arn} has been IN_PROGRESS since {since.isoformat()}, over "
            f"{STUCK_AFTER} ({destination.get('statusReason') or 'no statusReason given'}): its network "
            "interfaces are not coming up; see the destination in the AWS IoT console"
        )
    if status == "DISABLED":
        iot.update_topic_rule_destination(arn=arn, status="ENABLED")
        return "RE-ENABLED"
    reason = destination.get("statusReason") or "no statusReason given"
    raise DestinationUnusable(
        f"topic rule destination {arn} is {status or 'without a status'} ({reason}); enabling cannot fix "
        "that: see the destination in the AWS IoT console, fix its VPC, subnets, security group or role, "
        "and redeploy the device gateway stack"
    )


def reenabled_metric_line(environment: str, now_ms: int) -> str:
    """One CloudWatch Embedded Metric Format record: the destination was found disabled and re-enabled."""
    return json.dumps(
        {
            "_aws": {
                "Timestamp": now_ms,
                "CloudWatchMetrics": [
                    {
                        "Namespace": METRIC_NAMESPACE,
                        "Dimensions": [["Environment"]],
                        "Metrics": [{"Name": REENABLED_METRIC, "Unit": "Count"}],
                    }
                ],
            },
            "Environment": environment,
            REENABLED_METRIC: 1,
        }
    )


def handler(event, context):  # noqa: ARG001 - the scheduled event carries nothing we need
    import boto3
    from botocore.config import Config

    iot = boto3.client("iot", config=Config(retries={"mode": "standard", "total_max_attempts": 5}))
    arn = os.environ["DESTINATION_ARN"]
    outcome = keep_enabled(iot, arn)
    if outcome == "RE-ENABLED":
        print(reenabled_metric_line(os.environ["ENVIRONMENT"], int(time.time() * 1000)))
    print(json.dumps({"destination": arn, "outcome": outcome}))
    return {"outcome": outcome}
