"""Network stack: owns the VPC and hands it to every other stack."""

from __future__ import annotations

from aws_cdk import Stack
from constructs import Construct

from stacks.config import EnvironmentConfig
from stacks.constructs.platform_network import PlatformNetwork
from stacks.removal import removal_policy


class NetworkStack(Stack):
    def __init__(self, scope: Construct, construct_id: str, *, config: EnvironmentConfig, **kwargs) -> None:
        super().__init__(scope, construct_id, **kwargs)
        network = PlatformNetwork(
            self,
            "Network",
            cidr=config.network.cidr,
            availability_zones=config.availability_zones,
            nat_gateways=config.network.nat_gateways,
            flow_log_retention_days=config.network.flow_log_retention_days,
            removal_policy=removal_policy(config),
        )
        self.vpc = network.vpc
