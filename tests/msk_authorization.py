"""MSK IAM policies as Kafka ACLs, so a local broker can enforce what MSK would.

Every rule here follows the MSK Developer Guide, "Semantics of IAM authorization policy actions
and resources" (https://docs.aws.amazon.com/msk/latest/developerguide/kafka-actions.html), whose
rows are quoted next to the rule they give. What Kafka ACLs cannot say (a `*` inside a name, a
Deny, a Condition) is refused with the statement's action named, never approximated.

Two MSK rules a broker cannot check are checked here, statically:
- "When you include in your authorization policy an action from the Action column of the table,
  you must also include the corresponding actions from the Required actions column." Kafka's
  ACLs imply some operations (READ or WRITE imply DESCRIBE), so a missing DescribeTopic would
  pass on the broker: `acls_for_policy` refuses the policy instead.
- kafka-cluster:Connect has no Kafka ACL: it is the login itself. Locally every identity logs in
  with SASL/PLAIN; the required-actions check is what demands Connect.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import re

from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
)

SEMANTICS_PAGE = "https://docs.aws.amazon.com/msk/latest/developerguide/kafka-actions.html"
CLUSTER_RESOURCE_NAME = "kafka-cluster"  # the one name Kafka's CLUSTER resource has


class UntranslatablePolicy(Exception):
    """A statement Kafka ACLs cannot express, or a policy MSK would not honour as written."""


@dataclasses.dataclass(frozen=True)
class ActionSemantics:
    resource: str  # MSK's "Required resources" column: cluster, topic, group, transactional-id
    operation: AclOperation | None  # the Kafka ACL it is "equivalent to"; None for Connect
    required: tuple[str, ...]  # the "Required actions" column


def _a(resource, operation, *required):
    return ActionSemantics(resource, operation, tuple(f"kafka-cluster:{r}" for r in required))


# The table, row by row (action | Kafka equivalent | required actions | required resources).
ACTIONS: dict[str, ActionSemantics] = {
    # "kafka-cluster:Connect | Grants permission to connect and authenticate to the cluster.
    #  | None | cluster"
    "kafka-cluster:Connect": _a("cluster", None),
    # "kafka-cluster:DescribeCluster | ... equivalent to Apache Kafka's DESCRIBE CLUSTER ACL.
    #  | kafka-cluster:Connect | cluster"
    "kafka-cluster:DescribeCluster": _a("cluster", AclOperation.DESCRIBE, "Connect"),
    # "kafka-cluster:AlterCluster | ... ALTER CLUSTER ACL. | Connect, DescribeCluster | cluster"
    "kafka-cluster:AlterCluster": _a("cluster", AclOperation.ALTER, "Connect", "DescribeCluster"),
    # "kafka-cluster:DescribeClusterDynamicConfiguration | ... DESCRIBE_CONFIGS CLUSTER ACL.
    #  | Connect | cluster"
    "kafka-cluster:DescribeClusterDynamicConfiguration": _a(
        "cluster", AclOperation.DESCRIBE_CONFIGS, "Connect"
    ),
    # "kafka-cluster:AlterClusterDynamicConfiguration | ... ALTER_CONFIGS CLUSTER ACL.
    #  | Connect, DescribeClusterDynamicConfiguration | cluster"
    "kafka-cluster:AlterClusterDynamicConfiguration": _a(
        "cluster", AclOperation.ALTER_CONFIGS, "Connect", "DescribeClusterDynamicConfiguration"
    ),
    # "kafka-cluster:WriteDataIdempotently | Grants permission to write data idempotently on a
    #  cluster, equivalent to Apache Kafka's IDEMPOTENT_WRITE CLUSTER ACL. | Connect, WriteData
    #  | cluster"
    "kafka-cluster:WriteDataIdempotently": _a(
        "cluster", AclOperation.IDEMPOTENT_WRITE, "Connect", "WriteData"
    ),
    # "kafka-cluster:CreateTopic | ... equivalent to Apache Kafka's CREATE CLUSTER/TOPIC ACL.
    #  | Connect | topic"  (the resource is a topic ARN, so: CREATE on that topic pattern)
    "kafka-cluster:CreateTopic": _a("topic", AclOperation.CREATE, "Connect"),
    # "kafka-cluster:DescribeTopic | ... DESCRIBE TOPIC ACL. | Connect | topic"
    "kafka-cluster:DescribeTopic": _a("topic", AclOperation.DESCRIBE, "Connect"),
    # "kafka-cluster:AlterTopic | ... ALTER TOPIC ACL. | Connect, DescribeTopic | topic"
    "kafka-cluster:AlterTopic": _a("topic", AclOperation.ALTER, "Connect", "DescribeTopic"),
    # "kafka-cluster:DeleteTopic | ... DELETE TOPIC ACL. | Connect, DescribeTopic | topic"
    "kafka-cluster:DeleteTopic": _a("topic", AclOperation.DELETE, "Connect", "DescribeTopic"),
    # "kafka-cluster:DescribeTopicDynamicConfiguration | ... DESCRIBE_CONFIGS TOPIC ACL.
    #  | Connect | topic"
    "kafka-cluster:DescribeTopicDynamicConfiguration": _a(
        "topic", AclOperation.DESCRIBE_CONFIGS, "Connect"
    ),
    # "kafka-cluster:AlterTopicDynamicConfiguration | ... ALTER_CONFIGS TOPIC ACL.
    #  | Connect, DescribeTopicDynamicConfiguration | topic"
    "kafka-cluster:AlterTopicDynamicConfiguration": _a(
        "topic", AclOperation.ALTER_CONFIGS, "Connect", "DescribeTopicDynamicConfiguration"
    ),
    # "kafka-cluster:ReadData | Grants permission to read data from topics on a cluster,
    #  equivalent to Apache Kafka's READ TOPIC ACL. | Connect, DescribeTopic, AlterGroup | topic"
    "kafka-cluster:ReadData": _a("topic", AclOperation.READ, "Connect", "DescribeTopic", "AlterGroup"),
    # "kafka-cluster:WriteData | Grants permission to write data to topics on a cluster,
    #  equivalent to Apache Kafka's WRITE TOPIC ACL | Connect, DescribeTopic | topic"
    "kafka-cluster:WriteData": _a("topic", AclOperation.WRITE, "Connect", "DescribeTopic"),
    # "kafka-cluster:DescribeGroup | ... DESCRIBE GROUP ACL. | Connect | group"
    "kafka-cluster:DescribeGroup": _a("group", AclOperation.DESCRIBE, "Connect"),
    # "kafka-cluster:AlterGroup | Grants permission to join groups on a cluster, equivalent to
    #  Apache Kafka's READ GROUP ACL. | Connect, DescribeGroup | group"
    "kafka-cluster:AlterGroup": _a("group", AclOperation.READ, "Connect", "DescribeGroup"),
    # "kafka-cluster:DeleteGroup | ... DELETE GROUP ACL. | Connect, DescribeGroup | group"
    "kafka-cluster:DeleteGroup": _a("group", AclOperation.DELETE, "Connect", "DescribeGroup"),
    # "kafka-cluster:DescribeTransactionalId | ... DESCRIBE TRANSACTIONAL_ID ACL. | Connect
    #  | transactional-id"
    "kafka-cluster:DescribeTransactionalId": _a(
        "transactional-id", AclOperation.DESCRIBE, "Connect"
    ),
    # "kafka-cluster:AlterTransactionalId | ... WRITE TRANSACTIONAL_ID ACL.
    #  | Connect, DescribeTransactionalId, WriteData | transactional-id"
    "kafka-cluster:AlterTransactionalId": _a(
        "transactional-id", AclOperation.WRITE, "Connect", "DescribeTransactionalId", "WriteData"
    ),
}

KAFKA_RESOURCE_TYPES = {
    "cluster": ResourceType.BROKER,  # confluent-kafka names Kafka's CLUSTER resource BROKER
    "topic": ResourceType.TOPIC,
    "group": ResourceType.GROUP,
    "transactional-id": ResourceType.TRANSACTIONAL_ID,
}

# "Cluster | arn:aws:kafka:region:account-id:cluster/cluster-name/cluster-uuid"
# "Topic | arn:aws:kafka:region:account-id:topic/cluster-name/cluster-uuid/topic-name" (and the
# same for group and transactional-id)
ARN = re.compile(
    r"^arn:(?P<partition>[^:]+):kafka:(?P<region>[^:]*):(?P<account>[^:]*):"
    r"(?P<type>cluster|topic|group|transactional-id)/(?P<rest>.+)$"
)


@dataclasses.dataclass(frozen=True)
class Cluster:
    """The MSK cluster the policy is read against (its ARN parts, resolved)."""

    partition: str
    region: str
    account: str
    name: str
    uuid: str

    @property
    def arn(self) -> str:
        return f"arn:{self.partition}:kafka:{self.region}:{self.account}:cluster/{self.name}/{self.uuid}"

    @classmethod
    def of(cls, config) -> Cluster:
        """An environment's cluster; its UUID is any, as MSK assigns it at creation."""
        uuid = "0a1b2c3d-0000-4000-8000-00000000abcd-1"
        return cls("aws", config.region, config.account, config.resource_prefix, uuid)


