"""The IoT policy every device certificate gets: connect only as its own thing, publish only to its
own telemetry topic. The thing name comes from the connection (the certificate's attached thing),
so one device's certificate cannot speak for another."""

from __future__ import annotations

from aws_cdk import Stack
from aws_cdk import aws_iot as iot
from constructs import Construct

THING_NAME = "${iot:Connection.Thing.ThingName}"


class DevicePolicy(Construct):
    def __init__(self, scope: Construct, construct_id: str, *, policy_name: str, topic_root: str) -> None:
        super().__init__(scope, construct_id)
        stack = Stack.of(self)

        def iot_arn(resource: str, name: str) -> str:
            return stack.format_arn(service="iot", resource=resource, resource_name=name)

        self.policy_name = policy_name
        self.policy = iot.CfnPolicy(
            self,
            "Policy",
            policy_name=policy_name,
            policy_document={
                "Version": "2012-10-17",
                "Statement": [
                    {
                        "Effect": "Allow",
                        "Action": "iot:Connect",
                        "Resource": iot_arn("client", THING_NAME),
                        # The certificate must be attached to the thing it claims to be.
                        "Condition": {"Bool": {"iot:Connection.Thing.IsAttached": "true"}},
                    },
                    {
                        "Effect": "Allow",
                        "Action": "iot:Publish",
                        "Resource": iot_arn("topic", f"{topic_root}/{THING_NAME}/data"),
                    },
                ],
            },
        )
