"""Every `telemetry` command the README shows in full (an environment named, no placeholder to fill
in), run as typed by someone with this checkout and no AWS credentials: each ends as the README
says, done (an offline command or a dry run, exit 0), or with one line naming what it needs
(credentials, exit 2), never a traceback (issue 34). The installed command itself is run as typed
by test_telemetry_cli.py; here the commands run in-process, to keep the suite fast."""

from __future__ import annotations

import re
import shlex

import pytest

from scripts.telemetry import cli
from tests.conftest import REPO

# `telemetry ...` or `.venv/bin/telemetry ...`: inline code (which may wrap onto the next line), or
# a code block's line (up to a comment).
INLINE = re.compile(r"`\s*(?:\.venv/bin/)?telemetry ([a-z][^`|]*)`")
BLOCK_LINE = re.compile(r"^\s*(?:\.venv/bin/)?telemetry ([a-z][^#\n]*)", re.M)
INDENTED = re.compile(r"^\s+\.venv/bin/telemetry ([a-z][^#\n]*)", re.M)  # a list item's indented command
PLACEHOLDER = re.compile(r"[A-Z]{1,}(?![a-z])|<|\[|\\\|")  # ENV, ARN, N, <when>, [--rate N], a\|b


def readme_commands() -> list[list[str]]:
    readme = (REPO / "README.md").read_text()
    block = re.compile(r"^```[a-z]*\n(.*?)^```", re.M | re.S)
    blocks = "\n".join(block.findall(readme))
    prose = block.sub("", readme)
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


@pytest.fixture
def no_credentials(monkeypatch, tmp_path):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_DEFAULT_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    empty = tmp_path / "empty"
    empty.write_text("")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(empty))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(empty))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # no instance metadata to ask either


@pytest.mark.parametrize("argv", COMMANDS, ids=[" ".join(argv) for argv in COMMANDS])
def test_each_readme_command_runs_as_typed_or_names_what_it_needs_in_one_line(argv, no_credentials, capsys, tmp_path):
    argv = [str(tmp_path / "typed" / arg[2:]) if arg.startswith("~/") else arg for arg in argv]  # not this home
    code = cli.main(argv)
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    if "--dry-run" in argv or argv[0] in ("capacity", "cost"):
        assert code == 0, err
        assert out.strip()
    elif "--plan" in argv:  # the fleet plan, offline: 1 when it breaks a quota, as its own contract says
        assert code in (0, 1) and out.strip(), err
    else:
        # Everything else reads or changes the account: without credentials, one line saying so.
        assert code == 2, (out, err)
        (line,) = err.strip().splitlines()
        assert line.startswith("telemetry") and ": error: " in line and "credentials" in line, line
        assert not (tmp_path / "typed").exists()  # nothing made before the run knew it could not go on


MAKE_INLINE = re.compile(r"`make ([a-z][a-z-]*(?: [A-Z]+=[a-z]+)?)")
MAKE_LINE = re.compile(r"^make ([a-z][a-z-]*(?: [A-Z]+=[a-z]+)?)", re.M)  # a code block's line


def readme_make_targets() -> list[list[str]]:
    readme = (REPO / "README.md").read_text()
    blocks = "\n".join(re.findall(r"^```[a-z]*\n(.*?)^```", readme, re.M | re.S))
    found = []
    for match in [*MAKE_INLINE.finditer(readme), *MAKE_LINE.finditer(blocks)]:
        argv = match.group(1).split()
        if argv not in found:
            found.append(argv)
    return found


def test_every_make_target_the_readme_shows_is_one_the_makefile_has_and_expands_as_typed():
    """Each `make ...` of the README, expanded by make itself (-n: what it would run, nothing run):
    the target exists with the variables shown; what the whole ones do is run by CI (synth, test)
    or by their own tests (demo, lint through test_compliance, cost through test_telemetry_cost)."""
    import subprocess

    targets = readme_make_targets()
    assert {argv[0] for argv in targets} >= {"synth", "test", "demo", "lint", "diff", "deploy", "destroy", "cost", "bench"}
    for argv in targets:
        shown = subprocess.run(["make", "-n", *argv], cwd=REPO, capture_output=True, text=True, check=False)
        assert shown.returncode == 0, (argv, shown.stderr)
        assert shown.stdout.strip(), argv
