"""`telemetry devices provision|delete|export`: create, remove or export the AWS IoT things and certificates of an environment's simulated devices.

  telemetry devices provision --env ENV --count N [--dry-run]
      make sure devices 1..N exist with stored credentials; creates only what is missing and never
      touches devices above N
  telemetry devices delete --env ENV [--dry-run]
      remove every device of ENV and its stored credentials
  telemetry devices export --env ENV --dir DIR [--first I] [--count N]
      write <thing>.cert.pem and <thing>.key.pem (0600, directory 0700) for the simulator on a
      fleet host; DIR may not be inside a git repository

A device is an IoT thing named <resource prefix>-device-NNNNNN with the attributes
fleet=<resource prefix>-simulator (the tool lists its own things by that attribute and name, so it
never sees another environment's) and environment=<environment name> (the device policy lets only
things of its environment connect; a thing made before it had the attribute gets it), one active certificate attached to the thing and carrying the
device gateway's IoT policy (<resource prefix>-device), and the certificate with its private key
in the SSM SecureString parameter /<resource prefix>/devices/<thing>, encrypted with the KMS key
of the DeviceGateway stack's output DeviceCredentialsKeyArn. The parameter holds JSON:
{"thing_name", "certificate_arn", "certificate_pem", "private_key"}.

Steps run so that an interrupted run loses nothing and a rerun finishes it: the parameter is
written right after the certificate is created (AWS IoT hands out the private key only then), and
the certificate is attached to the thing last, so a thing with its stored certificate attached is
complete. A certificate on a thing without stored credentials is detached, deactivated and
deleted, and a new one made. A thing with exactly its stored certificate attached counts as
complete ("unchanged") without more calls: the policy and the certificate's status are not checked
again, so a certificate deactivated by hand stays so. AWS calls retry throttling with botocore's
standard retry mode.

--dry-run plans offline from cdk.json: the thing, policy and parameter names a run would use, and
what it reads from the account first (the fleet's things and stored credentials, each thing's
certificates, the KMS key), which decides what is created, repaired or deleted.

Exit codes, as every `telemetry` command: 0 done (or dry run); 1 some devices failed (the others
are done; run again to finish) or an AWS call failed; 2 bad input, a missing stack output or
policy, or no credentials (nothing changed by this device or later ones).
"""

from __future__ import annotations

import argparse
import re
import stat
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from botocore.exceptions import ClientError

from simulator.device_certificates import write_device
from simulator.device_credentials import Credentials
from simulator.device_credentials import read as read_credentials
from stacks.config import EnvironmentConfig, load_environment, read_environments
from stacks.naming import (
    DEVICE_ENVIRONMENT_ATTRIBUTE,
    device_credentials_path,
    device_policy_name,
    device_thing_name,
    simulator_fleet_name,
)
from telemetry.shared.cluster_inventory import deployed_outputs, device_gateway_stack_name
from telemetry.shared.errors import ToolError


CREDENTIALS_KEY_OUTPUT = "DeviceCredentialsKeyArn"
FLEET_ATTRIBUTE = "fleet"
MAX_DEVICES = 10_000
# "Standard parameters have a value limit of 4 KB" (PutParameter, Tier); SSM's error counts 4096
# characters, and the value is ASCII.
STANDARD_PARAMETER_LIMIT = 4096
CONSECUTIVE_FAILURES_TO_STOP = 5

# Every AWS client the tool makes. Per-API request quotas apply to the IoT control plane (a public
# dump of the Service Quotas list gives 100 TPS for CreateThing, DeleteThing, AttachThingPrincipal
# and DetachThingPrincipal, 10 for ListThings and ListThingPrincipals; not checked against the AWS
# IoT Core endpoints and quotas page, nor numbers for the certificate and policy calls). Standard
# mode retries ThrottlingException with exponential backoff and jitter; 10 attempts ride out about
# a minute of throttling per call. The tool calls one API at a time.
RETRIES = {"retries": {"mode": "standard", "max_attempts": 10}}


def certificate_id(certificate_arn: str) -> str:
    """"The last part of the certificate ARN contains the certificate ID" (DeleteCertificate)."""
    return certificate_arn.rsplit("/", 1)[-1]


def short(certificate_arn: str) -> str:
    return certificate_id(certificate_arn)[:12]


