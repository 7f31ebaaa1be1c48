"""Every principal that may publish to an encrypted SNS topic may also use the topic's key.

"The publisher must have the `kms:GenerateDataKey` and `kms:Decrypt` permissions for the AWS KMS
key" (https://docs.aws.amazon.com/sns/latest/dg/sns-key-management.html). The test reads every
synthesized template of an environment: each IAM statement that allows `sns:Publish`, the topic it
names (across stacks: `Fn::ImportValue` is followed to the exporting stack's output), that topic's
`KmsMasterKeyId`, and then the same principal's policies and the key's own policy. CloudWatch
alarms publish as the service principal, which the key policy must name instead.
"""

from __future__ import annotations

import fnmatch
import json
from dataclasses import dataclass

import pytest

from tests.conftest import ENVIRONMENTS

PUBLISH = "sns:Publish"
KEY_USE = ("kms:GenerateDataKey", "kms:Decrypt")  # what the publisher calls (SNS does it on its behalf)
CLOUDWATCH = "cloudwatch.amazonaws.com"


@dataclass(frozen=True)
class Ref:
    """A resource of one stack: (stack name, logical id)."""

    stack: str
    logical_id: str


class Environment:
    """All templates of one synthesized environment, with cross-stack references resolved."""

    def __init__(self, templates: dict[str, dict]) -> None:
        self.templates = dict(templates)
        self.exports: dict[str, tuple[str, object]] = {}
        for stack, template in self.templates.items():
            for output in template.get("Outputs", {}).values():
                if "Export" in output:
                    self.exports[output["Export"]["Name"]] = (stack, output["Value"])

    def resources(self, resource_type: str):
        for stack, template in self.templates.items():
            for logical_id, resource in template["Resources"].items():
                if resource["Type"] == resource_type:
                    yield Ref(stack, logical_id), resource

    def resource(self, ref: Ref) -> dict:
        return self.templates[ref.stack]["Resources"][ref.logical_id]

    def resolve(self, stack: str, value) -> Ref | str:
        """A `Ref`/`Fn::GetAtt` (directly or through an import) as the resource it names; any
        other value as its JSON text (a literal ARN or a wildcard)."""
        if isinstance(value, dict) and "Fn::ImportValue" in value:
            name = value["Fn::ImportValue"]
            assert isinstance(name, str), f"computed import name in {stack}: {name}"
            assert name in self.exports, f"{stack} imports {name}, which no stack of the environment exports"
            exporting_stack, exported = self.exports[name]
            return self.resolve(exporting_stack, exported)
        if isinstance(value, dict) and "Ref" in value and value["Ref"] in self.templates[stack]["Resources"]:
            return Ref(stack, value["Ref"])
        if isinstance(value, dict) and "Fn::GetAtt" in value:
            return Ref(stack, value["Fn::GetAtt"][0])
        return value if isinstance(value, str) else json.dumps(value)

    def identity_statements(self):
        """(principal, stack of the policy, statement) for every statement of every identity policy."""
        for resource_type in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
            for ref, policy in self.resources(resource_type):
                for role in policy["Properties"].get("Roles", []):
                    for statement in statements(policy["Properties"]["PolicyDocument"]):
                        yield self.resolve(ref.stack, role), ref.stack, statement
        for ref, role in self.resources("AWS::IAM::Role"):
            for inline in role["Properties"].get("Policies", []):
                for statement in statements(inline["PolicyDocument"]):
                    yield ref, ref.stack, statement


def statements(document: dict) -> list[dict]:
    found = document["Statement"]
    return found if isinstance(found, list) else [found]


def as_list(value) -> list:
    return value if isinstance(value, list) else [value]


def allows(statement: dict, action: str) -> bool:
    return any(fnmatch.fnmatchcase(action.lower(), pattern.lower()) for pattern in as_list(statement.get("Action", [])))


def covers(env: Environment, stack: str, statement: dict, target: Ref) -> bool:
    """Whether the statement's resources include `target` (by reference, or by a wildcard)."""
    for resource in as_list(statement.get("Resource", [])):
        resolved = env.resolve(stack, resource)
        if resolved == target or resolved == "*":
            return True
    return False


def topics_named(env: Environment, stack: str, statement: dict) -> list[Ref]:
    topics = [ref for ref, _ in env.resources("AWS::SNS::Topic")]
    named = []
    for resource in as_list(statement.get("Resource", [])):
        resolved = env.resolve(stack, resource)
        if isinstance(resolved, Ref):
            assert env.resource(resolved)["Type"] == "AWS::SNS::Topic", f"sns:Publish on a non-topic {resolved}"
            named.append(resolved)
        elif "*" in resolved:
            named.extend(topics)  # a wildcard may reach any topic: every key must then be usable
        else:
            pytest.fail(f"sns:Publish on a topic outside the environment ({resolved}): its key cannot be checked")
    return named


