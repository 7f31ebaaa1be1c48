"""`telemetry simulate`: run an environment's simulator fleet over SSM Run Command and print one merged fleet report.

Finds the fleet's running hosts by tag, splits the total rate over them, sends the Run Command
document to all of them at once, follows their progress, downloads every host report from the
results bucket, merges them (histograms merged, never averaged), prints the fleet report and its
verdict, writes the merged JSON and a percentile plot, and publishes the headline figures to
CloudWatch in embedded metric format. A host that fails or sends no report is named in the report
and fails the verdict; it is never left out silently.

With --transport mqtt the hosts publish as devices to AWS IoT Core (each host its own range of
provisioned devices, telemetry/commands/devices/provision.py) and still read their messages back from MSK,
where the device gateway's rule writes them. The merged report then says so and adds what AWS
IoT counted over the run in CloudWatch: publishes and connects throttled, messages the rules
engine throttled, Kafka action failures and messages kept by the error action. Any of them fails
the verdict: a message IoT did not deliver is one the hosts may not even see as lost.

Exit codes: 0 the run passed its SLO; 1 it did not (or hosts failed); 2 bad input; a failed AWS call is 1, missing credentials 2 (as every `telemetry` command).
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from simulator.errors import SimulatorError
from simulator.flags import add_slo_flags, given_thresholds
from simulator.report import format_summary, merge_reports, write_report
from simulator.slo import thresholds_of
from stacks.config import ConfigError, EnvironmentConfig, load_environment, read_environments
from stacks.naming import (
    FLEET_TAG,
    IOT_ERROR_ACTION_TYPES,
    IOT_KAFKA_ACTION_TYPES,
    IOT_MQTT_PROTOCOL,
    device_rule_name,
    SIMULATOR_METRICS_NAMESPACE,
    run_simulator_document_name,
    simulator_fleet_commands_log_group_name,
    simulator_fleet_name,
    simulator_runs_log_group_name,
)
from telemetry import REPO
from telemetry.shared.cluster_inventory import RUN_COMMAND_UNFINISHED
from telemetry.shared.errors import ToolError
from telemetry.shared.errors import OperationFailed
from telemetry.shared.run_command_output import cloudwatch_output, invocation, whole_output

RUN_STEP = "runSimulator"  # the run document's one step (stacks/documents/run_simulator.yaml)
RUN_ID_PATTERN = r"[A-Za-z0-9][A-Za-z0-9-]{0,63}"  # the Run Command document's allowedPattern
# Installing the simulator on a fresh host takes a minute or two; allow for it beyond the run.
SETUP_ALLOWANCE_S = 600


class RunError(ToolError):
    """A problem worded for the operator: one line, no traceback."""


@dataclass(frozen=True)
class RunPlan:
    environment: str
    region: str
    fleet: str
    document: str
    run_id: str
    total_rate: int
    duration_s: int
    warmup_s: int
    processes: int
    message_bytes: int
    devices: int
    log_group: str
    transport: str = "kafka"
    rule_name: str = ""  # the device gateway's topic rule (mqtt runs)
    topic_partitions: int = 0  # partitions of the simulator's topic (cdk.json msk.topics)
    connect_quota: int = 500  # the account's AWS IoT CONNECTs/s (cdk.json device_gateway.connect_quota_per_s)
    command_log_group: str = ""  # where the hosts write the run document's whole output
    # SLO thresholds given to the run (--slo-*), over the hosts' own for the fleet's verdict.
    slo_overrides: Mapping[str, float] = field(default_factory=dict)

    def parameters(
        self,
        rate_per_host: int,
        *,
        first_device: int = 1,
        mqtt_endpoint: str = "none",
        share: str = "1/1",
        hosts: int = 1,
    ) -> dict[str, list[str]]:
        values = {
            "runId": self.run_id,
            "ratePerHost": rate_per_host,
            "durationSeconds": self.duration_s,
            "warmupSeconds": self.warmup_s,
            "processes": self.processes,
            "messageBytes": self.message_bytes,
            "devices": self.devices,
            "transport": self.transport,
            "firstDevice": first_device,
            "mqttEndpoint": mqtt_endpoint,
            "share": share,
            "connectRate": self.connect_rate(hosts),
        }
        return {name: [str(value)] for name, value in values.items()}

    def connect_rate(self, hosts: int) -> int:
        """CONNECTs/s per host over MQTT, as the fleet plan counts them."""
        from stacks.fleet_plan import host_connect_rate

        return host_connect_rate(self.connect_quota, hosts)

    def first_device(self, host_index: int) -> int:
        """Devices are things 1, 2, ...; over MQTT each host is its own devices (a thing connects
        once), so host n takes the n-th block of `devices`. Over Kafka every host starts at 1."""
        return host_index * self.devices + 1 if self.transport == "mqtt" else 1

    def share(self, host_index: int, hosts: int) -> str:
        """Over Kafka, host n of N writes to and reads back only the partitions p with
        p % N = n - 1 (the simulator's --share), so the fleet's measuring capacity grows with
        its hosts instead of stopping at what one consumer reads. Over MQTT the IoT rule picks
        the partition by thing name, so every host reads them all."""
        return f"{host_index + 1}/{hosts}" if self.transport == "kafka" else "1/1"

    def check_hosts(self, hosts: int) -> None:
        if self.transport == "kafka" and self.topic_partitions and self.topic_partitions < hosts:
            raise RunError(
                f"the simulator's topic has {self.topic_partitions} partitions, fewer than the "
                f"{hosts} hosts asked for: each host needs partitions of its own (use --hosts "
                f"{self.topic_partitions} or fewer, or add partitions in cdk.json msk.topics)"
            )


def split_rate(total: int, hosts: int) -> list[int]:
    """Whole messages per second per host, adding up to the total exactly."""
    share, extra = divmod(total, hosts)
    return [share + (1 if index < extra else 0) for index in range(hosts)]


# What AWS IoT counted over an MQTT run (namespace AWS/IoT, AWS IoT Developer Guide, "AWS IoT
# metrics and dimensions"): report key -> (metric, the values of its other dimensions, whether by
# RuleName); a key sums every listed value (stacks/naming.py: the page lists no ActionType values).
# Throttled and failed messages never reach MSK; the error action's count repeats the failures.
IOT_COUNTS = {
    "publishes_throttled": ("PublishIn.Throttle", [{"Protocol": IOT_MQTT_PROTOCOL}], False),
    "connects_throttled": ("Connect.Throttle", [{"Protocol": IOT_MQTT_PROTOCOL}], False),
    "client_connects_throttled": ("Connect.ClientIDThrottle", [{"Protocol": IOT_MQTT_PROTOCOL}], False),
    "rule_messages_throttled": ("RuleMessageThrottled", [{}], True),
    "kafka_action_failures": ("Failure", [{"ActionType": a} for a in IOT_KAFKA_ACTION_TYPES], True),
    "kept_by_error_action": ("ErrorActionSuccess", [{"ActionType": a} for a in IOT_ERROR_ACTION_TYPES], True),
}


@dataclass
class HostOutcome:
    instance_id: str
    rate: int
    first_device: int = 1
    share: str = "1/1"
    status: str = "Pending"
    detail: str = ""
    report: dict | None = field(default=None, repr=False)


class Fleet:
    """The AWS calls a fleet run makes (EC2, SSM, S3, CloudWatch Logs), created once."""

    def __init__(self, session) -> None:
        self._ec2 = session.client("ec2")
        self._ssm = session.client("ssm")
        self._s3 = session.client("s3")
        self._logs = session.client("logs")
        self._session = session

    def iot_endpoint(self) -> str:
        """The account's AWS IoT data endpoint (ATS-signed server certificate)."""
        return self._session.client("iot").describe_endpoint(endpointType="iot:Data-ATS")["endpointAddress"]

    def iot_counts(self, rule_name: str, start: datetime.datetime, end: datetime.datetime) -> dict[str, int]:
        """Sums of IOT_COUNTS between start and end, in one GetMetricData call (whole minutes:
        AWS IoT publishes these metrics once a minute)."""
        start = start.replace(second=0, microsecond=0)
        end = end.replace(second=0, microsecond=0) + datetime.timedelta(minutes=1)
        period = int((end - start).total_seconds())
        queries = []
        for key, (metric, variants, by_rule) in IOT_COUNTS.items():
            for dimensions in variants:
                names = {**({"RuleName": rule_name} if by_rule else {}), **dimensions}
                queries.append(
                    {
                        "Id": f"q{len(queries)}",
                        "Label": key,
                        "MetricStat": {
                            "Metric": {
                                "Namespace": "AWS/IoT",
                                "MetricName": metric,
                                "Dimensions": [{"Name": n, "Value": v} for n, v in names.items()],
                            },
                            "Period": period,
                            "Stat": "Sum",
                        },
                    }
                )
        answer = self._session.client("cloudwatch").get_metric_data(
            MetricDataQueries=queries, StartTime=start, EndTime=end
        )
        counts = dict.fromkeys(IOT_COUNTS, 0)
        for result in answer["MetricDataResults"]:
            counts[result["Label"]] += int(sum(result.get("Values", [])))
        return counts

    def running_hosts(self, fleet: str) -> list[str]:
        """The fleet's running hosts that Run Command can reach (SSM Agent Online), by id; the
        others are said once, as the run leaves them out (telemetry/shared/ssm_hosts.py)."""
        from telemetry.shared.ssm_hosts import reachable, running_fleet_hosts

        online, self.unreachable = reachable(self._ssm, running_fleet_hosts(self._ec2, fleet), FLEET_TAG, fleet)
        return online

    def results_bucket(self, document: str) -> str:
        parameters = self._ssm.describe_document(Name=document)["Document"].get("Parameters", [])
        for parameter in parameters:
            if parameter["Name"] == "resultsBucket" and parameter.get("DefaultValue"):
                return parameter["DefaultValue"]
        raise RunError(
            f"document {document} names no results bucket; is the SimulatorFleet stack deployed?"
        )

    def send(self, document: str, instance_ids: list[str], parameters: dict, timeout_s: int, log_group: str = "") -> str:
        """The run document to the hosts; with `log_group`, each host's whole output goes there."""
        response = self._ssm.send_command(
            DocumentName=document,
            # The version the stack deployed last, as the other documents are sent: CloudFormation's
            # UpdateMethod NewVersion is reported not to move $DEFAULT (cloudformation-coverage-roadmap#2539).
            DocumentVersion="$LATEST",
            InstanceIds=instance_ids,
            Parameters=parameters,
            TimeoutSeconds=max(30, min(2_592_000, timeout_s)),
            Comment=f"simulator run {parameters['runId'][0]}"[:100],
            **({"CloudWatchOutputConfig": cloudwatch_output(log_group)} if log_group else {}),
        )
        return response["Command"]["CommandId"]

    def invocation(self, command_id: str, instance_id: str, log_group: str = "") -> tuple[str, str]:
        """The invocation's status and, once it has ended, its whole stderr (from `log_group` when
        GetCommandInvocation cut it short)."""
        result = invocation(self._ssm, command_id, instance_id)
        stderr = result.get("StandardErrorContent") or ""
        if log_group and result["Status"] not in RUN_COMMAND_UNFINISHED:
            stderr = whole_output(lambda: self._logs, log_group, command_id, instance_id, RUN_STEP, "stderr", stderr)
        return result["Status"], stderr.strip()

    def report(self, bucket: str, key: str) -> dict | None:
        try:
            body = self._s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        except self._s3.exceptions.NoSuchKey:
            return None
        return json.loads(body)

    def publish(self, log_group: str, event: dict) -> None:
        stream = f"run-{event['RunId']}"
        try:
            self._logs.create_log_stream(logGroupName=log_group, logStreamName=stream)
        except self._logs.exceptions.ResourceAlreadyExistsException:
            pass  # a run id used again: add to its stream
        self._logs.put_log_events(
            logGroupName=log_group,
            logStreamName=stream,
            logEvents=[{"timestamp": event["_aws"]["Timestamp"], "message": json.dumps(event)}],
        )


def embedded_metrics(report: dict, environment: str, *, now_ms: int) -> dict:
    """The fleet's headline figures in CloudWatch embedded metric format."""
    e2e = report.get("e2e_latency_ms") or {}
    figures = {
        "ThroughputMsgsPerSec": (report["throughput_msgs_per_s"], "Count/Second"),
        "E2eLatencyP99Ms": (e2e.get("p99"), "Milliseconds"),
        "E2eLatencyMaxMs": (e2e.get("max"), "Milliseconds"),
        "LostMessages": (report["lost"], "Count"),
        "FailedHosts": (len(report["fleet"]["failed_hosts"]), "Count"),
    }
    measured = {name: value for name, value in figures.items() if value[0] is not None}
    return {
        "_aws": {
            "Timestamp": now_ms,
            "CloudWatchMetrics": [
                {
                    "Namespace": SIMULATOR_METRICS_NAMESPACE,
                    "Dimensions": [["Environment"]],
                    "Metrics": [
                        {"Name": name, "Unit": unit} for name, (_, unit) in measured.items()
                    ],
                }
            ],
        },
        "Environment": environment,
        "RunId": report["fleet"]["run_id"],
        "SloPassed": report["slo"]["passed"],
        **{name: value for name, (value, _) in measured.items()},
    }


def fleet_report(plan: RunPlan, outcomes: list[HostOutcome]) -> dict:
    reported = [o for o in outcomes if o.report is not None]
    failed = [
        {
            "instance_id": o.instance_id,
            "status": o.status,
            "reason": o.detail or "no report uploaded",
        }
        for o in outcomes
        if o.report is None
    ]
    if not reported:
        names = ", ".join(f"{f['instance_id']} ({f['status']})" for f in failed)
        raise RunError(f"no host reported: {names}")
    try:
        reports = [o.report for o in reported]
        thresholds = replace(thresholds_of(reports[0]), **plan.slo_overrides) if plan.slo_overrides else None
        merged = merge_reports(reports, thresholds)
    except SimulatorError as error:
        raise RunError(str(error)) from None
    merged["fleet"] = {
        "environment": plan.environment,
        "run_id": plan.run_id,
        "transport": plan.transport,
        "hosts_planned": [o.instance_id for o in outcomes],
        "hosts_reported": [o.instance_id for o in reported],
        "failed_hosts": failed,
    }
    every_host = {
        "name": "hosts reported",
        "limit": len(outcomes),
        "actual": len(reported),
        "passed": not failed,
    }
    merged["slo"]["checks"].append(every_host)
    merged["slo"]["passed"] = merged["slo"]["passed"] and not failed
    return merged


def add_iot_counts(report: dict, counts: dict[str, int]) -> None:
    """What AWS IoT counted over an MQTT run, and one SLO check: none of it may be non-zero."""
    report["iot"] = counts
    undelivered = {key: value for key, value in counts.items() if value and key != "kept_by_error_action"}
    report["slo"]["checks"].append(
        {
            "name": "AWS IoT throttles and rule failures",
            "limit": 0,
            "actual": sum(undelivered.values()),
            "passed": not undelivered,
        }
    )
    report["slo"]["passed"] = report["slo"]["passed"] and not undelivered


def run_fleet(
    plan: RunPlan,
    fleet: Fleet,
    *,
    hosts: int | None,
    poll_interval_s: float,
    timeout_s: float,
    say: Callable[[str], None] = print,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    now: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.timezone.utc),
    metrics_delay_s: float = 0.0,
) -> dict:
    available = fleet.running_hosts(plan.fleet)
    unreachable = getattr(fleet, "unreachable", [])
    if unreachable:
        say(f"left out, SSM Agent not Online: {', '.join(unreachable)}")
    wanted = hosts or len(available)
    if wanted == 0 or len(available) < wanted:
        raise RunError(
            f"fleet {plan.fleet} has {len(available)} running host(s) Run Command can reach; "
            f"{wanted or 'at least 1'} needed"
            + (f" (SSM Agent not Online: {', '.join(unreachable)})" if unreachable else "")
        )
    plan.check_hosts(wanted)
    outcomes = [
        HostOutcome(i, r, plan.first_device(n), plan.share(n, wanted))
        for n, (i, r) in enumerate(zip(available[:wanted], split_rate(plan.total_rate, wanted)))
    ]
    bucket = fleet.results_bucket(plan.document)
    endpoint = fleet.iot_endpoint() if plan.transport == "mqtt" else "none"

    commands: dict[str, str] = {}
    run_started = now()
    for rate, first, share in sorted({(o.rate, o.first_device, o.share) for o in outcomes}):
        same = [
            o.instance_id for o in outcomes if (o.rate, o.first_device, o.share) == (rate, first, share)
        ]
        parameters = plan.parameters(rate, first_device=first, mqtt_endpoint=endpoint, share=share, hosts=wanted)
        command = fleet.send(plan.document, same, parameters, int(timeout_s), plan.command_log_group)
        commands.update(dict.fromkeys(same, command))
    say(f"sent run {plan.run_id} to {wanted} host(s): {', '.join(o.instance_id for o in outcomes)}")

    started = clock()
    while True:
        for outcome in outcomes:
            if outcome.status in RUN_COMMAND_UNFINISHED:
                outcome.status, outcome.detail = fleet.invocation(
                    commands[outcome.instance_id], outcome.instance_id, plan.command_log_group
                )
        running = [o for o in outcomes if o.status in RUN_COMMAND_UNFINISHED]
        elapsed = clock() - started
        counts = ", ".join(
            f"{s} {sum(o.status == s for o in outcomes)}"
            for s in sorted({o.status for o in outcomes})
        )
        say(
            f"[{elapsed:5.0f} s] {len(outcomes) - len(running)}/{len(outcomes)} host(s) finished ({counts})"
        )
        if not running:
            break
        if elapsed >= timeout_s:
            for outcome in running:
                outcome.detail = f"still {outcome.status} after {timeout_s:.0f} s"
            break
        sleep(poll_interval_s)

    run_ended = now()
    for outcome in outcomes:
        outcome.report = fleet.report(bucket, f"runs/{plan.run_id}/{outcome.instance_id}.json")
        if outcome.report is None and not outcome.detail:
            outcome.detail = (
                f"command {outcome.status}; no report at s3://{bucket}/runs/{plan.run_id}/"
            )
    report = fleet_report(plan, outcomes)
    if plan.transport == "mqtt":
        # AWS IoT sends its metrics once a minute; the last minute of the run needs time to land.
        say(f"waiting {metrics_delay_s:.0f} s for the AWS IoT metrics of the run's last minute")
        sleep(metrics_delay_s)
        add_iot_counts(report, fleet.iot_counts(plan.rule_name, run_started, run_ended))
    return report