@dataclass(frozen=True)
class Fleet:
    """The names of one environment's devices."""

    config: EnvironmentConfig

    @property
    def attribute(self) -> str:
        return simulator_fleet_name(self.config)

    @property
    def attributes(self) -> dict[str, str]:
        """The attributes each of the fleet's things carries."""
        return {FLEET_ATTRIBUTE: self.attribute, DEVICE_ENVIRONMENT_ATTRIBUTE: self.config.name}

    @property
    def path(self) -> str:
        return device_credentials_path(self.config)

    @property
    def policy(self) -> str:
        return device_policy_name(self.config)

    def thing(self, index: int) -> str:
        return device_thing_name(self.config, index)

    def parameter(self, thing: str) -> str:
        return f"{self.path}/{thing}"

    def index_of(self, thing: str) -> int | None:
        """The device number of one of this fleet's thing names, None for any other name."""
        pattern = re.escape(device_thing_name(self.config, 0)).replace("000000", "([0-9]{6})")
        match = re.fullmatch(pattern, thing)
        return int(match.group(1)) if match and int(match.group(1)) > 0 else None


class DeviceRegistry:
    """The AWS IoT calls. Rules from the AWS IoT API Reference are quoted where they are relied on."""

    def __init__(self, iot, *, sleep: Callable[[float], None] = time.sleep) -> None:
        self._iot = iot
        self._sleep = sleep

    def fleet_things(self, fleet: Fleet) -> dict[str, dict[str, str]]:
        """Things carrying the fleet attribute (ListThings filters on one attribute, exact value
        unless usePrefixAttributeValue), narrowed to this fleet's thing names, with the attributes
        ListThings returns for each."""
        things = {}
        for page in self._iot.get_paginator("list_things").paginate(
            attributeName=FLEET_ATTRIBUTE, attributeValue=fleet.attribute
        ):
            things.update((t["thingName"], t.get("attributes", {})) for t in page["things"] if fleet.index_of(t["thingName"]))
        return things

    def require_policy(self, name: str) -> None:
        try:
            self._iot.get_policy(policyName=name)
        except self._iot.exceptions.ResourceNotFoundException:
            raise ToolError(f"IoT policy {name} does not exist; deploy the DeviceGateway stack first") from None

    def principals(self, thing: str) -> list[str]:
        found = []
        for page in self._iot.get_paginator("list_thing_principals").paginate(thingName=thing):
            found.extend(page["principals"])
        return found

    def certificate_status(self, certificate_arn: str) -> str | None:
        """ACTIVE, INACTIVE, REVOKED, ...; None when there is no such certificate."""
        try:
            description = self._iot.describe_certificate(certificateId=certificate_id(certificate_arn))
        except self._iot.exceptions.ResourceNotFoundException:
            return None
        return description["certificateDescription"]["status"]

    def create_thing(self, thing: str, fleet: Fleet) -> None:
        # "If this call is made multiple times using the same thing name and configuration, the call
        # will succeed. If this call is made with the same thing name but different configuration a
        # ResourceAlreadyExistsException is thrown" (CreateThing): a rerun may repeat it, and a
        # thing of that name without the fleet attribute (not ours) is refused, not taken over.
        try:
            self._iot.create_thing(thingName=thing, attributePayload={"attributes": fleet.attributes})
        except self._iot.exceptions.ResourceAlreadyExistsException:
            raise DeviceFailure(f"a thing {thing} without attribute {FLEET_ATTRIBUTE}={fleet.attribute} exists; "
                                "it is not this tool's, so it is left alone") from None

    def label_thing(self, thing: str, fleet: Fleet) -> None:
        # UpdateThing's attributePayload with merge true adds or replaces the attributes given and
        # keeps the others (AttributePayload: "merge").
        self._iot.update_thing(thingName=thing, attributePayload={"attributes": fleet.attributes, "merge": True})

    def create_certificate(self) -> dict:
        # "This is the only time AWS IoT issues the private key for this certificate"
        # (CreateKeysAndCertificate): the caller stores it before anything else.
        return self._iot.create_keys_and_certificate(setAsActive=True)

    def attach(self, thing: str, certificate_arn: str, policy: str) -> None:
        """The policy first, the thing last: a thing with its stored certificate attached is complete.
        Both calls succeed again for an attachment that exists (no source says so for real IoT; the
        tool only repeats them after an interruption)."""
        self._iot.attach_policy(policyName=policy, target=certificate_arn)
        self._iot.attach_thing_principal(thingName=thing, principal=certificate_arn)

    def retire(self, certificate_arn: str) -> None:
        """Detach, deactivate and delete a certificate. "A certificate cannot be deleted if it has a
        policy or IoT thing attached to it or if its status is set to ACTIVE. To delete a
        certificate, first use the DetachPolicy action to detach all policies. Next, use the
        UpdateCertificate action to set the certificate to the INACTIVE status" (DeleteCertificate)."""
        policies = []
        for page in self._iot.get_paginator("list_attached_policies").paginate(target=certificate_arn):
            policies.extend(p["policyName"] for p in page["policies"])
        for policy in policies:
            self._iot.detach_policy(policyName=policy, target=certificate_arn)
        things = []
        for page in self._iot.get_paginator("list_principal_things").paginate(principal=certificate_arn):
            things.extend(page["things"])
        for thing in things:
            self._iot.detach_thing_principal(thingName=thing, principal=certificate_arn)
        self._iot.update_certificate(certificateId=certificate_id(certificate_arn), newStatus="INACTIVE")
        self._delete_certificate(certificate_arn)

    def _delete_certificate(self, certificate_arn: str) -> None:
        # DetachThingPrincipal: "This call is asynchronous. It might take several seconds for the
        # detachment to propagate." Until then DeleteCertificate answers DeleteConflictException.
        delays = [1, 2, 4, 8, 16]
        while True:
            try:
                self._iot.delete_certificate(certificateId=certificate_id(certificate_arn))
                return
            except self._iot.exceptions.DeleteConflictException:
                if not delays:
                    raise
                self._sleep(delays.pop(0))

    def delete_thing(self, thing: str) -> None:
        # The API reference does not say DeleteThing refuses a thing with principals attached
        # (moto does, ThingStillAttached); the tool retires every certificate first either way.
        # "Returns successfully with no error if ... you specify a thing that doesn't exist."
        self._iot.delete_thing(thingName=thing)


