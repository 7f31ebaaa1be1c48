"""Stateful resources keep their logical IDs.

CloudFormation replaces a resource whose logical ID changes: it creates the new one and deletes
the old, so a renamed construct, a moved construct or a CDK feature flag that changes an ID would
silently replace the MSK cluster, empty a bucket's successor, drop a lock table or rebuild a seed.
The IDs below are recorded in stateful_logical_ids.json; any change fails here, by name.

To change one on purpose (after planning the data's move), regenerate the record and review its
diff: `UPDATE_STATEFUL_IDS=1 .venv/bin/python -m pytest tests/stacks/test_stateful_logical_ids.py`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.conftest import ENVIRONMENTS

RECORD = Path(__file__).with_name("stateful_logical_ids.json")
# Types whose replacement loses data, an address or an identity other resources point at.
STATEFUL_TYPES = (
    "AWS::MSK::Cluster",
    "AWS::S3::Bucket",
    "AWS::DynamoDB::Table",
    "AWS::FSx::FileSystem",
    "AWS::KMS::Key",
    "AWS::Logs::LogGroup",
    "AWS::EC2::Instance",
    "AWS::KinesisAnalyticsV2::Application",
    "AWS::EC2::VPC",
    "AWS::EC2::Subnet",
    "AWS::SQS::Queue",  # messages waiting to be replayed or read
)


def stateful_ids(synthesis) -> dict[str, dict[str, list[str]]]:
    """stack part -> resource type -> sorted logical IDs."""
    found: dict[str, dict[str, list[str]]] = {}
    for part, template in sorted(synthesis.stacks.items()):
        for logical_id, resource in template["Resources"].items():
            if resource["Type"] in STATEFUL_TYPES:
                found.setdefault(part, {}).setdefault(resource["Type"], []).append(logical_id)
    return {part: {kind: sorted(ids) for kind, ids in sorted(kinds.items())} for part, kinds in found.items()}


def test_stateful_logical_ids_match_the_record(synthesized):
    current = {env: stateful_ids(synthesized(env)) for env in ENVIRONMENTS}
    if os.environ.get("UPDATE_STATEFUL_IDS"):
        RECORD.write_text(json.dumps(current, indent=2, sort_keys=True) + "\n")
        pytest.skip(f"wrote {RECORD.name}; review its diff before committing")
    recorded = json.loads(RECORD.read_text())
    changes = []
    for env in ENVIRONMENTS:
        for part in sorted(set(recorded.get(env, {})) | set(current[env])):
            was, now = recorded.get(env, {}).get(part, {}), current[env].get(part, {})
            for kind in sorted(set(was) | set(now)):
                gone = sorted(set(was.get(kind, [])) - set(now.get(kind, [])))
                new = sorted(set(now.get(kind, [])) - set(was.get(kind, [])))
                if gone:
                    changes.append(f"{env}/{part}: {kind} {', '.join(gone)} would be replaced or deleted")
                if new:
                    changes.append(f"{env}/{part}: {kind} {', '.join(new)} is new")
    assert not changes, "stateful logical IDs changed (see this module's docstring):\n" + "\n".join(changes)
