"""`make demo`: the platform's data path on this machine, with the parts that ship, every message
counted and every leg of its journey timed.

  simulator devices --MQTT/TLS, client certificates--> mosquitto (the device policy)
      --> the IoT rule's Kafka action (devtools/iot_rule_bridge.py, the synthesized rule) --+
  simulator Kafka producers ------------------------------------------------------------+--> Kafka
      --> the Flink sink (flink/target/telemetry-sink.jar, the synthesized application's properties)
      --> Parquet under the S3 path layout, in a local folder --> DuckDB, through the Glue table's
          columns and partition layout (the synthesized TelemetrySink template)

What stands in for what, and where each behaviour comes from:
- AWS IoT Core: mosquitto enforcing the device policy (devtools/local_mosquitto.py) and the rule's
  Kafka action (devtools/iot_rule_bridge.py); each cites its sources.
- Amazon MSK: one local KRaft broker (devtools/local_kafka.py), PLAINTEXT: the demo runs no IAM or
  SCRAM authentication (tests/flink_sink/test_sink_as_sink_role.py and tests/test_msk_authorization.py
  run those). The topic is created with `message.timestamp.type=LogAppendTime` (Kafka topic
  configuration reference), so each record's timestamp is the broker's append time: the stamp the
  first leg ends on. The platform's topics keep the default CreateTime (docs/lake.md, "Device
  clocks"), where that timestamp is the writing client's clock instead.
- Managed Flink: the jar's own entry point in a local MiniCluster with the application's
  parallelism and checkpoint configuration (ManagedFlinkStandIn, flink/src/test/...), checkpoints
  into a local folder.
- S3: a local folder, `<lake>/<bucket>/<key>`, the application's s3:// paths mapped into it.
  FileSink keeps a part it has not committed as a hidden in-progress file there and renames it on
  commit (Flink's LocalRecoverableWriter); on S3 the part is a multipart upload, not visible until
  completed (S3 User Guide, "Uploading and copying objects using multipart upload"). The query
  reads committed files only, as Athena sees only completed objects.
- Athena: DuckDB over the committed Parquet files, declared with the Glue table's columns and
  partition keys; a column the files have and the table lacks, or the other way round, or a type
  that differs, stops the demo (SchemaMismatch), as does a file outside the table's partition
  layout.

The stamps each leg is measured between, all on this machine's one clock:
- `sent_ns`: the simulator's send time, in the message (ns);
- `ingest_time`: the Kafka record's timestamp, here the broker's append time (ms);
- `read_time`: when the sink read the record (the Flink task's clock, ms);
- the commit: the moment the committed Parquet file appeared, its ctime (the rename on commit
  changes it; ns). A row is committed at the first successful checkpoint after the sink read it,
  so in a run without failures this leg stays within the checkpoint interval (plus the
  checkpoint's own time), which the report says; a failed checkpoint moves it to the next.
Kafka's and Flink's stamps are whole milliseconds (truncated), so the first two legs read up to
1 ms off.

Exit codes: 0 none lost or duplicated (in a run without failures); 1 a message lost or duplicated;
2 a broken run (a part that did not start, a schema mismatch, a timeout).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ENV = "dev"
BUCKET = "telemetry-dev-local"  # the bucket's name in the lake folder (the template's is a Ref)
MQTT_PRODUCER = "demo-mqtt"
KAFKA_PRODUCER = "demo-kafka"
LEGS = (
    ("device_publish_to_broker_append", "publish -> broker append"),
    ("broker_append_to_sink_read", "broker append -> sink read"),
    ("sink_read_to_parquet_commit", "sink read -> Parquet commit"),
    ("end_to_end", "end to end"),
)
# Athena's type names (the Glue table's) as DuckDB reads the sink's Parquet types: a TIMESTAMP
# with isAdjustedToUTC (TelemetryParquet) is DuckDB's TIMESTAMP WITH TIME ZONE.
DUCKDB_TYPES = {
    "string": "VARCHAR",
    "bigint": "BIGINT",
    "int": "INTEGER",
    "double": "DOUBLE",
    "timestamp": "TIMESTAMP WITH TIME ZONE",
}


class DemoError(Exception):
    """A broken run: the demo could not measure what it came to measure."""


class SchemaMismatch(DemoError):
    pass


@dataclasses.dataclass(frozen=True)
class Settings:
    duration_s: float = 100.0
    devices: int = 100  # MQTT devices, one connection each
    device_rate: float = 2.0  # messages a second per device
    connect_rate: float = 20.0  # device CONNECTs a second
    kafka_rate: float = 800.0  # messages a second from the simulator's Kafka producer
    kafka_devices: int = 200
    partitions: int = 3
    checkpoint_interval_ms: int | None = None  # None: the application's CheckpointInterval
    checkpoint_min_pause_ms: int | None = None  # None: the application's MinPauseBetweenCheckpoints


# --- the synthesized templates ----------------------------------------------------------------


def _only(template: dict, kind: str) -> dict:
    (found,) = [r for r in template["Resources"].values() if r["Type"] == kind]
    return found["Properties"]


def synthesize_templates(env: str = ENV) -> tuple[dict, dict]:
    """The DeviceGateway and TelemetrySink templates of `env`, synthesized offline through the real
    app, as the tests do it (tests/conftest.py, synthesize: asset bundling skipped, the compliance
    gate kept)."""
    from tests.conftest import synthesize

    synthesis = synthesize(env, Path(tempfile.mkdtemp(prefix="demo-cdk-")))
    return synthesis.stacks["device_gateway"], synthesis.stacks["telemetry_sink"]


def _resolve(value, template: dict, bootstrap: str):
    """A property value with the template's references resolved locally: the bucket's Ref is
    BUCKET, the brokers' parameter the local broker."""
    if isinstance(value, str):
        return value
    if "Ref" in value:
        kind = template["Resources"].get(value["Ref"], {}).get("Type") or template["Parameters"][value["Ref"]]["Type"]
        if kind == "AWS::S3::Bucket":
            return BUCKET
        if "SSM::Parameter" in kind:
            return bootstrap
        raise DemoError(f"no local value for a Ref to {kind}")
    if "Fn::Join" in value:
        separator, parts = value["Fn::Join"]
        return separator.join(_resolve(p, template, bootstrap) for p in parts)
    if "Fn::Sub" in value:
        text, variables = value["Fn::Sub"]
        for name, variable in variables.items():
            text = text.replace("${" + name + "}", _resolve(variable, template, bootstrap))
        return re.sub(r"\$\{!(\w+)\}", r"${\1}", text)  # `${!x}` is a literal `${x}`
    raise DemoError(f"no local value for {value}")


