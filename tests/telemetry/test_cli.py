"""The operator command `telemetry`, as a user types it.

A table runs every subcommand with bad input (unknown environment, missing and malformed values,
a region that is not the environment's, no AWS credentials) and checks what the user sees: one
line on stderr, the documented exit code, no traceback. A few runs go through the installed
`.venv/bin/telemetry` itself, the entry point `make synth` puts there.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from telemetry import cli, registry
from tests.conftest import REPO

TELEMETRY = Path(sys.executable).parent / "telemetry"
NO_CREDENTIALS = {
    "AWS_CONFIG_FILE": "/nonexistent/aws-config",
    "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent/aws-credentials",
    "AWS_EC2_METADATA_DISABLED": "true",  # no instance-role lookup either
}

# (argv, exit code, a fragment of the one line the user gets)
BAD_INPUT = [
    # the command line
    ([], 2, "required: COMMAND"),
    (["nope"], 2, "invalid choice: 'nope'"),
    # a misspelt command or choice gets the nearest one; an abbreviated option is not taken for it
    (["simulte", "--env", "dev"], 2, "invalid choice: 'simulte' (did you mean 'simulate'? choose from"),
    (["clustr", "status"], 2, "did you mean 'cluster'?"),
    (["cluster", "stats", "--env", "dev"], 2, "did you mean 'status'?"),
    (["cost", "--env", "dev", "--rat", "5000"], 2, "unrecognized option --rat: did you mean --rate? (see telemetry cost --help)"),
    # a misspelt option is named with the one it nearly is, not with the error it causes
    (["cost", "--evn", "dev"], 2, "unrecognized option --evn: did you mean --env? (see telemetry cost --help)"),
    (["cluster", "drain", "--env", "dev", "--node=scale-0", "--timout", "5"], 2, "did you mean --timeout?"),
    (["--verison"], 2, "unrecognized option --verison: did you mean --version?"),
    (["cost", "--env", "dev", "--frobnicate"], 2, "unrecognized arguments: --frobnicate (see telemetry cost --help)"),
    (["cluster"], 2, "required: COMMAND"),
    (["preflight"], 2, "required: --env"),
    (["preflight", "--env", "qa"], 2, "unknown environment 'qa'; known environments: dev, prod, staging"),
    (["preflight", "--env", "dev", "--region", "us-east-1"], 2, "dev lives in eu-west-1"),
    (["preflight", "--env", "dev", "--format", "yaml"], 2, "invalid choice: 'yaml'"),
    # an option of another subcommand is named with this one's help
    (["cluster", "scale", "--env", "dev", "--cdk-out", "x"], 2,
     "unrecognized arguments: --cdk-out x (see telemetry cluster scale --help)"),
    # where a run reports its progress as text, JSON is the dry run's (and the error says so in JSON)
    (["deploy", "--env", "dev", "--format", "json"], 2,
     "telemetry deploy reports its progress as text; --format json goes with --dry-run"),
    (["topics", "--env", "dev", "--mfa-serial", "arn:aws:iam::1:mfa/me", "--format", "json"], 2,
     "telemetry topics reports its progress as text; --format json goes with --dry-run"),
    (["clustr", "status", "--format", "json"], 2, "invalid choice: 'clustr' (did you mean 'cluster'?"),
    (["topics", "--env", "dev", "--timeout", "-1"], 2, "must be more than 0 seconds"),
    (["topics", "--env", "dev", "--timeout", "soon"], 2, "'soon' is not a number of seconds"),
    (["topics", "--env", "dev", "--here", "--mfa-serial", "arn:aws:iam::1:mfa/me"], 2,
     "--mfa-serial goes with --assume-role"),
    (["topics", "--env", "dev"], 2, "requires MFA: pass --mfa-serial ARN"),
    (["cluster", "bootstrap", "--env", "dev", "--timeout", "x"], 2, "invalid float value: 'x'"),
    (["cluster", "status", "--env", "dev", "--client-cert", "a.pem"], 2, "pass both --client-cert and --client-key"),
    (["cluster", "scale", "--env", "dev", "--desired", "-1"], 2, "must be 0 or more"),
    (["cluster", "drain", "--env", "dev"], 2, "required: --node"),
    (["cluster", "drain", "--env", "dev", "--node", "scale-0", "--server-thumbprint", "xyz"], 2,
     "--server-thumbprint must be 40"),
    (["cluster", "drain", "--env", "dev", "--node", "scale-0", "--timeout", "0"], 2, "must be positive"),
    (["cluster", "upgrade", "--env", "dev", "--version", "11.5.0.1", "--poll-interval", "0"], 2,
     "argument --poll-interval: must be more than 0 seconds, got 0"),
    (["cluster", "patch", "--env", "dev", "--node", "seed-5", "--dry-run"], 2,
     "--node seed-5: environment dev has 3 seeds, seed-0 to seed-2"),
    (["cluster", "patch", "--env", "dev", "--node", "scale-0;reboot"], 2, "is not a node name: seed-N for a seed"),
    (["cluster", "patch", "--env", "qa", "--dry-run"], 2, "unknown environment 'qa'"),
    (["cluster", "patch", "--env", "dev", "--dry-run", "--format", "yaml"], 2, "invalid choice: 'yaml'"),
    (["cluster", "refresh", "--env", "dev", "--min-healthy-percent", "x"], 2, "'x' is not a whole number"),
    (["cluster", "refresh", "--env", "dev"], 2, "Unable to locate credentials"),
    (["cluster", "upgrade", "--env", "dev"], 2, "required: --version"),
    (["cluster", "upgrade", "--env", "dev", "--version", "11.5"], 2, "--version '11.5' is not a Service Fabric runtime"),
    (["cluster", "upgrade", "--env", "dev", "--version", "11.4.268.1", "--dry-run"], 2,
     "--version 11.4.268.1 is not newer than 11.4.268.1, which cdk.json names"),
    (["cluster", "upgrade", "--env", "dev", "--version", "11.5.0.1"], 2, "Unable to locate credentials"),
    (["cluster", "upgrade", "--env", "dev", "--version", "11.5.0.1", "--package", "/nonexistent/p.cab"], 2,
     "--package /nonexistent/p.cab: no such file"),
    (["cluster", "upgrade", "--env", "dev", "--version", "11.5.0.1", "--package", "/nonexistent/p.cab",
      "--package-sha256", "abc"], 2, "--package-sha256 'abc' is not a SHA-256"),
    (["cluster", "upgrade", "--env", "dev", "--version", "11.5.0.1", "--package-sha256", "ab" * 32], 2,
     "--package-sha256 goes with --package"),
    (["cluster", "upgrade", "--env", "dev", "--version", "11.5.0.1", "--chunk-size", "1KiB"], 2,
     "argument --chunk-size: must be 64 KiB to 32 MiB, got 1KiB"),
    (["cluster", "upgrade", "--env", "dev", "--version", "11.5.0.1", "--chunk-size", "big"], 2,
     "argument --chunk-size: 'big' is not a size"),
    (["cluster", "upgrade", "--env", "dev", "--version", "11.5.0.1", "--code-file-path",
      "MicrosoftServiceFabric.11.5.0.2.cab"], 2, "names the runtime 11.5.0.2, not --version 11.5.0.1"),
    (["devices", "provision", "--env", "dev"], 2, "required: --count"),
    (["devices", "provision", "--env", "dev", "--count", "0"], 2, "must be 1-"),
    (["devices", "export", "--env", "dev", "--dir", "/tmp/x", "--first", "9995", "--count", "9"], 2,
     "goes past device"),
    (["simulate", "--env", "dev", "--rate", "-5", "--duration", "10"], 2, "must be at least 0"),
    (["simulate", "--env", "dev", "--rate", "100"], 2, "required: --duration"),
    (["cost", "--env", "dev", "--rate", "-1"], 2, "argument --rate: must be 0 or more, got -1"),
    (["cost", "--env", "dev", "--transport", "udp"], 2, "argument --transport: invalid choice: 'udp'"),
    (["cost", "--env", "dev", "--live"], 2, "Unable to locate credentials"),
    (["cost", "--env", "dev", "--save-prices"], 2, "--save-prices goes with --live"),
    # no AWS credentials anywhere: one line saying how to give them
    (["preflight", "--env", "dev"], 2, "Unable to locate credentials"),
    (["cluster", "status", "--env", "dev"], 2, "Unable to locate credentials"),
    (["cluster", "scale", "--env", "dev", "--desired", "3"], 2, "Unable to locate credentials"),
    (["cluster", "drain", "--env", "dev", "--node", "scale-0"], 2, "Unable to locate credentials"),
    (["cluster", "patch", "--env", "dev"], 2, "Unable to locate credentials"),
    (["devices", "provision", "--env", "dev", "--count", "5"], 2, "Unable to locate credentials"),
    (["devices", "delete", "--env", "dev"], 2, "Unable to locate credentials"),
    (["cluster", "status", "--env", "dev", "--format", "json"], 2, "Unable to locate credentials"),
    # a dry run checks what the checkout can: the configured limits, a seed node's name
    (["cluster", "scale", "--env", "dev", "--desired", "9", "--dry-run"], 2,
     "9 is outside telemetry-dev-sf-scaling's limits 0-3"),
    (["simulate", "--env", "dev", "--rate", "100", "--duration", "10"], 2, "Unable to locate credentials: this command calls AWS"),
    (["topics", "--env", "dev", "--mfa-serial", "arn:aws:iam::1:mfa/me"], 2, "no AWS credentials"),
    (["deploy", "--env", "dev"], 2, "Unable to locate credentials"),
    (["preflight", "--env", "dev", "--profile", "nobody"], 2, "The config profile (nobody) could not be found"),
]


@pytest.fixture
def no_aws(monkeypatch):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in NO_CREDENTIALS.items():
        monkeypatch.setenv(name, value)


@pytest.mark.parametrize(("argv", "code", "fragment"), BAD_INPUT, ids=[" ".join(row[0]) or "(nothing)" for row in BAD_INPUT])
def test_bad_input_is_one_line_and_the_documented_exit_code(argv, code, fragment, no_aws, capsys):
    assert cli.main(argv) == code
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in out + err
    if "json" in argv:  # --format json: the error as JSON, {"error": ...} alone, and nothing on stdout
        error = json.loads(lines[0])
        assert list(error) == ["error"] and fragment in error["error"] and out == ""
    else:
        assert fragment in lines[0]
        assert lines[0].startswith("telemetry") and ": error: " in lines[0]  # one voice, whichever tool spoke


def test_every_dry_run_says_in_its_help_that_it_plans_offline_and_json_says_where_it_applies(capsys):
    for command in registry.COMMANDS:
        assert cli.main([*command.path, "--help"]) == 0
        text = " ".join(capsys.readouterr().out.split())
        assert ("--dry-run" in text) == (registry.DRY_RUN_NEEDS in text), command.path
        assert "--format {text,json}" in text, command.path
        assert ("json with --dry-run only" in text) == (command.json == registry.DRY_RUN_ONLY), command.path


# Every subcommand with a --dry-run, and what else its command line needs ({cdk_out}: templates).
DRY_RUNS = {
    ("deploy",): ["--cdk-out", "{cdk_out}"],
    ("topics",): [],
    ("cluster", "bootstrap"): ["--cdk-out", "{cdk_out}"],
    ("cluster", "scale"): [],
    ("cluster", "drain"): ["--node", "scale-i-0abc"],
    ("cluster", "patch"): [],
    ("cluster", "refresh"): [],
    ("cluster", "upgrade"): ["--version", "11.5.0.1"],
    ("devices", "provision"): ["--count", "5"],
    ("devices", "delete"): [],
    ("devices", "replay"): ["--since", "2h"],
    ("simulate",): ["--rate", "1000", "--duration", "60"],
}


@pytest.fixture
def offline(monkeypatch, tmp_path):
    """No AWS credentials anywhere (empty config and credentials files), and no network: a
    connection attempt fails the test, whoever makes it."""
    import socket

    empty = tmp_path / "empty"
    empty.write_text("")
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
                 "AWS_DEFAULT_PROFILE", "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(empty))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(empty))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")

    def no_network(*args, **kwargs):
        raise AssertionError(f"a network connection was attempted: {args}")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setattr(socket, "create_connection", no_network)


def checkout_status() -> str:
    return subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=REPO, capture_output=True,
                          text=True, check=True).stdout


def test_every_dry_run_prints_its_plan_as_json_offline_and_writes_nothing(offline, synthesized, capsys):
    """`telemetry SUBCOMMAND --dry-run --format json` for every subcommand that has a dry run, as
    typed (through cli.main, with no session given): one JSON document on stdout, exit 0, with no
    credentials and no network, and the checkout as it was."""
    offered = set()
    for command in registry.COMMANDS:
        assert cli.main([*command.path, "--help"]) == 0
        if "--dry-run" in capsys.readouterr().out:
            offered.add(command.path)
    assert offered == set(DRY_RUNS)  # a new dry run joins the table
    cdk_out = str(synthesized("dev").outdir)
    before = checkout_status()

    for path, extra in DRY_RUNS.items():
        argv = [*path, "--env", "dev", *(arg.format(cdk_out=cdk_out) for arg in extra), "--dry-run", "--format", "json"]
        code = cli.main(argv)
        out, err = capsys.readouterr()
        assert code == 0, (path, err)
        plan = json.loads(out)  # the whole of stdout is one document
        assert plan["environment"] == "dev", path
        if path != ("deploy",):  # deploy's plan is its steps; every other dry run names what it cannot see
            assert plan["dry_run"] is True and plan["would_read"] and plan["would_change"], path
    assert checkout_status() == before


def test_a_misspelt_subcommand_gets_a_suggestion_and_a_json_error_on_stderr(capsys):
    assert cli.main(["devices", "provison", "--env", "dev", "--format", "json"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert json.loads(err) == {"error": "argument COMMAND: invalid choice: 'provison' (did you mean 'provision'? choose "
                                        "from provision, delete, export, replay) (see telemetry devices --help)"}


def test_every_subcommand_says_what_it_needs_and_where_it_runs(capsys):
    for command in registry.COMMANDS:
        assert cli.main([*command.path, "--help"]) == 0
        help_text = " ".join(capsys.readouterr().out.split())
        assert "Needs:" in help_text and "--env ENV" in help_text and "--profile NAME" in help_text, command.path
        assert ("Runs anywhere" in help_text) or ("run it on" in help_text), command.path


def test_telemetry_is_the_one_front_door():
    """No operator module keeps a command line of its own beside `telemetry` (issue 29): none is
    run as a script, and every module that declares options is a subcommand."""
    import ast

    served = {command.module for command in registry.COMMANDS}
    for path in sorted((REPO / "scripts").rglob("*.py")):
        tree = ast.parse(path.read_text())
        module = ".".join(path.relative_to(REPO).with_suffix("").parts)
        top = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
        as_script = [node for node in tree.body if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test)]
        # Run by path, a module only says which command replaced it.
        assert all("moved(" in ast.unparse(node) and "parse_args" not in ast.unparse(node) for node in as_script) \
            or module == "telemetry.cli", f"{module} runs as a script"
        assert not {"main", "parse_args"} & top or module == "telemetry.cli", f"{module} has its own main"
        if "add_arguments" in top:
            assert module in served, f"{module} declares options but is no telemetry subcommand"
        assert not path.read_text().startswith("#!"), f"{module} still has a shebang"


def test_a_module_run_by_its_old_path_names_the_command_that_replaced_it():
    import sys

    result = subprocess.run([sys.executable, "telemetry/commands/cluster/drain.py", "--env", "dev", "--node", "scale-0"], cwd=REPO,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert result.stderr.splitlines() == ["this script has no command line of its own any more: run `telemetry cluster "
                                          "drain --help` (.venv/bin/telemetry, installed by make synth)"]


def test_debug_adds_the_traceback(no_aws, capsys):
    assert cli.main(["preflight", "--env", "dev", "--debug"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" in err and err.strip().splitlines()[-1].startswith("telemetry: error:")


@pytest.mark.parametrize(("text", "where"), [('{"context": {"environments": {,}}}', "line 1, column 31"),
                                             ('{\n  "context": {\n    "environments": {}\n  }\n', "line 5, column 1")])
def test_a_malformed_cdk_json_is_one_line_naming_the_file_line_and_column(text, where, tmp_path, monkeypatch, capsys):
    import stacks.config

    broken = tmp_path / "cdk.json"
    broken.write_text(text)
    monkeypatch.setattr(stacks.config, "CDK_JSON", broken)
    assert cli.main(["cost", "--env", "dev"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert err.startswith(f"telemetry: error: {broken}: not valid JSON at {where}: "), err


def test_cdk_out_naming_a_missing_folder_is_refused(no_aws, tmp_path, capsys):
    for argv in (["cost", "--env", "dev"], ["deploy", "--env", "dev", "--dry-run"],
                 ["cluster", "bootstrap", "--env", "dev", "--dry-run"]):
        assert cli.main([*argv, "--cdk-out", str(tmp_path / "missing")]) == 2
        err = capsys.readouterr().err
        assert f"argument --cdk-out: {tmp_path / 'missing'} is not a folder" in err, err


def test_every_subcommand_help_ends_with_examples_that_parse_as_typed(capsys):
    """Each example is what a user would type: the command it belongs to, options that command takes
    with values it accepts (parsed by the real parser; nothing is run)."""
    import shlex

    for command in registry.COMMANDS:
        assert cli.main([*command.path, "--help"]) == 0
        help_text = capsys.readouterr().out
        examples = help_text[help_text.index("\nExamples:\n"):].splitlines()[2:]
        typed_lines = [line.strip() for line in examples if not line.strip().startswith("#")]
        assert typed_lines == [typed for _, typed in registry.EXAMPLES[command.path]], command.path
        assert all(len(line) <= 120 for line in help_text.splitlines()), command.path
        for typed in typed_lines:
            argv = shlex.split(typed)
            assert argv[0] == "telemetry" and tuple(argv[1:1 + len(command.path)]) == command.path, typed
            args = cli.build_parser().parse_args(argv[1:])
            assert args.command is command, typed


# -- the installed command ------------------------------------------------------------------


def typed(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """As a user types it: the entry point make synth installed, from another directory."""
    import os

    environ = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    return subprocess.run([str(TELEMETRY), *argv], capture_output=True, text=True, cwd="/",
                          env={**environ, **NO_CREDENTIALS, **(env or {})}, timeout=120, check=False)


@pytest.mark.integration
def test_the_installed_command_plans_a_first_deployment_offline(tmp_path):
    assert TELEMETRY.exists(), "make synth installs .venv/bin/telemetry"
    result = typed("deploy", "--env", "dev", "--dry-run", "--format", "json", "--cdk-out", str(tmp_path))

    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout[result.stdout.index("{"):])
    assert [step["name"] for step in plan["steps"]] == ["preflight", "deploy", "topics", "bootstrap", "scale", "flink", "smoke"]
    assert plan["steps"][1]["does"][0].startswith("synthesize dev with the CDK CLI into cdk.out")
    deploys = [line.split()[1] for line in plan["steps"][1]["does"] if line.startswith("deploy ")]
    assert deploys.index("Telemetry-dev-Network") < deploys.index("Telemetry-dev-Msk") < deploys.index(
        "Telemetry-dev-ServiceFabric") < deploys.index("Telemetry-dev-NodeLifecycle")
    assert len(deploys) == len(list((REPO / "stacks").glob("*_stack.py")))
    # The smoke step says what it proves, and where its records go: beside the lake, not in it.
    smoke = plan["steps"][-1]["does"]
    assert "over Kafka (IAM) for 30 s at 1,000 msg/s into topic telemetry as run smoke-<time>-kafka" in smoke[0]
    assert smoke[1].startswith("make sure devices 1-5 of the simulator fleet are provisioned in AWS IoT")
    assert "over MQTT for 30 s at 100 msg/s through AWS IoT Core and rule telemetry_dev_device_telemetry" in smoke[1]
    assert "of both runs back through the Flink sink within 240 s, under s3://<telemetry bucket>/smoke/" in smoke[2]
    assert "outside the telemetry table, and they expire after 1 day" in smoke[2]
    assert smoke[3].startswith("require all 3 seed nodes Up") and len(smoke) == 4


@pytest.mark.integration
def test_the_installed_command_prints_its_version():
    import tomllib

    result = typed("--version")
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert (result.returncode, result.stdout.strip()) == (0, f"telemetry {version}")
    assert f"## {version}" in (REPO / "CHANGELOG.md").read_text()  # every version has its entry


@pytest.mark.integration
def test_bash_completes_commands_options_and_choices_from_the_installed_command(tmp_path):
    """The script `telemetry --print-completion bash` prints, sourced by bash and asked as bash's
    programmable completion asks (COMP_WORDS, COMP_CWORD, then the function `complete -F` names)."""
    import shutil

    bash = shutil.which("bash")
    assert bash
    result = typed("--print-completion", "bash")
    assert result.returncode == 0, result.stderr
    script = tmp_path / "telemetry.bash"
    script.write_text(result.stdout)

    def completions(*words: str) -> list[str]:
        function = next(line.split()[-2] for line in result.stdout.splitlines() if line.startswith("complete "))
        words_ = " ".join(f"'{w}'" for w in words)
        probe = f"source {script}; COMP_WORDS=(telemetry {words_}); COMP_CWORD={len(words)}; {function}; " \
                'printf "%s\\n" "${COMPREPLY[@]}"'
        run = subprocess.run([bash, "-c", probe], capture_output=True, text=True, timeout=60, check=False)
        assert run.returncode == 0, run.stderr
        return run.stdout.split()

    assert completions("clu") == ["cluster"]
    assert completions("cluster", "dr") == ["drain"]
    assert completions("cost", "--tr") == ["--transport"]
    assert completions("cost", "--transport", "") == ["kafka", "mqtt", "basic-ingest"]
    zsh = typed("--print-completion", "zsh")
    assert zsh.returncode == 0 and "#compdef telemetry" in zsh.stdout and "cluster" in zsh.stdout


def test_a_command_imports_its_own_module_and_no_other_commands():
    """Each command's options come from its module, imported for the command typed alone, so a
    command does not start by importing what every other one runs on."""
    show = ("import sys; from telemetry import cli; code = cli.main(sys.argv[1:]); "
            "print(sorted(m for m in sys.modules if m.startswith(('telemetry.commands.', 'telemetry.deploy.'))),"
            " file=sys.stderr); sys.exit(code)")  # fmt: skip
    for argv, module in ((["cost", "--env", "dev"], "telemetry.commands.cost"),
                         (["cluster", "patch", "--env", "prod", "--dry-run"], "telemetry.commands.cluster.patch")):
        result = subprocess.run([sys.executable, "-c", show, *argv], capture_output=True, text=True, timeout=120,
                                check=False, env={**os.environ, **NO_CREDENTIALS})  # fmt: skip
        assert result.returncode == 0, result.stderr
        imported = result.stderr.strip().splitlines()[-1]
        assert module in imported and not any(c.module in imported for c in registry.COMMANDS if c.module != module), imported


@pytest.mark.integration
def test_the_installed_command_refuses_bad_input_in_one_line():
    result = typed("cluster", "drain", "--env", "qa", "--node", "scale-0")

    assert result.returncode == 2
    assert result.stderr.strip() == "telemetry: error: unknown environment 'qa'; known environments: dev, prod, staging"


def test_the_patch_plan_is_printed_offline_seeds_first(no_aws, capsys):
    assert cli.main(["cluster", "patch", "--env", "prod", "--dry-run", "--format", "json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["nodes"] == ["seed-0", "seed-1", "seed-2", "seed-3", "seed-4"]  # prod's five seeds, from cdk.json
    assert plan["then"].startswith("the scaling nodes the cluster lists when the run starts (up to 12)")
    assert plan["schedule"] == {"expression": "cron(0 3 ? * THU *)", "enabled": True}
    assert plan["steps_per_node"][3] == "deactivate the node with intent Restart and wait until it is Disabled"
    assert "cluster health" in plan["would_read"] and plan["dry_run"] is True
    assert plan["state_machine"].endswith(":stateMachine:telemetry-prod-sf-patch")

    assert cli.main(["cluster", "patch", "--env", "prod", "--dry-run"]) == 0  # as docs/day-2.md's table types it
    text = capsys.readouterr().out
    assert "nodes, one at a time: seed-0, seed-1, seed-2, seed-3, seed-4, then the scaling nodes" in text
    assert "maintenance window: cron(0 3 ? * THU *) UTC, enabled" in text
    assert text.endswith("dry run: nothing was read from AWS, nothing was changed\n")

    assert cli.main(["cluster", "patch", "--env", "dev", "--dry-run", "--node", "seed-2"]) == 0
    text = capsys.readouterr().out
    assert "nodes, one at a time: seed-2\n" in text and "disabled" in text


def test_a_live_patch_run_starts_the_patch_state_machine_with_the_node(moto_session, monkeypatch, capsys):
    import telemetry.commands.cluster.patch as patch_cluster

    sfn = moto_session.client("stepfunctions")
    arn = sfn.create_state_machine(name="telemetry-dev-sf-patch", definition='{"StartAt":"P","States":{"P":{"Type":"Pass","End":true}}}',
                                   roleArn="arn:aws:iam::123456789012:role/patch")["stateMachineArn"]  # fmt: skip
    monkeypatch.setattr(patch_cluster, "state_machine_arn", lambda config, name: arn)  # moto's one account

    assert cli.main(["cluster", "patch", "--env", "dev", "--node", "scale-i-0123456789abcdef0", "--format", "json"],
                    session_factory=lambda region: moto_session) == 0  # fmt: skip

    started = json.loads(capsys.readouterr().out)
    described = sfn.describe_execution(executionArn=started["execution_arn"])
    assert json.loads(described["input"]) == {"node": "scale-i-0123456789abcdef0"}
