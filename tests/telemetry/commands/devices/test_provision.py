"""`telemetry devices provision|delete|export` (telemetry/commands/devices/provision.py) against moto's IoT, SSM and KMS, with the DeviceGateway stack's
DescribeStacks answered by botocore's Stubber."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from botocore.awsrequest import AWSResponse
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from telemetry import cli
from telemetry.commands.devices import provision as provision_devices
from tests.conftest import REPO
from tests.msk_authorization import resolve
from tests.telemetry.stack_outputs import StubbedStackSession, outputs_list

ENVIRONMENTS = ("dev", "staging")


def thing(index: int, env: str = "dev") -> str:
    return f"telemetry-{env}-device-{index:06d}"


def parameter(index: int, env: str = "dev") -> str:
    return f"/telemetry-{env}/devices/{thing(index, env)}"


def device_policy_document(synthesized, env: str) -> dict:
    """The device gateway's IoT policy as synthesized, its ARNs resolved for moto's account."""
    template = synthesized(env).stacks["device_gateway"]
    (policy,) = [r for r in template["Resources"].values() if r["Type"] == "AWS::IoT::Policy"]
    pseudo = {"AWS::Partition": "aws", "AWS::Region": "eu-west-1", "AWS::AccountId": "123456789012"}
    return resolve(policy["Properties"]["PolicyDocument"], pseudo=pseudo, imports={})


@dataclass
class Aws:
    session: object
    keys: dict[str, str]  # environment -> ARN of its device credentials key

    def client(self, name):
        return self.session.client(name)

    def run(self, argv, *, outputs: dict[str, str] | None = None, stack: bool = True) -> int:
        env = argv[argv.index("--env") + 1]
        values = {"DeviceCredentialsKeyArn": self.keys.get(env, "")} if outputs is None else outputs
        return cli.main(
            argv,
            session_factory=lambda region: StubbedStackSession(
                self.session, f"Telemetry-{env}-DeviceGateway", outputs_list(values) if stack else None
            ),
        )

    def things(self, env: str = "dev") -> list[str]:
        things = self.client("iot").list_things(attributeName="fleet", attributeValue=f"telemetry-{env}-simulator")
        return sorted(t["thingName"] for t in things["things"])

    def stored(self, env: str = "dev") -> dict[str, dict]:
        found = self.client("ssm").get_parameters_by_path(Path=f"/telemetry-{env}/devices", WithDecryption=True)
        return {p["Name"]: json.loads(p["Value"]) for p in found["Parameters"]}

    def certificates(self) -> dict[str, str]:
        """certificate ARN -> status, every certificate in the account"""
        return {c["certificateArn"]: c["status"] for c in self.client("iot").list_certificates()["certificates"]}

    def active_without_stored_key(self) -> set[str]:
        stored = {v["certificate_arn"] for env in ENVIRONMENTS for v in self.stored(env).values()}
        return {arn for arn, status in self.certificates().items() if status == "ACTIVE"} - stored

    def fail(self, service: str, operation: str, when=lambda params: True, *, error: str | None = None):
        """In clients made from now on, the operation raises (KeyboardInterrupt, or the AWS error
        named) when `when` holds for its parameters, before any request is sent. Returns the undo."""

        def decide(params, context, **_):  # sees the API parameters
            context["fail"] = when(params)

        def answer(context, **_):  # may answer in place of AWS
            if not context.get("fail"):
                return None
            if error is None:
                raise KeyboardInterrupt
            return AWSResponse(None, 400, {}, None), {"Error": {"Code": error, "Message": f"{operation} refused"}}

        hooks = [(f"before-parameter-build.{service}.{operation}", decide), (f"before-call.{service}.{operation}", answer)]
        for event, handler in hooks:
            self.session.events.register(event, handler)
        return lambda: [self.session.events.unregister(event, handler) for event, handler in hooks]

    def exit_code(self, argv, **kwargs) -> int:
        try:
            return self.run(argv, **kwargs)
        except SystemExit as exit:  # argparse
            return exit.code


@pytest.fixture
def aws(moto_session, synthesized):
    kms, iot = moto_session.client("kms"), moto_session.client("iot")
    keys = {}
    for env in ENVIRONMENTS:
        keys[env] = kms.create_key(Description=f"telemetry-{env} device credentials")["KeyMetadata"]["Arn"]
        document = json.dumps(device_policy_document(synthesized, env))
        iot.create_policy(policyName=f"telemetry-{env}-device", policyDocument=document)
    return Aws(moto_session, keys)


def lines(capsys) -> list[str]:
    return capsys.readouterr().out.strip().splitlines()


def test_creates_devices_and_a_rerun_creates_nothing(aws, capsys):
    assert aws.run(["devices", "provision", "--env", "dev", "--count", "3"]) == 0
    out = lines(capsys)
    assert [line.split(",")[0] for line in out[:3]] == [f"{thing(i)}: created" for i in (1, 2, 3)]
    assert out[-1] == "devices 1-3: 3 created, 0 repaired, 0 unchanged, 0 failed"
    assert aws.things() == [thing(1), thing(2), thing(3)]
    certificates = aws.certificates()

    assert aws.run(["devices", "provision", "--env", "dev", "--count", "3"]) == 0
    out = lines(capsys)
    assert [line.split(",")[0] for line in out[:3]] == [f"{thing(i)}: unchanged" for i in (1, 2, 3)]
    assert out[-1] == "devices 1-3: 0 created, 0 repaired, 3 unchanged, 0 failed"
    assert aws.certificates() == certificates


def test_extending_the_fleet_creates_only_the_new_devices(aws, capsys):
    assert aws.run(["devices", "provision", "--env", "dev", "--count", "3"]) == 0
    before = set(aws.certificates())
    capsys.readouterr()
    assert aws.run(["devices", "provision", "--env", "dev", "--count", "5"]) == 0
    assert lines(capsys)[-1] == "devices 1-5: 2 created, 0 repaired, 3 unchanged, 0 failed"
    assert aws.things() == [thing(i) for i in range(1, 6)]
    assert len(set(aws.certificates()) - before) == 2

    # Asking for fewer never deletes the devices above.
    assert aws.run(["devices", "provision", "--env", "dev", "--count", "2"]) == 0
    assert "3 device(s) above --count 2 exist and were left as they are" in capsys.readouterr().out
    assert len(aws.things()) == 5


def test_each_device_has_its_own_active_certificate_with_the_device_policy_and_a_stored_key(aws):
    assert aws.run(["devices", "provision", "--env", "dev", "--count", "2"]) == 0
    iot, ssm = aws.client("iot"), aws.client("ssm")
    stored = aws.stored()
    metadata = {p["Name"]: p for p in ssm.describe_parameters(
        ParameterFilters=[{"Key": "Path", "Option": "OneLevel", "Values": ["/telemetry-dev/devices"]}])["Parameters"]}
    for index in (1, 2):
        credentials = stored[parameter(index)]
        assert set(credentials) == {"thing_name", "certificate_arn", "certificate_pem", "private_key"}
        assert credentials["thing_name"] == thing(index)
        arn = credentials["certificate_arn"]
        assert iot.list_thing_principals(thingName=thing(index))["principals"] == [arn]
        assert iot.list_principal_things(principal=arn)["things"] == [thing(index)]
        assert [p["policyName"] for p in iot.list_attached_policies(target=arn)["policies"]] == ["telemetry-dev-device"]
        description = iot.describe_certificate(certificateId=arn.rsplit("/", 1)[1])["certificateDescription"]
        assert description["status"] == "ACTIVE"
        assert description["certificatePem"] == credentials["certificate_pem"]
        # The stored key is the certificate's.
        key = serialization.load_pem_private_key(credentials["private_key"].encode(), password=None)
        certificate = x509.load_pem_x509_certificate(credentials["certificate_pem"].encode())
        assert key.public_key().public_numbers() == certificate.public_key().public_numbers()
        meta = metadata[parameter(index)]
        assert (meta["Type"], meta["KeyId"], meta["Tier"]) == ("SecureString", aws.keys["dev"], "Standard")
        assert len(ssm.get_parameter(Name=parameter(index), WithDecryption=True)["Parameter"]["Value"].encode()) <= 4096
    assert stored[parameter(1)]["certificate_arn"] != stored[parameter(2)]["certificate_arn"]
    described = iot.describe_thing(thingName=thing(1))
    # The environment attribute is what the device policy's Connect condition reads.
    assert described["attributes"] == {"fleet": "telemetry-dev-simulator", "environment": "dev"}


def test_a_device_made_before_the_environment_attribute_gets_it_and_keeps_its_certificate(aws, capsys):
    """A device the tool made before the policy asked for `environment` cannot connect after the
    update: provision adds the attribute (UpdateThing, merge), touching nothing else."""
    iot = aws.client("iot")
    assert aws.run(["devices", "provision", "--env", "dev", "--count", "2"]) == 0
    iot.update_thing(thingName=thing(1), attributePayload={"attributes": {"environment": ""}, "merge": True})
    assert iot.describe_thing(thingName=thing(1))["attributes"] == {"fleet": "telemetry-dev-simulator"}
    certificate = aws.stored()[parameter(1)]["certificate_arn"]
    capsys.readouterr()

    assert aws.run(["devices", "provision", "--env", "dev", "--count", "2"]) == 0
    out = lines(capsys)
    assert out[0].startswith(f"{thing(1)}: repaired (thing attribute environment), certificate")
    assert out[1].startswith(f"{thing(2)}: unchanged")
    assert iot.describe_thing(thingName=thing(1))["attributes"] == {"fleet": "telemetry-dev-simulator", "environment": "dev"}
    assert iot.list_thing_principals(thingName=thing(1))["principals"] == [certificate]


def test_a_certificate_whose_key_was_never_stored_is_replaced(aws, capsys):
    """A run killed between CreateKeysAndCertificate and PutParameter with the certificate already
    attached (or an older tool's leftovers): the thing has a certificate and no stored key."""
    iot = aws.client("iot")
    iot.create_thing(thingName=thing(1), attributePayload={"attributes": {"fleet": "telemetry-dev-simulator", "environment": "dev"}})
    orphan = iot.create_keys_and_certificate(setAsActive=True)["certificateArn"]
    iot.attach_policy(policyName="telemetry-dev-device", target=orphan)
    iot.attach_thing_principal(thingName=thing(1), principal=orphan)

    assert aws.run(["devices", "provision", "--env", "dev", "--count", "1"]) == 0
    out = lines(capsys)
    assert out[0].startswith(f"{thing(1)}: repaired (retire certificate {orphan.rsplit('/', 1)[1][:12]} (its key is not stored)")
    assert orphan not in aws.certificates()
    fresh = aws.stored()[parameter(1)]["certificate_arn"]
    assert iot.list_thing_principals(thingName=thing(1))["principals"] == [fresh]
    assert aws.certificates()[fresh] == "ACTIVE"


@pytest.mark.parametrize("error", [None, "AccessDeniedException"], ids=["interrupted", "refused"])
def test_no_active_certificate_is_left_when_its_key_cannot_be_stored(aws, capsys, error):
    cured = aws.fail("ssm", "PutParameter", lambda params: params["Name"] == parameter(2), error=error)
    code = aws.run(["devices", "provision", "--env", "dev", "--count", "3"])
    out = capsys.readouterr()
    assert aws.active_without_stored_key() == set()
    assert aws.client("iot").list_thing_principals(thingName=thing(2))["principals"] == []
    if error is None:  # Ctrl-C: the run stops at device 2
        assert (code, out.err.strip()) == (130, "telemetry: interrupted")
        assert list(aws.stored()) == [parameter(1)]
    else:  # AWS refused: device 2 failed, the others are done
        assert code == 1
        assert f"{thing(2)}: failed: An error occurred (AccessDeniedException)" in out.out
        assert "devices 1-3: 2 created, 0 repaired, 0 unchanged, 1 failed" in out.out
        assert list(aws.stored()) == [parameter(1), parameter(3)]

    cured()
    assert aws.run(["devices", "provision", "--env", "dev", "--count", "3"]) == 0
    assert f"{thing(2)}: repaired" in capsys.readouterr().out
    assert sorted(aws.stored()) == [parameter(i) for i in (1, 2, 3)]
    assert aws.active_without_stored_key() == set()


def test_a_run_stopped_before_attaching_is_finished_with_the_stored_certificate(aws, capsys):
    cured = aws.fail("iot", "AttachThingPrincipal", lambda params: params["thingName"] == thing(1))
    assert aws.run(["devices", "provision", "--env", "dev", "--count", "2"]) == 130  # interrupted
    stored = aws.stored()[parameter(1)]["certificate_arn"]
    assert aws.client("iot").list_thing_principals(thingName=thing(1))["principals"] == []
    capsys.readouterr()

    cured()
    assert aws.run(["devices", "provision", "--env", "dev", "--count", "2"]) == 0
    out = capsys.readouterr().out
    assert f"{thing(1)}: repaired (attach stored certificate {stored.rsplit('/', 1)[1][:12]} to policy and thing)" in out
    assert f"{thing(2)}: created" in out
    assert aws.client("iot").list_thing_principals(thingName=thing(1))["principals"] == [stored]
    assert len(aws.certificates()) == 2


def test_delete_removes_every_device_of_the_environment_and_nothing_of_another(aws, capsys):
    assert aws.run(["devices", "provision", "--env", "dev", "--count", "3"]) == 0
    assert aws.run(["devices", "provision", "--env", "staging", "--count", "2"]) == 0
    staging = {arn: status for arn, status in aws.certificates().items()
               if arn in {v["certificate_arn"] for v in aws.stored("staging").values()}}
    # A dev device whose thing is gone but whose certificate and parameter remain (a delete stopped
    # after DeleteThing), and a thing of another tool named like none of ours.
    iot = aws.client("iot")
    leftover = aws.stored()[parameter(3)]["certificate_arn"]
    iot.detach_thing_principal(thingName=thing(3), principal=leftover)
    iot.delete_thing(thingName=thing(3))
    iot.create_thing(thingName="telemetry-dev-gateway-probe", attributePayload={"attributes": {"fleet": "telemetry-dev-simulator"}})
    capsys.readouterr()

    assert aws.run(["devices", "delete", "--env", "dev"]) == 0
    out = lines(capsys)
    assert out[-1] == "deleted 3 device(s) of telemetry-dev-simulator, 0 failed"
    assert out[2].startswith(f"{thing(3)}: deleted certificate ") and out[2].endswith("stored credentials")
    assert aws.things() == ["telemetry-dev-gateway-probe"]
    assert aws.stored() == {}
    assert set(aws.certificates()) == set(staging)
    assert aws.things("staging") == [thing(1, "staging"), thing(2, "staging")]
    assert sorted(aws.stored("staging")) == [parameter(1, "staging"), parameter(2, "staging")]
    assert set(staging.values()) == {"ACTIVE"}

    assert aws.run(["devices", "delete", "--env", "dev"]) == 0
    assert lines(capsys)[-1] == "deleted 0 device(s) of telemetry-dev-simulator, 0 failed"


def test_dry_runs_plan_offline_and_change_nothing(aws, capsys):
    """A dry run reads nothing from the account, even one that has devices: it names what a run
    would read there first, and what it would create or delete."""
    assert aws.run(["devices", "provision", "--env", "dev", "--count", "2"]) == 0
    before = (aws.things(), aws.stored(), aws.certificates())
    capsys.readouterr()

    def no_session(region):
        raise AssertionError("a dry run asked for an AWS session")

    assert cli.main(["devices", "provision", "--env", "dev", "--count", "3", "--dry-run"], session_factory=no_session) == 0
    out = lines(capsys)
    assert out[0] == f"devices 1-3 of dev: things {thing(1)} .. {thing(3)}"
    assert any("the things with attribute fleet=telemetry-dev-simulator (AWS IoT ListThings)" in line for line in out)
    assert any(line.startswith("  - for each device of 1-3 that is missing: create its thing") for line in out)
    assert out[-1] == "dry run: nothing was read from AWS, nothing was changed"
    assert cli.main(["devices", "delete", "--env", "dev", "--dry-run", "--format", "json"], session_factory=no_session) == 0
    plan = json.loads(capsys.readouterr().out)
    assert (plan["fleet"], plan["parameters"], plan["dry_run"]) == ("telemetry-dev-simulator", "/telemetry-dev/devices", True)
    assert plan["would_change"][0].startswith("for each device: detach each certificate's policies and things")
    assert (aws.things(), aws.stored(), aws.certificates()) == before


def test_a_run_answers_in_json_with_its_counts(aws, capsys, tmp_path):
    assert aws.run(["devices", "provision", "--env", "dev", "--count", "2", "--format", "json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out) == {"environment": "dev", "devices": "1-2", "created": 2, "repaired": 0, "unchanged": 0,
                               "failed": 0}
    assert err.startswith(f"{thing(1)}: created")  # what it says on the way goes to stderr
    assert aws.run(["devices", "export", "--env", "dev", "--dir", str(tmp_path / "keys"), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["exported"] == [thing(1), thing(2)]
    assert aws.run(["devices", "delete", "--env", "dev", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"environment": "dev", "fleet": "telemetry-dev-simulator",
                                                   "deleted": 2, "failed": 0}


def test_export_writes_private_files_for_the_simulator(aws, tmp_path, capsys):
    assert aws.run(["devices", "provision", "--env", "dev", "--count", "3"]) == 0
    stored = aws.stored()
    target = tmp_path / "fleet" / "keys"
    assert aws.run(["devices", "export", "--env", "dev", "--dir", str(target), "--first", "2", "--count", "2"]) == 0
    assert sorted(p.name for p in target.iterdir()) == sorted(
        f"{thing(i)}.{kind}.pem" for i in (2, 3) for kind in ("cert", "key"))
    assert stat.S_IMODE(target.stat().st_mode) == 0o700
    for index in (2, 3):
        for kind, field in (("cert", "certificate_pem"), ("key", "private_key")):
            path = target / f"{thing(index)}.{kind}.pem"
            assert stat.S_IMODE(path.stat().st_mode) == 0o600
            assert path.read_text() == stored[parameter(index)][field]
    assert "exported 2 device(s)" in capsys.readouterr().out

    # Without --count: every stored device from --first on; a device never created fails the run.
    assert aws.run(["devices", "export", "--env", "dev", "--dir", str(target)]) == 0
    assert len(list(target.iterdir())) == 6
    assert aws.run(["devices", "export", "--env", "dev", "--dir", str(target), "--first", "3", "--count", "2"]) == 1
    assert f"{thing(4)}: failed: no stored credentials" in capsys.readouterr().out


@pytest.mark.parametrize("where", ["repository", "open directory"])
def test_export_refuses_a_directory_inside_the_repository_or_open_to_others(aws, tmp_path, capsys, where):
    assert aws.run(["devices", "provision", "--env", "dev", "--count", "1"]) == 0
    capsys.readouterr()
    if where == "repository":
        target = REPO / "tests" / "exported-keys"
        expected = f"telemetry: error: {target} is inside the git repository {REPO}; export private keys outside any repository"
    else:
        target = tmp_path / "shared"
        target.mkdir(mode=0o755)
        target.chmod(0o755)
        expected = f"telemetry: error: {target} is open to group or others (mode 0755); chmod 700 it or name a new directory"
    assert aws.run(["devices", "export", "--env", "dev", "--dir", str(target)]) == 2
    captured = capsys.readouterr()
    assert captured.err.strip() == expected
    assert not (target.exists() and any(target.iterdir()))


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["provision", "--env", "nope", "--count", "1"],
         "unknown environment 'nope'; known environments: dev, prod, staging"),
        (["provision", "--env", "dev", "--count", "0"],
         "argument --count: must be 1-10,000, got 0 (see telemetry devices provision --help)"),
        (["provision", "--env", "dev", "--count", "10001"],
         "argument --count: must be 1-10,000, got 10001 (see telemetry devices provision --help)"),
        (["provision", "--env", "dev"],
         "the following arguments are required: --count (see telemetry devices provision --help)"),
        (["delete", "--env", "dev", "--count", "3"], "unrecognized arguments: --count 3 (see telemetry devices delete --help)"),
        (["export", "--env", "dev", "--dir", "/tmp/x", "--dry-run"], "unrecognized arguments: --dry-run (see telemetry devices export --help)"),
        (["export", "--env", "dev", "--dir", "/tmp/x", "--first", "9999", "--count", "3"],
         "--first 9999 --count 3 goes past device 10,000"),
    ],
    ids=["unknown-env", "count-0", "count-above-10000", "no-count", "delete-with-count", "export-dry-run",
         "export-past-the-last"],
)
def test_bad_input_is_one_line_and_exit_2(aws, capsys, argv, message):
    assert aws.exit_code(["devices", *argv]) == 2
    assert refusal(capsys) == f"telemetry: error: {message}"
    assert (aws.things(), aws.certificates()) == ([], {})


def refusal(capsys) -> str:
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    (line,) = captured.err.strip().splitlines()
    return line


def test_a_missing_stack_or_stack_output_is_one_line_and_exit_2(aws, capsys):
    assert aws.exit_code(["devices", "provision", "--env", "dev", "--count", "1"], stack=False) == 2
    assert refusal(capsys) == (
        "telemetry: error: stack Telemetry-dev-DeviceGateway is not deployed in this account and region; run make deploy")
    assert aws.exit_code(["devices", "provision", "--env", "dev", "--count", "1"], outputs={"TopicRuleName": "x"}) == 2
    assert refusal(capsys) == "telemetry: error: stack Telemetry-dev-DeviceGateway has no output DeviceCredentialsKeyArn; redeploy the stack"
    assert (aws.things(), aws.certificates()) == ([], {})


def test_a_missing_device_policy_is_one_line_and_exit_2(aws, capsys):
    aws.client("iot").delete_policy(policyName="telemetry-dev-device")
    assert aws.exit_code(["devices", "provision", "--env", "dev", "--count", "1"]) == 2
    assert refusal(capsys) == "telemetry: error: IoT policy telemetry-dev-device does not exist; deploy the DeviceGateway stack first"
    assert (aws.things(), aws.certificates()) == ([], {})


def test_the_installed_command_refuses_in_one_line_and_documents_each_mode():
    telemetry = str(Path(sys.executable).parent / "telemetry")
    result = subprocess.run([telemetry, "devices", "provision", "--env", "dev", "--count", "0"],
                            capture_output=True, text=True, cwd=REPO, timeout=60)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "telemetry: error: argument --count: must be 1-10,000, got 0 (see telemetry devices provision --help)"]
    for mode, options in (("provision", ("--count", "--dry-run")), ("delete", ("--dry-run",)),
                          ("export", ("--dir", "--first", "--count"))):
        shown = subprocess.run([telemetry, "devices", mode, "--help"], capture_output=True, text=True, timeout=60)
        assert shown.returncode == 0
        for option in ("--env", *options, "Needs: AWS credentials"):
            assert option in shown.stdout, (mode, option)


def test_throttled_calls_are_retried_up_to_ten_attempts(aws, monkeypatch, capsys):
    """Standard retry mode, 10 attempts: six throttled CreateThing answers in a row (the legacy
    default gives up after five attempts) and the device is still created."""
    from moto.core.botocore_stubber import MockRawResponse

    throttled, delays = [], []
    monkeypatch.setattr("time.sleep", delays.append)

    def throttle(request, **_):
        if len(throttled) < 6:
            throttled.append(request.url)
            body = json.dumps({"message": "Rate exceeded"}).encode()
            return AWSResponse(request.url, 400, {"x-amzn-ErrorType": "ThrottlingException"}, MockRawResponse(body))
        return None

    aws.session.events.register_first("before-send.iot.CreateThing", throttle)
    assert aws.run(["devices", "provision", "--env", "dev", "--count", "1"]) == 0
    assert len(throttled) == 6 and len(delays) == 6
    assert aws.things() == [thing(1)]


class TestWhatMotoDoesNotModel:
    """Answers of the real API that moto never gives, through botocore's Stubber (which checks
    every request and response against the IoT model)."""

    ARN = "arn:aws:iot:eu-west-1:123456789012:cert/" + "ab" * 32

    def registry(self, moto_session):
        from botocore.stub import Stubber

        iot = moto_session.client("iot")
        delays = []
        return provision_devices.DeviceRegistry(iot, sleep=delays.append), Stubber(iot), delays

    def test_delete_waits_for_a_thing_detachment_to_propagate(self, moto_session):
        """DetachThingPrincipal is asynchronous; DeleteCertificate answers DeleteConflictException
        until the detachment has propagated. Also the order: policies, things, INACTIVE, delete."""
        registry, stubber, delays = self.registry(moto_session)
        cert_id = "ab" * 32
        stubber.add_response("list_attached_policies", {"policies": [{"policyName": "telemetry-dev-device"}]},
                             {"target": self.ARN})
        stubber.add_response("detach_policy", {}, {"policyName": "telemetry-dev-device", "target": self.ARN})
        stubber.add_response("list_principal_things", {"things": [thing(1)]}, {"principal": self.ARN})
        stubber.add_response("detach_thing_principal", {}, {"thingName": thing(1), "principal": self.ARN})
        stubber.add_response("update_certificate", {}, {"certificateId": cert_id, "newStatus": "INACTIVE"})
        for _ in range(2):
            stubber.add_client_error("delete_certificate", "DeleteConflictException", "Things must be detached", 409,
                                     expected_params={"certificateId": cert_id})
        stubber.add_response("delete_certificate", {}, {"certificateId": cert_id})
        with stubber:
            registry.retire(self.ARN)
        stubber.assert_no_pending_responses()
        assert delays == [1, 2]

    def test_a_thing_of_that_name_that_is_not_the_fleets_is_left_alone(self, moto_session):
        """CreateThing with the same name and another configuration: ResourceAlreadyExistsException
        (moto replaces the thing instead)."""
        registry, stubber, _ = self.registry(moto_session)
        fleet = provision_devices.Fleet(provision_devices.load_environment(provision_devices.read_environments(), "dev"))
        stubber.add_client_error(
            "create_thing", "ResourceAlreadyExistsException", "Thing already exists with a different configuration", 409,
            expected_params={"thingName": thing(1), "attributePayload": {"attributes": {"fleet": "telemetry-dev-simulator", "environment": "dev"}}},
        )
        with stubber, pytest.raises(provision_devices.DeviceFailure) as failure:
            registry.create_thing(thing(1), fleet)
        assert str(failure.value) == (
            f"a thing {thing(1)} without attribute fleet=telemetry-dev-simulator exists; it is not this tool's, "
            "so it is left alone")
