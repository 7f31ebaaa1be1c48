"""A ready-made cluster: fixed seed nodes plus scaling-group nodes, as the platform has."""

from __future__ import annotations

from typing import Any

from .cluster import EmulatedCluster


def standard_cluster(
    seed_count: int = 3, scaling_count: int = 2, **options: Any
) -> EmulatedCluster:
    """Seeds seed-0.. (primary type) and scale-0.. (scaling group), all Up and in the config."""
    cluster = EmulatedCluster(**options)
    for i in range(seed_count):
        cluster.add_node(
            f"seed-{i}",
            ip=f"10.0.1.{10 + i}",
            node_type="PrimaryNodeType",
            is_seed=True,
            fault_domain=f"fd:/aws/az{i % 3}",
            upgrade_domain=f"UD{i}",
            in_config=True,
        )
    for i in range(scaling_count):
        cluster.add_node(
            f"scale-{i}",
            ip=f"10.0.2.{10 + i}",
            node_type="ScalingNodeType",
            fault_domain=f"fd:/aws/az{i % 3}",
            upgrade_domain=f"UD{i % 3}",
            in_config=True,
        )
    cluster.set_properties({
        "nodeTypes": [
            {
                "name": name,
                "clientConnectionEndpointPort": "19000",
                "clusterConnectionEndpointPort": "19001",
                "leaseDriverEndpointPort": "19002",
                "serviceConnectionEndpointPort": "19003",
                "httpGatewayEndpointPort": "19080",
                "applicationPorts": {"startPort": "20000", "endPort": "30000"},
                "ephemeralPorts": {"startPort": "49152", "endPort": "65534"},
                "isPrimary": name == "PrimaryNodeType",
            }
            for name in ("PrimaryNodeType", "ScalingNodeType")
        ],
        "fabricSettings": [
            {"name": "Setup", "parameters": [{"name": "FabricDataRoot", "value": "D:\\SF"}]}
        ],
    })
    return cluster
