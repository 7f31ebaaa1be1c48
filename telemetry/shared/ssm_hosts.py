"""Which instances Run Command can reach now: those whose SSM Agent Systems Manager sees Online.

A running instance whose agent stopped, lost its network path or its role still takes a
SendCommand; the command then waits its delivery timeout and more before it fails (SSM User Guide,
"Understanding command statuses": Delivery Timed Out). DescribeInstanceInformation reports each
managed node's PingStatus: Online, ConnectionLost, or Inactive (SSM API Reference,
InstanceInformation.PingStatus). An instance it does not list is not registered with Systems
Manager at all.
"""

from __future__ import annotations

from collections.abc import Sequence

NOT_REGISTERED = "not registered with Systems Manager"


def running_fleet_hosts(ec2, fleet: str) -> list[str]:
    """The running instances of a simulator fleet (its FLEET_TAG), by id."""
    from stacks.naming import FLEET_TAG

    pages = ec2.get_paginator("describe_instances").paginate(
        Filters=[{"Name": f"tag:{FLEET_TAG}", "Values": [fleet]}, {"Name": "instance-state-name", "Values": ["running"]}]
    )
    return sorted(i["InstanceId"] for page in pages for r in page["Reservations"] for i in r["Instances"])


def ping_statuses(ssm, tag_key: str, tag_value: str) -> dict[str, str]:
    """Instance id -> PingStatus of every managed node tagged tag_key=tag_value."""
    pages = ssm.get_paginator("describe_instance_information").paginate(
        Filters=[{"Key": f"tag:{tag_key}", "Values": [tag_value]}], PaginationConfig={"PageSize": 50}
    )
    return {node["InstanceId"]: node["PingStatus"] for page in pages for node in page["InstanceInformationList"]}


def agent_statuses(ssm, instance_ids: Sequence[str], tag_key: str, tag_value: str) -> dict[str, str]:
    """Instance id -> PingStatus (or NOT_REGISTERED), in the order given."""
    statuses = ping_statuses(ssm, tag_key, tag_value)
    return {i: statuses.get(i, NOT_REGISTERED) for i in instance_ids}


def reachable(ssm, instance_ids: Sequence[str], tag_key: str, tag_value: str) -> tuple[list[str], list[str]]:
    """(the instances Online, in the order given; "<id> <status>" for each of the others)."""
    statuses = agent_statuses(ssm, instance_ids, tag_key, tag_value)
    online = [i for i, status in statuses.items() if status == "Online"]
    others = [f"{i} {status}" for i, status in statuses.items() if status != "Online"]
    return online, others
