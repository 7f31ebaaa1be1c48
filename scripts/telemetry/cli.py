"""`telemetry`: the operator command of the blueprint, one command with groups, shaped like the
AWS CLI: `telemetry cluster drain --env prod --node scale-i-0abc`.

Every subcommand takes the same global options (--env, --profile, --region, --format, --debug)
and means the same by its exit code:

    0  done
    1  the check or the operation failed (the message says what failed)
    2  bad usage or configuration: fix the command line, cdk.json, the credentials or a
       prerequisite the message names, then run again

An error is one line on stderr naming what was wrong and what to do; --debug adds the
traceback. Each subcommand's help says whether it needs AWS credentials and where it must run.
"""

from __future__ import annotations

import argparse
import difflib
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, NoReturn

from scripts.telemetry.errors import EXIT_FAILED, EXIT_INTERRUPTED, UsageError, one_line, worded

PROG = "telemetry"
DISTRIBUTION = "telemetry-platform-blueprint"  # pyproject.toml's project name
REPO = Path(__file__).resolve().parents[2]

OFFLINE = "Needs: nothing but this checkout (no AWS credentials). Runs anywhere."
WORKSTATION = (
    "Needs: AWS credentials for the environment's account (--profile, or the usual AWS variables). "
    "Runs anywhere that reaches the AWS APIs."
)


@dataclass(frozen=True)
class Command:
    """One subcommand: where its options and its body live, and what it needs."""

    path: tuple[str, ...]  # ("cluster", "drain")
    summary: str
    needs: str
    module: str  # the module with add_arguments(parser) and run(args, session_factory) -> int
    dry_run_offline: bool = False  # its --dry-run needs no credentials
    mode: str = ""  # for a module that serves several subcommands: which one (args.mode)
    json: bool = False  # it answers --format json


COMMANDS = (
    Command(("preflight",), "check an account before the first deployment; changes nothing", WORKSTATION,
            "scripts.preflight", json=True),
    Command(("deploy",), "the first deployment, step by step and resumable (--dry-run: the plan)", WORKSTATION,
            "scripts.telemetry.deploy", dry_run_offline=True, json=True),
    Command(("topics",), "create or update the declared Kafka topics and the gateway's SCRAM ACLs",
            WORKSTATION + " The Kafka work runs on a simulator fleet host over SSM Run Command, as the topic "
            "administrator role (needs --mfa-serial); --here runs it on this machine instead (a host in the VPC "
            "with the MSK client security group, or a local broker).",
            "scripts.manage_topics"),
    Command(("cluster", "bootstrap"), "create the Service Fabric cluster on the seed nodes", WORKSTATION,
            "scripts.bootstrap_cluster", dry_run_offline=True),
    Command(("cluster", "status"), "the cluster's nodes joined with their instances; flags zombies",
            WORKSTATION + " Reaches the cluster's HTTP gateway (19080): from the VPC or a management CIDR.",
            "scripts.cluster_status", json=True),
    Command(("cluster", "scale"), "set the scaling node group's size and wait until it is steady", WORKSTATION,
            "scripts.scale"),
    Command(("cluster", "drain"), "drain one node and remove it from the cluster, as the scale-in automation does",
            WORKSTATION + " Reaches the cluster's HTTP gateway (19080): from the VPC or a management CIDR.",
            "scripts.drain_node"),
    Command(("cluster", "patch"), "install Windows updates on every node in place, seeds included, one at a time",
            WORKSTATION + " Starts the patch state machine, which reaches the cluster itself; --dry-run plans offline.",
            "scripts.patch_cluster", dry_run_offline=True, json=True),
    Command(("devices", "provision"), "create the simulator's AWS IoT things and certificates", WORKSTATION,
            "scripts.provision_devices", mode="provision"),
    Command(("devices", "delete"), "delete every simulated device of the environment and its stored keys",
            WORKSTATION, "scripts.provision_devices", mode="delete"),
    Command(("devices", "export"), "write device certificates and keys into a folder", WORKSTATION,
            "scripts.provision_devices", mode="export"),
    Command(("devices", "replay"), "publish again the device messages the IoT rule could not deliver to Kafka",
            WORKSTATION, "scripts.replay_device_messages", json=True),
    Command(("simulate",), "run the simulator fleet over SSM Run Command and print the merged report",
            WORKSTATION, "scripts.run_simulation", dry_run_offline=True),
    Command(("capacity",), "what the declared workload needs against what the environment provides", OFFLINE,
            "scripts.telemetry.capacity", json=True),
    Command(("cost",), "what the environment costs per month, per message and per device", OFFLINE
            + " --live refreshes the prices from the AWS Price List API and needs credentials.",
            "scripts.telemetry.cost", json=True),
)
GROUPS = {
    "cluster": "the Service Fabric cluster: bootstrap, status, scale, drain, patch",
    "devices": "AWS IoT devices: provision, delete and export the simulator's; replay failed deliveries",
}


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage mistake is one line and exit 2, not its usage block; an option is
    never taken from its abbreviation (`--rat 5000` is refused, not read as --rate), and a
    misspelt command or choice gets the nearest one suggested."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **{**kwargs, "allow_abbrev": False})

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see {self.prog} --help)")

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        if action.choices is not None and value not in action.choices:
            choices = [str(choice) for choice in action.choices]
            near = difflib.get_close_matches(str(value), choices, n=1)
            hint = f"did you mean {near[0]!r}? " if near else ""
            raise argparse.ArgumentError(action, f"invalid choice: {value!r} ({hint}choose from {', '.join(choices)})")


