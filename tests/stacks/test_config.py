"""Config validation: every bad input is refused with one line naming the key and what is allowed."""

from __future__ import annotations

import copy

import pytest

from stacks.config import ConfigError, EnvironmentConfig, load_environment
from tests.conftest import ENVIRONMENTS, cdk_context


@pytest.fixture
def environments() -> dict:
    return copy.deepcopy(cdk_context()["environments"])


@pytest.mark.parametrize("name", ENVIRONMENTS)
def test_every_shipped_environment_loads(environments, name):
    config = load_environment(environments, name)
    assert isinstance(config, EnvironmentConfig)
    assert config.name == name
    assert config.stack_prefix == f"Telemetry-{name}"


def test_prod_defaults_match_the_reference_poc(environments):
    prod = load_environment(environments, "prod")
    assert prod.production
    assert prod.msk.broker_count == 6
    assert prod.service_fabric.seed_node_count == 5


def test_config_is_frozen(environments):
    config = load_environment(environments, "dev")
    with pytest.raises(Exception):
        config.msk.broker_count = 9  # type: ignore[misc]


def refused(environments, name: str) -> str:
    with pytest.raises(ConfigError) as caught:
        load_environment(environments, name)
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_unknown_environment_lists_the_known_ones(environments):
    assert refused(environments, "qa") == "unknown environment 'qa'; known environments: dev, prod, staging"


def test_missing_environments_context():
    with pytest.raises(ConfigError, match="no 'environments' context"):
        load_environment({}, "dev")


