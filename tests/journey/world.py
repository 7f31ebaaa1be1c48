"""One stand-in account in which `telemetry deploy` runs from its first step to its last.

Everything a step reads was made by an earlier step, in this one world: moto for every service
it models (EC2, Auto Scaling, SSM, S3, Secrets Manager, KMS, IAM, STS, IoT, CloudFormation's stack
records, MSK's control plane), botocore before-call answers checked against each service's model
where moto has no operation (Service Quotas' ListServiceQuotas, Managed Flink's start,
CloudFormation's GetTemplate of what was deployed), the Service Fabric emulator for the cluster.
Only the CDK CLI is replaced: `Deployer` takes the synthesized cloud assembly and deploys each
stack the journey asks for, creating in moto what later steps read, and records the stack with
its outputs resolved as CloudFormation would resolve them.

What each stand-in claims, and its source:
- CloudFormation: a stack's Rules are asserted before anything is created ("Rules syntax", the
  CDK's CheckBootstrapVersion rule); `AWS::SSM::Parameter::Value<...>` parameters are read from
  Parameter Store at deploy time, and a missing one fails the operation ("Use CloudFormation-
  supplied parameter types": "the parameter ... doesn't exist"); Ref/Fn::GetAtt/Fn::ImportValue
  give what the resource's reference page lists as its return values; resources are tagged
  aws:cloudformation:stack-name, -stack-id and -logical-id ("Tag your CloudFormation resources":
  "CloudFormation automatically creates the following stack-level tags"). A failed creation
  leaves ROLLBACK_COMPLETE, or ROLLBACK_FAILED with what its rollback could not delete (an
  instance whose API termination is disabled: EC2 answers OperationNotPermitted); a failed update
  UPDATE_ROLLBACK_COMPLETE, what its cleanup could not delete left behind ("Stack status codes").
  Resource types no step reads get a physical id and nothing else (not in `MAKERS`); a failed
  operation's rollback deletes what it made (`UNMAKERS`).
- Auto Scaling: moto puts a launched instance InService at once. The real launch hook holds it in
  Pending:Wait until the node lifecycle automation joins it (executed under the ASL interpreter in
  tests/lambdas/node_lifecycle); that automation does not run in this world (a gap, said in the
  journey tests).
- Run Command: moto runs no document. The world answers the three documents the journey sends with
  what the instance would do: the cluster-nodes document as tests/telemetry/seed_commands.py answers
  it (the Service Fabric emulator's node list); the create-cluster document creates the emulator's
  cluster from the ClusterConfig it carries (CreateServiceFabricCluster.ps1 makes a node of each
  entry in `nodes`); the fleet's run document writes each host's report where the simulator
  writes it, and the sink's committed Parquet rows of every acknowledged record under smoke/,
  which is what the Flink sink does with a smoke run's records (flink/: SmokeRouting, its
  integration test). The manage-topics document succeeds and changes nothing here (what a fleet
  host does with it: tests/telemetry/commands/topics/test_topics_on_fleet.py, against a real broker).
- Managed Flink: an application is created READY; StartApplication returns an operation id, and
  the application is RUNNING from the next read on (AWS passes through STARTING, which the world
  skips: the journey's wait for a transitional status is tested in tests/telemetry/
  test_deploy.py); DescribeApplicationOperation says SUCCESSFUL (API Reference,
  "StartApplication", "DescribeApplicationOperation"). A start that falls back to READY is not
  modelled here.
- Service Quotas: ListServiceQuotas lists the applied values the test gives (moto lists none).
"""

from __future__ import annotations

import base64
import copy
import datetime
import json
import re
import shutil
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REGION = "eu-west-1"
IMAGE = "ami-12c6146b"  # one of moto's own images: the templates' images are AWS's public parameters
BOOTSTRAP_VERSION = "/cdk-bootstrap/hnb659fds/version"
# AWS's public parameter that the ServiceFabric stack's image comes from: moto ships the Amazon
# Linux ones, not the Windows ones, and refuses a put under /aws/ (as AWS does).
PUBLIC_PARAMETERS = {"/aws/service/ami-windows-latest/Windows_Server-2022-English-Full-Base": "ami-0c2b0d3fb02824d92"}
# What moto's CloudFormation records for each stack: the world holds the resources.
INERT_BODY = json.dumps({"Resources": {"Recorded": {"Type": "AWS::CloudFormation::WaitConditionHandle"}}})


def model_answer(model, response: dict):
    from tests.conftest import model_answer as checked

    return checked(model, response)


class Clients:
    """A boto3 session's clients, each made once: the world and the CDK CLI's stand-in make a few
    hundred calls a journey, and a client costs tens of milliseconds to make."""

    def __init__(self, session) -> None:
        self.session, self.made = session, {}

    def client(self, service: str):
        if service not in self.made:
            self.made[service] = self.session.client(service)
        return self.made[service]


@dataclass
class DeployedStack:
    name: str
    template: dict
    resources: dict[str, tuple[str, dict[str, str]]] = field(default_factory=dict)  # logical id -> (ref, attributes)
    parameters: dict[str, str] = field(default_factory=dict)  # the values its parameters resolved to
    outputs: dict[str, str] = field(default_factory=dict)


@dataclass
class Flink:
    """Managed Flink applications by name: status and operations (kinesisanalyticsv2's model)."""

    status: dict[str, str] = field(default_factory=dict)
    operations: dict[str, dict[str, dict]] = field(default_factory=dict)


