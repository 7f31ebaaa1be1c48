"""Nodes that do not trust each other's applications, and downloads checked before use (#33,
second and fifth points): no shared administrator password, the deployment account disabled
after set-up, IMDS for SYSTEM only, SMB and RPC only where set-up needs them, the standalone
package's pinned hash checked before expansion, the runtime CAB signed by Microsoft, the
CloudWatch agent pinned and its signer checked. The PowerShell is read as rendered."""

from __future__ import annotations

import base64
import json
import re

import pytest

from stacks.config import (
    CLOUDWATCH_AGENT_SIGNER,
    MICROSOFT_CODE_SIGNING_ROOTS,
    ConfigError,
    load_environment,
)
from stacks.constructs.node_scripts import ADD_NODE_DOCUMENT, CREATE_CLUSTER_DOCUMENT, USERDATA, render_user_data
from tests.conftest import cdk_context
from tests.stacks.test_userdata import (
    PARSER,
    add_node_script,
    commands_named,
    create_cluster_script,
    named_arguments,
    step_body,
    syntax_errors,
    user_data_scripts,
)
from tests.test_app import assert_one_line_error, run_app

SHA = "0123456789abcdef" * 4


def scripts_by_type(synthesized, env: str = "prod") -> dict[str, str]:
    scripts = user_data_scripts(synthesized, env)
    (seed,) = [s for logical_id, s in scripts.items() if "SeedNodes" in logical_id]
    (scaling,) = [s for logical_id, s in scripts.items() if "SeedNodes" not in logical_id]
    return {"seed": seed, "scaling": scaling}


def resources(template: dict, kind: str) -> dict[str, dict]:
    return {k: r for k, r in template["Resources"].items() if r["Type"] == kind}


# -- No shared administrator password --------------------------------------------------------


def test_no_node_password_in_any_node_script_or_the_certificate_secret():
    for path in [*USERDATA.glob("*.ps1"), CREATE_CLUSTER_DOCUMENT, ADD_NODE_DOCUMENT]:
        assert "node_admin_password" not in path.read_text(encoding="utf-8"), path.name
    from telemetry.commands import preflight

    assert "node_admin_password" not in preflight.CLUSTER_SECRET_KEYS


def test_only_seeds_create_the_deployment_account_and_from_the_stacks_own_secret(synthesized):
    scripts = scripts_by_type(synthesized)
    assert "$DeploymentSecret = 'telemetry-prod/service-fabric/seed-deployment-password'" in scripts["seed"]
    assert "$DeploymentSecret = ''" in scripts["scaling"]
    body = step_body(scripts["seed"], "create deployment account")
    assert "Get-SECSecretValue -SecretId $DeploymentSecret" in body
    assert "Get-ClusterSecret" not in body  # the certificate secret holds no password


def test_a_seed_built_after_the_cluster_was_created_makes_no_deployment_account(synthesized):
    """A rebuilt seed: prepare_node.ps1 looks for the cluster-created parameter (which `telemetry
    cluster bootstrap` writes once creation succeeded) and, when it exists, disables any deployment
    account and leaves remote administration by local accounts off; only "no such parameter"
    (ParameterNotFoundException, SSM GetParameter's error for a missing name) lets it make one. The
    behaviour of Get-SSMParameter and the exception type are AWS Tools for PowerShell's; it cannot
    run here, so the rendered text is checked, parsed."""
    seed = scripts_by_type(synthesized)["seed"]
    assert syntax_errors(seed) == []
    assert "$ClusterCreatedParameter = '/telemetry-prod/service-fabric/cluster-created'" in seed
    look = step_body(seed, "look for a created cluster")
    assert "Get-SSMParameter -Name $ClusterCreatedParameter" in look
    assert "catch [Amazon.SimpleSystemsManagement.Model.ParameterNotFoundException]" in look
    retire = step_body(seed, "retire deployment account")
    assert "Disable-LocalUser -Name $DeploymentAccount" in retire and "LocalAccountTokenFilterPolicy -Value 0" in retire
    # The account is made only on the branch where no created cluster was found.
    made = seed.index("Invoke-Step 'create deployment account'")
    guard = seed.rindex("if (", 0, made)
    assert seed[guard:made].startswith("if ($DeploymentSecret -and -not $clusterCreated)")
    assert seed.index("Invoke-Step 'look for a created cluster'") < guard
    # And the seed role may read that one parameter (the scaling role need not).
    template = synthesized("prod").stacks["service_fabric"]
    readers = json.dumps({k: r for k, r in resources(template, "AWS::IAM::Policy").items() if "SeedNodeRole" in k})
    assert "parameter/telemetry-prod/service-fabric/cluster-created" in readers
    others = json.dumps({k: r for k, r in resources(template, "AWS::IAM::Policy").items() if "ScalingNodeRole" in k})
    assert "cluster-created" not in others


