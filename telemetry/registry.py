"""The commands of `telemetry` and how each one's command line is read: the registry (which module
serves which command, what it needs, its examples), the parser that refuses a mistake in one line,
the global options, and `command_arguments`, which the deploy journey runs its commands through.
The front door (cli.py) builds its parser from this; nothing here imports a command until it is
asked for one (by its module's name)."""

from __future__ import annotations

import argparse
import difflib
import itertools
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any, NoReturn

from telemetry.shared.errors import UsageError

PROG = "telemetry"
HELP_WIDTH = 100
ALWAYS, DRY_RUN_ONLY = "always", "dry-run only"
DRY_RUN_NEEDS = ("Its --dry-run needs no credentials and no network: it plans from this checkout, says what a run "
                 "would read from the account and change, and writes nothing.")
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
    mode: str = ""  # for a module that serves several subcommands: which one (args.mode)
    json: str = ALWAYS  # --format json: ALWAYS, or DRY_RUN_ONLY where a run streams its progress as text


COMMANDS = (
    Command(("preflight",), "check an account before the first deployment; changes nothing", WORKSTATION,
            "telemetry.commands.preflight"),
    Command(("deploy",), "the first deployment, step by step and resumable (--dry-run: the plan)", WORKSTATION,
            "telemetry.deploy.command", json=DRY_RUN_ONLY),
    Command(("topics",), "create or update the declared Kafka topics and the gateway's SCRAM ACLs",
            WORKSTATION + " The Kafka work runs on a simulator fleet host over SSM Run Command, as the topic "
            "administrator role (needs --mfa-serial); --here runs it on this machine instead (a host in the VPC "
            "with the MSK client security group, or a local broker).",
            "telemetry.commands.topics", json=DRY_RUN_ONLY),
    Command(("cluster", "bootstrap"), "create the Service Fabric cluster on the seed nodes", WORKSTATION,
            "telemetry.commands.cluster.bootstrap"),
    Command(("cluster", "status"), "the cluster's nodes joined with their instances; flags zombies",
            WORKSTATION + " Reaches the cluster's HTTP gateway (19080): from the VPC or a management CIDR.",
            "telemetry.commands.cluster.status"),
    Command(("cluster", "scale"), "set the scaling node group's size and wait until it is steady", WORKSTATION,
            "telemetry.commands.cluster.scale"),
    Command(("cluster", "drain"), "drain one node and remove it from the cluster, as the scale-in automation does",
            WORKSTATION + " Reaches the cluster's HTTP gateway (19080): from the VPC or a management CIDR.",
            "telemetry.commands.cluster.drain"),
    Command(("cluster", "patch"), "install Windows updates on every node in place, seeds included, one at a time",
            WORKSTATION + " Starts the patch state machine, which reaches the cluster itself; --dry-run plans offline.",
            "telemetry.commands.cluster.patch"),
    Command(("cluster", "refresh"), "replace the scaling nodes onto the group's current launch template (a new image), "
            "one at a time through the join and drain automation", WORKSTATION, "telemetry.commands.cluster.refresh"),
    Command(("cluster", "upgrade"), "upgrade the Service Fabric runtime: a monitored cluster code upgrade that rolls back "
            "on failure", WORKSTATION + " Reaches the cluster's HTTP gateway (19080): from the VPC or a management CIDR.",
            "telemetry.commands.cluster.upgrade"),
    Command(("devices", "provision"), "create the simulator's AWS IoT things and certificates", WORKSTATION,
            "telemetry.commands.devices.provision", mode="provision"),
    Command(("devices", "delete"), "delete every simulated device of the environment and its stored keys",
            WORKSTATION, "telemetry.commands.devices.provision", mode="delete"),
    Command(("devices", "export"), "write device certificates and keys into a folder", WORKSTATION,
            "telemetry.commands.devices.provision", mode="export"),
    Command(("devices", "replay"), "publish again the device messages the IoT rule could not deliver to Kafka",
            WORKSTATION, "telemetry.commands.devices.replay"),
    Command(("simulate",), "run the simulator fleet over SSM Run Command and print the merged report",
            WORKSTATION, "telemetry.commands.simulate"),
    Command(("capacity",), "what the declared workload needs against what the environment provides", OFFLINE,
            "telemetry.commands.capacity"),
    Command(("compression",), "measure the compression ratio of your own device payloads as the producers compress them",
            OFFLINE + " It runs librdkafka's in-process mock cluster; nothing leaves the machine.",
            "telemetry.commands.compression"),
    Command(("cost",), "what the environment costs per month, per message and per device", OFFLINE
            + " --live refreshes the prices from the AWS Price List API and needs credentials.",
            "telemetry.commands.cost"),
)
MFA = "arn:aws:iam::111122223333:mfa/you"
# The end of each subcommand's help: (what it does, the command as typed). Tests parse every one.
EXAMPLES: dict[tuple[str, ...], tuple[tuple[str, str], ...]] = {
    ("preflight",): (("check dev's account before its first deployment", "telemetry preflight --env dev"),
                     ("also assume the topic administrator role once, as the topics step will",
                      f"telemetry preflight --env prod --mfa-serial {MFA}")),
    ("deploy",): (("the whole first deployment, step by step, offline", "telemetry deploy --env dev --dry-run"),
                  ("run it; run it again to resume where it stopped", f"telemetry deploy --env prod --mfa-serial {MFA}")),
    ("topics",): (("what would change, offline", "telemetry topics --env prod --dry-run"),
                  ("reconcile on a fleet host as the topic administrator", f"telemetry topics --env prod --mfa-serial {MFA}")),
    ("cluster", "bootstrap"): (("the cluster configuration it would send, offline", "telemetry cluster bootstrap --env dev --dry-run"),
                               ("create the cluster on the seeds", "telemetry cluster bootstrap --env prod")),
    ("cluster", "status"): (("the nodes and their instances", "telemetry cluster status --env prod"),
                            ("the same as JSON", "telemetry cluster status --env prod --format json")),
    ("cluster", "scale"): (("check the size against the group's limits, offline", "telemetry cluster scale --env prod --desired 5 --dry-run"),
                           ("resize and wait until the group is steady", "telemetry cluster scale --env prod --desired 5")),
    ("cluster", "drain"): (("what the drain would do, offline", "telemetry cluster drain --env prod --node scale-i-0abc --dry-run"),
                           ("drain the node and remove it", "telemetry cluster drain --env prod --node scale-i-0abc")),
    ("cluster", "patch"): (("the order the nodes would be patched in, offline", "telemetry cluster patch --env prod --dry-run"),
                           ("patch one node", "telemetry cluster patch --env prod --node seed-2")),
    ("cluster", "refresh"): (("the refresh it would start, offline", "telemetry cluster refresh --env prod --dry-run"),
                             ("replace the scaling nodes, keeping 90 % in service",
                              "telemetry cluster refresh --env prod --min-healthy-percent 90")),
    ("cluster", "upgrade"): (("the upgrade it would start, offline", "telemetry cluster upgrade --env prod --version 11.5.0.1 --dry-run"),
                             ("upload the runtime package and upgrade", "telemetry cluster upgrade --env prod --version 11.5.0.1 "
                              "--package ~/Downloads/MicrosoftServiceFabric.11.5.0.1.cab")),
    ("devices", "provision"): (("what it would create, offline", "telemetry devices provision --env dev --count 100 --dry-run"),
                               ("a thousand simulated devices", "telemetry devices provision --env prod --count 1000")),
    ("devices", "delete"): (("what it would delete, offline", "telemetry devices delete --env dev --dry-run"),
                            ("delete them", "telemetry devices delete --env dev")),
    ("devices", "export"): (("the first ten devices' certificates and keys", "telemetry devices export --env dev --dir ./devices --count 10"),),
    ("devices", "replay"): (("what waits in the queue since six hours ago, offline", "telemetry devices replay --env prod --since 6h --dry-run"),
                            ("replay from a time, 500 messages a second",
                             "telemetry devices replay --env prod --since 2026-11-26T02:00Z --rate 500")),
    ("simulate",): (("the fleet plan and its quota checks, offline", "telemetry simulate --env dev --rate 1000 --duration 60 --plan"),
                    ("five minutes at prod's declared peak", "telemetry simulate --env prod --rate 73800 --duration 300 --report report.json")),
    ("capacity",): (("the declared workload against prod", "telemetry capacity --env prod"),
                    ("another rate, with every limit used and its page", "telemetry capacity --env prod --rate 100000 --limits")),
    ("compression",): (("the ratio on your payloads (readings.jsonl: one payload per line)",
                        "telemetry compression --env prod --sample readings.jsonl"),
                       ("with as many producers as the fleet has hosts", "telemetry compression --env prod --sample readings.jsonl --producers 4")),
    ("cost",): (("dev's month, offline", "telemetry cost --env dev"),
                ("prod at another rate over MQTT, as JSON", "telemetry cost --env prod --rate 50000 --transport mqtt --format json")),
}
GROUPS = {
    "cluster": "the Service Fabric cluster: bootstrap, status, scale, drain, patch, refresh, upgrade",
    "devices": "AWS IoT devices: provision, delete and export the simulator's; replay failed deliveries",
}


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage mistake is one line and exit 2, not its usage block; an option is
    never taken from its abbreviation (`--rat 5000` is refused, not read as --rate), and a
    misspelt command or choice gets the nearest one suggested."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **{**kwargs, "allow_abbrev": False})
        self._typed: list[str] = []

    def parse_known_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:
        self._typed = list(sys.argv[1:] if args is None else args)
        parsed, unknown = super().parse_known_args(args, namespace)
        self._refuse_misspelt_options(unknown)
        return parsed, unknown

    def error(self, message: str) -> NoReturn:
        # A misspelt option explains the error it causes (`--evn dev`: "--env is required").
        self._refuse_misspelt_options(self._typed)
        raise UsageError(f"{message} (see {self.prog} --help)")

    def _refuse_misspelt_options(self, typed: Sequence[str]) -> None:
        """An option this command does not take but nearly does is refused with the one it nearly is.
        A group's parser judges only what comes before its command: the rest is its commands'."""
        if self._subparsers is not None:
            typed = list(itertools.takewhile(lambda token: token.startswith("-"), typed))
        known = [option for option in self._option_string_actions if option.startswith("--")]
        for token in typed:
            if token == "--" or not token.startswith("--"):
                continue
            option = token.split("=", 1)[0]
            if option in self._option_string_actions:
                continue
            near = difflib.get_close_matches(option, known, n=1, cutoff=0.75)
            if near:
                raise UsageError(f"unrecognized option {option}: did you mean {near[0]}? (see {self.prog} --help)")

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        if action.choices is not None and value not in action.choices:
            choices = [str(choice) for choice in action.choices]
            near = difflib.get_close_matches(str(value), choices, n=1)
            hint = f"did you mean {near[0]!r}? " if near else ""
            raise argparse.ArgumentError(action, f"invalid choice: {value!r} ({hint}choose from {', '.join(choices)})")