def topic_key(env: Environment, topic: Ref) -> Ref | None:
    key_id = env.resource(topic)["Properties"].get("KmsMasterKeyId")
    if key_id is None:
        return None
    key = env.resolve(topic.stack, key_id)
    assert isinstance(key, Ref), f"{topic} is encrypted with {key}: not a customer managed key of the environment"
    return key


def key_policy(env: Environment, key: Ref) -> list[dict]:
    return statements(env.resource(key)["Properties"]["KeyPolicy"])


def key_policy_denies(env: Environment, key: Ref) -> list[dict]:
    return [s for s in key_policy(env, key) if s["Effect"] == "Deny" and any(allows(s, a) for a in KEY_USE)]


def key_policy_delegates_to_iam(env: Environment, key: Ref) -> bool:
    """The key policy lets the account's IAM policies grant the key's use (the account root)."""
    for statement in key_policy(env, key):
        principal = json.dumps(statement.get("Principal", {}))
        if statement["Effect"] == "Allow" and ":root" in principal and all(allows(statement, a) for a in KEY_USE):
            return True
    return False


def publishers(env: Environment) -> list[tuple[Ref, Ref]]:
    """(principal, topic) for every identity statement that allows sns:Publish."""
    for principal, _, statement in env.identity_statements():
        # Negated elements could allow sns:Publish without naming it; this search would miss them.
        assert not {"NotAction", "NotResource"} & set(statement), (principal, statement)
    return [
        (principal, topic)
        for principal, stack, statement in env.identity_statements()
        if statement["Effect"] == "Allow" and allows(statement, PUBLISH)
        for topic in topics_named(env, stack, statement)
    ]


def principal_may_use_key(env: Environment, principal: Ref, key: Ref) -> dict[str, bool]:
    """For each action a publisher needs: does one of the principal's policies allow it on the key?"""
    granted = dict.fromkeys(KEY_USE, False)
    for holder, stack, statement in env.identity_statements():
        if holder == principal and statement["Effect"] == "Allow" and covers(env, stack, statement, key):
            for action in KEY_USE:
                granted[action] |= allows(statement, action)
    return granted


def environment(synthesized, name: str) -> Environment:
    return Environment({part: template for part, template in synthesized(name).stacks.items()})


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_every_sns_publisher_may_use_the_topics_key(synthesized, env):
    platform = environment(synthesized, env)
    found = publishers(platform)
    # Today: the scale-in and scale-out state machines, which word an alarm on failure. The test
    # holds for any later publisher; this line only shows that the search finds something.
    assert len({p for p, _ in found}) >= 2, found
    problems = []
    for principal, topic in found:
        key = topic_key(platform, topic)
        if key is None:
            continue
        missing = [a for a, ok in principal_may_use_key(platform, principal, key).items() if not ok]
        if missing:
            problems.append(f"{principal.stack}/{principal.logical_id} publishes to {topic.logical_id} "
                            f"but may not call {', '.join(missing)} on its key {key.logical_id}")
        if not key_policy_delegates_to_iam(platform, key):
            problems.append(f"the key policy of {key.logical_id} does not let IAM policies grant its use")
        for denial in key_policy_denies(platform, key):
            problems.append(f"the key policy of {key.logical_id} denies publishers: {json.dumps(denial)}")
    assert not problems, "\n".join(problems)


def alarm_topics(platform: Environment) -> set[Ref]:
    targets = set()
    for ref, alarm in platform.resources("AWS::CloudWatch::Alarm"):
        for key in ("AlarmActions", "OKActions", "InsufficientDataActions"):
            for action in alarm["Properties"].get(key, []):
                resolved = platform.resolve(ref.stack, action)
                if isinstance(resolved, Ref) and platform.resource(resolved)["Type"] == "AWS::SNS::Topic":
                    targets.add(resolved)
    return targets


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_cloudwatch_alarms_publish_through_the_key_policy(synthesized, env):
    """CloudWatch publishes as its service principal: the key policy (not IAM) must let it."""
    platform = environment(synthesized, env)
    topics = alarm_topics(platform)
    assert topics, "no alarm notifies a topic"
    for topic in topics:
        key = topic_key(platform, topic)
        assert key is not None, f"{topic.logical_id} is not encrypted"
        allowed = [
            s for s in key_policy(platform, key)
            if s["Effect"] == "Allow" and CLOUDWATCH in as_list(s.get("Principal", {}).get("Service", []))
        ]
        missing = [a for a in KEY_USE if not any(allows(s, a) for s in allowed)]
        assert not missing, f"alarms notify {topic.logical_id}; its key policy does not let {CLOUDWATCH} call {missing}"
        assert not key_policy_denies(platform, key)
