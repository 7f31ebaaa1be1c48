"""Node PowerShell: every userdata/*.ps1 and the create-cluster and add-node documents render and
parse cleanly, and so do the scripts those documents generate for their scheduled tasks.

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

from stacks.config import load_environment
from stacks.constructs.node_scripts import (
    USERDATA,
    placeholders,
    powershell_literal,
    render_add_node_document,
    render_create_cluster_document,
    render_script,
    render_user_data,
)
from stacks.naming import runtime_package_path
from tests.conftest import ENVIRONMENTS, cdk_context

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
        assert f"$NodeType = '{'PrimaryNodeType' if seed else 'ScalingNodeType'}'" in script
        assert f"$ClusterName = 'telemetry-{env}-sf'" in script


def test_node_preparation_covers_every_step_the_cluster_needs(synthesized):
    script = next(iter(user_data_scripts(synthesized, "prod").values()))
    assert "$NodePorts = '19000-19003,19080-19081,20000-30000,49152-65534'" in script
    assert "$ApplicationPorts = '443,8883'" in script
    assert "$CertificateSecret = 'telemetry-prod/service-fabric/cluster-certificate'" in script
    for step in (
        "initialize data volume", "enable Remote Registry and Windows Firewall",
        "open firewall ports", "import cluster certificate", "mount shared storage",
        "download Service Fabric standalone package", "download Service Fabric runtime", "install CloudWatch agent",
    ):
        assert f"Invoke-Step '{step}" in script
    assert "Import-PfxCertificate" in script and "NFS-Client" in script
    assert "'C:\\ServiceFabric\\prepare-node.status.json'" in script
    assert "exit 1" in script  # the failure signal EC2Launch records


def test_windows_update_never_installs_or_restarts_a_node_by_itself(synthesized):
    """Notify before download, as the Patch Orchestration Application sets every node
    (microsoft/Service-Fabric-POA: WindowsAutoUpdateUtility.SetAUOptions writes NoAutoUpdate 0 and
    AUOptions 2 under the AU policy key): only the patch run, one node at a time, installs."""
    for env in ENVIRONMENTS:
        for script in user_data_scripts(synthesized, env).values():
            body = step_body(script, "leave Windows Update to the patch run")
            assert "'HKLM:\\SOFTWARE\\Policies\\Microsoft\\Windows\\WindowsUpdate\\AU'" in body
            assert "Set-ItemProperty -Path $au -Name NoAutoUpdate -Value 0 -Type DWord" in body
            assert "Set-ItemProperty -Path $au -Name AUOptions -Value 2 -Type DWord" in body
            assert "if (-not (Test-Path $au)) { New-Item -Path $au -Force | Out-Null }" in body  # a key there keeps its values


def step_body(script: str, step: str) -> str:
    """The text of one Invoke-Step's script block (up to the next step)."""
    start = script.index(f"Invoke-Step '{step}'")
    following = script.find("Invoke-Step '", start + 1)
    return script[start : following if following > 0 else len(script)]


def test_the_data_volume_is_the_ebs_disk_and_takes_d_even_when_d_is_taken(synthesized):
    script = next(iter(user_data_scripts(synthesized, "prod").values()))
    body = step_body(script, "initialize data volume")
    # Instance store disks are raw at first boot too: only the EBS data volume is formatted.
    assert "-match 'Elastic Block Store|AWS PV'" in body
    assert "raw EBS disks; expected the one data volume" in body
    # Another volume holding D: is moved to a free letter before the data volume takes D:.
    assert body.index("DriveLetter = 'D:'") < body.index("New-Partition -DriveLetter D")
    assert "Set-CimInstance -InputObject $taken -Property @{ DriveLetter = $free }" in body
    assert "FileSystemLabel -ne 'ServiceFabric'" in body  # D: is checked to be ours, not any D:


def test_a_pfx_with_its_chain_yields_one_cluster_certificate_and_a_trusted_chain(synthesized):
    script = next(iter(user_data_scripts(synthesized, "prod").values()))
    body = step_body(script, "import cluster certificate")
    assert "$imported = @(Import-PfxCertificate" in body  # several certificates are a list
    assert "$keyed = @($imported | Where-Object HasPrivateKey)" in body
    assert "if ($keyed.Count -ne 1) { throw" in body
    assert "$store = if ($issuer.Subject -eq $issuer.Issuer) { 'Root' } else { 'CA' }" in body
    assert "if ($cert.Subject -eq $cert.Issuer)" in body  # a self-signed cluster certificate too
    # The key ACL and the thumbprint use the one certificate, never the whole import.
    assert "GetRSAPrivateKey($cert)" in body and "-Value $cert.Thumbprint" in body


