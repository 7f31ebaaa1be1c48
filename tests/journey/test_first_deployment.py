"""`telemetry deploy` as a user types it, from preflight to the smoke step, in one stand-in account
(tests/journey/world.py): each step reads what the steps before it made. Then the same command
again after a failure at every step.

Known gaps of the world, each covered elsewhere: the scaling group's instances go InService
without the launch hook's join (tests/lambdas/node_lifecycle runs it); the topics document and the
simulator's work on a fleet host are answered, not run (tests/telemetry/commands/topics/test_topics_on_fleet.py and
tests/simulator run them against real brokers); the sink's Parquet rows are written by the world
as the Flink sink commits them (tests/flink_sink runs the sink's jar).
"""

from __future__ import annotations

import io
import re
import shutil

from collections.abc import Callable

import boto3
import pytest

from stacks.config import load_environment, read_environments
from telemetry import cli
from telemetry.commands.cluster import bootstrap as bootstrap_cluster
from telemetry.deploy import command as deploy
from telemetry.deploy import steps as journey
from tests.journey.world import BOOTSTRAP_VERSION, REGION, Deployer, World

pytestmark = [pytest.mark.journey, pytest.mark.filterwarnings("ignore:Tried to parse AWS")]
MFA = "arn:aws:iam::{account}:mfa/operator"
# Service Quotas' defaults where the quota pages give one (EC2-VPC Elastic IPs: 5 per Region;
# MSK: 90 brokers per account); the vCPU quota is an account's own, raised here for prod's nodes.
QUOTAS = {
    "ec2": {"Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances": 512.0, "EC2-VPC Elastic IPs": 5.0},
    "kafka": {"Number of brokers per account": 90.0},
}


def exactly_what_it_needs(config, session) -> dict[str, dict[str, float]]:
    """Quotas with no room beyond the environment at its largest (seeds, the scaling group at its
    maximum and the fleet; its NAT addresses; its brokers), so that a preflight counting the
    environment's own resources on top of its need blocks the rerun."""
    fabric, fleet = config.service_fabric, config.simulator_fleet
    counts = {fabric.seed_instance_type: 0, fabric.node_instance_type: 0, fleet.instance_type: 0}
    for kind, count in ((fabric.seed_instance_type, fabric.seed_node_count), (fabric.node_instance_type,
                        fabric.scaling_max_nodes), (fleet.instance_type, fleet.host_count)):
        counts[kind] += count
    types = session.client("ec2").describe_instance_types(InstanceTypes=sorted(counts))["InstanceTypes"]
    vcpus = sum(t["VCpuInfo"]["DefaultVCpus"] * counts[t["InstanceType"]] for t in types)
    (vcpu_quota, eip_quota), (broker_quota,) = QUOTAS["ec2"], QUOTAS["kafka"]
    return {"ec2": {vcpu_quota: float(vcpus), eip_quota: float(config.network.nat_gateways)},
            "kafka": {broker_quota: float(config.msk.broker_count)}}


