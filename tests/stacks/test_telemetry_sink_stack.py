"""Telemetry sink stack: the Managed Flink application, its bucket, role, Glue table and alarms."""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path

import aws_cdk as cdk
import pytest
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_sns as sns
from aws_cdk.assertions import Template

from stacks.config import FLINK_RUNTIMES, MULTIPART_ABORT_MARGIN_DAYS, load_environment
from stacks.constructs.flink_jar import JAR_NAME, MavenPackage
from stacks.constructs.telemetry_sink_monitoring import JOB_HEALTH_METRICS, TelemetrySinkMonitoring
from tests.conftest import cdk_context

APPLICATION = "AWS::KinesisAnalyticsV2::Application"
PARALLELISM = {"dev": (1, False), "staging": (2, True), "prod": (4, True)}


def template(synthesized, env):
    return synthesized(env).template("telemetry_sink")


def only(template, resource_type: str) -> dict:
    (resource,) = template.find_resources(resource_type).values()
    return resource


def application_config(synthesized, env) -> dict:
    return only(template(synthesized, env), APPLICATION)["Properties"]["ApplicationConfiguration"]


@pytest.mark.parametrize("env", ["dev", "staging", "prod"])
def test_application_runs_the_configured_runtime_with_checkpointing_and_per_env_parallelism(synthesized, env):
    app = only(template(synthesized, env), APPLICATION)["Properties"]
    assert app["ApplicationName"] == f"telemetry-{env}-telemetry-sink"
    assert app["RuntimeEnvironment"] == "FLINK-2_2"
    assert app["ApplicationMode"] == "STREAMING"
    flink = app["ApplicationConfiguration"]["FlinkApplicationConfiguration"]
    checkpoints = flink["CheckpointConfiguration"]
    assert checkpoints["ConfigurationType"] == "CUSTOM" and checkpoints["CheckpointingEnabled"] is True
    assert checkpoints["CheckpointInterval"] == 60_000
    assert checkpoints["MinPauseBetweenCheckpoints"] == 5_000
    parallelism = flink["ParallelismConfiguration"]
    assert parallelism["ConfigurationType"] == "CUSTOM"
    assert (parallelism["Parallelism"], parallelism["AutoScalingEnabled"]) == PARALLELISM[env]
    assert parallelism["ParallelismPerKPU"] == 1
    assert flink["MonitoringConfiguration"]["MetricsLevel"] == "APPLICATION"
    assert app["ApplicationConfiguration"]["ApplicationSnapshotConfiguration"] == {"SnapshotsEnabled": True}
    restore = app["RunConfiguration"]["ApplicationRestoreConfiguration"]
    assert restore["ApplicationRestoreType"] == "RESTORE_FROM_LATEST_SNAPSHOT"
    code = app["ApplicationConfiguration"]["ApplicationCodeConfiguration"]
    assert code["CodeContentType"] == "ZIPFILE"
    assert "cdk-hnb659fds-assets" in json.dumps(code["CodeContent"]["S3ContentLocation"]["BucketARN"])


def test_property_groups_are_exactly_what_the_job_reads(synthesized):
    groups = {
        g["PropertyGroupId"]: g["PropertyMap"]
        for g in application_config(synthesized, "prod")["EnvironmentProperties"]["PropertyGroups"]
    }
    assert set(groups) == {"KafkaSource", "Sink"}
    source, sink = groups["KafkaSource"], groups["Sink"]
    assert set(source) == {"bootstrap.servers", "topic", "group.id", "security.protocol", "starting.offsets"}
    assert source["topic"] == "telemetry"
    assert source["group.id"] == "telemetry-sink-prod"
    assert source["security.protocol"] == "SASL_SSL"
    assert source["starting.offsets"] == "committed-earliest"
    # The IAM broker string from the MSK stack's SSM parameter, resolved at deploy time.
    brokers = source["bootstrap.servers"]["Ref"]
    parameter = synthesized("prod").stacks["telemetry_sink"]["Parameters"][brokers]
    assert parameter["Type"] == "AWS::SSM::Parameter::Value<String>"
    assert parameter["Default"] == "/telemetry-prod/msk/bootstrap-brokers-iam"
    assert set(sink) == {"output.path", "dead.letter.path", "smoke.path", "max.part.size.mb", "earliest.event.date",
                         "max.clock.ahead.seconds"}
    assert sink["max.part.size.mb"] == "256"
    # The job files a reading by its device's time only inside the table's projection.
    assert sink["earliest.event.date"] == "2025-01-01"
    assert sink["max.clock.ahead.seconds"] == "300"
    for key, prefix in (("output.path", "/telemetry"), ("dead.letter.path", "/dead-letter"), ("smoke.path", "/smoke")):
        parts = sink[key]["Fn::Join"][1]
        assert parts[0] == "s3://" and parts[-1] == prefix
        assert parts[1]["Ref"].startswith("TelemetryBucket")


