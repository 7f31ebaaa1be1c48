"""Where seed nodes live in the private subnets: a fixed block per subnet, reserved for them.

The block is the /28 just below the last /28 of each private subnet, far from the low addresses
EC2 hands out first. The network stack reserves it (an explicit subnet CIDR reservation, so EC2
never assigns an address from it on its own) and the seed nodes take their fixed primary
addresses from it. Plain functions, no CDK import.
"""

from __future__ import annotations

import ipaddress

SEED_BLOCK_PREFIX = 28


def seed_block(subnet_cidr: str) -> ipaddress.IPv4Network:
    """The block of a private subnet reserved for seed addresses."""
    subnet = ipaddress.ip_network(subnet_cidr)
    if subnet.prefixlen > SEED_BLOCK_PREFIX - 2:
        raise ValueError(f"subnet {subnet_cidr} is too small to reserve a /{SEED_BLOCK_PREFIX} for seed nodes")
    return list(subnet.subnets(new_prefix=SEED_BLOCK_PREFIX))[-2]
