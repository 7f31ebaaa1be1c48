"""What an environment costs a month, from its synthesized templates, a price table and a usage
scenario. Every resource of every stack is either priced (one or more lines that follow the AWS
bill) or listed as no-charge with the reason; a resource type this module does not know is
reported as unpriced, and the test suite fails on it, so a resource added later is priced when it
is added.

Conventions (the ones AWS's own pricing pages and calculator use):
- a month is 730 hours; a GB is 2^30 bytes;
- no free tier is counted, except where a price has a permanent free allowance per resource
  that the line names (the Glue Data Catalog's first million objects);
- a "usage" line grows with the scenario (messages, devices); the others are the fixed floor
  the environment costs idle;
- what the templates cannot say (log volumes, scale events a month, Lambda durations) is an
  assumption named in ASSUMPTIONS and in the line's item, never a hidden constant.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from telemetry.shared.prices import PriceTable

HOURS_PER_MONTH = 730
SECONDS_PER_MONTH = HOURS_PER_MONTH * 3600
MINUTES_PER_MONTH = HOURS_PER_MONTH * 60
GB = 2**30
TRANSPORTS = ("kafka", "mqtt", "basic-ingest")
IOT_METERING_BYTES = 5 * 1024  # AWS IoT Core meters messages in 5 KB increments (IoT Core pricing page)

# Assumptions the templates cannot answer, each stated where it is used.
ASSUMPTIONS = {
    "log_gb_per_group_month": 1.0,  # CloudWatch Logs ingested per log group a month
    "flow_log_gb_month": 5.0,  # VPC flow log records a month (vended logs)
    "scale_events_month": 60,  # node joins plus drains a month (one each way a day)
    "transitions_per_execution": 80,  # Step Functions states entered per join or drain, polls included
    "lambda_invocations_per_execution": 12,
    "lambda_seconds": 1.0,  # average duration of a node lifecycle step
    "kms_requests_month": 100_000,  # per key
    "secret_calls_month": 10_000,  # per secret
    "small_bucket_gb": 1.0,  # logs, results and query results buckets
    "alarm_emails_month": 100,
    # Parquet bytes a message takes in the sink's files: 14-16 measured with simulator messages
    # (README "File sizes", CheckpointPartSizeTest); real sensor readings compress less.
    "parquet_bytes_per_message": 16,
    "flink_backup_gb": 1.0,  # snapshots kept for the Flink application
    "snapshot_gb_fraction": 1.0,  # EBS snapshots: the whole data volume once (an upper bound)
    "athena_query_days": 1,  # the per-query figure: a query over one day of messages
}
# Amazon MSK Developer Guide, "Amazon MSK metrics for monitoring Standard brokers with CloudWatch":
# the metrics added by each enhanced monitoring level (DEFAULT is free). Counts from its tables.
MSK_METRICS_PER_BROKER = {"DEFAULT": 0, "PER_BROKER": 34, "PER_TOPIC_PER_BROKER": 34, "PER_TOPIC_PER_PARTITION": 34}
MSK_METRICS_PER_TOPIC_PER_BROKER = {"PER_TOPIC_PER_BROKER": 6, "PER_TOPIC_PER_PARTITION": 6}

S3_STORAGE = {"STANDARD": "s3.standard", "STANDARD_IA": "s3.standard_ia", "GLACIER_IR": "s3.glacier_ir",
              "GLACIER": "s3.glacier"}
S3_TRANSITION = {"STANDARD_IA": "s3.transition.standard_ia", "GLACIER_IR": "s3.transition.glacier_ir",
                 "GLACIER": "s3.transition.glacier"}

NO_CHARGE = {
    "AWS::IAM::Role": "IAM has no charge",
    "AWS::IAM::Policy": "IAM has no charge",
    "AWS::IAM::ManagedPolicy": "IAM has no charge",
    "AWS::IAM::InstanceProfile": "IAM has no charge",
    "AWS::EC2::VPC": "a VPC has no charge of its own",
    "AWS::EC2::Subnet": "subnets have no charge",
    "AWS::EC2::RouteTable": "route tables have no charge",
    "AWS::EC2::Route": "routes have no charge",
    "AWS::EC2::SubnetRouteTableAssociation": "route table associations have no charge",
    "AWS::EC2::InternetGateway": "an internet gateway has no charge (data out is billed to what sends it)",
    "AWS::EC2::VPCGatewayAttachment": "attaching a gateway has no charge",
    "AWS::EC2::SecurityGroup": "security groups have no charge",
    "AWS::EC2::SecurityGroupIngress": "security group rules have no charge",
    "AWS::EC2::SecurityGroupEgress": "security group rules have no charge",
    "AWS::EC2::PlacementGroup": "placement groups have no charge",
    "AWS::EC2::LaunchTemplate": "priced through the instances or Auto Scaling group that launch it",
    "AWS::EC2::FlowLog": "its records are priced as vended logs in the log group it writes to",
    "AWS::ElasticLoadBalancingV2::Listener": "listeners are in the load balancer's price",
    "AWS::ElasticLoadBalancingV2::TargetGroup": "target groups are in the load balancer's price",
    "AWS::Events::Rule": "rules matching AWS service events and schedules have no charge",
    "AWS::Lambda::Permission": "permissions have no charge",
    "AWS::S3::BucketPolicy": "bucket policies have no charge",
    "AWS::SNS::TopicPolicy": "topic policies have no charge",
    "AWS::SQS::Queue": "billed per request only; the lifecycle events' dead-letter queue is written only when an event is lost and read by hand",
    "AWS::SQS::QueuePolicy": "queue policies have no charge",
    "AWS::SecretsManager::ResourcePolicy": "a secret's resource policy has no charge (the secret itself is priced)",
    "AWS::SNS::Subscription": "subscriptions have no charge; the emails are priced on the topic",
    "AWS::SSM::Document": "Run Command documents and their commands have no charge",
    "AWS::SSM::Parameter": "standard-tier parameters have no charge",
    "AWS::KMS::Alias": "aliases have no charge; the key is priced",
    "AWS::MSK::Configuration": "broker configurations have no charge",
    "AWS::ApplicationAutoScaling::ScalableTarget": "Application Auto Scaling has no charge; the storage it adds is "
    "MSK storage (its alarms' metrics are CloudWatch's)",
    "AWS::ApplicationAutoScaling::ScalingPolicy": "Application Auto Scaling has no charge; target tracking's two "
    "alarms are created by the service, not the stack",
    "AWS::MSK::BatchScramSecret": "associating a secret has no charge; the secret is priced",
    "AWS::KinesisAnalyticsV2::ApplicationCloudWatchLoggingOption": "its log group is priced",
    "AWS::Logs::LogStream": "log streams have no charge; the log group is priced",
    "AWS::IoT::Policy": "AWS IoT policies have no charge",
    "AWS::IoT::TopicRuleDestination": "a VPC destination has no charge of its own; its traffic to the brokers is in the MSK line",
    "AWS::Glue::Database": "within the Data Catalog's free first million objects",
    "AWS::Glue::Table": "within the Data Catalog's free first million objects; partition projection stores no partitions",
    "AWS::Athena::WorkGroup": "queries are charged per TB scanned; see the per-query figure",
    "AWS::DLM::LifecyclePolicy": "Data Lifecycle Manager has no charge; the snapshots it keeps are priced with the instances",
    "Custom::AWS": "runs a Lambda function during deployments only",
    "Custom::S3AutoDeleteObjects": "runs a Lambda function during deployments only",
    "Custom::VpcRestrictDefaultSG": "runs a Lambda function during deployments only",
}


@dataclass(frozen=True)
class Scenario:
    rate: float  # messages per second, the whole fleet
    devices: int
    message_bytes: int
    transport: str  # kafka | mqtt | basic-ingest

    @property
    def messages(self) -> float:
        return self.rate * SECONDS_PER_MONTH

    @property
    def gb(self) -> float:
        return self.messages * self.message_bytes / GB


@dataclass(frozen=True)
class Line:
    stack: str
    logical_id: str
    type: str
    item: str
    quantity: float
    unit: str
    unit_usd: float
    monthly_usd: float
    source: str
    usage: bool = False  # grows with the scenario; otherwise part of the fixed floor


@dataclass(frozen=True)
class NoCharge:
    stack: str
    logical_id: str
    type: str
    reason: str


@dataclass
class Estimate:
    environment: str
    region: str
    scenario: Scenario
    lines: list[Line] = field(default_factory=list)
    no_charge: list[NoCharge] = field(default_factory=list)
    unpriced: list[NoCharge] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    athena_per_query_usd: float = 0.0
    athena_per_query_gb: float = 0.0

    @property
    def monthly_usd(self) -> float:
        return sum(line.monthly_usd for line in self.lines)

    @property
    def floor_usd(self) -> float:
        return sum(line.monthly_usd for line in self.lines if not line.usage)

    @property
    def usage_usd(self) -> float:
        return self.monthly_usd - self.floor_usd

    @property
    def per_million_messages_usd(self) -> float | None:
        messages = self.scenario.messages
        return self.monthly_usd / (messages / 1e6) if messages else None

    @property
    def per_device_year_usd(self) -> float | None:
        return self.monthly_usd * 12 / self.scenario.devices if self.scenario.devices else None

    def as_dict(self, paths: dict[str, float]) -> dict[str, Any]:
        return {
            "environment": self.environment,
            "region": self.region,
            "scenario": asdict(self.scenario),
            "monthly_usd": round(self.monthly_usd, 2),
            "floor_usd": round(self.floor_usd, 2),
            "usage_usd": round(self.usage_usd, 2),
            "lines": [asdict(line) for line in self.lines],
            "no_charge": [asdict(item) for item in self.no_charge],
            "unpriced": [asdict(item) for item in self.unpriced],
            "per_million_messages_usd": _round(self.per_million_messages_usd),
            "per_device_year_usd": _round(self.per_device_year_usd),
            "athena_per_query": {"gb_scanned": round(self.athena_per_query_gb, 3), "usd": round(self.athena_per_query_usd, 4)},
            "paths": {name: round(total, 2) for name, total in paths.items()},
            "assumptions": ASSUMPTIONS,
            "notes": self.notes,
        }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def iot_messaging_usd(prices: PriceTable, million_messages: float) -> float:
    """AWS IoT Core's tiered messaging price for a month's metered messages (in millions)."""
    usd, lower = 0.0, 0.0
    for upper, price in prices.tiers("iot.messaging"):
        top = million_messages if upper is None else min(million_messages, upper)
        if top > lower:
            usd += (top - lower) * price
        if upper is None or million_messages <= upper:
            break
        lower = upper
    return usd


def metered_messages(scenario: Scenario) -> float:
    """Messages as AWS IoT Core bills them: each in 5 KB steps (a 6 KB message counts as two)."""
    return scenario.messages * math.ceil(scenario.message_bytes / IOT_METERING_BYTES)


class Pricer:
    """Prices one environment's stacks: one method per resource type that costs money."""

    def __init__(self, config: Any, stacks: Sequence[Any], prices: PriceTable, scenario: Scenario) -> None:
        self.config, self.stacks, self.prices, self.scenario = config, stacks, prices, scenario
        self.estimate = Estimate(config.name, config.region, scenario)

    # -- the walk ---------------------------------------------------------------------------

    def run(self) -> Estimate:
        handlers: dict[str, Callable[[Any, str, dict], None]] = {
            "AWS::MSK::Cluster": self.msk_cluster,
            "AWS::EC2::Instance": self.instance,
            "AWS::AutoScaling::AutoScalingGroup": self.auto_scaling_group,
            "AWS::EC2::NatGateway": self.nat_gateway,
            "AWS::EC2::EIP": self.elastic_ip,
            "AWS::ElasticLoadBalancingV2::LoadBalancer": self.load_balancer,
            "AWS::EC2::VPCEndpoint": self.vpc_endpoint,
            "AWS::FSx::FileSystem": self.fsx,
            "AWS::KinesisAnalyticsV2::Application": self.flink,
            "AWS::S3::Bucket": self.bucket,
            "AWS::CloudWatch::Alarm": self.alarm,
            "AWS::CloudWatch::Dashboard": self.dashboard,
            "AWS::Logs::LogGroup": self.log_group,
            "AWS::SecretsManager::Secret": self.secret,
            "AWS::KMS::Key": self.kms_key,
            "AWS::StepFunctions::StateMachine": self.state_machine,
            "AWS::Lambda::Function": self.function,
            "AWS::DynamoDB::GlobalTable": self.dynamodb_table,
            "AWS::DynamoDB::Table": self.dynamodb_table,
            "AWS::IoT::TopicRule": self.topic_rule,
            "AWS::SNS::Topic": self.sns_topic,
            "AWS::AutoScaling::ScalingPolicy": self.scaling_policy,
        }
        for stack in self.stacks:
            for logical_id, resource in stack.template.get("Resources", {}).items():
                kind = resource["Type"]
                if kind in handlers:
                    handlers[kind](stack, logical_id, resource)
                elif kind in NO_CHARGE:
                    self.estimate.no_charge.append(NoCharge(stack.name, logical_id, kind, NO_CHARGE[kind]))
                else:
                    self.estimate.unpriced.append(NoCharge(stack.name, logical_id, kind, "no price known for this type"))
        self.outside_the_stacks()
        return self.estimate

    def line(self, stack: Any, logical_id: str, kind: str, item: str, quantity: float, key: str, *,
             usage: bool = False, unit_usd: float | None = None) -> None:  # fmt: skip
        price = self.prices.usd(key) if unit_usd is None else unit_usd
        self.estimate.lines.append(Line(
            stack if isinstance(stack, str) else stack.name, logical_id, kind, item, round(quantity, 6),
            self.prices.unit(key), price, round(quantity * price, 4), self.prices.source(key), usage,
        ))  # fmt: skip

    # -- compute -------------------------------------------------------------------------------

    def _instance_key(self, instance_type: str, windows: bool) -> str:
        return f"ec2.{instance_type}.{'windows' if windows else 'linux'}"

    def _image_is_windows(self, stack: Any, image: Any) -> bool:
        """The image comes from a public SSM parameter the template declares (the CDK's
        MachineImage.latest_windows / latest_amazon_linux2023): its path names the OS."""
        if isinstance(image, dict) and "Ref" in image:
            parameter = stack.template.get("Parameters", {}).get(image["Ref"], {})
            return "windows" in str(parameter.get("Default", "")).lower()
        return "windows" in str(image).lower()

    def _volumes(self, stack: Any, logical_id: str, kind: str, mappings: Iterable[dict], count: float, who: str) -> None:
        for mapping in mappings or []:
            ebs = mapping.get("Ebs") or {}
            size = ebs.get("VolumeSize")
            if not size:
                continue
            volume_type = ebs.get("VolumeType", "gp3")
            if volume_type != "gp3":
                raise ValueError(f"{stack.name}/{logical_id}: volume type {volume_type} has no price here")
            self.line(stack, logical_id, kind, f"EBS gp3 {mapping['DeviceName']} {size} GB x {count:g} {who}",
                      size * count, "ebs.gp3.storage")

    def _launch_template(self, stack: Any, reference: dict) -> dict:
        template_id = reference["LaunchTemplateId"]["Ref"]
        return stack.template["Resources"][template_id]["Properties"]["LaunchTemplateData"]

    def instance(self, stack: Any, logical_id: str, resource: dict) -> None:
        props = resource["Properties"]
        data = self._launch_template(stack, props["LaunchTemplate"]) if "LaunchTemplate" in props else {}
        instance_type = props.get("InstanceType") or data["InstanceType"]
        windows = self._image_is_windows(stack, props.get("ImageId") or data.get("ImageId"))
        kind = resource["Type"]
        self.line(stack, logical_id, kind, f"{instance_type} {'Windows (licence included)' if windows else 'Linux'}",
                  HOURS_PER_MONTH, self._instance_key(instance_type, windows))
        self._volumes(stack, logical_id, kind, props.get("BlockDeviceMappings") or data.get("BlockDeviceMappings"), 1, "instance")
        self._seed_snapshots(stack, logical_id, kind, data)

    def _seed_snapshots(self, stack: Any, logical_id: str, kind: str, data: dict) -> None:
        """The DLM policy of the stack snapshots the instances' data volumes (boot excluded)."""
        policies = [r for r in stack.template["Resources"].values() if r["Type"] == "AWS::DLM::LifecyclePolicy"]
        if not policies:
            return
        data_gb = sum((m.get("Ebs") or {}).get("VolumeSize", 0) for m in data.get("BlockDeviceMappings", [])[1:])
        if data_gb:
            fraction = ASSUMPTIONS["snapshot_gb_fraction"]
            self.line(stack, logical_id, kind, f"EBS snapshots of its {data_gb} GB data volume (assumed {fraction:g} x the "
                      "volume: incremental snapshots, an upper bound)", data_gb * fraction, "ebs.snapshot")

    def auto_scaling_group(self, stack: Any, logical_id: str, resource: dict) -> None:
        props = resource["Properties"]
        data = self._launch_template(stack, props["LaunchTemplate"])
        count, why = self._group_size(stack, props)
        windows = self._image_is_windows(stack, data.get("ImageId"))
        instance_type = data["InstanceType"]
        kind = resource["Type"]
        self.line(stack, logical_id, kind,
                  f"{count} x {instance_type} {'Windows (licence included)' if windows else 'Linux'} ({why})",
                  count * HOURS_PER_MONTH, self._instance_key(instance_type, windows))
        self._volumes(stack, logical_id, kind, data.get("BlockDeviceMappings"), count, "instances")

    def _group_size(self, stack: Any, props: dict) -> tuple[int, str]:
        if props.get("DesiredCapacity") is not None:
            return int(props["DesiredCapacity"]), "desired capacity"
        if stack.name.endswith("-ServiceFabric"):
            # The template leaves desired capacity to the operator (telemetry cluster scale).
            desired = self.config.service_fabric.scaling_desired_nodes
            return desired, f"service_fabric.scaling_desired_nodes; up to {props['MaxSize']}"
        return int(props["MinSize"]), "minimum size"

    def msk_cluster(self, stack: Any, logical_id: str, resource: dict) -> None:
        props = resource["Properties"]
        kind = resource["Type"]
        brokers = int(props["NumberOfBrokerNodes"])
        group = props["BrokerNodeGroupInfo"]
        instance_type = group["InstanceType"]
        volume = group["StorageInfo"]["EBSStorageInfo"]["VolumeSize"]
        self.line(stack, logical_id, kind, f"{brokers} brokers {instance_type}", brokers * HOURS_PER_MONTH,
                  f"msk.{instance_type}")
        self.line(stack, logical_id, kind, f"broker storage {brokers} x {volume} GB", brokers * volume, "msk.storage")
        if self.scenario.rate:
            # Storage auto scaling grows the volumes the rate needs (stacks/sizing.autoscaled_volume_gib).
            from stacks.sizing import autoscaled_volume_gib

            grown = autoscaled_volume_gib(self.config, rate=self.scenario.rate, provisioned=volume)
            if grown > volume:
                self.line(stack, logical_id, kind, f"broker storage auto scaling adds {grown - volume:,.0f} GB to each "
                          f"of {brokers} brokers at {self.scenario.rate:,.0f} msg/s", brokers * (grown - volume),
                          "msk.storage", usage=True)
        if props.get("StorageMode") == "TIERED" and self.scenario.rate:
            from stacks.sizing import remote_tier_gib

            self.line(stack, logical_id, kind, f"tiered storage: the telemetry topic's remote tier at "
                      f"{self.scenario.rate:,.0f} msg/s", remote_tier_gib(self.config, rate=self.scenario.rate),
                      "msk.tiered.storage", usage=True)
        level = props.get("EnhancedMonitoring", "DEFAULT")
        topics = len(self.config.msk.topics)
        metrics = brokers * (MSK_METRICS_PER_BROKER.get(level, 0) + topics * MSK_METRICS_PER_TOPIC_PER_BROKER.get(level, 0))
        if metrics:
            self.line(stack, logical_id, kind, f"{level} metrics ({metrics} CloudWatch metrics)", metrics, "cloudwatch.metric")
        # Client traffic to and from the brokers: with brokers and clients spread evenly over three
        # zones, two thirds of it crosses a zone, billed out of one and into the other. Replication
        # between brokers is not charged (Amazon MSK pricing page).
        crossing = self.scenario.gb * (2 / 3) * 2 * 2  # produce and consume, each billed both ways
        self.line(stack, logical_id, kind, "client traffic between zones (2/3 of produce and consume, both directions)",
                  crossing, "transfer.inter_az", usage=True)
        self._capacity_check()

    def _capacity_check(self) -> None:
        """Whether the environment holds the priced rate, by the capacity model that synthesis
        and `telemetry capacity` use (stacks/sizing.py), with the declared workload's message
        size, compression and consumers at the scenario's rate."""
        if not self.scenario.rate:
            return
        from stacks.sizing import assess_environment

        refusal = assess_environment(self.config, rate=self.scenario.rate).refusal()
        if refusal:
            self.estimate.notes.append(
                f"at {self.scenario.rate:,.0f} msg/s {self.config.name} is outside what it was sized for "
                f"(declared {self.config.workload.messages_per_second:,.0f} msg/s): {refusal}"
            )

    def nat_gateway(self, stack: Any, logical_id: str, resource: dict) -> None:
        kind = resource["Type"]
        self.line(stack, logical_id, kind, "NAT gateway", HOURS_PER_MONTH, "nat.hours")
        self.line(stack, logical_id, kind, "data processed (device traffic does not pass it; priced per GB hosts download)",
                  0, "nat.data")

    def elastic_ip(self, stack: Any, logical_id: str, resource: dict) -> None:
        self.line(stack, logical_id, resource["Type"], "public IPv4 address", HOURS_PER_MONTH, "ipv4.public")

    def load_balancer(self, stack: Any, logical_id: str, resource: dict) -> None:
        props = resource["Properties"]
        kind = resource["Type"]
        if props.get("Type") != "network":
            raise ValueError(f"{stack.name}/{logical_id}: only Network Load Balancers are priced")
        self.line(stack, logical_id, kind, "Network Load Balancer", HOURS_PER_MONTH, "nlb.hours")
        self.line(stack, logical_id, kind, "NLCUs (device telemetry does not pass it)", 0, "nlb.nlcu")
        if props.get("Scheme") == "internet-facing":
            zones = len(props.get("Subnets") or props.get("SubnetMappings") or [])
            self.line(stack, logical_id, kind, f"public IPv4 addresses, one per zone ({zones})", zones * HOURS_PER_MONTH,
                      "ipv4.public")

    def vpc_endpoint(self, stack: Any, logical_id: str, resource: dict) -> None:
        props = resource["Properties"]
        kind = resource["Type"]
        service = _service_name(props.get("ServiceName"))
        if props.get("VpcEndpointType") != "Interface":
            self.estimate.no_charge.append(NoCharge(stack.name, logical_id, kind, f"gateway endpoint ({service}) has no charge"))
            return
        zones = len(props.get("SubnetIds") or [])
        self.line(stack, logical_id, kind, f"interface endpoint {service} in {zones} zones", zones * HOURS_PER_MONTH,
                  "endpoint.hours")
        if service == "logs":
            self.line(stack, logical_id, kind, "data processed: the log groups' ingestion", self._log_gb(), "endpoint.data")

    def _log_gb(self) -> float:
        groups = sum(len(s.resources("AWS::Logs::LogGroup")) for s in self.stacks)
        return groups * ASSUMPTIONS["log_gb_per_group_month"]

    def fsx(self, stack: Any, logical_id: str, resource: dict) -> None:
        props = resource["Properties"]
        kind = resource["Type"]
        if props["FileSystemType"] != "OPENZFS" or props["OpenZFSConfiguration"]["DeploymentType"] != "SINGLE_AZ_1":
            raise ValueError(f"{stack.name}/{logical_id}: only FSx for OpenZFS SINGLE_AZ_1 is priced")
        zfs = props["OpenZFSConfiguration"]
        storage = props["StorageCapacity"]
        self.line(stack, logical_id, kind, f"OpenZFS SSD storage {storage} GB", storage, "fsx.openzfs.single_az_1.storage")
        self.line(stack, logical_id, kind, f"throughput capacity {zfs['ThroughputCapacity']} MBps",
                  zfs["ThroughputCapacity"], "fsx.openzfs.single_az_1.throughput")
        iops = zfs.get("DiskIopsConfiguration", {})
        if iops.get("Mode") == "USER_PROVISIONED":
            extra = max(0, int(iops["Iops"]) - 3 * storage)  # 3 IOPS per GB are included
            self.line(stack, logical_id, kind, f"provisioned IOPS over the included 3 per GB ({extra})", extra,
                      "fsx.openzfs.single_az_1.iops")
        if zfs.get("AutomaticBackupRetentionDays"):
            self.line(stack, logical_id, kind, f"backups ({zfs['AutomaticBackupRetentionDays']} days kept; assumed one "
                      "full copy of the file system, an upper bound)", storage, "fsx.backup")

    def flink(self, stack: Any, logical_id: str, resource: dict) -> None:
        kind = resource["Type"]
        parallelism = resource["Properties"]["ApplicationConfiguration"]["FlinkApplicationConfiguration"][
            "ParallelismConfiguration"]
        kpus = math.ceil(parallelism["Parallelism"] / parallelism["ParallelismPerKPU"])
        self.line(stack, logical_id, kind, f"{kpus} KPU for parallelism {parallelism['Parallelism']} "
                  "(autoscaling adds KPUs under load, each at this price)", kpus * HOURS_PER_MONTH, "flink.kpu")
        self.line(stack, logical_id, kind, "orchestration KPU (one per application)", HOURS_PER_MONTH, "flink.kpu")
        self.line(stack, logical_id, kind, f"running application storage, 50 GB per KPU", 50 * kpus, "flink.storage")
        self.line(stack, logical_id, kind, f"snapshots kept (assumed {ASSUMPTIONS['flink_backup_gb']:g} GB)",
                  ASSUMPTIONS["flink_backup_gb"], "flink.backup")

    def bucket(self, stack: Any, logical_id: str, resource: dict) -> None:
        kind = resource["Type"]
        rules = resource["Properties"].get("LifecycleConfiguration", {}).get("Rules", [])
        transitions = {t["StorageClass"]: int(t["TransitionInDays"]) for r in rules for t in r.get("Transitions", [])}
        if not transitions:
            gb = ASSUMPTIONS["small_bucket_gb"]
            self.line(stack, logical_id, kind, f"S3 Standard (logs and reports; assumed {gb:g} GB)", gb, "s3.standard")
            return
        self._data_bucket(stack, logical_id, kind, transitions)

    def _data_bucket(self, stack: Any, logical_id: str, kind: str, transitions: dict[str, int]) -> None:
        """The sink's bucket a year into this rate: the newest days in Standard, then each class
        the bucket's lifecycle rules move objects to, for as many days as they stay there."""
        gb_day = self.scenario.messages / (HOURS_PER_MONTH / 24) * ASSUMPTIONS["parquet_bytes_per_message"] / GB
        horizon = 365
        classes = [("STANDARD", 0), *sorted(transitions.items(), key=lambda item: item[1])]
        for index, (storage_class, start) in enumerate(classes):
            end = classes[index + 1][1] if index + 1 < len(classes) else horizon
            days = max(0, min(end, horizon) - min(start, horizon))
            span = f"days {start}-{end}" if days else f"from day {start} (none yet at month 12)"
            self.line(stack, logical_id, kind, f"S3 {storage_class}: {span} of the messages (month 12, "
                      f"{ASSUMPTIONS['parquet_bytes_per_message']} B a message in Parquet)", gb_day * days,
                      S3_STORAGE[storage_class], usage=True)
        files = self._sink_files_month()
        self.line(stack, logical_id, kind, f"PUT requests: {files:,.0f} part files a month, 3 requests each (multipart)",
                  files * 3 / 1000, "s3.put", usage=True)
        file_bytes = gb_day * 30.4 * GB / files if files else 0
        # S3 does not transition objects under 128 KB by default (S3 User Guide, "Transitioning objects").
        moved = files if file_bytes >= 128 * 1024 else 0
        for storage_class, start in classes[1:]:
            if start < horizon:
                self.line(stack, logical_id, kind, f"lifecycle transitions to {storage_class} ({moved:,.0f} files a month)",
                          moved / 1000, S3_TRANSITION[storage_class], usage=True)
        scanned_gb = gb_day * ASSUMPTIONS["athena_query_days"]
        self.estimate.athena_per_query_gb = scanned_gb
        self.estimate.athena_per_query_usd = scanned_gb / 1024 * self.prices.usd("athena.scanned")

    def _sink_files_month(self) -> float:
        """The Flink sink rolls one part file per subtask at each checkpoint while data flows."""
        if not self.scenario.rate:
            return 0.0
        settings = self.config.telemetry_sink
        return settings.parallelism * SECONDS_PER_MONTH / settings.checkpoint_interval_seconds

    def alarm(self, stack: Any, logical_id: str, resource: dict) -> None:
        props = resource["Properties"]
        metrics = [m for m in props.get("Metrics", []) if "MetricStat" in m] or [props]
        high_resolution = any(int((m.get("MetricStat") or m).get("Period", 60)) < 60 for m in metrics)
        key = "cloudwatch.alarm.high_resolution" if high_resolution else "cloudwatch.alarm"
        self.line(stack, logical_id, resource["Type"], f"alarm on {len(metrics)} metric(s)", len(metrics), key)

    def dashboard(self, stack: Any, logical_id: str, resource: dict) -> None:
        self.line(stack, logical_id, resource["Type"], "dashboard (priced in full: an account's first three are free, if not used elsewhere)", 1,
                  "cloudwatch.dashboard")

    def log_group(self, stack: Any, logical_id: str, resource: dict) -> None:
        kind = resource["Type"]
        flow_logs = any(r["Type"] == "AWS::EC2::FlowLog" and r["Properties"].get("LogGroupName", {}).get("Ref") == logical_id
                        for r in stack.template["Resources"].values())
        retention_months = resource["Properties"].get("RetentionInDays", 3653) / 30.4
        if flow_logs:
            gb = ASSUMPTIONS["flow_log_gb_month"]
            self.line(stack, logical_id, kind, f"VPC flow log records (assumed {gb:g} GB a month, vended logs)", gb,
                      "logs.vended")
        else:
            gb = ASSUMPTIONS["log_gb_per_group_month"]
            self.line(stack, logical_id, kind, f"ingestion (assumed {gb:g} GB a month)", gb, "logs.ingestion")
        self.line(stack, logical_id, kind, f"storage: {retention_months:.1f} months kept (uncompressed size, an upper bound)",
                  gb * retention_months, "logs.storage")

    def secret(self, stack: Any, logical_id: str, resource: dict) -> None:
        self._secret_lines(stack.name, logical_id, resource["Type"], "secret")

    def _secret_lines(self, stack: str, logical_id: str, kind: str, what: str) -> None:
        calls = ASSUMPTIONS["secret_calls_month"]
        self.line(stack, logical_id, kind, what, 1, "secrets.secret")
        self.line(stack, logical_id, kind, f"API calls (assumed {calls:,})", calls / 10_000, "secrets.api")

    def kms_key(self, stack: Any, logical_id: str, resource: dict) -> None:
        kind = resource["Type"]
        requests = ASSUMPTIONS["kms_requests_month"]
        self.line(stack, logical_id, kind, "customer managed key", 1, "kms.key")
        self.line(stack, logical_id, kind, f"requests (assumed {requests:,})", requests / 10_000, "kms.requests")

    def state_machine(self, stack: Any, logical_id: str, resource: dict) -> None:
        events, per = ASSUMPTIONS["scale_events_month"], ASSUMPTIONS["transitions_per_execution"]
        # Both flows share the month's scale events: half join, half drain.
        transitions = events / 2 * per
        self.line(stack, logical_id, resource["Type"],
                  f"state transitions ({events / 2:g} executions of ~{per} states, assumed)", transitions / 1000,
                  "states.transition")

    def function(self, stack: Any, logical_id: str, resource: dict) -> None:
        kind = resource["Type"]
        props = resource["Properties"]
        schedule = self._schedule_minutes(stack, logical_id)
        if schedule:
            invocations, why = MINUTES_PER_MONTH / schedule, f"every {schedule:g} minutes"
        elif stack.name.endswith("-NodeLifecycle"):
            functions = len(stack.resources("AWS::Lambda::Function"))
            per_function = ASSUMPTIONS["scale_events_month"] * ASSUMPTIONS["lambda_invocations_per_execution"] / max(1, functions)
            invocations, why = per_function, "node lifecycle steps (assumed)"
        else:
            self.estimate.no_charge.append(NoCharge(stack.name, logical_id, kind, "runs during deployments only"))
            return
        memory_gb = props.get("MemorySize", 128) / 1024
        arm = "arm64" in props.get("Architectures", [])
        seconds = ASSUMPTIONS["lambda_seconds"]
        self.line(stack, logical_id, kind, f"requests ({invocations:,.0f}, {why})", invocations / 1e6, "lambda.requests")
        self.line(stack, logical_id, kind, f"compute ({memory_gb * 1024:.0f} MB x {seconds:g} s each, assumed)",
                  invocations * memory_gb * seconds, "lambda.gb_second.arm" if arm else "lambda.gb_second")

    def _schedule_minutes(self, stack: Any, logical_id: str) -> float | None:
        for rule in stack.resources("AWS::Events::Rule").values():
            props = rule["Properties"]
            expression = props.get("ScheduleExpression", "")
            targets = [t.get("Arn", {}) for t in props.get("Targets", [])]
            if expression and any(t == {"Fn::GetAtt": [logical_id, "Arn"]} for t in targets):
                match = re.fullmatch(r"rate\((\d+) (minute|minutes|hour|hours)\)", expression)
                if match:
                    return int(match.group(1)) * (60 if match.group(2).startswith("hour") else 1)
        return None

    def dynamodb_table(self, stack: Any, logical_id: str, resource: dict) -> None:
        kind = resource["Type"]
        executions = ASSUMPTIONS["scale_events_month"]
        self.line(stack, logical_id, kind, f"write request units (lock taken and released, {executions} executions)",
                  executions * 4 / 1e6, "dynamodb.write")
        self.line(stack, logical_id, kind, "read request units (lock checks)", executions * 20 / 1e6, "dynamodb.read")
        self.line(stack, logical_id, kind, "storage (a few items)", 0.001, "dynamodb.storage")

    def topic_rule(self, stack: Any, logical_id: str, resource: dict) -> None:
        kind = resource["Type"]
        scenario = self.scenario
        if scenario.transport == "kafka":
            self.estimate.no_charge.append(NoCharge(stack.name, logical_id, kind,
                                                    "with the kafka transport devices produce to MSK: the rule sees no messages"))
            return
        self.line(stack, logical_id, kind, f"connectivity: {scenario.devices:,} devices connected all month",
                  scenario.devices * MINUTES_PER_MONTH / 1e6, "iot.connectivity", usage=True)
        if scenario.transport == "mqtt":
            million = metered_messages(scenario) / 1e6
            steps = math.ceil(scenario.message_bytes / IOT_METERING_BYTES)
            usd = iot_messaging_usd(self.prices, million)
            self.line(stack, logical_id, kind, f"messaging: {million:,.1f} million metered messages ({steps} x 5 KB each; "
                      "tiered)", million, "iot.messaging", usage=True, unit_usd=usd / million if million else 0)
        million = scenario.messages / 1e6
        self.line(stack, logical_id, kind, "rules triggered (one per message)", million, "iot.rules", usage=True)
        self.line(stack, logical_id, kind, "actions executed (the Kafka action, one per message)", million, "iot.actions",
                  usage=True)

    def scaling_policy(self, stack: Any, logical_id: str, resource: dict) -> None:
        """EC2 Auto Scaling has no charge, but a target tracking policy creates CloudWatch alarms of
        its own: one to scale out, and one to scale in unless scale-in is disabled."""
        props = resource["Properties"]
        if props.get("PolicyType") != "TargetTrackingScaling":
            self.estimate.no_charge.append(NoCharge(stack.name, logical_id, resource["Type"],
                                                    "EC2 Auto Scaling has no charge; the alarm that triggers it is priced"))
            return
        alarms = 1 if props["TargetTrackingConfiguration"].get("DisableScaleIn") else 2
        self.line(stack, logical_id, resource["Type"], f"the {alarms} alarm(s) target tracking creates", alarms,
                  "cloudwatch.alarm")

    def sns_topic(self, stack: Any, logical_id: str, resource: dict) -> None:
        emails = ASSUMPTIONS["alarm_emails_month"]
        self.line(stack, logical_id, resource["Type"], f"alarm emails (assumed {emails})", emails / 100_000, "sns.email")

    def outside_the_stacks(self) -> None:
        """What the environment needs that no stack creates: the two certificate secrets."""
        fabric = self.config.service_fabric
        for name in (fabric.cluster_certificate_secret, fabric.admin_certificate_secret):
            self._secret_lines("(created before deploying)", name, "AWS::SecretsManager::Secret", f"secret {name}")