def test_application_runs_in_private_subnets_with_the_msk_client_group(synthesized):
    t = template(synthesized, "prod")
    (vpc,) = application_config(synthesized, "prod")["VpcConfigurations"]
    assert len(vpc["SubnetIds"]) == 3
    assert all("PrivateSubnet" in json.dumps(s) for s in vpc["SubnetIds"])
    groups = json.dumps(vpc["SecurityGroupIds"])
    assert "ClientSecurityGroup" in groups  # imported from the MSK stack: brokers on 9098
    (own,) = t.find_resources("AWS::EC2::SecurityGroup").values()
    assert "SecurityGroupIngress" not in own["Properties"]
    assert [(r["IpProtocol"], r["FromPort"]) for r in own["Properties"]["SecurityGroupEgress"]] == [("tcp", 443)]


def test_application_logs_to_its_own_stream(synthesized):
    t = template(synthesized, "prod")
    groups = t.find_resources("AWS::Logs::LogGroup")
    (group,) = [g for g in groups.values() if g["Properties"].get("LogGroupName") == "/telemetry-prod/telemetry-sink"]
    assert group["Properties"]["RetentionInDays"] == 365
    option = only(t, "AWS::KinesisAnalyticsV2::ApplicationCloudWatchLoggingOption")["Properties"]
    assert option["ApplicationName"] == "telemetry-prod-telemetry-sink"
    # A literal ARN: @aws-cdk/core:enablePartitionLiterals names the partition of the region.
    assert option["CloudWatchLoggingOption"]["LogStreamARN"] == (
        "arn:aws:logs:eu-west-1:333333333333:log-group:/telemetry-prod/telemetry-sink:log-stream:application"
    )
    stream = only(t, "AWS::Logs::LogStream")["Properties"]
    assert stream["LogStreamName"] == "application"


def telemetry_bucket(t) -> dict:
    buckets = t.find_resources("AWS::S3::Bucket")
    (bucket,) = [b for b in buckets.values() if "LoggingConfiguration" in b["Properties"]]
    return bucket


def test_bucket_is_kms_encrypted_tls_only_versioned_private_logged_and_retained_in_prod(synthesized):
    t = template(synthesized, "prod")
    bucket = telemetry_bucket(t)
    props = bucket["Properties"]
    (encryption,) = props["BucketEncryption"]["ServerSideEncryptionConfiguration"]
    assert encryption["ServerSideEncryptionByDefault"]["SSEAlgorithm"] == "aws:kms"
    assert encryption["ServerSideEncryptionByDefault"]["KMSMasterKeyID"]["Fn::GetAtt"][0].startswith("TelemetryKey")
    assert encryption["BucketKeyEnabled"] is True
    key_id = encryption["ServerSideEncryptionByDefault"]["KMSMasterKeyID"]["Fn::GetAtt"][0]
    assert t.find_resources("AWS::KMS::Key")[key_id]["Properties"]["EnableKeyRotation"] is True
    assert props["VersioningConfiguration"] == {"Status": "Enabled"}
    assert all(props["PublicAccessBlockConfiguration"].values())
    assert props["LoggingConfiguration"]["LogFilePrefix"] == "s3-access/"
    assert bucket["DeletionPolicy"] == "RetainExceptOnCreate"  # kept, unless its own creation rolls back
    policies = json.dumps(t.find_resources("AWS::S3::BucketPolicy"))
    assert policies.count('"aws:SecureTransport": "false"') == 2  # telemetry and access-log buckets


def test_nothing_is_retained_outside_production(synthesized):
    t = template(synthesized, "dev")
    assert telemetry_bucket(t)["DeletionPolicy"] == "Delete"
    assert only(t, APPLICATION).get("DeletionPolicy", "Delete") == "Delete"


