"""The simulator as the fleet hosts' IAM role, against a broker that enforces that role.

The fleet role's kafka-cluster statements are read from the synthesized template, translated into
Kafka ACLs by the MSK semantics table (tests/msk_authorization.py) and given to a fresh SASL user
of the policy-enforcing broker; the real simulator then produces and consumes as that user. What
this proves about MSK, and what not: see tests/msk_authorization.py.
"""

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from stacks.config import load_environment
from tests.conftest import cdk_context
from tests.msk_authorization import Cluster, Grant, acls_for_grants, role_grants

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
ENV = "dev"


def fleet_role_grants(synthesized) -> tuple[list[Grant], str]:
    """The fleet role's Kafka grants on this environment's cluster, and the fleet's topic."""
    config = load_environment(cdk_context()["environments"], ENV)
    cluster = Cluster.of(config)
    grants = role_grants(synthesized(ENV).stacks, "simulator_fleet", "FleetHostRole", cluster)
    return grants, config.simulator_fleet.topic


@pytest.fixture(scope="module")
def fleet(synthesized, secured_kafka):
    from confluent_kafka.admin import NewTopic

    grants, topic = fleet_role_grants(synthesized)
    # Creating topics is the topic administrator's job, checked as that identity in
    # tests/telemetry/commands/topics/test_topics_as_topic_admin.py; here the super user makes it.
    futures = secured_kafka.admin.create_topics([NewTopic(topic, num_partitions=6, replication_factor=1)])
    futures[topic].result(timeout=30)
    return grants, topic


def simulate_as(secured_kafka, user, password, topic, tmp_path):
    command = [
        sys.executable, "-m", "simulator", "run",
        "--bootstrap-servers", secured_kafka.bootstrap_servers,
        "--security-protocol", "SASL_PLAINTEXT", "--sasl-username", user,
        "--topic", topic, "--rate", "500", "--duration", "2", "--warmup", "0",
        "--processes", "1", "--connect-timeout", "10", "--drain-timeout", "15",
        "--slo-min-rate", "0", "--slo-p99-ms", "10000", "--slo-max-ms", "60000",
        "--run-id", uuid.uuid4().hex[:8], "--report", str(tmp_path / "host.json"),
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO), "SIMULATOR_SASL_PASSWORD": password}
    return subprocess.run(
        command, cwd=REPO, env=env, capture_output=True, text=True, timeout=180, check=False
    )


def test_the_simulator_produces_and_consumes_with_exactly_the_fleet_roles_permissions(
    fleet, secured_kafka, tmp_path
):
    grants, topic = fleet
    user, password = secured_kafka.new_identity(lambda principal: acls_for_grants(grants, principal))
    result = simulate_as(secured_kafka, user, password, topic, tmp_path)
    assert result.returncode == 0, result.stderr.strip().splitlines()[-1:]
    report = json.loads((tmp_path / "host.json").read_text())
    assert report["sent"] == report["acked"] == report["received"] == 500 * 2
    assert report["lost"] == 0 and report["delivery_errors"] == 0


@pytest.mark.parametrize(
    "withheld", ["kafka-cluster:ReadData", "kafka-cluster:WriteDataIdempotently"]
)
def test_without_one_of_the_roles_actions_the_run_fails_naming_it(
    fleet, secured_kafka, tmp_path, withheld
):
    grants, topic = fleet
    assert any(g.action == withheld for g in grants), f"the fleet role has no {withheld} to withhold"
    planted = [g for g in grants if g.action != withheld]
    user, password = secured_kafka.new_identity(lambda principal: acls_for_grants(planted, principal))
    result = simulate_as(secured_kafka, user, password, topic, tmp_path)
    assert result.returncode == 2, result.stderr
    assert withheld in result.stderr.strip().splitlines()[-1], result.stderr
