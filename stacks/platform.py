"""Builds the whole platform for one environment: every stack, wired together."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import aws_cdk as cdk
from cdk_nag import AwsSolutionsChecks

from stacks.config import ConfigError, EnvironmentConfig
from stacks.device_gateway_stack import DeviceGatewayStack
from stacks.monitoring_stack import MonitoringStack
from stacks.msk_stack import MskStack
from stacks.network_stack import NetworkStack
from stacks.node_lifecycle_stack import NodeLifecycleStack
from stacks.service_fabric_stack import ServiceFabricStack
from stacks.simulator_fleet_stack import SimulatorFleetStack
from stacks.sizing import assess_environment
from stacks.telemetry_sink_stack import TelemetrySinkStack


def create_app(*, context: Mapping[str, Any] | None = None, outdir: str | None = None) -> cdk.App:
    """An app with the compliance gate on: synthesis fails while any cdk-nag finding is open."""
    app = cdk.App(context=dict(context or {}), outdir=outdir)
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks())
    return app


def build_platform(app: cdk.App, config: EnvironmentConfig) -> dict[str, cdk.Stack]:
    # An environment that cannot hold the workload it declares is refused before anything is built
    # (stacks/sizing.py; `telemetry capacity --env NAME` shows every constraint).
    refusal = assess_environment(config).refusal()
    if refusal:
        raise ConfigError(
            f"environment '{config.name}' cannot hold its declared workload: {refusal} "
            f"(telemetry capacity --env {config.name} shows every constraint)"
        )
    env = cdk.Environment(account=config.account, region=config.region)
    # Stacks bound to an account ask it for its zones at synth time. Answer from config so
    # synthesis never needs credentials (this is the key the CDK's own lookup would fill).
    app.node.set_context(
        f"availability-zones:account={config.account}:region={config.region}", list(config.availability_zones)
    )
    prefix = config.stack_prefix

    def stack_props(part: str, description: str) -> dict[str, Any]:
        return {
            "stack_name": f"{prefix}-{part}",
            "env": env,
            "description": f"Telemetry platform ({config.name}): {description}",
            "termination_protection": config.production,
        }

    network = NetworkStack(app, f"{prefix}-Network", config=config, **stack_props("Network", "VPC and endpoints"))
    monitoring = MonitoringStack(
        app, f"{prefix}-Monitoring", config=config, **stack_props("Monitoring", "alarm topic and dashboard")
    )
    msk = MskStack(
        app,
        f"{prefix}-Msk",
        config=config,
        vpc=network.vpc,
        alarm_topic=monitoring.alarm_topic,
        dashboard=monitoring.dashboard,
        **stack_props("Msk", "Amazon MSK cluster"),
    )
    simulator_fleet = SimulatorFleetStack(
        app,
        f"{prefix}-SimulatorFleet",
        config=config,
        vpc=network.vpc,
        kafka=msk.kafka,
        bootstrap_parameter=msk.bootstrap_brokers.parameter,
        dashboard=monitoring.dashboard,
        **stack_props("SimulatorFleet", "simulator fleet driven over SSM Run Command"),
    )

    service_fabric = ServiceFabricStack(
        app,
        f"{prefix}-ServiceFabric",
        config=config,
        vpc=network.vpc,
        kafka=msk.kafka,
        alarm_topic=monitoring.alarm_topic,
        dashboard=monitoring.dashboard,
        **stack_props("ServiceFabric", "Service Fabric cluster on EC2 (seed nodes, scaling group, load balancers)"),
    )

    telemetry_sink = TelemetrySinkStack(
        app,
        f"{prefix}-TelemetrySink",
        config=config,
        vpc=network.vpc,
        kafka=msk.kafka,
        alarm_topic=monitoring.alarm_topic,
        dashboard=monitoring.dashboard,
        **stack_props("TelemetrySink", "Managed Flink job from MSK to Parquet in S3, Glue table for Athena"),
    )
    # The job reads the bootstrap broker parameter the MSK stack writes.
    telemetry_sink.add_stack_dependency(msk)

    node_lifecycle = NodeLifecycleStack(
        app,
        f"{prefix}-NodeLifecycle",
        config=config,
        vpc=network.vpc,
        scaling_group=service_fabric.scaling_group,
        gateway_client_security_group=service_fabric.gateway_client_security_group,
        gateway_endpoints=service_fabric.gateway_endpoints,
        alarms=monitoring.alarms,
        dashboard=monitoring.dashboard,
        **stack_props("NodeLifecycle", "Service Fabric node lifecycle: join on launch, drain on terminate, zombie reaper"),
    )

    device_gateway = DeviceGatewayStack(
        app,
        f"{prefix}-DeviceGateway",
        config=config,
        vpc=network.vpc,
        kafka=msk.kafka,
        fleet_role=simulator_fleet.fleet_role,
        alarm_topic=monitoring.alarm_topic,
        dashboard=monitoring.dashboard,
        **stack_props("DeviceGateway", "AWS IoT Core rule with the Kafka action into MSK, SCRAM user, device policy"),
    )

    cdk.Tags.of(app).add("Project", "telemetry-platform")
    cdk.Tags.of(app).add("Environment", config.name)
    return {
        "network": network,
        "monitoring": monitoring,
        "msk": msk,
        "simulator_fleet": simulator_fleet,
        "service_fabric": service_fabric,
        "telemetry_sink": telemetry_sink,
        "node_lifecycle": node_lifecycle,
        "device_gateway": device_gateway,
    }