def describe_plan(plan: RunPlan, hosts: int) -> str:
    rates = split_rate(plan.total_rate, hosts)
    rate = "as fast as possible" if plan.total_rate == 0 else f"{plan.total_rate:,} msg/s in total"
    lines = [
        f"environment {plan.environment} ({plan.region}): fleet {plan.fleet}, document {plan.document}",
        f"run {plan.run_id}: {rate} over {hosts} host(s), {plan.duration_s} s after {plan.warmup_s} s warmup, "
        f"{plan.message_bytes}-byte messages from {plan.devices:,} devices per host",
    ]
    if plan.transport == "mqtt":
        lines.append(
            f"over MQTT to AWS IoT Core, rule {plan.rule_name} into MSK: host n publishes as things "
            f"{plan.devices}*(n-1)+1 .. {plan.devices}*n (provisioned: telemetry/commands/devices/provision.py)"
        )
    plan.check_hosts(hosts)
    lines += [
        (f"  host {n}: {r:,} msg/s" if plan.total_rate else f"  host {n}: as fast as possible")
        + (f", partitions p % {hosts} = {n - 1}" if plan.transport == "kafka" and hosts > 1 else "")
        for n, r in enumerate(rates, 1)
    ]
    lines.append(f"host reports: s3://<results bucket>/runs/{plan.run_id}/<instance id>.json")
    lines.append(
        f"fleet metrics: log group {plan.log_group} (namespace {SIMULATOR_METRICS_NAMESPACE})"
    )
    return "\n".join(lines)