def test_the_deployment_password_is_generated_and_only_the_seed_role_reads_it(synthesized):
    template = synthesized("prod").stacks["service_fabric"]
    (secret_id, secret), = resources(template, "AWS::SecretsManager::Secret").items()
    assert secret["Properties"]["Name"] == "telemetry-prod/service-fabric/seed-deployment-password"
    assert secret["Properties"]["GenerateSecretString"]["PasswordLength"] >= 32
    readers = []
    for policy in resources(template, "AWS::IAM::Policy").values():
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            if {"Ref": secret_id} in (statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]):
                readers += [role["Ref"] for role in policy["Properties"]["Roles"]]
    assert len(readers) == 1 and "SeedNodeRole" in readers[0]


def test_the_passwords_own_policy_refuses_every_reader_but_the_seed_role(synthesized):
    """An administrator's allow is not enough: the secret's resource policy denies GetSecretValue to
    every principal whose aws:PrincipalArn (a role session's is its role's ARN) is not the seed role,
    and an explicit deny wins over any allow (IAM User Guide, "Policy evaluation logic")."""
    template = synthesized("prod").stacks["service_fabric"]
    (secret_id,) = resources(template, "AWS::SecretsManager::Secret")
    (policy,) = resources(template, "AWS::SecretsManager::ResourcePolicy").values()
    assert policy["Properties"]["SecretId"] == {"Ref": secret_id}
    (deny,) = policy["Properties"]["ResourcePolicy"]["Statement"]
    assert deny["Effect"] == "Deny" and deny["Principal"] == {"AWS": "*"} and deny["Resource"] == "*"
    assert deny["Action"] == "secretsmanager:GetSecretValue"
    (seed_role,) = [k for k in resources(template, "AWS::IAM::Role") if k.startswith("SeedNodeRole")]
    assert deny["Condition"] == {"StringNotEquals": {"aws:PrincipalArn": {"Fn::GetAtt": [seed_role, "Arn"]}}}


def test_cluster_creation_disables_the_account_on_every_seed_once_created():
    config = base64.b64encode(json.dumps({"name": "telemetry-dev-sf", "nodes": []}).encode()).decode()
    script = create_cluster_script({"clusterConfig": config})
    assert syntax_errors(script) == []
    assert "Get-SECSecretValue -SecretId 'telemetry-dev/sf'" in script
    created = script.index("if ($result -ne 'succeeded') { throw")
    assert script.index("Disable-LocalUser -Name 'sfdeploy'", created) > created
    assert re.search(r"LocalAccountTokenFilterPolicy -Value 0", script[created:])
    # The other seeds', from the task (as the account, while it still may): ADSI's disable flag.
    task = script[script.index("$createScript = @'"):script.index("'@", script.index("$createScript = @'"))]
    assert "[ADSI]\"WinNT://$address/sfdeploy,user\"" in task and "-bor 2" in task
    assert task.index("CreateServiceFabricCluster.ps1") < task.index("[ADSI]")


def test_add_node_uses_a_one_time_password_and_disables_the_account_whatever_happens():
    script = add_node_script()
    assert syntax_errors(script) == []
    assert "Get-SECSecretValue" not in script  # nothing stored to read
    assert "RandomNumberGenerator" in script
    tree = PARSER.parse(script.encode()).root_node
    (register,) = commands_named(tree, "Register-ScheduledTask")
    assert named_arguments(register)["-Password"] == "$password"
    (finally_block,) = [n for n in _descendants(tree, "finally_clause") if "Disable-LocalUser" in n.text.decode()]
    text = finally_block.text.decode()
    assert "Disable-LocalUser -Name 'sfdeploy'" in text
    assert "LocalAccountTokenFilterPolicy -Value 0" in text
    assert register.start_byte < finally_block.start_byte


def _descendants(node, kind):
    if node.type == kind:
        yield node
    for child in node.children:
        yield from _descendants(child, kind)


# -- IMDS for SYSTEM only --------------------------------------------------------------------


