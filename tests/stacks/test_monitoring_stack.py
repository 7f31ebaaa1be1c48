"""Monitoring stack: the alarm topic and the environment's dashboard."""

from __future__ import annotations

import json

from aws_cdk.assertions import Match


def test_alarm_topic_is_encrypted_and_tls_only(synthesized):
    template = synthesized("prod").template("monitoring")
    (topic,) = template.find_resources("AWS::SNS::Topic").values()
    assert topic["Properties"]["TopicName"] == "telemetry-prod-alarms"
    key_id = topic["Properties"]["KmsMasterKeyId"]["Fn::GetAtt"][0]
    key = synthesized("prod").stacks["monitoring"]["Resources"][key_id]
    assert key["Properties"]["EnableKeyRotation"] is True
    # CloudWatch may use the key, or alarms could not publish to the encrypted topic; only for this
    # account's alarms (confused deputy).
    statements = key["Properties"]["KeyPolicy"]["Statement"]
    (cloudwatch,) = [s for s in statements if s.get("Principal") == {"Service": "cloudwatch.amazonaws.com"}]
    assert set(cloudwatch["Action"]) == {"kms:Decrypt", "kms:GenerateDataKey*"}
    assert cloudwatch["Condition"] == {
        "StringEquals": {"aws:SourceAccount": "333333333333"},
        "ArnLike": {"aws:SourceArn": "arn:aws:cloudwatch:eu-west-1:333333333333:alarm:*"},
    }
    template.has_resource_properties(
        "AWS::SNS::TopicPolicy",
        {
            "PolicyDocument": {
                "Statement": Match.array_with(
                    [Match.object_like({"Effect": "Deny", "Condition": {"Bool": {"aws:SecureTransport": "false"}}})]
                )
            }
        },
    )


def test_this_accounts_alarms_may_publish_to_the_topic_whose_policy_replaces_the_default(synthesized):
    """A topic policy replaces SNS's default one, which let the account's services publish; the TLS
    statement alone would leave CloudWatch's service principal without an allow, and every alarm's
    notification refused. Every alarm action of the environment names this topic."""
    env = synthesized("prod")
    monitoring = env.stacks["monitoring"]["Resources"]
    (topic_id,) = [k for k, r in monitoring.items() if r["Type"] == "AWS::SNS::Topic"]
    (policy,) = [r["Properties"] for r in monitoring.values() if r["Type"] == "AWS::SNS::TopicPolicy"]
    assert policy["Topics"] == [{"Ref": topic_id}]
    allows = [s for s in policy["PolicyDocument"]["Statement"] if s["Effect"] == "Allow"]
    (alarms,) = allows
    assert alarms["Principal"] == {"Service": "cloudwatch.amazonaws.com"}
    assert alarms["Action"] == "sns:Publish" and alarms["Resource"] == {"Ref": topic_id}
    assert alarms["Condition"] == {
        "StringEquals": {"aws:SourceAccount": "333333333333"},
        "ArnLike": {"aws:SourceArn": "arn:aws:cloudwatch:eu-west-1:333333333333:alarm:*"},
    }
    actions = [a for stack in env.stacks.values() for r in stack["Resources"].values()
               if r["Type"] == "AWS::CloudWatch::Alarm" for a in r["Properties"].get("AlarmActions", [])]  # fmt: skip
    assert actions and all("AlarmsTopic" in json.dumps(a) or "arn:aws:sns" not in json.dumps(a) for a in actions)


def test_email_subscriptions_come_from_config(synthesized):
    synthesized("prod").template("monitoring").has_resource_properties(
        "AWS::SNS::Subscription", {"Protocol": "email", "Endpoint": "platform-oncall@example.com"}
    )
    synthesized("dev").template("monitoring").resource_count_is("AWS::SNS::Subscription", 0)


def test_one_dashboard_per_environment_with_msk_widgets_first(synthesized):
    template = synthesized("prod").template("monitoring")
    (dashboard,) = template.find_resources("AWS::CloudWatch::Dashboard").values()
    assert dashboard["Properties"]["DashboardName"] == "telemetry-prod"
    body = json.loads("".join(part for part in dashboard["Properties"]["DashboardBody"]["Fn::Join"][1] if isinstance(part, str)))
    titles = [w["properties"].get("title") or w["properties"].get("markdown") for w in body["widgets"]]
    assert titles[0] == "## MSK cluster `telemetry-prod`"
    assert "Broker CPU (user + system, %)" in titles
    cpu = next(w for w in body["widgets"] if w["properties"].get("title") == "Broker CPU (user + system, %)")
    assert len([m for m in cpu["properties"]["metrics"] if "expression" in json.dumps(m)]) == 6
