"""The entry point of a producer child process: builds the transport's producer (Kafka or MQTT),
says "ready", waits for the common start time, runs, and sends back its ProducerResult. Talks to
the parent over a Pipe: ("ready"), ("progress", ...), ("done", result) or ("error", one line).
"""

from __future__ import annotations

import signal

from simulator.config import RunConfig
from simulator.errors import SimulatorError


def run_producer_process(config: RunConfig, process_index: int, conn) -> None:
    """Entry point of a producer child process."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and stops us
    process = None
    try:
        if config.transport == "mqtt":
            from simulator.mqtt_producer import MqttProducerProcess  # Kafka runs never load awscrt

            process = MqttProducerProcess(config, process_index, conn)
        else:
            from simulator.producer import ProducerProcess  # MQTT runs never load librdkafka

            process = ProducerProcess(config, process_index, conn)
        process.connect()
        conn.send(("ready", None))
        start_ns = conn.recv()
        if start_ns is None:
            return
        conn.send(("done", process.run(start_ns)))
    except Exception as error:  # noqa: BLE001 - every failure reaches the operator as one line
        reason = None
        if config.transport != "mqtt":
            from simulator.producer import explain_failure

            reason = explain_failure(error, process, config)
        if reason is None:
            reason = str(error) if isinstance(error, SimulatorError) else f"{type(error).__name__}: {error}"
        conn.send(("error", f"producer {process_index}: {reason}"))
    finally:
        conn.close()