def test_every_node_blocks_the_metadata_service_for_all_but_system(synthesized):
    for kind, script in scripts_by_type(synthesized).items():
        body = step_body(script, "open firewall ports")
        tree = PARSER.parse(body.encode()).root_node
        (rule,) = [c for c in commands_named(tree, "New-NetFirewallRule") if "169.254.169.254" in c.text.decode()]
        arguments = named_arguments(rule)
        assert arguments["-Direction"] == "Outbound" and arguments["-Action"] == "Block", kind
        assert arguments["-Protocol"] == "TCP"
        assert arguments["-LocalUser"] == "'O:LSD:(D;;CC;;;SY)(A;;CC;;;WD)'"  # Everyone, exception SYSTEM


# -- SMB and RPC only where set-up needs them -----------------------------------------------


def ingress(template: dict) -> list[dict]:
    rules = [r["Properties"] for r in resources(template, "AWS::EC2::SecurityGroupIngress").values()]
    for group_id, group in resources(template, "AWS::EC2::SecurityGroup").items():
        rules += [{**r, "GroupId": {"Fn::GetAtt": [group_id, "GroupId"]}} for r in group["Properties"].get("SecurityGroupIngress", [])]
    return rules


def group_id(template: dict, description_start: str) -> str:
    (found,) = [k for k, g in resources(template, "AWS::EC2::SecurityGroup").items()
                if g["Properties"]["GroupDescription"].startswith(description_start)]
    return found


def windows_admin_rules(template: dict) -> list[tuple[str, str, int, int]]:
    """(target group, source group, from, to) of every rule that admits 135-139 or 445."""
    found = []
    for rule in ingress(template):
        low, high = rule.get("FromPort", -1), rule.get("ToPort", -1)
        if any(low <= port <= high for port in (135, 137, 138, 139, 445)) or rule.get("IpProtocol") == "-1":
            source = rule.get("SourceSecurityGroupId", {}).get("Fn::GetAtt", ["?"])[0]
            found.append((rule["GroupId"]["Fn::GetAtt"][0], source, low, high))
    return found


def test_smb_and_rpc_reach_seeds_from_seeds_and_scaling_nodes_from_nodes_only(synthesized):
    template = synthesized("prod").stacks["service_fabric"]
    nodes = group_id(template, "Service Fabric nodes of")
    seeds = group_id(template, "Seed nodes of")
    scaling = group_id(template, "Scaling nodes of")
    assert sorted(windows_admin_rules(template)) == sorted([
        (seeds, seeds, 135, 135), (seeds, seeds, 445, 445), (scaling, nodes, 445, 445),
    ])  # fmt: skip
    # Each node type carries its own set-up group.
    (seed_template,) = [t for k, t in resources(template, "AWS::EC2::LaunchTemplate").items() if "SeedNodes" in k]
    (scaling_template,) = [t for k, t in resources(template, "AWS::EC2::LaunchTemplate").items() if "SeedNodes" not in k]

    def groups(launch_template):
        data = launch_template["Properties"]["LaunchTemplateData"]
        ids = data.get("SecurityGroupIds") or [i for n in data.get("NetworkInterfaces", []) for i in n["Groups"]]
        return {g["Fn::GetAtt"][0] for g in ids if isinstance(g, dict) and "Fn::GetAtt" in g}

    assert seeds in groups(seed_template) and scaling not in groups(seed_template)
    assert scaling in groups(scaling_template) and seeds not in groups(scaling_template)


def test_windows_firewall_admits_set_up_as_the_security_groups_do(synthesized):
    config = load_environment(cdk_context()["environments"], "prod")
    scripts = scripts_by_type(synthesized)
    seed_addresses = json.loads(next(
        o["Value"] for o in synthesized("prod").stacks["service_fabric"]["Outputs"].values()
        if isinstance(o.get("Value"), str) and o["Value"].startswith("[")
    ))  # fmt: skip
    addresses = ",".join(s["address"] for s in seed_addresses)
    assert "$SetupPorts = '135,445'" in scripts["seed"] and f"$SetupSources = '{addresses}'" in scripts["seed"]
    assert "$SetupPorts = '445'" in scripts["scaling"] and f"$SetupSources = '{config.network.cidr}'" in scripts["scaling"]
    for script in scripts.values():
        assert "UDP" not in step_body(script, "open firewall ports").replace("Remove-NetFirewallRule -Name 'ServiceFabric-Nodes-UDP'", "")


