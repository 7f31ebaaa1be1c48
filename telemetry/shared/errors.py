"""How every failure of the operator command becomes an exit code and one line."""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILED = 1  # the check or the operation failed
EXIT_USAGE = 2  # bad usage or configuration: change something, then run again
EXIT_INTERRUPTED = 130

# AWS answers that mean the caller's identity or permissions, not the operation, are wrong.
CREDENTIAL_CODES = frozenset({
    "AccessDenied", "AccessDeniedException", "UnauthorizedOperation", "UnrecognizedClientException",
    "InvalidClientTokenId", "ExpiredToken", "ExpiredTokenException", "SignatureDoesNotMatch",
})  # fmt: skip


class UsageError(Exception):
    """The command line is wrong; the message says what is allowed."""


class OperationFailed(Exception):
    """The operation ran and failed; the message says what failed."""


class ToolError(Exception):
    """A problem a tool worded for the operator: a missing prerequisite or a refusal (exit 2), one
    line, no traceback."""


class StepFailed(OperationFailed):
    """A step of `telemetry deploy` raised `error`: what it said, under the step's name and with
    the way on, and the exit code `error` itself has (a refusal stays 2)."""

    def __init__(self, step: str, error: BaseException) -> None:
        self.exit_code, message = worded(error)
        self.internal = message.startswith("internal error")  # a defect: --debug shows where
        super().__init__(f"{step}: {message} (run telemetry deploy again to go on from here)")


def one_line(text: object, limit: int = 600) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def worded(error: BaseException) -> tuple[int, str]:
    """(exit code, message) for an error that reached the command's top."""
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError, NoRegionError, ProfileNotFound
    from sf_rest import FabricError

    from simulator.errors import SimulatorError
    from stacks.config import ConfigError

    if isinstance(error, StepFailed):
        return error.exit_code, str(error)
    # The command line, cdk.json, or a missing prerequisite worded by the tool (or by the
    # simulator package's code it runs, such as the topics' Kafka side).
    if isinstance(error, (UsageError, ConfigError, ToolError, SimulatorError)):
        return EXIT_USAGE, str(error)
    if isinstance(error, ProfileNotFound):
        return EXIT_USAGE, f"{error}; list profiles with 'aws configure list-profiles'"
    if isinstance(error, (NoCredentialsError, NoRegionError)):
        # Every --dry-run plans offline, so it is the way to see a plan without credentials.
        return EXIT_USAGE, (
            f"{error}: this command calls AWS; pass --profile NAME or set AWS_PROFILE (or the AWS "
            "access key variables), or use --dry-run where the command has one"
        )
    if isinstance(error, ClientError):
        code = error.response.get("Error", {}).get("Code", "")
        if code in CREDENTIAL_CODES:
            return EXIT_USAGE, f"AWS refused the credentials in use: {error}"
        return EXIT_FAILED, f"AWS call failed: {error}"
    if isinstance(error, BotoCoreError):
        return EXIT_FAILED, f"AWS call failed: {error}"
    if isinstance(error, OperationFailed):
        return EXIT_FAILED, str(error)
    if isinstance(error, FabricError):
        return EXIT_FAILED, f"Service Fabric call failed: {error}"
    return EXIT_FAILED, f"internal error: {type(error).__name__}: {error}"


def moved(command: str) -> int:
    """What an operator module says when run by its path, as the blueprint's older releases ran
    it: the one line naming the command that replaced it; exit 2 (bad usage)."""
    import sys

    print(f"this script has no command line of its own any more: run `telemetry {command} --help` "
          "(.venv/bin/telemetry, installed by make synth)", file=sys.stderr)
    return EXIT_USAGE