def global_options(*, json_mode: str) -> argparse.ArgumentParser:
    """The options every subcommand takes; --format's help says where a command answers in JSON
    for its --dry-run only."""
    common = argparse.ArgumentParser(add_help=False)
    options = common.add_argument_group("global options")
    options.add_argument("--env", required=True, metavar="ENV", help="environment name in cdk.json (dev, staging, prod)")
    options.add_argument("--profile", metavar="NAME", help="AWS named profile (default: the usual AWS variables)")
    options.add_argument("--region", metavar="REGION",
                         help="must be the environment's region when given (cdk.json fixes it per environment)")
    only = "; json with --dry-run only (a run reports its progress as text)" if json_mode == DRY_RUN_ONLY else ""
    options.add_argument("--format", choices=("text", "json"), default="text",
                         help=f"output format (default text); json: one JSON document on stdout{only}")
    options.add_argument("--debug", action="store_true", help="on failure, print the traceback too")
    return common


def typed_command(argv: Sequence[str]) -> Command | None:
    """The command `argv` names (`cost`, `cluster drain`), or None when it names none."""
    for command in COMMANDS:
        if tuple(argv[:len(command.path)]) == command.path:
            return command
    return None


def add_command_arguments(parser: argparse.ArgumentParser, command: Command) -> None:
    """The command's own options on `parser`, and the defaults that name its module."""
    import importlib

    module: ModuleType = importlib.import_module(command.module)
    if command.mode:
        module.add_arguments(parser, mode=command.mode)
    else:
        module.add_arguments(parser)
    needs = command.needs
    if any("--dry-run" in a.option_strings for a in parser._actions):
        needs = f"{needs} {DRY_RUN_NEEDS}"
    # Raw, for the examples' lines; so the prose is wrapped here.
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.description = wrapped(parser.description or "")
    parser.epilog = command_epilog(command.path, needs)
    parser.set_defaults(command=command, module=module, mode=command.mode)


