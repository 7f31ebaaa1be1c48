"""`telemetry cost`: the estimator's arithmetic against hand-worked cases, every synthesized resource
of every environment accounted for, the price table's sources, --live through Stubber (which
checks each GetProducts request against the Price List API's model), and the command as typed."""

from __future__ import annotations

import datetime
import json
import math

import boto3
import pytest
from botocore.stub import Stubber

from stacks.config import load_environment
from telemetry import cli
from telemetry.shared import prices
from telemetry.shared.cloud_assembly import Stack, in_dependency_order, read_cloud_assembly
from telemetry.shared.estimate import (
    HOURS_PER_MONTH,
    SECONDS_PER_MONTH,
    Scenario,
    estimate,
    iot_messaging_usd,
    metered_messages,
    paths,
)
from tests.conftest import cdk_context

ENVIRONMENTS = ("dev", "staging", "prod")
IDLE = Scenario(0, 0, 512, "kafka")


def config_of(name: str):
    return load_environment(cdk_context()["environments"], name)


@pytest.fixture(scope="module")
def environment_stacks(synthesized):
    def get(name: str) -> list[Stack]:
        return in_dependency_order(read_cloud_assembly(synthesized(name).outdir, config_of(name).stack_prefix))

    return get


def flat_table(**overrides: float) -> prices.PriceTable:
    """The real table's keys, every price $1 unless overridden: hand arithmetic stays simple."""
    real = prices.load("eu-west-1")
    table = {key: {**price, "usd": overrides.get(key, 1.0)} for key, price in real.prices.items()}
    table["iot.messaging"]["tiers"] = real.prices["iot.messaging"]["tiers"]
    return prices.PriceTable("eu-west-1", real.as_of, table)


def stack_usd(result, stack_name="Telemetry-dev-Fake") -> float:
    """The fake stack's own lines (every estimate also prices the two certificate secrets)."""
    return sum(line.monthly_usd for line in result.lines if line.stack == stack_name)


def fake_stack(resources: dict, name="Telemetry-dev-Fake", parameters=None) -> Stack:
    return Stack(name, (), {"Resources": resources, "Parameters": parameters or {}})


# -- every resource accounted for ------------------------------------------------------------


@pytest.mark.parametrize("name", ENVIRONMENTS)
def test_every_synthesized_resource_is_priced_or_free_with_a_reason(name, environment_stacks):
    stacks = environment_stacks(name)
    result = estimate(config_of(name), stacks, prices.load("eu-west-1"), Scenario(73_800, 3000, 512, "mqtt"))
    assert result.unpriced == [], "a resource type without a price: add it to telemetry/shared/estimate.py"
    accounted = {(line.stack, line.logical_id) for line in result.lines} | {
        (item.stack, item.logical_id) for item in result.no_charge
    }
    every = {(stack.name, logical_id) for stack in stacks for logical_id in stack.template["Resources"]}
    assert every <= accounted
    assert all(item.reason for item in result.no_charge)
    for line in result.lines:
        assert line.source.startswith("https://") and "(" in line.source, line  # the page, and the date read


def test_an_unknown_resource_type_is_reported_unpriced():
    stack = fake_stack({"Thing": {"Type": "AWS::Timestream::Database", "Properties": {}}})
    result = estimate(config_of("dev"), [stack], flat_table(), IDLE)
    assert [(u.logical_id, u.type) for u in result.unpriced] == [("Thing", "AWS::Timestream::Database")]


# -- hand-worked arithmetic --------------------------------------------------------------------


def test_msk_broker_hours_are_brokers_times_the_hours_of_the_month(environment_stacks):
    for name in ENVIRONMENTS:
        config = config_of(name)
        result = estimate(config, environment_stacks(name), flat_table(), IDLE)
        (hours,) = [line for line in result.lines if line.type == "AWS::MSK::Cluster" and line.unit == "broker-hour"]
        assert hours.quantity == config.msk.broker_count * 730 == config.msk.broker_count * HOURS_PER_MONTH
        assert hours.monthly_usd == hours.quantity * 1.0


