"""`telemetry devices replay`: the failed-deliveries queue in moto's SQS, filled with the error
action messages the rule's stand-in writes (devtools/iot_rule_bridge.py, "Error handling (error
action)"), replayed through a publisher that records what it was given; and once through the whole
command, where the publish goes to botocore's Stubber on the iot-data model."""

from __future__ import annotations

import base64
import json
import re
import sqlite3
import threading
import time
from datetime import datetime, timedelta, timezone

import pytest
from botocore.stub import Stubber

from devtools.iot_rule_bridge import KafkaRule
from telemetry import cli
from telemetry.commands.devices import replay
from tests.conftest import keep_params, model_answer
from tests.telemetry.stack_outputs import StubbedStackSession, outputs_list

RULE = "telemetry_dev_device_telemetry"
FILTER = "telemetry/dev/+/data"


def device_message(device: int, seq: int) -> tuple[str, bytes]:
    thing = f"telemetry-dev-device-{device:06d}"
    payload = json.dumps({"device_id": thing, "seq": seq, "sent_ns": 1_790_000_000_000_000_000 + seq}).encode()
    return f"telemetry/dev/{thing}/data", payload


def next_second() -> None:
    """The replay starts at SQS's time to the whole second, and leaves what was queued in that
    second for the next run: a test's messages go into the queue in an earlier second."""
    time.sleep(1 - time.time() % 1 + 0.01)


class Recorder:
    """A publisher that keeps what it was asked to publish, and can fail or run code on a call."""

    def __init__(self, fail_at: int | None = None, on_publish=None):
        self.published: list[tuple[str, bytes]] = []
        self.fail_at, self.on_publish = fail_at, on_publish
        self._lock = threading.Lock()

    def publish(self, topic: str, payload: bytes) -> None:
        with self._lock:
            if self.fail_at is not None and len(self.published) == self.fail_at:
                self.fail_at = None
                raise RuntimeError("ThrottlingException after retries")
            self.published.append((topic, payload))
        if self.on_publish:
            self.on_publish(topic, payload)


@pytest.fixture
def queue(moto_session, synthesized):
    sqs = moto_session.client("sqs")
    url = sqs.create_queue(QueueName="telemetry-dev-device-failed-deliveries")["QueueUrl"]
    rule = KafkaRule.from_template(synthesized("dev").stacks["device_gateway"])
    assert rule.name == RULE

    class Queue:
        def fail(self, topic: str, payload: bytes) -> None:
            """What the rule's error action sends when the Kafka action fails on this message."""
            sqs.send_message(QueueUrl=url, MessageBody=json.dumps(rule.error_message(topic, payload, "Broker: not available")))

        def raw(self, body: str) -> None:
            sqs.send_message(QueueUrl=url, MessageBody=body)

        def counts(self) -> tuple[int, int]:
            attributes = sqs.get_queue_attributes(
                QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
            )["Attributes"]
            return int(attributes["ApproximateNumberOfMessages"]), int(attributes["ApproximateNumberOfMessagesNotVisible"])

        def replay(self, publisher, tmp_path, *, since=None, workers=3, journal="journal", settle=0.0) -> replay.Tally:
            next_second()
            log = replay.Journal(tmp_path / journal)
            try:
                return replay.Replay(
                    sqs, url, publisher, log, rule_name=RULE, topic_filter=FILTER,
                    since=since or datetime.now(timezone.utc) - timedelta(hours=1),
                    rate=10_000, workers=workers, wait_seconds=0, settle_seconds=settle,
                ).run()  # fmt: skip
            finally:
                log.close()

    Queue.url, Queue.sqs = url, sqs
    return Queue()