def test_shared_storage_is_reached_by_its_unc_path_for_every_account(synthesized):
    """A drive letter belongs to one logon session; the UNC path of the FSx root volume, published
    machine-wide, works for the services Service Fabric runs too."""
    script = next(iter(user_data_scripts(synthesized, "prod").values()))
    assert "$SharedStoragePath = '\\fsx'" in script
    assert '$share = "\\\\$FileSystemDns$SharedStoragePath"' in script
    assert "SetEnvironmentVariable('SF_SHARED_STORAGE', $share, 'Machine')" in script
    assert "mount.exe" not in script  # no per-session drive mapping


def commands_named(node, name: str) -> list:
    return [c for c in descendants(node, "command") if c.children[0].text.decode() == name]


def named_arguments(command) -> dict[str, str | None]:
    """A command's -Name value pairs (a switch maps to None)."""
    (elements,) = [n for n in command.children if n.type == "command_elements"]
    items = [n for n in elements.named_children if n.type not in ("command_argument_sep", "redirection")]
    found: dict[str, str | None] = {}
    for item, following in zip(items, [*items[1:], None]):
        if item.type == "command_parameter":
            value = following is not None and following.type != "command_parameter"
            found[item.text.decode()] = following.text.decode() if value else None
    return found


def inside(node, kind: str) -> bool:
    while node.parent is not None:
        node = node.parent
        if node.type == kind:
            return True
    return False


def prod_config():
    return load_environment(cdk_context()["environments"], "prod")


def test_nodes_download_the_pinned_runtime_and_refuse_a_cab_without_a_valid_signature(synthesized):
    config = prod_config()
    settings = config.service_fabric
    script = next(iter(user_data_scripts(synthesized, "prod").values()))
    assert f"$RuntimeVersion = '{settings.runtime_version}'" in script
    assert f"$RuntimeCabUrl = '{settings.runtime_cab_url}'" in script
    assert f"$StandalonePackageUrl = '{settings.standalone_package_url}'" in script
    assert f"$RuntimeCab = '{runtime_package_path(config)}'" in script
    # Nothing else from Microsoft: no "latest" link, no feed.
    tree = PARSER.parse(script.encode()).root_node
    downloads = {named_arguments(c)["-Uri"] for c in commands_named(tree, "Invoke-WebRequest")}
    assert downloads == {"$StandalonePackageUrl", "$RuntimeCabUrl", "$url"}  # $url: the CloudWatch agent
    assert "go.microsoft.com" not in script

    body = step_body(script, "download Service Fabric runtime")
    assert "-Optional" not in body.splitlines()[0]  # a node without the runtime fails preparation
    tree = PARSER.parse(body.encode()).root_node
    (download,) = commands_named(tree, "Invoke-WebRequest")
    assert named_arguments(download) == {"-Uri": "$RuntimeCabUrl", "-OutFile": "$RuntimeCab", "-UseBasicParsing": None}
    (verify,) = commands_named(tree, "Assert-Signer")
    assert named_arguments(verify) == {"-Path": "$RuntimeCab", "-Organization": "'Microsoft Corporation'",
                                       "-Roots": "$MicrosoftRoots"}
    # Checked on every run, a CAB left by an earlier run too, and after the download.
    assert not inside(verify, "if_statement") and verify.start_byte > download.start_byte
    (handler,) = descendants(tree, "catch_clause")
    (removed,) = commands_named(handler, "Remove-Item")  # a later run downloads it again
    assert "$RuntimeCab" in removed.text.decode()
    assert "throw" in handler.text.decode()


def synthesized_document(synthesized, part: str) -> dict:
    """The stack's document that installs the runtime (the ServiceFabric stack also has the
    read-only cluster-nodes one, the NodeLifecycle stack the stop-host one)."""
    (document,) = [r for r in synthesized("prod").stacks[part]["Resources"].values() if r["Type"] == "AWS::SSM::Document"
                   and not r["Properties"]["Name"].endswith(("-sf-cluster-nodes", "-sf-stop-host"))]
    return document["Properties"]["Content"]


