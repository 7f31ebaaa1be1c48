"""`make demo`'s whole path, briefly: MQTT devices and a Kafka producer at once, the IoT rule's
stand-in, Kafka, the shipped Flink jar, Parquet read back with DuckDB through the synthesized Glue
table (devtools/demo.py). Then the lake is tampered with, to show the query catches what it must:
a file committed twice (duplicates), a file gone (lost), a column the table lacks."""

from __future__ import annotations

import copy
import shutil

import pytest

from devtools import demo

pytestmark = pytest.mark.integration

# Short and small: about 6 s of sending; checkpoints every second with no pause between them,
# where dev's application checkpoints every 60 s with a 5 s pause (the full demo keeps those).
SETTINGS = demo.Settings(duration_s=6, devices=8, device_rate=5, connect_rate=50, kafka_rate=150, kafka_devices=20,
                         checkpoint_interval_ms=1000, checkpoint_min_pause_ms=0)  # fmt: skip


def test_every_message_of_both_paths_is_stored_once_and_every_leg_is_timed(synthesized, tmp_path):
    dev = synthesized("dev")
    gateway, sink = dev.stacks["device_gateway"], dev.stacks["telemetry_sink"]
    result = demo.run(SETTINGS, tmp_path, gateway, sink, say=lambda _: None)

    assert result["stored"] == result["sent"] > 0
    assert (result["lost"], result["duplicates"]) == (0, 0)
    assert result["paths"]["mqtt"]["stored"] == result["paths"]["mqtt"]["sent"] > 0
    assert result["paths"]["kafka"]["stored"] == result["paths"]["kafka"]["sent"] > 0
    assert result["per_device"]["mqtt"]["devices"] == SETTINGS.devices
    assert sum(m["mqtt"] + m["kafka"] for m in result["per_minute"]) == result["sent"]
    for leg, _ in demo.LEGS:
        for path in ("mqtt", "kafka"):
            figures = result["latency_ms_by_path"][path][leg]
            assert figures is not None and figures["p50"] <= figures["p99"] <= figures["max"], (path, leg)
        # Every stamp is later than the one before, on one clock (Kafka's and Flink's in whole ms).
        assert result["latency_ms"][leg]["p50"] >= -1, leg
    # A row is committed at the checkpoint after it was read: within an interval and the checkpoint's time.
    assert result["latency_ms"]["sink_read_to_parquet_commit"]["max"] < 10_000

    table = demo.glue_table(sink, tmp_path / "lake")
    root = tmp_path / "lake" / demo.BUCKET / "telemetry"
    files = demo.committed_files(root)
    sent = {p: result["paths"][p]["sent"] for p in ("mqtt", "kafka")}

    # The sink committing one file twice (a replayed commit) is counted as duplicates.
    twice = files[0].with_name("part-again-" + files[0].name)
    shutil.copy2(files[0], twice)
    again = demo.query_lake(table, result["run_id"], sent)
    assert again["duplicates"] > 0 and again["lost"] == 0
    twice.unlink()

    # A file lost is counted as lost messages.
    gone = files[-1].rename(files[-1].with_name(".gone-" + files[-1].name))
    assert demo.query_lake(table, result["run_id"], sent)["lost"] > 0
    gone.rename(files[-1])

    # A column the sink writes and the table lacks stops the query.
    narrower = copy.deepcopy(sink)
    (glue,) = [r for r in narrower["Resources"].values() if r["Type"] == "AWS::Glue::Table"]
    glue["Properties"]["TableInput"]["StorageDescriptor"]["Columns"].pop()
    with pytest.raises(demo.SchemaMismatch, match="the table lacks it"):
        demo.query_lake(demo.glue_table(narrower, tmp_path / "lake"), result["run_id"], sent)
