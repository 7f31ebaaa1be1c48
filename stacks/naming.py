"""Physical names other tools look resources up by. Plain functions of the config, no CDK import,
so the operator command (telemetry/) can use them without loading the CDK."""

from __future__ import annotations

from simulator.device_certificates import THING_LEVEL, TOPIC_ROOT, telemetry_topic
from stacks.config import EnvironmentConfig

FLEET_TAG = "telemetry:fleet"
SIMULATOR_METRICS_NAMESPACE = "Telemetry/Simulator"


def bootstrap_parameter_name(config: EnvironmentConfig) -> str:
    return f"/{config.resource_prefix}/msk/bootstrap-brokers-iam"


def topics_reconciled_parameter_name(config: EnvironmentConfig) -> str:
    """Written by `telemetry topics` when the declared topics and ACLs match, with a fingerprint of
    the cluster's brokers; `telemetry deploy` reads it to know its topics step is done."""
    return f"/{config.resource_prefix}/msk/topics-reconciled"


def topics_token_parameter_name(config: EnvironmentConfig) -> str:
    """Where `telemetry topics` leaves the topic administrator's MSK IAM token (SecureString)
    for the fleet host that reconciles the topics, for the length of one command."""
    return f"/{config.resource_prefix}/msk/topics-token"


def topics_token_key_alias(config: EnvironmentConfig) -> str:
    """The KMS key `telemetry topics` encrypts that token with: only this environment's fleet hosts
    may decrypt it, where the AWS managed aws/ssm key would let every principal of the account."""
    return f"alias/{config.resource_prefix}-topics-token"


def manage_topics_document_name(config: EnvironmentConfig) -> str:
    return f"{config.resource_prefix}-manage-topics"


def topic_admin_role_name(config: EnvironmentConfig) -> str:
    """The role operators assume to run telemetry/commands/topics.py (its ARN is also an MSK stack
    output); named so the script can find it from --env alone."""
    return f"{config.resource_prefix}-msk-topic-admin"


def simulator_fleet_name(config: EnvironmentConfig) -> str:
    return f"{config.resource_prefix}-simulator"


def run_simulator_document_name(config: EnvironmentConfig) -> str:
    return f"{config.resource_prefix}-run-simulator"


def simulator_runs_log_group_name(config: EnvironmentConfig) -> str:
    return f"/{config.resource_prefix}/simulator-runs"


def simulator_fleet_commands_log_group_name(config: EnvironmentConfig) -> str:
    """Where the fleet hosts' SSM agent writes the whole output of the Run Command documents the
    operator command sends them (telemetry/shared/run_command_output.py)."""
    return f"/{config.resource_prefix}/simulator-fleet/commands"


# Service Fabric cluster: tags and names the stack sets and the operator tools and node lifecycle
# automation look instances, groups and hooks up by.
NODE_NAME_TAG = "sf:nodename"
NODE_TYPE_TAG = "sf:nodetype"
# The nodes' client connection endpoint and HTTP gateway (ClusterConfig.json's node types, the
# firewall, the load balancers and the operator tools all use these).
CLIENT_CONNECTION_PORT = 19000
HTTP_GATEWAY_PORT = 19080
CLUSTER_TAG = "sf:cluster"
SEED_NODE_TYPE = "PrimaryNodeType"
SCALING_NODE_TYPE = "ScalingNodeType"
LAUNCH_HOOK_NAME = "sf-join-cluster"
TERMINATE_HOOK_NAME = "sf-leave-cluster"
# Written by userdata/prepare_node.ps1; the create-cluster document and scale-out read it.
NODE_PREPARATION_STATUS_FILE = r"C:\ServiceFabric\prepare-node.status.json"


def gateway_thumbprint_parameter_name(config: EnvironmentConfig) -> str:
    """Written by telemetry/commands/cluster/bootstrap.py; the node lifecycle functions pin the gateway by it."""
    return f"/{config.resource_prefix}/service-fabric/gateway-thumbprint"


def node_application_parameters(config: EnvironmentConfig) -> str:
    """Where the Service Fabric applications' own settings are kept, readable on every node."""
    return f"/{config.resource_prefix}/applications/*"


def cluster_created_parameter_name(config: EnvironmentConfig) -> str:
    """Written by `telemetry cluster bootstrap` once the create-cluster command has succeeded, with
    the ServiceFabric stack's id; `telemetry deploy` reads it to know its bootstrap step is done."""
    return f"/{config.resource_prefix}/service-fabric/cluster-created"


def runtime_package_path(config: EnvironmentConfig) -> str:
    """The pinned runtime CAB: userdata/prepare_node.ps1 downloads it here, and the create-cluster
    and add-node documents install from it (-FabricRuntimePackagePath). The file name carries the
    version, so a node prepared for another version has no file at this path."""
    return rf"C:\ServiceFabric\Package\MicrosoftServiceFabric.{config.service_fabric.runtime_version}.cab"
