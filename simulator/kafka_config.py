"""librdkafka settings for the simulator's clients: SASL_SSL with MSK IAM on AWS; PLAINTEXT, or
SASL_PLAINTEXT with a PLAIN user, against a local broker."""

from __future__ import annotations

import os

from simulator.config import RunConfig

# The local policy-enforcing broker's password for --sasl-username; an environment variable so it
# never shows in a process list or a report.
SASL_PASSWORD_ENV = "SIMULATOR_SASL_PASSWORD"


def _msk_iam_token_callback(region: str):
    def oauth_cb(_oauth_config: str) -> tuple[str, float]:
        # Imported here so PLAINTEXT runs never load botocore.
        from aws_msk_iam_sasl_signer import MSKAuthTokenProvider

        token, expiry_ms = MSKAuthTokenProvider.generate_auth_token(region)
        return token, expiry_ms / 1000.0

    return oauth_cb


def connection_settings(
    bootstrap_servers: str,
    *,
    security_protocol: str,
    region: str | None,
    client_id: str,
    connect_timeout_s: float = 10.0,
    sasl_username: str | None = None,
) -> dict:
    """How any librdkafka client of this project reaches Kafka (also used by the telemetry command).
    SASL_PLAINTEXT is for local brokers only: user sasl_username, password from
    $SIMULATOR_SASL_PASSWORD."""
    settings = {
        "bootstrap.servers": bootstrap_servers,
        "client.id": client_id,
        "socket.nagle.disable": True,
        "socket.connection.setup.timeout.ms": int(connect_timeout_s * 1000),
        # Errors still reach stderr; retry chatter during broker start-up does not.
        "log_level": 3,
    }
    if security_protocol == "SASL_SSL":
        settings.update(
            {
                "security.protocol": "SASL_SSL",
                "sasl.mechanism": "OAUTHBEARER",
                "oauth_cb": _msk_iam_token_callback(region),
            }
        )
    elif security_protocol == "SASL_PLAINTEXT":
        settings.update(
            {
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "PLAIN",
                "sasl.username": sasl_username,
                "sasl.password": os.environ.get(SASL_PASSWORD_ENV, ""),
            }
        )
    return settings


def _connection(config: RunConfig, client_id: str) -> dict:
    return connection_settings(
        config.bootstrap_servers,
        security_protocol=config.security_protocol,
        region=config.region,
        client_id=client_id,
        connect_timeout_s=config.connect_timeout_s,
        sasl_username=config.sasl_username,
    )


def producer_settings(config: RunConfig, client_id: str, on_delivery) -> dict:
    settings = _connection(config, client_id)
    settings.update(
        {
            "acks": config.acks,
            "enable.idempotence": config.idempotence,
            "linger.ms": config.linger_ms,
            # As the Java client: at most 5 requests in flight per broker (librdkafka allows
            # 1,000,000 without idempotence). With linger.ms 0 the producer then batches what
            # queued while 5 requests were out, instead of one request per message: a
            # non-idempotent run at 5,000 msg/s took 3 s per ack on the local broker without it.
            "max.in.flight.requests.per.connection": 5,
            "batch.size": config.batch_bytes,
            "compression.type": config.compression,
            # The same key-to-partition mapping as Kafka's Java clients.
            "partitioner": "murmur2_random",
            # A run is bounded: a message undelivered for this long is reported as failed.
            "message.timeout.ms": int(max(30.0, config.drain_timeout_s) * 1000),
            "on_delivery": on_delivery,
            # Flat out (--rate 0) measures throughput, and a delivery report costs a Python call
            # and a copy of the message (confluent-kafka Producer.c dr_msg_cb, Message_new0):
            # 30-40% of the rate on one partition. There only failures are reported (the client
            # skips the callback for the rest); the producer counts acks from librdkafka's queue.
            "delivery.report.only.error": config.rate == 0,
        }
    )
    return settings


def consumer_settings(config: RunConfig, client_id: str) -> dict:
    settings = _connection(config, client_id)
    settings.update(
        {
            # Partitions are assigned explicitly; the group id is required but never joined.
            "group.id": f"simulator-{config.run_id}-{config.producer_id}",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": False,
            # Fetch as soon as data lands: the broker answers a fetch once it has
            # fetch.min.bytes (1) and waits at most fetch.wait.max.ms for it otherwise
            # (librdkafka CONFIGURATION.md). Should the local queue pass its thresholds for a
            # moment, the next fetch waits fetch.queue.backoff.ms, 1 s by default: a 1 s gap in
            # the latencies it measures. 10 ms keeps that well inside the run's resolution.
            "fetch.min.bytes": 1,
            "fetch.wait.max.ms": 100,
            "fetch.queue.backoff.ms": 10,
        }
    )
    return settings


def admin_settings(config: RunConfig) -> dict:
    settings = _connection(config, f"simulator-{config.producer_id}-admin")
    settings["log_level"] = 0  # the pre-flight check reports its own one-line error
    return settings