def runtime_package_check(script: str, cab: str) -> int:
    """Where the script refuses to go on without the CAB; that must precede the scheduled task."""
    path = re.escape(cab)
    check = re.search(rf"if \(-not \(Test-Path '{path}'\)\) {{\s+throw \"runtime package {path} is missing", script)
    assert check, "no check that the runtime package is there"
    assert check.start() < script.index("Register-ScheduledTask")
    return check.start()


def test_both_documents_install_the_cab_node_preparation_downloaded(synthesized):
    config = prod_config()
    cab = runtime_package_path(config)
    assert f"$RuntimeCab = '{cab}'" in next(iter(user_data_scripts(synthesized, "prod").values()))
    create = synthesized_document(synthesized, "service_fabric")
    add = synthesized_document(synthesized, "node_lifecycle")
    assert create["parameters"]["runtimePackage"]["default"] == add["parameters"]["runtimePackage"]["default"] == cab

    cluster_config = base64.b64encode(b'{"name": "telemetry-prod-sf", "nodes": []}').decode()
    create_script = document_script(create, {"clusterConfig": cluster_config})
    runtime_package_check(create_script, cab)
    task = task_script(create_script, "$createScript")
    assert re.search(rf"^\s*\$runtimePackage = '{re.escape(cab)}'$", task, re.MULTILINE)
    tree = PARSER.parse(task.encode())
    for name in ("TestConfiguration.ps1", "CreateServiceFabricCluster.ps1"):
        (call,) = calls_of(tree, name)
        assert named_arguments(call)["-FabricRuntimePackagePath"] == "$runtimePackage", name

    add_script = document_script(add, ADD_NODE_VALUES)
    runtime_package_check(add_script, cab)
    entries = splatted_add_node_parameters(task_script(add_script, "$addScript", ADD_NODE_EXPANDED))
    assert entries["FabricRuntimePackagePath"] == f"'{cab}'"


def test_add_node_refuses_a_cluster_that_runs_another_runtime_version(synthesized):
    version = prod_config().service_fabric.runtime_version
    add = synthesized_document(synthesized, "node_lifecycle")
    assert add["parameters"]["runtimeVersion"]["default"] == version
    script = document_script(add, ADD_NODE_VALUES)
    tree = PARSER.parse(script.encode())
    # The cluster's version is read the way AddNode.ps1 reads it, over the node's client connection.
    (read,) = [c for c in descendants(tree.root_node, "command") if c.children[0].text.decode() == "powershell.exe"]
    reader = read.text.decode()
    assert "(Get-ServiceFabricClusterUpgrade).TargetCodeVersion" in reader
    assert "Connect-ServiceFabricCluster @connection" in reader and "FindType = 'FindByThumbprint'" in reader
    assert reader.endswith("-args $components, '10.10.4.10:19000', $thumbprint -OutputFormat Text")
    statement = statement_of(read)
    assert previous_statement(statement).text.decode() == "$global:LASTEXITCODE = 0"
    assert next_statement(statement).text.decode() == "$readExit = $LASTEXITCODE"
    (unreadable,) = [i for i in descendants(tree.root_node, "if_statement") if "$readExit -ne 0" in i.children[2].text.decode()]
    assert "throw \"could not read the cluster's code version at 10.10.4.10:19000" in unreadable.text.decode()

    (compared,) = [i for i in descendants(tree.root_node, "if_statement") if "$clusterVersion" in i.children[2].text.decode()]
    assert compared.children[2].text.decode() == f"$clusterVersion -ne '{version}'"
    (thrown,) = descendants(compared, "flow_control_statement")
    assert thrown.text.decode() == (
        f'throw "cluster runs $clusterVersion, this node was prepared with {version}; '
        'upgrade the cluster or change runtime_version"'
    )
    # Checked before AddNode.ps1 is ever started, after the CAB is known to be there.
    assert runtime_package_check(script, runtime_package_path(prod_config())) < compared.start_byte
    assert compared.start_byte < script.index("Register-ScheduledTask")


