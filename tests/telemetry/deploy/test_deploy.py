"""`telemetry deploy` executed against moto (CloudFormation, SSM, EC2, STS, Secrets Manager, MSK,
Managed Flink's reads) and botocore's Stubber where moto lacks the operation (Service Quotas,
StartApplication). The CDK CLI is the one stand-in: a runner that records `cdk deploy` and creates
the stack in moto's CloudFormation, or fails as the CLI would.

What is checked is what an operator meets: the order of the steps, each step's "already done"
taken from the account, and a run after a failure going on from where the last one stopped.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
from botocore.stub import Stubber

from stacks.config import load_environment, read_environments
from telemetry.deploy import command as deploy
from telemetry.deploy.steps import Bootstrap, Flink, Scale, Stacks, Topics, journey, run_journey
from telemetry.shared import cloud_assembly
from telemetry.shared.errors import OperationFailed
from tests.conftest import MOTO_IMAGE
from tests.telemetry.commands.test_preflight import ACCOUNT, QUOTAS, Session

CONFIG = load_environment(read_environments(), "dev")
# The stand-in stack holds one resource that does nothing (moto warns that it only records it).
EMPTY = {"Resources": {"Nothing": {"Type": "AWS::CloudFormation::WaitConditionHandle"}}}
pytestmark = pytest.mark.filterwarnings("ignore:Tried to parse AWS")


@pytest.fixture(scope="module")
def stacks(synthesized):
    """The dev stacks in deployment order, from the synthesized cloud assembly."""
    return deploy.in_dependency_order(deploy.read_cloud_assembly(synthesized("dev").outdir, CONFIG.stack_prefix))


class CdkCli:
    """The CDK CLI as the deploy step runs it (cdk_cli.command: the checkout's node, the CLI's
    entry point, then the verb). `synth --output DIR` writes a cloud assembly of the environment's
    stacks with their dependencies, each template holding one inert resource and the real stack's
    string outputs (moto cannot create the real resources), plus `extra_outputs`, and with
    `parameters` the real stack's parameters (moto's CloudFormation resolves the SSM ones); the
    manifest gives each stack the `tags` and termination protection (`protected`) set here.
    `deploy STACK --app DIR` creates or updates the stack in moto with the assembly's template,
    tags and protection, as deploy-stack.ts does (Tags on the create or the change set;
    EnableTerminationProtection on a create, UpdateTerminationProtection before an update:
    updateTerminationProtection); `diff` prints nothing and exits 0, or with --fail 1 for the
    stacks in `diff_differs` (cdk-toolkit.ts diff: diffFails). Fails for the stacks in `failing`."""

    def __init__(self, session, stacks, *, parameters: bool = False) -> None:
        self.session, self.stacks, self.parameters = session, list(stacks), parameters
        self.extra_outputs: dict[str, dict] = {}
        self.tags: dict[str, dict[str, str]] = {}
        self.protected: set[str] = set()
        self.diff_differs: set[str] = set()
        self.calls: list[list[str]] = []
        self.deployed: list[str] = []
        self.failing: set[str] = set()

    def template(self, name: str) -> dict:
        (stack,) = [s for s in self.stacks if s.name == name]
        outputs = {key: {"Value": value["Value"]} for key, value in stack.template.get("Outputs", {}).items()
                   if isinstance(value["Value"], str)}
        parameters = {"Parameters": stack.template["Parameters"]} if self.parameters else {}
        return {**EMPTY, **parameters, "Outputs": {**outputs, **self.extra_outputs.get(name, {})}}

    def __call__(self, command: Sequence[str]) -> int:
        from telemetry.shared import cdk_cli

        assert list(command[:2]) == cdk_cli.command()[:2]  # never `.venv/bin/cdk`, which needs a node on PATH
        verb, rest = command[2], list(command[3:])
        self.calls.append([verb, *rest])
        if verb == "synth":
            assert rest[0] == "-c" and rest[1].startswith("env=") and "--quiet" in rest
            write_assembly(Path(rest[rest.index("--output") + 1]), {s.name: (self.template(s.name), s.depends_on)
                                                                     for s in self.stacks},
                           {s.name: {"tags": self.tags.get(s.name, {}), "terminationProtection": s.name in self.protected}
                            for s in self.stacks})
            return 0
        if verb == "diff":
            return 1 if "--fail" in rest and rest[0] in self.diff_differs else 0
        assert verb == "deploy" and "--exclusively" in rest and rest[rest.index("--require-approval") + 1] == "never"
        name, app = rest[0], Path(rest[rest.index("--app") + 1])
        if name in self.failing:
            return 1
        properties = json.loads((app / "manifest.json").read_text())["artifacts"][name]["properties"]
        self.put(name, (app / f"{name}.template.json").read_text(), tags=properties.get("tags", {}),
                 protected=properties.get("terminationProtection", False))
        return 0

    def put(self, name: str, body: str | None = None, *, tags: dict[str, str] | None = None,
            protected: bool = False) -> None:
        """The stack created, or updated, in moto."""
        cloudformation = self.session.client("cloudformation")
        body = body or json.dumps(self.template(name))
        cfn_tags = [{"Key": key, "Value": value} for key, value in (tags or {}).items()]
        try:
            deployed = cloudformation.describe_stacks(StackName=name)["Stacks"][0]
        except cloudformation.exceptions.ClientError as error:
            if "does not exist" not in str(error):
                raise
            cloudformation.create_stack(StackName=name, TemplateBody=body, Tags=cfn_tags,
                                        EnableTerminationProtection=protected)
        else:
            if bool(deployed.get("EnableTerminationProtection")) != protected:
                # UpdateTerminationProtection, which moto does not implement: its stack, set alike.
                from moto.cloudformation.models import cloudformation_backends

                backend = cloudformation_backends[deployed["StackId"].split(":")[4]][self.session.region_name]
                backend.stacks[deployed["StackId"]].enable_termination_protection = protected
            cloudformation.update_stack(StackName=name, TemplateBody=body, Tags=cfn_tags)
        self.deployed.append(name)


def write_assembly(outdir: Path, stacks: dict[str, tuple[dict, Sequence[str]]],
                   properties: dict[str, dict] | None = None) -> None:
    """A cloud assembly as `cdk synth` writes it: manifest.json naming each stack's template file
    and its dependencies, with any further artifact `properties` of each (tags, terminationProtection)."""
    outdir.mkdir(parents=True, exist_ok=True)
    artifacts = {}
    for name, (template, depends_on) in stacks.items():
        (outdir / f"{name}.template.json").write_text(json.dumps(template))
        artifacts[name] = {"type": "aws:cloudformation:stack",
                           "properties": {"templateFile": f"{name}.template.json", **(properties or {}).get(name, {})},
                           "dependencies": list(depends_on)}
    (outdir / "manifest.json").write_text(json.dumps({"version": "48.0.0", "artifacts": artifacts}))


@pytest.fixture
def account(monkeypatch, moto_session):
    """A bootstrapped account with both certificate secrets and room in every quota."""
    monkeypatch.setenv("MOTO_ACCOUNT_ID", ACCOUNT)
    moto_session.client("ssm").put_parameter(Name="/cdk-bootstrap/hnb659fds/version", Value="27", Type="String")
    keys = {"certificate": "PEM", "private_key": "PEM", "pfx": "cGZ4", "pfx_password": "pw"}
    secrets = moto_session.client("secretsmanager")
    secrets.create_secret(Name=CONFIG.service_fabric.cluster_certificate_secret,
                          SecretString=json.dumps(keys))
    secrets.create_secret(Name=CONFIG.service_fabric.admin_certificate_secret, SecretString=json.dumps(keys))
    return moto_session


def quotas_for(session, runs: int) -> Session:
    """Service Quotas answered through Stubber for `runs` preflights (moto does not list quotas)."""
    stubbed = Session(session, QUOTAS)
    stubbed.stubber.deactivate()
    stubbed.stubber = Stubber(stubbed.quotas)
    for _ in range(runs):
        for service in ("ec2", "kafka"):
            stubbed.stubber.add_response("list_service_quotas", {"Quotas": [
                {"ServiceCode": service, "QuotaName": name, "QuotaCode": f"L-0000000{i}", "Value": value}
                for i, (name, value) in enumerate(QUOTAS[service].items())
            ]}, {"ServiceCode": service})
    stubbed.stubber.activate()
    return stubbed


def test_a_failed_stack_stops_the_run_and_the_next_run_goes_on_from_it(account, stacks, tmp_path):
    session = quotas_for(account, runs=2)
    cdk = CdkCli(account, stacks)
    third = stacks[2].name
    cdk.failing.add(third)
    lines: list[str] = []

    with pytest.raises(OperationFailed, match=f"deploy: cdk deploy {third} exited 1"):
        run_journey(journey(CONFIG, session, stacks, runner=cdk, say=lines.append, cdk_out=tmp_path), lines.append)
    assert cdk.deployed == [s.name for s in stacks[:2]]

    cdk.failing.clear()
    lines.clear()
    with pytest.raises(OperationFailed, match="topics: the topics are reconciled as the topic administrator role, "
                       "which requires MFA: run telemetry deploy --env dev --mfa-serial ARN"):
        run_journey(journey(CONFIG, session, stacks, runner=cdk, say=lines.append, cdk_out=tmp_path), lines.append)

    # The second run deployed only what the first left, in dependency order, then stopped at the
    # step that needs the operator's MFA.
    assert cdk.deployed == [s.name for s in stacks]
    assert lines[0] == "[1/7] preflight: running" and lines[1] == "[1/7] preflight: done"
    assert f"  {stacks[0].name}: CREATE_COMPLETE, as synthesized" in lines and f"  {third}: creating" in lines
    assert lines[-1] == "[3/7] topics: running"
    assert [call[0] for call in cdk.calls].count("synth") == 2  # once a run, before anything is compared
    session.stubber.assert_no_pending_responses()


def test_every_stack_deployed_as_synthesized_is_the_deploy_step_done(account, stacks, tmp_path):
    cdk = CdkCli(account, stacks)
    step = Stacks(CONFIG, account, cdk, print, cdk_out=tmp_path)
    assert step.done() == ""
    for stack in stacks:
        cdk.put(stack.name)
    assert step.done() == f"all {len(stacks)} stacks deployed as synthesized"


def test_a_changed_stack_is_updated_and_production_shows_it_and_asks(account, stacks, tmp_path):
    """`telemetry deploy` carries a change: the stack whose deployed template differs from the one
    synthesized now is deployed again; in production after the CLI's diff and the operator's yes."""
    prod = load_environment(read_environments(), "prod")
    cdk = CdkCli(account, [replace(s, name=s.name.replace("-dev-", "-prod-")) for s in stacks])
    for stack in cdk.stacks:
        cdk.put(stack.name)
    changed = cdk.stacks[3].name
    cdk.extra_outputs[changed] = {"Added": {"Value": "a new output"}}
    asked: list[str] = []

    def run(answer: bool, yes: bool = False) -> list[str]:
        lines: list[str] = []
        step = Stacks(prod, account, cdk, lines.append, cdk_out=tmp_path / str(len(asked)), yes=yes,
                      confirm=lambda prompt: asked.append(prompt) or answer)
        assert step.done() == ""
        try:
            step.run()
        finally:
            lines.append(f"done: {step.done()}")
        return lines

    cdk.deployed.clear()
    with pytest.raises(OperationFailed, match=f"the change to {changed} was not applied"):
        run(answer=False)
    assert cdk.deployed == [] and asked == [f"apply this change to {changed} in prod? [y/N] "]
    assert ["diff", changed, "--app", str(tmp_path / "0"), "--exclusively"] in cdk.calls
    lines = run(answer=True)
    assert cdk.deployed == [changed]
    assert f"  {changed}: UPDATE_COMPLETE, updating (its template changed)" not in lines  # moto: CREATE_COMPLETE
    assert f"  {changed}: CREATE_COMPLETE, updating (its template changed)" in lines
    assert lines[-1] == f"done: all {len(stacks)} stacks deployed as synthesized"
    cdk.extra_outputs[changed] = {"Added": {"Value": "changed again"}}
    run(answer=False, yes=True)  # --yes: not asked
    assert len(asked) == 2 and cdk.deployed == [changed, changed]


WINDOWS_IMAGE = "/aws/service/ami-windows-latest/Windows_Server-2022-English-Full-Base"


def publish_public_parameters(session) -> None:
    """The SSM parameters dev's templates read that exist before any deployment: AWS's public
    Windows image parameter (moto holds Amazon Linux's, not Windows'; PutParameter refuses the
    reserved /aws/ names, as AWS does, so it goes into moto's store directly) and the MSK stack's
    bootstrap brokers (here before the sink that reads them)."""
    from moto.ssm.models import Parameter, ssm_backends

    store = ssm_backends[ACCOUNT][CONFIG.region]._parameters
    store[WINDOWS_IMAGE].append(Parameter(account_id=ACCOUNT, name=WINDOWS_IMAGE, value="ami-0windows2022a",
                                          parameter_type="String", description=None, allowed_pattern=None, keyid=None,
                                          last_modified_date=0.0, version=1, data_type="aws:ec2:image"))
    session.client("ssm").put_parameter(Name=f"/{CONFIG.stack_prefix.lower()}/msk/bootstrap-brokers-iam",
                                        Value="b-1.example:9098", Type="String")


@pytest.fixture
def deployed(account, stacks, tmp_path):
    """Every dev stack deployed with the real templates' parameters, then a second run's step."""
    publish_public_parameters(account)
    cdk = CdkCli(account, stacks, parameters=True)
    lines: list[str] = []
    Stacks(CONFIG, account, cdk, lines.append, cdk_out=tmp_path / "first").run()
    assert cdk.deployed == [s.name for s in stacks]
    cdk.deployed.clear()
    return cdk, Stacks(CONFIG, account, cdk, lines.append, cdk_out=tmp_path / "again"), lines


def test_a_stack_reading_ssm_parameters_is_deployed_again_on_every_run_as_the_cli_would(deployed, stacks):
    """The CLI never skips a stack with an AWS::SSM::Parameter::Value<...> parameter (canSkipDeploy:
    ParameterValues.hasChanges is "ssm"): CloudFormation alone knows what it resolves to now, such
    as the ServiceFabric stack's Windows image, and a new one moves the scaling group's launch
    template. The CDK's own BootstrapVersion ([cdk:skip]) does not count."""
    cdk, step, lines = deployed
    reading = [s.name for s in stacks if s.ssm_parameters()]
    assert f"{CONFIG.stack_prefix}-ServiceFabric" in reading and len(reading) < len(stacks)
    assert step.done() == ""
    lines.clear()
    step.run()
    assert cdk.deployed == reading
    fabric = f"{CONFIG.stack_prefix}-ServiceFabric"
    assert f"  {fabric}: CREATE_COMPLETE, updating (it reads 1 SSM parameter(s), which may resolve anew " \
           f"({WINDOWS_IMAGE}))" in lines
    assert f"  {CONFIG.stack_prefix}-Network: CREATE_COMPLETE, as synthesized" in lines


@pytest.mark.parametrize("change", ["tags", "termination protection"])
def test_a_stack_whose_tags_or_termination_protection_changed_is_deployed(deployed, stacks, change):
    """The CLI deploys a stack whose tags or termination protection differ from the cloud
    assembly's (canSkipDeploy: compareTags; terminationProtection); a stack unchanged but for that
    is deployed, and once deployed the step is done with it."""
    cdk, step, lines = deployed
    network = f"{CONFIG.stack_prefix}-Network"
    if change == "tags":
        cdk.tags[network] = {"CostCentre": "telemetry"}
    else:
        cdk.protected.add(network)
    step.run()
    assert network in cdk.deployed
    assert f"  {network}: CREATE_COMPLETE, updating (its {change} changed)" in lines
    deployed_stack = step.cloudformation.describe_stacks(StackName=network)["Stacks"][0]
    if change == "tags":
        assert deployed_stack["Tags"] == [{"Key": "CostCentre", "Value": "telemetry"}]
    else:
        assert deployed_stack["EnableTerminationProtection"] is True
    cdk.deployed.clear()
    lines.clear()
    step.run()
    assert network not in cdk.deployed and f"  {network}: UPDATE_COMPLETE, as synthesized" in lines


def test_a_stack_whose_tags_and_protection_match_and_that_reads_no_ssm_parameter_is_left(deployed, stacks, tmp_path):
    """Tags and protection as the assembly says, parameters only the [cdk:skip] BootstrapVersion:
    the CLI would skip it, and so does the step."""
    cdk, _, _ = deployed
    lines: list[str] = []
    network = f"{CONFIG.stack_prefix}-Network"
    cdk.tags[network] = {"CostCentre": "telemetry"}
    cdk.protected.add(network)
    Stacks(CONFIG, cdk.session, cdk, lines.append, cdk_out=tmp_path / "tagged").run()
    cdk.deployed.clear()
    Stacks(CONFIG, cdk.session, cdk, lines.append, cdk_out=tmp_path / "again2").run()
    assert cdk.deployed == [s.name for s in stacks if s.ssm_parameters()]
    assert network not in cdk.deployed


def test_production_asks_for_a_stack_read_from_ssm_only_when_the_change_set_diff_shows_a_change(account, stacks,
                                                                                                  tmp_path):
    """A production stack whose one reason to deploy is its SSM parameters: `cdk diff --method
    change-set --fail` (CloudFormation resolves them in the change set) decides; no difference, no
    question and nothing deployed; a difference (a new Windows image) is shown and asked for."""
    prod = load_environment(read_environments(), "prod")
    publish_public_parameters(account)
    account.client("ssm").put_parameter(Name="/telemetry-prod/msk/bootstrap-brokers-iam", Value="b-1.example:9098",
                                        Type="String")
    cdk = CdkCli(account, [replace(s, name=s.name.replace("-dev-", "-prod-")) for s in stacks], parameters=True)
    for stack in cdk.stacks:
        cdk.put(stack.name)
    fabric = f"{prod.stack_prefix}-ServiceFabric"
    reading = [s.name for s in cdk.stacks if s.ssm_parameters()]
    asked: list[str] = []

    def run() -> list[str]:
        lines: list[str] = []
        cdk.deployed.clear()
        Stacks(prod, account, cdk, lines.append, cdk_out=tmp_path / str(len(cdk.calls)),
               confirm=lambda prompt: asked.append(prompt) or True).run()
        return lines

    lines = run()
    assert cdk.deployed == [] and asked == []
    assert [c[:2] for c in cdk.calls if c[0] == "diff"] == [["diff", name] for name in reading]
    assert all(c[-3:] == ["--method", "change-set", "--fail"] for c in cdk.calls if c[0] == "diff")
    assert f"  {fabric}: cdk diff shows no change (its SSM parameters resolve as deployed): left as it is" in lines
    cdk.diff_differs.add(fabric)
    run()
    assert cdk.deployed == [fabric] and asked == [f"apply this change to {fabric} in prod? [y/N] "]


class OneStackAccount:
    """CloudFormation through botocore's Stubber (every status and reason is checked against the
    cloudformation model's StackStatus enum): DescribeStacks answers the statuses queued, then
    GetTemplate the template deployed."""

    def __init__(self, session, name: str) -> None:
        self.name, self.session = name, session
        self.cloudformation = session.client("cloudformation")
        self.stubber = Stubber(self.cloudformation)
        self.stubber.activate()

    def client(self, service):
        assert service in ("cloudformation", "ec2")
        return self.cloudformation if service == "cloudformation" else self.session.client("ec2")

    def resources(self, *left: tuple[str, str, str]) -> None:
        """DescribeStackResources: (type, physical id, status) of each resource the stack holds."""
        self.stubber.add_response("describe_stack_resources", {"StackResources": [
            {"StackName": self.name, "LogicalResourceId": f"Resource{n}", "PhysicalResourceId": physical,
             "ResourceType": kind, "Timestamp": "2026-11-20T00:10:00Z", "ResourceStatus": status}
            for n, (kind, physical, status) in enumerate(left)]}, {"StackName": self.name})

    def status(self, status: str, reason: str = "", protected: bool = False, notifications: Sequence[str] = ()) -> None:
        stack = {"StackName": self.name, "StackId": f"arn:aws:cloudformation:eu-west-1:{ACCOUNT}:stack/{self.name}/1",
                 "CreationTime": "2026-11-20T00:00:00Z", "StackStatus": status, "EnableTerminationProtection": protected,
                 "NotificationARNs": list(notifications)}
        if reason:
            stack["StackStatusReason"] = reason
        self.stubber.add_response("describe_stacks", {"Stacks": [stack]}, {"StackName": self.name})

    def template(self, body: dict) -> None:
        self.stubber.add_response("get_template", {"TemplateBody": json.dumps(body)},
                                  {"StackName": self.name, "TemplateStage": "Original"})


@pytest.fixture
def one_stack(moto_session, stacks, tmp_path):
    """The network stack alone, as the deploy step meets it in each status."""
    network = replace(stacks[0], depends_on=())
    cdk = CdkCli(moto_session, [network])
    account = OneStackAccount(moto_session, network.name)
    lines: list[str] = []
    step = Stacks(CONFIG, account, cdk, lines.append, cdk_out=tmp_path, sleep=lambda s: lines.append(f"(slept {s:g} s)"))
    cdk.put = lambda name, body=None, **_: cdk.deployed.append(name)  # what the CLI does is its own business
    return step, account, cdk, lines


@pytest.mark.parametrize("status", ["REVIEW_IN_PROGRESS", "ROLLBACK_COMPLETE"])
def test_a_stack_the_cdk_cli_creates_again_is_deployed(one_stack, status):
    """REVIEW_IN_PROGRESS is "does not exist" to the CLI; ROLLBACK_COMPLETE is its "creation
    failure", which it deletes and creates again (deploy-stack.ts)."""
    step, account, cdk, lines = one_stack
    account.status(status)  # with its termination protection, read before the CLI is let delete it
    step.run()
    assert cdk.deployed == [account.name]
    assert lines[-1].startswith(f"  {account.name}: {status}, creating it")
    account.stubber.assert_no_pending_responses()


def test_a_protected_stack_whose_creation_failed_says_how_the_cli_may_delete_it(one_stack):
    """The CLI protects a production stack before creating it, then deletes a failed creation
    without unprotecting it, which CloudFormation refuses ("Protect CloudFormation stacks from
    being deleted")."""
    step, account, cdk, _ = one_stack
    account.status("ROLLBACK_COMPLETE", reason="The following resource(s) failed to create: [Cluster]", protected=True)
    with pytest.raises(OperationFailed, match="update-termination-protection --no-enable-termination-protection"):
        step.run()
    assert cdk.deployed == []


@pytest.mark.parametrize("status", ["UPDATE_ROLLBACK_COMPLETE", "IMPORT_ROLLBACK_COMPLETE"])
def test_a_stack_rolled_back_is_deployed_when_its_template_differs_and_left_when_it_matches(one_stack, status):
    """Rolled back to a template equal to the synthesized one, there is nothing to do (the CLI
    skips it as well); otherwise it is deployed."""
    step, account, cdk, lines = one_stack
    account.status(status)
    account.template({**cdk.template(account.name), "Description": "the template before"})
    step.run()
    assert cdk.deployed == [account.name]
    assert lines[-1] == f"  {account.name}: {status}, updating (its template changed)"
    account.status(status)
    account.template(cdk.template(account.name))
    step.run()
    assert cdk.deployed == [account.name] and lines[-1] == f"  {account.name}: {status}, as synthesized"


def test_a_stack_with_notification_arns_the_assembly_does_not_name_is_deployed(one_stack):
    """canSkipDeploy compares the stack's NotificationARNs with the ones the CLI is given (none:
    neither --notification-arns nor the manifest's notificationArns) and deploys when they differ."""
    step, account, cdk, lines = one_stack
    account.status("UPDATE_COMPLETE", notifications=[f"arn:aws:sns:eu-west-1:{ACCOUNT}:someone-elses"])
    account.template(cdk.template(account.name))
    step.run()
    assert cdk.deployed == [account.name]
    assert lines[-1] == f"  {account.name}: UPDATE_COMPLETE, updating (its notification ARNs changed)"
    account.stubber.assert_no_pending_responses()


def test_a_stack_in_progress_is_waited_for_then_left_alone_when_it_matches(one_stack):
    step, account, cdk, lines = one_stack
    account.status("UPDATE_IN_PROGRESS")
    account.status("UPDATE_COMPLETE_CLEANUP_IN_PROGRESS")
    account.status("UPDATE_COMPLETE")
    account.template(cdk.template(account.name))
    step.run()
    assert cdk.deployed == []
    assert lines[-4:] == [f"  {account.name}: UPDATE_IN_PROGRESS, waiting for it to settle", "(slept 15 s)",
                          "(slept 15 s)", f"  {account.name}: UPDATE_COMPLETE, as synthesized"]
    account.stubber.assert_no_pending_responses()


@pytest.mark.parametrize("status, advice", [
    ("UPDATE_ROLLBACK_FAILED", "continue-update-rollback --region eu-west-1 --stack-name {stack}"),
    ("UPDATE_FAILED", "rollback-stack --region eu-west-1 --stack-name {stack} --retain-except-on-create"),
    ("CREATE_FAILED", "rollback-stack --region eu-west-1 --stack-name {stack} --retain-except-on-create"),
    ("DELETE_FAILED", "does not delete or re-create a stack that holds data"),
    ("IMPORT_ROLLBACK_FAILED", "fix the resources its events name"),
])
def test_a_stack_cloudformation_will_not_update_gets_its_documented_way_out_never_a_deletion(one_stack, status, advice):
    step, account, cdk, _ = one_stack
    account.status(status, reason="Resource handler returned message: boom")
    with pytest.raises(OperationFailed) as failure:
        step.run()
    message = str(failure.value)
    assert message.startswith(f"stack {account.name} is {status} (Resource handler returned message: boom): ")
    assert advice.format(stack=account.name) in message
    assert "delete-stack" not in message and cdk.deployed == []


def seed_left(session, *, termination_disabled: bool) -> str:
    """An instance a failed creation's rollback could not delete, as the seeds are launched (API
    termination disabled, seed_nodes.py), or after the operator allowed it."""
    ec2 = session.client("ec2")
    image = MOTO_IMAGE
    instance = ec2.run_instances(ImageId=image, MinCount=1, MaxCount=1)["Instances"][0]["InstanceId"]
    ec2.modify_instance_attribute(InstanceId=instance, DisableApiTermination={"Value": termination_disabled})
    return instance


def test_a_failed_creation_whose_rollback_met_a_protected_seed_says_how_to_let_the_cli_delete_it(one_stack, moto_session):
    """EC2 refuses to terminate an instance whose API termination is disabled, so the rollback of a
    failed creation that had launched the seeds ends ROLLBACK_FAILED with them; the CLI's deletion
    of the stack would meet them again. The run names each and the command that allows it."""
    step, account, cdk, _ = one_stack
    seed = seed_left(moto_session, termination_disabled=True)
    account.status("ROLLBACK_FAILED", reason="The following resource(s) failed to delete: [SeedNodesSeed0]")
    account.resources(("AWS::EC2::Instance", seed, "DELETE_FAILED"), ("AWS::EC2::SecurityGroup", "sg-1", "DELETE_COMPLETE"))
    with pytest.raises(OperationFailed) as failure:
        step.run()
    message = str(failure.value)
    assert message.startswith(f"stack {account.name} is ROLLBACK_FAILED (The following resource(s) failed to delete: ")
    assert f"aws ec2 modify-instance-attribute --region eu-west-1 --instance-id {seed} --no-disable-api-termination" in message
    assert "update-termination-protection" not in message and cdk.deployed == []


@pytest.mark.parametrize("protected", [False, True])
def test_a_failed_creation_whose_rollback_left_nothing_protected_is_created_again_unless_the_stack_is(
        one_stack, moto_session, protected):
    """Once the seeds may be terminated, the CLI deletes the ROLLBACK_FAILED stack with what its
    rollback left and creates it again (isCreationFailure), as for ROLLBACK_COMPLETE; a protected
    stack needs its protection lifted first."""
    step, account, cdk, lines = one_stack
    seed = seed_left(moto_session, termination_disabled=False)
    account.status("ROLLBACK_FAILED", protected=protected)
    account.resources(("AWS::EC2::Instance", seed, "DELETE_FAILED"))
    if protected:
        with pytest.raises(OperationFailed, match="update-termination-protection --no-enable-termination-protection"):
            step.run()
        assert cdk.deployed == []
    else:
        step.run()
        assert cdk.deployed == [account.name]
        assert lines[-1].startswith(f"  {account.name}: ROLLBACK_FAILED, creating it (the CDK CLI deletes")


def test_every_stack_status_in_the_cloudformation_model_is_handled():
    """The StackStatus enum of botocore's cloudformation model: each one is created, updated,
    waited for or answered with advice."""
    import botocore.session

    from telemetry.deploy import steps as journey_module

    model = botocore.session.get_session().get_service_model("cloudformation")
    statuses = set(model.shape_for("StackStatus").enum)
    waited = {s for s in statuses if s.endswith("_IN_PROGRESS") and s != "REVIEW_IN_PROGRESS"}
    handled = journey_module.CREATE | journey_module.SETTLED | set(journey_module.ADVICE) | waited
    assert statuses - handled == set()
    assert not any("delete-stack" in advice for advice in journey_module.ADVICE.values())


def test_the_cdk_cli_starts_on_the_checkouts_node_with_no_node_on_path(tmp_path):
    """`.venv/bin/cdk` is `#!/usr/bin/env node`: on a PATH without Node it exits 127. The deploy
    step's command line names the checkout's node, and its environment puts .venv/bin first."""
    import subprocess

    from telemetry.shared import cdk_cli

    bare = {"PATH": str(tmp_path), "HOME": str(tmp_path)}
    shebang = subprocess.run([str(deploy.REPO / ".venv" / "bin" / "cdk"), "--version"], env=bare,
                             capture_output=True, text=True, check=False)
    assert shebang.returncode == 127
    started = subprocess.run(cdk_cli.command("--version"), env=cdk_cli.environment(bare), capture_output=True,
                             text=True, check=False, timeout=120)
    assert started.returncode == 0, started.stderr
    assert started.stdout.startswith("2.1148.1")
    assert cdk_cli.environment(bare)["PATH"].split(":")[0] == str(cdk_cli.VENV_BIN)


BROKERS = "b-1.telemetrydev.a1b2c3.c2.kafka.eu-west-1.amazonaws.com:9098,b-2.telemetrydev.a1b2c3.c2.kafka.eu-west-1.amazonaws.com:9098"


def test_the_topics_step_is_done_once_telemetry_topics_recorded_a_reconcile_for_this_cluster(account):
    from telemetry.commands.topics import declared_environment, record_reconciled

    ssm = account.client("ssm")
    ssm.put_parameter(Name="/telemetry-dev/msk/bootstrap-brokers-iam", Type="String", Value=BROKERS)
    step = Topics(CONFIG, account)
    assert step.done() == ""
    record_reconciled(declared_environment("dev"), now=lambda: "2026-11-24T20:00:00+00:00", ssm=ssm)
    assert step.done() == "telemetry topics reconciled them at 2026-11-24T20:00:00+00:00"
    # The MSK stack deleted and deployed again: a new cluster, other broker names, no topics yet.
    ssm.put_parameter(Name="/telemetry-dev/msk/bootstrap-brokers-iam", Type="String", Overwrite=True,
                      Value=BROKERS.replace("a1b2c3", "d4e5f6"))
    assert step.done() == ""


def test_the_topics_step_reconciles_on_a_fleet_host_and_records_it(account):
    """moto answers the Run Command as succeeded (it runs nothing); what the host does is tested in
    tests/telemetry/commands/topics/test_topics_on_fleet.py. Here: the step finds a fleet host, sends the fleet's
    document, deletes the token parameter and records the reconcile, which makes it done."""
    ec2 = account.client("ec2")
    image = MOTO_IMAGE
    ec2.run_instances(ImageId=image, MinCount=1, MaxCount=1, TagSpecifications=[{
        "ResourceType": "instance", "Tags": [{"Key": "telemetry:fleet", "Value": "telemetry-dev-simulator"}]}])
    account.client("ssm").put_parameter(Name="/telemetry-dev/msk/bootstrap-brokers-iam", Type="String", Value=BROKERS)
    step = Topics(CONFIG, account, "arn:aws:iam::111111111111:mfa/ops", read_code=lambda serial: "123456")
    step.run()
    assert step.done().startswith("telemetry topics reconciled them at ")
    commands = account.client("ssm").list_commands()["Commands"]
    assert {c["DocumentName"] for c in commands} == {"telemetry-dev-manage-topics"} and len(commands) == 2
    (install,) = [c for c in commands if c["Parameters"] == {"installOnly": ["true"]}]  # first, with no token
    (reconcile,) = [c for c in commands if "declaration" in c["Parameters"]]
    # The run's token parameter (under the path, named by the run) is gone.
    assert account.client("ssm").get_parameters_by_path(Path="/telemetry-dev/msk/topics-token")["Parameters"] == []


def test_the_topics_step_without_mfa_says_how_to_give_it(account):
    with pytest.raises(OperationFailed, match="--mfa-serial ARN"):
        Topics(CONFIG, account).run()


def test_the_bootstrap_step_is_done_once_the_create_cluster_command_succeeded(account, stacks):
    cdk = CdkCli(account, stacks)
    fabric = next(s for s in stacks if s.name.endswith("-ServiceFabric"))
    cdk.put(fabric.name)
    document = fabric.template["Outputs"]["CreateClusterDocumentName"]["Value"]
    step = Bootstrap(CONFIG, account, print)
    assert step.done() == ""
    ssm = account.client("ssm")
    ssm.send_command(InstanceIds=["i-0123456789abcdef0"], DocumentName="AWS-RunPowerShellScript")  # another document
    assert step.done() == ""
    command = ssm.send_command(InstanceIds=["i-0123456789abcdef0"], DocumentName=document)["Command"]["CommandId"]
    assert step.done() == f"{document} succeeded, command {command}"


def test_the_bootstrap_step_asks_run_command_only_for_this_documents_successes_since_the_stack(moto_session, synthesized):
    """Not a page through every command the account ran: ListCommands filtered by DocumentName,
    Status and InvokedAfter the stack's CreationTime (CommandFilter, SSM API Reference), which
    Stubber checks against the ssm model; moto's ListCommands would ignore the filters."""
    from tests.telemetry.seed_commands import service_fabric_outputs
    from tests.telemetry.stack_outputs import StubbedStackSession, outputs_list

    fabric = StubbedStackSession(moto_session, "Telemetry-dev-ServiceFabric",
                                 outputs_list(service_fabric_outputs(synthesized, "dev")))  # created 2026-11-23T00:00:00Z
    ssm = moto_session.client("ssm")
    with Stubber(ssm) as stubber:
        stubber.add_client_error("get_parameter", "ParameterNotFound", http_status_code=400,
                                 expected_params={"Name": "/telemetry-dev/service-fabric/cluster-created"})
        stubber.add_response("list_commands", {"Commands": [
            {"CommandId": "0f1e2d3c-4b5a-4978-8796-a5b4c3d2e1f0", "DocumentName": "telemetry-dev-create-sf-cluster",
             "Status": "Success", "RequestedDateTime": datetime.datetime(2026, 11, 23, 1, tzinfo=datetime.timezone.utc)},
        ]}, {"Filters": [{"key": "DocumentName", "value": "telemetry-dev-create-sf-cluster"},
                         {"key": "Status", "value": "Success"},
                         {"key": "InvokedAfter", "value": "2026-11-23T00:00:00Z"}]})
        account = SimpleNamespace(client=lambda name: ssm if name == "ssm" else fabric.client(name))
        done = Bootstrap(CONFIG, account, print).done()
        stubber.assert_no_pending_responses()
    assert done == "telemetry-dev-create-sf-cluster succeeded, command 0f1e2d3c-4b5a-4978-8796-a5b4c3d2e1f0"


def test_the_bootstrap_step_is_done_by_the_record_bootstrap_left_for_this_very_stack(account, stacks):
    """Run Command's history of the create command does not last (the console lists 30 days):
    the parameter `telemetry cluster bootstrap` writes does. It names the stack it was written for,
    so a ServiceFabric stack deleted and deployed again has its cluster created again."""
    cdk = CdkCli(account, stacks)
    fabric = next(s for s in stacks if s.name.endswith("-ServiceFabric"))
    cdk.put(fabric.name)
    cloudformation, ssm = account.client("cloudformation"), account.client("ssm")
    (deployed,) = cloudformation.describe_stacks(StackName=fabric.name)["Stacks"]
    step, parameter = Bootstrap(CONFIG, account, print), "/telemetry-dev/service-fabric/cluster-created"
    record = f"2026-11-25T10:00:00+00:00 command 0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0 stack {deployed['StackId']}"
    ssm.put_parameter(Name=parameter, Type="String", Value=record)
    assert step.done() == f"{parameter}: {record}"
    cloudformation.delete_stack(StackName=fabric.name)
    cdk.put(fabric.name)
    assert step.done() == ""  # the record is for the stack deleted


class FlinkSession:
    """Managed Flink through Stubber (every status, operation and error checked against the
    kinesisanalyticsv2 model): moto lists applications but cannot start one."""

    def __init__(self, session) -> None:
        self.session = session
        self.flink = session.client("kinesisanalyticsv2")
        self.stubber = Stubber(self.flink)

    def client(self, name):
        return self.flink if name == "kinesisanalyticsv2" else self.session.client(name)

    def status(self, application: str, *statuses: str) -> None:
        for status in statuses:
            self.stubber.add_response("describe_application", {"ApplicationDetail": {
                "ApplicationARN": f"arn:aws:kinesisanalytics:eu-west-1:{ACCOUNT}:application/{application}",
                "ApplicationName": application, "RuntimeEnvironment": "FLINK-2_2", "ApplicationStatus": status,
                "ApplicationVersionId": 1,
            }}, {"ApplicationName": application})

    def start(self, application: str, operation: str = "op-start-1") -> None:
        self.stubber.add_response("start_application", {"OperationId": operation}, {
            "ApplicationName": application,
            "RunConfiguration": {"ApplicationRestoreConfiguration": {"ApplicationRestoreType": "RESTORE_FROM_LATEST_SNAPSHOT"}},
        })

    def operation(self, application: str, operation: str, kind: str, status: str = "FAILED", error: str = "") -> None:
        # EndTime is required by the model, whatever the status.
        details = {"Operation": kind, "StartTime": "2026-11-26T03:00:00Z", "EndTime": "2026-11-26T03:04:00Z",
                   "OperationStatus": status}
        if error:
            details["OperationFailureDetails"] = {"ErrorInfo": {"ErrorString": error}}
        self.stubber.add_response("describe_application_operation", {"ApplicationOperationInfoDetails": details},
                                  {"ApplicationName": application, "OperationId": operation})


@pytest.fixture
def flink(account, stacks):
    session = FlinkSession(account)
    lines: list[str] = []
    step = Flink(CONFIG, session, stacks, lines.append, sleep=lambda s: lines.append(f"(slept {s:g} s)"))
    (application,) = step._applications()
    return session, step, application, lines


def test_the_flink_step_starts_a_ready_application_from_its_latest_snapshot_and_waits_until_it_runs(flink):
    session, step, application, lines = flink
    session.status(application, "READY")  # done?
    session.status(application, "READY")  # run: look, then start
    session.start(application)
    session.operation(application, "op-start-1", "StartApplication", "IN_PROGRESS")
    session.operation(application, "op-start-1", "StartApplication", "IN_PROGRESS")
    session.operation(application, "op-start-1", "StartApplication", "SUCCESSFUL")
    session.status(application, "RUNNING")
    session.status(application, "RUNNING")  # the next run's done?
    with session.stubber:
        assert step.done() == ""
        step.run()
        assert step.done() == f"{application} RUNNING"
    session.stubber.assert_no_pending_responses()
    assert lines == [f"  {application}: starting (operation op-start-1)", f"  {application}: waiting for the start to end",
                     "(slept 15 s)", "(slept 15 s)", f"  {application}: RUNNING"]


@pytest.mark.parametrize("status", ["AUTOSCALING", "MAINTENANCE"])
def test_an_application_scaling_or_in_maintenance_is_running(flink, status):
    session, step, application, _ = flink
    session.status(application, status)
    with session.stubber:
        assert step.done() == f"{application} {status}"


def test_an_application_updating_is_waited_for_then_started_if_it_settles_ready(flink):
    """An UPDATING application may be a READY one the stack deployment just updated."""
    session, step, application, lines = flink
    session.status(application, "UPDATING", "READY")
    session.start(application)
    session.operation(application, "op-start-1", "StartApplication", "SUCCESSFUL")
    session.status(application, "RUNNING")
    with session.stubber:
        step.run()
    session.stubber.assert_no_pending_responses()
    assert lines[-1] == f"  {application}: RUNNING"


def test_a_start_that_falls_back_to_ready_fails_with_the_operations_reason(flink):
    session, step, application, _ = flink
    session.status(application, "READY")
    session.start(application, "op-start-2")
    reason = "Access denied to s3://telemetry-dev-artifacts/sink.jar"
    session.operation(application, "op-start-2", "StartApplication", "FAILED", reason)
    session.status(application, "READY")
    session.operation(application, "op-start-2", "StartApplication", "FAILED", reason)
    with session.stubber, pytest.raises(OperationFailed) as failure:
        step.run()
    assert str(failure.value) == (f"Flink application {application} did not start: it is READY "
                                  f"(StartApplication FAILED: {reason})")


def test_a_rolled_back_application_fails_the_step_with_the_last_failed_operation(flink):
    session, step, application, _ = flink
    session.status(application, "ROLLED_BACK")
    session.stubber.add_response("list_application_operations", {"ApplicationOperationInfoList": [
        {"Operation": "UpdateApplication", "OperationId": "op-update-3", "OperationStatus": "FAILED",
         "StartTime": datetime.datetime(2026, 11, 20, 2, tzinfo=datetime.timezone.utc)},
        {"Operation": "UpdateApplication", "OperationId": "op-update-7", "OperationStatus": "FAILED",
         "StartTime": datetime.datetime(2026, 11, 26, 2, tzinfo=datetime.timezone.utc)}]},  # no documented order
        {"ApplicationName": application, "OperationStatus": "FAILED"})
    session.operation(application, "op-update-7", "UpdateApplication", "FAILED", "Job failed to restore from snapshot")
    with session.stubber, pytest.raises(OperationFailed) as failure:
        step.run()
    assert str(failure.value).startswith(f"Flink application {application} is ROLLED_BACK (UpdateApplication FAILED: "
                                         "Job failed to restore from snapshot); see its operations")


def test_every_application_status_in_the_model_is_handled():
    import botocore.session

    from telemetry.deploy import steps as journey_module

    model = botocore.session.get_session().get_service_model("kinesisanalyticsv2")
    statuses = set(model.shape_for("ApplicationStatus").enum)
    known = journey_module.FLINK_RUNNING | journey_module.FLINK_TRANSITIONAL | {"READY", "DELETING", "ROLLED_BACK"}
    assert statuses == known


def test_steps_already_done_are_skipped_and_said(capsys):
    class Done:
        name = "deploy"
        done = staticmethod(lambda: "all 8 stacks deployed")

        def run(self):
            raise AssertionError("a step already done is not run again")

    class Failing:
        name = "flink"
        done = staticmethod(lambda: "")

        def run(self):
            raise OperationFailed("Flink application x is STARTING; start it once it is READY")

    lines: list[str] = []
    with pytest.raises(OperationFailed, match=r"^flink: Flink application x is STARTING.*\(run telemetry deploy again"):
        run_journey([Done(), Failing()], lines.append)
    assert lines == ["[1/2] deploy: already done (all 8 stacks deployed)", "[2/2] flink: running"]


def step_errors():
    """One error of each kind a step can raise, as errors.worded words it for the command line."""
    from botocore.exceptions import ClientError

    from telemetry.shared.cluster_inventory import ToolError
    from telemetry.shared.errors import UsageError
    from simulator.topic_admin import TopicError
    from stacks.config import ConfigError

    def client_error(code: str) -> ClientError:
        return ClientError({"Error": {"Code": code, "Message": "no"}}, "DescribeStacks")

    return [
        pytest.param(OperationFailed("Flink application x is STARTING"), 1, id="OperationFailed"),
        pytest.param(UsageError("add --mfa-serial ARN"), 2, id="UsageError"),
        pytest.param(TopicError("cannot connect to the brokers: timed out"), 2, id="TopicError"),
        pytest.param(ToolError("no seed answered"), 2, id="ToolError"),
        pytest.param(ConfigError("environments.dev.msk.topics: unknown key"), 2, id="ConfigError"),
        pytest.param(client_error("AccessDenied"), 2, id="ClientError-credentials"),
        pytest.param(client_error("Throttling"), 1, id="ClientError"),
        pytest.param(AttributeError("'Namespace' object has no attribute 'format'"), 1, id="internal"),
    ]


@pytest.mark.parametrize(("error", "exit_code"), step_errors())
@pytest.mark.parametrize("where", ["run", "done"])
def test_an_error_of_any_kind_names_its_step_and_the_way_on_and_keeps_its_exit_code(error, exit_code, where, capsys,
                                                                                   monkeypatch):
    """As the operator meets it: `telemetry deploy` prints one line naming the step and saying
    a rerun goes on from there, with the exit code the error's kind has everywhere."""
    from telemetry import cli
    from telemetry.shared.errors import worded

    class Failing:
        name = "topics"

        def done(self):
            if where == "done":
                raise error
            return ""

        def run(self):
            raise error

    monkeypatch.setattr(deploy, "run", lambda args, session_factory: run_journey([Failing()], print))
    code = cli.main(["deploy", "--env", "dev"], session_factory=lambda region: None)
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert code == exit_code == worded(error)[0]
    _, worded_alone = worded(error)
    assert line.startswith(f"telemetry: error: topics: {worded_alone} (run telemetry deploy again to go on from here)")
    if isinstance(error, AttributeError):  # a defect still says how to see where
        assert line.endswith("(run again with --debug for the traceback)")


@pytest.fixture
def seeds(moto_session, synthesized, sf_cluster):
    """dev's seeds running in moto, answering the cluster-nodes document with what the Service
    Fabric emulator's cluster lists (tests/telemetry/seed_commands.py); the ServiceFabric stack's
    outputs as DescribeStacks returns them (through the Stubber)."""
    from tests.telemetry.seed_commands import launch_seeds, seeds_answer, service_fabric_outputs
    from tests.telemetry.stack_outputs import StubbedStackSession, outputs_list

    launched = launch_seeds(moto_session, synthesized, "dev")
    cluster: dict = {"up": True}
    sent = seeds_answer(moto_session, lambda: sf_cluster.list_nodes("", "all", 1000)["Items"] if cluster["up"] else None)
    account = StubbedStackSession(moto_session, "Telemetry-dev-ServiceFabric",
                                  outputs_list(service_fabric_outputs(synthesized, "dev")))
    return SimpleNamespace(account=account, instances=launched, sent=sent, cluster=cluster)


def test_the_smoke_check_asks_every_online_seed_and_finds_every_seed_up(seeds, synthesized):
    from telemetry.deploy.steps import seeds_up

    said: list[str] = []
    assert seeds_up(CONFIG, seeds.account, said.append) == "3 of 3 seed nodes Up (as seed-0 lists them)"
    (request,) = seeds.sent
    assert request["DocumentName"] == "telemetry-dev-sf-cluster-nodes"
    assert sorted(request["InstanceIds"]) == sorted(seeds.instances.values())
    # Every seed's client endpoint, its fixed address (the Seeds output), port 19000.
    addresses = [s["address"] for s in json.loads(synthesized("dev").stacks["service_fabric"]["Outputs"]["Seeds"]["Value"])]
    assert request["Parameters"] == {"clientConnectionEndpoints": [",".join(f"{a}:19000" for a in addresses)]}
    assert request["CloudWatchOutputConfig"]["CloudWatchLogGroupName"] == "/telemetry-dev/service-fabric/nodes"
    assert said[0].startswith("  asking 3 seed(s) for the cluster's nodes over Run Command ")


def test_a_seed_down_fails_the_smoke_check_naming_it(seeds, sf_cluster):
    """Even the seed asked first: it reaches the cluster through the others' endpoints, which list it Down."""
    from telemetry.deploy.steps import seeds_up

    sf_cluster.stop_host("seed-0")
    with pytest.raises(OperationFailed, match=r"^2 of 3 seed nodes are Up \(seed-0 Down\): see telemetry cluster status$"):
        seeds_up(CONFIG, seeds.account, lambda line: None)


def test_a_seed_whose_agent_is_offline_is_passed_over(seeds, moto_session):
    from telemetry.deploy.steps import seeds_up

    moto_session.ping_status[seeds.instances["seed-0"]] = "ConnectionLost"
    assert seeds_up(CONFIG, seeds.account, lambda line: None) == "3 of 3 seed nodes Up (as seed-1 lists them)"
    (request,) = seeds.sent
    assert seeds.instances["seed-0"] not in request["InstanceIds"] and len(request["InstanceIds"]) == 2


def test_no_cluster_answering_the_seeds_fails_the_smoke_check_with_their_reasons(seeds):
    from telemetry.deploy.steps import seeds_up

    seeds.cluster["up"] = False
    with pytest.raises(OperationFailed, match=r"^no cluster answered the seeds: seed-0, seed-1, seed-2: "
                                              "No cluster endpoint is reachable"):
        seeds_up(CONFIG, seeds.account, lambda line: None)


def test_no_seed_online_fails_the_smoke_check_naming_each_agents_status(seeds, moto_session):
    from telemetry.deploy.steps import seeds_up

    for instance in seeds.instances.values():
        moto_session.ping_status[instance] = "Inactive"
    with pytest.raises(OperationFailed, match=r"^cannot ask the seeds for the cluster's nodes: no seed of telemetry-dev-sf "
                                              r"can take a Run Command \(i-\w+ Inactive, "):
        seeds_up(CONFIG, seeds.account, lambda line: None)


SMOKE_BUCKET = "telemetry-dev-telemetrybucket"


def describe_stack_response(stack: str, outputs: list[dict]) -> dict:
    from tests.telemetry.stack_outputs import stack_id

    return {"Stacks": [{"StackName": stack, "StackId": stack_id(stack), "CreationTime": "2026-11-23T00:00:00Z",
                        "StackStatus": "CREATE_COMPLETE", "Outputs": outputs}]}


@pytest.fixture
def smoke_account(moto_session, seeds, synthesized):
    """What the smoke step reads, in the order it asks: the DeviceGateway stack's device credentials
    key (provisioning the MQTT leg's devices), the TelemetrySink stack's bucket, the ServiceFabric
    stack's outputs (DescribeStacks through the Stubber); the device policy, the bucket and one
    simulator fleet host in moto; dev's seeds answering the cluster-nodes document."""
    from tests.telemetry.seed_commands import service_fabric_outputs
    from tests.telemetry.stack_outputs import StubbedStackSession, outputs_list
    from tests.telemetry.commands.test_simulate import deployed_fleet

    key = moto_session.client("kms").create_key(Description="telemetry-dev device credentials")["KeyMetadata"]["Arn"]
    # Provisioning only checks that the device gateway's policy exists (its statements: the stack's tests).
    moto_session.client("iot").create_policy(policyName="telemetry-dev-device", policyDocument=json.dumps(
        {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "iot:Connect", "Resource": "*"}]}))
    account = StubbedStackSession(moto_session, "Telemetry-dev-DeviceGateway", outputs_list({"DeviceCredentialsKeyArn": key}))
    for stack, outputs in (("Telemetry-dev-TelemetrySink", outputs_list({"TelemetryBucket": SMOKE_BUCKET})),
                           ("Telemetry-dev-ServiceFabric", outputs_list(service_fabric_outputs(synthesized, "dev")))):
        account.stubber.add_response("describe_stacks", describe_stack_response(stack, outputs), {"StackName": stack})
    moto_session.client("s3").create_bucket(Bucket=SMOKE_BUCKET, CreateBucketConfiguration={"LocationConstraint": "eu-west-1"})
    deployed_fleet(moto_session, hosts=1)
    return account


