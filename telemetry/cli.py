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

Every --dry-run plans offline, from this checkout alone (cdk.json, the synthesized templates):
no credentials, no network, nothing written into the checkout. It says what a run would change,
and what a run would first read from the account or the cluster that the dry run could not. (One
exception: topics --dry-run against a broker named with --bootstrap-servers and a local broker's
protocol reads that broker.)

--format json, on every subcommand: stdout carries one JSON document, the plan or the result;
what the command says on the way goes to stderr; an error is {"error": "..."} on stderr with the
same exit code (telemetry/shared/output.py). deploy and topics answer in JSON for --dry-run only:
their runs report progress as text, and topics reads an MFA code from the terminal. The documents:

    every --dry-run    {"environment", "region", "dry_run": true, <the command's fields>,
                       "would_read": [...], "would_change": [...]}, but deploy's (below):
                       scale: group, desired, minimum, maximum (null for another --group);
                       drain: node; refresh: group, preferences; upgrade: from_version, version,
                       code_file_path, upgrade, cdk_json; devices provision: devices, things, policy, parameters;
                       devices delete: fleet, things, parameters; devices replay: queue, since,
                       rate, workers, journal, rule; topics: runs_on, topics, acls; cluster
                       bootstrap: source, cluster_config (thumbprints as placeholders), written
                       (--output, or null); cluster patch: state_machine, schedule, nodes,
                       then, steps_per_node, node_time_limit_minutes, poll_interval_seconds,
                       on_failure; simulate: the run's parameters and host_rates
    preflight          {"environment", "account", "region", "checks": [...], "blockers"}
    deploy --dry-run   {"environment", "account", "region", "placeholders", "steps": [{"name", "does"}]}
    topics --dry-run   against a local broker: {"environment", "dry_run", "brokers",
                       "changes": [line, ...], "cannot_reconcile"}
    cluster bootstrap  {"environment", "cluster", "seeds", "cluster_config", "command_id", "result"}
    cluster patch      {"execution_arn", "nodes", "input"}: the execution it started
    cluster status     [{"node", "node_status", "seed", "node_type", "instance_id",
                       "instance_state", "availability_zone", "address", "flag"}, ...]
    cluster scale      {"group", "desired", "steady"}
    cluster drain      {"node", "result": "removed" | "already removed"}
    cluster refresh    {"group", "refresh_id", "status": "Successful"}
    cluster upgrade    {"environment", "version", "previous", "state", "cdk_json": {key: value}}
    devices provision  {"environment", "devices", "created", "repaired", "unchanged", "failed"}
    devices delete     {"environment", "fleet", "deleted", "failed"}
    devices export     {"environment", "directory", "exported": [thing, ...], "failed": [thing, ...]}
    devices replay     the tally: {"replayed", "already_replayed", "left_...", ...}
    simulate           the merged fleet report (as --report writes it); --plan: the fleet plan
                       with its quota "checks" and "refusals"
    capacity, cost     the model's figures, as the text shows them
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from typing import Any

from telemetry import REPO
from telemetry.registry import (
    ALWAYS,
    COMMANDS,
    DRY_RUN_ONLY,
    GROUPS,
    PROG,
    OneLineParser,
    add_command_arguments,
    check_globals,
    global_options,
    typed_command,
)
from telemetry.shared import output
from telemetry.shared.errors import EXIT_FAILED, EXIT_INTERRUPTED, UsageError, one_line, worded
from telemetry.shared.sessions import command_sessions

DISTRIBUTION = "telemetry-platform-blueprint"  # pyproject.toml's project name

def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The whole command line. A command's options come from its module, which imports what the
    command runs on (boto3, the stacks' configuration, numpy for the simulator's reports): with
    `argv`, only the command it names is given its options, so `telemetry cost` does not import
    what `cluster drain` needs. Without `argv`, or for --print-completion, every command is."""
    everything = argv is None or "--print-completion" in argv
    typed = None if everything else typed_command(argv)
    root = OneLineParser(prog=PROG, description=__doc__.split("\n\n")[0].replace("\n", " "),
                         epilog="Exit codes: 0 done; 1 the check or operation failed; 2 bad usage or configuration.",
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    root.add_argument("--version", action="version", version=f"{PROG} {version()}")
    import shtab

    shtab.add_argument_to(root, "--print-completion", help="print the shell's completion script and exit "
                          "(README: \"Shell completion\")")  # fmt: skip
    groups = root.add_subparsers(title="commands", metavar="COMMAND", parser_class=OneLineParser, required=True)
    commons = {json_mode: global_options(json_mode=json_mode) for json_mode in (ALWAYS, DRY_RUN_ONLY)}
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
        parser = parent.add_parser(command.path[-1], help=command.summary, description=command.summary[0].upper() + command.summary[1:] + ".",
                                   epilog=command.needs, parents=[commons[command.json]])
        if everything or command is typed:
            add_command_arguments(parser, command)
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


def main(argv: Sequence[str] | None = None, session_factory: Callable[[str], Any] | None = None) -> int:
    """The command as typed; `session_factory` (region -> boto3 session) replaces the profile's
    sessions, for tests that answer through moto or botocore's Stubber. Either way the command
    gets one session per Region, which makes each client once (telemetry/shared/sessions.py)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    json_output = output.wants_json(argv)
    profile_before = os.environ.get("AWS_PROFILE")
    args: argparse.Namespace | None = None
    try:
        args, unknown = build_parser(argv).parse_known_args(argv)
        if unknown:  # named with the subcommand whose options they are not
            raise UsageError(f"unrecognized arguments: {' '.join(unknown)} "
                             f"(see {PROG} {' '.join(args.command.path)} --help)")
        json_output = args.format == "json"
        check_globals(args)
        if args.profile:
            os.environ["AWS_PROFILE"] = args.profile  # for the tools that build their own clients
        with output.json_run(json_output):
            return int(args.module.run(args, command_sessions(session_factory or profile_sessions(args))))
    except SystemExit as exit_:  # --help, or a tool that exits by itself
        return int(exit_.code or 0)
    except KeyboardInterrupt:
        output.error("", kind="interrupted", json_output=json_output)
        return EXIT_INTERRUPTED
    except Exception as error:  # noqa: BLE001 - the one place every failure becomes one line
        code, message = worded(error)
        if debug:
            traceback.print_exc()
        elif code == EXIT_FAILED and (message.startswith("internal error") or getattr(error, "internal", False)):
            message += " (run again with --debug for the traceback)"
        output.error(one_line(message), prog=PROG, json_output=json_output)
        return code
    finally:
        if profile_before is None:
            os.environ.pop("AWS_PROFILE", None)
        else:
            os.environ["AWS_PROFILE"] = profile_before


if __name__ == "__main__":
    sys.exit(main())