@pytest.mark.parametrize(("env", "ia", "archive", "noncurrent"), [("dev", 30, 60, 7), ("prod", 90, 365, 90)])
def test_lifecycle_moves_data_to_infrequent_access_then_glacier_ir(synthesized, env, ia, archive, noncurrent):
    rules = telemetry_bucket(template(synthesized, env))["Properties"]["LifecycleConfiguration"]["Rules"]
    main = next(r for r in rules if "Transitions" in r)
    assert main["Transitions"] == [
        {"StorageClass": "STANDARD_IA", "TransitionInDays": ia},
        {"StorageClass": "GLACIER_IR", "TransitionInDays": archive},
    ]
    assert main["NoncurrentVersionExpiration"] == {"NoncurrentDays": noncurrent}
    assert "AbortIncompleteMultipartUpload" in main  # its window: the next test
    assert "ExpirationInDays" not in main  # telemetry is kept; only Athena results expire
    results = next(r for r in rules if r.get("Prefix") == "athena-results/")
    assert results["ExpirationInDays"] == (7 if env == "dev" else 30)
    # Smoke runs' records (telemetry deploy) sit outside the table's prefix and expire in a day.
    smoke = {r["Id"]: r for r in rules if r.get("Prefix") == "smoke/"}
    assert smoke["ExpireSmokeRuns"]["ExpirationInDays"] == 1 and smoke["ExpireSmokeRuns"]["Status"] == "Enabled"
    # Versioned bucket: the hidden versions go a day later, and the delete markers after them.
    assert smoke["ExpireSmokeRuns"]["NoncurrentVersionExpiration"] == {"NoncurrentDays": 1}
    assert smoke["RemoveSmokeDeleteMarkers"]["ExpiredObjectDeleteMarker"] is True


@pytest.mark.parametrize("env", ["dev", "staging", "prod"])
def test_unfinished_uploads_outlive_every_restorable_snapshot(synthesized, env):
    """The file sink's part files are multipart uploads that a restore from a snapshot resumes:
    S3 may abort them only after the newest snapshot docs/lake.md promises to restore is older."""
    retention = load_environment(cdk_context()["environments"], env).telemetry_sink.snapshot_retention_days
    rules = telemetry_bucket(template(synthesized, env))["Properties"]["LifecycleConfiguration"]["Rules"]
    windows = [r["AbortIncompleteMultipartUpload"]["DaysAfterInitiation"] for r in rules
               if "AbortIncompleteMultipartUpload" in r]
    assert windows and all(window > retention for window in windows), (retention, windows)
    assert min(windows) == retention + MULTIPART_ABORT_MARGIN_DAYS


def test_glue_table_reads_parquet_with_projected_date_and_hour_partitions(synthesized):
    t = template(synthesized, "prod")
    database = only(t, "AWS::Glue::Database")["Properties"]
    assert database["DatabaseInput"]["Name"] == "telemetry_prod"
    table = only(t, "AWS::Glue::Table")["Properties"]
    assert table["DatabaseName"] == "telemetry_prod"
    table_input = table["TableInput"]
    assert table_input["Name"] == "telemetry"
    assert table_input["TableType"] == "EXTERNAL_TABLE"
    storage = table_input["StorageDescriptor"]
    assert [(c["Name"], c["Type"]) for c in storage["Columns"]] == [
        ("run_id", "string"), ("producer_id", "string"), ("device_id", "string"), ("seq", "bigint"),
        ("sent_ns", "bigint"), ("event_time", "timestamp"), ("temperature_c", "double"),
        ("humidity_pct", "double"), ("battery_pct", "double"), ("lat", "double"), ("lon", "double"),
        ("status", "string"), ("kafka_partition", "int"), ("kafka_offset", "bigint"),
        ("ingest_time", "timestamp"), ("read_time", "timestamp"),
    ]  # fmt: skip
    assert [(c["Name"], c["Type"]) for c in table_input["PartitionKeys"]] == [("dt", "string"), ("hour", "string")]
    assert storage["SerdeInfo"]["SerializationLibrary"] == "org.apache.hadoop.hive.ql.io.parquet.serde.ParquetHiveSerDe"
    assert storage["InputFormat"].endswith("MapredParquetInputFormat")
    assert storage["OutputFormat"].endswith("MapredParquetOutputFormat")
    assert storage["Location"]["Fn::Join"][1][-1] == "/telemetry/"
    params = table_input["Parameters"]
    assert params["projection.enabled"] == "true"
    assert params["projection.dt.type"] == "date"
    assert params["projection.dt.format"] == "yyyy-MM-dd"
    assert params["projection.dt.range"] == "2025-01-01,NOW"
    assert params["projection.hour.type"] == "integer"
    assert params["projection.hour.range"] == "0,23"
    assert params["projection.hour.digits"] == "2"
    template_string, variables = params["storage.location.template"]["Fn::Sub"]
    # Fn::Sub turns `${!dt}` into the literal `${dt}` Athena substitutes.
    assert template_string == "s3://${Bucket}/telemetry/dt=${!dt}/hour=${!hour}/"
    assert variables["Bucket"]["Ref"].startswith("TelemetryBucket")