def committed_smoke_file(session, tmp_path, key: str, runs: dict[str, int]) -> None:
    """A part file under smoke/ with `runs` rows per run id. Written by DuckDB with the sink's
    run_id column (a string, as TelemetryParquet declares it and flink/'s integration test reads
    back); the sink's routing of smoke runs into smoke/ is that Java test's."""
    import duckdb

    local = tmp_path / key.replace("/", "_")
    rows = " UNION ALL ".join(f"SELECT '{run}' AS run_id, range AS seq FROM range({count})" for run, count in runs.items())
    with duckdb.connect() as db:
        db.execute(f"COPY ({rows}) TO '{local}' (FORMAT parquet)")
    session.client("s3").upload_file(str(local), SMOKE_BUCKET, key)


def fleet_reported(session, monkeypatch, *, lost: dict[str, int] | None = None) -> None:
    """Each leg's one host reports 10,000 acknowledged messages (1,000 msg/s for 10 s) to the
    results bucket, for run ids smoke-test-kafka and smoke-test-mqtt."""
    from telemetry.commands.simulate import Fleet
    from telemetry.deploy import steps as journey
    from tests.telemetry.commands.test_simulate import host_report, upload

    monkeypatch.setattr(journey, "_smoke_run_id", lambda: "smoke-test")
    (host,) = Fleet(session).running_hosts("telemetry-dev-simulator")
    latencies = list(range(2_000, 12_000))
    for leg, rate in (("kafka", journey.SMOKE_RATE), ("mqtt", journey.SMOKE_MQTT_RATE)):
        run = f"smoke-test-{leg}"
        upload(session, run, host, host_report(host, latencies, run_id=run, rate=rate, lost=(lost or {}).get(leg, 0)))


