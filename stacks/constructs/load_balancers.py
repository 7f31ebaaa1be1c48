"""Network load balancers in front of every Service Fabric node.

Two instances of `NodeLoadBalancer`: the management one (client connection 19000 and HTTP
gateway 19080, TLS passed through to the nodes, admitted only from the management CIDRs) and the
application one (the configured application ports). Each has a security group of its own, and
the nodes admit its ports only from that group.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence

from aws_cdk import Duration
from aws_cdk import aws_autoscaling as autoscaling
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_elasticloadbalancingv2 as elbv2
from aws_cdk import aws_elasticloadbalancingv2_targets as targets
from aws_cdk import aws_s3 as s3
from constructs import Construct

from stacks.compliance import acknowledge
from stacks.constructs.node_security import NodeSecurity


class NodeLoadBalancer(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        vpc: ec2.IVpc,
        load_balancer_name: str,
        purpose: str,
        ports: Sequence[int],
        client_cidrs: Sequence[str],
        internet_facing: bool,
        node_security: NodeSecurity,
        access_logs: s3.IBucket,
        deletion_protection: bool,
        world_open_reason: str | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        self.ports = tuple(ports)
        self.security_group = ec2.SecurityGroup(
            self,
            "SecurityGroup",
            vpc=vpc,
            description=f"{purpose}: TCP {', '.join(map(str, ports))} from {', '.join(client_cidrs)}",
            allow_all_outbound=False,
        )
        for cidr in client_cidrs:
            for port in ports:
                self.security_group.add_ingress_rule(ec2.Peer.ipv4(cidr), ec2.Port.tcp(port), f"{purpose} from {cidr}")
        if any(ipaddress.ip_network(cidr).prefixlen == 0 for cidr in client_cidrs):
            if not world_open_reason:
                raise ValueError(f"{purpose} admits 0.0.0.0/0; say why (world_open_reason)")
            acknowledge(self.security_group, "AwsSolutions-EC23", world_open_reason)
        node_security.allow_from_load_balancer(self.security_group, ports, purpose)

        self.load_balancer = elbv2.NetworkLoadBalancer(
            self,
            "LoadBalancer",
            vpc=vpc,
            load_balancer_name=load_balancer_name,
            internet_facing=internet_facing,
            vpc_subnets=ec2.SubnetSelection(
                subnet_type=ec2.SubnetType.PUBLIC if internet_facing else ec2.SubnetType.PRIVATE_WITH_EGRESS
            ),
            security_groups=[self.security_group],
            cross_zone_enabled=True,
            # Production: a stack update that would replace or delete it fails instead (ELB
            # "deletion_protection.enabled"); the DNS name clients and pipelines use stays.
            deletion_protection=deletion_protection,
        )
        # NLBs write access logs for TLS listeners only; these listeners pass TLS through as TCP,
        # so connections are recorded by the VPC flow logs and this bucket stays mostly empty.
        self.load_balancer.log_access_logs(access_logs, prefix=load_balancer_name)

        self.target_groups: list[elbv2.NetworkTargetGroup] = []
        for port in ports:
            target_group = elbv2.NetworkTargetGroup(
                self,
                f"Port{port}",
                vpc=vpc,
                port=port,
                protocol=elbv2.Protocol.TCP,
                target_type=elbv2.TargetType.INSTANCE,
                # A node that leaves the cluster is drained first; a minute covers in-flight calls.
                deregistration_delay=Duration.seconds(60),
                health_check=elbv2.HealthCheck(
                    protocol=elbv2.Protocol.TCP,
                    port=str(port),
                    interval=Duration.seconds(10),
                    healthy_threshold_count=3,
                    unhealthy_threshold_count=3,
                ),
            )
            self.load_balancer.add_listener(
                f"Listener{port}", port=port, protocol=elbv2.Protocol.TCP, default_target_groups=[target_group]
            )
            self.target_groups.append(target_group)

    @property
    def dns_name(self) -> str:
        return self.load_balancer.load_balancer_dns_name

    def add_group(self, group: autoscaling.AutoScalingGroup) -> None:
        for target_group in self.target_groups:
            group.attach_to_network_target_group(target_group)

    def add_instances(self, instance_ids: Iterable[str]) -> None:
        """Instance targets: the load balancer reaches each on its primary private address."""
        ids = list(instance_ids)
        for target_group in self.target_groups:
            target_group.add_target(*(targets.InstanceIdTarget(i) for i in ids))