def print_fleet_plan(config: EnvironmentConfig, args: argparse.Namespace) -> int:
    """--plan: the fleet and its quotas, offline; a broken quota is the one error line."""
    from stacks.fleet_plan import describe, plan_fleet

    devices = args.fleet_devices or args.devices * config.simulator_fleet.host_count
    fleet = plan_fleet(devices=devices, rate=args.rate, message_bytes=args.message_bytes, transport=args.transport,
                       config=config, hosts=args.hosts)
    if args.format == "json":
        from dataclasses import asdict

        from telemetry.shared.output import document

        document({"environment": config.name, **asdict(fleet), "refusals": fleet.refusals})
    else:
        print(describe(fleet))
    refusal = fleet.refusal_line()
    if refusal:  # the plan was asked for and shown; a check it fails is a failed check (exit 1)
        raise OperationFailed(refusal)
    return 0


def dry_run(plan: RunPlan, args: argparse.Namespace, config: EnvironmentConfig) -> int:
    """--dry-run: the run's plan, offline. Without --hosts it assumes the configured fleet size,
    where a run takes every running host it finds."""
    from telemetry.shared.output import dry_run_plan

    hosts = args.hosts or config.simulator_fleet.host_count
    text = describe_plan(plan, hosts)  # refuses more hosts than the topic has partitions
    hosts_read = (f"the running hosts of fleet {plan.fleet} whose SSM Agent is Online (EC2, Systems Manager): "
                  + (f"{hosts} of them are needed" if args.hosts else
                     f"a run uses every one it finds; this plan assumes the configured {hosts}"))
    reads = [hosts_read, f"the results bucket from document {plan.document}'s parameters (Systems Manager)"]
    if plan.transport == "mqtt":
        reads += ["the account's AWS IoT data endpoint (DescribeEndpoint)",
                  f"after the run, rule {plan.rule_name}'s AWS IoT metrics in CloudWatch"]
    reads.append(f"each host's report from s3://<results bucket>/runs/{plan.run_id}/")
    report_path = args.report or REPO / "reports" / f"{plan.run_id}.json"
    return dry_run_plan(
        args, config, summary=[text, "dry run: nothing sent"], would_read=reads,
        would_change=[
            f"send document {plan.document} to {hosts} host(s) over SSM Run Command and follow it",
            f"put the fleet's figures into log group {plan.log_group} (namespace {SIMULATOR_METRICS_NAMESPACE})",
            f"write the merged report to {report_path} and its plot to {args.plot or report_path.with_suffix('.png')}",
        ],
        run_id=plan.run_id, fleet=plan.fleet, document=plan.document, transport=plan.transport,
        total_rate=plan.total_rate, duration_s=plan.duration_s, warmup_s=plan.warmup_s,
        message_bytes=plan.message_bytes, devices_per_host=plan.devices, hosts=hosts,
        host_rates=split_rate(plan.total_rate, hosts),
    )