class World:
    """The stand-in account: moto (the caller's `mock_aws`), the answers moto lacks, the Service
    Fabric emulator's cluster, and what the journey's steps did (`calls`)."""

    def __init__(self, session, aws, env: str, account: str, *, quotas: dict[str, dict[str, float]]) -> None:
        # `session`: the journey's, which the world answers and faults; `aws`: the world's own
        # hands in the same moto account (what an instance or the Flink job writes), never faulted.
        self.session, self.env, self.account, self.quotas = session, env, account, quotas
        self.aws = Clients(aws)
        self.stacks: dict[str, DeployedStack] = {}
        self.exports: dict[str, str] = {}
        self.flink = Flink()
        self.cluster = None  # the emulated cluster, once the create-cluster document ran
        self.created_clusters = 0
        self.left: dict[str, dict[str, tuple[str, str, dict]]] = {}  # stack -> what its failed rollback left
        self.public = dict(PUBLIC_PARAMETERS)  # AWS's public parameters: a test publishes a new image here
        self.step = ""  # the journey's step running now, as it says
        # What a seed's prepare_node.ps1 status file says (cluster_nodes.yaml's PREPARED= line):
        # done, unless a test holds the seeds in their preparation.
        self.preparation: Callable[[str], str] = lambda instance: "succeeded|"
        self.calls: list[str] = []  # every AWS operation the journey called, in order
        self.fail_after: Callable[[str], bool] | None = None  # operation name -> fail right after it?
        # operation name -> what stops the run while that call is in flight (KeyboardInterrupt for
        # Ctrl-C), or None
        self.interrupt_in: Callable[[str], type[BaseException] | None] | None = None

    # -- the answers moto lacks, on the journey's session -------------------------------------

    def install(self) -> None:
        """Registers the world's answers on the journey's session (before its clients are made)."""
        from tests.conftest import keep_params
        from tests.telemetry.seed_commands import seeds_answer

        events = self.session.events
        for operation in ("ListServiceQuotas", "GetTemplate", "DescribeApplication", "StartApplication",
                          "DescribeApplicationOperation", "ListApplicationOperations", "SendCommand"):
            service = {"ListServiceQuotas": "service-quotas", "GetTemplate": "cloudformation",
                       "SendCommand": "ssm"}.get(operation, "kinesis-analytics-v2")
            events.register(f"provide-client-params.{service}.{operation}", keep_params)
        events.register("before-call.service-quotas.ListServiceQuotas", self._quotas)
        events.register("before-call.cloudformation.GetTemplate", self._template)
        events.register("provide-client-params.cloudformation.DescribeStackResources", keep_params)
        events.register("before-call.cloudformation.DescribeStackResources", self._stack_resources)
        for operation in ("DescribeApplication", "StartApplication", "DescribeApplicationOperation",
                          "ListApplicationOperations"):
            events.register(f"before-call.kinesis-analytics-v2.{operation}", self._flink)
        events.register("after-call.ssm.SendCommand", self._command_sent)
        events.register("provide-client-params", self._watch)  # every call, before any answer is given
        events.register("after-call", self._fail_after)
        seeds_answer(self.session, lambda: self.cluster.list_nodes("", "all", 1000)["Items"] if self.cluster else None,
                     lambda instance: self.cluster is not None, lambda instance: self.preparation(instance))

    def _watch(self, model, **_):
        self.calls.append(model.name)
        stop = self.interrupt_in(model.name) if self.interrupt_in else None
        if stop is not None:
            raise stop

    def _fail_after(self, model, http_response=None, parsed=None, **_):
        """A change made, and then its answer lost: the connection drops after the call took
        effect (botocore raises ConnectionClosedError when the reply never comes)."""
        if self.fail_after and self.fail_after(model.name):
            from botocore.exceptions import ConnectionClosedError

            raise ConnectionClosedError(endpoint_url=f"https://{model.service_model.endpoint_prefix}.{REGION}.amazonaws.com")

    def _quotas(self, model, context, **_):
        service = context["api_params"]["ServiceCode"]
        return model_answer(model, {"Quotas": [
            {"ServiceCode": service, "QuotaName": name, "QuotaCode": f"L-{abs(hash(name)) % 10**8:08d}", "Value": value}
            for name, value in self.quotas.get(service, {}).items()]})

    def _template(self, model, context, **_):
        name = context["api_params"]["StackName"]
        stack = self.stacks.get(name)
        if stack is None:
            return None  # moto answers ValidationError for a stack it does not know
        return model_answer(model, {"TemplateBody": json.dumps(stack.template), "StagesAvailable": ["Original", "Processed"]})

    def _stack_resources(self, model, context, **_):
        """A stack's resources as the world made them (moto's record holds one placeholder), and
        what a failed rollback left, DELETE_FAILED."""
        name = context["api_params"]["StackName"]
        now = datetime.datetime.now(datetime.timezone.utc)
        made = self.stacks[name].resources if name in self.stacks else {}
        rows = [(logical, ref, self.stacks[name].template["Resources"][logical]["Type"], "CREATE_COMPLETE")
                for logical, (ref, _) in made.items()]
        rows += [(logical, ref, kind, "DELETE_FAILED") for logical, (kind, ref, _) in self.left.get(name, {}).items()]
        return model_answer(model, {"StackResources": [
            {"StackName": name, "LogicalResourceId": logical, "PhysicalResourceId": ref, "ResourceType": kind,
             "Timestamp": now, "ResourceStatus": status} for logical, ref, kind, status in rows]})

    def _flink(self, model, context, **_):
        params, name = context["api_params"], context["api_params"].get("ApplicationName", "")
        if name not in self.flink.status:
            return None  # moto answers: ResourceNotFoundException
        operations = self.flink.operations.setdefault(name, {})
        if model.name == "StartApplication":
            operation = f"op-{uuid.uuid4().hex[:12]}"
            now = datetime.datetime.now(datetime.timezone.utc)
            operations[operation] = {"Operation": "StartApplication", "OperationId": operation, "StartTime": now,
                                     "EndTime": now, "OperationStatus": "SUCCESSFUL"}
            self.flink.status[name] = "RUNNING"
            return model_answer(model, {"OperationId": operation})
        if model.name == "DescribeApplication":
            return model_answer(model, {"ApplicationDetail": {
                "ApplicationARN": f"arn:aws:kinesisanalytics:{REGION}:{self.account}:application/{name}", "ApplicationName": name,
                "RuntimeEnvironment": "FLINK-2_2", "ApplicationStatus": self.flink.status[name], "ApplicationVersionId": 1}})
        if model.name == "DescribeApplicationOperation":
            details = {k: v for k, v in operations[params["OperationId"]].items() if k != "OperationId"}
            return model_answer(model, {"ApplicationOperationInfoDetails": details})
        wanted = params.get("OperationStatus")
        return model_answer(model, {"ApplicationOperationInfoList": [
            {k: v for k, v in o.items() if k in ("Operation", "OperationId", "StartTime", "EndTime", "OperationStatus")}
            for o in operations.values() if wanted in (None, o["OperationStatus"])]})

    def _command_sent(self, model, parsed, context, **_):
        """What the instance does with a document the journey sends (see the module's docstring)."""
        params = context["api_params"]
        document = params["DocumentName"]
        if document.endswith("-create-sf-cluster"):
            self._create_cluster(json.loads(base64.b64decode(params["Parameters"]["clusterConfig"][0])))
        elif document.endswith("-run-simulator"):
            self._simulate(params)

    def _create_cluster(self, cluster_config: dict) -> None:
        from tests.sf_emulator.cluster import EmulatedCluster

        self.created_clusters += 1
        if self.cluster is not None:
            # CreateServiceFabricCluster.ps1 on a machine already in a cluster fails in its
            # TestConfiguration ("Microsoft Azure Service Fabric ... already installed"): a
            # second create is the defect these tests look for.
            return
        cluster = EmulatedCluster()
        for node in cluster_config["nodes"]:
            cluster.add_node(node["nodeName"], ip=node["iPAddress"], node_type=node["nodeTypeRef"], is_seed=True,
                             fault_domain=node["faultDomain"], upgrade_domain=node["upgradeDomain"], in_config=True)
        self.cluster = cluster

    def _simulate(self, params: dict) -> None:
        """Each fleet host's report in the results bucket, and every acknowledged record in the
        sink's smoke/ prefix as committed Parquet rows."""
        from tests.telemetry.commands.test_simulate import host_report

        run_id = params["Parameters"]["runId"][0]
        rate = float(params["Parameters"]["ratePerHost"][0])
        duration = int(params["Parameters"]["durationSeconds"][0])
        s3 = self.aws.client("s3")
        results = self.output("SimulatorFleet", "ResultsBucket")
        for instance in params["InstanceIds"]:
            count = int(rate * duration)
            latencies = [2_000 + (n % 1_000) for n in range(count)]
            report = host_report(instance, latencies, run_id=run_id, rate=rate)
            report["duration_s"], report["throughput_msgs_per_s"] = float(duration), count / duration
            report["hosts"][0]["throughput_msgs_per_s"] = count / duration
            s3.put_object(Bucket=results, Key=f"runs/{run_id}/{instance}.json", Body=json.dumps(report))
            self._committed(run_id, count, instance)

    def _committed(self, run_id: str, count: int, instance: str) -> None:
        import tempfile

        import duckdb

        from stacks.naming import SMOKE_PREFIX

        bucket = self.output("TelemetrySink", "TelemetryBucket")
        with tempfile.TemporaryDirectory() as folder:
            local = Path(folder) / "part.parquet"
            with duckdb.connect() as db:
                db.execute(f"COPY (SELECT '{run_id}' AS run_id, range AS seq FROM range({count})) TO '{local}' "
                           "(FORMAT parquet)")
            hour = datetime.datetime.now(datetime.timezone.utc).strftime("dt=%Y-%m-%d/hour=%H")
            self.aws.client("s3").upload_file(str(local), bucket,
                                                  f"{SMOKE_PREFIX}/{hour}/part-{uuid.uuid4()}-{instance}-0.parquet")

    def output(self, part: str, key: str) -> str:
        return self.stacks[f"Telemetry-{self.env}-{part}"].outputs[key]


