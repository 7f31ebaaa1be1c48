"""devtools/local_kafka.py: the broker the tests, the benchmark and the demo run on."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from devtools import local_kafka

pytestmark = pytest.mark.integration
SCRIPT = Path(local_kafka.__file__)


def local_kafka_cli(*args, timeout=120):
    return subprocess.run(
        [sys.executable, str(SCRIPT), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_start_is_idempotent_and_status_reports_the_address(kafka_broker):
    state_dir = Path(kafka_broker.state_file).parent
    again = local_kafka_cli("--state-dir", state_dir, "start")
    assert again.returncode == 0 and again.stdout.strip() == kafka_broker.bootstrap_servers
    status = local_kafka_cli("--state-dir", state_dir, "status")
    assert status.returncode == 0 and status.stdout.startswith(kafka_broker.bootstrap_servers)
    assert local_kafka.broker_is_ready(kafka_broker.port)


def test_create_topic_with_kafkas_own_topic_command(kafka_broker):
    state_dir = Path(kafka_broker.state_file).parent
    created = local_kafka_cli(
        "--state-dir", state_dir, "create-topic", "made-by-cli", "--partitions", 3
    )
    assert created.returncode == 0, created.stderr
    from confluent_kafka.admin import AdminClient

    topics = (
        AdminClient({"bootstrap.servers": kafka_broker.bootstrap_servers})
        .list_topics(timeout=10)
        .topics
    )
    assert len(topics["made-by-cli"].partitions) == 3


def test_stop_kills_the_broker_and_removes_its_data_and_a_second_stop_is_a_no_op(tmp_path):
    broker = local_kafka.start_broker(state_dir=tmp_path)
    assert Path(broker.data_dir).is_dir() and broker.port != 0
    stopped = local_kafka_cli("--state-dir", tmp_path, "stop")
    assert stopped.returncode == 0 and stopped.stdout.strip() == "stopped"
    assert not Path(broker.data_dir).exists()
    assert (
        not os.path.exists(f"/proc/{broker.pid}/cmdline")
        or b"kafka.Kafka" not in Path(f"/proc/{broker.pid}/cmdline").read_bytes()
    )
    assert not local_kafka.broker_is_ready(broker.port, timeout=0.5)
    again = local_kafka_cli("--state-dir", tmp_path, "stop")
    assert again.returncode == 0 and again.stdout.strip() == "not running"
    status = local_kafka_cli("--state-dir", tmp_path, "status")
    assert status.returncode == 1


def test_bad_usage_is_one_line_and_exit_2():
    result = local_kafka_cli("--state-dir", "/nonexistent/state", "create-topic", "t")
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "local_kafka: no broker running: run `local_kafka.py start` first"
    )
