"""InstanceDirectory over boto3's EC2 client."""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

from .interfaces import NODE_NAME_TAG, InstanceInfo


def _instance_info(item: dict[str, Any]) -> InstanceInfo:
    return InstanceInfo(
        instance_id=item["InstanceId"],
        state=item.get("State", {}).get("Name", ""),
        private_ip=item.get("PrivateIpAddress", ""),
        tags={tag["Key"]: tag["Value"] for tag in item.get("Tags", [])},
        availability_zone=item.get("Placement", {}).get("AvailabilityZone", ""),
    )


class Ec2InstanceDirectory:
    """Looks instances up in EC2; create once per Lambda container."""

    def __init__(self, ec2_client: Any) -> None:
        self._client = ec2_client

    def describe_instance(self, instance_id: str) -> InstanceInfo | None:
        try:
            answer = self._client.describe_instances(InstanceIds=[instance_id])
        except ClientError as err:
            # EC2 forgets terminated instances after a while; for us that is "gone".
            if err.response.get("Error", {}).get("Code") == "InvalidInstanceID.NotFound":
                return None
            raise
        for reservation in answer.get("Reservations", []):
            for item in reservation.get("Instances", []):
                return _instance_info(item)
        return None

    def list_node_instances(self) -> list[InstanceInfo]:
        pages = self._client.get_paginator("describe_instances").paginate(
            Filters=[{"Name": "tag-key", "Values": [NODE_NAME_TAG]}]
        )
        return [
            _instance_info(item)
            for page in pages
            for reservation in page.get("Reservations", [])
            for item in reservation.get("Instances", [])
        ]

    def tag_node_name(self, instance_id: str, node_name: str) -> None:
        self._client.create_tags(
            Resources=[instance_id], Tags=[{"Key": NODE_NAME_TAG, "Value": node_name}]
        )