def _lake_uri(s3_url: str, lake: Path) -> str:
    if not s3_url.startswith("s3://"):
        raise DemoError(f"expected an s3:// path, got {s3_url}")
    return (lake.resolve() / s3_url.removeprefix("s3://")).as_uri()


def _uri_path(uri: str) -> Path:
    from urllib.parse import unquote, urlparse

    return Path(unquote(urlparse(uri).path))


@dataclasses.dataclass(frozen=True)
class Application:
    properties: list[dict]  # the job's property groups, local values
    parallelism: int
    checkpoint_interval_ms: int
    min_pause_ms: int
    topic: str
    group_id: str
    output_path: str  # file:// URI


def application(sink_template: dict, bootstrap: str, lake: Path, checkpoint_interval_ms: int | None = None,
                checkpoint_min_pause_ms: int | None = None) -> Application:
    """The Flink application's property groups and Flink configuration, as the stack gives them,
    pointed at the local broker and the lake folder."""
    app = _only(sink_template, "AWS::KinesisAnalyticsV2::Application")["ApplicationConfiguration"]
    flink = app["FlinkApplicationConfiguration"]
    checkpoints = flink["CheckpointConfiguration"]
    if checkpoints.get("ConfigurationType") != "CUSTOM" or not checkpoints.get("CheckpointingEnabled"):
        raise DemoError("the demo reads a CUSTOM checkpoint configuration with checkpointing enabled")
    interval = checkpoint_interval_ms or int(checkpoints["CheckpointInterval"])
    groups = []
    for group in app["EnvironmentProperties"]["PropertyGroups"]:
        values = {k: _resolve(v, sink_template, bootstrap) for k, v in group["PropertyMap"].items()}
        if group["PropertyGroupId"] == "KafkaSource":
            values["security.protocol"] = "PLAINTEXT"  # the local broker has no IAM (see above)
        if group["PropertyGroupId"] == "Sink":
            values = {k: _lake_uri(v, lake) if k.endswith(".path") else v for k, v in values.items()}
            # Locally the job sets the interval itself (TelemetrySinkJob; on Managed Flink the service does).
            values["checkpoint.interval.ms"] = str(interval)
        groups.append({"PropertyGroupId": group["PropertyGroupId"], "PropertyMap": values})
    by_id = {g["PropertyGroupId"]: g["PropertyMap"] for g in groups}
    return Application(
        properties=groups,
        parallelism=int(flink["ParallelismConfiguration"]["Parallelism"]),
        checkpoint_interval_ms=interval,
        min_pause_ms=int(checkpoints.get("MinPauseBetweenCheckpoints", 0)
                         if checkpoint_min_pause_ms is None else checkpoint_min_pause_ms),
        topic=by_id["KafkaSource"]["topic"],
        group_id=by_id["KafkaSource"]["group.id"],
        output_path=by_id["Sink"]["output.path"],
    )