@dataclasses.dataclass(frozen=True, order=True)
class Grant:
    """One IAM action allowed on one Kafka resource pattern."""

    action: str
    resource: str  # cluster, topic, group, transactional-id
    name: str  # the Kafka resource name, or prefix when prefixed
    prefixed: bool

    def covers(self, other: Grant) -> bool:
        if self.resource != other.resource:
            return False
        if not self.prefixed:
            return self.name == "*" or (self.name == other.name and not other.prefixed)
        return other.name.startswith(self.name)

    def acl(self, principal: str) -> AclBinding:
        operation = ACTIONS[self.action].operation
        return AclBinding(
            KAFKA_RESOURCE_TYPES[self.resource],
            self.name,
            ResourcePatternType.PREFIXED if self.prefixed else ResourcePatternType.LITERAL,
            principal,
            "*",
            operation,
            AclPermissionType.ALLOW,
        )

    def describe(self) -> str:
        if self.resource == "cluster":
            return f"{self.action} on the cluster"
        shown = f"{self.name}*" if self.prefixed else self.name
        return f"{self.action} on {self.resource} {shown}"


def _as_list(value) -> list:
    return value if isinstance(value, list) else [value]


def expand_actions(pattern: str) -> list[str]:
    """IAM action matching: case-insensitive, `*` and `?` anywhere after the colon ("You can use
    the asterisk (*) wildcard any number of times in an action after the colon")."""
    return [
        action
        for action in ACTIONS
        if fnmatch.fnmatchcase(action.lower(), pattern.lower())
    ]


