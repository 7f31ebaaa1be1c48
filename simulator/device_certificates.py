"""The devices of an MQTT run: one AWS IoT thing per device, found by its certificate files.

A folder (--device-certificates) holds `<thing>.cert.pem` and `<thing>.key.pem` for every device
the exporting tool wrote. The file stems are the thing names, and the thing names are the device
ids: the MQTT client id, the topic `telemetry/<environment>/<thing>/data` and the payload's `device_id`. A run
with --devices N takes the first N names in sorted order, so every host that reads the same
folder gives device number d the same thing.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from simulator.errors import SimulatorError

CERT_SUFFIX, KEY_SUFFIX = ".cert.pem", ".key.pem"
# AWS IoT thing names (CreateThing's thingName): 1-128 of letters, digits, ':', '_' and '-'. Such a
# name needs no JSON escaping and is one MQTT topic level.
THING_NAME = re.compile(r"^[A-Za-z0-9:_-]{1,128}$")


def certificate_files(folder: Path, thing: str) -> tuple[Path, Path]:
    return folder / f"{thing}{CERT_SUFFIX}", folder / f"{thing}{KEY_SUFFIX}"


def write_device(folder: Path, thing: str, certificate_pem: str, private_key: str) -> None:
    """`thing`'s two files in `folder`, each written 0600 under a temporary name and renamed, so
    no reader sees a partial file and no link is followed."""
    for path, text in zip(certificate_files(folder, thing), (certificate_pem, private_key)):
        temporary = path.with_name(f".{path.name}.partial")
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(descriptor, "w") as handle:
            os.fchmod(descriptor, 0o600)  # the mode os.open gives is subject to the umask
            handle.write(text)
        os.replace(temporary, path)


# Devices publish to <root>/<environment>/<thing name>/data: the environment's device policy allows
# that one topic, and only that environment's rule reads it, taking the thing name from level
# THING_LEVEL (stacks.naming takes both from here). Environments sharing an account share AWS IoT's
# one message broker, so the environment in the topic is what keeps their messages apart.
TOPIC_ROOT = "telemetry"
THING_LEVEL = 3
ENVIRONMENT = re.compile(r"^[A-Za-z0-9_-]{1,32}$")  # one topic level: no "/", "+" or "#"


def telemetry_topic(environment: str, thing: str) -> str:
    """The one topic a device's IoT policy lets it publish to."""
    return f"{TOPIC_ROOT}/{environment}/{thing}/data"


def thing_names(folder: Path, devices: int) -> tuple[str, ...]:
    """The first `devices` thing names of the folder in sorted order; every problem is one line."""
    flag = "--device-certificates"
    if not folder.is_dir():
        raise SimulatorError(f"{flag} {folder}: no such directory")
    stems = sorted(
        path.name[: -len(CERT_SUFFIX)] for path in folder.glob(f"*{CERT_SUFFIX}") if path.is_file()
    )
    if len(stems) < devices:
        raise SimulatorError(
            f"{flag} {folder} holds {len(stems)} device certificate(s) (*{CERT_SUFFIX}); "
            f"--devices {devices} needs {devices}"
        )
    chosen = stems[:devices]
    for thing in chosen:
        if not THING_NAME.match(thing):
            raise SimulatorError(
                f"{flag}: {thing!r} is not an AWS IoT thing name "
                "(1-128 letters, digits, ':', '_' or '-')"
            )
        key = certificate_files(folder, thing)[1]
        if not key.is_file():
            raise SimulatorError(f"{flag}: {thing}{CERT_SUFFIX} has no private key {key.name}")
    return tuple(chosen)