@dataclasses.dataclass(frozen=True)
class Table:
    columns: list[tuple[str, str]]  # (name, Athena type)
    partition_keys: list[tuple[str, str]]
    location: str  # file:// URI of the table's Location
    layout: re.Pattern  # a committed file's path below the location


def glue_table(sink_template: dict, lake: Path) -> Table:
    """The Glue table's columns, partition keys, location and projected partition layout."""
    table = _only(sink_template, "AWS::Glue::Table")["TableInput"]
    storage = table["StorageDescriptor"]
    location = _resolve(storage["Location"], sink_template, "")
    template = _resolve(table["Parameters"]["storage.location.template"], sink_template, "")
    if not template.startswith(location):
        raise DemoError(f"the location template {template} is not under the table's location {location}")
    parameters = table["Parameters"]
    pattern = re.escape(template.removeprefix(location))
    for key, _ in ((k["Name"], k["Type"]) for k in table["PartitionKeys"]):
        kind = parameters[f"projection.{key}.type"]
        if kind == "date" and parameters[f"projection.{key}.format"] == "yyyy-MM-dd":
            value = r"\d{4}-\d{2}-\d{2}"
        elif kind == "integer":
            value = r"\d{%s}" % parameters.get(f"projection.{key}.digits", "1")
        else:
            raise DemoError(f"the demo reads date (yyyy-MM-dd) and integer projections, not {kind} for {key}")
        pattern = pattern.replace(re.escape("${" + key + "}"), f"(?P<{key}>{value})")
    return Table(
        columns=[(c["Name"], c["Type"]) for c in storage["Columns"]],
        partition_keys=[(k["Name"], k["Type"]) for k in table["PartitionKeys"]],
        location=_lake_uri(location, lake),
        layout=re.compile(pattern + r"[^/]+$"),
    )


# --- the lake ---------------------------------------------------------------------------------


def committed_files(root: Path) -> list[Path]:
    """Committed Parquet files: FileSink's in-progress parts are hidden files (a leading dot,
    named *.inprogress.<uuid>) until the commit renames them."""
    return sorted(p for p in root.rglob("*.parquet") if not p.name.startswith((".", "_")))


def _sql_list(paths: list[Path]) -> str:
    return "[" + ", ".join("'" + str(p).replace("'", "''") + "'" for p in paths) + "]"


def check_layout(table: Table, files: list[Path]) -> None:
    """Every committed file sits where the table's projection looks: location/dt=.../hour=.../."""
    root = _uri_path(table.location)
    for file in files:
        relative = file.relative_to(root).as_posix()
        match = table.layout.fullmatch(relative)
        if match is None:
            raise SchemaMismatch(f"{relative} is outside the table's partition layout ({table.layout.pattern})")
        hour = match.groupdict().get("hour")
        if hour is not None and not 0 <= int(hour) <= 23:
            raise SchemaMismatch(f"{relative}: hour {hour} is outside the projection's range 0-23")


def check_schema(con, table: Table, files: list[Path]) -> None:
    """The Parquet files' columns and types against the Glue table's, both ways."""
    described = con.execute(f"DESCRIBE SELECT * FROM read_parquet({_sql_list(files)}, union_by_name = true, hive_partitioning = false)").fetchall()
    written = {name: kind for name, kind, *_ in described}
    declared = {name: DUCKDB_TYPES.get(kind, kind) for name, kind in table.columns}
    problems = [f"the sink writes {n} ({k}), the table lacks it" for n, k in written.items() if n not in declared]
    problems += [f"the table declares {n} ({k}), the files lack it (Athena reads NULL)" for n, k in declared.items()
                 if n not in written]  # fmt: skip
    problems += [f"{n}: the files hold {written[n]}, the table declares {declared[n]}"
                 for n in declared if n in written and written[n] != declared[n]]  # fmt: skip
    if problems:
        raise SchemaMismatch("the Parquet files and the Glue table disagree: " + "; ".join(problems))


