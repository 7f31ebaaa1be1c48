"""The VPC destination keeper (lambdas/device_gateway/destination_keeper.py) against the AWS IoT
API model: every call goes through botocore's Stubber, which checks parameters and answers
against the real `iot` service model. moto implements no topic rule destination calls.

The statuses are the model's TopicRuleDestinationStatus values (ENABLED, IN_PROGRESS, DISABLED,
ERROR, DELETING); the errors are those the API Reference lists for GetTopicRuleDestination and
UpdateTopicRuleDestination.
"""

from __future__ import annotations

import datetime
import json

import boto3
import pytest
from botocore.exceptions import ClientError
from botocore.stub import Stubber

from device_gateway import destination_keeper
from device_gateway.destination_keeper import DestinationUnusable, keep_enabled

ARN = "arn:aws:iot:eu-west-1:111111111111:ruledestination/vpc/0f5e3c2a-1b2c-4d5e-8f90-1234567890ab"


def stubbed_iot():
    iot = boto3.client("iot", region_name="eu-west-1", aws_access_key_id="x", aws_secret_access_key="x")
    return iot, Stubber(iot)


def destination(status: str, reason: str | None = None, updated: datetime.datetime | None = None) -> dict:
    found = {"arn": ARN, "status": status, "vpcProperties": {"vpcId": "vpc-1", "subnetIds": ["subnet-1"]}}
    if updated:
        found["lastUpdatedAt"] = updated
    if reason:
        found["statusReason"] = reason
    return {"topicRuleDestination": found}


def test_the_model_knows_exactly_the_statuses_the_keeper_handles():
    iot = boto3.client("iot", region_name="eu-west-1", aws_access_key_id="x", aws_secret_access_key="x")
    statuses = set(iot.meta.service_model.shape_for("TopicRuleDestinationStatus").enum)
    assert statuses == {"ENABLED", "IN_PROGRESS", "DISABLED", "ERROR", "DELETING"}


NOW = datetime.datetime(2026, 11, 26, 12, 0, tzinfo=datetime.timezone.utc)


@pytest.mark.parametrize("status", ["ENABLED", "IN_PROGRESS"])
def test_an_enabled_or_starting_destination_is_left_alone(status):
    iot, stub = stubbed_iot()
    stub.add_response("get_topic_rule_destination", destination(status, updated=NOW - datetime.timedelta(minutes=50)), {"arn": ARN})
    with stub:
        assert keep_enabled(iot, ARN, now=NOW) == status
    stub.assert_no_pending_responses()


def test_a_destination_stuck_in_progress_for_over_an_hour_fails_the_run():
    iot, stub = stubbed_iot()
    stub.add_response("get_topic_rule_destination", destination("IN_PROGRESS", updated=NOW - datetime.timedelta(minutes=61)), {"arn": ARN})
    with stub, pytest.raises(DestinationUnusable, match="has been IN_PROGRESS since 2026-11-26T10:59:00"):
        keep_enabled(iot, ARN, now=NOW)


def test_a_destination_aws_iot_disabled_is_found_and_re_enabled():
    iot, stub = stubbed_iot()
    stub.add_response("get_topic_rule_destination", destination("DISABLED"), {"arn": ARN})
    stub.add_response("update_topic_rule_destination", {}, {"arn": ARN, "status": "ENABLED"})
    with stub:
        assert keep_enabled(iot, ARN) == "RE-ENABLED"
    stub.assert_no_pending_responses()


@pytest.mark.parametrize("status", ["ERROR", "DELETING"])
def test_a_state_enabling_cannot_fix_fails_the_run_with_its_reason(status):
    iot, stub = stubbed_iot()
    stub.add_response("get_topic_rule_destination", destination(status, "subnet-1 was deleted"), {"arn": ARN})
    with stub, pytest.raises(DestinationUnusable, match=f"is {status} \\(subnet-1 was deleted\\); enabling cannot fix"):
        keep_enabled(iot, ARN)


@pytest.mark.parametrize(
    ("operation", "code", "http"),
    [
        ("get_topic_rule_destination", "UnauthorizedException", 401),
        ("get_topic_rule_destination", "ServiceUnavailableException", 503),
        ("update_topic_rule_destination", "ConflictingResourceUpdateException", 409),
        ("update_topic_rule_destination", "InternalException", 500),
    ],
)
def test_an_api_error_fails_the_run_for_the_alarm_and_the_next_run(operation, code, http):
    iot, stub = stubbed_iot()
    if operation == "update_topic_rule_destination":
        stub.add_response("get_topic_rule_destination", destination("DISABLED"), {"arn": ARN})
    stub.add_client_error(operation, service_error_code=code, http_status_code=http)
    with stub, pytest.raises(ClientError, match=code):
        keep_enabled(iot, ARN)


def test_the_handler_counts_a_re_enabling_in_an_embedded_metric_line(monkeypatch, capsys):
    iot, stub = stubbed_iot()
    stub.add_response("get_topic_rule_destination", destination("DISABLED"), {"arn": ARN})
    stub.add_response("update_topic_rule_destination", {}, {"arn": ARN, "status": "ENABLED"})
    monkeypatch.setattr(boto3, "client", lambda *_a, **_k: iot)
    monkeypatch.setenv("DESTINATION_ARN", ARN)
    monkeypatch.setenv("ENVIRONMENT", "telemetry-dev")
    with stub:
        assert destination_keeper.handler({}, None) == {"outcome": "RE-ENABLED"}
    metric, summary = (json.loads(line) for line in capsys.readouterr().out.splitlines())
    (directive,) = metric["_aws"]["CloudWatchMetrics"]
    # The alarm in stacks/constructs/destination_keeper.py reads exactly this metric.
    from stacks.constructs import destination_keeper as construct

    assert directive == {
        "Namespace": construct.METRIC_NAMESPACE,
        "Dimensions": [["Environment"]],
        "Metrics": [{"Name": construct.REENABLED_METRIC, "Unit": "Count"}],
    }
    assert metric["Environment"] == "telemetry-dev" and metric[construct.REENABLED_METRIC] == 1
    assert summary == {"destination": ARN, "outcome": "RE-ENABLED"}