def test_the_smoke_step_runs_both_legs_finds_every_record_in_the_sinks_smoke_prefix_then_checks_the_seeds(
        smoke_account, seeds, monkeypatch, tmp_path):
    """The whole step: the Kafka leg and the MQTT leg (its devices provisioned in moto's IoT first)
    over moto's Run Command, each host's report in S3 as the simulator writes one; their
    acknowledged records found in committed part files under smoke/ (other runs' rows, in-progress
    files and the table's prefix not counted); then the seeds at the gateway emulator."""
    from telemetry.deploy import steps as journey

    fleet_reported(smoke_account.session, monkeypatch)
    committed_smoke_file(smoke_account.session, tmp_path, "smoke/dt=2026-11-26/hour=06/part-a-0.parquet",
                         {"smoke-test-kafka": 6_000, "smoke-earlier-kafka": 500, "smoke-test-mqtt": 10_000})
    committed_smoke_file(smoke_account.session, tmp_path, "smoke/dt=2026-11-26/hour=06/part-b-0.parquet",
                         {"smoke-test-kafka": 4_000})
    committed_smoke_file(smoke_account.session, tmp_path, "smoke/dt=2026-11-26/hour=06/.part-c-1.parquet.inprogress.d",
                         {"smoke-test-kafka": 7})
    committed_smoke_file(smoke_account.session, tmp_path, "telemetry/dt=2026-11-26/hour=06/part-d-0.parquet",
                         {"smoke-test-mqtt": 9})
    said: list[str] = []
    journey.Smoke(CONFIG, smoke_account, said.append, sleep=lambda s: pytest.fail("every record was there")).run()
    things = smoke_account.session.client("iot").list_things()["things"]
    assert sorted(t["thingName"] for t in things) == [f"telemetry-dev-device-{n:06d}" for n in range(1, 6)]
    assert "  devices 1-5: 5 created, 0 repaired, 0 unchanged, 0 failed" in said
    assert [line for line in said if line.startswith("  smoke run")] == [
        "  smoke run smoke-test-kafka: 1,000 msg/s over kafka, nothing lost",
        "  smoke run smoke-test-mqtt: 1,000 msg/s over mqtt, nothing lost",
    ]
    assert said[-4:-1] == [
        f"  waiting up to {journey.smoke_read_back_bound(CONFIG):.0f} s for their 20,000 records in the sink's smoke/ prefix",
        "  sink: all 20,000 records in S3 (smoke/, outside the telemetry table; expires in a day)",
        "  asking 3 seed(s) for the cluster's nodes over Run Command " + said[-2].rsplit(" ", 1)[-1],
    ]
    assert said[-1] == "  cluster: 3 of 3 seed nodes Up (as seed-0 lists them)"