def test_a_windows_instance_is_priced_with_its_licence_and_its_volumes():
    parameters = {"Image": {"Type": "AWS::SSM::Parameter::Value<AWS::EC2::Image::Id>",
                            "Default": "/aws/service/ami-windows-latest/Windows_Server-2022-English-Full-Base"}}
    template = {"LaunchTemplateData": {
        "InstanceType": "m6i.xlarge", "ImageId": {"Ref": "Image"},
        "BlockDeviceMappings": [{"DeviceName": "/dev/sda1", "Ebs": {"VolumeSize": 100, "VolumeType": "gp3"}},
                                {"DeviceName": "xvdb", "Ebs": {"VolumeSize": 128, "VolumeType": "gp3"}}]}}
    stack = fake_stack({
        "Template": {"Type": "AWS::EC2::LaunchTemplate", "Properties": template},
        "Seed": {"Type": "AWS::EC2::Instance", "Properties": {"LaunchTemplate": {"LaunchTemplateId": {"Ref": "Template"}}}},
    }, parameters=parameters)  # fmt: skip
    table = flat_table(**{"ec2.m6i.xlarge.windows": 0.398, "ebs.gp3.storage": 0.088})
    result = estimate(config_of("dev"), [stack], table, IDLE)
    by_item = {line.item: line.monthly_usd for line in result.lines}
    assert by_item["m6i.xlarge Windows (licence included)"] == pytest.approx(730 * 0.398)  # $290.54
    assert by_item["EBS gp3 /dev/sda1 100 GB x 1 instance"] == pytest.approx(8.80)
    assert by_item["EBS gp3 xvdb 128 GB x 1 instance"] == pytest.approx(11.264)


def test_an_internet_facing_nlb_pays_for_one_public_address_per_zone():
    stack = fake_stack({"Nlb": {"Type": "AWS::ElasticLoadBalancingV2::LoadBalancer", "Properties": {
        "Type": "network", "Scheme": "internet-facing", "Subnets": ["a", "b", "c"]}}})
    table = flat_table(**{"nlb.hours": 0.0252, "ipv4.public": 0.005})
    result = estimate(config_of("dev"), [stack], table, IDLE)
    assert stack_usd(result) == pytest.approx(730 * 0.0252 + 3 * 730 * 0.005)  # $18.40 + $10.95


def test_flink_pays_one_orchestration_kpu_and_50_gb_per_kpu():
    stack = fake_stack({"App": {"Type": "AWS::KinesisAnalyticsV2::Application", "Properties": {
        "ApplicationConfiguration": {"FlinkApplicationConfiguration": {
            "ParallelismConfiguration": {"Parallelism": 4, "ParallelismPerKPU": 2}}}}}})
    table = flat_table(**{"flink.kpu": 0.11, "flink.storage": 0.10, "flink.backup": 0.0})
    result = estimate(config_of("dev"), [stack], table, IDLE)
    # 2 KPUs plus the orchestration KPU for 730 h, and 100 GB of running storage.
    assert stack_usd(result) == pytest.approx(3 * 730 * 0.11 + 100 * 0.10)  # $240.90 + $10


def test_client_traffic_between_zones_follows_the_rate():
    stack = fake_stack({"Kafka": {"Type": "AWS::MSK::Cluster", "Properties": {
        "NumberOfBrokerNodes": 3, "BrokerNodeGroupInfo": {
            "InstanceType": "kafka.m7g.large", "StorageInfo": {"EBSStorageInfo": {"VolumeSize": 100}}}}}})
    scenario = Scenario(1000, 10, 1024, "kafka")
    result = estimate(config_of("dev"), [stack], flat_table(**{"transfer.inter_az": 0.01}), scenario)
    (crossing,) = [line for line in result.lines if line.usage]
    gb = 1000 * 1024 * SECONDS_PER_MONTH / 2**30  # 2,506 GB a month
    assert crossing.quantity == pytest.approx(gb * 2 / 3 * 4, rel=1e-6)
    assert crossing.monthly_usd == pytest.approx(66.84, abs=0.01)