@pytest.mark.parametrize(
    ("env", "path", "value", "expected"),
    [
        ("dev", ("network", "cidr"), "10.0.0.0/33", "network.cidr: '10.0.0.0/33' is not a CIDR block"),
        ("dev", ("network", "cidr"), "10.0.0.1/16", "network.cidr: '10.0.0.1/16' is not a CIDR block"),
        ("dev", ("network", "cidr"), "10.0.0.0/24", "use /19 or larger"),
        (
            "prod",
            ("service_fabric", "management_cidrs"),
            ["10.0.0.0/8", "300.1.1.0/24"],
            "service_fabric.management_cidrs: '300.1.1.0/24' is not a CIDR block",
        ),
        (
            "dev",
            ("availability_zones",),
            ["eu-west-1a", "eu-west-1b"],
            "availability_zones: the stacks support exactly 3 distinct zones; got 2",
        ),
        (
            "dev",
            ("availability_zones",),
            ["eu-west-1a", "eu-west-1b", "eu-west-1b"],
            "the stacks support exactly 3 distinct zones; got 2",
        ),
        (
            "dev",
            ("availability_zones",),
            ["eu-west-1a", "eu-west-1b", "us-east-1c"],
            "'us-east-1c' is not a zone of region eu-west-1",
        ),
        ("prod", ("msk", "broker_count"), 4, "msk.broker_count: 4 is not a multiple of the 3 availability zones"),
        (
            "dev",
            ("service_fabric", "seed_node_count"),
            4,
            "service_fabric.seed_node_count: 4 seed nodes is not a Service Fabric reliability level; "
            "allowed: 3, 5, 7, 9",
        ),
        (
            "prod",
            ("service_fabric", "management_cidrs"),
            ["10.250.0.0/24", "0.0.0.0/0"],
            "service_fabric.management_cidrs: 0.0.0.0/0 opens cluster management to the whole internet",
        ),
        (  # the whole internet in two halves
            "prod",
            ("service_fabric", "management_cidrs"),
            ["0.0.0.0/1", "128.0.0.0/1"],
            "service_fabric.management_cidrs: 0.0.0.0/1 is wider than production allows (/16 at most)",
        ),
        (  # prod's VPC is 10.30.0.0/16: its own hosts would reach 19000
            "prod",
            ("service_fabric", "management_cidrs"),
            ["10.30.0.0/16"],
            "service_fabric.management_cidrs: 10.30.0.0/16 contains the environment's VPC 10.30.0.0/16",
        ),
        (
            "prod",
            ("service_fabric", "management_cidrs"),
            ["10.0.0.0/8"],
            "service_fabric.management_cidrs: 10.0.0.0/8 is wider than production allows (/16 at most)",
        ),
        (
            "dev",
            ("msk", "topic_administrators"),
            ["arn:aws:iam::222222222222:user/telemetry-dev-operators/*"],
            "msk.topic_administrators: 'arn:aws:iam::222222222222:user/telemetry-dev-operators/*' is in account "
            "222222222222, not the environment's 111111111111",
        ),
        (
            "dev",
            ("msk", "topic_administrators"),
            ["arn:aws:iam::111111111111:user/*"],
            "msk.topic_administrators: 'arn:aws:iam::111111111111:user/*' names every user of the account",
        ),
        (  # a role session carries no MFA the trust policy could see
            "dev",
            ("msk", "topic_administrators"),
            ["arn:aws:iam::111111111111:role/operators"],
            "msk.topic_administrators: 'arn:aws:iam::111111111111:role/operators' is not an IAM user ARN",
        ),
        (
            "dev",
            ("msk", "topic_administrators"),
            ["arn:aws:sts::111111111111:assumed-role/ops/alice"],
            "msk.topic_administrators: 'arn:aws:sts::111111111111:assumed-role/ops/alice' is not an IAM user ARN",
        ),
        (
            "dev",
            ("service_fabric", "shared_storage_throughput_mbps"),
            160,
            "service_fabric: shared_storage_throughput_mbps: 160 is not offered for SINGLE_AZ_1; allowed: 64, 128,",
        ),
        (
            "dev",
            ("service_fabric", "shared_storage_deployment"),
            "MULTI_AZ_1",
            "service_fabric.shared_storage_deployment: Input should be 'SINGLE_AZ_1'",
        ),
        ("dev", ("msk", "broker_count"), "3", "msk.broker_count: Input should be a valid integer"),
        ("dev", ("msk", "kafka_version"), "2.8.1", "msk.kafka_version: Input should be '3.7.x'"),
        ("dev", ("msk", "broker_log_retention_days"), 10, "10 is not a CloudWatch Logs retention; allowed: 1, 3"),
        ("dev", ("msk", "surprise"), 1, "msk.surprise: unknown key"),
        (
            "dev",
            ("simulator_fleet", "topic"),
            "nope",
            "simulator_fleet.topic: 'nope' is not declared in msk.topics (telemetry)",
        ),
        (
            "dev",
            ("device_gateway", "topic"),
            "nope",
            "device_gateway.topic: 'nope' is not declared in msk.topics (telemetry)",
        ),
        (
            "dev",
            ("device_gateway", "log_retention_days"),
            10,
            "device_gateway.log_retention_days: 10 is not a CloudWatch Logs retention",
        ),
        ("dev", ("device_gateway", "scram_username"), "IoT User", "device_gateway.scram_username: String should match"),
        ("dev", ("device_gateway", "failure_alarm_messages"), 0, "device_gateway.failure_alarm_messages: Input should be"),
        ("dev", ("account",), "1234", "account: String should match pattern"),
        ("dev", ("monitoring", "alarm_emails"), ["not-an-email"], "'not-an-email' is not an email address"),
        (
            "dev",
            ("service_fabric", "scaling_desired_nodes"),
            9,
            "scaling_min_nodes <= scaling_desired_nodes <= scaling_max_nodes (got 0, 9, 3)",
        ),
    ],
)
def test_bad_values_are_refused_with_one_line(environments, env, path, value, expected):
    target = environments[env]
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    message = refused(environments, env)
    assert message.startswith(f"environment '{env}': ")
    assert expected in message


def test_world_open_management_is_allowed_outside_production(environments):
    environments["dev"]["service_fabric"]["management_cidrs"] = ["0.0.0.0/0"]
    assert load_environment(environments, "dev").service_fabric.management_cidrs == ("0.0.0.0/0",)


def test_missing_key_is_named(environments):
    del environments["staging"]["msk"]["topics"]
    assert "msk.topics: required key is missing" in refused(environments, "staging")


def test_topic_replication_cannot_exceed_brokers(environments):
    environments["dev"]["msk"]["topics"][0]["replication_factor"] = 6
    assert "'telemetry' replication_factor 6 exceeds broker_count 3" in refused(environments, "dev")