class CredentialStore:
    """The devices' parameters in SSM."""

    def __init__(self, ssm, fleet: Fleet) -> None:
        self._ssm = ssm
        self._fleet = fleet

    def stored(self) -> dict[str, Credentials | None]:
        """thing name -> credentials (None: a parameter this tool cannot read) for every parameter
        under the fleet's path that is named after one of its things."""
        found: dict[str, Credentials | None] = {}
        for page in self._ssm.get_paginator("get_parameters_by_path").paginate(
            Path=self._fleet.path, Recursive=False, WithDecryption=True
        ):
            for parameter in page["Parameters"]:
                thing = parameter["Name"].rsplit("/", 1)[-1]
                if self._fleet.index_of(thing):
                    found[thing] = Credentials.from_json(parameter["Value"])
        return found

    def read(self, things: Sequence[str]) -> dict[str, Credentials | None]:
        """Only the named things' parameters."""
        return read_credentials(self._ssm, [self._fleet.parameter(t) for t in things])

    def put(self, credentials: Credentials, key_arn: str, *, overwrite: bool) -> None:
        value = credentials.to_json()
        if len(value.encode()) > STANDARD_PARAMETER_LIMIT:
            raise DeviceFailure(f"credentials of {credentials.thing_name} take {len(value.encode())} bytes, over the "
                                f"{STANDARD_PARAMETER_LIMIT} of a Standard parameter")
        self._ssm.put_parameter(
            Name=self._fleet.parameter(credentials.thing_name),
            Description=f"Certificate and private key of AWS IoT thing {credentials.thing_name} (telemetry/commands/devices/provision.py)",
            Value=value,
            Type="SecureString",
            KeyId=key_arn,
            Tier="Standard",
            Overwrite=overwrite,
        )

    def delete(self, thing: str) -> None:
        try:
            self._ssm.delete_parameter(Name=self._fleet.parameter(thing))
        except self._ssm.exceptions.ParameterNotFound:
            pass


class DeviceFailure(Exception):
    """One device could not be brought to the wanted state; the run goes on with the next."""


@dataclass
class DeviceState:
    """What AWS holds of one device before the tool acts."""

    index: int
    thing: str
    thing_exists: bool
    labelled: bool  # the thing carries the environment attribute the device policy asks for
    principals: list[str]
    parameter_exists: bool
    stored: Credentials | None