def document_script(document: dict, parameters: dict) -> str:
    """The document's one PowerShell step, parameters substituted as SSM does (as text), each
    value checked against its allowedPattern first."""
    (step,) = document["mainSteps"]
    assert step["action"] == "aws:runPowerShellScript"
    script = "\n".join(step["inputs"]["runCommand"])
    values = {name: spec.get("default") for name, spec in document["parameters"].items()} | parameters
    for name, value in values.items():
        assert re.fullmatch(document["parameters"][name]["allowedPattern"], value), name
        script = script.replace("{{ " + name + " }}", value)
    return script


RUNTIME_PACKAGE = "C:\\ServiceFabric\\Package\\MicrosoftServiceFabric.11.4.268.1.cab"


def create_cluster_script(parameters: dict) -> str:
    document = render_create_cluster_document(
        {"statusFile": "C:\\ServiceFabric\\prepare-node.status.json", "deploymentSecret": "telemetry-dev/sf",
         "deploymentAccount": "sfdeploy", "region": "eu-west-1", "runtimePackage": RUNTIME_PACKAGE}
    )
    return document_script(document, parameters)


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


# -- The scripts the documents' scheduled tasks run -----------------------------------------
# Both documents write a script to disk and run it as the deployment account (a scheduled task);
# it calls Microsoft's standalone-package scripts, which report failure by exit code, not by
# throwing. These tests take that generated script out of its here-string, as PowerShell would
# evaluate it, and look at its syntax tree.

ADD_NODE_VALUES = {
    "nodeName": "scale-i-0abc", "nodeType": "ScalingNodeType", "ipAddress": "10.10.4.20",
    "faultDomain": "fd:/eu-west-1/eu-west-1a", "upgradeDomain": "UD1",
    "clientConnectionEndpoint": "10.10.4.10:19000",
}  # fmt: skip
THUMBPRINT = "0123456789ABCDEF0123456789ABCDEF01234567"
# What the add-node script sets the variables its task script's here-string expands to.
ADD_NODE_EXPANDED = {
    "$root": "C:\\ServiceFabric",
    "$logFile": "C:\\ServiceFabric\\Logs\\add-node.log",
    "$resultFile": "C:\\ServiceFabric\\add-node.result",
    "$thumbprint": THUMBPRINT,
}
# TestConfiguration.ps1's verdict as Microsoft's docs show it (a formatted object, after its
# Write-Host lines).
TEST_CONFIGURATION_OUTPUT = """Trace folder already exists. Traces will be written to existing trace folder: C:\\temp
Running Best Practices Analyzer...
Best Practices Analyzer completed successfully.

LocalAdminPrivilege        : True
IsJsonValid                : True
IsCabValid                 : True
RequiredPortsOpen          : True
RemoteRegistryAvailable    : True
FirewallAvailable          : True
RpcCheckPassed             : True
NoConflictingInstallations : True
FabricInstallable          : True
Passed                     : True
"""


def add_node_script() -> str:
    document = render_add_node_document(
        {"statusFile": "C:\\ServiceFabric\\s.json", "deploymentAccount": "sfdeploy",
         "runtimePackage": RUNTIME_PACKAGE, "runtimeVersion": "11.4.268.1"}
    )
    return document_script(document, ADD_NODE_VALUES)


def descendants(node, kind: str):
    if node.type == kind:
        yield node
    for child in node.children:
        yield from descendants(child, kind)


def unescape(text: str) -> str:
    """A literal part of an expandable string with its backtick escapes resolved."""
    escapes = {"$": "$", "`": "`", '"': '"'}

    def resolve(match: re.Match) -> str:
        assert match.group(1) in escapes, f"unexpected escape `{match.group(1)}"
        return escapes[match.group(1)]

    return re.sub(r"`(.)", resolve, text)


def task_script(script: str, variable: str, expanded: dict[str, str] | None = None) -> str:
    """The script in the here-string assigned to `variable`, as PowerShell evaluates it: a
    verbatim here-string as written; an expandable one with its variables replaced by `expanded`
    (expanding anything else, a forgotten backtick, fails) and its escapes resolved."""
    source = script.encode()
    for assignment in descendants(PARSER.parse(source).root_node, "assignment_expression"):
        if assignment.children[0].text.decode() != variable:
            continue
        value = assignment.children[-1]
        verbatim = next(descendants(value, "verbatim_here_string_characters"), None)
        if verbatim is not None:
            return verbatim.text.decode()[3:-3]  # @'\n ... \n'@
        here = next(descendants(value, "expandable_here_string_literal"))
        parts, position = [], here.start_byte + 3  # after @"\n
        for child in here.children:
            name = child.text.decode()
            assert child.type == "variable" and name in (expanded or {}), (
                f"the {variable} here-string expands {name!r} when the script writes it, not when the task runs"
            )
            parts += [unescape(source[position : child.start_byte].decode()), expanded[name]]
            position = child.end_byte
        parts.append(unescape(source[position : here.end_byte - 3].decode()))  # before \n"@
        return "".join(parts)
    raise AssertionError(f"no {variable} = here-string")


