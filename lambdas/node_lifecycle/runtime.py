"""The adapters a node lifecycle function works with, created once per Lambda container.

Tests build a Runtime from the emulator and moto-backed adapters; the handlers build one
from Settings with `Runtime.from_settings`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from botocore.config import Config
from sf_rest import (
    ClientCertificate,
    FabricError,
    ServiceFabricClient,
    write_client_certificate,
)
from sf_rest.errors import CONNECT_FAILED, CONNECTION_LOST
from sf_rest.gateway import DEFAULT_RETRY, normalise_thumbprint

from .executions import StepFunctionsExecutions
from .fabric_host import SsmFabricHost
from .instances import Ec2InstanceDirectory
from .interfaces import AutoScalingLifecycle, FabricHost, InstanceDirectory, MembershipLock
from .lifecycle_hooks import AutoScalingLifecycleHooks
from .membership_lock import DynamoDbMembershipLock
from .orphans import Executions
from .patch_baseline import SsmPatchBaseline
from .patch_progress import DynamoDbPatchProgress
from .settings import Settings, SettingsError

# The gateway answers these when its machine is gone or not listening: try the next seed.
UNREACHABLE = frozenset({CONNECT_FAILED, CONNECTION_LOST})
# Auto Scaling's client for heartbeats and completions gives up within 3 tries of 3 s connect +
# 7 s read, with standard mode's jittered backoff between them (at most 1 s, then 2 s:
# botocore.retries.standard.ExponentialBackoff), 33 s in all, so a heartbeat that lands does so
# inside the 60 s stacks/lifecycle_timing.py allows it (HEARTBEAT_LANDING_SECONDS) with a cold
# start; one that does not is tried again by the state machine. (`total_max_attempts` counts the
# first try; botocore's `max_attempts` would count only the retries.)
HEARTBEAT_CLIENT = Config(connect_timeout=3, read_timeout=7, retries={"mode": "standard", "total_max_attempts": 3})


@dataclass
class Runtime:
    settings: Settings
    connect: Callable[[], ServiceFabricClient]  # a client of a gateway that answers
    instances: InstanceDirectory
    host: FabricHost
    lifecycle: AutoScalingLifecycle
    lock: MembershipLock
    clock: Callable[[], float] = time.time
    # (metric name, value, unit) -> CloudWatch; the handlers emit embedded-metric-format logs.
    record_metric: Callable[[str, float, str], None] = lambda name, value, unit: None
    executions: Executions | None = None  # the state machines' executions (the reaper's backstop)
    patch_baseline: SsmPatchBaseline | None = None  # AWS-RunPatchBaseline on a node's machine
    patch_progress: DynamoDbPatchProgress | None = None  # how far the patch round got
    _client: ServiceFabricClient | None = field(default=None, init=False, repr=False)

    @property
    def client(self) -> ServiceFabricClient:
        if self._client is None:
            self._client = self.connect()
        return self._client

    def forget_client(self) -> None:
        """After a connection failure: the next call picks a gateway again."""
        if self._client is not None:
            self._client.close()
            self._client = None

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        session: Any,
        *,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> Runtime:
        """The adapters over one boto3 session. `clock` and `sleep` are the one time source of
        the steps, the lock and the REST client's backoff (tests run them on virtual time)."""

        def client(name: str, config: Config | None = None) -> Any:
            return session.client(name, region_name=settings.region, config=config)

        secrets, ssm, dynamodb = client("secretsmanager"), client("ssm"), client("dynamodb")
        retry = replace(DEFAULT_RETRY, sleep=sleep, clock=clock)

        def make_client(endpoint: str, **options: Any) -> ServiceFabricClient:
            return ServiceFabricClient(endpoint, retry=retry, **options)

        return cls(
            settings=settings,
            connect=lambda: connect_gateway(settings, secrets, ssm, make_client=make_client),
            instances=Ec2InstanceDirectory(client("ec2")),
            host=SsmFabricHost(ssm, add_node_document=settings.add_node_document,
                               stop_host_document=settings.stop_host_document),
            lifecycle=AutoScalingLifecycleHooks(client("autoscaling", HEARTBEAT_CLIENT)),
            lock=DynamoDbMembershipLock(dynamodb, settings.lock_table, clock=clock),
            clock=clock,
            executions=StepFunctionsExecutions(client("stepfunctions")),
            patch_baseline=SsmPatchBaseline(ssm),
            patch_progress=DynamoDbPatchProgress(dynamodb, settings.lock_table, clock),
        )


def read_certificate(secrets: Any, secret_id: str, *keys: str) -> dict[str, str]:
    value = json.loads(secrets.get_secret_value(SecretId=secret_id)["SecretString"])
    missing = [key for key in keys if not (isinstance(value, dict) and value.get(key))]
    if missing:
        raise SettingsError(f"secret {secret_id} lacks {', '.join(missing)}")
    return value


def gateway_thumbprint(ssm: Any, parameter: str) -> str:
    """The thumbprint telemetry/commands/cluster/bootstrap.py published: the functions pin the gateway by it
    and never read the cluster certificate secret (its private key and the node password)."""
    try:
        value = ssm.get_parameter(Name=parameter)["Parameter"]["Value"]
    except ssm.exceptions.ParameterNotFound:
        raise SettingsError(
            f"SSM parameter {parameter} does not exist; telemetry cluster bootstrap publishes it"
        ) from None
    try:
        return normalise_thumbprint(value)
    except ValueError:
        raise SettingsError(f"SSM parameter {parameter} holds {value!r}, not a thumbprint") from None


def connect_gateway(
    settings: Settings,
    secrets: Any,
    ssm: Any,
    *,
    make_client: Callable[..., ServiceFabricClient] = ServiceFabricClient,
) -> ServiceFabricClient:
    """A client of the first gateway (seed node) that answers, with the admin certificate,
    verifying the gateway by the published thumbprint of the cluster certificate."""
    admin = read_certificate(
        secrets, settings.admin_certificate_secret, "certificate", "private_key"
    )
    pinned = gateway_thumbprint(ssm, settings.gateway_thumbprint_parameter)
    written: ClientCertificate = write_client_certificate(
        admin["certificate"], admin["private_key"]
    )
    failures: list[str] = []
    for endpoint in settings.gateway_endpoints:
        client = make_client(endpoint, client_certificate=written, server_thumbprint=pinned)
        try:
            client.get_cluster_configuration_upgrade_status()
        except FabricError as err:
            client.close()
            if err.code not in UNREACHABLE:
                raise
            failures.append(f"{endpoint}: {err.code}")
            continue
        return client
    raise FabricError(CONNECT_FAILED, "no gateway answered: " + "; ".join(failures))