@dataclass
class Repair:
    """What creating or completing one device takes."""

    create_thing: bool = False
    label_thing: bool = False  # an existing thing without the environment attribute
    retire: list[str] = field(default_factory=list)  # certificate ARNs whose private key is not stored
    new_certificate: bool = False
    attach: str | None = None  # an existing stored certificate not yet attached

    @property
    def nothing(self) -> bool:
        return not (self.create_thing or self.label_thing or self.retire or self.new_certificate or self.attach)

    def describe(self) -> str:
        parts = ["thing"] if self.create_thing else []
        parts += [f"thing attribute {DEVICE_ENVIRONMENT_ATTRIBUTE}"] if self.label_thing else []
        parts += [f"retire certificate {short(arn)} (its key is not stored)" for arn in self.retire]
        if self.new_certificate:
            parts.append("certificate, stored credentials, policy and thing attachments")
        if self.attach:
            parts.append(f"attach stored certificate {short(self.attach)} to policy and thing")
        return ", ".join(parts)


def plan_repair(state: DeviceState, registry: DeviceRegistry) -> Repair:
    stored_arn = state.stored.certificate_arn if state.stored else None
    repair = Repair(create_thing=not state.thing_exists, label_thing=state.thing_exists and not state.labelled)
    for principal in state.principals:
        if ":cert/" not in principal:
            raise DeviceFailure(f"principal {principal} of {state.thing} is not a certificate; detach it by hand")
    keep = None
    if stored_arn and stored_arn in state.principals:
        keep = stored_arn  # complete: the thing attachment is the last step
    elif stored_arn:
        status = registry.certificate_status(stored_arn)
        if status == "ACTIVE":
            keep = repair.attach = stored_arn  # stopped between storing and attaching
        elif status is not None:
            repair.retire.append(stored_arn)  # deactivated or revoked: replaced
    repair.retire[:0] = [p for p in state.principals if p != keep]
    repair.new_certificate = keep is None
    return repair


@dataclass
class Tally:
    counts: dict[str, int] = field(default_factory=dict)
    consecutive_failures: int = 0

    def add(self, outcome: str) -> None:
        self.counts[outcome] = self.counts.get(outcome, 0) + 1
        self.consecutive_failures = self.consecutive_failures + 1 if outcome == "failed" else 0

    def line(self, outcomes: Sequence[str]) -> str:
        return ", ".join(f"{self.counts.get(o, 0)} {o}" for o in outcomes)