def test_duplicate_topics_are_refused(environments):
    topics = environments["dev"]["msk"]["topics"]
    topics.append(dict(topics[0]))
    assert "duplicate topic names ['telemetry']" in refused(environments, "dev")


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("application_port_end", 50000, "application ports 20000-50000 overlap ephemeral ports 49152-65534"),
        ("ephemeral_port_start", 65400, "holds 135 ports; Service Fabric needs at least 255"),
        ("application_port_start", 19000, "application_port_start..application_port_end (19000-30000) overlaps the Service Fabric ports 19000-19003"),
        ("ephemeral_port_end", 40000, "ephemeral_port_start 49152 is above ephemeral_port_end 40000"),
        ("application_ports", [443, 19080], "application_ports: 19080 is reserved for Service Fabric"),
        ("application_ports", [443, 443], "application_ports: duplicate ports [443]"),
        ("application_ports", [50000], "application_ports: 50000 lies in the ephemeral range 49152-65534"),
        ("application_ports", [], "application_ports: Tuple should have at least 1 item"),
        ("scale_in_cpu_percent", 60, "scale_in_cpu_percent 60 must be below scaling_cpu_target_percent 60"),
        ("lifecycle_heartbeat_seconds", 10, "lifecycle_heartbeat_seconds: Input should be greater than or equal to 30"),
        ("lifecycle_heartbeat_seconds", 9000, "lifecycle_heartbeat_seconds: Input should be less than or equal to 7200"),
        ("cluster_certificate_secret", "bad name!", "cluster_certificate_secret: String should match pattern"),
        ("application_client_cidrs", ["10.0.0.1/8"], "application_client_cidrs: '10.0.0.1/8' is not a CIDR block"),
        ("seed_snapshot_interval_hours", 5, "seed_snapshot_interval_hours: Input should be 1, 2, 3, 4, 6, 8, 12 or 24"),
        ("node_log_retention_days", 10, "node_log_retention_days: 10 is not a CloudWatch Logs retention"),
        ("management_internet_facing", "no", "management_internet_facing: Input should be a valid boolean"),
    ],
)
def test_bad_service_fabric_values_are_refused_with_one_line(environments, key, value, expected):
    environments["dev"]["service_fabric"][key] = value
    message = refused(environments, "dev")
    assert message.startswith("environment 'dev': service_fabric")
    assert expected in message


def test_service_fabric_port_ranges_default_to_the_usual_windows_layout(environments):
    for key in ("application_port_start", "application_port_end", "ephemeral_port_start", "ephemeral_port_end"):
        del environments["dev"]["service_fabric"][key]
    settings = load_environment(environments, "dev").service_fabric
    assert settings.application_port_range == (20000, 30000)
    assert settings.ephemeral_port_range == (49152, 65534)


# The 11.4.268.1 links of microsoft/service-fabric release_notes/Service_Fabric_ReleaseNotes_114_1-Hotfix.md.
CAB_114 = (
    "https://download.microsoft.com/download/b/0/b/b0bccac5-65aa-4be3-ab13-d5ff5890f4b5/11.4.268.1/"
    "MicrosoftServiceFabric.11.4.268.1.cab"
)
PACKAGE_114 = (
    "https://download.microsoft.com/download/8/3/6/836e3e99-a300-4714-8278-96bc3e8b5528/11.4.268.1/"
    "Microsoft.Azure.ServiceFabric.WindowsServer.11.4.268.1.zip"
)


