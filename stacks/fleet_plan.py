"""The fleet a simulator run needs, and every quota it touches: `telemetry simulate --plan`.

Given the devices and the message rate, it says how many hosts, devices per host, how long the
connect phase takes at the run's share of the account's CONNECT quota, and checks each quota the
run meets. A plan that breaks one is refused in one line naming the quota and how to raise it.

The quotas, with their sources:
- AWS IoT Core (AWS General Reference, "AWS IoT Core endpoints and quotas", message broker
  limits): concurrent client connections per account 500,000 (adjustable); CONNECT requests
  per second per account 500 (adjustable; cdk.json device_gateway.connect_quota_per_s holds the
  account's value); CONNECT per second per client id 1 (not adjustable); inbound publish
  requests per second per account 20,000 (adjustable; device_gateway.publish_quota_per_s);
  publishes per second per connection 100 and bytes per second per connection 512 KiB (not
  adjustable); rule executions per second per account 20,000 (adjustable; the rules engine
  runs the device gateway's rule once per message).
- Amazon MSK (Developer Guide, "Amazon MSK quota", Standard brokers): with IAM access control
  at most 3,000 TCP connections per broker and 100 new connections per second per broker
  (M5 and M7g brokers), for the Kafka transport's producers.

What one host holds is measured, not a quota: MAX_DEVICES_PER_HOST (TLS connections held by one
simulator host, devtools/bench_mqtt.py --connections), CONNECTS_PER_S_PER_CORE (each connection
builds its TLS context, ~10 ms of CPU), and the MQTT and Kafka send rates per process.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from simulator.connecting import PER_CLIENT_ID_INTERVAL_S

IOT_CONCURRENT_CONNECTIONS = 500_000
IOT_CONNECTS_PER_CLIENT_ID_S = 1
IOT_PUBLISHES_PER_CONNECTION_S = 100
IOT_BYTES_PER_CONNECTION_S = 512 * 1024
IOT_RULE_EXECUTIONS_PER_S = 20_000
MSK_IAM_CONNECTIONS_PER_BROKER = 3_000
MSK_IAM_NEW_CONNECTIONS_PER_BROKER_S = 100
# Measured on this project's hosts (README "Device populations"): what one host holds and opens.
MAX_DEVICES_PER_HOST = 15_000
CONNECTS_PER_S_PER_CORE = 80
MQTT_RATE_PER_PROCESS = 5_000
KAFKA_RATE_PER_PROCESS = 100_000
# The share of the account's CONNECT quota a simulator run takes, split over its hosts: the run
# stays under the device gateway's quota alarm and leaves the rest to real devices.
CONNECT_QUOTA_SHARE = 0.5


@dataclass(frozen=True)
class QuotaCheck:
    name: str
    service: str
    limit: float
    needed: float
    unit: str
    adjustable: bool
    config_key: str = ""  # where cdk.json holds the account's value

    @property
    def ok(self) -> bool:
        return self.needed <= self.limit

    def refusal(self) -> str:
        fixed = "" if self.adjustable else ", not adjustable: spread the load"
        key = f", cdk.json {self.config_key}" if self.config_key and self.adjustable else ""
        return f"{self.service} '{self.name}' (needs {self.needed:,.0f}, quota {self.limit:,.0f}{fixed}{key})"


@dataclass(frozen=True)
class FleetPlan:
    devices: int
    rate: float
    message_bytes: int
    transport: str
    hosts: int
    devices_per_host: int
    cores_per_host: int
    connect_rate: float  # CONNECTs per second over the fleet
    connect_quota: float  # the account's CONNECTs per second
    connect_phase_s: float
    seconds_between_messages: float  # per device
    checks: list[QuotaCheck]

    @property
    def refusals(self) -> list[str]:
        return [check.refusal() for check in self.checks if not check.ok]

    def refusal_line(self) -> str | None:
        """One line naming every quota the run would break and how to raise them."""
        if not self.refusals:
            return None
        return ("the run would break " + "; ".join(self.refusals) + ": raise adjustable quotas in the Service "
                "Quotas console, then put the new values in cdk.json where named")


def host_connect_rate(connect_quota: float, hosts: int) -> int:
    """CONNECTs/s per host of a fleet run (the run document's connectRate, simulator --connect-rate)."""
    return max(1, int(connect_quota * CONNECT_QUOTA_SHARE / hosts))


def plan_fleet(
    *, devices: int, rate: float, message_bytes: int, transport: str, config, hosts: int | None = None,
    cores_per_host: int = 2,
) -> FleetPlan:  # fmt: skip
    gateway = config.device_gateway
    mqtt = transport == "mqtt"
    per_host_rate = MQTT_RATE_PER_PROCESS if mqtt else KAFKA_RATE_PER_PROCESS
    needed_hosts = max(
        1,
        math.ceil(devices / MAX_DEVICES_PER_HOST) if mqtt else 1,
        math.ceil(rate / (per_host_rate * cores_per_host)),
    )
    hosts = max(hosts or 0, needed_hosts)
    per_host = math.ceil(devices / hosts)
    checks: list[QuotaCheck] = []
    connect_rate = 0.0
    connect_phase = 0.0
    if mqtt:
        per_host_connects = min(host_connect_rate(gateway.connect_quota_per_s, hosts),
                                cores_per_host * CONNECTS_PER_S_PER_CORE)
        connect_rate = float(per_host_connects * hosts)
        connect_phase = per_host / per_host_connects
        per_connection = rate / max(1, devices)
        checks += [
            QuotaCheck("Maximum concurrent client connections per account", "AWS IoT Core",
                       IOT_CONCURRENT_CONNECTIONS, devices, "connections", True),
            QuotaCheck("Connect requests per second per account", "AWS IoT Core", gateway.connect_quota_per_s,
                       connect_rate, "CONNECTs/s", True, "device_gateway.connect_quota_per_s"),
            # The simulator's pacer never starts a client id's CONNECT within 1 s of its last
            # (simulator/connecting.py PER_CLIENT_ID_INTERVAL_S), so a run needs at most one.
            QuotaCheck("Connect requests per second per client ID", "AWS IoT Core", IOT_CONNECTS_PER_CLIENT_ID_S,
                       1 / PER_CLIENT_ID_INTERVAL_S, "CONNECTs/s for one client id", False),
            QuotaCheck("Inbound publish requests per second per account", "AWS IoT Core", gateway.publish_quota_per_s,
                       rate, "publishes/s", True, "device_gateway.publish_quota_per_s"),
            QuotaCheck("Publish requests per second per connection", "AWS IoT Core", IOT_PUBLISHES_PER_CONNECTION_S,
                       per_connection, "publishes/s on one connection", False),
            QuotaCheck("Throughput per second per connection", "AWS IoT Core", IOT_BYTES_PER_CONNECTION_S,
                       per_connection * message_bytes, "bytes/s on one connection", False),
            QuotaCheck("Rule executions per second per account", "AWS IoT Core", IOT_RULE_EXECUTIONS_PER_S,
                       rate, "rule executions/s", True),
        ]  # fmt: skip
    else:
        processes = hosts * max(1, math.ceil(rate / hosts / per_host_rate))
        # Each producer process and each host's consumer keeps one connection to every broker it
        # leads partitions on: at most one per broker each.
        checks += [
            QuotaCheck("Maximum TCP connections per broker (IAM access control)", "Amazon MSK",
                       MSK_IAM_CONNECTIONS_PER_BROKER, processes + hosts, "connections per broker", False),
            QuotaCheck("Maximum TCP connection rate per broker (IAM)", "Amazon MSK",
                       MSK_IAM_NEW_CONNECTIONS_PER_BROKER_S, processes + hosts, "new connections/s per broker", False),
        ]  # fmt: skip
    return FleetPlan(
        devices=devices, rate=rate, message_bytes=message_bytes, transport=transport, hosts=hosts,
        devices_per_host=per_host, cores_per_host=cores_per_host, connect_rate=connect_rate,
        connect_quota=gateway.connect_quota_per_s, connect_phase_s=connect_phase,
        seconds_between_messages=devices / rate if rate else math.inf, checks=checks,
    )  # fmt: skip


def describe(plan: FleetPlan) -> str:
    lines = [
        f"{plan.devices:,} devices, {plan.rate:,.0f} msg/s in total over {plan.transport} "
        f"(each device every {plan.seconds_between_messages:,.1f} s), {plan.message_bytes}-byte messages",
        f"hosts: {plan.hosts} with {plan.cores_per_host} cores, {plan.devices_per_host:,} devices and "
        f"{plan.rate / plan.hosts:,.0f} msg/s each",
    ]
    if plan.transport == "mqtt":
        per_host = plan.connect_rate / plan.hosts
        share = host_connect_rate(plan.connect_quota, plan.hosts)
        why = (
            f"a fleet run takes {CONNECT_QUOTA_SHARE:.0%} of the account's {plan.connect_quota:,.0f} CONNECTs/s"
            if per_host >= share
            else f"what {plan.cores_per_host} cores open; the run's share of the quota is {share:,} per host"
        )
        lines.append(
            f"connect phase: {plan.connect_phase_s:,.0f} s at {plan.connect_rate:,.0f} CONNECTs/s, "
            f"{per_host:,.0f} per host ({why})"
        )
    lines.append("quotas:")
    for check in plan.checks:
        mark = "ok  " if check.ok else "OVER"
        needed = f"{check.needed:,.0f}" if float(check.needed).is_integer() else f"{check.needed:,.1f}"
        lines.append(f"  {mark} {check.service}: {check.name}: {needed} of {check.limit:,.0f} {check.unit}")
    return "\n".join(lines)