class Provisioner:
    def __init__(self, fleet: Fleet, registry: DeviceRegistry, store: CredentialStore,
                 say: Callable[[str], None] = print) -> None:
        self.fleet, self.registry, self.store, self.say = fleet, registry, store, say
        self.result: dict = {}  # what the last create, delete or export did (--format json)

    def states(self, indices: Iterable[int], things: dict[str, dict[str, str]],
               stored: dict[str, Credentials | None]) -> Iterable[DeviceState]:
        for index in indices:
            thing = self.fleet.thing(index)
            exists = thing in things
            labelled = things.get(thing, {}).get(DEVICE_ENVIRONMENT_ATTRIBUTE) == self.fleet.config.name
            yield DeviceState(index, thing, exists, labelled, self.registry.principals(thing) if exists else [],
                              thing in stored, stored.get(thing))

    def create(self, count: int, *, key_arn: str | None) -> int:
        things, stored = self.registry.fleet_things(self.fleet), self.store.stored()
        tally = Tally()
        for state in self.states(range(1, count + 1), things, stored):
            try:
                repair = plan_repair(state, self.registry)
                fresh = not state.thing_exists and not state.parameter_exists
                outcome = "unchanged" if repair.nothing else "created" if fresh else "repaired"
                certificate = self.apply(state, repair, key_arn) if not repair.nothing else state.stored.certificate_arn
                self.say(f"{state.thing}: {outcome}" + (f" ({repair.describe()})" if outcome == "repaired" else "")
                         + f", certificate {short(certificate)}")
            except (DeviceFailure, ClientError) as error:
                outcome = "failed"
                self.say(f"{state.thing}: failed: {one_line(error)}")
            tally.add(outcome)
            if tally.consecutive_failures >= CONSECUTIVE_FAILURES_TO_STOP:
                self.say(f"stopping: {CONSECUTIVE_FAILURES_TO_STOP} devices in a row failed")
                break
        above = sorted(i for i in map(self.fleet.index_of, set(things) | set(stored)) if i and i > count)
        if above:
            self.say(f"{len(above)} device(s) above --count {count} exist and were left as they are "
                     f"(highest {above[-1]}; --delete removes every device)")
        self.say(f"devices 1-{count}: {tally.line(('created', 'repaired', 'unchanged', 'failed'))}")
        self.result = {"environment": self.fleet.config.name, "devices": f"1-{count}",
                       **{o: tally.counts.get(o, 0) for o in ("created", "repaired", "unchanged", "failed")}}
        return 1 if tally.counts.get("failed") else 0

    def apply(self, state: DeviceState, repair: Repair, key_arn: str) -> str:
        if repair.create_thing:
            self.registry.create_thing(state.thing, self.fleet)
        if repair.label_thing:
            self.registry.label_thing(state.thing, self.fleet)
        for certificate_arn in repair.retire:
            self.registry.retire(certificate_arn)
        certificate = repair.attach
        if repair.new_certificate:
            created = self.registry.create_certificate()
            certificate = created["certificateArn"]
            try:
                self.store.put(
                    Credentials(state.thing, certificate, created["certificatePem"], created["keyPair"]["PrivateKey"]),
                    key_arn,
                    overwrite=state.parameter_exists,
                )
            except BaseException:
                # The key exists nowhere else: a certificate nobody can use is deleted at once.
                self.registry.retire(certificate)
                raise
        if certificate is None:  # the thing only lacked its attribute: its stored certificate is attached
            return state.stored.certificate_arn
        self.registry.attach(state.thing, certificate, self.fleet.policy)
        return certificate

    def delete(self) -> int:
        things, stored = self.registry.fleet_things(self.fleet), self.store.stored()
        tally = Tally()
        for thing in sorted(set(things) | set(stored)):
            try:
                certificates = self.registry.principals(thing) if thing in things else []
                stored_arn = stored[thing].certificate_arn if stored.get(thing) else None
                if stored_arn and stored_arn not in certificates and self.registry.certificate_status(stored_arn):
                    certificates.append(stored_arn)  # a run stopped between storing and attaching
                parts = ([f"certificate {short(c)}" for c in certificates] + (["thing"] if thing in things else [])
                         + (["stored credentials"] if thing in stored else []))
                # Contract order: detach policy, detach thing, INACTIVE, delete certificate (retire),
                # delete thing, then the parameter last, so a rerun still finds what is left.
                for certificate in certificates:
                    self.registry.retire(certificate)
                if thing in things:
                    self.registry.delete_thing(thing)
                if thing in stored:
                    self.store.delete(thing)
                self.say(f"{thing}: deleted {', '.join(parts)}")
                outcome = "deleted"
            except ClientError as error:
                outcome = "failed"
                self.say(f"{thing}: failed: {one_line(error)}")
            tally.add(outcome)
            if tally.consecutive_failures >= CONSECUTIVE_FAILURES_TO_STOP:
                self.say(f"stopping: {CONSECUTIVE_FAILURES_TO_STOP} devices in a row failed")
                break
        self.say(f"deleted {tally.counts.get('deleted', 0)} device(s) of {self.fleet.attribute}, {tally.counts.get('failed', 0)} failed")
        self.result = {"environment": self.fleet.config.name, "fleet": self.fleet.attribute,
                       **{o: tally.counts.get(o, 0) for o in ("deleted", "failed")}}
        return 1 if tally.counts.get("failed") else 0

    def export(self, directory: Path, first: int, count: int | None) -> int:
        prepare_export_directory(directory, create=False)
        if count is None:
            stored = self.store.stored()
            things = sorted((t for t in stored if self.fleet.index_of(t) >= first), key=self.fleet.index_of)
        else:
            things = [self.fleet.thing(i) for i in range(first, first + count)]
            stored = self.store.read(things)
        if not things:
            raise ToolError(f"no stored device credentials from device {first} on; run --count N first")
        prepare_export_directory(directory)
        failed = 0
        self.result = {"environment": self.fleet.config.name, "directory": str(directory), "exported": [], "failed": []}
        for thing in things:
            credentials = stored.get(thing)
            if credentials is None:
                failed += 1
                self.result["failed"].append(thing)
                self.say(f"{thing}: failed: " + ("no stored credentials; run --count first" if thing not in stored
                                                 else "stored credentials are not this tool's JSON; run --count to replace them"))
                continue
            write_device(directory, thing, credentials.certificate_pem, credentials.private_key)
            self.result["exported"].append(thing)
            self.say(f"{thing}: wrote {thing}.cert.pem and {thing}.key.pem")
        self.say(f"exported {len(things) - failed} device(s) to {directory}, {failed} failed")
        return 1 if failed else 0