SERVICE_FABRIC_METRICS_NAMESPACE = "Telemetry/ServiceFabricNodes"
# Local administrator that cluster set-up runs as (outside an Active Directory domain): on seeds
# with the stack's generated password (deployment_secret_name), disabled once the cluster is
# created; on a scaling node with a one-time password of the add-node document, disabled after.
DEPLOYMENT_ACCOUNT = "sfdeploy"


def deployment_secret_name(config: EnvironmentConfig) -> str:
    """The seeds' deployment-account password, generated by the ServiceFabric stack; only the seed
    role may read it (cluster creation administers every seed as that account)."""
    return f"{config.resource_prefix}/service-fabric/seed-deployment-password"


# Node lifecycle automation (scale-out joins, scale-in drains, the zombie reaper).
NODE_LIFECYCLE_METRICS_NAMESPACE = "Telemetry/NodeLifecycle"


def node_lifecycle_state_machine_name(config: EnvironmentConfig, flow: str) -> str:
    """flow: 'scale-in' or 'scale-out'."""
    return f"{config.resource_prefix}-sf-{flow}"


def state_machine_arn(config: EnvironmentConfig, name: str) -> str:
    """Literal, so dashboards and alarms in other stacks can name it without a reference."""
    return f"arn:aws:states:{config.region}:{config.account}:stateMachine:{name}"


def membership_lock_table_name(config: EnvironmentConfig) -> str:
    return f"{config.resource_prefix}-sf-membership-lock"


def add_node_document_name(config: EnvironmentConfig) -> str:
    return f"{config.resource_prefix}-sf-add-node"


def service_fabric_cluster_name(config: EnvironmentConfig) -> str:
    return f"{config.resource_prefix}-sf"


def seed_node_name(index: int) -> str:
    return f"seed-{index}"


def node_lifecycle_alarm_name(cluster_name: str, kind: str) -> str:
    """Named, so an instance refresh can stop on it (its AlarmSpecification takes alarm names)."""
    return f"{cluster_name}-lifecycle-{kind}"


# The alarms an instance refresh of the scaling group stops on (telemetry cluster refresh): a
# replacement node that did not join, an old node whose drain failed, a seed gone Down meanwhile.
REFRESH_STOP_ALARMS = ("JoinFailed", "DrainFailed", "SeedNodeDown")


def scaling_group_name(config: EnvironmentConfig) -> str:
    return f"{service_fabric_cluster_name(config)}-scaling"


def management_load_balancer_name(config: EnvironmentConfig) -> str:
    # Load balancer names are limited to 32 characters; environment names to 16.
    return f"{config.resource_prefix}-mgmt"


def application_load_balancer_name(config: EnvironmentConfig) -> str:
    return f"{config.resource_prefix}-apps"


def create_cluster_document_name(config: EnvironmentConfig) -> str:
    return f"{config.resource_prefix}-create-sf-cluster"


def stop_host_document_name(config: EnvironmentConfig) -> str:
    """The scale-in's document that stops FabricHostSvc on a node being removed, and nothing else."""
    return f"{config.resource_prefix}-sf-stop-host"


def cluster_nodes_document_name(config: EnvironmentConfig) -> str:
    """The read-only document that lists the cluster's nodes as a seed sees them (telemetry/shared/cluster_nodes.py)."""
    return f"{config.resource_prefix}-sf-cluster-nodes"


def node_log_group_name(config: EnvironmentConfig) -> str:
    return f"/{config.resource_prefix}/service-fabric/nodes"


# Telemetry sink: the Flink application, its consumer group, log group and Glue catalog names.
# Dashboards and alarms name the application literally (no token crosses stacks).
FLINK_METRICS_NAMESPACE = "AWS/KinesisAnalytics"
# Counter the Flink job registers under the `kinesisanalytics` metric group for every record it
# writes to the dead-letter prefix (flink/, ParseTelemetry.DEAD_LETTER_METRIC).
DEAD_LETTER_METRIC = "DeadLetterRecords"
# Readings the job filed by ingest time because the device's clock was outside the table's
# projection (flink/, ParseTelemetry.CLOCK_OUT_OF_RANGE_METRIC).
CLOCK_OUT_OF_RANGE_METRIC = "ClockOutOfRangeRecords"
TELEMETRY_PREFIX = "telemetry"
DEAD_LETTER_PREFIX = "dead-letter"
ATHENA_RESULTS_PREFIX = "athena-results"
# Records of `telemetry deploy`'s smoke runs (run ids starting with SMOKE_RUN_PREFIX, the Flink job's
# SinkJobConfig.SMOKE_RUN_PREFIX): the sink writes them here, beside the table's prefix, and they
# expire after SMOKE_EXPIRE_DAYS, so a deployment's check never leaves data in the lake.
SMOKE_PREFIX = "smoke"
SMOKE_RUN_PREFIX = "smoke-"
SMOKE_EXPIRE_DAYS = 1