def test_athena_workgroup_enforces_encrypted_results_in_the_bucket(synthesized):
    workgroup = only(template(synthesized, "prod"), "AWS::Athena::WorkGroup")["Properties"]
    assert workgroup["Name"] == "telemetry-prod-telemetry"
    assert workgroup["RecursiveDeleteOption"] is False
    config = workgroup["WorkGroupConfiguration"]
    assert config["EnforceWorkGroupConfiguration"] is True
    results = config["ResultConfiguration"]
    assert results["EncryptionConfiguration"]["EncryptionOption"] == "SSE_KMS"
    assert results["OutputLocation"]["Fn::Join"][1][-1] == "/athena-results/"


def role_statements(synthesized, env="prod") -> list[dict]:
    t = template(synthesized, env)
    return [s for p in t.find_resources("AWS::IAM::Policy").values() for s in p["Properties"]["PolicyDocument"]["Statement"]]


def actions_of(statement) -> list[str]:
    return [statement["Action"]] if isinstance(statement["Action"], str) else statement["Action"]


def test_role_is_least_privilege(synthesized):
    statements = role_statements(synthesized)
    actions = {a for s in statements for a in actions_of(s)}
    assert not {a for a in actions if a.endswith(":*") or a == "*"}
    # Only the EC2 network-interface actions Managed Flink documents for VPC access are on "*".
    on_everything = {a for s in statements if s["Resource"] == "*" for a in actions_of(s)}
    assert on_everything and all(a.startswith("ec2:") for a in on_everything)
    by_action = {a: s for s in statements for a in actions_of(s)}
    assert by_action["s3:PutObject"]["Resource"] == by_action["s3:DeleteObject"]["Resource"]
    prefixes = sorted(r["Fn::Join"][1][-1] for r in by_action["s3:PutObject"]["Resource"])
    assert prefixes == ["/dead-letter/*", "/smoke/*", "/telemetry/*"]
    # The sink deletes (its S3 writer's temporary part objects), but on a versioned bucket a delete
    # only adds a marker: it may not remove a version, nor change versioning, the lifecycle or a lock,
    # so what it wrote stays recoverable for the noncurrent retention (docs/lake.md, "Commits, storage classes and deletes").
    assert not actions & {"s3:DeleteObjectVersion", "s3:PutBucketVersioning", "s3:PutLifecycleConfiguration",
                          "s3:PutBucketObjectLockConfiguration", "s3:PutBucketPolicy", "s3:BypassGovernanceRetention"}
    bucket = telemetry_bucket(template(synthesized, "prod"))["Properties"]
    assert bucket["VersioningConfiguration"] == {"Status": "Enabled"}
    (whole,) = [r for r in bucket["LifecycleConfiguration"]["Rules"] if "Prefix" not in r]  # smoke/ keeps a day
    assert whole["NoncurrentVersionExpiration"]["NoncurrentDays"] >= 30
    listing = by_action["s3:ListBucket"]
    assert listing["Condition"]["StringLike"]["s3:prefix"] == [
        "telemetry", "telemetry/*", "dead-letter", "dead-letter/*", "smoke", "smoke/*"]
    # The job's code: the one object the application runs, read only.
    code_key = application_config(synthesized, "prod")["ApplicationCodeConfiguration"]["CodeContent"][
        "S3ContentLocation"
    ]["FileKey"]
    assert by_action["s3:GetObjectVersion"]["Resource"].endswith(f"/{code_key}")
    assert by_action["kms:GenerateDataKey"]["Resource"]["Fn::GetAtt"][0].startswith("TelemetryKey")
    assert by_action["logs:PutLogEvents"]["Resource"] == (
        "arn:aws:logs:eu-west-1:333333333333:log-group:/telemetry-prod/telemetry-sink:log-stream:application"
    )