def query_lake(table: Table, run_id: str, sent: dict[str, int]) -> dict:
    """What an operator asks Athena first, over the committed files through the table's columns:
    messages per device and per minute, exactly once or not, and the legs' latencies."""
    import duckdb

    root = _uri_path(table.location)
    files = committed_files(root)
    if not files:
        raise DemoError(f"the sink committed no Parquet file under {root}")
    check_layout(table, files)
    con = duckdb.connect()
    check_schema(con, table, files)
    columns = ", ".join(name for name, _ in table.columns)
    keys = ", ".join(f"'{name}': 'VARCHAR'" for name, kind in table.partition_keys if kind == "string")
    con.execute(
        f"CREATE TABLE telemetry AS SELECT {columns}, {', '.join(k for k, _ in table.partition_keys)}, filename "
        f"FROM read_parquet({_sql_list(files)}, hive_partitioning = true, hive_types = {{{keys}}}, filename = true) "
        f"WHERE run_id = $run_id", {"run_id": run_id})  # fmt: skip
    con.execute("CREATE TABLE commits (filename VARCHAR, commit_ns BIGINT)")
    con.executemany("INSERT INTO commits VALUES (?, ?)", [(str(f), f.stat().st_ctime_ns) for f in files])
    path = f"CASE WHEN starts_with(producer_id, '{MQTT_PRODUCER}/') THEN 'mqtt' ELSE 'kafka' END"
    con.execute(f"""CREATE TABLE legs AS SELECT {path} AS path, sent_ns,
        epoch_ms(ingest_time) - sent_ns / 1e6 AS device_publish_to_broker_append,
        epoch_ms(read_time) - epoch_ms(ingest_time) AS broker_append_to_sink_read,
        commit_ns / 1e6 - epoch_ms(read_time) AS sink_read_to_parquet_commit,
        commit_ns / 1e6 - sent_ns / 1e6 AS end_to_end
        FROM telemetry JOIN commits USING (filename)""")

    stored = dict(con.execute("SELECT path, count(*) FROM legs GROUP BY path").fetchall())
    distinct = dict(con.execute(
        f"SELECT path, count(*) FROM (SELECT DISTINCT {path} AS path, producer_id, device_id, seq FROM telemetry) "
        "GROUP BY path").fetchall())  # fmt: skip
    per_device = {
        p: {"devices": devices, "min": low, "median": middle, "max": high}
        for p, devices, low, middle, high in con.execute(
            f"SELECT path, count(*), min(n), median(n), max(n) FROM (SELECT {path} AS path, device_id, count(*) AS n "
            "FROM telemetry GROUP BY ALL) GROUP BY path").fetchall()
    }  # fmt: skip
    per_minute = [  # minutes of event time (UTC), as epoch arithmetic: no time zone database needed
        {"minute": datetime.datetime.fromtimestamp(minute * 60, datetime.UTC).isoformat(), "mqtt": mqtt, "kafka": kafka}
        for minute, mqtt, kafka in con.execute(
            f"SELECT epoch_ms(event_time) // 60000 AS minute, count(*) FILTER ({path} = 'mqtt'), "
            f"count(*) FILTER ({path} = 'kafka') FROM telemetry GROUP BY minute ORDER BY minute").fetchall()
    ]  # fmt: skip

    def percentiles(where: str) -> dict:
        result = {}
        for leg, _ in LEGS:
            p50, p99, high = con.execute(
                f"SELECT quantile_cont({leg}, 0.5), quantile_cont({leg}, 0.99), max({leg}) FROM legs {where}").fetchone()
            result[leg] = None if p50 is None else {"p50": round(p50, 2), "p99": round(p99, 2), "max": round(high, 2)}
        return result

    first_ns = con.execute("SELECT min(sent_ns) FROM legs").fetchone()[0]
    series = con.execute(
        f"SELECT floor((sent_ns - {first_ns}) / 5e9) * 5 AS t, count(*) FILTER (path = 'mqtt'), "
        "count(*) FILTER (path = 'kafka'), "
        + ", ".join(f"quantile_cont({leg}, 0.5), quantile_cont({leg}, 0.99)" for leg, _ in LEGS)
        + " FROM legs GROUP BY t ORDER BY t").fetchall()  # fmt: skip
    total_sent = sum(sent.values())
    total_distinct = sum(distinct.values())
    return {
        "sent": total_sent,
        "stored": sum(stored.values()),
        "lost": total_sent - total_distinct,
        "duplicates": sum(stored.values()) - total_distinct,
        "paths": {p: {"sent": sent.get(p, 0), "stored": stored.get(p, 0), "lost": sent.get(p, 0) - distinct.get(p, 0),
                      "duplicates": stored.get(p, 0) - distinct.get(p, 0)} for p in ("mqtt", "kafka")},
        "latency_ms": percentiles(""),
        "latency_ms_by_path": {p: percentiles(f"WHERE path = '{p}'") for p in ("mqtt", "kafka")},
        "per_device": per_device,
        "per_minute": per_minute,
        "files": len(files),
        "series": series,
    }  # fmt: skip


