"""Per-environment configuration: typed, frozen, and validated once when loaded.

`cdk.json` holds one entry per environment under the `environments` context key. `app.py` hands
that mapping to `load_environment`, which either returns an `EnvironmentConfig` or raises
`ConfigError` with one line that names the key, what was wrong and what is allowed.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Mapping
from datetime import date
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from stacks import capacity
from stacks.lifecycle_timing import LifecycleTiming

SUPPORTED_AZ_COUNT = 3
SEED_NODE_COUNTS = (3, 5, 7, 9)  # Bronze, Silver, Gold, Platinum reliability
MSK_KAFKA_VERSIONS = (
    "3.7.x",
    "3.8.x",
    "3.9.x",
    "3.7.x.kraft",
    "3.8.x.kraft",
    "3.9.x.kraft",
    "4.0.x.kraft",
    "4.1.x.kraft",
)
# The only values CloudWatch Logs accepts for a log group's retention.
LOG_RETENTION_DAYS = (
    1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731,
    1096, 1827, 2192, 2557, 2922, 3288, 3653,
)  # fmt: skip
MIN_INSYNC_REPLICAS = 2
# Production's management CIDRs: none wider than this prefix (65,536 addresses), none containing the
# VPC (its own hosts would reach 19000 and 19080: fleet hosts, Flink's and AWS IoT's interfaces).
PRODUCTION_MANAGEMENT_MIN_PREFIX = 16
# What a join or drain has left for its own work once a patched node lets the membership lock go:
# AddNode.ps1 alone may run 600 s (its document's executionTimeout, stacks/constructs/node_scripts.py),
# then the registration upgrade; a drain's removal upgrade is of the same order. Our choice: no
# page gives either's length.
OWN_WORK_AFTER_LOCK_WAIT_MINUTES = 15
# Who may assume the topic administrator role: IAM user ARNs of the environment's account, as IAM's
# ArnLike compares aws:PrincipalArn (`*` and `?` wildcards; a user's path is in its ARN). Users
# only: the role asks for MFA, which `telemetry topics` passes in its AssumeRole (SerialNumber,
# TokenCode: an IAM user's MFA device); no AWS page says a role session caller (IAM Identity
# Center, a chained role) carries aws:MultiFactorAuthPresent, so a role ARN here could never work.
PRINCIPAL_ARN_PATTERN = r"^arn:aws[a-z-]*:iam::(\d{12}):(user)/[A-Za-z0-9+=,.@_/*?-]{1,512}$"

CDK_JSON = Path(__file__).resolve().parent.parent / "cdk.json"


class ConfigError(Exception):
    """A configuration problem, worded for the person who edits cdk.json."""


class _Section(BaseModel):
    # Strict: "3" is not 3, unknown keys are typos, and nothing changes after loading.
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)


def _parse_cidr(value: str) -> str:
    try:
        return str(ipaddress.ip_network(value, strict=True))
    except ValueError:
        raise ValueError(f"'{value}' is not a CIDR block (expected a network such as 10.20.0.0/16)")


def _check_retention(days: int) -> int:
    if days not in LOG_RETENTION_DAYS:
        allowed = ", ".join(str(d) for d in LOG_RETENTION_DAYS)
        raise ValueError(f"{days} is not a CloudWatch Logs retention; allowed: {allowed}")
    return days


class NetworkConfig(_Section):
    cidr: str
    nat_gateways: int = Field(ge=1, le=SUPPORTED_AZ_COUNT)
    flow_log_retention_days: int

    _cidr = field_validator("cidr")(_parse_cidr)
    _retention = field_validator("flow_log_retention_days")(_check_retention)

    @field_validator("cidr")
    @classmethod
    def _room_for_subnets(cls, value: str) -> str:
        if ipaddress.ip_network(value).prefixlen > 19:
            raise ValueError(f"'{value}' is too small for three tiers over three zones; use /19 or larger")
        return value


class TopicConfig(_Section):
    name: str = Field(pattern=r"^[A-Za-z0-9._-]{1,249}$")
    partitions: int = Field(ge=1, le=10_000)
    replication_factor: int = Field(ge=MIN_INSYNC_REPLICAS + 1)
    retention_hours: int = Field(ge=1)


# MSK's minimum retention for a tiered topic (the capacity model's cited row).
TIERED_MIN_RETENTION_HOURS = int(capacity.TIERED_MIN_RETENTION.value)


class TieredStorageConfig(_Section):
    """MSK tiered storage (the cluster's StorageMode TIERED): every topic kept at least
    TIERED_MIN_RETENTION_HOURS moves its closed segments to the remote tier and keeps only
    `local_retention_hours` on the brokers (`telemetry topics` sets remote.storage.enable and
    local.retention.ms on it); topics kept less stay on the brokers alone."""

    local_retention_hours: int = Field(ge=1)


class MskConfig(_Section):
    kafka_version: Literal[MSK_KAFKA_VERSIONS]  # type: ignore[valid-type]
    broker_instance_type: str = Field(pattern=r"^kafka\.[a-z0-9]+\.[a-z0-9]+$")
    broker_count: int = Field(ge=SUPPORTED_AZ_COUNT)
    ebs_volume_gib: int = Field(ge=1, le=16_384)
    enhanced_monitoring: Literal["DEFAULT", "PER_BROKER", "PER_TOPIC_PER_BROKER", "PER_TOPIC_PER_PARTITION"]
    log_retention_hours: int = Field(ge=1)
    broker_log_retention_days: int
    cpu_alarm_percent: int = Field(default=60, ge=1, le=100)
    disk_alarm_percent: int = Field(default=85, ge=1, le=100)
    # Broker storage auto scaling (msk_cluster.py): the utilization it keeps (MSK takes 10-80 %) and
    # the most it grows a broker's volume to (MSK allows 16,384 GiB).
    storage_autoscaling_target_percent: int = Field(default=70, ge=10, le=80)
    storage_autoscaling_max_gib: int = Field(le=16_384)
    topics: tuple[TopicConfig, ...] = Field(min_length=1)
    tiered_storage: TieredStorageConfig | None = None
    # The principals allowed to assume the topic administrator role (with MFA): IAM user ARN
    # patterns of this environment's account, e.g. arn:aws:iam::111111111111:user/telemetry-dev-operators/*.
    topic_administrators: tuple[str, ...] = Field(min_length=1)

    _retention = field_validator("broker_log_retention_days")(_check_retention)

    @field_validator("topic_administrators")
    @classmethod
    def _principal_arns(cls, values: tuple[str, ...]) -> tuple[str, ...]:
        for value in values:
            if not re.fullmatch(PRINCIPAL_ARN_PATTERN, value):
                raise ValueError(
                    f"'{value}' is not an IAM user ARN (arn:aws:iam::ACCOUNT:user/PATH/NAME; * and ? match any "
                    "characters; users only: the role asks for the MFA an IAM user's device gives)"
                )
            if value.endswith(":user/*"):
                raise ValueError(f"'{value}' names every user of the account; name the operators' path or names")
        return values

    @model_validator(mode="after")
    def _storage_autoscaling(self) -> MskConfig:
        if self.storage_autoscaling_max_gib <= self.ebs_volume_gib:
            raise ValueError(
                f"storage_autoscaling_max_gib {self.storage_autoscaling_max_gib} must be above ebs_volume_gib "
                f"{self.ebs_volume_gib}: it is how far auto scaling may grow each broker's volume"
            )
        if self.storage_autoscaling_target_percent >= self.disk_alarm_percent:
            raise ValueError(
                f"storage_autoscaling_target_percent {self.storage_autoscaling_target_percent} must be below "
                f"disk_alarm_percent {self.disk_alarm_percent}, or the alarm pages before auto scaling acts"
            )
        return self

    def tiered(self, topic: TopicConfig) -> bool:
        """Whether the topic keeps its older segments in the remote tier."""
        return self.tiered_storage is not None and topic.retention_hours >= TIERED_MIN_RETENTION_HOURS

    @model_validator(mode="after")
    def _tiered_storage(self) -> MskConfig:
        if self.tiered_storage is None:
            return self
        if self.broker_instance_type.startswith("kafka.t3."):
            raise ValueError(
                f"tiered_storage: {self.broker_instance_type} brokers cannot use tiered storage; use kafka.m5 or kafka.m7g"
            )
        local = self.tiered_storage.local_retention_hours
        tiered = [t for t in self.topics if self.tiered(t)]
        if not tiered:
            raise ValueError(
                f"tiered_storage: no topic keeps {TIERED_MIN_RETENTION_HOURS} h or more (MSK's minimum for a tiered "
                "topic), so nothing would be tiered; remove tiered_storage or raise a topic's retention_hours"
            )
        for topic in tiered:
            if local >= topic.retention_hours:
                raise ValueError(
                    f"tiered_storage: local_retention_hours {local} must be below topic '{topic.name}''s "
                    f"retention_hours {topic.retention_hours} (what stays on the brokers is part of what is kept)"
                )
        return self

    @model_validator(mode="after")
    def _topics_fit_cluster(self) -> MskConfig:
        names = [t.name for t in self.topics]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"topics: duplicate topic names {duplicates}")
        for topic in self.topics:
            if topic.replication_factor > self.broker_count:
                raise ValueError(
                    f"topics: '{topic.name}' replication_factor {topic.replication_factor} exceeds "
                    f"broker_count {self.broker_count}"
                )
        return self


class MonitoringConfig(_Section):
    alarm_emails: tuple[str, ...] = ()

    @field_validator("alarm_emails")
    @classmethod
    def _emails(cls, emails: tuple[str, ...]) -> tuple[str, ...]:
        for email in emails:
            if not re.fullmatch(r"[^@\s]+@[^@\s]+\.[^@\s]+", email):
                raise ValueError(f"'{email}' is not an email address")
        return emails


# Ports Service Fabric and Windows use between cluster nodes, fixed by this platform: client
# connection, cluster, lease driver, service connection (19000-19003), HTTP gateway and reverse
# proxy (19080-19081); RPC endpoint mapper, NetBIOS and SMB (135, 137-139, 445), which cluster
# setup and AddNode.ps1 use to reach the other machines.
SERVICE_FABRIC_RESERVED_PORTS = ((135, 135), (137, 139), (445, 445), (19000, 19003), (19080, 19081))
MIN_EPHEMERAL_PORTS = 255  # Service Fabric refuses a smaller ephemeral range
SECRET_NAME_PATTERN = r"^[A-Za-z0-9/_+=.@-]{1,512}$"


# The pinned Service Fabric runtime (Windows 11.4.268.1), from microsoft/service-fabric
# release_notes/Service_Fabric_ReleaseNotes_114_1-Hotfix.md, "Repositories and Download Links":
#   Cab: https://download.microsoft.com/download/b/0/b/b0bccac5-65aa-4be3-ab13-d5ff5890f4b5/11.4.268.1/MicrosoftServiceFabric.11.4.268.1.cab
#   Package: https://download.microsoft.com/download/8/3/6/836e3e99-a300-4714-8278-96bc3e8b5528/11.4.268.1/Microsoft.Azure.ServiceFabric.WindowsServer.11.4.268.1.zip
# Exact links, never built from a pattern: the paths hold per-release GUIDs and the file names
# changed between major versions (MicrosoftAzureServiceFabric.<v>.cab up to 10.x).
SERVICE_FABRIC_RUNTIME_VERSION = "11.4.268.1"
SERVICE_FABRIC_RUNTIME_CAB_URL = (
    "https://download.microsoft.com/download/b/0/b/b0bccac5-65aa-4be3-ab13-d5ff5890f4b5/11.4.268.1/"
    "MicrosoftServiceFabric.11.4.268.1.cab"
)
SERVICE_FABRIC_STANDALONE_PACKAGE_URL = (
    "https://download.microsoft.com/download/8/3/6/836e3e99-a300-4714-8278-96bc3e8b5528/11.4.268.1/"
    "Microsoft.Azure.ServiceFabric.WindowsServer.11.4.268.1.zip"
)
RUNTIME_VERSION_PATTERN = r"[0-9]+(\.[0-9]+){3}"
SHA256_PATTERN = r"[0-9A-Fa-f]{64}"
# The CloudWatch agent the nodes install, by version instead of the "latest" link: the newest
# release in aws/amazon-cloudwatch-agent's RELEASE_NOTES when this was pinned (1.300071.0,
# 2026-07-22), by the build number its download folder carries: AWS documents only the "latest"
# links, and the one published versioned link, winget's manifest for this release
# (microsoft/winget-pkgs, manifests/a/Amazon/CloudWatchAgent/1.4.37927), is
# https://amazoncloudwatch-agent.s3.amazonaws.com/windows/amd64/1.300071.0b1720/amazon-cloudwatch-agent.msi
# on the global bucket, which is where the nodes download it (prepare_node.ps1). Its MSI is
# Authenticode-signed: "For Windows Server, you can use the MSI to verify the signature"
# (CloudWatch User Guide, "Verifying the signature of the CloudWatch agent package").
CLOUDWATCH_AGENT_VERSION = "1.300071.0b1720"
CLOUDWATCH_AGENT_VERSION_PATTERN = r"[0-9]+\.[0-9]+\.[0-9]+(b[0-9]+)?"
# Who signs the agent's MSI (the O= of its Authenticode signer). Not stated on AWS's page: taken
# from the publisher AWS's Windows agents carry; a node whose MSI is signed otherwise runs without
# the agent (an optional, degraded step) and logs the signer it found.
CLOUDWATCH_AGENT_SIGNER = "Amazon.com Services LLC"
# The roots Microsoft's code signing chains to (SHA-1 thumbprints), from Microsoft's PKI
# repository (https://www.microsoft.com/pkiops/docs/repository.htm): Microsoft Root Certificate
# Authority 2011 (Microsoft Code Signing PCA 2011 and its successors) and 2010.
MICROSOFT_CODE_SIGNING_ROOTS = (
    "8F43288AD272F3103B6FB1428485EA3014C0BCFE",
    "3B1EFD3A66EA28B16697394703A72CA340A05BD5",
)
# Microsoft's download host, https only; the path may hold nothing a PowerShell literal or a URL
# query could hide behind.
_DOWNLOAD_URL = re.compile(r"https://download\.microsoft\.com/[A-Za-z0-9/._-]+")


def _check_download_url(url: str, suffix: str) -> str:
    if not _DOWNLOAD_URL.fullmatch(url) or not url.endswith(suffix):
        raise ValueError(
            f"'{url}' is not an https://download.microsoft.com/ link to a {suffix} file; use the link "
            "from the Service Fabric release notes"
        )
    return url


def _overlaps(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] <= b[1] and b[0] <= a[1]


# MB/s an FSx for OpenZFS file system of each deployment type can be given.
_GEN1_THROUGHPUT = (64, 128, 256, 512, 1024, 2048, 3072, 4096)
_GEN2_THROUGHPUT = (160, 320, 640, 1280, 2560, 3840, 5120, 7680, 10240)
SHARED_STORAGE_THROUGHPUT = {
    "SINGLE_AZ_1": _GEN1_THROUGHPUT,
    "SINGLE_AZ_HA_1": _GEN1_THROUGHPUT,
    "SINGLE_AZ_2": _GEN2_THROUGHPUT,
    "SINGLE_AZ_HA_2": _GEN2_THROUGHPUT,
}


class ServiceFabricConfig(_Section):
    seed_node_count: int
    seed_instance_type: str = Field(pattern=r"^[a-z0-9]+\.[a-z0-9]+$")
    node_instance_type: str = Field(pattern=r"^[a-z0-9]+\.[a-z0-9]+$")
    scaling_min_nodes: int = Field(ge=0)
    scaling_max_nodes: int = Field(ge=1)
    scaling_desired_nodes: int = Field(ge=0)
    management_cidrs: tuple[str, ...] = Field(min_length=1)
    # Management NLB (19000, 19080): internet-facing for Microsoft-hosted Azure DevOps agents,
    # internal for self-hosted agents and offices that reach the VPC privately.
    management_internet_facing: bool
    # Application NLB: each port is forwarded to the same port on every node.
    application_ports: tuple[int, ...] = Field(min_length=1)
    application_internet_facing: bool
    application_client_cidrs: tuple[str, ...] = Field(min_length=1)
    # The nodeTypes' applicationPorts and ephemeralPorts ranges of the cluster configuration.
    application_port_start: int = Field(default=20000, ge=1024, le=65535)
    application_port_end: int = Field(default=30000, ge=1024, le=65535)
    ephemeral_port_start: int = Field(default=49152, ge=1024, le=65535)
    ephemeral_port_end: int = Field(default=65534, ge=1024, le=65535)
    # Secrets Manager names (created out of band, see README): JSON with the PEM certificate,
    # PEM private key and the PFX (base64) with its password.
    cluster_certificate_secret: str = Field(pattern=SECRET_NAME_PATTERN)
    admin_certificate_secret: str = Field(pattern=SECRET_NAME_PATTERN)
    # How long a join or drain may go without a heartbeat before Auto Scaling gives up on it.
    lifecycle_heartbeat_seconds: int = Field(default=900, ge=30, le=7200)
    scaling_cpu_target_percent: int = Field(default=60, ge=10, le=95)
    scale_in_cpu_percent: int = Field(default=25, ge=1, le=90)
    root_volume_gib: int = Field(default=100, ge=50, le=16_384)
    data_volume_gib: int = Field(default=256, ge=16, le=16_384)
    seed_snapshot_interval_hours: Literal[1, 2, 3, 4, 6, 8, 12, 24] = 24
    seed_snapshot_retain_count: int = Field(default=14, ge=1, le=1000)
    access_log_retention_days: int = Field(default=365, ge=1)
    node_log_retention_days: int = 90
    # Shared storage: FSx for OpenZFS over NFS v3 (what Windows' NFS client speaks; EFS is NFSv4
    # only). Throughput options depend on the deployment type (FSx for OpenZFS user guide).
    shared_storage_deployment: Literal["SINGLE_AZ_1", "SINGLE_AZ_HA_1", "SINGLE_AZ_2", "SINGLE_AZ_HA_2"] = (
        "SINGLE_AZ_1"
    )
    shared_storage_gib: int = Field(default=64, ge=64, le=524_288)
    shared_storage_throughput_mbps: int = 64
    shared_storage_backup_days: int = Field(default=7, ge=0, le=90)
    # The one Service Fabric runtime every node installs, at bootstrap and AddNode alike: its
    # version, the runtime CAB and the standalone package (scripts) of the same release.
    runtime_version: str = SERVICE_FABRIC_RUNTIME_VERSION
    runtime_cab_url: str = SERVICE_FABRIC_RUNTIME_CAB_URL
    standalone_package_url: str = SERVICE_FABRIC_STANDALONE_PACKAGE_URL
    # SHA-256 of the zip at standalone_package_url, checked before it is expanded on every node.
    # Microsoft publishes none (neither the release notes nor the download page carry one): pin
    # the output of `Get-FileHash -Algorithm SHA256` (or sha256sum) on the zip you downloaded and
    # reviewed. null is an explicit "not pinned": nodes then log the hash they got, and a
    # production environment refuses to synthesize (EnvironmentConfig.unpinned_downloads).
    standalone_package_sha256: str | None = None
    cloudwatch_agent_version: str = CLOUDWATCH_AGENT_VERSION

    _node_log_retention = field_validator("node_log_retention_days")(_check_retention)

    @field_validator("runtime_version")
    @classmethod
    def _runtime_version(cls, version: str) -> str:
        if not re.fullmatch(RUNTIME_VERSION_PATTERN, version):
            raise ValueError(
                f"'{version}' is not a Service Fabric runtime version (four dot-separated numbers, such as "
                f"{SERVICE_FABRIC_RUNTIME_VERSION})"
            )
        return version

    @field_validator("standalone_package_sha256")
    @classmethod
    def _standalone_package_sha256(cls, digest: str | None) -> str | None:
        if digest is not None and not re.fullmatch(SHA256_PATTERN, digest):
            raise ValueError(
                f"'{digest}' is not a SHA-256 (64 hexadecimal characters); use the Hash that "
                "Get-FileHash -Algorithm SHA256 prints for the downloaded zip, or null while unpinned"
            )
        return digest.upper() if digest else None

    @field_validator("cloudwatch_agent_version")
    @classmethod
    def _cloudwatch_agent_version(cls, version: str) -> str:
        if not re.fullmatch(CLOUDWATCH_AGENT_VERSION_PATTERN, version):
            raise ValueError(
                f"'{version}' is not a CloudWatch agent version (such as {CLOUDWATCH_AGENT_VERSION}, from the "
                "agent's release notes); 'latest' is not pinned"
            )
        return version

    @field_validator("runtime_cab_url")
    @classmethod
    def _runtime_cab_url(cls, url: str) -> str:
        return _check_download_url(url, ".cab")

    @field_validator("standalone_package_url")
    @classmethod
    def _standalone_package_url(cls, url: str) -> str:
        return _check_download_url(url, ".zip")

    @model_validator(mode="after")
    def _runtime_release(self) -> ServiceFabricConfig:
        # Release notes have carried a link of another version (10.1 CU10's Cab link is 10.1.3009.100
        # under runtime 10.1.3033.1): the file names must name the version the cluster is pinned to.
        for key in ("runtime_cab_url", "standalone_package_url"):
            file_name = getattr(self, key).rsplit("/", 1)[-1]
            named = re.findall(r"[0-9]+(?:\.[0-9]+)+", file_name.rsplit(".", 1)[0])
            if self.runtime_version not in named:
                raise ValueError(
                    f"{key}: file name '{file_name}' does not name runtime_version {self.runtime_version}; take "
                    "the version and both links from the same Service Fabric release notes"
                )
        return self

    @model_validator(mode="after")
    def _shared_storage_throughput(self) -> ServiceFabricConfig:
        allowed = SHARED_STORAGE_THROUGHPUT[self.shared_storage_deployment]
        if self.shared_storage_throughput_mbps not in allowed:
            raise ValueError(
                f"shared_storage_throughput_mbps: {self.shared_storage_throughput_mbps} is not offered for "
                f"{self.shared_storage_deployment}; allowed: {', '.join(map(str, allowed))}"
            )
        return self

    @field_validator("seed_node_count")
    @classmethod
    def _seed_count(cls, count: int) -> int:
        if count not in SEED_NODE_COUNTS:
            allowed = ", ".join(str(c) for c in SEED_NODE_COUNTS)
            raise ValueError(f"{count} seed nodes is not a Service Fabric reliability level; allowed: {allowed}")
        return count

    @field_validator("management_cidrs", "application_client_cidrs")
    @classmethod
    def _cidrs(cls, cidrs: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(_parse_cidr(c) for c in cidrs)

    @field_validator("application_ports")
    @classmethod
    def _application_ports(cls, ports: tuple[int, ...]) -> tuple[int, ...]:
        for port in ports:
            if not 1 <= port <= 65535:
                raise ValueError(f"{port} is not a TCP port (1-65535)")
            for low, high in SERVICE_FABRIC_RESERVED_PORTS:
                if low <= port <= high:
                    raise ValueError(f"{port} is reserved for Service Fabric and Windows between nodes")
        duplicates = sorted({p for p in ports if ports.count(p) > 1})
        if duplicates:
            raise ValueError(f"duplicate ports {duplicates}")
        return ports

    @model_validator(mode="after")
    def _group_sizes(self) -> ServiceFabricConfig:
        if not self.scaling_min_nodes <= self.scaling_desired_nodes <= self.scaling_max_nodes:
            raise ValueError(
                "scaling group sizes must satisfy scaling_min_nodes <= scaling_desired_nodes <= "
                f"scaling_max_nodes (got {self.scaling_min_nodes}, {self.scaling_desired_nodes}, "
                f"{self.scaling_max_nodes})"
            )
        if self.scale_in_cpu_percent >= self.scaling_cpu_target_percent:
            raise ValueError(
                f"scale_in_cpu_percent {self.scale_in_cpu_percent} must be below scaling_cpu_target_percent "
                f"{self.scaling_cpu_target_percent}, or the group would scale in and out in turn"
            )
        self._check_port_ranges()
        return self

    @property
    def application_port_range(self) -> tuple[int, int]:
        return (self.application_port_start, self.application_port_end)

    @property
    def ephemeral_port_range(self) -> tuple[int, int]:
        return (self.ephemeral_port_start, self.ephemeral_port_end)

    def _check_port_ranges(self) -> None:
        ranges = {"application_port": self.application_port_range, "ephemeral_port": self.ephemeral_port_range}
        for name, (start, end) in ranges.items():
            if start > end:
                raise ValueError(f"{name}_start {start} is above {name}_end {end}")
            for reserved in SERVICE_FABRIC_RESERVED_PORTS:
                if _overlaps((start, end), reserved):
                    raise ValueError(
                        f"{name}_start..{name}_end ({start}-{end}) overlaps the Service Fabric ports "
                        f"{reserved[0]}-{reserved[1]}"
                    )
        size = self.ephemeral_port_end - self.ephemeral_port_start + 1
        if size < MIN_EPHEMERAL_PORTS:
            raise ValueError(
                f"ephemeral_port_start..ephemeral_port_end holds {size} ports; Service Fabric needs at "
                f"least {MIN_EPHEMERAL_PORTS}"
            )
        if _overlaps(self.application_port_range, self.ephemeral_port_range):
            raise ValueError(
                f"application ports {self.application_port_start}-{self.application_port_end} overlap "
                f"ephemeral ports {self.ephemeral_port_start}-{self.ephemeral_port_end}"
            )
        for port in self.application_ports:
            if self.ephemeral_port_start <= port <= self.ephemeral_port_end:
                raise ValueError(
                    f"application_ports: {port} lies in the ephemeral range "
                    f"{self.ephemeral_port_start}-{self.ephemeral_port_end}, where Windows picks client ports"
                )


class SimulatorFleetConfig(_Section):
    instance_type: str = Field(pattern=r"^[a-z0-9]+\.[a-z0-9]+$")
    host_count: int = Field(ge=1, le=50)
    topic: str
    # Applies to the reports in S3 and to the run metrics log group alike.
    results_retention_days: int

    _retention = field_validator("results_retention_days")(_check_retention)


class NodeLifecycleConfig(_Section):
    """How the scale-out/scale-in state machines and the zombie reaper pace themselves."""

    poll_interval_seconds: int = Field(ge=5, le=300)  # between looks at a node or an upgrade
    lock_retry_seconds: int = Field(ge=5, le=600)  # between tries for the membership lock
    lock_ttl_seconds: int = Field(ge=300, le=86_400)  # a crashed holder's lock expires after this
    drain_timeout_minutes: int = Field(ge=5, le=2880)  # a longer drain fails and alarms
    join_timeout_minutes: int = Field(ge=5, le=2880)  # a longer join is abandoned and alarms
    reaper_interval_minutes: int = Field(ge=1, le=1440)
    zombie_down_minutes: int = Field(ge=5, le=10_080)  # Down this long with its instance gone
    log_retention_days: int

    _retention = field_validator("log_retention_days")(_check_retention)

    @model_validator(mode="before")
    @classmethod
    def _no_hold(cls, data: Any) -> Any:
        """The key of 0.1.0's heartbeat hold, named with what replaced it rather than as a typo."""
        if isinstance(data, dict) and "operator_hold_minutes" in data:
            raise ValueError(
                "operator_hold_minutes is no longer read: a failed drain's or a refused seed node's instance is "
                "retained by Auto Scaling, running, until an operator terminates it (docs/service-fabric.md: when a step fails); "
                "remove the key"
            )
        return data

    @model_validator(mode="after")
    def _lock_outlives_a_change(self) -> NodeLifecycleConfig:
        longest = max(self.drain_timeout_minutes, self.join_timeout_minutes) * 60
        if self.lock_ttl_seconds < longest:
            raise ValueError(
                f"node_lifecycle.lock_ttl_seconds: {self.lock_ttl_seconds} s is shorter than the longest "
                f"drain or join ({longest} s); another change could take the lock mid-way. Use at least {longest}"
            )
        return self


# EventBridge schedule expressions (EventBridge User Guide, "Schedule expressions for rules"):
# cron(minutes hours day-of-month month day-of-week year), one of day-of-month and day-of-week
# being '?'; rate(value unit), unit minute(s), hour(s) or day(s), singular exactly when value is 1.
CRON_EXPRESSION = r"^cron\((\S+) (\S+) (\S+) (\S+) (\S+) (\S+)\)$"
RATE_EXPRESSION = r"^rate\(([1-9][0-9]*) (minutes?|hours?|days?)\)$"


def _check_schedule(expression: str) -> str:
    rate = re.fullmatch(RATE_EXPRESSION, expression)
    if rate:
        if (rate.group(1) == "1") != (not rate.group(2).endswith("s")):
            raise ValueError(f"'{expression}': the unit is singular for 1 and plural otherwise, as EventBridge requires")
        return expression
    cron = re.fullmatch(CRON_EXPRESSION, expression)
    if not cron:
        raise ValueError(
            f"'{expression}' is not an EventBridge schedule; use cron(minutes hours day-of-month month day-of-week year), "
            "e.g. cron(0 3 ? * SUN *), or rate(7 days)"
        )
    if (cron.group(3) == "?") == (cron.group(5) == "?"):
        raise ValueError(f"'{expression}': exactly one of day-of-month and day-of-week must be '?'")
    return expression


class PatchingConfig(_Section):
    """Windows updates on every node in place (the patch state machine): when, and how it paces."""

    enabled: bool  # whether the maintenance window's schedule starts runs (the CLI always can)
    schedule: str  # the maintenance window: an EventBridge cron() or rate() expression, UTC
    poll_interval_seconds: int = Field(ge=15, le=600)  # between looks at a node, a command or health
    # A node's whole patch (scan, deactivation, install and reboot, return, health) must fit in this.
    node_timeout_minutes: int = Field(ge=15, le=720)

    _schedule = field_validator("schedule")(_check_schedule)


# Managed Service for Apache Flink runtimes this platform's job is built for (flink/pom.xml).
FLINK_RUNTIMES = ("FLINK-1_20", "FLINK-2_2")
# S3 keeps an object in Standard-IA for at least 30 days before a lifecycle rule may move it on.
MIN_DAYS_IN_INFREQUENT_ACCESS = 30
# The file sink's in-progress and pending part files are S3 multipart uploads that a restore from a
# snapshot resumes. If a lifecycle rule aborts them first: "This will result in your job not being
# able to restore from that savepoint as the pending part-files are no longer there" (Flink docs,
# FileSink, S3-specific: https://nightlies.apache.org/flink/flink-docs-release-1.20/docs/connectors/datastream/filesystem/).
# An upload starts at most one checkpoint interval (at most an hour) before the snapshot and must
# survive until the restored job's first checkpoint: two days cover both with room to spare.
MULTIPART_ABORT_MARGIN_DAYS = 2


class TelemetrySinkConfig(_Section):
    # The MSK topic the Flink job copies to S3 (one of msk.topics).
    topic: str
    runtime: Literal[FLINK_RUNTIMES] = "FLINK-2_2"  # type: ignore[valid-type]
    # Initial parallelism; with autoscaling the service may raise it and lowers it back to this.
    parallelism: int = Field(ge=1)
    parallelism_per_kpu: int = Field(default=1, ge=1)
    autoscaling: bool
    # The file sink commits Parquet files on checkpoints: this is how long data takes to become
    # visible in Athena, and how many files each writer produces per hour.
    checkpoint_interval_seconds: int = Field(ge=10, le=3600)
    min_pause_between_checkpoints_seconds: int = Field(default=5, ge=0)
    # A part file also rolls when it reaches this size, between checkpoints (the job accepts 1-4096).
    max_part_size_mb: int = Field(ge=1, le=4096)
    log_retention_days: int
    infrequent_access_after_days: int = Field(ge=MIN_DAYS_IN_INFREQUENT_ACCESS)
    archive_after_days: int
    noncurrent_versions_expire_after_days: int = Field(ge=1)
    athena_results_expire_after_days: int = Field(default=30, ge=1)
    # The oldest snapshot the job is promised to restore from, with its in-progress files. Managed
    # Flink itself never deletes snapshots; this bounds how long S3 keeps unfinished uploads.
    snapshot_retention_days: int = Field(default=30, ge=1, le=365)
    # First day Athena's partition projection enumerates (yyyy-MM-dd); the range ends at NOW.
    projection_start_date: str = Field(pattern=r"^\d{4}-\d{2}-\d{2}$")
    # A reading stamped before projection_start_date, or more than this far ahead of the time it
    # reached Kafka, is filed under its ingest hour instead of its device's (and counted): a
    # partition Athena never enumerates would hide it (README, "Device clocks").
    max_clock_ahead_seconds: int = Field(default=300, ge=0, le=86_400)
    # Alarm thresholds: records the Kafka source is behind the newest offset of any partition,
    # and malformed records sent to the dead-letter prefix within five minutes.
    consumer_lag_alarm_records: int = Field(ge=1)
    dead_letter_alarm_records: int = Field(default=1, ge=1)
    # Readings filed by ingest time because of a wrong device clock, within five minutes.
    clock_alarm_records: int = Field(default=1, ge=1)
    # Minutes in a row the job may be out of RUNNING before the alarm: a deploy or an autoscaling
    # restart shorter than this stays quiet (Managed Flink restarts the job from a snapshot).
    not_running_alarm_minutes: int = Field(default=10, ge=1, le=60)

    _retention = field_validator("log_retention_days")(_check_retention)

    @property
    def abort_incomplete_uploads_after_days(self) -> int:
        """When S3 may abort the file sink's unfinished multipart uploads: only after every snapshot
        within the retention can no longer be restored."""
        return self.snapshot_retention_days + MULTIPART_ABORT_MARGIN_DAYS

    @field_validator("projection_start_date")
    @classmethod
    def _real_date(cls, value: str) -> str:
        try:
            date.fromisoformat(value)
        except ValueError:
            raise ValueError(f"'{value}' is not a calendar date (expected yyyy-MM-dd)")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> TelemetrySinkConfig:
        if self.archive_after_days < self.infrequent_access_after_days + MIN_DAYS_IN_INFREQUENT_ACCESS:
            raise ValueError(
                f"archive_after_days {self.archive_after_days} must be at least infrequent_access_after_days "
                f"+ {MIN_DAYS_IN_INFREQUENT_ACCESS} ({self.infrequent_access_after_days + MIN_DAYS_IN_INFREQUENT_ACCESS}): "
                "S3 keeps objects in Standard-IA for 30 days before archiving them"
            )
        if self.min_pause_between_checkpoints_seconds >= self.checkpoint_interval_seconds:
            raise ValueError(
                f"min_pause_between_checkpoints_seconds {self.min_pause_between_checkpoints_seconds} must be "
                f"below checkpoint_interval_seconds {self.checkpoint_interval_seconds}"
            )
        return self


class DeviceGatewayConfig(_Section):
    """Field devices over AWS IoT Core into MSK through the rules engine's Kafka action."""

    # The MSK topic device messages land in (one of msk.topics).
    topic: str
    # The SCRAM user the rule's Kafka action signs in as; Kafka ACLs authorize it by this name.
    scram_username: str = Field(pattern=r"^[a-z][a-z0-9-]{2,31}$")
    # The device gateway's function logs (the destination keeper). Messages the rule could not
    # deliver wait in an SQS queue for 14 days, the most SQS keeps one (failed_deliveries.py).
    log_retention_days: int
    # Alarm when this many messages fail (Kafka action or error action) within five minutes.
    failure_alarm_messages: int = Field(default=1, ge=1)
    # The account's AWS IoT Core quotas in this region (AWS IoT Core endpoints and quotas,
    # "Inbound publish requests per second per account" and "Connect requests per second per
    # account"; both adjustable, and smaller in some regions: copy yours from Service Quotas).
    # The dashboard draws them and an alarm fires at quota_alarm_percent of either.
    publish_quota_per_s: int = Field(default=20_000, ge=1)
    connect_quota_per_s: int = Field(default=500, ge=1)
    quota_alarm_percent: int = Field(default=80, ge=1, le=100)

    _retention = field_validator("log_retention_days")(_check_retention)


class WorkloadConfig(_Section):
    """The load the environment is for (issue 30): what synthesis, `telemetry capacity` and
    `telemetry cost` size it against (stacks/sizing.py). Retention stays on the topic."""

    messages_per_second: float = Field(gt=0)  # the average over a day
    peak_messages_per_second: float = Field(gt=0)
    message_bytes: int = Field(ge=1, le=1_048_576)
    # Payload bytes over the bytes the brokers store, as producers compress them: measured with
    # `telemetry compression` on a sample of the payloads (a ratio on the simulator's padding says
    # nothing about real readings). Where it came from is stated beside it, so that a figure nobody
    # measured is not mistaken for one; shipped: realistic readings (devtools/readings_sample.py).
    compression_ratio: float = Field(gt=0)
    compression_ratio_source: str = Field(min_length=1)
    consumer_groups: int = Field(ge=1)  # groups reading the whole topic (the Flink sink is one)
    devices: int = Field(ge=1)
    # The share of the messages devices send through AWS IoT Core (the rest produce to Kafka).
    iot_share: float = Field(ge=0, le=1)

    @model_validator(mode="after")
    def _peak_at_least_average(self) -> WorkloadConfig:
        if self.peak_messages_per_second < self.messages_per_second:
            raise ValueError(
                f"peak_messages_per_second {self.peak_messages_per_second:g} is below messages_per_second "
                f"{self.messages_per_second:g}"
            )
        return self


class EnvironmentConfig(_Section):
    name: str = Field(pattern=r"^[a-z][a-z0-9-]{0,15}$")
    account: str = Field(pattern=r"^\d{12}$")
    region: str = Field(pattern=r"^[a-z]{2}(-[a-z]+)+-\d$")
    availability_zones: tuple[str, ...]
    # Production keeps stateful resources on stack deletion and refuses world-open management.
    production: bool
    network: NetworkConfig
    monitoring: MonitoringConfig
    msk: MskConfig
    service_fabric: ServiceFabricConfig
    simulator_fleet: SimulatorFleetConfig
    telemetry_sink: TelemetrySinkConfig
    node_lifecycle: NodeLifecycleConfig
    patching: PatchingConfig
    device_gateway: DeviceGatewayConfig
    workload: WorkloadConfig

    def unpinned_downloads(self) -> list[str]:
        """What a node would download without a pinned hash, one line each; app.py refuses to
        synthesize a production environment while any is left."""
        if self.service_fabric.standalone_package_sha256:
            return []
        return [
            f"service_fabric.standalone_package_sha256 is not pinned for environment '{self.name}': download "
            "standalone_package_url, check it, and set it to what Get-FileHash -Algorithm SHA256 (or sha256sum) "
            "prints for the zip"
        ]

    @model_validator(mode="after")
    def _cross_checks(self) -> EnvironmentConfig:
        zones = self.availability_zones
        if len(zones) != SUPPORTED_AZ_COUNT or len(set(zones)) != len(zones):
            raise ValueError(
                f"availability_zones: the stacks support exactly {SUPPORTED_AZ_COUNT} distinct zones; "
                f"got {len(set(zones))} ({', '.join(zones) or 'none'})"
            )
        for zone in zones:
            if not re.fullmatch(re.escape(self.region) + r"[a-z]", zone):
                raise ValueError(f"availability_zones: '{zone}' is not a zone of region {self.region}")
        if self.msk.broker_count % SUPPORTED_AZ_COUNT:
            raise ValueError(
                f"msk.broker_count: {self.msk.broker_count} is not a multiple of the "
                f"{SUPPORTED_AZ_COUNT} availability zones (use 3, 6, 9, ...)"
            )
        topics = [t.name for t in self.msk.topics]
        if self.simulator_fleet.topic not in topics:
            raise ValueError(
                f"simulator_fleet.topic: '{self.simulator_fleet.topic}' is not declared in msk.topics "
                f"({', '.join(topics)})"
            )
        sink = self.telemetry_sink
        sink_topic = next((t for t in self.msk.topics if t.name == sink.topic), None)
        if sink_topic is None:
            raise ValueError(
                f"telemetry_sink.topic: '{sink.topic}' is not declared in msk.topics ({', '.join(topics)})"
            )
        if sink.parallelism > sink_topic.partitions:
            raise ValueError(
                f"telemetry_sink.parallelism: {sink.parallelism} exceeds the {sink_topic.partitions} partitions "
                f"of topic '{sink.topic}'; the extra Kafka source subtasks would sit idle"
            )
        if self.device_gateway.topic not in topics:
            raise ValueError(
                f"device_gateway.topic: '{self.device_gateway.topic}' is not declared in msk.topics "
                f"({', '.join(topics)})"
            )
        for problem in self.lifecycle_timing.problems():
            raise ValueError(problem)
        self._patch_run_fits_one_execution()
        self._joins_and_drains_outwait_a_patched_node()
        for arn in self.msk.topic_administrators:
            account = re.fullmatch(PRINCIPAL_ARN_PATTERN, arn).group(1)
            if account != self.account:
                raise ValueError(
                    f"msk.topic_administrators: '{arn}' is in account {account}, not the environment's {self.account}"
                )
        if self.production:
            self._production_management_cidrs()
        return self

    @property
    def patch_run_history_events(self) -> int:
        """The most history events one patch run can write: every node at its longest (each
        look at it a Task, a Choice and a Wait, at the poll interval: the state machine waits for
        the membership lock at that pace too), seeds and the largest scaling group."""
        from stacks.lifecycle_timing import EVENTS_OUTSIDE_LOOPS, EVENTS_PER_LOOP

        patching, nodes = self.patching, self.service_fabric.seed_node_count + self.service_fabric.scaling_max_nodes
        looks = patching.node_timeout_minutes * 60 // patching.poll_interval_seconds
        return nodes * (looks * EVENTS_PER_LOOP + EVENTS_OUTSIDE_LOOPS // 4) + EVENTS_OUTSIDE_LOOPS

    def _patch_run_fits_one_execution(self) -> None:
        from stacks.lifecycle_timing import HISTORY_EVENT_LIMIT

        if (events := self.patch_run_history_events) >= HISTORY_EVENT_LIMIT:
            raise ValueError(
                f"patching: a run over {self.service_fabric.seed_node_count} seeds and up to "
                f"{self.service_fabric.scaling_max_nodes} scaling nodes could write {events:,} history events, and Step "
                f"Functions fails an execution at {HISTORY_EVENT_LIMIT:,}; raise patching.poll_interval_seconds or lower "
                "patching.node_timeout_minutes"
            )
        if self.patching.node_timeout_minutes * 60 > self.node_lifecycle.lock_ttl_seconds:
            raise ValueError(
                f"patching.node_timeout_minutes: {self.patching.node_timeout_minutes} min is longer than "
                f"node_lifecycle.lock_ttl_seconds ({self.node_lifecycle.lock_ttl_seconds} s); the membership lock a "
                "patched node holds is renewed at every look, but a run that died must not keep it longer than a node's time"
            )

    def _joins_and_drains_outwait_a_patched_node(self) -> None:
        """A join or drain waits for the membership lock inside its own deadline, and a patched
        node holds that lock for up to patching.node_timeout_minutes (a long Windows Update is
        routine, not a failure). A shorter deadline fails the join (ABANDON: Auto Scaling launches
        again, and the next one waits again) or the drain (the instance retained for an operator)
        whenever scaling meets a patch run. Whether the maintenance window is enabled or not: a run
        can be started by hand."""
        least = self.patching.node_timeout_minutes + OWN_WORK_AFTER_LOCK_WAIT_MINUTES
        for key, minutes in (("join_timeout_minutes", self.node_lifecycle.join_timeout_minutes),
                             ("drain_timeout_minutes", self.node_lifecycle.drain_timeout_minutes)):  # fmt: skip
            if minutes < least:
                raise ValueError(
                    f"node_lifecycle.{key}: {minutes} min cannot wait out a patched node holding the membership lock "
                    f"(patching.node_timeout_minutes, {self.patching.node_timeout_minutes} min) and still do its own "
                    f"work ({OWN_WORK_AFTER_LOCK_WAIT_MINUTES} min); use at least {least}, or shorten patching.node_timeout_minutes"
                )

    def _production_management_cidrs(self) -> None:
        vpc = ipaddress.ip_network(self.network.cidr)
        for cidr in self.service_fabric.management_cidrs:
            network = ipaddress.ip_network(cidr)
            if network.prefixlen == 0:
                raise ValueError(
                    f"service_fabric.management_cidrs: {cidr} opens cluster management to the "
                    "whole internet, which production refuses; list your Azure DevOps and "
                    "office egress ranges"
                )
            if network.prefixlen < PRODUCTION_MANAGEMENT_MIN_PREFIX:
                raise ValueError(
                    f"service_fabric.management_cidrs: {cidr} is wider than production allows "
                    f"(/{PRODUCTION_MANAGEMENT_MIN_PREFIX} at most); list the agents' and offices' own ranges"
                )
            if network.version == vpc.version and vpc.subnet_of(network):
                raise ValueError(
                    f"service_fabric.management_cidrs: {cidr} contains the environment's VPC {vpc}, so every "
                    "host in it could reach cluster management; name the agents' subnet instead"
                )

    @property
    def lifecycle_timing(self) -> LifecycleTiming:
        """The node lifecycle's heartbeats, deadlines and history, from the hooks' heartbeat timeout
        and the node_lifecycle pacing (stacks/lifecycle_timing.py)."""
        lifecycle = self.node_lifecycle
        return LifecycleTiming(
            heartbeat_timeout_seconds=self.service_fabric.lifecycle_heartbeat_seconds,
            poll_interval_seconds=lifecycle.poll_interval_seconds,
            lock_retry_seconds=lifecycle.lock_retry_seconds,
            drain_timeout_seconds=lifecycle.drain_timeout_minutes * 60,
            join_timeout_seconds=lifecycle.join_timeout_minutes * 60,
            reaper_interval_seconds=lifecycle.reaper_interval_minutes * 60,
        )

    @property
    def stack_prefix(self) -> str:
        return f"Telemetry-{self.name}"

    @property
    def resource_prefix(self) -> str:
        """Lower-case prefix for physical names, so two environments can share an account."""
        return f"telemetry-{self.name}"


def _section_at(location: tuple) -> type[BaseModel] | None:
    """The settings class a key at `location` (cdk.json's path, list indices included) belongs to."""
    import typing

    model: type[BaseModel] | None = EnvironmentConfig
    for part in location:
        if isinstance(part, int) or model is None:
            continue  # an element of a list: the list's element class is taken with its key
        field = model.model_fields.get(part)
        if field is None:
            return None
        kinds = [field.annotation, *typing.get_args(field.annotation)]
        model = next((k for k in kinds if isinstance(k, type) and issubclass(k, BaseModel)), None)
    return model


def _did_you_mean(location: tuple) -> str:
    """For an unknown key, the nearest key its section knows ("did you mean ...?"), if one is near."""
    import difflib

    section = _section_at(location[:-1])
    if section is None or not isinstance(location[-1], str):
        return ""
    near = difflib.get_close_matches(location[-1], list(section.model_fields), n=1, cutoff=0.6)
    return f" (did you mean '{near[0]}'?)" if near else ""


def _describe(error: ValidationError) -> str:
    """Every mistake at once, each with its key: what was wrong and what is allowed."""
    parts = []
    for item in error.errors():
        location = ".".join(str(p) for p in item["loc"])
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] == "missing":
            message = "required key is missing"
        elif item["type"] == "extra_forbidden":
            message = "unknown key" + _did_you_mean(tuple(item["loc"]))
        parts.append(f"{location}: {message}" if location else message)
    return "; ".join(parts)


def load_environment(environments: Mapping[str, Any] | None, name: str) -> EnvironmentConfig:
    """Validate the named entry of the `environments` context mapping."""
    if not environments:
        raise ConfigError("cdk.json has no 'environments' context: add one entry per environment")
    if name not in environments:
        known = ", ".join(sorted(environments))
        raise ConfigError(f"unknown environment '{name}'; known environments: {known}")
    raw = environments[name]
    if not isinstance(raw, Mapping):
        raise ConfigError(f"environment '{name}': expected an object of settings")
    try:
        # JSON mode: strict typing that still reads JSON arrays as tuples.
        return EnvironmentConfig.model_validate_json(json.dumps({"name": name, **raw}))
    except ValidationError as error:
        raise ConfigError(f"environment '{name}': {_describe(error)}") from None


def read_environments(cdk_json: Path | None = None) -> dict[str, Any]:
    """The `environments` mapping of cdk.json, for the operator command, which runs outside the CDK CLI."""
    cdk_json = cdk_json or CDK_JSON
    try:
        document = json.loads(cdk_json.read_text())
    except json.JSONDecodeError as error:
        raise ConfigError(f"{cdk_json}: not valid JSON at line {error.lineno}, column {error.colno}: {error.msg}") from None
    environments = document.get("context", {}).get("environments") if isinstance(document, dict) else None
    if not isinstance(environments, dict):
        raise ConfigError(f"{cdk_json}: no context.environments object (each environment's settings live there)")
    return environments
