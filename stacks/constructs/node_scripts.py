"""Renders the PowerShell the Service Fabric nodes run: user data from `userdata/*.ps1` and the
Run Command documents from `stacks/documents/` (create-cluster, add-node).

Scripts mark each value as a quoted placeholder, `'{{ name }}'`; the renderer replaces the whole
quoted placeholder with a PowerShell single-quoted literal of the value, so a value can never
become code. Rendering fails on a placeholder without a value, a value without a placeholder, or
anything left that still looks like a placeholder.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent.parent
USERDATA = REPO / "userdata"
DOCUMENTS = REPO / "stacks" / "documents"
CREATE_CLUSTER_DOCUMENT = DOCUMENTS / "create_cluster.yaml"
ADD_NODE_DOCUMENT = DOCUMENTS / "add_node.yaml"
CLUSTER_NODES_DOCUMENT = DOCUMENTS / "cluster_nodes.yaml"
STOP_HOST_SCRIPT = REPO / "lambdas" / "node_lifecycle" / "stop_fabric_host.ps1"

PLACEHOLDER = re.compile(r"'\{\{\s*([A-Za-z][A-Za-z0-9_]*)\s*\}\}'")
LOOKS_LIKE_PLACEHOLDER = re.compile(r"\{\{.*?\}\}")
# EC2 refuses user data over 16 KB (before base64); the <powershell> wrapper takes a little.
USER_DATA_LIMIT_BYTES = 16 * 1024 - 64


def powershell_literal(value: str) -> str:
    if any(c in value for c in "\r\n\0"):
        raise ValueError(f"value {value!r} spans lines; user data values are single-line")
    return "'" + value.replace("'", "''") + "'"


def placeholders(script: str) -> set[str]:
    return set(PLACEHOLDER.findall(script))


def render_script(script: str, values: Mapping[str, str], *, name: str = "script") -> str:
    wanted = placeholders(script)
    unknown = sorted(set(values) - wanted)
    if unknown:
        raise ValueError(f"{name} has no placeholders {unknown}")
    missing = sorted(wanted - set(values))
    if missing:
        raise ValueError(f"{name}: no value given for {missing}")
    rendered = PLACEHOLDER.sub(lambda match: powershell_literal(values[match.group(1)]), script)
    leftover = LOOKS_LIKE_PLACEHOLDER.search(rendered)
    if leftover:
        raise ValueError(f"{name}: '{leftover.group(0)}' is not a quoted placeholder and was left unrendered")
    return rendered


# Whole-line comments: the repository's script keeps them (the sources cited there); the user data
# leaves them out to stay within EC2's 16 KB. The node scripts hold no here-strings, where a '#'
# line would be text (test_userdata checks both).
COMMENT_LINE = re.compile(r"^[ \t]*#(?!requires).*\n", re.MULTILINE)


def render_user_data(file_name: str, values: Mapping[str, str]) -> str:
    script = (USERDATA / file_name).read_text(encoding="utf-8")
    if "@'" in script or '@"' in script:
        raise ValueError(f"{file_name} holds a here-string; its comment lines could not be told from text")
    rendered = render_script(COMMENT_LINE.sub("", script), values, name=file_name)
    size = len(rendered.encode("utf-8"))
    if size > USER_DATA_LIMIT_BYTES:
        raise ValueError(f"{file_name} renders to {size} bytes; EC2 user data is limited to 16 KB")
    return rendered


def render_command_document(path: Path, defaults: Mapping[str, str]) -> dict:
    """A Run Command document with the stack's values as parameter defaults."""
    document = yaml.safe_load(path.read_text(encoding="utf-8"))
    parameters = document["parameters"]
    unknown = sorted(set(defaults) - set(parameters))
    if unknown:
        raise ValueError(f"{path.name} has no parameters {unknown}")
    for name, value in defaults.items():
        parameters[name]["default"] = value
    unrendered = sorted(name for name, spec in parameters.items() if spec.get("default") == "rendered")
    if unrendered:
        raise ValueError(f"{path.name}: no value given for {unrendered}")
    return document


def render_create_cluster_document(defaults: Mapping[str, str]) -> dict:
    return render_command_document(CREATE_CLUSTER_DOCUMENT, defaults)


def render_cluster_nodes_document(defaults: Mapping[str, str]) -> dict:
    return render_command_document(CLUSTER_NODES_DOCUMENT, defaults)


def render_stop_host_document() -> dict:
    """The scale-in's stop-host document: lambdas/node_lifecycle/stop_fabric_host.ps1 embedded, one
    parameter (its timeout, digits only). Run Command runs only what it holds, where
    AWS-RunPowerShellScript would run any script the sender gives (issue 33)."""
    return {
        "schemaVersion": "2.2",
        "description": "Stops and disables FabricHostSvc on a Service Fabric node being removed; runs nothing else.",
        "parameters": {"executionTimeout": {"type": "String", "default": "600", "allowedPattern": "^[1-9][0-9]{0,4}$",
                                            "description": "Seconds the script may run."}},
        "mainSteps": [{"action": "aws:runPowerShellScript", "name": "stopFabricHost", "inputs": {
            "timeoutSeconds": "{{ executionTimeout }}",
            "runCommand": STOP_HOST_SCRIPT.read_text(encoding="utf-8").splitlines()}}],
    }


def render_add_node_document(defaults: Mapping[str, str]) -> dict:
    return render_command_document(ADD_NODE_DOCUMENT, defaults)
