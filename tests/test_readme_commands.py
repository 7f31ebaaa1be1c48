"""Every `telemetry` command the README and the manual (docs/*.md) show in full (an environment
named, no placeholder to fill in), run as typed by someone with this checkout and no AWS
credentials: each ends as the page says, done (an offline command or a dry run, exit 0), or with
one line naming what it needs (credentials, exit 2), never a traceback (issues 34 and 47). Each is
the installed command (.venv/bin/telemetry, as make synth leaves it) run by a shell, as typed; so
are the make targets that end here."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.telemetry.runtime_cabs import write_cab

# `telemetry ...` or `.venv/bin/telemetry ...`: inline code (which may wrap onto the next line), or
# a code block's line (up to a comment), the block's fence indented too (a list item's block).
INLINE = re.compile(r"`\s*(?:\.venv/bin/)?telemetry ([a-z][^`|]*)`")
BLOCK_LINE = re.compile(r"^\s*(?:\.venv/bin/)?telemetry ([a-z][^#\n]*)", re.M)
INDENTED = re.compile(r"^\s+\.venv/bin/telemetry ([a-z][^#\n]*)", re.M)  # a list item's indented command
PLACEHOLDER = re.compile(r"[A-Z]{1,}(?![a-z])|<|\[|\\\|")  # ENV, ARN, N, <when>, [--rate N], a\|b
# Files a command reads that the operator has on their machine before typing it, made in the
# test's home for the run: --package, the runtime package downloaded from the release notes.
INPUTS = {"--package": write_cab}


CODE_BLOCK = re.compile(r"^[ \t]*```[a-z]*\n(.*?)^[ \t]*```", re.M | re.S)


def pages() -> list[Path]:
    """Where commands are shown: the README and every page of the manual."""
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def readme_commands() -> list[list[str]]:
    text = "\n".join(page.read_text() for page in pages())
    blocks = "\n".join(CODE_BLOCK.findall(text))
    prose = CODE_BLOCK.sub("", text)
    found = []
    spans = [*INLINE.finditer(prose), *INDENTED.finditer(prose), *BLOCK_LINE.finditer(blocks)]
    for text in [span.group(1) for span in spans]:
        text = " ".join(text.split()).rstrip(".,;:)")
        if "--env " not in text or PLACEHOLDER.search(text):
            continue
        argv = shlex.split(text)
        if argv not in found:
            found.append(argv)
    return found


COMMANDS = readme_commands()


def test_the_readme_shows_the_commands_of_every_journey():
    shown = {tuple(argv[:2]) if argv[0] in ("cluster", "devices") else (argv[0],) for argv in COMMANDS}
    assert shown >= {("preflight",), ("deploy",), ("capacity",), ("cost",), ("topics",), ("simulate",),
                     ("cluster", "status"), ("cluster", "scale"), ("cluster", "drain"), ("cluster", "patch"),
                     ("cluster", "refresh"), ("cluster", "upgrade"), ("devices", "provision"), ("devices", "replay")}


VENV_BIN = Path(sys.executable).parent  # where make synth installs telemetry, beside Node 24


def as_typed(line: str, home: Path, cwd: Path = REPO) -> subprocess.CompletedProcess:
    """`line` run by a shell, as a user with this checkout types it: the installed command first on
    PATH, a home of its own (so `~` is not this machine's), and no AWS credentials anywhere."""
    home.mkdir(parents=True, exist_ok=True)
    # Nor this run's make (a typed `make` is not a sub-make of `make test`: MAKELEVEL, MAKEFLAGS).
    env = {name: value for name, value in os.environ.items()
           if not name.startswith(("AWS_", "MAKE", "MFLAGS")) and name not in ("HOME", "PATH")}  # fmt: skip
    empty = home / ".aws-empty"
    empty.write_text("")
    env.update(HOME=str(home), PATH=f"{VENV_BIN}{os.pathsep}/usr/local/bin:/usr/bin:/bin",
               AWS_CONFIG_FILE=str(empty), AWS_SHARED_CREDENTIALS_FILE=str(empty),
               AWS_EC2_METADATA_DISABLED="true")  # no instance metadata to ask either
    return subprocess.run(["bash", "-c", line], cwd=cwd, env=env, capture_output=True, text=True, check=False,
                          timeout=300)


@pytest.mark.parametrize("argv", COMMANDS, ids=[" ".join(argv) for argv in COMMANDS])
def test_each_readme_command_runs_as_typed_or_names_what_it_needs_in_one_line(argv, tmp_path):
    home = tmp_path / "home"
    for flag, value in zip(argv, argv[1:]):
        if flag in INPUTS and value.startswith("~/"):
            INPUTS[flag](home / value[2:])
    inputs = set(home.rglob("*"))
    result = as_typed(shlex.join(["telemetry", *argv]).replace("'~/", "~/'"), home)
    out, err, code = result.stdout, result.stderr, result.returncode
    assert "Traceback" not in out + err
    if "--dry-run" in argv or argv[0] in ("capacity", "cost"):
        assert code == 0, err
        assert out.strip()
    elif "--plan" in argv:  # the fleet plan, offline: 1 when it breaks a quota, as its own contract says
        assert code in (0, 1) and out.strip(), err
    else:
        # Everything else reads or changes the account: one line naming what it needs, credentials,
        # or (preflight and deploy, first) the account and addresses cdk.json ships with edited.
        assert code == 2, (out, err)
        (line,) = err.strip().splitlines()
        assert line.startswith("telemetry") and ": error: " in line, line
        assert "credentials" in line or "still holds shipped placeholders" in line, line
        made = sorted(str(p.relative_to(home)) for p in set(home.rglob("*")) - inputs if p.name != ".aws-empty")
        assert not made, made  # nothing made before the run knew it could not go on


def test_the_readme_completion_set_up_runs_as_typed_and_bash_completes_from_it(tmp_path):
    """The README's shell completion lines, run as typed in a home of their own, leave a bash
    script that completes the command's groups (and the zsh one in its folder)."""
    readme = (REPO / "README.md").read_text()
    section = readme[readme.index("**Shell completion**"):]
    (block,) = re.findall(r"^```[a-z]*\n(.*?)^```", section, re.M | re.S)[:1]
    home = tmp_path / "home"
    for line in block.splitlines():
        result = as_typed(line, home)
        assert result.returncode == 0 and not result.stderr, (line, result.stderr)
    script = home / ".local/share/bash-completion/completions/telemetry"
    assert (home / ".zfunc/_telemetry").read_text().startswith("#compdef telemetry")
    probe = as_typed(f"source {script}; COMP_WORDS=(telemetry devices ''); COMP_CWORD=2; _shtab_telemetry; "
                     'echo "${COMPREPLY[@]}"', home)
    assert probe.stdout.split() == ["provision", "delete", "export", "replay"], probe.stderr


MAKE_INLINE = re.compile(r"`make ([a-z][a-z-]*(?: [A-Z]+=[a-z]+)?)")
MAKE_LINE = re.compile(r"^[ \t]*make ([a-z][a-z-]*(?: [A-Z]+=[a-z]+)?)", re.M)  # a code block's line


def readme_make_targets() -> list[list[str]]:
    text = "\n".join(page.read_text() for page in pages())
    blocks = "\n".join(CODE_BLOCK.findall(text))
    found = []
    for match in [*MAKE_INLINE.finditer(text), *MAKE_LINE.finditer(blocks)]:
        argv = match.group(1).split()
        if argv not in found:
            found.append(argv)
    return found


def test_every_make_target_the_readme_shows_is_one_the_makefile_has_and_expands_as_typed():
    """Each `make ...` of the README and the manual, expanded by make itself (-n: what it would run, nothing run):
    the target exists with the variables shown; what the whole ones do is run by CI (synth, test)
    or by their own tests (demo, lint through test_compliance, cost through test_telemetry_cost)."""
    import subprocess

    targets = readme_make_targets()
    assert {argv[0] for argv in targets} >= {"synth", "test", "demo", "lint", "diff", "deploy", "destroy", "cost", "bench"}
    for argv in targets:
        shown = subprocess.run(["make", "-n", *argv], cwd=REPO, capture_output=True, text=True, check=False)
        assert shown.returncode == 0, (argv, shown.stderr)
        assert shown.stdout.strip(), argv


# The make targets that end in a moment, run as typed; CI runs make lint (which is make synth and
# cfn-lint) and make test; demo, the benchmarks and flink-test are run by their own tests.
ENDS_HERE = ("help", "cost")
# The ones that would call AWS stop first, on the shipped placeholders (stacks/placeholders.py).
REFUSED = ("bootstrap", "diff", "deploy", "destroy")


def test_the_make_targets_that_end_here_end_as_the_readme_says(tmp_path):
    shown = [argv for argv in readme_make_targets() if argv[0] in ENDS_HERE + REFUSED]
    assert {argv[0] for argv in shown} >= {"help", "cost", *REFUSED}
    for argv in shown:
        result = as_typed(shlex.join(["make", *argv]), tmp_path / "home")
        assert "Traceback" not in result.stdout + result.stderr
        if argv[0] in REFUSED:
            # make's own trailer follows the one line: "make: *** [Makefile:N: deploy] Error 2"
            assert result.returncode == 2, (argv, result.stderr)
            line, trailer = result.stderr.strip().splitlines()
            assert line.startswith("error: cdk.json still holds shipped placeholders: environments."), line
            assert trailer.startswith("make: ***"), trailer
        else:
            assert result.returncode == 0, (argv, result.stderr)
            assert result.stdout.strip(), argv


def test_make_synth_of_prod_stops_on_the_download_the_readme_says_to_pin_first(tmp_path):
    """The README's set-up: `make synth ENV=prod` synthesizes prod "once its downloads are pinned"; until then
    one line names the key and how to pin it, before anything is synthesized."""
    assert ["synth", "ENV=prod"] in readme_make_targets()
    result = as_typed("make synth ENV=prod", tmp_path / "home")
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    first = result.stderr.strip().splitlines()[0]
    assert first.startswith("error: service_fabric.standalone_package_sha256 is not pinned for environment 'prod'"), first
