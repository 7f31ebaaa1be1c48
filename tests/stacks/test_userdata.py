"""Node PowerShell: every userdata/*.ps1 and the create-cluster document render and parse cleanly.

PowerShell itself cannot run here; tree-sitter-powershell parses the rendered scripts, and a
syntax error shows up as an ERROR or MISSING node (the first test proves the grammar catches
the mistakes these tests exist for).
"""

from __future__ import annotations

import base64
import json
import re

import pytest
import tree_sitter_powershell
from tree_sitter import Language, Parser

from stacks.constructs.node_scripts import (
    USERDATA,
    placeholders,
    powershell_literal,
    render_create_cluster_document,
    render_script,
    render_user_data,
)
from tests.conftest import ENVIRONMENTS

PARSER = Parser(Language(tree_sitter_powershell.language()))
SAMPLE_TOKEN = {"Ref": "eni-0123456789abcdef0"}


def syntax_errors(script: str) -> list[str]:
    source = script.encode("utf-8")
    found: list[str] = []

    def walk(node) -> None:
        if node.type == "ERROR" or node.is_missing:
            line = node.start_point[0] + 1
            found.append(f"line {line}: {'missing ' + node.type if node.is_missing else 'error'} near "
                         f"{source[node.start_byte:node.end_byte][:60]!r}")
        for child in node.children:
            walk(child)

    walk(PARSER.parse(source).root_node)
    return found


@pytest.mark.parametrize(
    "broken",
    [
        "if ($a -eq 1) { Write-Output 'x'\n",  # unclosed block
        "$x = 'unterminated\nWrite-Output $x\n",  # unclosed string
        "$total = (1 +\n",  # incomplete expression
        "foreach ($p in 1..3 { $p }\n",  # missing parenthesis
        "try { Get-Item C:\\ } catch {\n",  # unclosed catch
    ],
)
def test_grammar_reports_the_syntax_errors_these_tests_look_for(broken):
    assert syntax_errors(broken)


def test_grammar_accepts_the_constructs_the_scripts_use():
    script = (
        "function Invoke-Step {\n    param([string]$Name, [scriptblock]$Action, [switch]$Optional)\n"
        "    try { & $Action } catch { if (-not $Optional) { throw } }\n}\n"
        "Invoke-Step 'x' -Optional { Write-Output \"$($env:TEMP) ok\" }\n"
        "$h = @{ a = @(1, 2); b = [ordered]@{ c = '${aws:InstanceId}' } }\n"
        "$text = @'\nliteral $notExpanded\n'@\n"
    )
    assert syntax_errors(script) == []


def sample_values(script: str) -> dict[str, str]:
    return {name: f"sample-{name}" for name in placeholders(script)}


@pytest.mark.parametrize("path", sorted(USERDATA.glob("*.ps1")), ids=lambda p: p.name)
def test_every_userdata_script_renders_and_parses(path):
    script = path.read_text(encoding="utf-8")
    assert placeholders(script), f"{path.name} has no placeholders; is it rendered at all?"
    rendered = render_user_data(path.name, sample_values(script))
    assert "{{" not in rendered and "}}" not in rendered
    assert syntax_errors(rendered) == []


def test_renderer_refuses_unknown_missing_and_unquoted_placeholders():
    with pytest.raises(ValueError, match=r"has no placeholders \['nope'\]"):
        render_script("$a = '{{ a }}'\n", {"a": "1", "nope": "2"})
    with pytest.raises(ValueError, match=r"no value given for \['b'\]"):
        render_script("$a = '{{ a }}'\n$b = '{{ b }}'\n", {"a": "1"})
    with pytest.raises(ValueError, match="is not a quoted placeholder"):
        render_script("$a = '{{ a }}'\n$b = {{ b }}\n", {"a": "1"})


def test_values_cannot_break_out_of_their_string():
    rendered = render_script("$name = '{{ name }}'\nWrite-Output $name\n", {"name": "x'; Remove-Item C:\\ -Recurse; '"})
    assert rendered.startswith("$name = 'x''; Remove-Item")
    assert syntax_errors(rendered) == []
    assert powershell_literal("it's") == "'it''s'"
    with pytest.raises(ValueError, match="spans lines"):
        powershell_literal("two\nlines")


def test_an_unrendered_script_would_fail_the_check():
    # What the parse test guards against: a script whose quoting a placeholder edit broke.
    broken = "$a = '{{ a }}\nWrite-Output $a\n"
    with pytest.raises(ValueError):
        render_script(broken, {"a": "1"})


