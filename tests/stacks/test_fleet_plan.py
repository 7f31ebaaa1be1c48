"""`telemetry simulate --plan`: the fleet a population needs and the quotas it touches, offline."""

from __future__ import annotations

import pytest

from stacks.config import load_environment
from telemetry import cli
from telemetry.commands.simulate import RunPlan
from stacks.fleet_plan import CONNECTS_PER_S_PER_CORE, MAX_DEVICES_PER_HOST, plan_fleet
from tests.conftest import cdk_context

PROD = load_environment(cdk_context()["environments"], "prod")


def test_a_million_devices_every_15_seconds_breaks_three_account_quotas():
    plan = plan_fleet(devices=1_000_000, rate=1_000_000 / 15, message_bytes=512, transport="mqtt", config=PROD)
    assert plan.hosts == -(-1_000_000 // MAX_DEVICES_PER_HOST)
    # Half the account's default 500 CONNECTs/s over 67 hosts: 3 each (a fleet run's connectRate).
    assert plan.connect_rate == 67 * 3
    assert plan.connect_phase_s == pytest.approx(14_926 / 3)
    broken = {check.name for check in plan.checks if not check.ok}
    assert broken == {
        "Maximum concurrent client connections per account",
        "Inbound publish requests per second per account",
        "Rule executions per second per account",
    }
    line = plan.refusal_line()
    assert line.startswith("the run would break AWS IoT Core 'Maximum concurrent client connections per account'")
    assert "cdk.json device_gateway.publish_quota_per_s" in line and "Service Quotas console" in line


def test_a_population_within_the_quotas_is_planned():
    plan = plan_fleet(devices=100_000, rate=5_000, message_bytes=512, transport="mqtt", config=PROD)
    assert plan.refusal_line() is None
    assert (plan.hosts, plan.devices_per_host) == (7, 14_286)
    assert plan.connect_rate == 7 * 35  # 250 CONNECTs/s over 7 hosts, whole per host
    assert plan.connect_phase_s == pytest.approx(14_286 / 35)
    assert plan.seconds_between_messages == pytest.approx(20)
    (per_client_id,) = [c for c in plan.checks if c.name == "Connect requests per second per client ID"]
    assert (per_client_id.needed, per_client_id.limit, per_client_id.adjustable) == (1, 1, False)


def test_a_device_over_the_per_connection_limit_cannot_be_raised():
    plan = plan_fleet(devices=10, rate=2_000, message_bytes=512, transport="mqtt", config=PROD)
    (line,) = [c.refusal() for c in plan.checks if not c.ok]
    assert line == ("AWS IoT Core 'Publish requests per second per connection' (needs 200, quota 100, "
                    "not adjustable: spread the load)")


def test_the_kafka_transport_checks_msk_connection_limits():
    plan = plan_fleet(devices=3000, rate=73_800, message_bytes=512, transport="kafka", config=PROD)
    assert plan.refusal_line() is None
    assert {c.service for c in plan.checks} == {"Amazon MSK"}


def test_the_command_prints_the_plan_and_refuses_in_one_line(capsys):
    argv = ["simulate", "--env", "prod", "--plan", "--transport", "mqtt", "--fleet-devices", "1000000", "--rate", "66667"]
    assert cli.main(argv) == 1  # the plan was shown; a check it fails is a failed check, not bad usage
    assert cli.main(["simulate", "--help"]) == 0
    assert "exit 1 when one would be broken" in " ".join(capsys.readouterr().out.split())  # as its help says
    assert cli.main(argv) == 1
    out, err = capsys.readouterr()
    assert "connect phase: 4,975 s at 201 CONNECTs/s, 3 per host (a fleet run takes 50% of the account's 500" in out
    assert "OVER AWS IoT Core" in out
    assert "Maximum concurrent client connections per account: 1,000,000 of 500,000 connections" in out  # counts, not 1,000,000.0
    (line,) = err.strip().splitlines()
    assert line.startswith("telemetry: error: the run would break AWS IoT Core")
    assert cli.main(["simulate", "--env", "prod", "--plan", "--transport", "mqtt", "--fleet-devices", "100000",
                     "--rate", "5000"]) == 0


@pytest.mark.parametrize("hosts", [1, 2, 7, 67, 250])
def test_the_plan_counts_the_connect_rate_a_fleet_run_gives_each_host(hosts):
    plan = plan_fleet(devices=hosts * 1000, rate=hosts * 10, message_bytes=512, transport="mqtt", config=PROD, hosts=hosts)
    run = RunPlan(environment="prod", region="eu-west-1", fleet="f", document="d", run_id="r", total_rate=hosts * 10,
                  duration_s=60, warmup_s=5, processes=0, message_bytes=512, devices=1000, log_group="g",
                  transport="mqtt", connect_quota=PROD.device_gateway.connect_quota_per_s)
    # ... or what one host opens, where that is less (CONNECTS_PER_S_PER_CORE on its 2 cores).
    assert plan.connect_rate == hosts * min(run.connect_rate(hosts), 2 * CONNECTS_PER_S_PER_CORE)
    assert plan.connect_rate <= PROD.device_gateway.connect_quota_per_s / 2