def test_every_failed_message_is_published_once_to_its_topic_with_its_bytes_and_deleted(queue, tmp_path):
    sent = [device_message(device, seq) for device in range(1, 6) for seq in range(12)]
    for topic, payload in sent:
        queue.fail(topic, payload)
    recorder = Recorder()
    tally = queue.replay(recorder, tmp_path)
    assert sorted(recorder.published) == sorted(sent)
    # A standard queue delivers at least once ("Amazon SQS at-least-once delivery": a message may
    # be received again), and moto's, with three workers receiving at once on a busy machine, now
    # and then does: the journal then counts it already replayed and does not publish it twice.
    found = tally.as_dict()
    assert found.pop("already_replayed") <= 1
    assert found == {"replayed": 60, "left_before_since": 0, "left_failed_again": 0, "unreadable": 0,
                     "delete_failures": 0, "visibility_failures": 0, "still_visible": 0, "oldest_left_days": 0.0,
                     "stopped": ""}
    assert queue.counts() == (0, 0)
    assert queue.replay(Recorder(), tmp_path).replayed == 0


def every_entry_fails(sqs, operation: str, times: int | None = None) -> None:
    """`operation`, a batch call, answers 200 with every entry failed (API Reference,
    DeleteMessageBatch and ChangeMessageVisibilityBatch: "check for batch errors even when the call
    returns an HTTP status code of 200"), `times` times (every time when None)."""
    answered = []

    def refuse(model, context, **_):
        if times is not None and len(answered) >= times:
            return None
        answered.append(operation)
        failed = [{"Id": e["Id"], "SenderFault": True, "Code": "ReceiptHandleIsInvalid", "Message": "expired"}
                  for e in context["api_params"]["Entries"]]
        return model_answer(model, {"Successful": [], "Failed": failed})

    sqs.meta.events.register(f"provide-client-params.sqs.{operation}", keep_params)
    sqs.meta.events.register(f"before-call.sqs.{operation}", refuse)


def test_a_message_published_but_not_deleted_is_deleted_by_the_next_run_not_published_again(queue, tmp_path, monkeypatch):
    """The journal: DeleteMessageBatch refused once (the receipt handle expired, or the call
    failed), the message comes back after its visibility timeout, and is only deleted."""
    monkeypatch.setattr(replay, "VISIBILITY_SECONDS", 1)
    for seq in range(5):
        queue.fail(*device_message(1, seq))
    every_entry_fails(queue.sqs, "DeleteMessageBatch", times=1)
    first = Recorder()
    tally = queue.replay(first, tmp_path, workers=1)
    assert (tally.replayed, tally.delete_failures, tally.stopped) == (5, 5, "")
    time.sleep(1.1)
    second = Recorder()
    again = queue.replay(second, tmp_path, workers=1)
    assert second.published == [] and tally.already_replayed + again.already_replayed == 5
    assert sorted(first.published) == sorted(device_message(1, seq) for seq in range(5))
    assert queue.counts() == (0, 0)


def test_what_failed_before_since_or_while_the_replay_ran_stays_in_the_queue_visible(queue, tmp_path):
    """A message queued after the replay started is a new failure (the Kafka action still fails:
    here each publish fails again, as the rule would with the broker down): left for next time."""
    queue.fail(*device_message(1, 0))
    time.sleep(0.05)
    since = datetime.now(timezone.utc)
    time.sleep(0.05)
    queue.fail(*device_message(2, 0))
    recorder = Recorder(on_publish=lambda topic, payload: queue.fail(topic, payload))
    tally = queue.replay(recorder, tmp_path, since=since, workers=1)
    assert recorder.published == [device_message(2, 0)]
    assert (tally.replayed, tally.left_before_since, tally.left_failed_again) == (1, 1, 1)
    assert queue.counts() == (2, 0)  # both visible again for the next replay


@pytest.mark.parametrize(
    "body",
    [
        "not json",
        json.dumps({"ruleName": "telemetry_prod_device_telemetry", "topic": "telemetry/dev/x/data", "base64OriginalPayload": "e30="}),
        json.dumps({"ruleName": RULE, "topic": "elsewhere/x/data", "base64OriginalPayload": "e30="}),
        json.dumps({"ruleName": RULE, "topic": "telemetry/dev/x/data", "base64OriginalPayload": "not base64!"}),
        json.dumps({"ruleName": RULE, "topic": "telemetry/dev/x/data"}),
    ],
    ids=["not-json", "another-rule", "another-topic", "bad-base64", "no-payload"],
)
def test_a_message_that_is_not_this_rules_error_message_is_left_and_counted(queue, tmp_path, body):
    queue.raw(body)
    queue.fail(*device_message(1, 0))
    recorder = Recorder()
    tally = queue.replay(recorder, tmp_path, workers=1)
    assert recorder.published == [device_message(1, 0)]
    assert tally.unreadable == 1
    assert queue.counts() == (1, 0)