class Deployer:
    """The CDK CLI, as `telemetry deploy` runs it (telemetry/shared/cdk_cli.py): `synth --output
    DIR` writes the real synthesized cloud assembly there; `deploy STACK --app DIR` deploys that
    stack of it into the world; `diff` prints nothing. `fail` names stacks whose deployment fails
    part way (after its first resources were made)."""

    def __init__(self, world: World, assembly: Path, deployer_session) -> None:
        self.world, self.assembly = world, assembly
        self.aws = Clients(deployer_session)  # the CLI's own calls: not the journey's, so no fault hits them
        self.calls: list[list[str]] = []
        self.fail: set[str] = set()
        self.interrupt: dict[str, type[BaseException]] = {}  # stack -> what stops the CLI while it waits on it

    def __call__(self, command: Sequence[str]) -> int:
        from telemetry.shared import cdk_cli

        assert list(command[:2]) == cdk_cli.command()[:2]
        verb, rest = command[2], list(command[3:])
        self.calls.append([verb, *rest])
        if verb == "synth":
            out = Path(rest[rest.index("--output") + 1])
            if out.resolve() != self.assembly.resolve():
                shutil.copytree(self.assembly, out, dirs_exist_ok=True)
            return 0
        if verb == "diff":
            return self.diff(rest)
        assert verb == "deploy" and "--exclusively" in rest
        app = Path(rest[rest.index("--app") + 1])
        if rest[0] in self.interrupt:
            # Stopped while the CLI waits on the stack: CloudFormation goes on without it.
            stop = self.interrupt.pop(rest[0])
            self.deploy(rest[0], app)
            raise stop
        return self.deploy(rest[0], app)

    def diff(self, rest: list[str]) -> int:
        """`cdk diff STACK --app DIR --exclusively [--method change-set --fail]`: the template and,
        with a change set, the parameters CloudFormation would resolve now against what the stack
        was deployed with (the CLI adds a change set's resource changes to the diff). Exit 1 with
        --fail when anything differs (cdk-toolkit diff, diffFails), else 0."""
        assert "--exclusively" in rest
        name, app = rest[0], Path(rest[rest.index("--app") + 1])
        manifest = json.loads((app / "manifest.json").read_text())["artifacts"][name]
        template = json.loads((app / manifest["properties"]["templateFile"]).read_text())
        deployed = self.world.stacks[name]
        differs = template != deployed.template
        if "--method" in rest and rest[rest.index("--method") + 1] == "change-set":
            moved = {k: v for k, v in self._parameters(template).items() if deployed.parameters.get(k) != v}
            for key, value in moved.items():
                print(f"[~] parameter {key}: {deployed.parameters.get(key)} to {value}")
            differs = differs or bool(moved)
        print(f"Stack {name}" + ("" if differs else "\nThere were no differences"))
        return 1 if differs and "--fail" in rest else 0

    # -- a stack --------------------------------------------------------------------------

    def deploy(self, name: str, app: Path) -> int:
        manifest = json.loads((app / "manifest.json").read_text())["artifacts"][name]
        template = json.loads((app / manifest["properties"]["templateFile"]).read_text())
        existing = self._existing(name)
        try:
            parameters = self._parameters(template)
            self._rules(template, parameters)
        except DeployFailed as failure:
            print(f"❌ {name} failed: {failure}")
            return 1
        creating = not existing or existing["StackStatus"] in ("ROLLBACK_COMPLETE", "ROLLBACK_FAILED")
        cloudformation = self.aws.client("cloudformation")
        properties = manifest.get("properties", {})
        if creating:
            if existing:  # the CLI deletes a stack whose creation failed, then creates it again
                if existing.get("EnableTerminationProtection") or not self._delete_left(name):
                    self._status(name, "DELETE_FAILED" if not existing.get("EnableTerminationProtection")
                                 else existing["StackStatus"])
                    print(f"❌ {name}: Failed deleting stack {name} that had previously failed creation")
                    return 1
                cloudformation.delete_stack(StackName=name)
            self.stack_id = cloudformation.create_stack(
                StackName=name, TemplateBody=INERT_BODY, EnableTerminationProtection=bool(properties.get("terminationProtection")),
                Tags=[{"Key": k, "Value": v} for k, v in (properties.get("tags") or {}).items()])["StackId"]
        else:
            self.stack_id = existing["StackId"]
        before = self.world.stacks.get(name) if not creating else None
        stack = DeployedStack(name, template, dict(before.resources) if before else {})
        made: list[tuple[str, str]] = []
        for logical in creation_order(template["Resources"]):
            if logical in stack.resources:
                continue
            # Part way: right after its first instance (the hard case for a rollback: the seeds'
            # API termination is disabled), or half way through a stack without one.
            part_way = (made[-1][1] == "AWS::EC2::Instance") if made and any(
                r["Type"] == "AWS::EC2::Instance" for r in template["Resources"].values()) else (
                len(made) >= len(template["Resources"]) // 2)
            if name in self.fail and part_way:
                print(f"❌ {name} failed: {logical} CREATE_FAILED (injected)")
                rolled_back = self._roll_back(made, stack)
                # An update's new resources go in its cleanup, whose failures leave them behind and
                # the stack UPDATE_ROLLBACK_COMPLETE (cloudformation-coverage-roadmap#744).
                self._status(name, ("ROLLBACK_COMPLETE" if rolled_back else "ROLLBACK_FAILED") if creating
                             else "UPDATE_ROLLBACK_COMPLETE")
                return 1
            stack.resources[logical] = self._create(name, logical, template["Resources"][logical], stack, parameters)
            made.append((logical, template["Resources"][logical]["Type"]))
        stack.parameters = parameters
        stack.outputs = {key: str(self._resolve(o["Value"], stack, parameters))
                         for key, o in template.get("Outputs", {}).items()}
        for key, o in template.get("Outputs", {}).items():
            if "Export" in o:
                self.world.exports[o["Export"]["Name"]] = stack.outputs[key]
        body = json.dumps({**json.loads(INERT_BODY), "Outputs": {k: {"Value": v} for k, v in stack.outputs.items()}})
        cloudformation.update_stack(StackName=name, TemplateBody=body)
        self.world.stacks[name] = stack
        self._status(name, "CREATE_COMPLETE" if creating else "UPDATE_COMPLETE")
        return 0

    def _existing(self, name: str) -> dict:
        cloudformation = self.aws.client("cloudformation")
        try:
            (stack,) = cloudformation.describe_stacks(StackName=name)["Stacks"]
        except cloudformation.exceptions.ClientError:
            return {}
        return stack

    def _status(self, name: str, status: str) -> None:
        """The status CloudFormation leaves (moto completes every operation it is given)."""
        from moto.cloudformation.models import cloudformation_backends

        backend = cloudformation_backends[self.world.account][REGION]
        (record,) = [s for s in backend.stacks.values() if s.name == name and s.status != "DELETE_COMPLETE"]
        record.status = status

    def protect(self, name: str, protected: bool) -> None:
        """UpdateTerminationProtection, which moto does not implement: its stack record."""
        from moto.cloudformation.models import cloudformation_backends

        backend = cloudformation_backends[self.world.account][REGION]
        (record,) = [s for s in backend.stacks.values() if s.name == name and s.status != "DELETE_COMPLETE"]
        record.enable_termination_protection = protected

    def _roll_back(self, made: list[tuple[str, str]], stack: DeployedStack) -> bool:
        """A failed operation's rollback deletes what it created, newest first ("Stack failure
        options": "roll back all stack resources"). What cannot be deleted is left, DELETE_FAILED
        (an instance with API termination disabled: EC2 refuses, OperationNotPermitted), and the
        rollback has failed. True when nothing was left."""
        left: dict[str, tuple[str, str, dict]] = {}
        for logical, kind in reversed(made):
            ref, attributes = stack.resources.pop(logical)
            try:
                UNMAKERS.get(kind, lambda *a: None)(self, ref, attributes)
            except self.aws.client("ec2").exceptions.ClientError:
                left[logical] = (kind, ref, attributes)
        self.world.left[stack.name] = left
        return not left

    def _delete_left(self, name: str) -> bool:
        """DeleteStack of a failed creation: what its rollback left, deleted now if it can be."""
        left = self.world.left.get(name, {})
        for logical, (kind, ref, attributes) in list(left.items()):
            try:
                UNMAKERS.get(kind, lambda *a: None)(self, ref, attributes)
            except self.aws.client("ec2").exceptions.ClientError:
                return False
            del left[logical]
        return True

    def _parameters(self, template: dict) -> dict[str, str]:
        ssm = self.aws.client("ssm")
        values = {}
        for key, parameter in template.get("Parameters", {}).items():
            if parameter["Type"].startswith("AWS::SSM::Parameter::Value<"):
                name = parameter["Default"]
                if name in self.world.public:
                    values[key] = self.world.public[name]
                    continue
                try:
                    values[key] = ssm.get_parameter(Name=name)["Parameter"]["Value"]
                except ssm.exceptions.ParameterNotFound:
                    raise DeployFailed(f"Unable to fetch parameters [{name}] from parameter store for this account.") from None
            else:
                values[key] = parameter.get("Default", "")
        return values

    def _rules(self, template: dict, parameters: dict[str, str]) -> None:
        for rule in template.get("Rules", {}).values():
            for assertion in rule["Assertions"]:
                if not self._condition(assertion["Assert"], parameters):
                    raise DeployFailed(assertion["AssertDescription"])

    def _condition(self, expression: Any, parameters: dict[str, str]) -> bool:
        (function, argument), = expression.items()
        if function == "Fn::Not":
            return not self._condition(argument[0], parameters)
        if function == "Fn::Contains":
            values, ref = argument
            return parameters[ref["Ref"]] in values
        raise AssertionError(f"a rule function the world does not evaluate: {function}")

    # -- resources ------------------------------------------------------------------------

    def _resolve(self, value: Any, stack: DeployedStack, parameters: dict[str, str]) -> Any:
        if isinstance(value, list):
            return [self._resolve(v, stack, parameters) for v in value]
        if not isinstance(value, dict):
            return value
        if len(value) == 1:
            (key, argument), = value.items()
            if key == "Ref":
                return self._ref(argument, stack, parameters)
            if key == "Fn::GetAtt":
                logical, attribute = argument if isinstance(argument, list) else argument.split(".", 1)
                ref, attributes = stack.resources[logical]
                return attributes.get(attribute, f"{ref}.{attribute}")
            if key == "Fn::ImportValue":
                return self.world.exports[self._resolve(argument, stack, parameters)]
            if key == "Fn::Join":
                separator, parts = argument
                return separator.join(str(p) for p in self._resolve(parts, stack, parameters))
            if key == "Fn::Select":
                index, items = argument
                return self._resolve(items, stack, parameters)[int(index)]
            if key == "Fn::Sub":
                text, names = (argument, {}) if isinstance(argument, str) else argument
                names = {k: self._resolve(v, stack, parameters) for k, v in names.items()}
                return re.sub(r"\$\{([^}]+)\}", lambda m: str(names.get(m.group(1)) or self._sub(m.group(1), stack, parameters)),
                              text)
            if key == "Fn::Split":
                separator, text = argument
                return str(self._resolve(text, stack, parameters)).split(separator)
            if key == "Fn::GetAZs":
                return [f"{REGION}{z}" for z in "abc"]
            if key == "Fn::Base64":
                return base64.b64encode(str(self._resolve(argument, stack, parameters)).encode()).decode()
        return {k: self._resolve(v, stack, parameters) for k, v in value.items()}

    def _sub(self, name: str, stack: DeployedStack, parameters: dict[str, str]) -> str:
        if name.startswith("!"):  # ${!Literal} is the text ${Literal} (Fn::Sub)
            return "${" + name[1:] + "}"
        if "." in name:
            logical, attribute = name.split(".", 1)
            return str(self._resolve({"Fn::GetAtt": [logical, attribute]}, stack, parameters))
        return str(self._ref(name, stack, parameters))

    def _ref(self, name: str, stack: DeployedStack, parameters: dict[str, str]) -> str:
        pseudo = {"AWS::Region": REGION, "AWS::AccountId": self.world.account, "AWS::Partition": "aws", "AWS::URLSuffix": "amazonaws.com",
                  "AWS::StackName": stack.name, "AWS::NoValue": None}
        if name in pseudo:
            return pseudo[name]
        if name in parameters:
            return parameters[name]
        return stack.resources[name][0]

    def _create(self, stack_name: str, logical: str, resource: dict, stack: DeployedStack,
                parameters: dict[str, str]) -> tuple[str, dict[str, str]]:
        kind = resource["Type"]
        properties = self._resolve(resource.get("Properties", {}), stack, parameters)
        tags = [*_tags(properties.get("Tags")), {"Key": "aws:cloudformation:stack-name", "Value": stack_name},
                {"Key": "aws:cloudformation:stack-id", "Value": self.stack_id},
                {"Key": "aws:cloudformation:logical-id", "Value": logical}]
        maker = MAKERS.get(kind)
        self.stack_name = stack_name
        if maker is None:
            service = kind.split("::")[1].lower()
            arn = f"arn:aws:{service}:{REGION}:{self.world.account}:{kind.split('::')[-1].lower()}/{logical}/" \
                  f"{uuid.uuid4().hex[:16]}/{uuid.uuid4().hex[:16]}"
            # Elastic Load Balancing's resources answer Ref with their ARN (its reference pages).
            ref = arn if service == "elasticloadbalancingv2" else f"{logical}-{uuid.uuid4().hex[:8]}"
            return ref, {"Arn": arn}
        return maker(self, logical, properties, tags)


class DeployFailed(Exception):
    pass


def creation_order(resources: dict[str, dict]) -> list[str]:
    """Each resource after those it references (Ref, Fn::GetAtt, ${...} in Fn::Sub) or names in
    DependsOn, as CloudFormation orders creation ("DependsOn attribute")."""

    def references(value: Any) -> set[str]:
        if isinstance(value, list):
            return set().union(*map(references, value)) if value else set()
        if isinstance(value, str):
            return {m.split(".")[0] for m in re.findall(r"\$\{([^}!]+)\}", value)}
        if not isinstance(value, dict):
            return set()
        found: set[str] = set()
        for key, argument in value.items():
            if key == "Ref" and isinstance(argument, str):
                found.add(argument)
            elif key == "Fn::GetAtt":
                found.add(argument[0] if isinstance(argument, list) else argument.split(".")[0])
            elif key == "Fn::Sub":
                found |= references(argument if isinstance(argument, str) else argument)
            else:
                found |= references(argument)
        return found

    needs = {}
    for logical, resource in resources.items():
        depends = resource.get("DependsOn", [])
        depends = [depends] if isinstance(depends, str) else depends
        needs[logical] = (references(resource.get("Properties", {})) | set(depends)) & resources.keys()
    ordered: list[str] = []
    while needs:
        ready = sorted(name for name, waiting in needs.items() if not waiting)
        assert ready, f"resources that reference each other: {sorted(needs)}"
        ordered += ready
        for name in ready:
            del needs[name]
        for waiting in needs.values():
            waiting.difference_update(ready)
    return ordered


def _tags(tags: Any) -> list[dict[str, str]]:
    if isinstance(tags, dict):
        return [{"Key": k, "Value": v} for k, v in tags.items()]
    return [{"Key": t["Key"], "Value": t["Value"]} for t in tags or []]


def _aws_tags(tags: list[dict[str, str]]) -> list[dict[str, str]]:
    """The tags an API call may set: aws: is reserved to AWS ("Tag naming limits"), which moto
    enforces; the aws:cloudformation tags are CloudFormation's own, set here beside them."""
    return [t for t in tags if not t["Key"].startswith("aws:")]


# -- what each resource type makes (its reference page's Ref and Fn::GetAtt) ------------------


def _vpc(d: Deployer, logical: str, p: dict, tags: list) -> tuple[str, dict]:
    ec2 = d.aws.client("ec2")
    vpc = ec2.create_vpc(CidrBlock=p["CidrBlock"])["Vpc"]
    _tag(d, vpc["VpcId"], tags)
    group = ec2.describe_security_groups(Filters=[{"Name": "vpc-id", "Values": [vpc["VpcId"]]}])["SecurityGroups"][0]
    return vpc["VpcId"], {"CidrBlock": p["CidrBlock"], "DefaultSecurityGroup": group["GroupId"], "VpcId": vpc["VpcId"]}


def _subnet(d: Deployer, logical: str, p: dict, tags: list) -> tuple[str, dict]:
    ec2 = d.aws.client("ec2")
    subnet = ec2.create_subnet(VpcId=p["VpcId"], CidrBlock=p["CidrBlock"], AvailabilityZone=p["AvailabilityZone"])["Subnet"]
    _tag(d, subnet["SubnetId"], tags)
    return subnet["SubnetId"], {"AvailabilityZone": p["AvailabilityZone"], "SubnetId": subnet["SubnetId"]}


def _eip(d: Deployer, logical: str, p: dict, tags: list) -> tuple[str, dict]:
    ec2 = d.aws.client("ec2")
    address = ec2.allocate_address(Domain="vpc")
    _tag(d, address["AllocationId"], tags)
    return address["PublicIp"], {"AllocationId": address["AllocationId"], "PublicIp": address["PublicIp"]}


def _nat(d: Deployer, logical: str, p: dict, tags: list) -> tuple[str, dict]:
    ec2 = d.aws.client("ec2")
    nat = ec2.create_nat_gateway(SubnetId=p["SubnetId"], AllocationId=p["AllocationId"])["NatGateway"]
    _tag(d, nat["NatGatewayId"], tags)
    return nat["NatGatewayId"], {}


def _tag(d: Deployer, resource: str, tags: list) -> None:
    from moto.ec2.models import ec2_backends

    d.aws.client("ec2").create_tags(Resources=[resource], Tags=_aws_tags(tags))
    # CloudFormation's own aws: tags, past the API's refusal of the prefix.
    ec2_backends[d.world.account][REGION].create_tags([resource], {t["Key"]: t["Value"] for t in tags if t["Key"].startswith("aws:")})


def _instance(d: Deployer, logical: str, p: dict, tags: list) -> tuple[str, dict]:
    ec2 = d.aws.client("ec2")
    instance = ec2.run_instances(
        ImageId=IMAGE, MinCount=1, MaxCount=1, InstanceType=p.get("InstanceType", "m6i.2xlarge"), SubnetId=p["SubnetId"],
        PrivateIpAddress=p["PrivateIpAddress"],
        TagSpecifications=[{"ResourceType": "instance", "Tags": _aws_tags(tags)}],
    )["Instances"][0]
    _tag(d, instance["InstanceId"], [t for t in tags if t["Key"].startswith("aws:")])
    if p.get("DisableApiTermination"):  # moto's RunInstances drops it; its ModifyInstanceAttribute keeps it
        ec2.modify_instance_attribute(InstanceId=instance["InstanceId"], DisableApiTermination={"Value": True})
    return instance["InstanceId"], {"PrivateIp": instance["PrivateIpAddress"], "SubnetId": p["SubnetId"],
                                    "AvailabilityZone": instance["Placement"]["AvailabilityZone"]}


def _terminate(d: Deployer, ref: str, attributes: dict) -> None:
    """TerminateInstances, which frees the instance's private address for the next one ("the
    private IPv4 address is released when the instance is terminated", EC2 User Guide, "Private
    IPv4 addresses"): moto keeps it until the instance object is collected, so it is freed here."""
    from moto.ec2.models import ec2_backends

    d.aws.client("ec2").terminate_instances(InstanceIds=[ref])
    ec2_backends[d.world.account][REGION].get_subnet(attributes["SubnetId"]).del_subnet_ip(attributes["PrivateIp"])


def _launch_template(d: Deployer, logical: str, p: dict, tags: list) -> tuple[str, dict]:
    ec2 = d.aws.client("ec2")
    data = p.get("LaunchTemplateData", {})
    kept = {k: data[k] for k in ("ImageId", "InstanceType") if k in data}
    made = ec2.create_launch_template(LaunchTemplateName=p.get("LaunchTemplateName") or f"{logical}-{uuid.uuid4().hex[:6]}",
                                      LaunchTemplateData={"ImageId": IMAGE, **kept})["LaunchTemplate"]
    return made["LaunchTemplateId"], {"LatestVersionNumber": str(made["LatestVersionNumber"]),
                                      "DefaultVersionNumber": str(made["DefaultVersionNumber"])}


def _group(d: Deployer, logical: str, p: dict, tags: list) -> tuple[str, dict]:
    autoscaling = d.aws.client("autoscaling")
    name = p.get("AutoScalingGroupName") or f"{logical}-{uuid.uuid4().hex[:8]}"
    autoscaling.create_auto_scaling_group(
        AutoScalingGroupName=name, MinSize=int(p["MinSize"]), MaxSize=int(p["MaxSize"]),
        DesiredCapacity=int(p.get("DesiredCapacity", p["MinSize"])),
        LaunchTemplate={"LaunchTemplateId": p["LaunchTemplate"]["LaunchTemplateId"],
                        "Version": str(p["LaunchTemplate"]["Version"])},
        VPCZoneIdentifier=",".join(p["VPCZoneIdentifier"]),
        # CloudFormation's aws: tags too, on the group and every instance it launches (the
        # AutoScalingGroup TagProperty page: "AWS CloudFormation adds the following tags to all
        # Auto Scaling groups and associated instances").
        Tags=[{"Key": t["Key"], "Value": t["Value"], "PropagateAtLaunch": bool(t.get("PropagateAtLaunch", True))}
              for t in p.get("Tags", [])] + [{**t, "PropagateAtLaunch": True} for t in tags if t["Key"].startswith("aws:")],
    )
    return name, {}


def _parameter(d: Deployer, logical: str, p: dict, tags: list) -> tuple[str, dict]:
    d.aws.client("ssm").put_parameter(Name=p["Name"], Value=str(p["Value"]), Type=p.get("Type", "String"), Overwrite=True)
    return p["Name"], {"Type": p.get("Type", "String"), "Value": str(p["Value"])}


def _document(d: Deployer, logical: str, p: dict, tags: list) -> tuple[str, dict]:
    d.aws.client("ssm").create_document(Name=p["Name"], Content=json.dumps(p["Content"]),
                                        DocumentType=p.get("DocumentType", "Command"), DocumentFormat="JSON")
    return p["Name"], {}


def _bucket(d: Deployer, logical: str, p: dict, tags: list) -> tuple[str, dict]:
    name = p.get("BucketName") or f"{logical.lower()[:40]}-{uuid.uuid4().hex[:12]}"
    d.aws.client("s3").create_bucket(Bucket=name, CreateBucketConfiguration={"LocationConstraint": REGION})
    return name, {"Arn": f"arn:aws:s3:::{name}", "DomainName": f"{name}.s3.amazonaws.com"}


def _secret(d: Deployer, logical: str, p: dict, tags: list) -> tuple[str, dict]:
    made = d.aws.client("secretsmanager").create_secret(Name=p.get("Name") or f"{logical}-{uuid.uuid4().hex[:6]}",
                                                       SecretString=p.get("SecretString") or uuid.uuid4().hex)
    return made["ARN"], {"Id": made["ARN"]}


def _key(d: Deployer, logical: str, p: dict, tags: list) -> tuple[str, dict]:
    key = d.aws.client("kms").create_key(Description=p.get("Description", logical))["KeyMetadata"]
    return key["KeyId"], {"Arn": key["Arn"], "KeyId": key["KeyId"]}


def _role(d: Deployer, logical: str, p: dict, tags: list) -> tuple[str, dict]:
    # A name CloudFormation makes up: stack name, logical id, random suffix (64 characters at most).
    name = p.get("RoleName") or f"{d.stack_name[:20]}-{logical[:30]}-{uuid.uuid4().hex[:12].upper()}"
    role = d.aws.client("iam").create_role(RoleName=name, AssumeRolePolicyDocument=json.dumps(p["AssumeRolePolicyDocument"]))
    return name, {"Arn": role["Role"]["Arn"], "RoleId": role["Role"]["RoleId"]}


def _iot_policy(d: Deployer, logical: str, p: dict, tags: list) -> tuple[str, dict]:
    made = d.aws.client("iot").create_policy(policyName=p["PolicyName"], policyDocument=json.dumps(p["PolicyDocument"]))
    return p["PolicyName"], {"Arn": made["policyArn"]}


def _kafka(d: Deployer, logical: str, p: dict, tags: list) -> tuple[str, dict]:
    group = p["BrokerNodeGroupInfo"]
    # The aws:cloudformation tags: the AWS::MSK::Cluster schema declares cloudFormationSystemTags.
    made = d.aws.client("kafka").create_cluster_v2(ClusterName=p["ClusterName"], Tags={
        t["Key"]: t["Value"] for t in tags if t["Key"].startswith("aws:")}, Provisioned={
        "BrokerNodeGroupInfo": {"InstanceType": group["InstanceType"], "ClientSubnets": group["ClientSubnets"],
                                "StorageInfo": {"EbsStorageInfo": {"VolumeSize": int(group["StorageInfo"]["EBSStorageInfo"]["VolumeSize"])}}},
        "KafkaVersion": p["KafkaVersion"], "NumberOfBrokerNodes": int(p["NumberOfBrokerNodes"])})
    # MSK's ARNs name the cluster, then its id (MSK API Reference, "Cluster": ".../cluster/<name>/<uuid>");
    # moto's leave the name out.
    arn = made["ClusterArn"].replace("/", f"/{p['ClusterName']}/", 1)
    return arn, {"Arn": arn}


def _custom_aws(d: Deployer, logical: str, p: dict, tags: list) -> tuple[str, dict]:
    """AwsCustomResource: its SDK call's answer at the paths it names. GetBootstrapBrokers (moto
    does not implement it) answers each broker's DNS name and port as MSK writes them ("Get the
    bootstrap brokers", MSK Developer Guide: b-N.<cluster>.<id>.c2.kafka.<region>.amazonaws.com,
    9098 for IAM, 9096 for SCRAM)."""
    call = json.loads(p["Create"]) if isinstance(p.get("Create"), str) else {}
    attributes: dict[str, str] = {}
    if call.get("action") == "GetBootstrapBrokers":
        cluster = call["parameters"]["ClusterArn"].rsplit("/", 1)[-1][:6]
        port = {"BootstrapBrokerStringSaslIam": 9098, "BootstrapBrokerStringSaslScram": 9096}
        for path in call["outputPaths"]:
            attributes[path] = ",".join(f"b-{n}.telemetry-{d.world.env}.{cluster}.c2.kafka.{REGION}.amazonaws.com:{port[path]}"
                                        for n in (1, 2, 3))
    return f"{logical}-{uuid.uuid4().hex[:8]}", attributes


def _flink(d: Deployer, logical: str, p: dict, tags: list) -> tuple[str, dict]:
    d.world.flink.status[p["ApplicationName"]] = "READY"  # CreateApplication: "the application is in the READY state"
    return p["ApplicationName"], {}


MAKERS: dict[str, Callable[..., tuple[str, dict]]] = {
    "AWS::EC2::VPC": _vpc, "AWS::EC2::Subnet": _subnet, "AWS::EC2::EIP": _eip, "AWS::EC2::NatGateway": _nat,
    "AWS::EC2::Instance": _instance, "AWS::EC2::LaunchTemplate": _launch_template,
    "AWS::AutoScaling::AutoScalingGroup": _group, "AWS::SSM::Parameter": _parameter, "AWS::SSM::Document": _document,
    "AWS::S3::Bucket": _bucket, "AWS::SecretsManager::Secret": _secret, "AWS::KMS::Key": _key, "AWS::IAM::Role": _role,
    "AWS::IoT::Policy": _iot_policy, "AWS::MSK::Cluster": _kafka, "Custom::AWS": _custom_aws,
    "AWS::KinesisAnalyticsV2::Application": _flink,
}


def _client(d: Deployer, service: str):
    return d.aws.client(service)


UNMAKERS: dict[str, Callable[[Deployer, str, dict], Any]] = {
    "AWS::EC2::Instance": _terminate,
    "AWS::EC2::EIP": lambda d, ref, a: _client(d, "ec2").release_address(AllocationId=a["AllocationId"]),
    "AWS::EC2::NatGateway": lambda d, ref, a: _client(d, "ec2").delete_nat_gateway(NatGatewayId=ref),
    "AWS::EC2::Subnet": lambda d, ref, a: _client(d, "ec2").delete_subnet(SubnetId=ref),
    "AWS::EC2::VPC": lambda d, ref, a: _client(d, "ec2").delete_vpc(VpcId=ref),
    "AWS::EC2::LaunchTemplate": lambda d, ref, a: _client(d, "ec2").delete_launch_template(LaunchTemplateId=ref),
    "AWS::AutoScaling::AutoScalingGroup": lambda d, ref, a: _client(d, "autoscaling").delete_auto_scaling_group(
        AutoScalingGroupName=ref, ForceDelete=True),
    "AWS::SSM::Parameter": lambda d, ref, a: _client(d, "ssm").delete_parameter(Name=ref),
    "AWS::SSM::Document": lambda d, ref, a: _client(d, "ssm").delete_document(Name=ref),
    "AWS::S3::Bucket": lambda d, ref, a: _client(d, "s3").delete_bucket(Bucket=ref),
    "AWS::SecretsManager::Secret": lambda d, ref, a: _client(d, "secretsmanager").delete_secret(
        SecretId=ref, ForceDeleteWithoutRecovery=True),
    "AWS::KMS::Key": lambda d, ref, a: _client(d, "kms").schedule_key_deletion(KeyId=ref, PendingWindowInDays=7),
    "AWS::IAM::Role": lambda d, ref, a: _client(d, "iam").delete_role(RoleName=ref),
    "AWS::IoT::Policy": lambda d, ref, a: _client(d, "iot").delete_policy(policyName=ref),
    "AWS::MSK::Cluster": lambda d, ref, a: _client(d, "kafka").delete_cluster(ClusterArn=ref.replace(
        f"/{ref.split('/')[1]}/", "/", 1)),
    "AWS::KinesisAnalyticsV2::Application": lambda d, ref, a: d.world.flink.status.pop(ref, None),
}
