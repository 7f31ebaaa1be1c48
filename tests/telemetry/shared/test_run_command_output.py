"""telemetry/shared/run_command_output.py: a Run Command output cut short by GetCommandInvocation, read whole
from the CloudWatch Logs stream the SSM agent wrote, against moto's CloudWatch Logs."""

from __future__ import annotations

import time

import pytest

from telemetry.shared.run_command_output import TRUNCATED, read_stream, stream_name, whole_output

GROUP = "/telemetry-dev/simulator-fleet/commands"
COMMAND, INSTANCE = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0", "i-0aaaaaaaaaaaaaaaa"


def test_the_stream_is_named_as_the_agent_names_it():
    """<CommandID>/<InstanceID> (messageutil.go), the step's name with ':' and '*' made '-'
    (runpluginutil.go), then stdout or stderr (iohandler.go)."""
    assert stream_name(COMMAND, INSTANCE, "manageTopics", "stderr") == f"{COMMAND}/{INSTANCE}/manageTopics/stderr"
    assert stream_name(COMMAND, INSTANCE, "aws:runShellScript", "stdout") == f"{COMMAND}/{INSTANCE}/aws-runShellScript/stdout"


def written(logs, step: str, which: str, lines: list[str]) -> None:
    """The stream as the agent leaves it: created in the existing group, one event per line, each
    stamped now (PutLogEvents rejects events more than 14 days old)."""
    stream, now_ms = stream_name(COMMAND, INSTANCE, step, which), int(time.time() * 1000)
    logs.create_log_stream(logGroupName=GROUP, logStreamName=stream)
    for start in range(0, len(lines), 1000):  # PutLogEvents takes at most 10,000 events, 1 MB
        logs.put_log_events(logGroupName=GROUP, logStreamName=stream, logEvents=[
            {"timestamp": now_ms + start + n, "message": line} for n, line in enumerate(lines[start:start + 1000])])


@pytest.fixture
def logs(moto_session):
    client = moto_session.client("logs")
    client.create_log_group(logGroupName=GROUP)
    return client


def test_a_cut_output_is_read_whole_from_its_stream(logs):
    lines = [f"Collecting package-{n}==1.0" for n in range(12_000)] + ["install failed (exit 1): pip install"]
    written(logs, "manageTopics", "stderr", lines)
    returned = ("\n".join(lines))[: 8000 - len(TRUNCATED)] + TRUNCATED
    text = whole_output(lambda: logs, GROUP, COMMAND, INSTANCE, "manageTopics", "stderr", returned,
                        sleep=lambda s: pytest.fail("the stream was complete"))
    assert text.splitlines() == lines  # past one GetLogEvents page (10,000 events)


def test_an_output_shorter_than_the_limit_is_whole_already_and_logs_are_not_read():
    def no_logs():
        raise AssertionError("an output the agent did not cut is not looked up")

    assert whole_output(no_logs, GROUP, COMMAND, INSTANCE, "runSimulator", "stderr", "error: x\n") == "error: x\n"


def test_a_stream_that_never_comes_leaves_what_was_returned_and_says_where_to_look(logs):
    waits: list[float] = []
    returned = "x" * (8000 - len(TRUNCATED)) + TRUNCATED
    text = whole_output(lambda: logs, GROUP, COMMAND, INSTANCE, "createCluster", "stderr", returned,
                        sleep=waits.append, clock=lambda: sum(waits))
    assert text.startswith(returned)
    assert text.endswith(f"(the rest was not found in CloudWatch Logs {GROUP}, stream "
                         f"{COMMAND}/{INSTANCE}/createCluster/stderr)\n")
    assert sum(waits) >= 30  # the upload's grace, then given up


def test_a_missing_stream_reads_as_none(logs):
    assert read_stream(logs, GROUP, "no/such/stream/stdout") is None


def test_a_stderr_the_api_kept_8000_characters_of_is_read_whole(logs):
    """GetCommandInvocation keeps the first 8,000 characters of stderr, without the agent's marker
    (which the agent adds at 24,000): that length alone says it may be cut."""
    lines = [f"warning {n}: deprecated option" for n in range(1_000)] + ["error: the reason, last"]
    written(logs, "createCluster", "stderr", lines)
    returned = "\n".join(lines)[:8000]
    assert whole_output(lambda: logs, GROUP, COMMAND, INSTANCE, "createCluster", "stderr", returned).splitlines() == lines


def test_the_reason_is_the_scripts_last_line_not_the_agents():
    from telemetry.shared.run_command_output import reason

    stderr = "noise\ninstall failed (exit 1): dnf install -y -q python3.11\nfailed to run commands: exit status 3\n"
    assert reason(stderr) == "install failed (exit 1): dnf install -y -q python3.11"
    assert reason("failed to run commands: exit status 1\n") == ""


def test_a_stream_this_machine_may_not_read_is_said_at_once(moto_session):
    """An operator without logs:GetLogEvents: CloudWatch Logs answers AccessDeniedException (a
    common error of its API); the output returned is kept with where the rest is, no waiting."""
    from botocore.stub import Stubber

    client = moto_session.client("logs")
    with Stubber(client) as stubber:
        stubber.add_client_error("get_log_events", "AccessDeniedException", "not authorized to perform logs:GetLogEvents",
                                 400)
        returned = "x" * 7990
        text = whole_output(lambda: client, GROUP, COMMAND, INSTANCE, "runSimulator", "stderr", returned,
                            sleep=lambda s: pytest.fail("an access error is not waited out"))
    assert text.startswith(returned) and "which could not be read: An error occurred (AccessDeniedException)" in text