def test_a_publish_that_fails_stops_the_replay_and_a_rerun_publishes_the_rest_once(queue, tmp_path):
    sent = [device_message(device, seq) for device in range(1, 4) for seq in range(10)]
    for topic, payload in sent:
        queue.fail(topic, payload)
    first = Recorder(fail_at=7)
    tally = queue.replay(first, tmp_path, workers=2)
    assert "ThrottlingException" in tally.stopped
    assert 7 <= tally.replayed < len(sent)
    assert queue.counts()[1] == 0  # nothing left hidden: the rest is visible for the rerun
    second = Recorder()
    queue.replay(second, tmp_path, workers=2)
    assert sorted(first.published + second.published) == sorted(sent)  # each exactly once
    assert queue.counts() == (0, 0)


def test_the_journal_keeps_ids_15_days_and_refuses_a_file_that_is_not_one(tmp_path):
    path = tmp_path / "j"
    journal = replay.Journal(path)
    journal.record(["published"])
    assert journal.claim("new") and not journal.claim("new") and not journal.claim("published")
    journal.release(["new"])
    assert journal.claim("new")
    journal.close()
    later = replay.Journal(path, now=time.time() + 14 * 86400)
    assert "published" in later and "new" not in later  # a claim is not a publish
    later.close()
    forgotten = replay.Journal(path, now=time.time() + 16 * 86400)
    assert "published" not in forgotten
    forgotten.close()
    path.write_text("this is not a journal\n")
    with pytest.raises(replay.ToolError, match="is not a replay journal"):
        replay.Journal(path)


def test_the_pacer_spaces_publishes_at_the_rate():
    clock, slept = [100.0], []

    def sleep(seconds):
        slept.append(seconds)
        clock[0] += seconds

    pacer = replay.Pacer(4, clock=lambda: clock[0], sleep=sleep)
    for _ in range(5):
        pacer.wait()
    assert slept == [0.25, 0.25, 0.25, 0.25]


@pytest.mark.parametrize(
    "text, expected",
    [("90m", datetime(2026, 11, 26, 1, 30, tzinfo=timezone.utc)), ("3d", datetime(2026, 11, 23, 3, 0, tzinfo=timezone.utc)),
     ("2026-11-26T02:00Z", datetime(2026, 11, 26, 2, 0, tzinfo=timezone.utc)),
     ("2026-11-26T03:00+01:00", datetime(2026, 11, 26, 2, 0, tzinfo=timezone.utc))],
)
def test_since_is_a_time_with_its_zone_or_an_age(text, expected):
    assert replay.parse_since(text, now=datetime(2026, 11, 26, 3, 0, tzinfo=timezone.utc)) == expected


class Gateway(StubbedStackSession):
    """moto for SQS and IoT's DescribeEndpoint; DescribeStacks and iot-data Publish through
    botocore's Stubber, which checks each request against the service's model."""

    def __init__(self, session, queue_url: str, publishes: list[tuple[str, bytes]]):
        super().__init__(session, "Telemetry-dev-DeviceGateway", outputs_list({"FailedDeliveriesQueueUrl": queue_url}))
        self.iot_data = None
        self.publishes = publishes

    def client(self, name, **kwargs):
        if name != "iot-data":
            return super().client(name, **kwargs)
        # The account's own endpoint (moto makes up a new one on each DescribeEndpoint).
        assert re.fullmatch(r"https://[a-z0-9]+-ats\.iot\.eu-west-1\.amazonaws\.com", kwargs["endpoint_url"])
        self.iot_data = self.session.client("iot-data", **kwargs)
        stubber = Stubber(self.iot_data)
        for topic, payload in self.publishes:
            stubber.add_response("publish", {}, {"topic": topic, "qos": 1, "payload": payload})
        stubber.activate()
        self.stubber_iot = stubber
        return self.iot_data