def test_role_reads_its_topic_and_commits_offsets_for_its_group_only(synthesized):
    by_action = {json.dumps(s["Action"]): json.dumps(s["Resource"]) for s in role_statements(synthesized)}
    assert by_action['["kafka-cluster:DescribeTopic", "kafka-cluster:ReadData"]'].endswith('"/telemetry"]]}')
    assert ":group/telemetry-prod/*/telemetry-sink-prod" in by_action['["kafka-cluster:AlterGroup", "kafka-cluster:DescribeGroup"]']
    assert "ImportValue" in by_action['["kafka-cluster:Connect", "kafka-cluster:DescribeCluster"]']
    assert not any("WriteData" in a for a in by_action)


def test_role_is_assumable_only_by_this_application(synthesized):
    role = only(template(synthesized, "prod"), "AWS::IAM::Role")["Properties"]
    (trust,) = role["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Principal"] == {"Service": "kinesisanalytics.amazonaws.com"}
    assert trust["Condition"]["StringEquals"] == {"aws:SourceAccount": "333333333333"}
    source_arn = trust["Condition"]["ArnEquals"]["aws:SourceArn"]
    assert source_arn == "arn:aws:kinesisanalytics:eu-west-1:333333333333:application/telemetry-prod-telemetry-sink"


def alarms(synthesized, env) -> dict[str, dict]:
    found = template(synthesized, env).find_resources("AWS::CloudWatch::Alarm")
    return {a["Properties"]["AlarmName"]: a["Properties"] for a in found.values()}


def metric_names(alarm: dict) -> set[str]:
    if "MetricName" in alarm:
        return {alarm["MetricName"]}
    return {m["MetricStat"]["Metric"]["MetricName"] for m in alarm["Metrics"] if "MetricStat" in m}


def test_alarms_cover_job_health_checkpoints_lag_dead_letters_and_device_clocks(synthesized):
    found = alarms(synthesized, "prod")
    name = "telemetry-prod-telemetry-sink"
    assert set(found) == {
        f"{name}-{a}"
        for a in ("NotRunning", "CheckpointFailures", "ConsumerLag", "DeadLetters", "DeviceClocksOutOfRange")
    }
    assert metric_names(found[f"{name}-NotRunning"]) == {"runningTime"}  # FLINK-2_2: not the deprecated downtime
    assert metric_names(found[f"{name}-CheckpointFailures"]) == {"numberOfFailedCheckpoints"}
    assert metric_names(found[f"{name}-ConsumerLag"]) == {"records_lag_max"}
    assert metric_names(found[f"{name}-DeadLetters"]) == {"DeadLetterRecords"}
    assert metric_names(found[f"{name}-DeviceClocksOutOfRange"]) == {"ClockOutOfRangeRecords"}
    # Each count is one counter in one task of the job (flink/, CountedInOneTask; the Java
    # integration test checks there is one): its Maximum is the total, DIFF what was added, and a
    # window after a restart (the counter starts again at 0) counts from zero.
    for counted in ("DeadLetters", "DeviceClocksOutOfRange"):
        (total,) = [m for m in found[f"{name}-{counted}"]["Metrics"] if "MetricStat" in m]
        (expression,) = [m for m in found[f"{name}-{counted}"]["Metrics"] if "Expression" in m]
        assert total["MetricStat"]["Stat"] == "Maximum"
        x = total["Id"]
        assert expression["Expression"] == f"IF(DIFF({x}) < 0, {x}, DIFF({x}))"
    assert found[f"{name}-ConsumerLag"]["Threshold"] == 300000
    assert found[f"{name}-DeadLetters"]["Threshold"] == 1
    for alarm in found.values():
        assert alarm["AlarmActions"] == alarm["OKActions"]
        assert "ImportValue" in json.dumps(alarm["AlarmActions"])  # the monitoring stack's topic
        dimensions = json.dumps(alarm)
        assert '"Name": "Application", "Value": "telemetry-prod-telemetry-sink"' in dimensions
        assert all(m.get("MetricStat", {}).get("Metric", {}).get("Namespace", "AWS/KinesisAnalytics")
                   == "AWS/KinesisAnalytics" for m in alarm.get("Metrics", []))