def test_the_runtime_defaults_to_the_pinned_11_4_268_1_release(environments):
    settings = load_environment(environments, "dev").service_fabric
    assert settings.runtime_version == "11.4.268.1"
    assert (settings.runtime_cab_url, settings.standalone_package_url) == (CAB_114, PACKAGE_114)


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        (  # another host
            {"runtime_cab_url": CAB_114.replace("download.microsoft.com", "downloads.example.com")},
            "runtime_cab_url: 'https://downloads.example.com/download/b/0/b/b0bccac5-65aa-4be3-ab13-d5ff5890f4b5/"
            "11.4.268.1/MicrosoftServiceFabric.11.4.268.1.cab' is not an https://download.microsoft.com/ link to a "
            ".cab file; use the link from the Service Fabric release notes",
        ),
        (  # a host that only starts like Microsoft's
            {"runtime_cab_url": CAB_114.replace("download.microsoft.com", "download.microsoft.com.example.net")},
            "runtime_cab_url: 'https://download.microsoft.com.example.net/",
        ),
        ({"standalone_package_url": PACKAGE_114.replace("https:", "http:")}, "standalone_package_url: 'http://"),
        (  # the "latest" link this platform used before the runtime was pinned
            {"standalone_package_url": "https://go.microsoft.com/fwlink/?LinkId=730690"},
            "is not an https://download.microsoft.com/ link to a .zip file",
        ),
        ({"runtime_cab_url": PACKAGE_114}, "runtime_cab_url: 'https://download.microsoft.com/download/8/3/6/"),
        (  # the directory names the version, the file does not
            {"runtime_cab_url": CAB_114.replace("MicrosoftServiceFabric.11.4.268.1.cab", "MicrosoftServiceFabric.cab")},
            "service_fabric: runtime_cab_url: file name 'MicrosoftServiceFabric.cab' does not name runtime_version "
            "11.4.268.1; take the version and both links from the same Service Fabric release notes",
        ),
        (  # a version that merely starts with the pinned one
            {"standalone_package_url": PACKAGE_114.replace("11.4.268.1.zip", "11.4.268.10.zip")},
            "standalone_package_url: file name 'Microsoft.Azure.ServiceFabric.WindowsServer.11.4.268.10.zip' does "
            "not name runtime_version 11.4.268.1",
        ),
        (  # a new version without its links
            {"runtime_version": "11.8.121.1"},
            "runtime_cab_url: file name 'MicrosoftServiceFabric.11.4.268.1.cab' does not name runtime_version 11.8.121.1",
        ),
        (
            {"runtime_version": "11.4"},
            "service_fabric.runtime_version: '11.4' is not a Service Fabric runtime version (four dot-separated "
            "numbers, such as 11.4.268.1)",
        ),
    ],
)
def test_the_runtime_must_be_microsofts_download_of_the_pinned_version(environments, values, expected):
    environments["dev"]["service_fabric"].update(values)
    message = refused(environments, "dev")
    assert message.startswith("environment 'dev': service_fabric")
    assert expected in message


def test_a_consistent_runtime_release_is_accepted(environments):
    # 11.8.121.1's Cab link as microsoft/service-fabric release_notes/Service_Fabric_ReleaseNotes_118.md gives it.
    cab = (
        "https://download.microsoft.com/download/B/0/B/B0BCCAC5-65AA-4BE3-AB13-D5FF5890F4B5/11.8.121.1/"
        "MicrosoftServiceFabric.11.8.121.1.cab"
    )
    package = PACKAGE_114.replace("11.4.268.1", "11.8.121.1")  # shape only: the test makes no download
    environments["dev"]["service_fabric"].update(
        {"runtime_version": "11.8.121.1", "runtime_cab_url": cab, "standalone_package_url": package}
    )
    settings = load_environment(environments, "dev").service_fabric
    assert (settings.runtime_version, settings.runtime_cab_url) == ("11.8.121.1", cab)


# -- the node lifecycle inside AWS's limits (stacks/lifecycle_timing.py) -------------------


def test_a_heartbeat_timeout_that_cannot_outlast_two_failed_heartbeats_is_refused(environments):
    environments["dev"]["service_fabric"]["lifecycle_heartbeat_seconds"] = 600  # dev's value until 2026-11
    assert refused(environments, "dev") == (
        "environment 'dev': service_fabric.lifecycle_heartbeat_seconds: 600 s cannot outlast two failed heartbeat "
        "attempts in a row: each attempt can take 241 s (a run of up to 130 s with its Init, 51 s of Lambda "
        "throttling retries and 60 s of the longest Retry delay), so use at least 843 s"
    )
    environments["dev"]["service_fabric"]["lifecycle_heartbeat_seconds"] = 843
    assert load_environment(environments, "dev").lifecycle_timing.heartbeat_gap_seconds <= 843