def make_plan(config: EnvironmentConfig, args: argparse.Namespace) -> RunPlan:
    return RunPlan(
        environment=config.name,
        region=config.region,
        fleet=simulator_fleet_name(config),
        document=run_simulator_document_name(config),
        run_id=args.run_id,
        total_rate=args.rate,
        duration_s=args.duration,
        warmup_s=args.warmup,
        processes=args.processes,
        message_bytes=args.message_bytes,
        devices=args.devices,
        log_group=simulator_runs_log_group_name(config),
        transport=args.transport,
        rule_name=device_rule_name(config),
        topic_partitions=next(
            t.partitions for t in config.msk.topics if t.name == config.simulator_fleet.topic
        ),
        connect_quota=config.device_gateway.connect_quota_per_s,
        command_log_group=simulator_fleet_commands_log_group_name(config),
        slo_overrides=given_thresholds(args),
    )


def _run_id(value: str) -> str:
    if not re.fullmatch(RUN_ID_PATTERN, value):
        raise argparse.ArgumentTypeError(
            "use 1-64 letters, digits and dashes, starting with a letter or digit"
        )
    return value


def _at_least(minimum: int):
    def parse(value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{value!r} is not a whole number") from None
        if number < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}")
        return number

    return parse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    default_run_id = "run-" + datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d-%H%M%S")
    parser.add_argument(
        "--rate", required=True, type=_at_least(0), help="total msg/s over all hosts (0 = max)"
    )
    parser.add_argument("--duration", type=_at_least(1), help="measured seconds (required, except with --plan)")
    parser.add_argument(
        "--hosts", type=_at_least(1), help="use this many hosts (default: every running host)"
    )
    parser.add_argument(
        "--run-id", type=_run_id, default=default_run_id, help="default: run-<UTC time>"
    )
    parser.add_argument(
        "--warmup", type=_at_least(0), default=5, help="seconds before measuring (default 5)"
    )
    parser.add_argument(
        "--processes",
        type=_at_least(0),
        default=0,
        help="per host (default 0: as few as each host's rate needs, the simulator's default)",
    )
    parser.add_argument("--message-bytes", type=_at_least(320), default=512, help="default 512")
    parser.add_argument(
        "--devices", type=_at_least(1), default=1000, help="devices per host (default 1000)"
    )
    parser.add_argument(
        "--poll-interval", type=float, default=10.0, help="seconds between progress lines"
    )
    parser.add_argument(
        "--transport",
        choices=("kafka", "mqtt"),
        default="kafka",
        help="kafka: hosts produce to MSK directly (default); mqtt: hosts publish as devices to AWS "
        "IoT Core and the device gateway's rule writes to MSK",
    )
    parser.add_argument(
        "--metrics-delay",
        type=float,
        default=120.0,
        help="with --transport mqtt, seconds to wait after the run before reading AWS IoT's "
        "CloudWatch counts (default 120)",
    )
    parser.add_argument("--timeout", type=float, help="give up on hosts after this many seconds")
    parser.add_argument("--report", type=Path, help="merged report (default reports/<run id>.json)")
    parser.add_argument("--plot", type=Path, help="percentile plot (default reports/<run id>.png)")
    parser.add_argument(
        "--dry-run", action="store_true", help="print the plan; send nothing, call no AWS API"
    )
    parser.add_argument(
        "--plan",
        action="store_true",
        help="offline: the fleet --fleet-devices devices at --rate need (hosts, devices per host, the "
        "connect phase) and every AWS quota the run touches; exit 1 when one would be broken (the plan is "
        "shown: a failed check, not bad usage)",
    )
    parser.add_argument(
        "--fleet-devices", type=_at_least(1), metavar="N",
        help="with --plan: devices over the whole fleet (default: --devices per host x the fleet's hosts)",
    )
    add_slo_flags(parser, None)