def git_work_tree_of(path: Path) -> Path | None:
    for candidate in (path, *path.parents):
        if (candidate / ".git").exists():
            return candidate
    return None


def prepare_export_directory(directory: Path, create: bool = True) -> None:
    """A 0700 directory outside any git work tree (keys must never be committed); with create
    False, only whether it may be one (so a run that fails first, without credentials, leaves
    nothing behind)."""
    resolved = directory.expanduser().resolve()
    repository = git_work_tree_of(resolved)
    if repository is not None:
        raise ToolError(f"{directory} is inside the git repository {repository}; export private keys outside any repository")
    if resolved.exists():
        if not resolved.is_dir():
            raise ToolError(f"{directory} exists and is not a directory")
        mode = stat.S_IMODE(resolved.stat().st_mode)
        if mode & 0o077:
            raise ToolError(f"{directory} is open to group or others (mode {mode:04o}); chmod 700 it or name a new directory")
        return
    if not create:
        return
    resolved.mkdir(parents=True, mode=0o700)
    resolved.chmod(0o700)  # mkdir's mode is subject to the umask


def one_line(error: BaseException) -> str:
    return " ".join(str(error).split())


def run(args: argparse.Namespace, session_factory: Callable[[str], object]) -> int:
    config = load_environment(read_environments(), args.env)
    if args.dry_run:
        return plan_delete(args, config) if args.delete else plan_provision(args, config)
    session = session_factory(config.region)
    provisioner = provisioner_for(config, session)
    if args.export:
        code = provisioner.export(args.export, args.first, args.count)
    elif args.delete:
        code = provisioner.delete()
    else:
        code = ensure_devices(config, session, args.count, provisioner=provisioner)
    if args.format == "json":
        from telemetry.shared.output import document

        document(provisioner.result)
    return code


def plan_provision(args: argparse.Namespace, config: EnvironmentConfig) -> int:
    """--dry-run of provision: the names and steps from cdk.json; which devices exist is what a run
    reads first."""
    from telemetry.shared.output import dry_run_plan

    fleet, count = Fleet(config), args.count
    things = fleet.thing(1) + (f" .. {fleet.thing(count)}" if count > 1 else "")
    return dry_run_plan(
        args, config,
        summary=[f"devices 1-{count} of {config.name}: things {things}"],
        would_read=[
            f"output {CREDENTIALS_KEY_OUTPUT} of stack {device_gateway_stack_name(config)}: the KMS key the "
            "credentials are stored with (CloudFormation)",
            f"that IoT policy {fleet.policy} exists (the DeviceGateway stack's)",
            f"the things with attribute {FLEET_ATTRIBUTE}={fleet.attribute} (AWS IoT ListThings) and the stored "
            f"credentials under {fleet.path} (SSM GetParametersByPath): which of devices 1-{count} exist, are "
            "complete or need repair, and how many above --count exist (left alone)",
            "each existing thing's certificates (ListThingPrincipals) and a stored certificate's status",
        ],
        would_change=[
            f"for each device of 1-{count} that is missing: create its thing with attributes "
            f"{', '.join(f'{k}={v}' for k, v in fleet.attributes.items())}, an active certificate and key, store "
            f"them in SecureString {fleet.parameter('<thing>')} (Standard tier, the KMS key above), then attach "
            f"policy {fleet.policy} and the thing to the certificate",
            f"for each one an earlier run left incomplete: add a missing {DEVICE_ENVIRONMENT_ATTRIBUTE} attribute, "
            "retire (detach, deactivate, delete) a certificate whose key is not stored, make a new one or attach the "
            "stored one",
            "leave complete devices, and every device above --count, as they are",
        ],
        devices=f"1-{count}", things=[fleet.thing(1), fleet.thing(count)], policy=fleet.policy,
        parameters=fleet.path,
    )


