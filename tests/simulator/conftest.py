"""A real single-node Kafka for the simulator's integration tests.

The broker gets a state folder of its own (and so its own port and data), so it never touches
the broker a developer started with `make demo` or `devtools/local_kafka.py start`.
"""

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _wait_for_leaders(bootstrap_servers: str, topic: str, partitions: int) -> None:
    """Until every partition of a new topic answers an offsets request."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap_servers, "group.id": "topic-check"})
    try:
        for partition in range(partitions):
            for _ in range(100):
                try:
                    consumer.get_watermark_offsets(
                        TopicPartition(topic, partition), timeout=10, cached=False
                    )
                    break
                except KafkaException:
                    time.sleep(0.1)
            else:
                raise AssertionError(f"partition {partition} of {topic} has no leader")
    finally:
        consumer.close()


@pytest.fixture(scope="session")
def settled_broker(kafka_broker, tmp_path_factory):
    """The session's broker after ten seconds of the simulator's own traffic, so latency tests
    measure a broker that has settled (compiled code, sized heap, open segments) as a
    long-running MSK broker has, not its first seconds."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": kafka_broker.bootstrap_servers})
    admin.create_topics([NewTopic("simulator-warmup", num_partitions=6, replication_factor=1)])[
        "simulator-warmup"
    ].result(timeout=30)
    _wait_for_leaders(kafka_broker.bootstrap_servers, "simulator-warmup", 6)
    report = tmp_path_factory.mktemp("warmup") / "r.json"
    command = [
        sys.executable,
        "-m",
        "simulator",
        "run",
        "--bootstrap-servers",
        kafka_broker.bootstrap_servers,
        "--topic",
        "simulator-warmup",
        "--rate",
        "5000",
        "--duration",
        "10",
        "--warmup",
        "0",
        "--processes",
        "1",
        "--slo-min-rate",
        "0",
        "--report",
        str(report),
    ]
    subprocess.run(
        command,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        timeout=120,
        check=False,
    )
    return kafka_broker


@pytest.fixture
def new_topic(kafka_broker):
    """Creates a fresh topic (6 partitions, topic configs if given) and returns its name."""
    from confluent_kafka.admin import AdminClient, NewTopic

    def create(partitions: int = 6, config: dict[str, str] | None = None) -> str:
        name = f"telemetry-{uuid.uuid4().hex[:8]}"
        admin = AdminClient({"bootstrap.servers": kafka_broker.bootstrap_servers})
        futures = admin.create_topics(
            [NewTopic(name, num_partitions=partitions, replication_factor=1, config=config or {})]
        )
        futures[name].result(timeout=30)
        _wait_for_leaders(kafka_broker.bootstrap_servers, name, partitions)
        return name

    return create