def test_records_the_sink_has_not_committed_within_the_bound_fail_the_smoke_step(smoke_account, monkeypatch, tmp_path):
    from telemetry.deploy import steps as journey

    fleet_reported(smoke_account.session, monkeypatch)
    committed_smoke_file(smoke_account.session, tmp_path, "smoke/dt=2026-11-26/hour=06/part-a-0.parquet",
                         {"smoke-test-kafka": 10_000, "smoke-test-mqtt": 9_990})
    waits: list[float] = []
    step = journey.Smoke(CONFIG, smoke_account, lambda line: None, sleep=waits.append, clock=lambda: sum(waits))
    bound = journey.smoke_read_back_bound(CONFIG)
    with pytest.raises(OperationFailed, match=rf"^the Flink sink did not store every acknowledged smoke record within "
                                              rf"{bound:.0f} s \(smoke-test-mqtt: 9,990 of 10,000\); see the sink's"):
        step.run()
    assert waits and all(w == journey.SMOKE_POLL_S for w in waits)
    assert sum(waits) == bound  # looked again every SMOKE_POLL_S until the bound, then gave up


def test_a_leg_on_a_topic_the_sink_does_not_read_is_said_and_not_awaited(smoke_account, seeds, monkeypatch, tmp_path):
    """The simulator fleet may write a test topic of its own: its records never reach the sink, so
    only the MQTT leg (the device gateway's topic, the sink's) is read back."""
    from telemetry.deploy import steps as journey

    tests_topic = CONFIG.msk.topics[0].model_copy(update={"name": "fleet-tests"})
    elsewhere = CONFIG.model_copy(update={
        "simulator_fleet": CONFIG.simulator_fleet.model_copy(update={"topic": "fleet-tests"}),
        "msk": CONFIG.msk.model_copy(update={"topics": (*CONFIG.msk.topics, tests_topic)}),
    })
    fleet_reported(smoke_account.session, monkeypatch)
    committed_smoke_file(smoke_account.session, tmp_path, "smoke/dt=2026-11-26/hour=06/part-a-0.parquet",
                         {"smoke-test-mqtt": 10_000})
    said: list[str] = []
    journey.Smoke(elsewhere, smoke_account, said.append, sleep=lambda s: pytest.fail("the mqtt leg was all there")).run()
    assert ("  smoke-test-kafka wrote topic fleet-tests, which the sink does not read (telemetry): not read back"
            in said)
    assert f"  waiting up to {journey.smoke_read_back_bound(CONFIG):.0f} s for their 10,000 records in the sink's smoke/ prefix" in said