def statement_of(node):
    while node.parent is not None and node.parent.type != "statement_list":
        node = node.parent
    return node


def next_statement(node):
    node = node.next_named_sibling
    while node is not None and node.type == "comment":
        node = node.next_named_sibling
    return node


def previous_statement(node):
    node = node.prev_named_sibling
    while node is not None and node.type == "comment":
        node = node.prev_named_sibling
    return node


def calls_of(tree, script_name: str) -> list:
    """The command nodes running script_name (`& .\\X.ps1 ...`, `& (Join-Path ... 'X.ps1') ...`)."""
    return [
        command
        for command in descendants(tree.root_node, "command")
        if any(script_name in n.text.decode() for n in command.children if n.type == "command_name_expr")
    ]


def exit_status_checks(task: str, script_name: str) -> list:
    """For each call of script_name: the statement right after it, which must read $? (any later
    statement would see its own status) and $LASTEXITCODE, the call having reset
    $global:LASTEXITCODE to 0 just before (a stale code must not decide; a plain $LASTEXITCODE = 0
    would make a script-scope copy that hides the real one)."""
    tree = PARSER.parse(task.encode())
    assert not tree.root_node.has_error
    calls = calls_of(tree, script_name)
    assert calls, f"the task script never runs {script_name}"
    checks = []
    for call in calls:
        statement = statement_of(call)
        before, after = previous_statement(statement), next_statement(statement)
        assert before is not None and before.text.decode() == "$global:LASTEXITCODE = 0", (
            f"{script_name}: LASTEXITCODE is not reset before {statement.text.decode()!r}"
        )
        assert after is not None, f"nothing checks how {script_name} exited"
        read = {v.text.decode() for v in descendants(after, "variable")}
        assert {"$?", "$LASTEXITCODE"} <= read, (
            f"{script_name}: the statement after the call, {after.text.decode()!r}, does not check $? and $LASTEXITCODE"
        )
        checks.append(after)
    return checks


def assert_failure_is_reported(task: str, check, script_name: str) -> None:
    """A failed exit throws "<script> exited <code>" before 'succeeded' is written; the catch
    writes "failed: <message>" to the result file."""
    assert check.type == "if_statement" and re.search(r"-ne\s+0", check.text.decode())
    (thrown,) = descendants(check, "flow_control_statement")
    assert thrown.text.decode() == f'throw "{script_name} exited $LASTEXITCODE"'
    assert "-Value 'succeeded'" in next_statement(check).text.decode()
    # The script's own failure handler (per-seed steps after a success may catch their own errors).
    (catch,) = [c for c in descendants(PARSER.parse(task.encode()).root_node, "catch_clause") if "failed:" in c.text.decode()]
    assert '-Value "failed: $($_.Exception.Message)"' in catch.text.decode()


def test_add_node_task_script_is_valid_powershell_with_only_the_intended_expansions():
    script = add_node_script()
    assert syntax_errors(script) == []
    task = task_script(script, "$addScript", ADD_NODE_EXPANDED)
    assert syntax_errors(task) == []
    assert "{{" not in task
    # embedded as a literal, so checked to be a thumbprint first
    assert "if ($thumbprint -notmatch '^[0-9A-F]{40}$')" in script


def splatted_add_node_parameters(task: str) -> dict[str, str]:
    """The table AddNode.ps1 is called with: name -> value as written."""
    tree = PARSER.parse(task.encode())
    (call,) = calls_of(tree, "AddNode.ps1")
    (elements,) = [n for n in call.children if n.type == "command_elements"]
    arguments = [n for n in elements.named_children if n.type != "command_argument_sep"]
    assert [a.text.decode() for a in arguments] == ["@parameters"], "AddNode.ps1 must get its parameters splatted"
    (table,) = [
        a.children[-1] for a in descendants(tree.root_node, "assignment_expression")
        if a.children[0].text.decode() == "$parameters"
    ]  # fmt: skip
    return {e.children[0].text.decode(): e.children[-1].text.decode() for e in descendants(table, "hash_entry")}