def write_plot(series: list[tuple], path: Path, checkpoint_interval_ms: int) -> None:
    """The legs over the run: p50 (solid) and p99 (dashed) of each leg per 5 s of send time, and
    the rows stored per second of each path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (top, bottom) = plt.subplots(2, 1, figsize=(10, 7), dpi=100, sharex=True,
                                         gridspec_kw={"height_ratios": [3, 1]})  # fmt: skip
    xs = [row[0] + 2.5 for row in series]  # the middle of each 5 s
    for index, ((_, label), color) in enumerate(zip(LEGS, ("tab:blue", "tab:orange", "tab:green", "tab:red"),
                                                    strict=True)):  # fmt: skip
        # The commit leg is drawn wider: end to end, a few ms more, runs on top of it.
        top.plot(xs, [max(row[3 + 2 * index], 0.1) for row in series], color=color, marker="o", markersize=3,
                 linewidth=4 if index == 2 else 1.6, label=f"{label} p50")  # fmt: skip
        top.plot(xs, [max(row[4 + 2 * index], 0.1) for row in series], color=color, linestyle="--", linewidth=0.9,
                 label=f"{label} p99")  # fmt: skip
    top.axhline(checkpoint_interval_ms, color="tab:gray", linestyle=":", linewidth=1,
                label=f"checkpoint interval {checkpoint_interval_ms / 1000:g} s")  # fmt: skip
    top.set_yscale("log")
    top.set_ylabel("latency (ms)")
    top.legend(fontsize=7, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.04))
    top.set_title("make demo: each leg of a message's journey, by the time it was sent")
    mqtt = [row[1] / 5 for row in series]
    bottom.bar([row[0] for row in series], mqtt, width=4.6, align="edge", color="tab:purple", label="MQTT devices")
    bottom.bar([row[0] for row in series], [row[2] / 5 for row in series], width=4.6, align="edge", bottom=mqtt,
               color="tab:brown", label="Kafka producer")  # fmt: skip
    bottom.set_xlabel("seconds since the first message was sent")
    bottom.set_ylabel("rows stored / s")
    bottom.legend(fontsize=7, loc="lower right")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path)
    plt.close(figure)


# --- the run ----------------------------------------------------------------------------------


def _wait(condition, timeout: float, what: str, check=lambda: None, interval: float = 0.2) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        check()
        if time.monotonic() > deadline:
            raise DemoError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


class Children:
    """The processes the demo starts, each in a session of its own (Ctrl-C reaches only the demo,
    which stops them in order); stop() ends each by its own process group."""

    def __init__(self):
        self.processes: list[tuple[str, subprocess.Popen]] = []

    def start(self, name: str, command: list[str], log: Path, **kwargs) -> subprocess.Popen:
        with open(log, "wb") as out:
            process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                       start_new_session=True, **kwargs)  # fmt: skip
        self.processes.append((name, process))
        return process

    def stop(self, process: subprocess.Popen, timeout: float = 15.0) -> None:
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout)

    def stop_all(self) -> None:
        for _, process in reversed(self.processes):
            self.stop(process)


def _simulator(transport_args: list[str], settings: Settings, rate: float, devices: int, run_id: str,
               producer: str, report: Path) -> list[str]:  # fmt: skip
    return [
        sys.executable, "-m", "simulator", "run", *transport_args,
        "--rate", f"{rate:g}", "--devices", str(devices), "--duration", f"{settings.duration_s:g}",
        "--warmup", "0", "--processes", "1", "--no-consume", "--run-id", run_id, "--producer-id", producer,
        # The demo judges exactly-once and times the legs itself; the simulator's SLO is not its verdict.
        "--slo-min-rate", "0", "--slo-p99-ms", "600000", "--slo-max-ms", "600000",
        "--drain-timeout", "30", "--report", str(report),
    ]  # fmt: skip


def _group_caught_up(bootstrap: str, topic: str, group: str, partitions: int) -> bool:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        committed = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
        for tp in committed:
            _, high = consumer.get_watermark_offsets(TopicPartition(topic, tp.partition), timeout=10)
            if high > 0 and tp.offset < high:
                return False
        return True
    finally:
        consumer.close()


def _committed_rows(root: Path) -> int:
    import duckdb

    files = committed_files(root)
    if not files:
        return 0
    return duckdb.connect().execute(f"SELECT count(*) FROM read_parquet({_sql_list(files)})").fetchone()[0]


def _log4j_config(work: Path) -> Path:
    """The sink tests' quiet logging, plus the source reader's INFO line that says the job reads."""
    config = work / "log4j2-demo.properties"
    config.write_text(
        (REPO / "flink/src/test/resources/log4j2-test.properties").read_text()
        + "logger.splits.name = org.apache.flink.connector.base.source.reader.SourceReaderBase\n"
        + "logger.splits.level = INFO\n"
    )
    return config


def run(settings: Settings, work: Path, gateway_template: dict, sink_template: dict, *, say=print) -> dict:
    """The whole path once; returns the report (demo.json's content, with the plot's series)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    from devtools import local_flink, local_kafka, local_mosquitto
    from devtools.iot_rule_bridge import IotRuleBridge, KafkaRule

    started = time.monotonic()
    work.mkdir(parents=True, exist_ok=True)
    lake = work / "lake"
    run_id = "demo-" + datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    rule = KafkaRule.from_template(gateway_template)
    children = Children()
    with contextlib.ExitStack() as cleanup:  # undone last to first: processes, bridge, mosquitto, Kafka
        say("starting Kafka (KRaft, one broker) ...")
        kafka_state = work / "kafka"
        cleanup.callback(local_kafka.stop_broker, kafka_state)
        broker = local_kafka.start_broker(state_dir=kafka_state)
        app = application(sink_template, broker.bootstrap_servers, lake, settings.checkpoint_interval_ms,
                          settings.checkpoint_min_pause_ms)
        table = glue_table(sink_template, lake)
        if app.topic != rule.kafka_topic:
            raise DemoError(f"the rule writes {rule.kafka_topic}, the sink reads {app.topic}")
        if app.output_path.rstrip("/") != table.location.rstrip("/"):
            raise DemoError(f"the sink writes {app.output_path}, the table reads {table.location}")
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        topic = NewTopic(app.topic, settings.partitions, 1, config={"message.timestamp.type": "LogAppendTime"})
        admin.create_topics([topic])[app.topic].result(30)
        del admin  # its connection would log the broker's going away at the end

        say(f"starting mosquitto (TLS, client certificates from a throwaway CA, {settings.devices} devices) ...")
        things = [f"meter-{i:04d}" for i in range(settings.devices)]
        pki = local_mosquitto.make_pki(work / "pki", things)
        mosquitto = local_mosquitto.start_mosquitto(work / "mosquitto", pki, environment=ENV, debug=False)
        cleanup.callback(mosquitto.stop)
        bridge = IotRuleBridge(mosquitto, broker.bootstrap_servers, rule, producer_settings={"log.connection.close": False})
        cleanup.callback(bridge.close)
        cleanup.callback(children.stop_all)

        say(f"starting the Flink sink (the jar, parallelism {app.parallelism}, checkpoints every "
            f"{app.checkpoint_interval_ms / 1000:g} s) ...")  # fmt: skip
        properties = work / "application-properties.json"
        properties.write_text(json.dumps(app.properties, indent=2) + "\n")
        flink_log = work / "flink.log"
        flink = children.start("flink", [
            "java", "-Xmx1g", "-XX:TieredStopAtLevel=1",
            "--add-opens=java.base/java.util=ALL-UNNAMED", "--add-opens=java.base/java.lang=ALL-UNNAMED",
            f"-Dlog4j2.configurationFile={_log4j_config(work)}", "-cp", local_flink.job_classpath(),
            "telemetry.sink.testing.ManagedFlinkStandIn", "--parallelism", str(app.parallelism),
            "--min-pause-ms", str(app.min_pause_ms), "--checkpoints", str(work / "checkpoints"),
            "--properties", str(properties)], flink_log)  # fmt: skip

        def flink_alive() -> None:
            if flink.poll() is not None:
                raise DemoError(f"the Flink sink exited ({flink.returncode}); see {flink_log}")

        _wait(lambda: "Adding split(s) to reader" in flink_log.read_text(errors="replace"), 120,
              "the Flink sink to read the topic", flink_alive)  # fmt: skip
        classes = re.search(r"job classes from (\S+)", flink_log.read_text()).group(1)
        if not classes.endswith("/" + local_flink.JAR.name):
            raise DemoError(f"the job's classes came from {classes}, not the jar")

        say(f"running {settings.devices} MQTT devices at {settings.device_rate:g} msg/s each and a Kafka producer at "
            f"{settings.kafka_rate:g} msg/s for {settings.duration_s:g} s ...")  # fmt: skip
        reports = {"mqtt": work / "simulator-mqtt.json", "kafka": work / "simulator-kafka.json"}
        environment = {**os.environ, "PYTHONPATH": str(REPO)}
        mqtt_args = ["--transport", "mqtt", "--mqtt-endpoint", mosquitto.endpoint, "--device-certificates",
                     str(pki.devices), "--environment", ENV, "--mqtt-ca", str(pki.ca),
                     "--connect-rate", f"{settings.connect_rate:g}"]  # fmt: skip
        kafka_args = ["--transport", "kafka", "--bootstrap-servers", broker.bootstrap_servers, "--topic", app.topic]
        simulators = {
            "mqtt": children.start("mqtt devices", _simulator(
                mqtt_args, settings, settings.devices * settings.device_rate, settings.devices, run_id,
                MQTT_PRODUCER, reports["mqtt"]), work / "simulator-mqtt.log", cwd=REPO, env=environment),
            "kafka": children.start("kafka producer", _simulator(
                kafka_args, settings, settings.kafka_rate, settings.kafka_devices, run_id, KAFKA_PRODUCER,
                reports["kafka"]), work / "simulator-kafka.log", cwd=REPO, env=environment),
        }  # fmt: skip
        for path, process in simulators.items():
            while process.poll() is None:
                flink_alive()
                time.sleep(0.5)
            if process.returncode not in (0, 1) or not reports[path].exists():
                raise DemoError(f"the {path} simulator failed ({process.returncode}); see {work}/simulator-{path}.log")
        sent = {}
        for path, report_path in reports.items():
            report = json.loads(report_path.read_text())
            if report["acked"] != report["sent"] or report["delivery_errors"]:
                raise DemoError(f"{path}: {report['sent']} sent, {report['acked']} acknowledged, "
                                f"{report['delivery_errors']} delivery errors")  # fmt: skip
            sent[path] = report["acked"]

        _wait(lambda: bridge.forwarded >= sent["mqtt"], 60, "the IoT rule stand-in to read every device message")
        with bridge.held():  # every message handed to Kafka has its answer
            pass
        if bridge.errors or bridge.error_actions or bridge.delivered != bridge.forwarded:
            raise DemoError(f"the IoT rule stand-in: {bridge.delivered} of {bridge.forwarded} delivered, "
                            f"errors {bridge.errors[:3]}, error actions {len(bridge.error_actions)}")  # fmt: skip

        total = sum(sent.values())
        say(f"{total:,} messages in Kafka; waiting for the sink to commit them (the next checkpoint) ...")
        root = _uri_path(table.location)
        _wait(lambda: _committed_rows(root) >= total
              and _group_caught_up(broker.bootstrap_servers, app.topic, app.group_id, settings.partitions),
              2 * (app.checkpoint_interval_ms + app.min_pause_ms) / 1000 + 60, "the sink to commit every message",
              flink_alive, interval=0.5)  # fmt: skip
        children.stop(flink)
        query_started = time.monotonic()
        result = query_lake(table, run_id, sent)
        result["query_s"] = round(time.monotonic() - query_started, 2)
    result.update({
        "run_id": run_id,
        "wall_s": round(time.monotonic() - started, 1),
        "checkpoint_interval_ms": app.checkpoint_interval_ms,
        "checkpoint_min_pause_ms": app.min_pause_ms,
        "settings": dataclasses.asdict(settings),
        "stamps": {
            "device_publish": "sent_ns: the simulator's intended send time (ns), in the message: its own lag is in the leg",
            "broker_append": "ingest_time: the Kafka record's timestamp; the demo's topic uses LogAppendTime (ms)",
            "sink_read": "read_time: when the sink read the record, the Flink task's clock (ms)",
            "parquet_commit": "the committed file's ctime: the commit's rename (ns), at the next successful "
                              "checkpoint after the read: in a run without failures at most the checkpoint interval "
                              "(or the minimum pause after the last checkpoint, when longer) plus the checkpoint's "
                              "own time; a failed or aborted checkpoint moves it to the next successful one",
        },
        "work": str(work),
    })  # fmt: skip
    return result