class Account:
    """The stand-in account for one environment, with its certificate secrets and the CDK
    bootstrap a user makes before the first deployment (docs/deploy.md's checklist)."""

    def __init__(self, env: str, moto_session, synthesized, tmp_path, monkeypatch, *, exact_quotas: bool = False) -> None:
        self.config = load_environment(read_environments(), env)
        # The operator has pinned the standalone package's digest, as docs/service-fabric.md's
        # "Pinned downloads" says to before a production deployment (cdk.json ships it unpinned).
        monkeypatch.setattr(type(self.config), "unpinned_downloads", lambda config: [])
        monkeypatch.setenv("MOTO_ACCOUNT_ID", self.config.account)
        monkeypatch.setattr(journey, "SMOKE_POLL_S", 0.0)
        monkeypatch.setattr(bootstrap_cluster, "REPO", tmp_path)  # ClusterConfig.json: REPO/cluster-config/<env>.json
        self.session = boto3.Session(region_name=REGION)
        quotas = exactly_what_it_needs(self.config, moto_session) if exact_quotas else QUOTAS
        self.world = World(self.session, moto_session, env, self.config.account, quotas=quotas)
        self.world.install()
        assembly = tmp_path / "cdk.out"
        shutil.copytree(synthesized(env).outdir, assembly)
        self.assembly = assembly
        self.deployer = Deployer(self.world, assembly, moto_session)
        monkeypatch.setattr(journey, "run_command", self.deployer)
        moto_session.client("ssm").put_parameter(Name=BOOTSTRAP_VERSION, Value="27", Type="String")
        self._secrets(moto_session, tmp_path)
        self.argv = ["deploy", "--env", env, "--mfa-serial", MFA.format(account=self.config.account), "--yes",
                     "--cdk-out", str(assembly)]
        self.lines: list[str] = []
        monkeypatch.setattr(deploy, "_say", self._say)

    def _say(self, line: str) -> None:
        """The journey's own lines, as the operator sees them; the world learns which step runs."""
        print(line, flush=True)
        self.lines.append(line)
        running = re.match(r"^\[\d+/\d+\] (\w+): running$", line)
        if running:
            self.world.step = running.group(1)

    def _secrets(self, session, tmp_path) -> None:
        from tests.telemetry.stack_outputs import certificate_secret
        from tests.sf_emulator.certs import make_pki

        pki = make_pki(tmp_path / "pki")
        fabric = self.config.service_fabric
        secrets = session.client("secretsmanager")
        secrets.create_secret(Name=fabric.cluster_certificate_secret, SecretString=certificate_secret(pki.server))
        secrets.create_secret(Name=fabric.admin_certificate_secret, SecretString=certificate_secret(pki.client))

    def deploy(self, capsys, monkeypatch) -> tuple[int, str, str]:
        """`telemetry deploy` as typed, the operator typing the MFA code when asked."""
        monkeypatch.setattr("sys.stdin", io.StringIO("123456\n" * 4))
        code = cli.main(self.argv, session_factory=lambda region: self.session)
        out, err = capsys.readouterr()
        return code, out, err


@pytest.fixture(params=["dev", "prod"])
def account(request, moto_session, synthesized, tmp_path, monkeypatch):
    return Account(request.param, moto_session, synthesized, tmp_path, monkeypatch)


def test_the_first_deployment_runs_every_step_as_typed(account, capsys, monkeypatch):
    changes: list[tuple[str, str]] = []
    account.world.fail_after = lambda name: bool(CHANGES.match(name) and changes.append((account.world.step, name)))
    code, out, err = account.deploy(capsys, monkeypatch)
    assert code == 0, out + err
    if account.config.name == "dev":  # what the reruns below fail after, one by one
        assert {step: [name for s, name in changes if s == step] for step in deploy.STEPS} == CHANGES_IN_DEV
    account.world.fail_after = None
    assert [line for line in account.lines if re.match(r"^\[\d/7\] ", line)] == [
        f"[{n}/7] {step}: {said}" for n, step in enumerate(deploy.STEPS, 1) for said in ("running", "done")]
    assert account.lines[-1] == "the environment is deployed: every step is done"
    check_one_of_each(account)
    check_deployed_as_synthesized(account)
    # Run again, the same command: the checks run again, the stacks that read SSM parameters are
    # deployed again as the CDK CLI would (their images may have moved), the rest is done.
    code, out, err = account.deploy(capsys, monkeypatch)
    assert code == 0, out + err
    assert [line.split(" (")[0] for line in account.lines if re.match(r"^\[\d/7\] ", line)][-10:] == [
        "[1/7] preflight: running", "[1/7] preflight: done", "[2/7] deploy: running", "[2/7] deploy: done",
        "[3/7] topics: already done", "[4/7] bootstrap: already done", "[5/7] scale: already done",
        "[6/7] flink: already done", "[7/7] smoke: running", "[7/7] smoke: done"]
    check_one_of_each(account)