def run_command(argv, factory, monkeypatch) -> int:
    monkeypatch.setattr(replay, "SETTLE_SECONDS", 0)
    next_second()
    monkeypatch.setattr(replay, "WAIT_SECONDS", 0)  # moto's long poll of an empty queue waits it out
    return cli.main(argv, session_factory=factory)


def test_the_command_replays_through_iot_data_publish_and_answers_json(queue, moto_session, tmp_path, monkeypatch, capsys):
    sent = [device_message(1, seq) for seq in range(3)]
    for topic, payload in sent:
        queue.fail(topic, payload)
    gateway = Gateway(moto_session, queue.url, sent)
    code = run_command(["devices", "replay", "--env", "dev", "--since", "1h", "--workers", "1",
                        "--journal", str(tmp_path / "j"), "--format", "json"], lambda region: gateway, monkeypatch)
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert json.loads(captured.out)["replayed"] == 3
    gateway.stubber_iot.assert_no_pending_responses()  # each publish made, in order, as the model allows
    assert queue.counts() == (0, 0)
    with sqlite3.connect(tmp_path / "j") as db:
        assert db.execute("SELECT COUNT(*) FROM published").fetchone() == (3,)


def test_the_dry_run_plans_offline_and_changes_nothing(queue, moto_session, tmp_path, monkeypatch, capsys):
    """Offline: the queue's contents are named as what a run reads first, not read."""
    queue.fail(*device_message(1, 0))

    def no_session(region):
        raise AssertionError("a dry run asked for an AWS session")

    code = run_command(["devices", "replay", "--env", "dev", "--since", "2h", "--dry-run", "--journal", str(tmp_path / "j")],
                       no_session, monkeypatch)
    out = capsys.readouterr().out
    assert code == 0
    assert "from queue telemetry-dev-device-failed-deliveries" in out
    assert "how many messages wait in the queue (SQS GetQueueAttributes)" in out
    assert "telemetry/dev/+/data" in out and "2,000 msg/s" in out
    assert queue.counts() == (1, 0) and not (tmp_path / "j").exists()


def test_messages_that_failed_again_fail_the_command_in_one_line(queue, moto_session, tmp_path, monkeypatch, capsys):
    """The Kafka action still fails: the replayed message comes back as a new error message."""
    queue.fail(*device_message(1, 0))
    queue.raw("garbage")
    gateway = Gateway(moto_session, queue.url, [device_message(1, 0)])
    original = replay.IotDataPublisher.publish

    def publish_and_fail_again(self, topic, payload):
        original(self, topic, payload)
        time.sleep(0.01)
        queue.fail(topic, payload)

    monkeypatch.setattr(replay.IotDataPublisher, "publish", publish_and_fail_again)
    code = run_command(["devices", "replay", "--env", "dev", "--since", "1h", "--workers", "1", "--journal",
                        str(tmp_path / "j")], lambda region: gateway, monkeypatch)
    captured = capsys.readouterr()
    assert code == 1
    (line,) = captured.err.strip().splitlines()
    assert line == (
        "telemetry: error: 1 messages are not error action messages of rule telemetry_dev_device_telemetry (left in "
        "the queue); 1 messages failed while the replay ran (the Kafka action is still failing, or new failures): "
        "fix the action, then run again"
    )
    assert captured.out.startswith("replayed 1;")
    assert queue.counts() == (2, 0)