def run(args: argparse.Namespace, session_factory: Callable[[str], object]) -> int:
    """The fleet run; a problem is raised as RunError or ConfigError, worded for the operator."""
    config = load_environment(read_environments(), args.env)
    if args.plan:
        return print_fleet_plan(config, args)
    if args.duration is None:
        raise RunError("the following arguments are required: --duration")
    plan = make_plan(config, args)
    if args.dry_run:
        return dry_run(plan, args, config)
    # AWS errors go up as botocore raised them: telemetry (and main) word them, so missing
    # credentials say how to give them and a failed call exits 1, as in every other command.
    timeout = args.timeout or args.warmup + args.duration + SETUP_ALLOWANCE_S
    fleet = Fleet(session_factory(config.region))
    report = run_fleet(
        plan,
        fleet,
        hosts=args.hosts,
        poll_interval_s=args.poll_interval,
        timeout_s=timeout,
        metrics_delay_s=args.metrics_delay,
    )
    fleet.publish(
        plan.log_group,
        embedded_metrics(report, plan.environment, now_ms=int(time.time() * 1000)),
    )

    report_path = args.report or REPO / "reports" / f"{plan.run_id}.json"
    plot_path = args.plot or report_path.with_suffix(".png")
    write_report(report, report_path)
    from simulator.plot import write_percentile_plot

    write_percentile_plot(report, plot_path)
    if args.format == "json":
        from telemetry.shared.output import document

        document(report)
    else:
        print(format_summary(report))
    for failed in report["fleet"]["failed_hosts"]:
        print(f"host {failed['instance_id']} FAILED ({failed['status']}): {failed['reason']}")
    print(f"wrote {report_path} and {plot_path}")
    return 0 if report["slo"]["passed"] else 1


if __name__ == "__main__":  # run by path, as before the one front door
    from telemetry.shared.errors import moved

    raise SystemExit(moved("simulate"))
