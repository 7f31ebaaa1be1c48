"""`telemetry topics` from the workstation: the reconcile runs on a fleet host over Run Command.

Three parts, each tested as it ships:
- the host program, `python -m simulator.topic_admin`, run from a copy of the simulator package
  alone (what the fleet's package holds) against the real SASL broker that enforces ACLs;
- the token it is given: signed by the real aws-msk-iam-sasl-signer with the assumed role's keys;
- the workstation's calls (EC2, STS, SSM) through botocore's Stubber, which checks each request
  against the service's API model, and the order that keeps the token's life short.
"""

from __future__ import annotations

import argparse
import base64
import io
import os
import shutil
import subprocess
import sys
import time
from urllib.parse import parse_qs, urlparse

import boto3
import pytest
from botocore.stub import ANY, Stubber

from simulator import topic_admin
from simulator.kafka_config import SASL_PASSWORD_ENV
from telemetry.commands.topics import (
    AclSpec,
    Declaration,
    TopicError,
    TopicSpec,
    declared_environment,
    reconcile_on_fleet,
)
from tests.conftest import REPO
from tests.kafka_fixtures import SUPER_USER

HOUR_MS = 3_600_000
MFA = "arn:aws:iam::111111111111:mfa/ops"
ASSUMED = {
    "AccessKeyId": "ASIAASSUMEDTOPICADMN",
    "SecretAccessKey": "assumed-secret",
    "SessionToken": "assumed-session-token",
    "Expiration": "2026-11-24T12:15:00Z",
}


def test_declaration_travels_as_one_parameter_and_comes_back_whole():
    environment = declared_environment("prod")
    text = Declaration(environment.topics, environment.acls).text()
    assert Declaration.from_text(text) == Declaration(environment.topics, environment.acls)
    with pytest.raises(TopicError, match="not base64 JSON"):
        Declaration.from_text("not base64!")


@pytest.fixture
def host_package(tmp_path):
    """What a fleet host unpacks: the simulator folder and nothing else of the checkout."""
    shutil.copytree(REPO / "simulator", tmp_path / "simulator", ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


def run_on_host(host_package, *args, env=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "simulator.topic_admin", *args],
        cwd=host_package, capture_output=True, text=True, timeout=180,
        env={"PATH": os.environ["PATH"], **(env or {})},
    )  # fmt: skip


@pytest.mark.integration
def test_host_program_reconciles_topics_and_acls_from_the_simulator_package_alone(host_package, secured_kafka):
    topic = "fleet-topics-check"
    declaration = Declaration(
        [TopicSpec(topic, 3, 1, 24 * HOUR_MS)], [AclSpec("User:identity-20", "topic", topic, "WRITE")]
    ).text()
    flags = [
        "--declaration", declaration, "--bootstrap-servers", secured_kafka.bootstrap_servers, "--region", "eu-west-1",
        "--security-protocol", "SASL_PLAINTEXT", "--sasl-username", SUPER_USER,
    ]  # fmt: skip
    env = {SASL_PASSWORD_ENV: secured_kafka.passwords[SUPER_USER]}
    try:
        first = run_on_host(host_package, *flags, env=env)
        assert first.returncode == 0, first.stderr
        assert first.stdout.splitlines() == [
            f"{topic}: create: 3 partitions, RF 1",
            f"acl User:identity-20: allow WRITE on topic {topic}: create",
        ]
        again = run_on_host(host_package, *flags, env=env)
        assert again.returncode == 0, again.stderr
        assert again.stdout.splitlines() == [
            f"{topic}: unchanged: 3 partitions, RF 1",
            f"acl User:identity-20: allow WRITE on topic {topic}: unchanged",
        ]
    finally:
        secured_kafka.remove_acls_of("User:identity-20")
        secured_kafka.reset_topic(topic)


