"""Telemetry sink config: each bad value is refused with one line naming the key."""

from __future__ import annotations

import copy

import pytest

from stacks.config import MULTIPART_ABORT_MARGIN_DAYS, ConfigError, load_environment
from tests.conftest import cdk_context


@pytest.fixture
def environments() -> dict:
    return copy.deepcopy(cdk_context()["environments"])


def refused(environments: dict, env: str) -> str:
    with pytest.raises(ConfigError) as caught:
        load_environment(environments, env)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"environment '{env}': telemetry_sink")
    return message


def test_runtime_defaults_to_flink_2_2(environments):
    del environments["dev"]["telemetry_sink"]["runtime"]
    assert load_environment(environments, "dev").telemetry_sink.runtime == "FLINK-2_2"


def test_environments_differ_where_they_should(environments):
    dev, prod = (load_environment(environments, env).telemetry_sink for env in ("dev", "prod"))
    assert (dev.parallelism, dev.autoscaling) == (1, False)
    assert (prod.parallelism, prod.autoscaling) == (4, True)
    assert prod.archive_after_days > dev.archive_after_days
    assert prod.log_retention_days > dev.log_retention_days


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("runtime", "FLINK-1_15", "telemetry_sink.runtime: Input should be 'FLINK-1_20' or 'FLINK-2_2'"),
        ("topic", "nope", "telemetry_sink.topic: 'nope' is not declared in msk.topics (telemetry)"),
        ("parallelism", 13, "telemetry_sink.parallelism: 13 exceeds the 12 partitions of topic 'telemetry'"),
        ("parallelism", 0, "telemetry_sink.parallelism: Input should be greater than or equal to 1"),
        ("checkpoint_interval_seconds", 5, "checkpoint_interval_seconds: Input should be greater than or equal to 10"),
        ("min_pause_between_checkpoints_seconds", 60, "must be below checkpoint_interval_seconds 60"),
        ("infrequent_access_after_days", 10, "infrequent_access_after_days: Input should be greater than or equal to 30"),
        ("archive_after_days", 45, "archive_after_days 45 must be at least infrequent_access_after_days + 30 (60)"),
        ("log_retention_days", 10, "telemetry_sink.log_retention_days: 10 is not a CloudWatch Logs retention"),
        ("projection_start_date", "2025-02-30", "'2025-02-30' is not a calendar date (expected yyyy-MM-dd)"),
        ("projection_start_date", "01/02/2025", "projection_start_date: String should match pattern"),
        ("max_part_size_mb", 5000, "max_part_size_mb: Input should be less than or equal to 4096"),
        ("autoscaling", "yes", "telemetry_sink.autoscaling: Input should be a valid boolean"),
        ("snapshot_retention_days", 0, "snapshot_retention_days: Input should be greater than or equal to 1"),
        ("snapshot_retention_days", 400, "snapshot_retention_days: Input should be less than or equal to 365"),
        ("surprise", 1, "telemetry_sink.surprise: unknown key"),
    ],
)
def test_bad_values_are_refused_with_one_line(environments, key, value, expected):
    environments["dev"]["telemetry_sink"][key] = value
    assert expected in refused(environments, "dev")


def test_section_is_required(environments):
    del environments["staging"]["telemetry_sink"]
    assert "telemetry_sink: required key is missing" in refused(environments, "staging")


def test_unfinished_uploads_are_kept_past_the_snapshot_retention(environments):
    environments["dev"]["telemetry_sink"]["snapshot_retention_days"] = 45
    sink = load_environment(environments, "dev").telemetry_sink
    assert sink.abort_incomplete_uploads_after_days == 45 + MULTIPART_ABORT_MARGIN_DAYS > 45
