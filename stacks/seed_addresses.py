"""Where seed nodes live in the private subnets: a fixed block per subnet, reserved for them.

The block is the /28 just below the last /28 of each private subnet, far from the low addresses
EC2 hands out first. The network stack reserves it (an explicit subnet CIDR reservation, so EC2
never assigns an address from it on its own) and the seed nodes take their fixed primary
addresses from it. Plain functions, no CDK import.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from stacks.naming import seed_node_name

SEED_BLOCK_PREFIX = 28


def seed_block(subnet_cidr: str) -> ipaddress.IPv4Network:
    """The block of a private subnet reserved for seed addresses."""
    subnet = ipaddress.ip_network(subnet_cidr)
    if subnet.prefixlen > SEED_BLOCK_PREFIX - 2:
        raise ValueError(f"subnet {subnet_cidr} is too small to reserve a /{SEED_BLOCK_PREFIX} for seed nodes")
    return list(subnet.subnets(new_prefix=SEED_BLOCK_PREFIX))[-2]


@dataclass(frozen=True)
class SeedPlacement:
    """Where one seed lives and how the cluster knows it (ClusterConfig.json's node entry)."""

    index: int
    name: str
    zone_index: int
    availability_zone: str
    address: str
    fault_domain: str
    upgrade_domain: str


def plan_seeds(count: int, zones: Sequence[tuple[str, str]], region: str) -> list[SeedPlacement]:
    """Seed `i` in zone `i % len(zones)`; `zones` lists (availability zone, private subnet CIDR)."""
    placements = []
    for index in range(count):
        zone_index, slot = index % len(zones), index // len(zones)
        zone, cidr = zones[zone_index]
        placements.append(
            SeedPlacement(
                index=index,
                name=seed_node_name(index),
                zone_index=zone_index,
                availability_zone=zone,
                address=str(seed_block(cidr)[slot]),
                # A zone is what fails together on AWS; the spread placement group keeps two
                # seeds of one zone off the same rack. Upgrade domains are one per seed.
                fault_domain=f"fd:/{region}/{zone}",
                upgrade_domain=f"UD{index}",
            )
        )
    return placements


def seed_nodes_output(placements: Sequence[SeedPlacement]) -> str:
    """The stack output operator tools read the seed topology from (telemetry/shared/cluster_inventory.py)."""
    return json.dumps([asdict(p) for p in placements], separators=(",", ":"))


def seeds_from_output(text: str) -> list[SeedPlacement]:
    return [SeedPlacement(**entry) for entry in json.loads(text)]