def test_host_program_without_its_token_is_one_line(host_package):
    declaration = Declaration([TopicSpec("t", 1, 1, HOUR_MS)], []).text()
    result = run_on_host(
        host_package, "--declaration", declaration, "--bootstrap-servers", "127.0.0.1:1", "--region", "eu-west-1"
    )
    assert result.returncode == 2
    assert result.stderr.strip() == "error: $MSK_IAM_TOKEN is empty: the topic administrator's MSK IAM token is needed"


def signed_token(region="eu-west-1") -> tuple[str, float]:
    """A token as the workstation makes it: the real signer, with the assumed role's keys."""
    from botocore.credentials import Credentials

    from telemetry.commands.topics import msk_iam_token

    return msk_iam_token(region, Credentials(ASSUMED["AccessKeyId"], ASSUMED["SecretAccessKey"], ASSUMED["SessionToken"]))


def test_the_host_reads_the_signers_expiry_from_the_token(monkeypatch):
    token, expiry = signed_token()
    assert topic_admin.token_expiry_s(token) == pytest.approx(expiry, abs=1)
    assert expiry - time.time() == pytest.approx(900, abs=5)  # the signer's fixed 15 minutes
    callback = topic_admin.given_token_callback(token)
    assert callback("") == (token, topic_admin.token_expiry_s(token))
    monkeypatch.setattr(topic_admin.time, "time", lambda: expiry + 60)
    with pytest.raises(TopicError, match="expired 60 s ago"):
        topic_admin.given_token_callback(token)
    with pytest.raises(TopicError, match="not an MSK IAM token"):
        topic_admin.token_expiry_s("bm90IGEgdXJs")


class Stubbed:
    """A boto3 session whose EC2, STS and SSM clients answer through Stubbers, in call order."""

    def __init__(self):
        session = boto3.Session(
            aws_access_key_id="AKIAOPERATOR", aws_secret_access_key="operator", region_name="eu-west-1"
        )
        self.session = session
        self.clients = {name: session.client(name) for name in ("ec2", "sts", "ssm", "logs")}
        self.stubbers = {name: Stubber(client) for name, client in self.clients.items()}

    def client(self, name):
        return self.clients[name]

    def get_partition_for_region(self, region):
        return self.session.get_partition_for_region(region)

    def __enter__(self):
        for stubber in self.stubbers.values():
            stubber.activate()
        return self

    def __exit__(self, *exc):
        if exc[0] is None:
            for stubber in self.stubbers.values():
                stubber.assert_no_pending_responses()


ENVIRONMENT = declared_environment("dev")
COMMAND_ID = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
HOSTS = ["i-0bbbbbbbbbbbbbbbb", "i-0aaaaaaaaaaaaaaaa"]
RUN = "5b1d2c3e4f5a6b7c8d9e0f1a2b3c4d5e"
TOKEN = f"/telemetry-dev/msk/topics-token/{RUN}"  # this run's alone


def expect_hosts(stubbed: Stubbed, ping: dict[str, str] | None = None) -> None:
    """The fleet's running instances, then Systems Manager's view of their agents (`ping`: instance
    -> PingStatus; an instance left out is not registered)."""
    ping = {i: "Online" for i in HOSTS} if ping is None else ping
    stubbed.stubbers["ec2"].add_response(
        "describe_instances",
        {"Reservations": [{"Instances": [{"InstanceId": i} for i in HOSTS]}]},
        {"Filters": [{"Name": "tag:telemetry:fleet", "Values": ["telemetry-dev-simulator"]},
                     {"Name": "instance-state-name", "Values": ["running"]}]},
    )  # fmt: skip
    stubbed.stubbers["ssm"].add_response(
        "describe_instance_information",
        {"InstanceInformationList": [{"InstanceId": i, "PingStatus": status, "ResourceType": "EC2Instance"}
                                     for i, status in ping.items()]},
        {"Filters": [{"Key": "tag:telemetry:fleet", "Values": ["telemetry-dev-simulator"]}], "MaxResults": 50},
    )  # fmt: skip