def user_data_scripts(synthesized, env) -> dict[str, str]:
    """Each launch template's user data, tokens replaced by sample values, wrapper removed."""
    template = synthesized(env).stacks["service_fabric"]
    scripts = {}
    for logical_id, resource in template["Resources"].items():
        if resource["Type"] != "AWS::EC2::LaunchTemplate":
            continue
        user_data = resource["Properties"]["LaunchTemplateData"]["UserData"]["Fn::Base64"]
        parts = user_data["Fn::Join"][1] if isinstance(user_data, dict) else [user_data]
        text = "".join(p if isinstance(p, str) else SAMPLE_TOKEN["Ref"] for p in parts)
        match = re.fullmatch(r"<powershell>(.*)</powershell>", text, re.DOTALL)
        assert match, f"{logical_id}: user data is not wrapped for EC2Launch"
        scripts[logical_id] = match.group(1)
    return scripts


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_synthesized_user_data_parses_and_fits_the_limit(synthesized, env):
    scripts = user_data_scripts(synthesized, env)
    for logical_id, script in scripts.items():
        assert syntax_errors(script) == [], logical_id
        assert "{{" not in script
        assert len(f"<powershell>{script}</powershell>".encode()) <= 16 * 1024, logical_id
        seed = "SeedNodes" in logical_id
        assert ("$SeedInterfaceId = 'eni-" in script) is seed
        assert f"$NodeType = '{'PrimaryNodeType' if seed else 'ScalingNodeType'}'" in script
        assert f"$ClusterName = 'telemetry-{env}-sf'" in script


def test_node_preparation_covers_every_step_the_cluster_needs(synthesized):
    script = next(iter(user_data_scripts(synthesized, "prod").values()))
    assert "$NodePorts = '19000-19003,19080-19081,135,139,445,20000-30000,49152-65534'" in script
    assert "$NodeUdpPorts = '137-138'" in script
    assert "$ApplicationPorts = '443,8883'" in script
    assert "$CertificateSecret = 'telemetry-prod/service-fabric/cluster-certificate'" in script
    for step in (
        "attach seed network interface", "initialize data volume", "enable Remote Registry and Windows Firewall",
        "open firewall ports", "import cluster certificate", "create deployment account", "mount shared storage",
        "download Service Fabric standalone package", "install CloudWatch agent",
    ):
        assert f"Invoke-Step '{step}" in script
    assert "Import-PfxCertificate" in script and "NFS-Client" in script and "LinkId=730690" in script
    assert "'C:\\ServiceFabric\\prepare-node.status.json'" in script
    assert "exit 1" in script  # the failure signal EC2Launch records


def create_cluster_script(parameters: dict) -> str:
    document = render_create_cluster_document(
        {"statusFile": "C:\\ServiceFabric\\prepare-node.status.json", "certificateSecret": "telemetry-dev/sf",
         "deploymentAccount": "sfdeploy", "region": "eu-west-1"}
    )
    (step,) = document["mainSteps"]
    assert step["action"] == "aws:runPowerShellScript"
    script = "\n".join(step["inputs"]["runCommand"])
    values = {name: spec.get("default") for name, spec in document["parameters"].items()} | parameters
    for name, value in values.items():
        assert re.fullmatch(document["parameters"][name]["allowedPattern"], value), name
        script = script.replace("{{ " + name + " }}", value)
    return script


def test_create_cluster_document_parses_once_substituted():
    config = base64.b64encode(json.dumps({"name": "telemetry-dev-sf", "nodes": []}).encode()).decode()
    script = create_cluster_script({"clusterConfig": config})
    assert "{{" not in script
    assert syntax_errors(script) == []
    assert "CreateServiceFabricCluster.ps1" in script and "-AcceptEULA" in script
    assert "TestConfiguration.ps1" in script
    assert "Register-ScheduledTask" in script and "-User 'sfdeploy'" in script
    assert "$status.state -ne 'succeeded'" in script  # refuses an unprepared node


def test_create_cluster_document_refuses_unknown_or_missing_values():
    with pytest.raises(ValueError, match=r"no parameters \['nope'\]"):
        render_create_cluster_document({"nope": "x"})
    with pytest.raises(ValueError, match="no value given for"):
        render_create_cluster_document({"region": "eu-west-1"})