@pytest.mark.parametrize("leg", ["kafka", "mqtt"])
def test_a_smoke_leg_that_lost_messages_fails_before_the_sink_is_read(smoke_account, monkeypatch, leg):
    from telemetry.deploy import steps as journey

    fleet_reported(smoke_account.session, monkeypatch, lost={leg: 5})
    with pytest.raises(OperationFailed, match=rf"^the smoke run smoke-test-{leg} failed .*: 1,000 msg/s, 5 lost$"):
        journey.Smoke(CONFIG, smoke_account, lambda line: None).run()


def test_the_scale_step_brings_the_empty_group_to_its_configured_size_once(moto_session):
    from tests.telemetry.commands.cluster.test_scale import SCALING, group

    ec2, autoscaling = moto_session.client("ec2"), moto_session.client("autoscaling")
    image = MOTO_IMAGE
    subnet = ec2.describe_subnets()["Subnets"][0]["SubnetId"]
    ec2.create_launch_template(LaunchTemplateName="nodes", LaunchTemplateData={"ImageId": image, "InstanceType": "m6i.xlarge"})
    autoscaling.create_auto_scaling_group(
        AutoScalingGroupName=SCALING, LaunchTemplate={"LaunchTemplateName": "nodes"}, VPCZoneIdentifier=subnet,
        MinSize=0, MaxSize=CONFIG.service_fabric.scaling_max_nodes, DesiredCapacity=0,
        Tags=[{"Key": "sf:nodetype", "Value": "ScalingNodeType", "PropagateAtLaunch": True}])
    lines: list[str] = []
    step = Scale(CONFIG, moto_session, lines.append, sleep=lambda s: None)
    assert step.done() == ""
    step.run()
    fabric = CONFIG.service_fabric
    sized = group(moto_session)
    assert (sized["MinSize"], sized["DesiredCapacity"]) == (fabric.scaling_min_nodes, fabric.scaling_desired_nodes)
    assert step.done() == f"{SCALING}: {fabric.scaling_desired_nodes} node(s) in service"
    # An operator's later size is kept by a rerun: the step is done at whatever size is steady.
    autoscaling.set_desired_capacity(AutoScalingGroupName=SCALING, DesiredCapacity=fabric.scaling_desired_nodes + 1)
    assert step.done() == f"{SCALING}: {fabric.scaling_desired_nodes + 1} node(s) in service"


