"""An environment's Kafka topics and SCRAM ACLs as cdk.json declares them, and the topic
administrator role that applies them: what `telemetry topics` reconciles, what preflight's role
check assumes once, and what the deploy journey's topics step hands a fleet host."""

from __future__ import annotations

import getpass
import re
import sys
from dataclasses import dataclass

from simulator.topic_admin import AclSpec, TopicError, TopicSpec

MS_PER_HOUR = 3_600_000


@dataclass(frozen=True)
class Environment:
    topics: list[TopicSpec]
    region: str
    account: str
    bootstrap_parameter: str  # SSM parameter with the IAM bootstrap brokers
    topic_admin_role: str  # role name; its ARN is the MSK stack's TopicAdministratorRoleArn
    acls: list[AclSpec]  # exactly what the SASL/SCRAM users may do
    reconciled_parameter: str = ""  # SSM parameter recording the last reconcile with nothing left
    fleet: str = ""  # the simulator fleet whose hosts reach the brokers (their FLEET_TAG value)
    topics_document: str = ""  # the fleet's Run Command document that reconciles on a host
    token_parameter: str = ""  # the path under which each run's token parameter is made (<path>/<run>)
    command_log_group: str = ""  # where the fleet hosts write the document's whole output
    token_key: str = ""  # the KMS key (alias) the token is encrypted with: only the fleet may decrypt it


def declared_environment(environment: str) -> Environment:
    from stacks.config import ConfigError, load_environment, read_environments
    from stacks.sizing import local_hours, retention_bytes_guard, segment_bytes
    from stacks.naming import (
        bootstrap_parameter_name,
        manage_topics_document_name,
        simulator_fleet_commands_log_group_name,
        simulator_fleet_name,
        topics_token_key_alias,
        topic_admin_role_name,
        topics_reconciled_parameter_name,
        topics_token_parameter_name,
    )

    try:
        config = load_environment(read_environments(), environment)
    except ConfigError as error:
        raise TopicError(str(error)) from None
    # Every topic gets the guard sized from the brokers' storage (stacks/sizing.py); a tiered topic
    # also what stays on the brokers and its segment size.
    specs = [
        TopicSpec(t.name, t.partitions, t.replication_factor, t.retention_hours * MS_PER_HOUR,
                  retention_bytes_guard(config, t),
                  *((int(local_hours(config, t) * MS_PER_HOUR), segment_bytes(config, t))
                    if config.msk.tiered(t) else ()))
        for t in config.msk.topics
    ]  # fmt: skip
    return Environment(
        specs,
        config.region,
        config.account,
        bootstrap_parameter_name(config),
        topic_admin_role_name(config),
        scram_user_acls(config),
        topics_reconciled_parameter_name(config),
        simulator_fleet_name(config),
        manage_topics_document_name(config),
        topics_token_parameter_name(config),
        simulator_fleet_commands_log_group_name(config),
        topics_token_key_alias(config),
    )


def scram_user_acls(config) -> list[AclSpec]:
    """The device gateway's rule produces with acks=1 and no idempotence (the Kafka action allows
    acks 0 or 1 only, AWS IoT Developer Guide, "Apache Kafka" rule action), so WRITE on its topic
    is all it needs: Kafka's WRITE implies DESCRIBE, which the producer's Metadata requests use
    (IMPLIES_DESCRIBE in Kafka's StandardAuthorizerData). It may not read, create, alter or touch
    any group, and it has no IDEMPOTENT_WRITE on the cluster."""
    gateway = config.device_gateway
    return [AclSpec(f"User:{gateway.scram_username}", "topic", gateway.topic, "WRITE")]


def assume_topic_admin(
    environment: Environment, mfa_serial: str | None, *, read_code=None, sts=None, session=None,
    duration_s: int | None = None,
):
    """Assumes the topic administrator role (one STS call, MFA code read from the terminal);
    returns its temporary credentials as botocore Credentials."""
    import boto3
    from botocore.credentials import Credentials
    from botocore.exceptions import BotoCoreError, ClientError

    session = session or boto3.Session(region_name=environment.region)
    partition = session.get_partition_for_region(environment.region)
    role_arn = f"arn:{partition}:iam::{environment.account}:role/{environment.topic_admin_role}"
    request = {
        "RoleArn": role_arn,
        "RoleSessionName": re.sub(r"[^\w+=,.@-]", "-", f"manage-topics-{getpass.getuser()}")[:64],
    }
    if duration_s:
        request["DurationSeconds"] = duration_s
    if mfa_serial:
        code = (read_code or _read_mfa_code)(mfa_serial)
        request.update(SerialNumber=mfa_serial, TokenCode=code)
    try:
        answer = (sts or session.client("sts")).assume_role(**request)["Credentials"]
    except ClientError as error:
        details = error.response["Error"]
        hint = "" if mfa_serial else " (the role requires MFA: pass --mfa-serial)"
        raise TopicError(
            f"cannot assume {role_arn}: {details.get('Code')}: {details.get('Message')}{hint}"
        ) from None
    except BotoCoreError as error:
        raise TopicError(f"cannot assume {role_arn}: {error}") from None
    return Credentials(answer["AccessKeyId"], answer["SecretAccessKey"], answer["SessionToken"])


def _read_mfa_code(mfa_serial: str) -> str:
    print(f"MFA code for {mfa_serial}: ", end="", file=sys.stderr, flush=True)
    code = sys.stdin.readline().strip()
    if not re.fullmatch(r"\d{6}", code):
        raise TopicError("the MFA code is six digits")
    return code