def global_options(*, json_output: bool) -> argparse.ArgumentParser:
    """The options every subcommand takes; --format only where the command has a JSON answer (an
    option a command cannot honour is not offered, rather than refused after parsing)."""
    common = argparse.ArgumentParser(add_help=False)
    options = common.add_argument_group("global options")
    options.add_argument("--env", required=True, metavar="ENV", help="environment name in cdk.json (dev, staging, prod)")
    options.add_argument("--profile", metavar="NAME", help="AWS named profile (default: the usual AWS variables)")
    options.add_argument("--region", metavar="REGION",
                         help="must be the environment's region when given (cdk.json fixes it per environment)")
    if json_output:
        options.add_argument("--format", choices=("text", "json"), default="text", help="output format (default text)")
    else:
        common.set_defaults(format="text")
    options.add_argument("--debug", action="store_true", help="on failure, print the traceback too")
    return common


def build_parser() -> argparse.ArgumentParser:
    import importlib

    root = OneLineParser(prog=PROG, description=__doc__.split("\n\n")[0].replace("\n", " "),
                         epilog="Exit codes: 0 done; 1 the check or operation failed; 2 bad usage or configuration.",
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    root.add_argument("--version", action="version", version=f"{PROG} {version()}")
    groups = root.add_subparsers(title="commands", metavar="COMMAND", parser_class=OneLineParser, required=True)
    commons = {json_output: global_options(json_output=json_output) for json_output in (True, False)}
    made: dict[str, Any] = {}
    for command in COMMANDS:
        parent = groups
        if len(command.path) == 2:
            group = command.path[0]
            if group not in made:
                parser = groups.add_parser(group, help=GROUPS[group], description=GROUPS[group])
                made[group] = parser.add_subparsers(title="commands", metavar="COMMAND", parser_class=OneLineParser,
                                                    required=True)
            parent = made[group]
        module: ModuleType = importlib.import_module(command.module)
        epilog = command.needs + (" Its --dry-run needs no credentials." if command.dry_run_offline else "")

        parser = parent.add_parser(command.path[-1], help=command.summary, description=command.summary[0].upper() + command.summary[1:] + ".",
                                   epilog=epilog, parents=[commons[command.json]])
        if command.mode:
            module.add_arguments(parser, mode=command.mode)
        else:
            module.add_arguments(parser)
        if not command.dry_run_offline and any("--dry-run" in a.option_strings for a in parser._actions):
            # Its plan depends on what the account holds: said in its help, and in the error without
            # credentials (which would otherwise suggest the very --dry-run given).
            parser.epilog = f"{parser.epilog} Its --dry-run reads the account (credentials needed) and changes nothing."
        parser.set_defaults(command=command, module=module, mode=command.mode)
    return root


def version() -> str:
    """The installed project's version (pyproject.toml's, which the CHANGELOG names)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed(DISTRIBUTION)
    except PackageNotFoundError:  # run from a checkout without `make synth`'s editable install
        import tomllib

        return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]


def profile_sessions(args: argparse.Namespace) -> Callable[[str], Any]:
    """boto3 sessions for the tools: the named profile, in the environment's region."""

    def make(region: str) -> Any:
        import boto3

        return boto3.Session(profile_name=args.profile, region_name=region)

    return make


def check_globals(args: argparse.Namespace) -> None:
    from stacks.config import load_environment, read_environments

    config = load_environment(read_environments(), args.env)  # ConfigError names the known ones
    if args.region and args.region != config.region:
        raise UsageError(f"environment {args.env} lives in {config.region}; drop --region or give that one")
    checker = getattr(args.module, "check_arguments", None)
    if checker is not None:
        checker(args)


def main(argv: Sequence[str] | None = None, session_factory: Callable[[str], Any] | None = None) -> int:
    """The command as typed; `session_factory` (region -> boto3 session) replaces the profile's
    sessions, for tests that answer through moto or botocore's Stubber."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    profile_before = os.environ.get("AWS_PROFILE")
    args: argparse.Namespace | None = None
    try:
        args, unknown = build_parser().parse_known_args(argv)
        if unknown:  # named with the subcommand whose options they are not
            raise UsageError(f"unrecognized arguments: {' '.join(unknown)} "
                             f"(see {PROG} {' '.join(args.command.path)} --help)")
        check_globals(args)
        if args.profile:
            os.environ["AWS_PROFILE"] = args.profile  # for the tools that build their own clients
        return int(args.module.run(args, session_factory or profile_sessions(args)))
    except SystemExit as exit_:  # --help, or a tool that exits by itself
        return int(exit_.code or 0)
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as error:  # noqa: BLE001 - the one place every failure becomes one line
        code, message = worded(error, dry_run=getattr(args, "dry_run", False))
        if debug:
            traceback.print_exc()
        elif code == EXIT_FAILED and message.startswith("internal error"):
            message += " (run again with --debug for the traceback)"
        print(f"{PROG}: error: {one_line(message)}", file=sys.stderr)
        return code
    finally:
        if profile_before is None:
            os.environ.pop("AWS_PROFILE", None)
        else:
            os.environ["AWS_PROFILE"] = profile_before


if __name__ == "__main__":
    sys.exit(main())