def test_a_first_deployment_without_mfa_is_refused_before_anything_is_deployed(account, monkeypatch, capsys):
    """The topics step needs the topic administrator's MFA: said at the start, not after an hour
    of stacks."""
    from telemetry import cli

    monkeypatch.setattr(deploy, "synthesized_stacks", lambda *a: pytest.fail("nothing is synthesized or deployed"))
    assert cli.main(["deploy", "--env", "dev"], session_factory=lambda region: account) == 2
    assert capsys.readouterr().err.strip() == (
        "telemetry: error: the topics of dev are not reconciled yet, which the topic administrator role does with "
        "MFA: add --mfa-serial ARN (your MFA device)")


# -- the environment's own synthesis, kept in cdk.out/<env>/ -------------------------------------


def test_an_environments_synthesis_is_kept_and_made_again_only_when_its_inputs_change(tmp_path, monkeypatch):
    """Every offline command reads the same cdk.out/<env>/: synthesized once, reused while nothing
    the synthesis reads changed (the digest beside it), made again when something did, and a
    synthesis that fails leaves the last good one."""
    config = load_environment(read_environments(), "dev")
    made = []

    def synthesize(config, outdir: Path) -> None:  # a one-stack assembly, as the app writes it
        made.append(outdir)
        if len(made) == 3:
            raise RuntimeError("synthesis failed")
        (outdir / "Telemetry-dev-Msk.template.json").write_text(json.dumps({"Resources": {"N": {"Type": str(len(made))}}}))
        (outdir / "manifest.json").write_text(json.dumps({"artifacts": {"Telemetry-dev-Msk": {
            "type": "aws:cloudformation:stack", "properties": {"templateFile": "Telemetry-dev-Msk.template.json"}}}}))

    digest = ["first"]
    monkeypatch.setattr(cloud_assembly, "synthesize", synthesize)
    monkeypatch.setattr(cloud_assembly, "synthesis_inputs_digest", lambda: digest[0])
    root = tmp_path / "cdk.out"

    def kind() -> str:
        (stack,) = cloud_assembly.environment_synthesis(config, root)
        return stack.template["Resources"]["N"]["Type"]

    assert kind() == "1" and kind() == "1" and len(made) == 1  # kept
    digest[0] = "second"  # cdk.json or the code changed
    assert kind() == "2" and len(made) == 2
    digest[0] = "third"
    with pytest.raises(RuntimeError):
        kind()
    assert sorted(p.name for p in root.iterdir()) == ["dev"]  # no half-made synthesis left behind
    (stack,) = deploy.read_cloud_assembly(root / "dev", config.stack_prefix)
    assert stack.template["Resources"]["N"]["Type"] == "2"


def test_the_inputs_digest_follows_cdk_json_and_the_code(tmp_path):
    for entry in deploy.SYNTHESIS_INPUTS:
        path = tmp_path / entry
        path.parent.mkdir(parents=True, exist_ok=True)
        if "." in Path(entry).name:
            path.write_text("x")
        else:
            path.mkdir()
            (path / "module.py").write_text("a = 1")
            (path / "__pycache__").mkdir()
            (path / "__pycache__" / "module.cpython-311.pyc").write_bytes(b"bytecode")
    before = deploy.synthesis_inputs_digest(tmp_path)
    (tmp_path / "stacks" / "__pycache__" / "module.cpython-311.pyc").write_bytes(b"other bytecode")
    assert deploy.synthesis_inputs_digest(tmp_path) == before
    (tmp_path / "stacks" / "module.py").write_text("a = 2")
    assert deploy.synthesis_inputs_digest(tmp_path) != before