def evaluate_metric_math(expression: str, series: dict[str, list[float]]) -> list[float | None]:
    """Evaluates the metric math the counter alarms use, on datapoints one per window: metric ids,
    numbers, DIFF (None where there is no preceding value), `<` of a series and a number, and IF
    elementwise (a point dropped where the condition has none), as "Using metric math" describes them."""
    tokens = re.findall(r"[A-Za-z_]\w*|\d+(?:\.\d+)?|[(),<]", expression)
    assert "".join(tokens) == expression.replace(" ", ""), f"unsupported syntax in {expression}"
    position = 0

    def take(expected: str | None = None) -> str:
        nonlocal position
        token = tokens[position]
        assert expected is None or token == expected, f"expected {expected}, found {token} in {expression}"
        position += 1
        return token

    def term() -> list[float | None] | float:
        token = take()
        if token == "DIFF":
            take("(")
            values = comparison()
            take(")")
            return [None] + [None if a is None or b is None else b - a for a, b in zip(values, values[1:])]
        if token == "IF":
            take("(")
            condition = comparison()
            take(",")
            when_true = comparison()
            take(",")
            when_false = comparison()
            take(")")
            branches = [b if isinstance(b, list) else [b] * len(condition) for b in (when_false, when_true)]
            return [None if c is None else branches[bool(c)][i] for i, c in enumerate(condition)]
        if token[0].isdigit():
            return float(token)
        return list(series[token])

    def comparison() -> list[float | None] | float:
        left = term()
        if position < len(tokens) and tokens[position] == "<":
            take("<")
            right = term()
            assert isinstance(left, list) and isinstance(right, float), "only TS < S is used"
            return [None if v is None else float(v < right) for v in left]
        return left

    result = comparison()
    assert position == len(tokens), f"trailing tokens in {expression}"
    return result


