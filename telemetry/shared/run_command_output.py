"""A Run Command invocation's whole output, kept in CloudWatch Logs and read back from there.

GetCommandInvocation returns at most the first 24,000 characters of a plugin's stdout and 8,000 of
its stderr (SSM API Reference, GetCommandInvocation: StandardOutputContent, StandardErrorContent),
and a failing install or cluster creation writes its reason last. So every document the operator
command sends goes out with CloudWatchOutputConfig naming a log group of the stack that owns the
instances (SendCommand, CloudWatchOutputConfig), and an output GetCommandInvocation cut short is
read back whole from its stream. The agent cuts both outputs at MaxStdoutLength, 24,000, with
pluginutil.StringPrefix, which keeps the start and ends it in "--output truncated--"
(framework/runpluginutil/runpluginutil.go RunPlugins, iohandler.go DefaultOutputConfig); the API
documents stderr as its first 8,000 characters. So stdout ending in that marker, or stderr of
8,000 characters less the marker's length or more, is taken as cut; a shorter one is whole.

A script that exits non-zero gets a line of the agent's own appended to its stderr, "failed to run
commands: exit status N" (plugins/runscript/runscript.go, MarkAsFailed); reason() skips it, so the
line an error quotes is the script's.

Stream names, as the SSM agent builds them (aws/amazon-ssm-agent, messageservice/utils/
messageutil.go generateCloudWatchLogStreamPrefix: "<CommandID>/<InstanceID>"; framework/
runpluginutil/runpluginutil.go RunPlugins appends the plugin id, the step's `name` in a 2.x
document (framework/docparser/docparser.go), with ':' and '*' replaced by '-'; framework/processor/
executer/iohandler/iohandler.go adds "/stdout" and "/stderr"). The agent creates the streams in an
existing group: CreateLogGroup first (refused, it finds the group with DescribeLogGroups;
stacks/constructs/log_group.py grant_run_command_output), then CreateLogStream and PutLogEvents
(CloudWatchLogsService.StreamData), uploading on a timer while the plugin runs, so the last lines
may land a moment after the invocation has ended: a stream shorter than what GetCommandInvocation
already returned is read again for a little while.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

UPLOAD_GRACE_S, UPLOAD_POLL_S = 30.0, 2.0
TRUNCATED = "--output truncated--"
LIMITS = {"stdout": 24_000, "stderr": 8_000}  # GetCommandInvocation: StandardOutputContent, StandardErrorContent
AGENT_FAILURE_LINE = re.compile(r"^failed to run commands: ")


def invocation(ssm: Any, command_id: str, instance_id: str) -> dict[str, Any]:
    """GetCommandInvocation's answer, or {"Status": "Pending"} while the invocation is not visible
    yet: Run Command takes a moment to register one after SendCommand (InvocationDoesNotExist)."""
    try:
        return dict(ssm.get_command_invocation(CommandId=command_id, InstanceId=instance_id))
    except ssm.exceptions.InvocationDoesNotExist:
        return {"Status": "Pending"}


def cloudwatch_output(log_group: str) -> dict[str, Any]:
    """SendCommand's CloudWatchOutputConfig for `log_group`."""
    return {"CloudWatchLogGroupName": log_group, "CloudWatchOutputEnabled": True}


def stream_name(command_id: str, instance_id: str, step: str, which: str) -> str:
    """The stream the agent writes a step's stdout or stderr to."""
    return f"{command_id}/{instance_id}/{step.replace(':', '-').replace('*', '-')}/{which}"


def read_stream(logs: Any, log_group: str, stream: str) -> str | None:
    """Every event of the stream, oldest first, one line each; None when it does not exist (the
    step wrote nothing there, or the agent has not created it yet). GetLogEvents pages forward from
    the head; at the end of the stream "it returns the same token you passed in" (CloudWatch Logs
    API Reference, GetLogEvents, nextForwardToken)."""
    lines: list[str] = []
    token = None
    while True:
        request: dict[str, Any] = {"logGroupName": log_group, "logStreamName": stream, "startFromHead": True}
        if token:
            request["nextToken"] = token
        try:
            page = logs.get_log_events(**request)
        except logs.exceptions.ResourceNotFoundException:
            return None  # any other refusal (AccessDeniedException: no logs:GetLogEvents) goes up
        lines += [event["message"].rstrip("\n") for event in page["events"]]
        if page["nextForwardToken"] == token:
            return "\n".join(lines) + ("\n" if lines else "")
        token = page["nextForwardToken"]


def whole_output(
    logs: Callable[[], Any], log_group: str, command_id: str, instance_id: str, step: str, which: str, returned: str,
    *, sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic,
) -> str:
    """The step's whole stdout or stderr: `returned` (what GetCommandInvocation gave) unless the
    agent cut it, else the stream in CloudWatch Logs (`logs()` makes the client), waited for while it
    is still shorter than what was returned; with a note when the stream never holds it (a role that
    may not write the group)."""
    if not cut(returned, which):
        return returned
    from botocore.exceptions import BotoCoreError, ClientError

    stream, client = stream_name(command_id, instance_id, step, which), logs()
    deadline = clock() + UPLOAD_GRACE_S
    while True:
        try:
            text = read_stream(client, log_group, stream) or ""
        except (BotoCoreError, ClientError) as error:
            return returned + f"\n(the rest is in CloudWatch Logs {log_group}, stream {stream}, which could not be read: {error})\n"
        if len(text) > len(returned) - len(TRUNCATED):
            return text
        if clock() >= deadline:
            return returned + f"\n(the rest was not found in CloudWatch Logs {log_group}, stream {stream})\n"
        sleep(UPLOAD_POLL_S)


def cut(returned: str, which: str) -> bool:
    """Whether GetCommandInvocation's stdout or stderr may be only the start of the output."""
    return returned.endswith(TRUNCATED) or len(returned) >= LIMITS[which] - len(TRUNCATED)


def reason(stderr: str) -> str:
    """The last line the script wrote to stderr: the agent's own failure line skipped."""
    lines = [line for line in stderr.strip().splitlines() if line.strip() and not AGENT_FAILURE_LINE.match(line)]
    return lines[-1].strip() if lines else ""
