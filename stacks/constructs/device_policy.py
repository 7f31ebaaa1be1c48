"""The IoT policy every device certificate of one environment gets: connect only as the thing the
certificate is attached to, and only when that thing belongs to the environment; publish only to
that thing's topic of the environment.

Environments that share an account share AWS IoT's message broker and thing registry, so the
policy names the environment twice:
- iot:Connect on client/${iot:Connection.Thing.ThingName} with iot:Connection.Thing.IsAttached
  true: the client id is the name of a thing this certificate is attached to ("Connect policy
  examples": the policy AWS recommends for registered devices); and the thing's attribute
  `environment` must be this environment's name (`iot:Connection.Thing.Attributes[attributeName]`
  in a StringEquals condition, "Thing policy examples"). A certificate attached to another
  environment's thing cannot connect with this policy.
- iot:Publish on topic/telemetry/<environment>/${iot:Connection.Thing.ThingName}/data: one device's
  certificate cannot speak for another, and nothing it sends reaches another environment's topics,
  which only that environment's rule reads (naming.device_topic_filter).
`telemetry devices provision` gives each thing the attribute (naming.DEVICE_ENVIRONMENT_ATTRIBUTE);
a device of an adopter's own fleet needs it too.
"""

from __future__ import annotations

from aws_cdk import Stack
from aws_cdk import aws_iot as iot
from constructs import Construct

THING_NAME = "${iot:Connection.Thing.ThingName}"


def thing_attribute(name: str) -> str:
    return f"iot:Connection.Thing.Attributes[{name}]"


class DevicePolicy(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        policy_name: str,
        environment_attribute: str,
        environment: str,
        topic_prefix: str,
    ) -> None:
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
                        "Condition": {
                            # The certificate must be attached to the thing it claims to be ...
                            "Bool": {"iot:Connection.Thing.IsAttached": "true"},
                            # ... and that thing must be one of this environment's.
                            "StringEquals": {thing_attribute(environment_attribute): environment},
                        },
                    },
                    {
                        "Effect": "Allow",
                        "Action": "iot:Publish",
                        "Resource": iot_arn("topic", f"{topic_prefix}/{THING_NAME}/data"),
                        # Again on every publish: Connect is evaluated once, so a thing moved out
                        # of the environment would keep publishing on the connection it has.
                        "Condition": {"StringEquals": {thing_attribute(environment_attribute): environment}},
                    },
                ],
            },
        )