def test_seeds_still_preparing_stop_the_first_run_before_any_create_and_the_rerun_creates_the_cluster(
        dev, capsys, monkeypatch):
    """The stack completes while the seeds prepare themselves (no CreationPolicy): the bootstrap step
    sends no create until every seed says its preparation succeeded, and says when to run again."""
    dev.world.preparation = lambda instance: "running|installing the Service Fabric runtime"
    code, out, err = dev.deploy(capsys, monkeypatch)
    assert code == 2, out + err
    assert re.search(r"telemetry: error: bootstrap: .*run again in \d+ minutes", err), err
    assert dev.world.created_clusters == 0
    dev.world.preparation = lambda instance: "succeeded|"
    code, out, err = dev.deploy(capsys, monkeypatch)
    assert code == 0, out + err
    check_one_of_each(dev)


class Terminal(io.StringIO):
    """What the operator types, at a terminal (telemetry deploy asks for a production change only
    on one)."""

    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("answer", ["y", "n"])
def test_a_new_windows_image_in_production_is_shown_asked_for_and_deployed_on_a_yes(prod, capsys, monkeypatch, answer):
    """AWS publishes a new Windows image under the public parameter the ServiceFabric stack reads.
    The next `telemetry deploy --env prod`, without --yes, shows each stack that reads SSM
    parameters through a change-set diff: the two whose values did not move are left alone without
    a question, the ServiceFabric stack's image is shown and asked for, and deployed on a yes."""
    code, out, err = prod.deploy(capsys, monkeypatch)
    assert code == 0, out + err
    fabric = f"{prod.config.stack_prefix}-ServiceFabric"
    image = next(k for k, p in prod.world.stacks[fabric].template["Parameters"].items() if "windows" in p["Default"])
    (windows,) = [name for name in prod.world.public if "windows" in name]
    prod.world.public[windows] = "ami-0a1b2c3d4e5f60718"
    prod.argv.remove("--yes")
    asked: list[str] = []
    monkeypatch.setattr("sys.stdin", Terminal(""))
    monkeypatch.setattr("builtins.input", lambda prompt: asked.append(prompt) or answer)  # the operator's answer
    code = cli.main(prod.argv, session_factory=lambda region: prod.session)
    out, err = capsys.readouterr()
    assert asked == [f"apply this change to {fabric} in prod? [y/N] "], out + err
    assert f"[~] parameter {image}: ami-0c2b0d3fb02824d92 to ami-0a1b2c3d4e5f60718" in out
    left = [line.split(":")[0].strip() for line in prod.lines if "cdk diff shows no change" in line]
    if answer == "y":
        assert code == 0, out + err
        assert prod.world.stacks[fabric].parameters[image] == "ami-0a1b2c3d4e5f60718"
        # Its Amazon Linux image and the brokers did not move: no question, nothing deployed.
        assert left == [f"{prod.config.stack_prefix}-{part}" for part in ("SimulatorFleet", "TelemetrySink")]
    else:  # the run stops at the refused stack, before the stacks after it
        assert code == 1 and f"the change to {fabric} was not applied" in err
        assert prod.world.stacks[fabric].parameters[image] == "ami-0c2b0d3fb02824d92"


def check_deployed_as_synthesized(account: Account) -> None:
    """The deployer checks itself against the assembly: every stack deployed, each with every output
    its template declares, resolved (no intrinsic left), and DescribeStacks answering the same."""
    stacks = deploy.read_cloud_assembly(account.assembly, account.config.stack_prefix)
    assert sorted(account.world.stacks) == sorted(s.name for s in stacks)
    cloudformation = account.session.client("cloudformation")
    for stack in stacks:
        declared = set(stack.template.get("Outputs", {}))
        deployed = account.world.stacks[stack.name].outputs
        assert set(deployed) == declared and all(value and "Fn::" not in value for value in deployed.values()), stack.name
        (described,) = cloudformation.describe_stacks(StackName=stack.name)["Stacks"]
        assert {o["OutputKey"]: o["OutputValue"] for o in described.get("Outputs", [])} == deployed
        assert described["StackStatus"] == "CREATE_COMPLETE"