def test_iot_core_messaging_tiers():
    table = prices.load("eu-west-1")
    assert [(upper, usd) for upper, usd in table.tiers("iot.messaging")] == [(1000, 1.0), (5000, 0.8), (None, 0.7)]
    assert iot_messaging_usd(table, 500) == pytest.approx(500.0)
    assert iot_messaging_usd(table, 1000) == pytest.approx(1000.0)
    assert iot_messaging_usd(table, 3000) == pytest.approx(1000 + 2000 * 0.8)
    assert iot_messaging_usd(table, 6000) == pytest.approx(1000 + 4000 * 0.8 + 1000 * 0.7)


@pytest.mark.parametrize(("size", "steps"), [(1, 1), (512, 1), (5120, 1), (5121, 2), (6144, 2), (131_072, 26)])
def test_iot_core_meters_messages_in_5_kb_steps(size, steps):
    assert metered_messages(Scenario(1, 1, size, "mqtt")) == SECONDS_PER_MONTH * steps


def test_the_three_ingestion_paths_differ_by_the_iot_charges(environment_stacks):
    stacks = environment_stacks("dev")
    config = config_of("dev")
    scenario = Scenario(5000, 1000, 512, "kafka")
    table = prices.load("eu-west-1")
    totals = paths(config, stacks, table, scenario)
    messages_m = 5000 * SECONDS_PER_MONTH / 1e6  # 13,140 million a month
    rules_and_actions = messages_m * (0.15 + 0.15)
    connectivity = 1000 * 730 * 60 / 1e6 * 0.08
    assert totals["basic_ingest"] - totals["kafka"] == pytest.approx(rules_and_actions + connectivity, abs=0.05)
    messaging = 1000 * 1.0 + 4000 * 0.8 + (messages_m - 5000) * 0.7
    assert totals["mqtt"] - totals["basic_ingest"] == pytest.approx(messaging, abs=0.05)


def test_per_million_messages_and_per_device_year(environment_stacks):
    result = estimate(config_of("dev"), environment_stacks("dev"), prices.load("eu-west-1"), Scenario(5000, 2000, 512, "kafka"))
    assert result.per_million_messages_usd == pytest.approx(result.monthly_usd / (5000 * SECONDS_PER_MONTH / 1e6))
    assert result.per_device_year_usd == pytest.approx(result.monthly_usd * 12 / 2000)
    assert math.isclose(result.floor_usd + result.usage_usd, result.monthly_usd)
    idle = estimate(config_of("dev"), environment_stacks("dev"), prices.load("eu-west-1"), IDLE)
    assert idle.floor_usd == pytest.approx(result.floor_usd)  # the floor does not move with the rate


# -- the price table -----------------------------------------------------------------------------


def test_every_price_names_its_page_and_the_day_it_was_read():
    table = prices.load("eu-west-1")
    for key, price in table.prices.items():
        assert price["source"].startswith("https://aws.amazon.com/"), key
        datetime.date.fromisoformat(price["read"])
        assert ("usd" in price) != ("tiers" in price), key


def test_a_table_older_than_90_days_warns():
    table = prices.load("eu-west-1")
    table.checked = True
    assert table.staleness_warning(table.as_of + datetime.timedelta(days=90)) is None
    warning = table.staleness_warning(table.as_of + datetime.timedelta(days=91))
    assert warning.startswith("warning: the eu-west-1 price table is 91 days old")


