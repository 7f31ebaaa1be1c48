"""Fetch a fleet host's device certificates for `--transport mqtt`.

telemetry/commands/devices/provision.py keeps each simulator device's certificate and private key in one SSM
SecureString parameter, `<path>/<thing name>`, whose value is JSON with `thing_name`,
`certificate_arn`, `certificate_pem` and `private_key`. A fleet host takes its own block of
things (telemetry/commands/simulate.py gives each host a different first device) and writes them where the
simulator reads them: `<thing>.cert.pem` and `<thing>.key.pem`, owner-only, in a folder of their
own. Run by the Run Command document:

  python -m simulator.device_credentials --path /telemetry-dev/devices \\
      --thing-prefix telemetry-dev-device- --first 101 --count 100 --out /run/simulator-devices

Exit codes: 0 written; 2 a device is not provisioned, or SSM refused (one line each).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from simulator.device_certificates import write_device

# Thing names end in the device number with this many digits (stacks.naming.device_thing_name).
DEVICE_DIGITS = 6
# GetParameters takes at most 10 names (SSM API Reference, GetParameters: "Names ... Maximum
# number of 10 items").
NAMES_PER_CALL = 10
FIELDS = ("thing_name", "certificate_arn", "certificate_pem", "private_key")


class CredentialsError(Exception):
    """One line for the operator."""


@dataclasses.dataclass
class Credentials:
    """The value of a device's parameter, as telemetry/commands/devices/provision.py stores it."""

    thing_name: str
    certificate_arn: str
    certificate_pem: str
    private_key: str

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> Credentials | None:
        """None for a value provisioning did not write (it is then replaced)."""
        try:
            value = json.loads(text)
            return cls(**{key: value[key] for key in FIELDS})
        except (ValueError, TypeError, KeyError):
            return None


def thing_name(prefix: str, index: int) -> str:
    return f"{prefix}{index:0{DEVICE_DIGITS}d}"


def read(ssm, parameter_names: Sequence[str]) -> dict[str, Credentials | None]:
    """Last name segment (the thing) -> its credentials (None: a value provisioning did not
    write), for each named parameter that exists; absent ones are left out."""
    found: dict[str, Credentials | None] = {}
    for start in range(0, len(parameter_names), NAMES_PER_CALL):
        batch = list(parameter_names[start : start + NAMES_PER_CALL])
        for parameter in ssm.get_parameters(Names=batch, WithDecryption=True)["Parameters"]:
            found[parameter["Name"].rsplit("/", 1)[-1]] = Credentials.from_json(parameter["Value"])
    return found


def fetch(ssm, path: str, names: Sequence[str]) -> dict[str, Credentials]:
    """thing name -> its stored credentials, for every name; refuses when any is missing."""
    found = read(ssm, [f"{path}/{name}" for name in names])
    missing = [name for name in names if found.get(name) is None]
    if missing:
        raise CredentialsError(
            f"{len(missing)} of {len(names)} devices have no credentials under {path} "
            f"(first: {sorted(missing)[0]}); provision them: telemetry devices provision --env ENV --count N"
        )
    return found


def write(directory: Path, credentials: dict[str, Credentials]) -> None:
    """`<thing>.cert.pem` and `<thing>.key.pem` for each device, readable by the owner only."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    directory.chmod(0o700)
    for name, value in credentials.items():
        write_device(directory, name, value.certificate_pem, value.private_key)


def main(argv: Sequence[str] | None = None, *, ssm=None) -> int:
    parser = argparse.ArgumentParser(description="Write this host's device certificates for --transport mqtt.")
    parser.add_argument("--path", required=True, help="SSM path of the credentials, e.g. /telemetry-dev/devices")
    parser.add_argument("--thing-prefix", required=True, help="thing names without the device number")
    parser.add_argument("--first", type=int, required=True, help="first device number (from 1)")
    parser.add_argument("--count", type=int, required=True, help="how many devices")
    parser.add_argument("--out", type=Path, required=True, help="folder to write the PEM files into")
    parser.add_argument("--region", help="AWS region (default: the environment's)")
    args = parser.parse_args(argv)
    if args.first < 1 or args.count < 1:
        parser.exit(2, f"{parser.prog}: error: --first and --count must be at least 1\n")
    names = [thing_name(args.thing_prefix, index) for index in range(args.first, args.first + args.count)]
    try:
        if ssm is None:
            import boto3

            ssm = boto3.client("ssm", region_name=args.region)
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            credentials = fetch(ssm, args.path.rstrip("/"), names)
        except (BotoCoreError, ClientError) as error:
            raise CredentialsError(f"cannot read {args.path}: {error}") from None
        write(args.out, credentials)
    except CredentialsError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"wrote the certificates of {len(names)} devices ({names[0]} .. {names[-1]}) to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
