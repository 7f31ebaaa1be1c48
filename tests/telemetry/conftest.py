"""Fixtures the operator commands' tests share."""

from __future__ import annotations

import pytest


@pytest.fixture
def lock_table(moto_session) -> str:
    """dev's membership lock table in moto, as the NodeLifecycle stack makes it (key LockName)."""
    from stacks.config import load_environment, read_environments
    from stacks.naming import membership_lock_table_name

    name = membership_lock_table_name(load_environment(read_environments(), "dev"))
    moto_session.client("dynamodb").create_table(
        TableName=name, KeySchema=[{"AttributeName": "LockName", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "LockName", "AttributeType": "S"}], BillingMode="PAY_PER_REQUEST")  # fmt: skip
    return name