def _name_pattern(name: str, action: str, arn: str) -> tuple[str, bool]:
    """A resource name with IAM wildcards as a Kafka pattern: `*` alone is Kafka's wildcard
    resource (LITERAL "*"), a trailing `*` a PREFIXED pattern; anything else with `*` or `?` has
    no Kafka ACL ("You can use the asterisk (*) wildcard any number of times anywhere in the part
    of the ARN that comes after :topic/ ..." — Kafka patterns are exact or prefix only)."""
    if name == "*":
        return "*", False
    body = name[:-1] if name.endswith("*") else name
    if "*" in body or "?" in body:
        raise UntranslatablePolicy(
            f"{action} on {arn}: a wildcard inside a name ({name!r}) has no Kafka ACL equivalent "
            "(Kafka patterns are literal or prefix); grant a prefix or exact names"
        )
    return (body, True) if name.endswith("*") else (body, False)


def is_kafka_statement(statement: dict) -> bool:
    """True when any of its actions (wildcards included, e.g. "*") is a kafka-cluster action;
    a NotAction statement counts too, so that it is refused rather than skipped."""
    if "NotAction" in statement:
        return True
    return any(expand_actions(action) for action in _as_list(statement.get("Action", [])))


def grants_of_statement(statement: dict, cluster: Cluster) -> list[Grant]:
    """The grants one resolved policy statement gives on `cluster` (empty for non-Kafka ones)."""
    if not is_kafka_statement(statement):
        return []
    actions = [a for a in _as_list(statement.get("Action", [])) if expand_actions(a)]
    named = ", ".join(actions) or "NotAction"
    for unsupported in ("NotAction", "NotResource", "Condition"):
        if unsupported in statement:
            raise UntranslatablePolicy(f"{named}: {unsupported} cannot be translated into Kafka ACLs")
    if statement.get("Effect") != "Allow":
        raise UntranslatablePolicy(f"{named}: only Allow statements are translated (Effect Deny)")
    grants = []
    for pattern in actions:
        expanded = expand_actions(pattern)
        if not expanded:
            raise UntranslatablePolicy(f"{pattern}: not an action of the MSK semantics table")
        for arn in _as_list(statement.get("Resource", [])):
            if not isinstance(arn, str):
                raise UntranslatablePolicy(f"{pattern}: resource {arn!r} is not resolved to a string")
            grants += _grants_on_resource(expanded, arn, cluster, pattern)
    return grants