def command_epilog(path: tuple[str, ...], needs: str) -> str:
    """What a subcommand needs, wrapped, then its examples: what each does, and the command."""
    examples = "\n".join(f"  # {what}\n  {typed}" for what, typed in EXAMPLES[path])
    return f"{wrapped(needs)}\n\nExamples:\n{examples}"


def wrapped(prose: str) -> str:
    """Paragraphs (blank-line separated) filled to the help's width."""
    import textwrap

    return "\n\n".join(textwrap.fill(" ".join(p.split()), width=HELP_WIDTH) for p in prose.split("\n\n"))


def command_arguments(path: Sequence[str], argv: Sequence[str]) -> argparse.Namespace:
    """What `telemetry <path> <argv>` hands its command: every option it reads, defaults included,
    and the command's own checks passed. The deploy journey runs commands through this, so a step
    cannot hand a command less than the command line would (a hand-built Namespace once lacked
    --format, and every first deployment stopped after creating the cluster)."""
    (command,) = [c for c in COMMANDS if c.path == tuple(path)]
    parser = OneLineParser(prog=f"{PROG} {' '.join(path)}", epilog=command.needs,
                           parents=[global_options(json_mode=command.json)])
    add_command_arguments(parser, command)
    args = parser.parse_args(list(argv))
    check_globals(args)
    return args


def check_globals(args: argparse.Namespace) -> None:
    from stacks.config import load_environment, read_environments

    config = load_environment(read_environments(), args.env)  # ConfigError names the known ones
    if args.region and args.region != config.region:
        raise UsageError(f"environment {args.env} lives in {config.region}; drop --region or give that one")
    checker = getattr(args.module, "check_arguments", None)
    if checker is not None:
        checker(args)
    if args.format == "json" and args.command.json == DRY_RUN_ONLY and not getattr(args, "dry_run", False):
        raise UsageError(f"{PROG} {' '.join(args.command.path)} reports its progress as text; "
                         "--format json goes with --dry-run")
