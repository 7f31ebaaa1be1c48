"""A real single-node Kafka broker for every test that needs one (simulator, topics, S3 sink).

The broker gets a state folder of its own (and so its own port and data), so it never touches
the broker a developer started with `make demo` or `scripts/local_kafka.py start`. One broker
serves the whole session.
"""

import pytest

from scripts import local_kafka


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory):
    state_dir = tmp_path_factory.mktemp("local-kafka")
    try:
        broker = local_kafka.start_broker(state_dir=state_dir)
    except local_kafka.LocalKafkaError as error:
        pytest.fail(f"could not start the local Kafka broker: {error}")
    yield broker
    local_kafka.stop_broker(state_dir)
