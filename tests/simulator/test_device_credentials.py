"""simulator/device_credentials.py against moto's SSM (SecureString under a KMS key)."""

from __future__ import annotations

import json
import stat

import pytest

from simulator.device_credentials import NAMES_PER_CALL, main, thing_name
from stacks.config import load_environment
from stacks.naming import device_credentials_path, device_thing_name
from tests.conftest import cdk_context

CONFIG = load_environment(cdk_context()["environments"], "dev")
PREFIX = f"{CONFIG.resource_prefix}-device-"
PATH = device_credentials_path(CONFIG)


@pytest.fixture
def ssm(moto_session):
    key = moto_session.client("kms").create_key()["KeyMetadata"]["Arn"]
    client = moto_session.client("ssm")
    for index in range(1, 26):  # more than two GetParameters calls' worth
        name = thing_name(PREFIX, index)
        value = {
            "thing_name": name,
            "certificate_arn": f"arn:aws:iot:eu-west-1:123456789012:cert/{index:064x}",
            "certificate_pem": f"-----BEGIN CERTIFICATE-----\n{name}\n-----END CERTIFICATE-----\n",
            "private_key": f"-----BEGIN RSA PRIVATE KEY-----\n{name}\n-----END RSA PRIVATE KEY-----\n",
        }
        client.put_parameter(Name=f"{PATH}/{name}", Value=json.dumps(value), Type="SecureString", KeyId=key)
    return client


def test_thing_names_are_the_ones_provisioning_creates():
    assert thing_name(PREFIX, 42) == device_thing_name(CONFIG, 42)


def test_a_host_writes_exactly_its_block_owner_only(ssm, tmp_path, capsys):
    out = tmp_path / "devices"
    args = ["--path", PATH, "--thing-prefix", PREFIX, "--first", "11", "--count", "12", "--out", str(out)]
    assert 12 > NAMES_PER_CALL
    assert main(args, ssm=ssm) == 0
    names = [thing_name(PREFIX, i) for i in range(11, 23)]
    assert sorted(p.name for p in out.iterdir()) == sorted(
        f"{n}.{kind}.pem" for n in names for kind in ("cert", "key")
    )
    assert stat.S_IMODE(out.stat().st_mode) == 0o700
    assert {stat.S_IMODE(p.stat().st_mode) for p in out.iterdir()} == {0o600}
    assert names[0] in (out / f"{names[0]}.key.pem").read_text()
    assert "PRIVATE KEY" not in (out / f"{names[0]}.cert.pem").read_text()
    assert capsys.readouterr().out.startswith("wrote the certificates of 12 devices")


def test_devices_not_provisioned_are_one_line_and_nothing_is_written(ssm, tmp_path, capsys):
    out = tmp_path / "devices"
    args = ["--path", PATH, "--thing-prefix", PREFIX, "--first", "20", "--count", "10", "--out", str(out)]
    assert main(args, ssm=ssm) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1
    assert f"4 of 10 devices have no credentials under {PATH} (first: {thing_name(PREFIX, 26)})" in error
    assert not out.exists()