def _grants_on_resource(actions: list[str], arn: str, cluster: Cluster, pattern: str) -> list[Grant]:
    if arn == "*":
        parsed = {"type": "*", "cluster": "*", "uuid": "*", "name": "*"}
    else:
        match = ARN.match(arn)
        if match is None:
            return []  # not a Kafka resource: grants nothing here
        for part in ("partition", "region", "account"):
            value = match[part]
            if not fnmatch.fnmatchcase(getattr(cluster, part), value or "*"):
                return []
        parts = match["rest"].split("/")
        expected = 2 if match["type"] == "cluster" else 3
        if len(parts) != expected:
            if match["type"] != "cluster" and len(parts) < expected:
                raise UntranslatablePolicy(
                    f"{pattern} on {arn}: expected {match['type']}/cluster-name/cluster-uuid/name"
                )
            if match["type"] != "cluster":  # a name with "/" in it: not a Kafka name
                raise UntranslatablePolicy(f"{pattern} on {arn}: a name cannot contain '/'")
            raise UntranslatablePolicy(f"{pattern} on {arn}: expected cluster/cluster-name/cluster-uuid")
        parsed = {
            "type": match["type"],
            "cluster": parts[0],
            "uuid": parts[1],
            "name": parts[2] if expected == 3 else CLUSTER_RESOURCE_NAME,
        }
    if not fnmatch.fnmatchcase(cluster.name, parsed["cluster"]) or not fnmatch.fnmatchcase(
        cluster.uuid, parsed["uuid"]
    ):
        return []  # another cluster's resource
    grants = []
    for action in actions:
        semantics = ACTIONS[action]
        if parsed["type"] not in ("*", semantics.resource):
            continue  # IAM: an action applies only to resources of its own type
        if semantics.operation is None:  # Connect: the login, not an ACL
            grants.append(Grant(action, "cluster", CLUSTER_RESOURCE_NAME, False))
            continue
        if semantics.resource == "cluster":
            grants.append(Grant(action, "cluster", CLUSTER_RESOURCE_NAME, False))
            continue
        name, prefixed = _name_pattern(parsed["name"], action, arn)
        grants.append(Grant(action, semantics.resource, name, prefixed))
    return grants


def check_required_actions(grants: list[Grant]) -> None:
    """MSK's Required actions column: an action on a resource of the same type must come with
    the required action on (a pattern covering) the same resource; a required action of another
    resource type must be granted on some resource of that type."""
    missing = []
    for grant in sorted(set(grants)):
        for required in ACTIONS[grant.action].required:
            same_type = ACTIONS[required].resource == grant.resource
            ok = any(
                other.action == required and (other.covers(grant) if same_type else True)
                for other in grants
            )
            if not ok:
                where = "on the same resource" if same_type else "on any resource"
                missing.append(f"{grant.describe()} requires {required} {where}")
    if missing:
        raise UntranslatablePolicy(
            "the policy misses required actions (" + SEMANTICS_PAGE + "): " + "; ".join(missing)
        )


def refusal_without(grants: list[Grant], withheld: str) -> UntranslatablePolicy:
    """What the required-actions check says of these grants less every grant of `withheld`: the
    check that catches an action Kafka implies (READ or ALTER imply DESCRIBE) or cannot see
    (Connect is the login itself), where the broker would let the run pass."""
    assert any(g.action == withheld for g in grants), f"the role has no {withheld} to withhold"
    try:
        check_required_actions([g for g in grants if g.action != withheld])
    except UntranslatablePolicy as refused:
        return refused
    raise AssertionError(f"the required-actions check let the policy through without {withheld}")


def grants_for_policy(statements: list[dict], cluster: Cluster) -> list[Grant]:
    grants = sorted({g for s in statements for g in grants_of_statement(s, cluster)})
    check_required_actions(grants)
    return grants


def acls_for_grants(grants: list[Grant], principal: str) -> list[AclBinding]:
    return [g.acl(principal) for g in grants if ACTIONS[g.action].operation is not None]


# --- CloudFormation intrinsics in policy documents ---------------------------------------------