def summary(result: dict) -> str:
    paths = result["paths"]
    lines = [
        "",
        "make demo: devices -MQTT/TLS-> mosquitto -> IoT rule stand-in -> Kafka <- simulator producer; "
        "Kafka -> Flink sink -> Parquet -> DuckDB",
        f"  sent {result['sent']:,} (MQTT {paths['mqtt']['sent']:,} from "
        f"{result['per_device'].get('mqtt', {}).get('devices', 0)} devices, Kafka {paths['kafka']['sent']:,})   "
        f"stored {result['stored']:,}   lost {result['lost']}   duplicates {result['duplicates']}",
        f"  {'latency (ms)':<44}{'p50':>10}{'p99':>10}{'max':>10}",
    ]
    for leg, label in LEGS:
        figures = result["latency_ms"][leg]
        if leg == "sink_read_to_parquet_commit":
            label += f" (checkpoints {result['checkpoint_interval_ms'] / 1000:g} s)"
        lines.append(f"  {label:<44}" + "".join(f"{figures[k]:>10,.1f}" for k in ("p50", "p99", "max")))
    first = result["latency_ms_by_path"]
    lines.append(f"  publish -> append by path: MQTT p50 {first['mqtt'][LEGS[0][0]]['p50']:.1f} ms "
                 f"(TLS, mosquitto, the rule's action), Kafka p50 {first['kafka'][LEGS[0][0]]['p50']:.1f} ms")  # fmt: skip
    minutes = result["per_minute"]
    lines.append(f"  per minute: {', '.join(str(m['mqtt'] + m['kafka']) for m in minutes)} rows; "
                 f"{result['files']} Parquet files; wall {result['wall_s']:.0f} s")  # fmt: skip
    verdict = "none lost or duplicated (a run without failures)" if result["lost"] == 0 and \
        result["duplicates"] == 0 and result["stored"] == result["sent"] else "MESSAGES LOST OR DUPLICATED"  # fmt: skip
    lines.append(f"  {verdict}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    defaults = Settings()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], prog="python -m devtools.demo")
    parser.add_argument("--duration", type=float, default=defaults.duration_s, help="seconds of sending")
    parser.add_argument("--devices", type=int, default=defaults.devices)
    parser.add_argument("--device-rate", type=float, default=defaults.device_rate, help="msg/s per device")
    parser.add_argument("--kafka-rate", type=float, default=defaults.kafka_rate, help="msg/s of the Kafka producer")
    parser.add_argument("--checkpoint-interval-ms", type=int, default=None,
                        help="default: the application's CheckpointInterval in the synthesized template")
    parser.add_argument("--work", type=Path, default=REPO / "bench-results" / "demo", help="logs, lake, checkpoints")
    parser.add_argument("--report", type=Path, default=REPO / "bench-results" / "demo.json")
    parser.add_argument("--plot", type=Path, default=REPO / "bench-results" / "demo.png")
    args = parser.parse_args(argv)
    settings = dataclasses.replace(defaults, duration_s=args.duration, devices=args.devices,
                                   device_rate=args.device_rate, kafka_rate=args.kafka_rate,
                                   checkpoint_interval_ms=args.checkpoint_interval_ms)  # fmt: skip

    def interrupted(signum, _frame):
        raise KeyboardInterrupt(signal.Signals(signum).name)

    signal.signal(signal.SIGTERM, interrupted)
    try:
        import shutil

        shutil.rmtree(args.work, ignore_errors=True)  # the last demo's lake, logs and checkpoints
        print(f"synthesizing {ENV} (offline) for the rule, the application and the Glue table ...", flush=True)
        gateway, sink = synthesize_templates(ENV)
        result = run(settings, args.work, gateway, sink, say=lambda text: print(text, flush=True))
    except KeyboardInterrupt:
        print("make demo: interrupted; everything it started is stopped", file=sys.stderr)
        return 130
    except Exception as error:  # noqa: BLE001 - one line and exit 2, the logs in the work folder
        print(f"make demo: {type(error).__name__}: {error}", file=sys.stderr)
        return 2
    series = result.pop("series")
    write_plot(series, args.plot, result["checkpoint_interval_ms"])
    result["plot"] = str(args.plot)
    args.report.parent.mkdir(parents=True, exist_ok=True)
    args.report.write_text(json.dumps(result, indent=2) + "\n")
    print(summary(result))
    print(f"  report {args.report}, plot {args.plot}, lake and logs under {args.work}")
    return 0 if result["lost"] == 0 and result["duplicates"] == 0 and result["stored"] == result["sent"] else 1


if __name__ == "__main__":
    sys.exit(main())