def check_one_of_each(account: Account) -> None:
    """What a rerun must never make twice: the cluster, the stacks' instances and addresses, the
    MSK cluster, the Flink application's start, the smoke devices."""
    world, session = account.world, account.session
    assert world.created_clusters == 1
    assert sorted(world.stacks) == sorted(s for s in world.stacks if s.startswith(account.config.stack_prefix))
    ec2 = session.client("ec2")
    seeds = ec2.describe_instances(Filters=[{"Name": "tag:sf:nodetype", "Values": ["PrimaryNodeType"]},
                                            {"Name": "instance-state-name", "Values": ["running"]}])["Reservations"]
    assert sum(len(r["Instances"]) for r in seeds) == account.config.service_fabric.seed_node_count
    assert len(ec2.describe_addresses()["Addresses"]) == account.config.network.nat_gateways
    assert len(session.client("kafka").list_clusters_v2()["ClusterInfoList"]) == 1
    things = session.client("iot").list_things()["things"]
    assert len(things) == journey.SMOKE_MQTT_DEVICES


# Operations that change something (the API's verbs for it); a failure right after one is the hard
# case for a rerun: the change took effect, and the run never heard.
CHANGES = re.compile(r"^(Create|Put|Send|Start|Update|Set|Run|Delete|Attach|Associate|Add|Register|Tag|Modify|"
                     r"Terminate|Complete|Publish|Allocate|Release)")
# Every such call the journey itself makes in a first deployment of dev, in order, step by step
# (test_the_first_deployment_runs_every_step_as_typed checks this list against the run); the deploy
# step's changes are the CDK CLI's, preflight makes none. A step added to deploy.STEPS must be
# added here, and then each of its changes is failed once below.
CHANGES_IN_DEV = {
    "preflight": [], "deploy": [],
    "topics": ["SendCommand", "PutParameter", "SendCommand", "DeleteParameter", "PutParameter"],
    "bootstrap": ["PutParameter", "SendCommand", "SendCommand", "PutParameter"],
    "scale": ["UpdateAutoScalingGroup"],
    "flink": ["StartApplication"],
    # The first device's five calls, then the five devices' repeats, then the three Run Commands.
    "smoke": ["CreateThing", "CreateKeysAndCertificate", "PutParameter", "AttachPolicy", "AttachThingPrincipal"] * 5
             + ["SendCommand"] * 3,
}
SMOKE_DEVICE_REPEATS = range(5, 25)  # devices 2-5 repeat device 1's calls: failed after device 1's only


def faults() -> list[tuple[str, int]]:
    """(step, n): fail right after the step's n-th change; (step, -1): the step's own way to fail
    (preflight: its first call, which reads; deploy: a stack fails part way)."""
    found = []
    for step in deploy.STEPS:
        changes = CHANGES_IN_DEV[step]
        found += [(step, -1)] if not changes else [
            (step, n) for n in range(len(changes)) if not (step == "smoke" and n in SMOKE_DEVICE_REPEATS)]
    return found


def fault_at(world: World, step: str, operation: re.Pattern, n: int = 0) -> Callable[[str], bool]:
    """True for the n-th operation matching `operation` that the journey calls during `step`."""
    seen: list[str] = []
    fired: list[str] = []

    def now(name: str) -> bool:
        if fired or world.step != step or not operation.match(name):
            return False
        seen.append(name)
        if len(seen) == n + 1:
            fired.append(name)
            return True
        return False

    now.fired = fired  # type: ignore[attr-defined]
    return now