def test_a_stack_without_the_queue_output_is_one_line_and_exit_2(moto_session, monkeypatch, capsys):
    session = StubbedStackSession(moto_session, "Telemetry-dev-DeviceGateway", outputs_list({"TopicRuleName": "x"}))
    code = run_command(["devices", "replay", "--env", "dev", "--since", "1h"], lambda region: session, monkeypatch)
    assert code == 2
    assert capsys.readouterr().err.strip() == (
        "telemetry: error: stack Telemetry-dev-DeviceGateway has no output FailedDeliveriesQueueUrl; redeploy the stack"
    )


def test_the_replayed_payload_is_the_devices_bytes():
    topic, payload = device_message(3, 9)
    body = {"ruleName": RULE, "topic": topic, "base64OriginalPayload": base64.b64encode(payload).decode()}
    message = {"MessageId": "m", "ReceiptHandle": "r", "Body": json.dumps(body), "Attributes": {"SentTimestamp": "1764122400000"}}
    failed = replay.parse(message, RULE, replay.topic_pattern(FILTER))
    assert (failed.topic, failed.payload) == (topic, payload)
    assert failed.queued_at == datetime(2025, 11, 26, 2, 0, tzinfo=timezone.utc)


def test_what_fails_again_after_the_last_publish_is_taken_in_the_settle_pass(queue, tmp_path):
    """The Kafka action fails a message some time after its publish; the replay waits for it."""
    queue.fail(*device_message(1, 0))

    def fail_later(topic, payload):
        threading.Timer(0.5, queue.fail, (topic, payload)).start()

    tally = queue.replay(Recorder(on_publish=fail_later), tmp_path, workers=1, settle=1.5)
    assert (tally.replayed, tally.left_failed_again) == (1, 1)
    assert replay.outcome(tally, RULE).startswith("1 messages failed while the replay ran")


def test_an_empty_receive_with_messages_still_visible_fails_the_replay(queue, tmp_path):
    """At about 120,000 in-flight messages a long poll answers empty, with no error (SQS Developer
    Guide, "Amazon SQS standard queue quotas"): the replay must not take that for an empty queue."""
    for seq in range(4):
        queue.fail(*device_message(1, seq))
    queue.sqs.meta.events.register(
        "before-call.sqs.ReceiveMessage", lambda model, **_: model_answer(model, {"Messages": []})
    )
    recorder = Recorder()
    tally = queue.replay(recorder, tmp_path, workers=1)
    assert recorder.published == [] and tally.still_visible == 4
    assert replay.outcome(tally, RULE) == "about 4 messages arrived or stayed visible without being received: run again"


def test_the_replay_stops_before_the_messages_it_leaves_fill_the_in_flight_limit(queue, tmp_path, monkeypatch):
    monkeypatch.setattr(replay, "MAX_LEFT", 3)
    for seq in range(6):
        queue.fail(*device_message(1, seq))
    time.sleep(0.05)
    tally = queue.replay(Recorder(), tmp_path, workers=1, since=datetime.now(timezone.utc))
    assert tally.left_before_since >= 3 and "near SQS's limit of about 120,000 in flight" in tally.stopped
    assert queue.counts() == (6, 0)  # all visible again


def test_visibility_changes_sqs_refuses_are_counted(queue, tmp_path):
    queue.raw("not an error action message")
    every_entry_fails(queue.sqs, "ChangeMessageVisibilityBatch")
    tally = queue.replay(Recorder(), tmp_path, workers=1)
    assert (tally.unreadable, tally.visibility_failures) == (1, 2)  # hiding it, and showing it again


def test_a_message_left_ten_days_fails_the_replay_before_sqs_deletes_it():
    """Three receives take a message out of ApproximateAgeOfOldestMessage (SQS Developer Guide,
    "Available CloudWatch metrics for Amazon SQS"): the replay that leaves it says so itself."""
    tally = replay.Tally(left_before_since=1, oldest_left_days=10.2)
    assert replay.outcome(tally, RULE) == (
        "a message left in the queue is 10.2 days old and SQS deletes it at 14: replay with an earlier --since"
    )
    tally.left_at(datetime(2026, 11, 1, tzinfo=timezone.utc), datetime(2026, 11, 13, 12, tzinfo=timezone.utc))
    assert tally.oldest_left_days == 12.5
