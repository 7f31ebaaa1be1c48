"""Security groups of the Service Fabric nodes: cluster traffic between nodes only, and named
groups for whoever else may reach them (load balancers, HTTP gateway clients)."""

from __future__ import annotations

from collections.abc import Iterable

from aws_cdk import aws_ec2 as ec2
from constructs import Construct

from stacks.naming import HTTP_GATEWAY_PORT

# (protocol, first port, last port). Service Fabric's own traffic, between every node (the
# configured application and ephemeral ranges are added by NodeSecurity).
CLUSTER_PORTS = (
    ("tcp", 19000, 19003),  # client connection, cluster, lease driver, service connection
    ("tcp", 19080, 19081),  # HTTP gateway, reverse proxy
)
# Windows remote administration, only where Service Fabric's deployment code needs it
# (microsoft/service-fabric, src/prod/src/managed/Api/Dlls/Microsoft.ServiceFabric.DeploymentManager):
# - Cluster creation, run on one seed, checks TCP 445 on every machine of ClusterConfig
#   (StandaloneUtility.CheckRequiredPorts: DMConstants.SmbFileSharePort, the only required port),
#   copies the runtime to \\<IP>\C$ (Helpers.GetRemotePath), reads each machine's registry
#   (RegistryKey.OpenRemoteBaseKey: the winreg pipe over SMB) and starts FabricInstallerSvc and
#   FabricHostSvc through ServiceController(machine) (the service control manager over RPC; since
#   Windows Server 2019 over TCP via the endpoint mapper, 135, falling back to the SMB pipe). The
#   machines are the seeds: seed to seed, 445 and 135.
# - AddNode.ps1 configures only its own machine (DeploymentManagerInternal.AddNodeAsyncInternal:
#   machines = [its own address]; BestPracticesAnalyzer.ValidateAddNode checks that one machine)
#   and talks to the cluster on 19000: no node reaches another for it.
# - A removal's configuration upgrade: the Upgrade Orchestration Service, on whichever node hosts
#   it, checks TCP 445 on the machines being removed (StandaloneSettingsValidator
#   .ValidateTopologyAsync -> CheckRequiredPorts); only scaling nodes are removed by automation.
# No NetBIOS (137-139): every address above is an IP, reached by SMB directly over 445.
SEED_SETUP_PORTS = (
    ("tcp", 135, 135),  # RPC endpoint mapper: service control manager during cluster creation
    ("tcp", 445, 445),  # SMB: creation's port check, runtime copy, remote registry and SCM pipes
)
SCALING_SETUP_PORTS = (("tcp", 445, 445),)  # the UOS's port check before it removes a node


def port_range(protocol: str, first: int, last: int) -> ec2.Port:
    if protocol == "udp":
        return ec2.Port.udp(first) if first == last else ec2.Port.udp_range(first, last)
    return ec2.Port.tcp(first) if first == last else ec2.Port.tcp_range(first, last)


def firewall_ports(ranges: Iterable[tuple[str, int, int]], protocol: str) -> str:
    """The ranges of one protocol as Windows Firewall's -LocalPort list: '19000-19003,135'."""
    return ",".join(f"{a}" if a == b else f"{a}-{b}" for p, a, b in ranges if p == protocol)


class NodeSecurity(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        vpc: ec2.IVpc,
        cluster_name: str,
        application_port_range: tuple[int, int],
        ephemeral_port_range: tuple[int, int],
    ) -> None:
        super().__init__(scope, construct_id)
        self.node_ports = (
            *CLUSTER_PORTS,
            ("tcp", *application_port_range),
            ("tcp", *ephemeral_port_range),
        )
        self.nodes = ec2.SecurityGroup(
            self,
            "NodeSecurityGroup",
            vpc=vpc,
            description=f"Service Fabric nodes of {cluster_name}: cluster ports between nodes only",
            # Outbound is named too: the nodes hold the cluster certificate (an admin client
            # certificate) and an application on them must not reach anywhere on any port.
            allow_all_outbound=False,
        )
        for protocol, first, last in self.node_ports:
            port, purpose = port_range(protocol, first, last), f"Service Fabric cluster traffic {protocol} {first}-{last}"
            self.nodes.add_ingress_rule(self.nodes, port, purpose)
            self.nodes.add_egress_rule(self.nodes, port, purpose)
        # HTTPS: AWS APIs (through the VPC's interface endpoints, or the NAT gateway), the runtime
        # package, the CloudWatch agent and Windows Update. HTTP: Windows Update and the CRLs and
        # OCSP responders a signature or TLS chain check fetches. DNS, NTP (Amazon Time Sync),
        # Windows licence activation and instance metadata are not filtered by security groups
        # (Amazon VPC User Guide, "Security group rules": traffic they do not filter).
        for port, purpose in ((443, "HTTPS: AWS APIs, downloads, Windows Update"),
                              (80, "HTTP: Windows Update, certificate revocation lists and OCSP")):  # fmt: skip
            self.nodes.add_egress_rule(ec2.Peer.any_ipv4(), ec2.Port.tcp(port), purpose)
        # Set-up's remote administration, per node type (SEED_SETUP_PORTS, SCALING_SETUP_PORTS).
        # Outbound is the node group's; these groups only admit.
        self.seeds = ec2.SecurityGroup(
            self, "SeedSetupSecurityGroup", vpc=vpc, allow_all_outbound=False,
            description=f"Seed nodes of {cluster_name}: SMB and RPC from the other seeds, for cluster creation",
        )  # fmt: skip
        for protocol, first, last in SEED_SETUP_PORTS:
            port, purpose = port_range(protocol, first, last), f"Cluster creation {protocol} {first}"
            self.seeds.add_ingress_rule(self.seeds, port, purpose)
            self.nodes.add_egress_rule(self.seeds, port, purpose)
        self.scaling = ec2.SecurityGroup(
            self, "ScalingSetupSecurityGroup", vpc=vpc, allow_all_outbound=False,
            description=f"Scaling nodes of {cluster_name}: SMB from nodes, checked before a removal",
        )  # fmt: skip
        for protocol, first, last in SCALING_SETUP_PORTS:
            port, purpose = port_range(protocol, first, last), f"Node removal check {protocol} {first}"
            self.scaling.add_ingress_rule(self.nodes, port, purpose)
            self.nodes.add_egress_rule(self.scaling, port, purpose)
        # Members may call the HTTP gateway (19080) of every node: the node lifecycle functions
        # and operator hosts attach it, so the node group never has to reference theirs.
        self.gateway_clients = ec2.SecurityGroup(
            self,
            "GatewayClientSecurityGroup",
            vpc=vpc,
            description=f"Clients of the Service Fabric HTTP gateway of {cluster_name}",
            allow_all_outbound=False,
        )
        self.nodes.add_ingress_rule(self.gateway_clients, ec2.Port.tcp(HTTP_GATEWAY_PORT), "HTTP gateway clients")
        self.gateway_clients.add_egress_rule(self.nodes, ec2.Port.tcp(HTTP_GATEWAY_PORT), "Service Fabric HTTP gateway")

    def allow_from_load_balancer(self, load_balancer: ec2.ISecurityGroup, ports: Iterable[int], purpose: str) -> None:
        for port in ports:
            self.nodes.add_ingress_rule(load_balancer, ec2.Port.tcp(port), f"{purpose} {port} and its health checks")
            load_balancer.add_egress_rule(self.nodes, ec2.Port.tcp(port), f"{purpose} {port} on the nodes")
