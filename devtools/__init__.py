"""Tools for developing the blueprint, not for operating it: local Kafka and mosquitto brokers
for tests and benchmarks, the benchmarks themselves, and a throwaway CA for test certificates.
Operators use the `telemetry` command (telemetry/)."""