def test_a_table_not_checked_against_its_pages_says_so_until_live_prices_replace_it():
    table = prices.load("eu-west-1")
    assert table.checked is False  # see the table's checked_note
    assert f"{len(table.prices)} of the {len(table.prices)} prices in the eu-west-1 price table were not checked" in (
        table.staleness_warning(table.as_of))
    table.refreshed = sorted(set(table.prices) - {"iot.messaging", "sns.email"})
    assert "the prices iot.messaging, sns.email in the eu-west-1 price table were not checked" in (
        table.staleness_warning(table.as_of))
    table.refreshed = sorted(table.prices)
    assert table.staleness_warning(table.as_of) is None


def test_a_region_without_a_table_is_one_line():
    with pytest.raises(Exception, match="no price table for region ap-south-2; tables exist for eu-west-1"):
        prices.load("ap-south-2")


def product(usd: str, begin: str = "0") -> str:
    return json.dumps({"product": {"sku": "SKU"}, "terms": {"OnDemand": {"SKU.JRTCKXETXF": {"priceDimensions": {
        "SKU.JRTCKXETXF.6YS6EN2CT7": {"unit": "Hrs", "beginRange": begin, "pricePerUnit": {"USD": usd}}}}}}})


def test_live_refresh_asks_the_price_list_for_each_query_and_keeps_what_it_cannot_match():
    table = prices.load("eu-west-1")
    table.prices = {key: table.prices[key] for key in ("nat.hours", "msk.storage", "iot.messaging")}
    pricing = boto3.client("pricing", region_name="us-east-1", aws_access_key_id="a", aws_secret_access_key="b")
    stubber = Stubber(pricing)

    def expect(key: str, answer: list[str]) -> None:
        query = table.prices[key]["query"]
        filters = [{"Type": "TERM_MATCH", "Field": "regionCode", "Value": "eu-west-1"}] + [
            {"Type": "TERM_MATCH", "Field": name, "Value": value} for name, value in sorted(query["filters"].items())]
        stubber.add_response("get_products", {"PriceList": answer, "FormatVersion": "aws_v1"},
                             {"ServiceCode": query["service"], "Filters": filters, "FormatVersion": "aws_v1",
                              "MaxResults": 100})

    expect("msk.storage", [product("0.1140000000")])
    expect("nat.hours", [product("0.05"), product("0.05")])
    with stubber:
        live = prices.refresh(table, pricing, datetime.date(2026, 12, 1))
    assert live.usd("msk.storage") == 0.114 and live.refreshed == ["msk.storage"]
    assert live.usd("nat.hours") == table.usd("nat.hours")
    assert live.kept == ["iot.messaging: refreshed by hand (no Price List query)",
                         "nat.hours: the Price List answered 2 products, not one"]
    assert "Price List API, 2026-12-01" in live.source("msk.storage")
    assert live.as_of == datetime.date(2026, 12, 1)


def test_saved_live_prices_are_checked_in_the_table_and_the_rest_stay_as_they_were(tmp_path):
    copy = tmp_path / "eu-west-1.json"
    copy.write_text((prices.TABLES / "eu-west-1.json").read_text())
    table = prices.load("eu-west-1")
    table.prices["msk.storage"] = {**table.prices["msk.storage"], "usd": 0.114}
    table.as_of, table.refreshed = datetime.date(2026, 12, 1), ["msk.storage"]
    prices.save(table, copy)
    body = json.loads(copy.read_text())
    before = json.loads((prices.TABLES / "eu-west-1.json").read_text())
    assert body["as_of"] == "2026-12-01"
    assert body["prices"]["msk.storage"] == {
        **before["prices"]["msk.storage"], "usd": 0.114, "read": "2026-12-01", "checked": True}
    assert {k: v for k, v in body["prices"].items() if k != "msk.storage"} == {
        k: v for k, v in before["prices"].items() if k != "msk.storage"}
    saved = prices.PriceTable("eu-west-1", datetime.date(2026, 12, 1), body["prices"], checked=body["checked"])
    assert "msk.storage" not in saved.unchecked() and len(saved.unchecked()) == len(saved.prices) - 1


# -- the command ----------------------------------------------------------------------------------