# -- Downloads checked -----------------------------------------------------------------------


def test_the_standalone_package_hash_is_checked_before_it_is_expanded(synthesized):
    script = scripts_by_type(synthesized, "dev")["seed"]
    body = step_body(script, "download Service Fabric standalone package")
    assert body.index("Get-FileHash -Algorithm SHA256 -Path $zip") < body.index("Expand-Archive")
    mismatch = re.search(r"elseif \(\$actual -ne \$StandalonePackageSha256\) \{(.*?)\}", body, re.DOTALL)
    assert mismatch and mismatch.end() < body.index("Expand-Archive")
    assert 'throw "standalone package SHA-256 mismatch: expected $StandalonePackageSha256, actual $actual"' in mismatch.group(1)
    assert "$StandalonePackageSha256 = ''" in script  # dev ships unpinned: the node logs the hash it got


def test_a_pinned_hash_is_rendered_into_the_user_data():
    settings = load_environment(
        {"x": {**cdk_context()["environments"]["dev"], "service_fabric": {
            **cdk_context()["environments"]["dev"]["service_fabric"], "standalone_package_sha256": SHA}}}, "x"
    ).service_fabric  # fmt: skip
    assert settings.standalone_package_sha256 == SHA.upper()  # Get-FileHash prints upper case
    script = (USERDATA / "prepare_node.ps1").read_text(encoding="utf-8")
    values = {name: "x" for name in re.findall(r"'\{\{ (\w+) \}\}'", script)} | {"standalone_package_sha256": SHA.upper()}
    assert f"$StandalonePackageSha256 = '{SHA.upper()}'" in render_user_data("prepare_node.ps1", values)


@pytest.mark.parametrize("digest", ["abc", "g" * 64, SHA + "0"])
def test_a_malformed_hash_is_refused_by_key(digest):
    environments = cdk_context()["environments"]
    environments["dev"]["service_fabric"]["standalone_package_sha256"] = digest
    with pytest.raises(ConfigError, match="standalone_package_sha256"):
        load_environment(environments, "dev")


def test_production_refuses_to_synthesize_with_an_unpinned_package(tmp_path):
    context = cdk_context()
    assert context["environments"]["prod"]["service_fabric"]["standalone_package_sha256"] is None
    result = run_app({**context, "env": "prod"}, tmp_path)
    assert_one_line_error(result, "service_fabric.standalone_package_sha256 is not pinned for environment 'prod'")
    assert "Get-FileHash -Algorithm SHA256" in result.stderr


def test_the_runtime_cab_must_be_signed_by_microsoft_under_microsoft_roots(synthesized):
    script = scripts_by_type(synthesized)["seed"]
    assert f"$MicrosoftRoots = '{','.join(MICROSOFT_CODE_SIGNING_ROOTS)}'" in script
    function = script[script.index("function Assert-Signer"):script.index("try {", script.index("function Assert-Signer"))]
    assert "$signature.Status -ne 'Valid'" in function
    assert '$signer.Subject -notmatch "(^|, )O=$([regex]::Escape($Organization))(,|$)"' in function
    assert "$root.Thumbprint -notin ($Roots -split ',')" in function
    # A chain that does not build is said as such, not mistaken for a foreign root.
    assert "if (-not $chain.Build($signer))" in function and "X509RevocationMode]::NoCheck" in function
    assert function.count("throw ") == 4


def test_the_cloudwatch_agent_is_pinned_and_its_signer_checked_before_install(synthesized):
    config = load_environment(cdk_context()["environments"], "prod")
    script = scripts_by_type(synthesized)["scaling"]
    assert f"$CloudWatchAgentVersion = '{config.service_fabric.cloudwatch_agent_version}'" in script
    assert f"$CloudWatchAgentSigner = '{CLOUDWATCH_AGENT_SIGNER}'" in script
    body = step_body(script, "install CloudWatch agent")
    assert "/latest/" not in script
    assert "/windows/amd64/$CloudWatchAgentVersion/amazon-cloudwatch-agent.msi" in body
    assert body.index("Assert-Signer -Path $msi -Organization $CloudWatchAgentSigner") < body.index("msiexec.exe")


def test_the_cloudwatch_agent_version_is_never_latest():
    environments = cdk_context()["environments"]
    environments["dev"]["service_fabric"]["cloudwatch_agent_version"] = "latest"
    with pytest.raises(ConfigError, match="cloudwatch_agent_version"):
        load_environment(environments, "dev")