def plan_delete(args: argparse.Namespace, config: EnvironmentConfig) -> int:
    """--dry-run of delete: what a run removes, by name; how many there are is what it reads."""
    from telemetry.shared.output import dry_run_plan

    fleet = Fleet(config)
    return dry_run_plan(
        args, config,
        summary=[f"every device of {config.name}: things {fleet.thing(1)} .. {fleet.thing(MAX_DEVICES)} with "
                 f"attribute {FLEET_ATTRIBUTE}={fleet.attribute}, and their stored credentials"],
        would_read=[
            f"the things with attribute {FLEET_ATTRIBUTE}={fleet.attribute} (AWS IoT ListThings) and the stored "
            f"credentials under {fleet.path} (SSM GetParametersByPath): which devices exist",
            "each thing's certificates (ListThingPrincipals), a stored certificate's status, and each certificate's "
            "policies and things",
        ],
        would_change=[
            "for each device: detach each certificate's policies and things, set it INACTIVE and delete it; delete "
            f"the thing; then delete its parameter {fleet.parameter('<thing>')} (last, so a run started again "
            "finds what is left)",
            "leave every other thing alone (another environment's, or one without the fleet attribute)",
        ],
        fleet=fleet.attribute, things=f"{fleet.thing(1)} .. {fleet.thing(MAX_DEVICES)}", parameters=fleet.path,
    )


def provisioner_for(config: EnvironmentConfig, session, say: Callable[[str], None] = print) -> Provisioner:
    fleet = Fleet(config)
    return Provisioner(fleet, DeviceRegistry(session.client("iot", config=botocore_config())),
                       CredentialStore(session.client("ssm", config=botocore_config()), fleet), say=say)


def ensure_devices(config: EnvironmentConfig, session, count: int, *, say: Callable[[str], None] = print,
                   provisioner: Provisioner | None = None) -> int:
    """Devices 1..count exist with stored credentials (what is missing is created, what an
    interrupted run left is repaired); 0 when every one is, 1 when some failed."""
    provisioner = provisioner or provisioner_for(config, session, say)
    outputs = deployed_outputs(session.client("cloudformation", config=botocore_config()), device_gateway_stack_name(config))
    key_arn = outputs.get(CREDENTIALS_KEY_OUTPUT)
    provisioner.registry.require_policy(provisioner.fleet.policy)
    return provisioner.create(count, key_arn=key_arn)


def botocore_config():
    from botocore.config import Config

    return Config(**RETRIES)


def _device_number(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number") from None
    if not 1 <= number <= MAX_DEVICES:
        raise argparse.ArgumentTypeError(f"must be 1-{MAX_DEVICES:,}, got {number}")
    return number


def add_arguments(parser: argparse.ArgumentParser, mode: str) -> None:
    """`telemetry devices provision|delete|export`: one subcommand per mode."""
    if mode == "provision":
        parser.add_argument("--count", type=_device_number, metavar="N", required=True,
                            help=f"create devices 1..N (1-{MAX_DEVICES:,}); those that exist are kept")
    if mode == "export":
        parser.add_argument("--dir", type=Path, metavar="DIR", required=True,
                            help="write each device's certificate and key here (0700, outside any git repository)")
        parser.add_argument("--count", type=_device_number, metavar="N", help="export N devices (default: all)")
        parser.add_argument("--first", type=_device_number, metavar="I", default=1, help="first device number (default 1)")
    if mode in ("provision", "delete"):
        parser.add_argument("--dry-run", action="store_true",
                            help="offline: print what a run would read from the account and create or delete; call "
                            "and change nothing")


def check_arguments(args: argparse.Namespace) -> None:
    """From a `telemetry devices` subcommand to the fields run() reads."""
    from telemetry.shared.errors import UsageError

    args.delete = args.mode == "delete"
    args.export = getattr(args, "dir", None)
    args.count = getattr(args, "count", None)
    args.first = getattr(args, "first", 1)
    args.dry_run = getattr(args, "dry_run", False)
    problem = _past_the_last_device(args)
    if problem:
        raise UsageError(problem)


def _past_the_last_device(args: argparse.Namespace) -> str:
    """An export that would run past device MAX_DEVICES: what to say, or ""."""
    if args.export and args.count is not None and args.first + args.count - 1 > MAX_DEVICES:
        return f"--first {args.first} --count {args.count} goes past device {MAX_DEVICES:,}"
    return ""


if __name__ == "__main__":  # run by path, as before the one front door
    from telemetry.shared.errors import moved

    raise SystemExit(moved("devices provision"))
