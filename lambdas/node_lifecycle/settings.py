"""The node lifecycle functions' settings, read from their environment once at start-up.

A bad deployment fails on its first invocation with one message naming the variable,
not halfway through a drain.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


class SettingsError(Exception):
    """An environment variable is missing or malformed; the message names it."""


@dataclass(frozen=True)
class Settings:
    region: str
    gateway_endpoints: tuple[str, ...]  # https://<seed address>:19080, tried in order
    admin_certificate_secret: str  # JSON: certificate, private_key (PEM): the client identity
    gateway_thumbprint_parameter: str  # SSM parameter: the cluster certificate's thumbprint, pinned
    lock_table: str
    lock_ttl_seconds: int
    scaling_node_type: str
    add_node_document: str
    stop_host_document: str
    workflow_timeout_seconds: int  # a drain or join that takes longer fails and alarms
    zombie_down_seconds: int  # how long a node must be Down before the reaper removes it
    metrics_namespace: str
    cluster_name: str  # the metrics' Cluster dimension
    # The reaper's backstop for lost lifecycle events (orphans.py).
    scaling_group_name: str = ""
    launch_hook_name: str = ""
    terminate_hook_name: str = ""
    scale_out_state_machine_arn: str = ""
    scale_in_state_machine_arn: str = ""
    global_timeout_seconds: int = 0  # a lifecycle action's longest life
    patch_node_timeout_seconds: int = 0  # a patched seed's planned restart is not "Down" for this long

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> Settings:
        def text(name: str) -> str:
            value = environ.get(name, "").strip()
            if not value:
                raise SettingsError(f"environment variable {name} is not set")
            return value

        def seconds(name: str, minimum: int) -> int:
            value = text(name)
            if not value.isdigit() or int(value) < minimum:
                raise SettingsError(
                    f"environment variable {name}={value!r}: expected whole seconds >= {minimum}"
                )
            return int(value)

        endpoints = tuple(e.strip() for e in text("SF_GATEWAY_ENDPOINTS").split(",") if e.strip())
        wrong = [e for e in endpoints if not e.startswith("https://")]
        if wrong:
            raise SettingsError(
                f"SF_GATEWAY_ENDPOINTS: {', '.join(wrong)} is not https://HOST:PORT "
                "(the gateway needs the admin client certificate, so TLS only)"
            )
        return cls(
            region=text("AWS_REGION"),
            gateway_endpoints=endpoints,
            admin_certificate_secret=text("SF_ADMIN_CERTIFICATE_SECRET"),
            gateway_thumbprint_parameter=text("SF_GATEWAY_THUMBPRINT_PARAMETER"),
            lock_table=text("LOCK_TABLE_NAME"),
            lock_ttl_seconds=seconds("LOCK_TTL_SECONDS", 60),
            scaling_node_type=text("SCALING_NODE_TYPE"),
            add_node_document=text("ADD_NODE_DOCUMENT"),
            stop_host_document=text("STOP_HOST_DOCUMENT"),
            workflow_timeout_seconds=seconds("WORKFLOW_TIMEOUT_SECONDS", 60),
            zombie_down_seconds=seconds("ZOMBIE_DOWN_SECONDS", 60),
            metrics_namespace=text("METRICS_NAMESPACE"),
            cluster_name=text("CLUSTER_NAME"),
            scaling_group_name=text("SCALING_GROUP_NAME"),
            launch_hook_name=text("LAUNCH_HOOK_NAME"),
            terminate_hook_name=text("TERMINATE_HOOK_NAME"),
            scale_out_state_machine_arn=text("SCALE_OUT_STATE_MACHINE_ARN"),
            scale_in_state_machine_arn=text("SCALE_IN_STATE_MACHINE_ARN"),
            global_timeout_seconds=seconds("LIFECYCLE_GLOBAL_TIMEOUT_SECONDS", 60),
            patch_node_timeout_seconds=seconds("PATCH_NODE_TIMEOUT_SECONDS", 60),
        )
