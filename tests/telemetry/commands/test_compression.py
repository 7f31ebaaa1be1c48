"""`telemetry compression` as typed: a sample of payloads produced by the real client (librdkafka,
its codec, linger and batch size) to librdkafka's own in-process mock cluster, and the ratio read
from the bytes the client sent. The figures are the client's, not ours: the tests compare samples
whose content compresses differently, and settings that batch differently."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from devtools import readings_sample
from telemetry import cli
from telemetry.commands.compression import measure, read_sample

TELEMETRY = Path(sys.executable).parent / "telemetry"


def readings(path: Path, count: int = 3_000, *, padding: int = 0) -> Path:
    """The shipped ratio's sample (devtools/readings_sample.py), written to `path`."""
    path.write_text("\n".join(readings_sample.readings(count, padding=padding)) + "\n")
    return path


def ratio(sample: Path, *, rate: float = 24_600, producers: int = 1, partitions: int = 48) -> float:
    return measure(read_sample(sample, "device_id"), rate=rate, producers=producers, partitions=partitions,
                   seconds=1.0).ratio  # fmt: skip


def test_padding_compresses_far_better_than_readings(tmp_path):
    """The issue's point: the simulator's padding (238 of 512 bytes) is what made 10x."""
    real = ratio(readings(tmp_path / "real.jsonl"))
    padded = ratio(readings(tmp_path / "padded.jsonl", padding=238))
    assert 1.2 < real < 2.5 < padded  # measured here: about 2.0 and 3.4


def test_a_producer_per_device_batches_little_and_stores_more_than_its_payloads(tmp_path):
    """A batch of one ~200-byte reading costs its batch and record headers: below 1x."""
    sample = readings(tmp_path / "real.jsonl")
    assert ratio(sample, producers=1_000, rate=24_600) < 1 < ratio(sample, producers=1, rate=24_600)


def test_the_command_prints_the_ratio_the_sample_and_the_cdk_json_line(tmp_path):
    sample = readings(tmp_path / "real.jsonl", count=1_000)
    done = subprocess.run([str(TELEMETRY), "compression", "--env", "dev", "--sample", str(sample), "--seconds", "1"],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path, check=False)  # fmt: skip
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("sample: 1,000 payloads,")
    assert "lz4, linger 1 ms" in lines[1] and "over 12 partitions" in lines[1]  # dev's topic
    assert lines[2].startswith("compression ratio: ") and "record batches of" in lines[2]
    assert lines[3].startswith('in cdk.json, environments.dev.workload: "compression_ratio": ')


def test_json_output_has_every_figure(tmp_path, capsys):
    sample = readings(tmp_path / "real.jsonl", count=200)
    assert cli.main(["compression", "--env", "dev", "--sample", str(sample), "--seconds", "0.5", "--format", "json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert found["sample_lines"] == 200 and found["messages"] > 0 and found["batches"] > 0
    assert found["ratio"] == pytest.approx(found["payload_bytes"] / found["batch_bytes_written"])


@pytest.mark.parametrize(("content", "message"), [
    (None, "--sample: {path} does not exist"),
    ("\n\n", "--sample: {path} holds no payloads; give one JSON payload per line"),
    ('{"device_id": "a"}\nnot json\n', "--sample: line 2 of {path} is not JSON; give one JSON payload per line"),
])  # fmt: skip
def test_a_bad_sample_is_one_line_and_exit_2(tmp_path, capsys, content, message):
    path = tmp_path / "sample.jsonl"
    if content is not None:
        path.write_text(content)
    assert cli.main(["compression", "--env", "dev", "--sample", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message.format(path=path) in err