def fail_then_rerun(account: Account, step: str, n: int, capsys, monkeypatch) -> None:
    world = account.world
    if step == "deploy":
        account.deployer.fail.add(f"{account.config.stack_prefix}-ServiceFabric")
    elif step == "preflight":
        world.fail_after = fault_at(world, step, re.compile("."))
    else:
        world.fail_after = fault_at(world, step, CHANGES, n)
    code, out, err = account.deploy(capsys, monkeypatch)
    # A change the run can do without (the topic token's deletion: it expires; the reconcile's
    # record: the next run reconciles again) is said and passed over; any other stops the run.
    assert code in (0, 1), out + err
    if code == 1:
        # The last line (the MFA prompt, answered from a pipe, ends without a newline).
        assert re.search(rf"telemetry: error: {step}: .*\(run telemetry deploy again to go on from here\)$",
                         err.rstrip().splitlines()[-1]), err
    assert step == "deploy" or world.fail_after.fired  # type: ignore[union-attr]
    world.fail_after = None
    account.deployer.fail.clear()
    if step == "deploy":
        # The seeds' API termination is disabled, so the failed creation's rollback could not delete
        # them, and a production stack is protected: the rerun says what stops the CLI from deleting
        # it, the operator does what it says, and runs again.
        code, out, err = account.deploy(capsys, monkeypatch)
        assert code == 1 and "ROLLBACK_FAILED" in err and "--no-disable-api-termination" in err, out + err
        follow_the_advice(account, err)
    code, out, err = account.deploy(capsys, monkeypatch)
    assert code == 0, out + err
    assert account.lines[-1] == "the environment is deployed: every step is done"
    check_one_of_each(account)


def follow_the_advice(account: Account, err: str) -> None:
    """The commands a deploy step's refusal names, run as the operator would run them."""
    ec2 = account.deployer.aws.client("ec2")
    region = f"--region {account.config.region}"  # every command names the environment's region
    allowed = re.findall(rf"aws ec2 modify-instance-attribute {region} --instance-id (i-\w+) --no-disable-api-termination",
                         err)
    unprotected = re.findall(rf"update-termination-protection --no-enable-termination-protection {region} "
                             r"--stack-name ([\w-]+)", err)
    assert allowed or unprotected, err
    for instance in allowed:
        ec2.modify_instance_attribute(InstanceId=instance, DisableApiTermination={"Value": False})
    for stack in unprotected:
        account.deployer.protect(stack, False)


@pytest.mark.parametrize("step, n", faults(), ids=[f"{s}-{n}" if n >= 0 else s for s, n in faults()])
def test_a_rerun_after_a_change_whose_answer_was_lost_finishes_with_nothing_made_twice(step, n, dev, capsys, monkeypatch):
    """The connection drops right after the step's n-th call that changes something (the change
    made, its answer lost); preflight changes nothing, so its first call fails; the deploy step's
    changes are the CDK CLI's, so a stack fails part way and is rolled back. The same command, run
    again, finishes."""
    fail_then_rerun(dev, step, n, capsys, monkeypatch)


@pytest.mark.parametrize("step", deploy.STEPS)
def test_a_rerun_in_production_after_a_lost_answer_in_each_step_finishes(step, prod, capsys, monkeypatch):
    """The same in prod, after each step's first change: its preflight must not count the
    environment's own addresses, instances and brokers against the quotas it needs, and its
    protected stacks need the operator's hand after a failed creation."""
    fail_then_rerun(prod, step, 0, capsys, monkeypatch)


@pytest.fixture
def dev(moto_session, synthesized, tmp_path, monkeypatch):
    return Account("dev", moto_session, synthesized, tmp_path, monkeypatch)


@pytest.fixture
def prod(moto_session, synthesized, tmp_path, monkeypatch):
    return Account("prod", moto_session, synthesized, tmp_path, monkeypatch, exact_quotas=True)