def test_a_slow_poll_that_leaves_no_room_for_two_failed_heartbeats_is_refused(environments):
    environments["staging"]["node_lifecycle"]["poll_interval_seconds"] = 300
    message = refused(environments, "staging")
    assert "each attempt can take 481 s" in message and "300 s of node_lifecycle.poll_interval_seconds" in message
    assert message.endswith("so use at least 1563 s")


def test_a_drain_deadline_that_outlives_the_hooks_global_timeout_is_refused(environments):
    # An 843 s heartbeat (the least prod's waits allow) caps every action at 23.4 h.
    environments["prod"]["service_fabric"]["lifecycle_heartbeat_seconds"] = 843
    environments["prod"]["node_lifecycle"].update(drain_timeout_minutes=1380, lock_ttl_seconds=86_400, poll_interval_seconds=60,
                                                  lock_retry_seconds=60)  # fmt: skip
    message = refused(environments, "prod")
    assert message == (
        "environment 'prod': node_lifecycle.drain_timeout_minutes: a drain failing at its 1380-minute deadline ends "
        "23.7 h after its lifecycle action began, past the hook's global timeout of 23.4 h (100 x "
        "service_fabric.lifecycle_heartbeat_seconds, at most 48 h), where Auto Scaling ends the action mid-drain"
    )
    environments["prod"]["node_lifecycle"]["drain_timeout_minutes"] = 1350
    assert load_environment(environments, "prod").lifecycle_timing.drain_span_seconds <= 84_300


def test_the_heartbeat_holds_key_is_refused_naming_what_replaced_it(environments):
    """0.1.0 held a failed drain's instance with heartbeats for operator_hold_minutes; retention
    replaced the hold, and a cdk.json still carrying the key is told so, not called a typo."""
    environments["dev"]["node_lifecycle"]["operator_hold_minutes"] = 120
    message = refused(environments, "dev")
    assert "operator_hold_minutes is no longer read" in message and "retained by Auto Scaling" in message
    assert "remove the key" in message and "\n" not in message


def test_a_loop_that_could_pass_the_history_limit_is_refused(environments):
    dev = environments["dev"]["node_lifecycle"]
    dev.update(poll_interval_seconds=5, lock_retry_seconds=5, drain_timeout_minutes=1200, lock_ttl_seconds=86_400)
    assert refused(environments, "dev") == (
        "environment 'dev': node_lifecycle.poll_interval_seconds: a 1200-minute drain looping every 5 s writes about "
        "129,900 history events, past the 12,500 an execution is kept under (half of Step "
        "Functions' hard limit of 25,000, the rest left for retries); loop less often or shorten the drain"
    )


@pytest.mark.parametrize("name", ENVIRONMENTS)
def test_each_shipped_environment_fits_its_lifecycle_in_aws_limits(environments, name):
    timing = load_environment(environments, name).lifecycle_timing
    heartbeat = timing.heartbeat_timeout_seconds
    assert timing.heartbeat_gap_seconds <= heartbeat
    assert timing.drain_span_seconds <= min(48 * 3600, 100 * heartbeat)
    assert max(timing.drain_history_events, timing.join_history_events) <= 25_000 // 2


def test_the_timing_model_adds_up_as_derived_by_hand():
    """dev's numbers, worked on paper from the constants and AWS's limits."""
    from stacks.lifecycle_timing import LifecycleTiming

    timing = LifecycleTiming(heartbeat_timeout_seconds=900, poll_interval_seconds=15, lock_retry_seconds=30,
                             drain_timeout_seconds=3600, join_timeout_seconds=2700)  # fmt: skip
    # Invoke retries 1+2+4+8+16+20 = 51 s; the alarm's publish 5 tries of 5 s and 2+4+8+16 s between.
    assert timing.alarm_span_seconds == 5 * 5 + (2 + 4 + 8 + 16)
    # A step's attempt: 51 + 130 (Init and run) + 60 (the longest Retry delay) = 241 s; three of
    # them, the third's 60 s landing and the 60 s margin: 843 s, inside the 900 s heartbeat timeout.
    assert timing.attempt_seconds == 241 and timing.heartbeat_gap_seconds == 843
    assert timing.global_timeout_seconds == 90_000 and timing.event_age_seconds == 900 - 51 - 60 - 60
    # 729 delivery + 2 x (5*130 + 130 + 51) two Tasks' every retry + 3600 drain + 2 x 181 the failure step
    assert timing.drain_span_seconds == 729 + 2 * 831 + 3600 + 2 * 181