# What each of a design's quantities (stacks/capacity.quantities) costs: its price's key.
DESIGN_PRICES = {"ebs_gib_month": "msk.storage", "tiered_gib_month": "msk.tiered.storage",
                 "express_storage_gib_month": "msk.express.storage", "express_data_in_gib": "msk.express.data_in"}  # fmt: skip


def design_usd(candidate: Any, prices: PriceTable) -> dict[str, float] | None:
    """A design's monthly price, per quantity; None when the table lacks one of its prices."""
    keys = {"broker_hours": f"msk.{candidate.design.broker_instance_type}", **DESIGN_PRICES}
    try:
        return {name: quantity * prices.usd(keys[name]) for name, quantity in candidate.quantities.items()}
    except KeyError:
        return None


def msk_designs(config: Any, prices: PriceTable) -> list[dict[str, Any]]:
    """The environment's MSK design and the smallest sound design of each kind (Standard with larger
    volumes, Standard with tiered storage, Express: stacks/capacity.propose) for its declared
    workload, priced from the same table; the cheapest marked. The environment's volumes are priced
    at what storage auto scaling holds them at for the declared rate."""
    from stacks import capacity, sizing

    msk = config.msk
    topic = sizing.sink_topic(config)
    workload = sizing.workload_of(config)
    tiered = msk.tiered(topic)
    own = capacity.MskDesign("tiered" if tiered else "standard", msk.broker_instance_type, msk.broker_count,
                             sizing.autoscaled_volume_gib(config, rate=workload.messages_per_second),
                             sizing.local_hours(config, topic) if tiered else None)  # fmt: skip
    shipped = capacity.Candidate(own, sizing.assess_environment(config),
                                 capacity.quantities(workload, own, topic.retention_hours))  # fmt: skip
    proposed = capacity.propose(
        workload, partitions=topic.partitions, replication_factor=topic.replication_factor,
        retention_hours=topic.retention_hours, fill_percent=msk.storage_autoscaling_target_percent,
        primary_retention_hours=sizing.local_hours(config, topic) if tiered else 6,
    )  # fmt: skip
    priced = [(candidate, design_usd(candidate, prices)) for candidate in [shipped, *proposed]]
    cheapest = min((sum(usd.values()) for _, usd in priced if usd is not None), default=None)
    return [
        {"design": candidate.design.describe(), "kind": candidate.design.kind, "this_environment": index == 0,
         "holds": candidate.assessment.ok,
         "monthly_usd": None if usd is None else round(sum(usd.values()), 2),
         "cheapest": usd is not None and round(sum(usd.values()), 2) == round(cheapest, 2),
         "quantities": {name: round(value, 1) for name, value in candidate.quantities.items()},
         "usd": None if usd is None else {name: round(value, 2) for name, value in usd.items()}}
        for index, (candidate, usd) in enumerate(priced)
    ]  # fmt: skip


def _service_name(value: Any) -> str:
    text = value if isinstance(value, str) else "".join(p if isinstance(p, str) else "" for p in value["Fn::Join"][1])
    return text.rsplit(".", 1)[-1]


def estimate(config: Any, stacks: Sequence[Any], prices: PriceTable, scenario: Scenario) -> Estimate:
    return Pricer(config, stacks, prices, scenario).run()


def paths(config: Any, stacks: Sequence[Any], prices: PriceTable, scenario: Scenario) -> dict[str, float]:
    """The same rate priced over each ingestion path: monthly totals."""
    return {
        transport.replace("-", "_"): estimate(config, stacks, prices, _with(scenario, transport)).monthly_usd
        for transport in TRANSPORTS
    }


def _with(scenario: Scenario, transport: str) -> Scenario:
    return Scenario(scenario.rate, scenario.devices, scenario.message_bytes, transport)