def test_add_node_task_script_splats_named_parameters_into_add_node():
    entries = splatted_add_node_parameters(task_script(add_node_script(), "$addScript", ADD_NODE_EXPANDED))
    assert entries == {
        "NodeName": "'scale-i-0abc'", "NodeType": "'ScalingNodeType'", "NodeIPAddressorFQDN": "'10.10.4.20'",
        "ExistingClientConnectionEndpoint": "'10.10.4.10:19000'", "UpgradeDomain": "'UD1'",
        "FaultDomain": "'fd:/eu-west-1/eu-west-1a'", "FabricRuntimePackagePath": f"'{RUNTIME_PACKAGE}'",
        "X509Credential": "$true", "ServerCertThumbprint": f"'{THUMBPRINT}'", "StoreLocation": "'LocalMachine'",
        "StoreName": "'My'", "FindValueThumbprint": f"'{THUMBPRINT}'", "AcceptEULA": "$true",
    }  # fmt: skip


def test_add_node_task_script_fails_when_add_node_exits_non_zero():
    task = task_script(add_node_script(), "$addScript", ADD_NODE_EXPANDED)
    (check,) = exit_status_checks(task, "AddNode.ps1")
    assert_failure_is_reported(task, check, "AddNode.ps1")


def create_cluster_task() -> str:
    config = base64.b64encode(json.dumps({"name": "telemetry-dev-sf", "nodes": []}).encode()).decode()
    task = task_script(create_cluster_script({"clusterConfig": config}), "$createScript")
    assert syntax_errors(task) == []
    return task


def test_create_cluster_task_script_fails_when_create_cluster_exits_non_zero():
    task = create_cluster_task()
    (check,) = exit_status_checks(task, "CreateServiceFabricCluster.ps1")
    assert_failure_is_reported(task, check, "CreateServiceFabricCluster.ps1")


def test_create_cluster_task_script_judges_test_configuration_by_exit_status_and_printed_verdict():
    task = create_cluster_task()
    assert not re.search(r"\$\w+\.Passed", task)  # what it returns may be text: no property to read
    tree = PARSER.parse(task.encode())
    (call,) = calls_of(tree, "TestConfiguration.ps1")
    captured = re.fullmatch(r"(\$\w+) = & .*", statement_of(call).text.decode())
    assert captured, "TestConfiguration.ps1's output must be kept, and not piped: $? would be the last command's"
    assert {r.text.decode() for r in descendants(call, "redirection")} & {"6>&1", "*>&1"}, "and Write-Host's"
    (check,) = exit_status_checks(task, "TestConfiguration.ps1")
    (failed,) = {v.text.decode() for v in descendants(check, "variable")} - {"$?", "$LASTEXITCODE"}
    verdict = next(n for n in descendants(tree.root_node, "if_statement") if "-match" in n.text.decode())
    condition = verdict.children[2].text.decode()  # if ( condition ) { ... }
    match = re.fullmatch(rf"{re.escape(failed)} -or (\$\w+) -match '([^']+)'", condition)
    assert match, f"not judged by exit status and printed verdict: {condition}"
    report, pattern = match.groups()
    assert re.search(rf"^\s*{re.escape(report)} = {re.escape(captured.group(1))} \| Out-String$", task, re.MULTILINE)
    assert re.search(rf"^\s*Write-Output {re.escape(report)}$", task, re.MULTILINE)  # into the transcript
    assert re.fullmatch(r'\{\s*throw "TestConfiguration\.ps1 [^"]*"\s*\}', verdict.children[-1].text.decode())

    def passes(check: str, value: str) -> bool:  # -match is case-insensitive; the pattern means the same in re
        output, changed = re.subn(rf"^({check}\s*): True$", rf"\g<1>: {value}", TEST_CONFIGURATION_OUTPUT, flags=re.M)
        assert changed == 1
        return re.search(pattern, output, re.IGNORECASE) is None

    assert passes("Passed", "True")
    assert not passes("Passed", "False")
    assert not passes("RpcCheckPassed", "False")