def test_a_reaper_too_slow_to_catch_a_lost_lifecycle_event_is_refused(environments):
    environments["dev"]["node_lifecycle"]["reaper_interval_minutes"] = 15
    assert refused(environments, "dev") == (
        "environment 'dev': node_lifecycle.reaper_interval_minutes: 15 minutes between reaper runs can leave a "
        "lifecycle action whose event was lost without a heartbeat past the hook's 900 s heartbeat timeout; run it "
        "at most every 10 minutes"
    )
    environments["dev"]["node_lifecycle"]["reaper_interval_minutes"] = 10
    load_environment(environments, "dev")


def test_every_mistake_is_named_at_once_and_a_misspelt_key_gets_the_nearest_one(environments):
    dev = environments["dev"]
    dev["msk"]["ebs_volum_gib"] = dev["msk"].pop("ebs_volume_gib")
    dev["network"]["nat_gateway"] = dev["network"].pop("nat_gateways")
    dev["workloads"] = dev.pop("workload")
    message = refused(environments, "dev")
    assert "msk.ebs_volum_gib: unknown key (did you mean 'ebs_volume_gib'?)" in message
    assert "network.nat_gateway: unknown key (did you mean 'nat_gateways'?)" in message
    assert "workloads: unknown key (did you mean 'workload'?)" in message
    assert "msk.ebs_volume_gib: required key is missing" in message
    dev["msk"]["zzz"] = 1
    assert "msk.zzz: unknown key;" in refused(environments, "dev") + ";"  # nothing near: no guess


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("schedule", "every sunday", "patching.schedule: 'every sunday' is not an EventBridge schedule; use cron("),
        ("schedule", "cron(0 3 * * SUN *)", "exactly one of day-of-month and day-of-week must be '?'"),
        ("schedule", "rate(1 days)", "singular for 1 and plural otherwise"),
        ("enabled", "yes", "patching.enabled: Input should be a valid boolean"),
        ("poll_interval_seconds", 5, "patching.poll_interval_seconds: Input should be greater than or equal to 15"),
        ("node_timeout_minutes", 90, "longer than node_lifecycle.lock_ttl_seconds (3600 s)"),
        ("sheduled", "rate(7 days)", "patching.sheduled: unknown key (did you mean 'schedule'?)"),
    ],
)
def test_bad_patching_values_are_refused_with_one_line(environments, key, value, expected):
    environments["dev"]["patching"][key] = value
    message = refused(environments, "dev")
    assert expected in message and "\n" not in message


def test_a_patch_run_that_could_pass_the_history_limit_is_refused(environments):
    environments["prod"]["patching"].update(poll_interval_seconds=15, node_timeout_minutes=240)
    message = refused(environments, "prod")
    assert "history events, and Step Functions fails an execution at 25,000" in message
    assert "raise patching.poll_interval_seconds" in message


@pytest.mark.parametrize(("section", "key", "value", "expected"), [
    ("patching", "node_timeout_minutes", 40, "node_lifecycle.join_timeout_minutes: 45 min cannot wait out a patched node "
     "holding the membership lock (patching.node_timeout_minutes, 40 min) and still do its own work (15 min); use at least 55"),
    ("node_lifecycle", "drain_timeout_minutes", 44, "node_lifecycle.drain_timeout_minutes: 44 min cannot wait out"),
])  # fmt: skip
def test_a_join_or_drain_that_could_not_outwait_a_patched_node_is_refused(environments, section, key, value, expected):
    """Executed, a join meeting a patch run waits for the lock inside its own deadline while a node
    installs its updates (test_patch_executed.py); a deadline shorter than a node's patch fails
    it whenever scaling meets a maintenance window."""
    environments["dev"][section][key] = value
    message = refused(environments, "dev")
    assert expected in message and "\n" not in message


def test_patching_is_off_in_dev_and_on_in_staging_and_prod(environments):
    assert [load_environment(environments, n).patching.enabled for n in ("dev", "staging", "prod")] == [False, True, True]