def test_json_output_has_the_documented_keys(capsys):
    assert cli.main(["cost", "--env", "dev", "--rate", "5000", "--format", "json"]) == 0
    body = json.loads(capsys.readouterr().out)
    for key in ("environment", "region", "monthly_usd", "lines", "no_charge", "unpriced", "per_million_messages_usd",
                "per_device_year_usd", "paths"):
        assert key in body, key
    assert set(body["paths"]) == {"kafka", "mqtt", "basic_ingest"}
    assert body["unpriced"] == []
    assert set(body["lines"][0]) >= {"stack", "logical_id", "type", "item", "quantity", "unit", "unit_usd",
                                     "monthly_usd", "source"}
    assert set(body["no_charge"][0]) == {"stack", "logical_id", "type", "reason"}
    assert body["monthly_usd"] == pytest.approx(sum(line["monthly_usd"] for line in body["lines"]), abs=0.01)


def test_the_plot_is_drawn(tmp_path, capsys):
    path = tmp_path / "cost.png"
    assert cli.main(["cost", "--env", "dev", "--rate", "5000", "--plot", str(path)]) == 0
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(("argv", "fragment"), [
    (["--rate", "-5"], "argument --rate: must be 0 or more, got -5"),
    (["--rate", "fast"], "argument --rate: 'fast' is not a number of messages per second"),
    (["--transport", "carrier-pigeon"], "argument --transport: invalid choice: 'carrier-pigeon'"),
    (["--message-bytes", "0"], "argument --message-bytes: must be from 1 to 1,048,576, got 0"),
    (["--devices", "1.5"], "argument --devices: '1.5' is not a whole number of devices"),
    (["--plot", "cost.svg"], "--plot writes a PNG"),
])  # fmt: skip
def test_bad_scenario_values_are_one_line_and_exit_2(argv, fragment, capsys):
    assert cli.main(["cost", "--env", "dev", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and fragment in err[0] and err[0].startswith("telemetry"), err
    assert "Traceback" not in err[0]


def test_storage_auto_scaling_is_priced_at_a_rate_the_volumes_cannot_hold():
    """At 7,000 msg/s dev's 300 GiB volumes grow to what 24 h at that rate needs at the 70% auto
    scaling target (stacks/sizing.autoscaled_volume_gib); the cost prices the growth as usage and
    says dev is outside what it was sized for."""
    from stacks.sizing import autoscaled_volume_gib

    stack = fake_stack({"Kafka": {"Type": "AWS::MSK::Cluster", "Properties": {
        "NumberOfBrokerNodes": 3, "BrokerNodeGroupInfo": {
            "InstanceType": "kafka.m7g.large", "StorageInfo": {"EBSStorageInfo": {"VolumeSize": 300}}}}}})
    config = config_of("dev")
    result = estimate(config, [stack], flat_table(**{"transfer.inter_az": 0.01, "msk.storage": 0.1}),
                      Scenario(7_000, 10, 512, "kafka"))
    (grown,) = [line for line in result.lines if "auto scaling adds" in line.item]
    expected = autoscaled_volume_gib(config, rate=7_000, provisioned=300)
    assert 300 < expected < config.msk.storage_autoscaling_max_gib
    assert grown.usage and grown.quantity == pytest.approx(3 * (expected - 300))
    assert any("outside what it was sized for" in note for note in result.notes)


def test_the_remote_tier_is_priced_at_the_rate_for_the_whole_retention():
    """A tiered cluster pays for the remote tier by the GiB-month: one copy of the topic's whole
    168 h (Kafka copies each segment once it rolls, stacks/capacity.remote_tier_gib), usage only."""
    stack = fake_stack({"Kafka": {"Type": "AWS::MSK::Cluster", "Properties": {
        "NumberOfBrokerNodes": 6, "StorageMode": "TIERED", "BrokerNodeGroupInfo": {
            "InstanceType": "kafka.m7g.xlarge", "StorageInfo": {"EBSStorageInfo": {"VolumeSize": 200}}}}}})
    config = config_of("prod")
    table = flat_table(**{"msk.tiered.storage": 0.5})
    (tier,) = [line for line in estimate(config, [stack], table, Scenario(73_800, 10, 512, "kafka")).lines
               if line.unit_usd == 0.5]
    # 73,800 msg/s of 512 B, compressed as prod declares (no AWS IoT Core share), for 168 h, in GiB.
    ratio = config.workload.compression_ratio
    assert tier.usage and tier.quantity == pytest.approx(73_800 * 512 / ratio * 3600 * 168 / 2**30)
    assert not [line for line in estimate(config, [stack], table, IDLE).lines if line.unit_usd == 0.5]


def test_prods_msk_design_is_compared_with_the_cheapest_of_each_kind(capsys):
    assert cli.main(["cost", "--env", "prod", "--format", "json"]) == 0
    designs = json.loads(capsys.readouterr().out)["msk_designs"]
    assert [d["kind"] for d in designs] == ["tiered", "standard", "tiered", "express"]
    assert designs[0]["this_environment"] and not any(d["this_environment"] for d in designs[1:])
    assert all(d["holds"] for d in designs)
    (cheapest,) = [d for d in designs if d["cheapest"]]
    assert cheapest["monthly_usd"] == min(d["monthly_usd"] for d in designs)
    for design in designs:  # each price is its quantities times the table's prices
        assert design["monthly_usd"] == pytest.approx(sum(design["usd"].values()), abs=0.02)
    # Storage: the tiered designs pay for a few GiB-months of volume and the remote tier, the
    # Standard one for the whole retention on its volumes.
    standard = next(d for d in designs if d["kind"] == "standard")
    assert standard["usd"]["ebs_gib_month"] > 5 * designs[0]["usd"]["ebs_gib_month"]


def test_the_report_opens_with_a_summary_in_aligned_columns_and_ends_with_the_total(capsys):
    assert cli.main(["cost", "--env", "dev", "--rate", "5000"]) == 0
    out = capsys.readouterr().out.splitlines()
    start = out.index("summary (USD a month; per resource below):")
    table = out[start + 1:out.index("", start)]
    assert table[0].split() == ["stack", "fixed", "usage", "total"] and table[-1].split()[0] == "total"
    assert len({len(row) for row in table}) == 1  # every number right-aligned to the same column end
    total = table[-1].split()[-1]
    assert out[-1] == f"monthly total: {total}"
    assert start < next(i for i, line in enumerate(out) if line.startswith("Telemetry-dev-"))


def test_the_text_fits_120_columns_and_reads_its_quantities_as_a_person_would(capsys):
    """Not "10.000 10,000 requests x $0.03": a price per a count of things is the things counted."""
    assert cli.main(["cost", "--env", "prod", "--rate", "5000", "--transport", "mqtt"]) == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 120
    assert "requests (assumed 100,000): 100,000 requests x $0.03 per 10,000 = $0.30" in out
    assert "customer managed key: 1 x $1.00 per key-month = $1.00" in out
    assert "dashboard (priced in full: an account's first three are free, if not used elsewhere)" in out
    assert " 10.000 " not in out and "x $0.3 " not in out


@pytest.mark.parametrize(("quantity", "unit", "usd", "text"), [
    (10.0, "10,000 requests", 0.03, "100,000 requests x $0.03 per 10,000"),
    (2.5, "million messages (5 KB each)", 1.0, "2,500,000 messages (5 KB each) x $1.00 per million"),
    (730.0, "hour", 0.2285, "730 x $0.2285 per hour"),
    (4.9344, "GB-month", 0.03, "4.934 x $0.03 per GB-month"),
    (0.0, "GB", 0.01, "0 x $0.01 per GB"),
])
def test_a_quantity_at_its_price(quantity, unit, usd, text):
    from telemetry.commands.cost import priced

    assert priced(quantity, unit, usd) == text