# Each document's whole output goes to the fleet's commands log group (telemetry/shared/run_command_output.py).
OUTPUT_CONFIG = {"CloudWatchLogGroupName": "/telemetry-dev/simulator-fleet/commands", "CloudWatchOutputEnabled": True}
INSTALL_ID = "1e2d3c4b-5a69-4788-9796-a5b4c3d2e1f0"
INSTALLED = "installed in /opt/telemetry-simulator/0123456789abcdef\n"


def expect_install(stubbed: Stubbed, host: str = "i-0aaaaaaaaaaaaaaaa", answer: dict | None = None) -> None:
    """The install-only command, sent before any token exists, and its end."""
    stubbed.stubbers["ssm"].add_response(
        "send_command", {"Command": {"CommandId": INSTALL_ID}},
        {"DocumentName": "telemetry-dev-manage-topics", "DocumentVersion": "$LATEST", "InstanceIds": [host],
         "Parameters": {"installOnly": ["true"]},
         "TimeoutSeconds": 120, "Comment": "telemetry topics: install", "CloudWatchOutputConfig": OUTPUT_CONFIG},
    )  # fmt: skip
    stubbed.stubbers["ssm"].add_response(
        "get_command_invocation",
        {"CommandId": INSTALL_ID, "InstanceId": host,
         **(answer or {"Status": "Success", "ResponseCode": 0, "StandardOutputContent": INSTALLED})},
        {"CommandId": INSTALL_ID, "InstanceId": host},
    )  # fmt: skip


def expect_host_and_token(stubbed: Stubbed, ping: dict[str, str] | None = None, host: str = "i-0aaaaaaaaaaaaaaaa") -> None:
    expect_hosts(stubbed, ping)
    expect_install(stubbed, host)
    stubbed.stubbers["sts"].add_response(
        "assume_role",
        {"Credentials": ASSUMED},
        {"RoleArn": "arn:aws:iam::111111111111:role/telemetry-dev-msk-topic-admin", "RoleSessionName": ANY,
         "DurationSeconds": 900, "SerialNumber": MFA, "TokenCode": "123456"},
    )  # fmt: skip
    stubbed.stubbers["ssm"].add_response(
        "put_parameter",
        {"Version": 1, "Tier": "Standard"},
        # Encrypted with the fleet's own key, which only its role may use to decrypt (not aws/ssm).
        {"Name": TOKEN, "Value": ANY, "Type": "SecureString", "KeyId": "alias/telemetry-dev-topics-token",
         "Tier": "Intelligent-Tiering", "Description": ANY},
    )  # fmt: skip


def expect_command(stubbed: Stubbed, *, dry_run="false") -> None:
    stubbed.stubbers["ssm"].add_response(
        "send_command",
        {"Command": {"CommandId": COMMAND_ID}},
        {"DocumentName": "telemetry-dev-manage-topics", "DocumentVersion": "$LATEST", "InstanceIds": ["i-0aaaaaaaaaaaaaaaa"],
         "Parameters": {"declaration": [Declaration(ENVIRONMENT.topics, ENVIRONMENT.acls).text()],
                        "dryRun": [dry_run], "timeoutSeconds": ["30"], "tokenParameter": [TOKEN]},
         "TimeoutSeconds": 120, "Comment": ANY, "CloudWatchOutputConfig": OUTPUT_CONFIG},
    )  # fmt: skip


def expect_invocations(stubbed: Stubbed, *answers: dict) -> None:
    ssm = stubbed.stubbers["ssm"]
    ssm.add_client_error("get_command_invocation", "InvocationDoesNotExist", "not yet", 400)
    for answer in answers:
        ssm.add_response(
            "get_command_invocation",
            {"CommandId": COMMAND_ID, "InstanceId": "i-0aaaaaaaaaaaaaaaa", **answer},
            {"CommandId": COMMAND_ID, "InstanceId": "i-0aaaaaaaaaaaaaaaa"},
        )