def resolve(
    value, *, pseudo: dict[str, str], imports: dict[str, str], attributes: dict[str, str] | None = None
):
    """Evaluates the intrinsics CDK writes into IAM policies (Ref to pseudo parameters,
    Fn::ImportValue, Fn::GetAtt of the given "LogicalId.Attribute"s, Fn::Join, Fn::Select,
    Fn::Split); any other one is refused by name."""
    attributes = attributes or {}
    again = lambda v: resolve(v, pseudo=pseudo, imports=imports, attributes=attributes)  # noqa: E731
    if isinstance(value, list):
        return [again(v) for v in value]
    if not isinstance(value, dict):
        return value
    if len(value) != 1:
        return {k: again(v) for k, v in value.items()}
    (key, argument), = value.items()
    if key == "Ref":
        if argument not in pseudo:
            raise UntranslatablePolicy(f"cannot resolve Ref {argument} (not a known pseudo parameter)")
        return pseudo[argument]
    if key == "Fn::ImportValue":
        name = again(argument)
        if name not in imports:
            raise UntranslatablePolicy(f"cannot resolve Fn::ImportValue {name}")
        return imports[name]
    if key == "Fn::GetAtt":
        name = ".".join(argument) if isinstance(argument, list) else argument
        if name not in attributes:
            raise UntranslatablePolicy(f"cannot resolve Fn::GetAtt {name}")
        return attributes[name]
    if key == "Fn::Join":
        separator, items = argument
        return separator.join(again(items))
    if key == "Fn::Select":
        index, items = argument
        return again(items)[int(again(index))]
    if key == "Fn::Split":
        separator, text = argument
        return again(text).split(separator)
    if key.startswith("Fn::") or key == "Ref":
        raise UntranslatablePolicy(f"cannot resolve {key} in a policy")
    return {key: again(argument)}


class Elsewhere(dict):
    """Another stack's export or a resource's attribute, as a name no ARN matches: for statements
    whose resources need only not be wildcards to be judged."""

    def __bool__(self) -> bool:
        return True

    def __contains__(self, name) -> bool:
        return True

    def __getitem__(self, name: str) -> str:
        return f"elsewhere:{name}"


class Referenced(Elsewhere):
    """The pseudo parameters given; a Ref, attribute or import of this environment's own resources
    as an ARN of an account that is neither environment's, long enough for the Fn::Select of a
    Fn::Split CDK writes to take apart an ARN: whatever is built from it names nothing of the other."""

    def __init__(self, known: dict | None = None) -> None:
        super().__init__(known or {})

    def __getitem__(self, name: str) -> str:
        return dict.get(self, name) or f"arn:aws:own:nowhere:000000000000:{name}/own/own/own/own"


def role_policy_statements(template: dict, role_logical_id: str) -> list[dict]:
    """Every statement of the AWS::IAM::Policy resources attached to the role (unresolved)."""
    statements = []
    for resource in template["Resources"].values():
        if resource["Type"] != "AWS::IAM::Policy":
            continue
        if {"Ref": role_logical_id} in resource["Properties"].get("Roles", []):
            statements += resource["Properties"]["PolicyDocument"]["Statement"]
    role = template["Resources"][role_logical_id]["Properties"]
    for policy in role.get("Policies", []):
        statements += policy["PolicyDocument"]["Statement"]
    return statements


def cluster_arn_attributes(msk_template: dict, cluster_arn: str) -> dict[str, str]:
    """"LogicalId.Arn" -> cluster_arn for the MSK cluster of the template that defines it (the
    policies of roles in the MSK stack itself name the cluster by Fn::GetAtt)."""
    return {
        f"{logical_id}.Arn": cluster_arn
        for logical_id, resource in msk_template["Resources"].items()
        if resource["Type"] == "AWS::MSK::Cluster"
    }


def cluster_arn_exports(msk_template: dict, cluster_arn: str) -> dict[str, str]:
    """Export name -> value for the MSK stack's exports of its cluster's ARN."""
    clusters = {
        logical_id
        for logical_id, resource in msk_template["Resources"].items()
        if resource["Type"] == "AWS::MSK::Cluster"
    }
    exports = {}
    for output in msk_template.get("Outputs", {}).values():
        value, export = output.get("Value"), output.get("Export")
        if export and isinstance(value, dict) and value.get("Fn::GetAtt", [None, None])[1] == "Arn":
            if value["Fn::GetAtt"][0] in clusters:
                exports[export["Name"]] = cluster_arn
    return exports


def role_grants(stacks: dict, part: str, role_prefix: str, cluster: Cluster) -> list[Grant]:
    """The Kafka grants on `cluster` of the one role of stack `part` (in a synthesis's
    part -> template map, "msk" among them) whose logical ID starts with role_prefix."""
    template, msk = stacks[part], stacks["msk"]
    (role_id,) = [
        logical_id
        for logical_id, resource in template["Resources"].items()
        if resource["Type"] == "AWS::IAM::Role" and logical_id.startswith(role_prefix)
    ]
    statements = resolve(
        [s for s in role_policy_statements(template, role_id) if is_kafka_statement(s)],
        pseudo={"AWS::Partition": cluster.partition, "AWS::Region": cluster.region, "AWS::AccountId": cluster.account},
        imports=cluster_arn_exports(msk, cluster.arn),
        attributes=cluster_arn_attributes(template, cluster.arn),
    )
    return grants_for_policy(statements, cluster)