def test_the_window_after_a_sink_restart_counts_what_the_restarted_job_added(synthesized):
    """A restart resets the job's counters to 0. DIFF of the windows' Maximum then goes negative;
    the alarm's expression counts that window from zero, so records dead-lettered right after a
    restart still reach the threshold."""
    found = alarms(synthesized, "prod")
    for counted in ("DeadLetters", "DeviceClocksOutOfRange"):
        alarm = found[f"telemetry-prod-telemetry-sink-{counted}"]
        (total,) = [m for m in alarm["Metrics"] if "MetricStat" in m]
        (expression,) = [m for m in alarm["Metrics"] if "Expression" in m]
        threshold = float(alarm["Threshold"])
        # Maximum per 5-minute window: 500 more, then 2 more, then none before the restart; the
        # threshold's worth in the window after it, then 4 more.
        maxima = [500 + threshold, 502 + threshold, 502 + threshold, threshold, threshold + 4]

        added = evaluate_metric_math(expression["Expression"], {total["Id"]: maxima})

        assert added == [None, 2.0, 0.0, threshold, 4.0]
        assert alarm["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"  # so that window alarms


def test_a_stopped_or_restarting_job_alarms_and_idle_rates_do_not(synthesized):
    """NotRunning fires when the job leaves RUNNING at any moment of 10 minutes in a row (so a deploy or
    an autoscaling restart shorter than that stays quiet), and when the application reports nothing
    at all (stopped); the rate alarms ignore a silent application."""
    found = alarms(synthesized, "prod")
    not_running = found.pop("telemetry-prod-telemetry-sink-NotRunning")
    (metric,) = not_running["Metrics"]
    assert (metric["MetricStat"]["Stat"], metric["MetricStat"]["Period"]) == ("Minimum", 60)
    assert (not_running["ComparisonOperator"], not_running["Threshold"]) == ("LessThanThreshold", 1)
    assert not_running["EvaluationPeriods"] == 10
    assert not_running.get("DatapointsToAlarm", 10) == 10  # every minute of the ten, not some of them
    assert not_running["TreatMissingData"] == "breaching"
    assert {a["TreatMissingData"] for a in found.values()} == {"missing"}


@pytest.mark.parametrize(
    ("runtime", "running", "outages"),
    [
        ("FLINK-1_20", "uptime", {"downtime"}),
        ("FLINK-2_2", "runningTime", {"restartingTime", "failingTime", "cancellingTime"}),
    ],
)
def test_job_health_metrics_follow_the_runtime(runtime, running, outages):
    """Each runtime the config allows is watched through the metrics it publishes: Managed Flink
    deprecates uptime and downtime for Flink 2.2 only."""
    assert set(JOB_HEALTH_METRICS) == set(FLINK_RUNTIMES)
    stack = cdk.Stack(cdk.App(), "Sink")
    TelemetrySinkMonitoring(
        stack, "Monitoring", application_name="sink", runtime=runtime, consumer_lag_alarm_records=1,
        dead_letter_alarm_records=1, clock_alarm_records=1, not_running_alarm_minutes=10,
        alarm_topic=sns.Topic(stack, "Topic"), dashboard=cloudwatch.Dashboard(stack, "Board"),
    )
    t = Template.from_stack(stack)
    found = {a["Properties"]["AlarmName"]: a["Properties"] for a in t.find_resources("AWS::CloudWatch::Alarm").values()}
    assert metric_names(found["sink-NotRunning"]) == {running}
    (dashboard,) = t.find_resources("AWS::CloudWatch::Dashboard").values()
    body = json.dumps(dashboard["Properties"]["DashboardBody"])
    graphed = set(re.findall(r'\\"AWS/KinesisAnalytics\\",\\"(\w+)\\"', body))
    assert {running, *outages} <= graphed
    other = {"uptime", "downtime", "runningTime", "restartingTime", "failingTime", "cancellingTime"} - {running, *outages}
    assert not graphed & other


def test_alarm_thresholds_follow_config(synthesized):
    found = alarms(synthesized, "dev")
    assert found["telemetry-dev-telemetry-sink-ConsumerLag"]["Threshold"] == 100000
    assert found["telemetry-dev-telemetry-sink-DeadLetters"]["Threshold"] == 100


def test_dashboard_widgets_name_the_application_literally(synthesized):
    monitoring = synthesized("prod").stacks["monitoring"]
    (dashboard,) = [r for r in monitoring["Resources"].values() if r["Type"] == "AWS::CloudWatch::Dashboard"]
    body = json.dumps(dashboard["Properties"]["DashboardBody"])
    for metric in ("runningTime", "restartingTime", "failingTime", "cancellingTime", "KPUs",
                   "numberOfFailedCheckpoints", "records_lag_max", "DeadLetterRecords"):
        assert f'\\"{metric}\\"' in body, metric
    for deprecated in ("uptime", "downtime"):  # Flink 2.2 (every environment's runtime)
        assert f'\\"{deprecated}\\"' not in body
    assert '\\"Application\\",\\"telemetry-prod-telemetry-sink\\"' in body
    # Literal dimensions only: the monitoring stack must not depend on the sink stack.
    assert "ImportValue" not in json.dumps(monitoring)


def fake_maven(directory: Path, script: str) -> None:
    mvn = directory / "mvn"
    mvn.write_text("#!/bin/sh\n" + script)
    mvn.chmod(mvn.stat().st_mode | stat.S_IXUSR)


def test_local_bundling_runs_maven_and_copies_the_shaded_jar(tmp_path, monkeypatch):
    project, bin_dir, output = tmp_path / "flink", tmp_path / "bin", tmp_path / "out"
    for d in (project, bin_dir, output):
        d.mkdir()
    (project / "pom.xml").write_text("<project/>")
    # Records its arguments and builds a "jar" where the shade plugin would.
    fake_maven(bin_dir, f'echo "$@" > {tmp_path}/args\nmkdir -p {project}/target\necho jar > {project}/target/{JAR_NAME}\n')
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    assert MavenPackage(project, JAR_NAME).try_bundle(str(output)) is True
    assert [p.name for p in output.iterdir()] == [JAR_NAME]
    assert (tmp_path / "args").read_text().split() == ["-q", "-f", str(project / "pom.xml"), "package", "-DskipTests"]


def test_local_bundling_fails_loudly_when_maven_fails(tmp_path, monkeypatch):
    project, bin_dir = tmp_path / "flink", tmp_path / "bin"
    project.mkdir()
    bin_dir.mkdir()
    fake_maven(bin_dir, 'echo "[ERROR] COMPILATION ERROR: TelemetrySinkJob.java" >&2\nexit 1\n')
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(RuntimeError, match="failed \\(1\\):\n.*COMPILATION ERROR"):
        MavenPackage(project, JAR_NAME).try_bundle(str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    with pytest.raises(RuntimeError, match="needs Maven \\(mvn\\) on PATH"):
        MavenPackage(project, JAR_NAME).try_bundle(str(tmp_path))