def expect_token_deleted(stubbed: Stubbed) -> None:
    stubbed.stubbers["ssm"].add_response("delete_parameter", {}, {"Name": TOKEN})


def arguments(**overrides) -> argparse.Namespace:
    values = {"mfa_serial": MFA, "dry_run": False, "timeout": 30.0, **overrides}
    return argparse.Namespace(**values)


def on_fleet(stubbed, out: io.StringIO | None = None, **overrides) -> tuple[int, str]:
    out, now = out or io.StringIO(), [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    status = reconcile_on_fleet(
        ENVIRONMENT, arguments(**overrides), stubbed, read_code=lambda serial: "123456", poll_s=10, out=out,
        clock=lambda: now[0], sleep=sleep, run_id=RUN,
    )  # fmt: skip
    return status, out.getvalue()


def test_reconcile_runs_on_the_first_host_says_it_waits_then_prints_its_output():
    """While the command runs, GetCommandInvocation's StandardOutputContent is empty ("If the
    command hasn't finished running ... this string is empty", SSM API Reference): the output comes
    once, at the end, and until then the operator sees the host's status every 15 s or so."""
    output = (
        "telemetry: create: 12 partitions, RF 3\n"
        "acl User:iot-device-gateway: allow WRITE on topic telemetry: create\n"
    )
    with Stubbed() as stubbed:
        expect_host_and_token(stubbed)
        expect_command(stubbed)
        expect_invocations(
            stubbed,
            {"Status": "InProgress", "StandardOutputContent": ""},
            {"Status": "InProgress", "StandardOutputContent": ""},
            {"Status": "InProgress", "StandardOutputContent": ""},
            {"Status": "Success", "ResponseCode": 0, "StandardOutputContent": output},
        )
        expect_token_deleted(stubbed)
        status, printed = on_fleet(stubbed)
    assert status == 0
    assert printed == (
        f"installing on fleet host i-0aaaaaaaaaaaaaaaa (Run Command {INSTALL_ID})\n" + INSTALLED +
        f"reconciling on fleet host i-0aaaaaaaaaaaaaaaa (Run Command {COMMAND_ID})\n"
        "  i-0aaaaaaaaaaaaaaaa: Pending, 0 s\n"
        "  i-0aaaaaaaaaaaaaaaa: InProgress, 10 s\n"
        "  i-0aaaaaaaaaaaaaaaa: InProgress, 30 s\n"  # at 20 s, 10 s after the last line was too soon
        + output
    )


def test_the_token_left_for_the_host_is_the_assumed_roles_and_short_lived():
    with Stubbed() as stubbed:
        expect_host_and_token(stubbed)
        expect_command(stubbed, dry_run="true")
        expect_invocations(stubbed, {"Status": "Success", "ResponseCode": 0, "StandardOutputContent": ""})
        expect_token_deleted(stubbed)
        sent = []
        stubbed.clients["ssm"].meta.events.register(
            "provide-client-params.ssm.PutParameter", lambda params, **_: sent.append(params["Value"])
        )
        on_fleet(stubbed, dry_run=True)
    (token,) = sent
    url = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
    query = parse_qs(urlparse(url).query)
    assert query["Action"] == ["kafka-cluster:Connect"]
    assert query["X-Amz-Credential"][0].startswith(ASSUMED["AccessKeyId"] + "/")  # not the operator's keys
    assert query["X-Amz-Security-Token"] == [ASSUMED["SessionToken"]]
    assert query["X-Amz-Expires"] == ["900"]


def test_a_difference_kafka_cannot_reconcile_exits_1_and_the_token_is_deleted():
    with Stubbed() as stubbed:
        expect_host_and_token(stubbed)
        expect_command(stubbed)
        expect_invocations(
            stubbed,
            {"Status": "Failed", "ResponseCode": 1,
             "StandardOutputContent": "telemetry: cannot-reconcile: has 24 partitions, declared 12\n"},
        )  # fmt: skip
        expect_token_deleted(stubbed)
        status, printed = on_fleet(stubbed)
    assert status == 1
    assert printed.endswith("telemetry: cannot-reconcile: has 24 partitions, declared 12\n")


def test_a_failed_host_run_is_one_line_from_its_stderr():
    with Stubbed() as stubbed:
        expect_host_and_token(stubbed)
        expect_command(stubbed)
        expect_invocations(
            stubbed,
            {"Status": "Failed", "ResponseCode": 2, "StandardOutputContent": "",
             "StandardErrorContent": "some noise\nerror: cannot reach the cluster: timed out\n" + agent_failed(2)},
        )  # fmt: skip
        expect_token_deleted(stubbed)
        with pytest.raises(TopicError) as raised:
            on_fleet(stubbed)
    assert str(raised.value) == (
        "the reconcile on i-0aaaaaaaaaaaaaaaa ended Failed (exit 2): error: cannot reach the cluster: timed out"
    )


def test_the_role_is_assumed_once_the_host_has_installed_so_the_token_lasts_for_the_kafka_work():
    """Install, then MFA, then the token: the STS session and the token's 15 minutes start after
    the install, however long it took."""
    order: list[str] = []
    with Stubbed() as stubbed:
        expect_host_and_token(stubbed)
        expect_command(stubbed)
        expect_invocations(stubbed, {"Status": "Success", "ResponseCode": 0, "StandardOutputContent": ""})
        expect_token_deleted(stubbed)
        for name in ("ssm", "sts"):
            stubbed.clients[name].meta.events.register(
                f"provide-client-params.{name}", lambda params, model, **_: order.append(model.name))
        on_fleet(stubbed)
    assert order[:6] == ["DescribeInstanceInformation", "SendCommand", "GetCommandInvocation", "AssumeRole",
                         "PutParameter", "SendCommand"]


def test_a_host_whose_agent_is_not_online_is_passed_over():
    """A running instance whose SSM Agent lost its connection takes a SendCommand and waits out the
    delivery timeout (SSM User Guide, "Understanding command statuses"): the next host is used."""
    with Stubbed() as stubbed:
        expect_host_and_token(stubbed, ping={"i-0aaaaaaaaaaaaaaaa": "ConnectionLost", "i-0bbbbbbbbbbbbbbbb": "Online"},
                              host="i-0bbbbbbbbbbbbbbbb")
        stubbed.stubbers["ssm"].add_response("send_command", {"Command": {"CommandId": COMMAND_ID}}, {
            "DocumentName": "telemetry-dev-manage-topics", "DocumentVersion": "$LATEST", "InstanceIds": ["i-0bbbbbbbbbbbbbbbb"],
            "Parameters": ANY,
            "TimeoutSeconds": 120, "Comment": ANY, "CloudWatchOutputConfig": OUTPUT_CONFIG})
        stubbed.stubbers["ssm"].add_response(
            "get_command_invocation", {"Status": "Success", "ResponseCode": 0, "StandardOutputContent": ""},
            {"CommandId": COMMAND_ID, "InstanceId": "i-0bbbbbbbbbbbbbbbb"})
        expect_token_deleted(stubbed)
        status, printed = on_fleet(stubbed)
    assert status == 0 and f"reconciling on fleet host i-0bbbbbbbbbbbbbbbb" in printed


def test_no_host_online_is_one_line_naming_each_agents_status_and_no_token_is_made():
    with Stubbed() as stubbed:
        expect_hosts(stubbed, ping={"i-0aaaaaaaaaaaaaaaa": "ConnectionLost"})
        with pytest.raises(TopicError) as raised:
            on_fleet(stubbed)
    assert str(raised.value) == (
        "no host of simulator fleet telemetry-dev-simulator has its SSM Agent Online (i-0aaaaaaaaaaaaaaaa "
        "ConnectionLost, i-0bbbbbbbbbbbbbbbb not registered with Systems Manager): Run Command cannot reach them; "
        "replace them (terminate one: the fleet's group starts another) or run with --here"
    )


def test_a_host_that_could_not_install_says_so_and_no_role_is_assumed():
    """The fleet document's install exits 3 with what failed (install_simulator.sh's ERR trap), so
    a dnf, S3 or pip failure is not read as the reconcile's 1 (a difference Kafka cannot make). It
    runs before the role is assumed: no MFA code is asked for, no token is made."""
    with Stubbed() as stubbed:
        expect_hosts(stubbed)
        expect_install(stubbed, answer={
            "Status": "Failed", "ResponseCode": 3, "StandardOutputContent": "",
            "StandardErrorContent": "Error: Failed to download metadata for repo 'amazonlinux'\n"
                                    "install failed (exit 1): dnf install -y -q python3.11 unzip\n" + agent_failed(3)})
        with pytest.raises(TopicError) as raised:
            on_fleet(stubbed)
    assert str(raised.value) == ("fleet host i-0aaaaaaaaaaaaaaaa could not install the simulator package: install failed "
                                 "(exit 1): dnf install -y -q python3.11 unzip")


def stderr_returned(text: str) -> str:
    """What GetCommandInvocation returns of a stderr: its first 8,000 characters (SSM API
    Reference, StandardErrorContent); the agent's own cut, at 24,000 with "--output truncated--"
    (pluginutil.StringPrefix), is further on."""
    return text[:8000]


# The line the SSM agent appends to the stderr of a script that exits non-zero
# (aws/amazon-ssm-agent, plugins/runscript/runscript.go: MarkAsFailed).
def agent_failed(code: int) -> str:
    return f"failed to run commands: exit status {code}\n"


def test_an_install_failure_past_8000_characters_is_read_whole_from_cloudwatch_logs():
    """pip's output fills the 8,000 characters GetCommandInvocation keeps of stderr; the reason is
    at the end. The whole stderr comes from the stream the agent wrote in the fleet's commands log
    group (<command>/<instance>/<step>/stderr), once its upload has caught up."""
    noise = "".join(f"Collecting package-{n}==1.0 (from -r requirements.txt (line {n}))\n" for n in range(200))
    stderr = noise + "install failed (exit 1): pip install --require-hashes -r requirements.txt\n" + agent_failed(3)
    with Stubbed() as stubbed:
        expect_hosts(stubbed)
        expect_install(stubbed, answer={"Status": "Failed", "ResponseCode": 3, "StandardOutputContent": "",
                                        "StandardErrorContent": stderr_returned(stderr)})
        logs, stream = stubbed.stubbers["logs"], f"{INSTALL_ID}/i-0aaaaaaaaaaaaaaaa/manageTopics/stderr"
        where = {"logGroupName": "/telemetry-dev/simulator-fleet/commands", "logStreamName": stream, "startFromHead": True}
        logs.add_client_error("get_log_events", "ResourceNotFoundException", "The specified log stream does not exist.",
                              400, where)  # the agent has not created it yet
        lines = stderr.splitlines()
        logs.add_response("get_log_events", {"events": [{"timestamp": 1, "message": line} for line in lines[:150]],
                                             "nextForwardToken": "f/1", "nextBackwardToken": "b/0"}, where)
        logs.add_response("get_log_events", {"events": [{"timestamp": 2, "message": line} for line in lines[150:]],
                                             "nextForwardToken": "f/2", "nextBackwardToken": "b/1"},
                          {**where, "nextToken": "f/1"})
        logs.add_response("get_log_events", {"events": [], "nextForwardToken": "f/2", "nextBackwardToken": "b/2"},
                          {**where, "nextToken": "f/2"})  # the same token back: the end of the stream
        printed = io.StringIO()
        with pytest.raises(TopicError) as raised:
            on_fleet(stubbed, printed)
    assert str(raised.value) == ("fleet host i-0aaaaaaaaaaaaaaaa could not install the simulator package: install failed "
                                 "(exit 1): pip install --require-hashes -r requirements.txt")
    assert len(stderr) > 8000 and printed.getvalue().endswith(f"stderr of the install on i-0aaaaaaaaaaaaaaaa:\n{stderr}")


@pytest.mark.parametrize("interrupt", ["ctrl-c", "SIGTERM"])
def test_an_interrupted_reconcile_cancels_its_command_and_deletes_the_token(interrupt):
    import signal

    def stop(_seconds):
        if interrupt == "SIGTERM":
            os.kill(os.getpid(), signal.SIGTERM)  # raised as Terminated by the handler in place
        raise KeyboardInterrupt

    before = signal.getsignal(signal.SIGTERM)
    with Stubbed() as stubbed:
        expect_host_and_token(stubbed)
        expect_command(stubbed)
        expect_invocations(stubbed)  # not registered yet: the first wait is interrupted
        stubbed.stubbers["ssm"].add_response("cancel_command", {}, {"CommandId": COMMAND_ID,
                                                                    "InstanceIds": ["i-0aaaaaaaaaaaaaaaa"]})
        expect_token_deleted(stubbed)
        out = io.StringIO()
        with pytest.raises(KeyboardInterrupt) as raised:
            reconcile_on_fleet(ENVIRONMENT, arguments(), stubbed, read_code=lambda serial: "123456", poll_s=10,
                               out=out, clock=lambda: 0.0, sleep=stop, run_id=RUN)
    assert (type(raised.value).__name__ == "Terminated") == (interrupt == "SIGTERM")
    assert f"cancelled Run Command {COMMAND_ID} on i-0aaaaaaaaaaaaaaaa" in out.getvalue()
    assert signal.getsignal(signal.SIGTERM) == before  # the handler is the process's again


def test_the_token_expiry_is_read_in_utc_whatever_the_local_zone(monkeypatch):
    """X-Amz-Date is UTC: under a zone in daylight saving time, mktime would put it an hour off."""
    url = "https://kafka.eu-west-1.amazonaws.com/?Action=kafka-cluster%3AConnect&X-Amz-Date=20260715T120000Z&X-Amz-Expires=900"
    token = base64.urlsafe_b64encode(url.encode()).decode().rstrip("=")
    monkeypatch.setenv("TZ", "Europe/Paris")
    time.tzset()
    try:
        assert topic_admin.token_expiry_s(token) == 1784116800 + 900  # 2026-07-15T12:00:00Z + 15 minutes
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()


def test_a_refused_send_still_deletes_the_token():
    with Stubbed() as stubbed:
        expect_host_and_token(stubbed)
        stubbed.stubbers["ssm"].add_client_error("send_command", "InvalidDocument", "no such document", 400)
        expect_token_deleted(stubbed)
        with pytest.raises(Exception, match="InvalidDocument"):
            on_fleet(stubbed)


def test_a_refused_role_makes_no_token():
    with Stubbed() as stubbed:
        expect_hosts(stubbed)
        expect_install(stubbed)
        stubbed.stubbers["sts"].add_client_error(
            "assume_role", "AccessDenied", "MultiFactorAuthentication failed with invalid MFA one time pass code."
        )
        with pytest.raises(TopicError, match="cannot assume .*telemetry-dev-msk-topic-admin: AccessDenied"):
            on_fleet(stubbed)


def test_no_running_fleet_host_is_one_line_naming_the_way_out():
    with Stubbed() as stubbed:
        stubbed.stubbers["ec2"].add_response("describe_instances", {"Reservations": []})
        with pytest.raises(TopicError, match="no running host in simulator fleet telemetry-dev-simulator: deploy"):
            on_fleet(stubbed)