def telemetry_sink_application_name(config: EnvironmentConfig) -> str:
    return f"{config.resource_prefix}-telemetry-sink"


def telemetry_sink_consumer_group(config: EnvironmentConfig) -> str:
    return f"telemetry-sink-{config.name}"


def telemetry_sink_log_group_name(config: EnvironmentConfig) -> str:
    return f"/{config.resource_prefix}/telemetry-sink"


def telemetry_database_name(config: EnvironmentConfig) -> str:
    # Athena names take letters, digits and underscores; a hyphen would need quoting in every query.
    return f"telemetry_{config.name.replace('-', '_')}"


TELEMETRY_TABLE_NAME = "telemetry"


def athena_workgroup_name(config: EnvironmentConfig) -> str:
    return f"{config.resource_prefix}-telemetry"


# Device gateway: AWS IoT Core into MSK through the rules engine's Kafka action.
# Devices publish to telemetry/<environment>/<thing name>/data (the simulator's devices too, hence
# the one definition there); the rule reads its own environment's topics only and the thing name
# from topic(THING_LEVEL).
DEVICE_THING_LEVEL = THING_LEVEL


# Dimension values of AWS IoT's CloudWatch metrics (namespace AWS/IoT). "AWS IoT metrics and
# dimensions" says only "ActionType: The action type specified by the rule that triggered the
# request", with no list of values. The alarms do not depend on it: they sum every ActionType of
# the rule with a Metrics Insights query (device_gateway_monitoring.py). telemetry/commands/simulate.py's report
# reads plain metrics, so it sums each documented spelling of the action: its name in the API
# ("Rule actions" table, "Name in API") and the error action message's failedAction form
# ("Error handling": "S3Action"). Protocol is the console's name for MQTT; not verified from a
# document either (the broker alarms depend on it).
IOT_KAFKA_ACTION_TYPES = ("KafkaAction", "kafka")
IOT_ERROR_ACTION_TYPES = ("SqsAction", "sqs")
IOT_MQTT_PROTOCOL = "MQTT"


# The thing attribute naming a device's environment: telemetry/commands/devices/provision.py sets it, and the device
# policy lets only things carrying the environment's name connect (device_policy.py).
DEVICE_ENVIRONMENT_ATTRIBUTE = "environment"


def device_topic_filter(config: EnvironmentConfig) -> str:
    """The topics of the environment's devices, as an MQTT topic filter (the rule's FROM)."""
    return telemetry_topic(config.name, "+")


def device_topic_prefix(config: EnvironmentConfig) -> str:
    """What comes before the thing name in the environment's device topics: telemetry/<name>."""
    return f"{TOPIC_ROOT}/{config.name}"


def device_gateway_secret_name(config: EnvironmentConfig) -> str:
    """MSK only associates SCRAM secrets whose names begin with AmazonMSK_ (MSK Developer Guide,
    "Set up SASL/SCRAM authentication for an Amazon MSK cluster")."""
    return f"AmazonMSK_{config.resource_prefix}-device-gateway"


def device_rule_name(config: EnvironmentConfig) -> str:
    # Topic rule names allow only letters, digits and underscores.
    return f"{config.resource_prefix}_device_telemetry".replace("-", "_")


def device_policy_name(config: EnvironmentConfig) -> str:
    return f"{config.resource_prefix}-device"


def scram_bootstrap_parameter_name(config: EnvironmentConfig) -> str:
    return f"/{config.resource_prefix}/msk/bootstrap-brokers-scram"


def device_thing_prefix(config: EnvironmentConfig) -> str:
    return f"{config.resource_prefix}-device-"


def device_thing_name(config: EnvironmentConfig, index: int) -> str:
    """The simulator fleet's IoT things, made by telemetry/commands/devices/provision.py; the number has
    simulator.device_credentials.DEVICE_DIGITS digits."""
    return f"{device_thing_prefix(config)}{index:06d}"


def device_failed_deliveries_queue_name(config: EnvironmentConfig) -> str:
    """The queue the device rule's error action fills and `telemetry devices replay` empties."""
    return f"{config.resource_prefix}-device-failed-deliveries"


# The device gateway stack's output with that queue's URL (the replay reads it).
FAILED_DELIVERIES_QUEUE_OUTPUT = "FailedDeliveriesQueueUrl"
# The longest SQS keeps a message (SQS Developer Guide, "Amazon SQS message quotas": 14 days),
# which the dead-letter queues keep; the age at which a failed device message is alarmed on (the
# queue's Expiring alarm) and refused to be left behind (telemetry devices replay).
SQS_MAX_RETENTION_DAYS = 14
FAILED_DELIVERIES_EXPIRY_WARNING_DAYS = 10


def device_credentials_path(config: EnvironmentConfig) -> str:
    """SSM parameter path under which each simulator device's certificate and key are kept."""
    return f"/{config.resource_prefix}/devices"
