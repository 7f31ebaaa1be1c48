"""`telemetry simulate` (telemetry/commands/simulate.py) against moto's EC2, SSM, S3 and CloudWatch Logs."""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from simulator import histograms, slo
from simulator.config import SloThresholds
from simulator.report import REPORT_VERSION
from stacks.config import load_environment, read_environments
from stacks.constructs.simulator_fleet import render_run_document
from telemetry import cli
from telemetry.commands import simulate as run_simulation
from telemetry.commands.simulate import Fleet, RunError, RunPlan, embedded_metrics, run_fleet, split_rate
from tests.conftest import MOTO_IMAGE

REGION = "eu-west-1"
FLEET = "telemetry-dev-simulator"
DOCUMENT = "telemetry-dev-run-simulator"
BUCKET = "telemetry-dev-results"
LOG_GROUP = "/telemetry-dev/simulator-runs"


def host_report(
    producer_id: str, e2e_us: list[int], *, run_id: str, rate: float, lost: int = 0, min_rate: float = 1
) -> dict:
    """A host report as the simulator writes one (the report schema is the contract)."""
    e2e = histograms.new_histogram()
    histograms.record_microseconds(e2e, np.array(e2e_us))
    ack = histograms.new_histogram()
    histograms.record_microseconds(ack, np.array(e2e_us) // 2)
    count = len(e2e_us)
    report = {
        "version": REPORT_VERSION,
        "simulator_version": "test",
        "run_id": run_id,
        "started_at": "2026-11-23T00:00:00+00:00",
        "hosts": [{"producer_id": producer_id, "hostname": producer_id, "processes": 2, "rate": rate,
                   "throughput_msgs_per_s": count / 10}],
        "sent": count + lost, "acked": count + lost, "delivery_errors": 0, "received": count,
        "lost": lost, "duplicates": 0, "out_of_order": 0,
        "duration_s": 10.0, "warmup_s": 1.0, "throughput_msgs_per_s": count / 10,
        "e2e_latency_ms": histograms.summary_ms(e2e), "ack_latency_ms": histograms.summary_ms(ack),
        "publish_delay_ms": None,
        "histograms": {"e2e": histograms.encode(e2e), "ack": histograms.encode(ack), "publish_delay": None},
        "clamped_over_60s": {"e2e": 0, "ack": 0},
        "consumer": {"drained": True, "errors": []},
        "config": {"rate": rate, "processes": 2, "topic": "telemetry"},
    }
    report["slo"] = slo.evaluate(report, SloThresholds(min_rate_msgs_per_s=min_rate))
    return report


@pytest.fixture
def aws(moto_session):
    yield deployed_fleet(moto_session)


def deployed_fleet(session, hosts: int = 3):
    """dev's simulator fleet as deployed: `hosts` running hosts (and another fleet's two), the run
    document, the results bucket and the runs' log group."""
    ec2 = session.client("ec2")
    image = MOTO_IMAGE
    for fleet, count in ((FLEET, hosts), ("someone-else", 2)):
        ec2.run_instances(
            ImageId=image, MinCount=count, MaxCount=count, InstanceType="c7i.large",
            TagSpecifications=[{"ResourceType": "instance", "Tags": [{"Key": "telemetry:fleet", "Value": fleet}]}],
        )
    content = render_run_document({
        "topic": "telemetry", "bootstrapParameter": "/telemetry-dev/msk/bootstrap-brokers-iam",
        "resultsBucket": BUCKET, "simulatorPackage": "s3://assets/simulator.zip", "region": REGION,
        "devicesPath": "/telemetry-dev/devices", "thingPrefix": "telemetry-dev-device-", "environment": "dev",
    })
    session.client("ssm").create_document(
        Name=DOCUMENT, Content=json.dumps(content), DocumentType="Command", DocumentFormat="JSON"
    )
    session.client("s3").create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": REGION})
    session.client("logs").create_log_group(logGroupName=LOG_GROUP)
    return session


def sent_commands(session) -> list[dict]:
    """SendCommand requests as they leave the client (moto's echo of InstanceIds is unreliable)."""
    sent: list[dict] = []
    session.events.register("provide-client-params.ssm.SendCommand", lambda params, **_: sent.append(dict(params)))
    return sent


def fleet_ids(session) -> list[str]:
    return Fleet(session).running_hosts(FLEET)


def upload(session, run_id: str, instance_id: str, report: dict) -> None:
    session.client("s3").put_object(Bucket=BUCKET, Key=f"runs/{run_id}/{instance_id}.json", Body=json.dumps(report))


def plan(run_id="run-1", rate=9000, transport="kafka") -> RunPlan:
    return RunPlan(environment="dev", region=REGION, fleet=FLEET, document=DOCUMENT, run_id=run_id,
                   total_rate=rate, duration_s=10, warmup_s=1, processes=0, message_bytes=512, devices=1000,
                   log_group=LOG_GROUP, transport=transport, rule_name="telemetry_dev_device_telemetry")


def test_split_rate_adds_up_exactly():
    assert split_rate(10_000, 3) == [3334, 3333, 3333]
    assert sum(split_rate(73_801, 7)) == 73_801
    assert split_rate(0, 2) == [0, 0]


def test_finds_only_its_own_running_hosts(aws):
    hosts = fleet_ids(aws)
    assert len(hosts) == 3
    aws.client("ec2").stop_instances(InstanceIds=[hosts[0]])
    assert fleet_ids(aws) == hosts[1:]


def test_full_run_merges_every_host_report(aws):
    hosts = fleet_ids(aws)
    latencies = {h: list(range(200 + 100 * n, 3000 + 100 * n, 7)) for n, h in enumerate(hosts)}
    for host in hosts:
        upload(aws, "run-1", host, host_report(host, latencies[host], run_id="run-1", rate=3000))
    lines: list[str] = []
    commands = sent_commands(aws)
    report = run_fleet(plan(), Fleet(aws), hosts=None, poll_interval_s=0, timeout_s=60, say=lines.append)

    # One command per host, with the rate split, the run's parameters and the host's own share
    # of the topic's partitions.
    assert len(commands) == 3
    shares = {}
    for command in commands:
        (instance,) = command["InstanceIds"]
        assert command["DocumentName"] == DOCUMENT
        assert command["Parameters"]["ratePerHost"] == ["3000"] and command["Parameters"]["runId"] == ["run-1"]
        assert command["Parameters"]["durationSeconds"] == ["10"]
        shares[instance] = command["Parameters"]["share"]
    assert shares == {host: [f"{n}/3"] for n, host in enumerate(hosts, 1)}

    # Counts add up; percentiles come from the merged histogram, not from averaging hosts.
    assert report["received"] == sum(len(v) for v in latencies.values())
    every_value = histograms.new_histogram()
    histograms.record_microseconds(every_value, np.array([v for vs in latencies.values() for v in vs]))
    assert report["e2e_latency_ms"]["p99"] == histograms.summary_ms(every_value)["p99"]
    assert report["fleet"]["hosts_reported"] == hosts and report["fleet"]["failed_hosts"] == []
    assert report["slo"]["passed"]
    assert any("3/3 host(s) finished" in line for line in lines)


def test_the_fleet_verdict_takes_the_thresholds_given_to_the_run(aws):
    """--slo-p99-ms on the run judges the merged report, whatever the hosts judged their own by."""
    hosts = fleet_ids(aws)
    for n, host in enumerate(hosts):  # e2e up to about 30 ms: over the default 10 ms p99
        upload(aws, "run-2", host, host_report(host, list(range(200, 30_000 + n, 50)), run_id="run-2", rate=3000))
    args = cli.build_parser().parse_args(["simulate", "--env", "dev", "--rate", "9000", "--duration", "10",
                                          "--slo-p99-ms", "50"])
    loose = dataclasses.replace(plan("run-2"), slo_overrides=run_simulation.make_plan(
        load_environment(read_environments(), "dev"), args).slo_overrides)

    strict = run_fleet(plan("run-2"), Fleet(aws), hosts=None, poll_interval_s=0, timeout_s=60, say=lambda _: None)
    judged = run_fleet(loose, Fleet(aws), hosts=None, poll_interval_s=0, timeout_s=60, say=lambda _: None)

    assert not strict["slo"]["passed"] and judged["slo"]["passed"], [c for c in judged["slo"]["checks"] if not c["passed"]]
    assert judged["slo"]["thresholds"]["max_p99_ms"] == 50 and strict["slo"]["thresholds"]["max_p99_ms"] == 10


def put_iot_metric(session, name: str, value: float, dimensions: dict[str, str]) -> None:
    session.client("cloudwatch").put_metric_data(
        Namespace="AWS/IoT",
        MetricData=[{
            "MetricName": name, "Value": value, "Unit": "Count",
            "Dimensions": [{"Name": k, "Value": v} for k, v in dimensions.items()],
        }],
    )


def test_an_mqtt_run_gives_each_host_its_own_devices_and_counts_what_aws_iot_throttled(aws):
    hosts = fleet_ids(aws)
    for host in hosts:
        upload(aws, "run-1", host, host_report(host, list(range(200, 3000, 7)), run_id="run-1", rate=3000))
    commands = sent_commands(aws)
    rule = {"RuleName": "telemetry_dev_device_telemetry"}
    # The run's window surrounds the metrics whatever the clock says (a run starting a moment
    # after a minute boundary would otherwise leave out metrics stamped just before it).
    at = datetime.datetime.now(datetime.timezone.utc)
    window = iter([at - datetime.timedelta(minutes=1), at + datetime.timedelta(minutes=1)])
    put_iot_metric(aws, "PublishIn.Throttle", 3, {"Protocol": "MQTT"})
    # The metrics page lists no ActionType values: each documented spelling of the action counts.
    put_iot_metric(aws, "Failure", 2, {**rule, "ActionType": "KafkaAction"})
    put_iot_metric(aws, "Failure", 1, {**rule, "ActionType": "kafka"})
    put_iot_metric(aws, "Failure", 5, {**rule, "ActionType": "LambdaAction"})  # another action: not ours
    put_iot_metric(aws, "ErrorActionSuccess", 3, {**rule, "ActionType": "sqs"})
    put_iot_metric(aws, "PublishIn.Throttle", 7, {"Protocol": "HTTP"})  # another protocol: not ours
    waited: list[float] = []

    report = run_fleet(
        plan(transport="mqtt"), Fleet(aws), hosts=None, poll_interval_s=0, timeout_s=60,
        say=lambda _line: None, sleep=waited.append, metrics_delay_s=90, now=lambda: next(window),
    )  # fmt: skip

    # One command per host: the same rate, but its own block of things and the IoT endpoint.
    assert len(commands) == 3
    blocks = sorted((c["Parameters"]["firstDevice"], c["Parameters"]["transport"]) for c in commands)
    assert blocks == [(["1"], ["mqtt"]), (["1001"], ["mqtt"]), (["2001"], ["mqtt"])]
    assert {c["Parameters"]["mqttEndpoint"][0].endswith("-ats.iot.eu-west-1.amazonaws.com") for c in commands} == {True}
    assert 90 in waited
    assert report["fleet"]["transport"] == "mqtt"
    assert report["iot"] == {
        "publishes_throttled": 3, "connects_throttled": 0, "client_connects_throttled": 0,
        "rule_messages_throttled": 0, "kafka_action_failures": 3, "kept_by_error_action": 3,
    }
    (check,) = [c for c in report["slo"]["checks"] if c["name"] == "AWS IoT throttles and rule failures"]
    assert check == {"name": "AWS IoT throttles and rule failures", "limit": 0, "actual": 6, "passed": False}
    assert report["slo"]["passed"] is False


def test_a_kafka_run_sends_every_host_the_same_devices_and_asks_aws_iot_nothing(aws):
    hosts = fleet_ids(aws)
    for host in hosts:
        upload(aws, "run-1", host, host_report(host, list(range(200, 3000, 7)), run_id="run-1", rate=3000))
    commands = sent_commands(aws)
    report = run_fleet(plan(), Fleet(aws), hosts=None, poll_interval_s=0, timeout_s=60, say=lambda _line: None)
    assert len(commands) == 3  # one per host: each its own share of the partitions
    for command in commands:
        assert command["Parameters"]["transport"] == ["kafka"] and command["Parameters"]["firstDevice"] == ["1"]
        assert command["Parameters"]["mqttEndpoint"] == ["none"]
    assert "iot" not in report and report["fleet"]["transport"] == "kafka"


def test_a_host_without_a_report_is_named_and_fails_the_run(aws):
    hosts = fleet_ids(aws)
    for host in hosts[:2]:
        upload(aws, "run-2", host, host_report(host, [500] * 100, run_id="run-2", rate=4500))
    report = run_fleet(plan("run-2"), Fleet(aws), hosts=None, poll_interval_s=0, timeout_s=60, say=lambda _: None)
    assert report["fleet"]["failed_hosts"] == [
        {"instance_id": hosts[2], "status": "Success", "reason": "command Success; no report at s3://telemetry-dev-results/runs/run-2/"}
    ]
    assert not report["slo"]["passed"]
    assert {"name": "hosts reported", "limit": 3, "actual": 2, "passed": False} in report["slo"]["checks"]


def test_remainder_rates_go_out_as_separate_commands(aws):
    hosts = fleet_ids(aws)
    for host in hosts[:2]:
        upload(aws, "run-3", host, host_report(host, [500] * 10, run_id="run-3", rate=1))
    commands = sent_commands(aws)
    run_fleet(plan("run-3", rate=10_001), Fleet(aws), hosts=2, poll_interval_s=0, timeout_s=60, say=lambda _: None)
    sent = sorted((c["Parameters"]["ratePerHost"][0], tuple(c["InstanceIds"])) for c in commands)
    assert sent == [("5000", (hosts[1],)), ("5001", (hosts[0],))]


def test_too_few_hosts_is_one_clear_error(aws):
    with pytest.raises(RunError, match="fleet telemetry-dev-simulator has 3 running host\\(s\\) Run Command can reach; 5 needed"):
        run_fleet(plan(), Fleet(aws), hosts=5, poll_interval_s=0, timeout_s=60, say=lambda _: None)


def test_hosts_whose_ssm_agent_is_not_online_are_left_out_and_said(aws):
    """Run Command cannot reach an agent that lost its connection: the run uses the others, and
    asked for more than they are it names what it left out (SSM API Reference, PingStatus)."""
    first, second, third = fleet_ids(aws)
    aws.ping_status[second] = "ConnectionLost"
    assert Fleet(aws).running_hosts(FLEET) == [first, third]
    said: list[str] = []
    with pytest.raises(RunError, match=f"has 2 running host\\(s\\) Run Command can reach; 3 needed \\(SSM Agent not "
                       f"Online: {second} ConnectionLost\\)"):
        run_fleet(plan(), Fleet(aws), hosts=3, poll_interval_s=0, timeout_s=60, say=said.append)
    assert said == [f"left out, SSM Agent not Online: {second} ConnectionLost"]


def test_more_hosts_than_the_topic_has_partitions_is_one_clear_error(aws):
    few = dataclasses.replace(plan(), topic_partitions=2)
    commands = sent_commands(aws)
    with pytest.raises(RunError, match="the simulator's topic has 2 partitions, fewer than the 3 hosts"):
        run_fleet(few, Fleet(aws), hosts=3, poll_interval_s=0, timeout_s=60, say=lambda _: None)
    assert commands == []  # refused before anything was sent
    # Over MQTT the rule spreads every host's messages over all partitions: no share to refuse.
    dataclasses.replace(few, transport="mqtt").check_hosts(3)


def test_no_report_at_all_is_an_error(aws):
    with pytest.raises(RunError, match="no host reported"):
        run_fleet(plan("run-4"), Fleet(aws), hosts=1, poll_interval_s=0, timeout_s=60, say=lambda _: None)


def test_fleet_metrics_are_published_in_embedded_metric_format(aws):
    hosts = fleet_ids(aws)
    for host in hosts:
        upload(aws, "run-5", host, host_report(host, [800] * 50, run_id="run-5", rate=100, lost=1))
    report = run_fleet(plan("run-5"), Fleet(aws), hosts=None, poll_interval_s=0, timeout_s=60, say=lambda _: None)
    Fleet(aws).publish(LOG_GROUP, embedded_metrics(report, "dev", now_ms=int(time.time() * 1000)))
    (event,) = aws.client("logs").get_log_events(logGroupName=LOG_GROUP, logStreamName="run-run-5")["events"]
    emf = json.loads(event["message"])
    (directive,) = emf["_aws"]["CloudWatchMetrics"]
    assert directive["Namespace"] == "Telemetry/Simulator" and directive["Dimensions"] == [["Environment"]]
    assert {m["Name"] for m in directive["Metrics"]} == {
        "ThroughputMsgsPerSec", "E2eLatencyP99Ms", "E2eLatencyMaxMs", "LostMessages", "FailedHosts"
    }
    assert emf["LostMessages"] == 3 and emf["Environment"] == "dev" and emf["E2eLatencyP99Ms"] == 0.8


def simulate_a_slow_fleet(aws, tmp_path, run_id: str, *extra: str) -> int:
    """`telemetry simulate` over hosts that each delivered 30 messages while judged against
    5,000 msg/s: a run that fails its SLO; the merged report goes to tmp_path/fleet.json."""
    for host in fleet_ids(aws):
        upload(aws, run_id, host, host_report(host, [700] * 100, run_id=run_id, rate=3000, min_rate=5000))
    return cli.main([
        "simulate", "--env", "dev", "--rate", "9000", "--duration", "10", "--run-id", run_id, "--poll-interval", "0",
        "--report", str(tmp_path / "fleet.json"), *extra,
    ], session_factory=lambda region: aws)


def test_main_writes_report_and_plot_and_exits_on_the_verdict(aws, tmp_path, capsys):
    hosts = fleet_ids(aws)
    code = simulate_a_slow_fleet(aws, tmp_path, "run-6")
    out = capsys.readouterr().out
    assert "SLO" in out and "wrote" in out
    report = json.loads((tmp_path / "fleet.json").read_text())
    assert report["fleet"]["hosts_reported"] == hosts
    assert (tmp_path / "fleet.png").stat().st_size > 10_000
    # The hosts were judged against 5,000 msg/s and together delivered 30 msg/s: the run fails.
    assert code == 1


def test_with_format_json_the_merged_report_is_the_one_document_on_stdout(aws, tmp_path, capsys):
    code = simulate_a_slow_fleet(aws, tmp_path, "run-7", "--format", "json")
    out, err = capsys.readouterr()
    assert code == 1 and json.loads(out) == json.loads((tmp_path / "fleet.json").read_text())
    assert "sent run run-7" in err and "wrote" in err  # the progress and the notes, on stderr


def test_dry_run_prints_the_plan_for_the_configured_fleet_without_aws():
    """The installed command, run as typed, with no AWS credentials anywhere."""
    telemetry = str(Path(sys.executable).parent / "telemetry")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    result = subprocess.run([telemetry, "simulate", "--env", "prod", "--rate", "10000", "--duration", "60", "--run-id", "plan-1", "--dry-run"],
                            capture_output=True, text=True, timeout=60, env=env)
    assert result.returncode == 0, result.stderr
    assert "fleet telemetry-prod-simulator, document telemetry-prod-run-simulator" in result.stdout
    assert "10,000 msg/s in total over 3 host(s)" in result.stdout
    assert "host 1: 3,334 msg/s, partitions p % 3 = 0" in result.stdout
    assert "host 3: 3,333 msg/s, partitions p % 3 = 2" in result.stdout
    assert "dry run: nothing sent" in result.stdout


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--env", "qa", "--rate", "1", "--duration", "1", "--dry-run"], "telemetry: error: unknown environment 'qa'"),
        (["--env", "dev", "--rate", "-5", "--duration", "1"], "argument --rate: must be at least 0"),
        (["--env", "dev", "--rate", "5", "--duration", "1", "--run-id", "bad id!"], "argument --run-id: use 1-64"),
    ],
)
def test_bad_input_is_one_line(args, expected, capsys):
    assert cli.main(["simulate", *args]) == 2
    err = capsys.readouterr().err
    assert expected in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