def test_cluster_nodes_document_parses_once_substituted_and_prints_the_lines_the_workstation_reads(synthesized):
    """The read-only document telemetry/shared/cluster_nodes.py sends to the seeds: valid PowerShell once SSM
    substitutes the seeds' endpoints (its allowedPattern admits exactly ADDRESS:PORT,...), connecting
    the way add_node.yaml does, and printing the PREPARED=/NODE=/UNREACHABLE=/NOCLUSTER= lines
    cluster_nodes.parse and cluster_nodes.preparation read."""
    import re

    from telemetry.shared.cluster_nodes import parse, preparation

    # As the stack deploys it: the status file is the one the seeds' user data writes (see
    # test_node_preparation_covers_every_step_the_cluster_needs).
    (document,) = [r["Properties"]["Content"] for r in synthesized("prod").stacks["service_fabric"]["Resources"].values()
                   if r["Type"] == "AWS::SSM::Document" and r["Properties"]["Name"] == "telemetry-prod-sf-cluster-nodes"]
    status_file = document["parameters"]["statusFile"]["default"]
    assert status_file == "C:\\ServiceFabric\\prepare-node.status.json"
    assert re.fullmatch(document["parameters"]["statusFile"]["allowedPattern"], status_file)
    pattern = document["parameters"]["clientConnectionEndpoints"]["allowedPattern"]
    seeds = json.loads(synthesized("prod").stacks["service_fabric"]["Outputs"]["Seeds"]["Value"])
    endpoints = ",".join(f"{seed['address']}:19000" for seed in seeds)
    assert re.fullmatch(pattern, endpoints) and re.fullmatch(pattern, f"{seeds[0]['address']}:19000")
    for hostile in (f"{endpoints}'; Remove-Item C:\\ -Recurse; '", "localhost:19000", "10.0.1.10", f"{endpoints},"):
        assert not re.fullmatch(pattern, hostile)
    (step,) = document["mainSteps"]
    assert step["name"] == "clusterNodes"  # the stream the workstation reads: <command>/<instance>/clusterNodes/...
    script = (step["inputs"]["runCommand"][0].replace("{{ clientConnectionEndpoints }}", endpoints)
              .replace("{{ statusFile }}", status_file))
    assert "{{" not in script
    assert syntax_errors(script) == []
    # prepare_node.ps1's outcome first, from the file it writes ($StatusFile: state, step, error); only
    # a node whose preparation succeeded goes on to ask the cluster.
    assert f"Get-Content -Raw -Path '{status_file}' | ConvertFrom-Json" in script
    assert script.index("'PREPARED=succeeded|'") < script.index("Connect-ServiceFabricCluster")
    assert "Write-Output ('PREPARED=' + $state + '|' + ($detail -replace '\\s+', ' '))" in script
    assert "$detail = if ($state -eq 'failed') { \"$($prepared.step): $($prepared.error)\" }" in script
    assert preparation("PREPARED=succeeded|\r\nNODE=seed-0|Up|True\r\n") == ("succeeded", "")
    assert preparation("PREPARED=failed|download Service Fabric runtime: a|b\r\nNOCLUSTER=x\r\n") == (
        "failed", "download Service Fabric runtime: a|b")
    assert preparation("NOCLUSTER=x\n") == ("", "")  # a document version from before the line
    assert "Connect-ServiceFabricCluster @connection" in script and "Get-ServiceFabricNode" in script
    assert "ConnectionEndpoint = @($Endpoints -split ',')" in script  # any seed's, not only its own
    assert "Get-Service -Name 'FabricHostSvc'" in script  # installed here: UNREACHABLE, not NOCLUSTER
    assert "'NODE=' + $_.NodeName + '|' + $_.NodeStatus + '|' + $_.IsSeedNode" in script
    # What those lines read as: PowerShell renders a bool as True/False and NodeStatus by its name.
    nodes, _, _ = parse("NODE=seed-0|Up|True\r\nNODE=scale-0|Down|False\r\n")
    assert [(n.name, n.status, n.seed) for n in nodes] == [("seed-0", "Up", True), ("scale-0", "Down", False)]
    assert parse("UNREACHABLE=No cluster endpoint is reachable\r\n") == (None, True, "No cluster endpoint is reachable")
    assert parse("NOCLUSTER=not prepared\n") == (None, False, "not prepared")
