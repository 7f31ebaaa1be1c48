"""`telemetry devices replay --env ENV --since T`: publish again the device messages the IoT rule
could not deliver to Kafka, so that they reach the topic, and the lake, once.

Where they wait. The rule's error action sends each failed message to the device gateway stack's
queue (output FailedDeliveriesQueueUrl; stacks/constructs/failed_deliveries.py) as the error action
message: {"ruleName", "topic", "clientId", "base64OriginalPayload", "failures": [...], ...}
(AWS IoT Developer Guide, "Error handling (error action)").

What a replay does with each message it receives from the queue:
- one the queue took in before --since, or after this replay started (it failed again while the
  replay ran, or is a new failure): left in the queue, visible again when the replay ends;
- one that is not an error action message of this environment's rule: left, and counted as
  unreadable;
- otherwise: its original payload is published to its original topic with AWS IoT's data plane
  Publish (QoS 1), the same topic the device used, so the rule runs on it again and writes it to
  Kafka with the key and headers a device message gets ("Rules for AWS IoT": a rule runs on each
  message sent to a topic its filter matches); then the message is deleted.
After the last publish it waits --settle-seconds and takes what failed again. It exits 1 while
anything is left to do: messages that failed again, unreadable ones, messages still visible (an
empty long poll also means the queue's in-flight limit was reached), or a message left behind
that is 10 days old (its receives by earlier replays may hide it from the Expiring alarm: SQS
leaves a message received three times out of ApproximateAgeOfOldestMessage).

Once, idempotently. SQS standard queues deliver a message at least once, and a delete can fail or
come too late (SQS Developer Guide, "Amazon SQS standard queues"; API Reference, DeleteMessage:
"If you use an old ReceiptHandle, the request will succeed, but the message might not be
deleted"). The replay keeps a journal of the SQS message ids it published (a SQLite file,
--journal), committed after each batch's publishes and before its delete: a message received
again whose id is in the journal is deleted without being published again. The journal keeps an
id for 15 days (the queue keeps a message for 14). What it cannot cover: a replay killed between
a publish and its batch's commit (at most one batch, ten messages, per worker is then published
twice), and a failure AWS IoT reported to the error action although the broker had the message (a
timeout after the write): the lake has it twice, with the same device_id and seq.

What a successful Publish does not say: the rules engine may still throttle the message
(RuleMessageThrottled, "AWS IoT metrics and dimensions"), and then it reaches neither Kafka nor the
error action. The replay's pace keeps it well under the account's quotas; the RuleThrottles alarm
covers the replay's window too.

Pacing. Published messages count against the account's inbound publish quota that devices share
(AWS IoT Core endpoints and quotas). The replay publishes at most --rate messages a second
(default a tenth of device_gateway.publish_quota_per_s) over --workers threads, each one HTTPS
publish at a time; throttling is retried by botocore's standard retry mode and, past it, stops
the replay (what was published is journaled and deleted; run it again).

Needs sqs:ReceiveMessage, sqs:DeleteMessage, sqs:ChangeMessageVisibility and
sqs:GetQueueAttributes on the queue, iot:Publish on arn:aws:iot:<region>:<account>:topic/telemetry/<environment>/*,
iot:DescribeEndpoint and cloudformation:DescribeStacks. --dry-run needs none of them: offline, it
names the queue, the pace and the journal, and what a run would read first (the queue's URL and
contents).
"""

from __future__ import annotations

import argparse
import base64
import binascii
import json
import os
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime, timedelta, timezone
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Protocol

from stacks.config import EnvironmentConfig, load_environment, read_environments
from stacks.naming import (
    FAILED_DELIVERIES_EXPIRY_WARNING_DAYS,
    FAILED_DELIVERIES_QUEUE_OUTPUT,
    SQS_MAX_RETENTION_DAYS,
    device_failed_deliveries_queue_name,
    device_rule_name,
    device_topic_filter,
)
from telemetry.shared.cluster_inventory import deployed_outputs, device_gateway_stack_name
from telemetry.shared.errors import ToolError

# ReceiveMessage: at most 10 messages per call; WaitTimeSeconds up to 20 makes it a long poll,
# which "queries all of the servers" where a short poll samples some of them, so an empty answer
# means the queue has nothing visible (SQS Developer Guide, "Amazon SQS short and long polling").
RECEIVE_BATCH = 10
WAIT_SECONDS = 5
# How long a received message stays invisible while its worker publishes and deletes it.
VISIBILITY_SECONDS = 300
# A message left in the queue is hidden for the rest of the run, so the workers do not receive it
# again, and made visible when the run ends. SQS caps a message's visibility at 12 hours from its
# ReceiveMessage, extensions included (API Reference, ChangeMessageVisibility); a run longer than
# six hours receives such a message again, and does not count it twice.
LEFT_VISIBILITY_SECONDS = 6 * 3600
# Hidden messages count towards a standard queue's ~120,000 in-flight messages; the replay stops
# well before, since past it every long poll answers empty.
MAX_LEFT = 100_000
# How long the replay waits after its last publish for the ones the Kafka action fails again.
SETTLE_SECONDS = 30
WORKERS = 16
# The journal remembers an id a day longer than SQS keeps a message.
JOURNAL_DAYS = SQS_MAX_RETENTION_DAYS + 1
RETRIES = {"retries": {"mode": "standard", "max_attempts": 8}}
QOS = 1  # AWS IoT's Publish accepts 0 or 1; 1, as devices publish
_RELATIVE = re.compile(r"^(?P<amount>\d+)(?P<unit>[mhd])$")
_UNITS = {"m": "minutes", "h": "hours", "d": "days"}


class Publisher(Protocol):
    def publish(self, topic: str, payload: bytes) -> None: ...


class IotDataPublisher:
    """AWS IoT's data plane Publish (HTTPS), as the device would have published over MQTT."""

    def __init__(self, client) -> None:
        self._client = client

    def publish(self, topic: str, payload: bytes) -> None:
        self._client.publish(topic=topic, qos=QOS, payload=payload)


@dataclass(frozen=True)
class FailedMessage:
    message_id: str
    receipt_handle: str
    queued_at: datetime  # SentTimestamp: when the error action put it in the queue
    topic: str
    payload: bytes


def queued_at(message: dict) -> datetime:
    """SentTimestamp is epoch milliseconds (SQS API Reference, ReceiveMessage)."""
    return datetime.fromtimestamp(int(message["Attributes"]["SentTimestamp"]) / 1000, timezone.utc)


def parse(message: dict, rule_name: str, topic_pattern: re.Pattern) -> FailedMessage | None:
    """The error action message in `message`'s body, or None when it is not one of `rule_name`'s."""
    try:
        body = json.loads(message["Body"])
        topic, encoded = body["topic"], body["base64OriginalPayload"]
        if body["ruleName"] != rule_name or not isinstance(topic, str) or not topic_pattern.match(topic):
            return None
        payload = base64.b64decode(encoded, validate=True)
    except (ValueError, KeyError, TypeError, binascii.Error):
        return None
    return FailedMessage(message["MessageId"], message["ReceiptHandle"], queued_at(message), topic, payload)


def topic_pattern(topic_filter: str) -> re.Pattern:
    """The rule's topic filter (`+` one level) as a pattern a replayed topic must match."""
    return re.compile("^" + "/".join("[^/]+" if part == "+" else re.escape(part) for part in topic_filter.split("/")) + "$")


class Journal:
    """SQS message ids already published, in a SQLite file: looked up on disk (an outage's hundreds
    of millions of ids do not fit in memory), written a batch at a time in one committed
    transaction (SQLite's default synchronous=FULL syncs it to disk), pruned after JOURNAL_DAYS."""

    def __init__(self, path: Path, now: float | None = None) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._claimed: set[str] = set()
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
            self._db.execute("CREATE TABLE IF NOT EXISTS published (message_id TEXT PRIMARY KEY, at REAL NOT NULL)")
            horizon = (time.time() if now is None else now) - JOURNAL_DAYS * 86400
            self._db.execute("DELETE FROM published WHERE at < ?", (horizon,))
        except sqlite3.DatabaseError as error:
            raise ToolError(f"{path} is not a replay journal ({error}); move it away or pass --journal") from None

    def __contains__(self, message_id: str) -> bool:
        with self._lock:
            found = self._db.execute("SELECT 1 FROM published WHERE message_id = ?", (message_id,)).fetchone()
        return found is not None

    def claim(self, message_id: str) -> bool:
        """True when this id is neither published nor being published by another worker (SQS
        may hand one message to two receivers at once)."""
        if message_id in self:
            return False
        with self._lock:
            if message_id in self._claimed:
                return False
            self._claimed.add(message_id)
            return True

    def release(self, message_ids: Iterable[str]) -> None:
        """Not published after all: another receive of them may try again."""
        with self._lock:
            self._claimed.difference_update(message_ids)

    def record(self, message_ids: Sequence[str]) -> None:
        """Published: one transaction for the batch, on disk when this returns."""
        if not message_ids:
            return
        at = time.time()
        with self._lock:
            self._db.execute("BEGIN")
            self._db.executemany("INSERT OR REPLACE INTO published VALUES (?, ?)", [(i, at) for i in message_ids])
            self._db.execute("COMMIT")
            self._claimed.difference_update(message_ids)

    def close(self) -> None:
        self._db.close()


@dataclass
class Tally:
    replayed: int = 0
    already_replayed: int = 0  # in the journal: deleted without publishing again
    left_before_since: int = 0
    left_failed_again: int = 0  # queued after the replay started
    unreadable: int = 0
    delete_failures: int = 0  # published and journaled; the next replay deletes them
    visibility_failures: int = 0  # left messages SQS did not hide or show again as asked
    still_visible: int = 0  # waiting in the queue when the replay ended, not received by it
    oldest_left_days: float = 0.0  # the age of the oldest message left in the queue
    stopped: str = ""  # why the replay stopped before the queue was empty
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, name: str, count: int = 1) -> None:
        with self._lock:
            setattr(self, name, getattr(self, name) + count)

    def left_at(self, queued: datetime, now: datetime) -> None:
        with self._lock:
            self.oldest_left_days = max(self.oldest_left_days, round((now - queued).total_seconds() / 86400, 2))

    def stop(self, reason: str) -> None:
        with self._lock:
            self.stopped = self.stopped or reason

    def as_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self) if not f.name.startswith("_")}


class Pacer:
    """At most `rate` publishes a second over all workers."""

    def __init__(self, rate: float, clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep):
        self._interval = 1.0 / rate
        self._next = clock()
        self._lock = threading.Lock()
        self._clock, self._sleep = clock, sleep

    def wait(self) -> None:
        with self._lock:
            now = self._clock()
            at = max(self._next, now)
            self._next = at + self._interval
        if at > now:
            self._sleep(at - now)


class Replay:
    def __init__(
        self,
        sqs,
        queue_url: str,
        publisher: Publisher,
        journal: Journal,
        *,
        rule_name: str,
        topic_filter: str,
        since: datetime,
        rate: float,
        workers: int,
        wait_seconds: int | None = None,
        settle_seconds: float = 0.0,
    ) -> None:
        self.sqs, self.queue_url, self.publisher, self.journal = sqs, queue_url, publisher, journal
        self.rule_name, self.pattern = rule_name, topic_pattern(topic_filter)
        self.since = since
        self.pacer = Pacer(rate)
        self.workers = workers
        self.wait_seconds = WAIT_SECONDS if wait_seconds is None else wait_seconds
        self.settle_seconds = settle_seconds
        # A worker's batch is published well within the visibility timeout even at the slowest
        # --rate, so no message turns visible to another worker while its first one holds it.
        self.batch = max(1, min(RECEIVE_BATCH, int(rate * VISIBILITY_SECONDS / 2 / workers)))
        self.tally = Tally()
        self.started = datetime.now(timezone.utc)
        self._left: dict[str, str] = {}  # message id -> receipt handle, made visible at the end
        self._left_lock = threading.Lock()
        self._stop = threading.Event()

    def run(self) -> Tally:
        # SentTimestamp is SQS's clock. The replay's start must not be later than SQS's time, or a
        # message failing again during the replay would look older and be published again and
        # again: it is the earlier of this machine's time and the Date of an SQS answer (whole
        # seconds). A message queued just before, in that second, is left as failed again, and
        # the next run replays it.
        clock = self._queue_clock()
        if clock is not None:
            self.started = min(self.started, clock)
        try:
            self._pass()
            if self.settle_seconds and not self._stop.is_set():
                # The Kafka action fails a replayed message some time after its publish (its
                # timeout is not documented): wait, then take what came back.
                self._stop.wait(self.settle_seconds)
                self._pass()
            if not self._stop.is_set():
                # An empty long poll also answers when the queue's in-flight messages reach SQS's
                # limit (about 120,000 for a standard queue, SQS Developer Guide, "Amazon SQS
                # standard queue quotas": "If you use long polling, Amazon SQS returns no error
                # messages"), which the messages left here count towards: what is still visible was
                # not replayed.
                self.tally.still_visible = self._visible()
        finally:
            self._show_left()
        return self.tally

    def _pass(self) -> None:
        threads = [threading.Thread(target=self._worker, name=f"replay-{n}", daemon=True) for n in range(self.workers)]
        try:
            for thread in threads:
                thread.start()
            for thread in threads:
                while thread.is_alive():
                    thread.join(0.5)
        except KeyboardInterrupt:
            self._stop.set()
            for thread in threads:
                thread.join()
            raise

    def _visible_messages(self) -> dict:
        """GetQueueAttributes' answer for ApproximateNumberOfMessages (the messages visible)."""
        return self.sqs.get_queue_attributes(QueueUrl=self.queue_url, AttributeNames=["ApproximateNumberOfMessages"])

    def _queue_clock(self) -> datetime | None:
        date = self._visible_messages().get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("date")
        try:
            return parsedate_to_datetime(date).astimezone(timezone.utc) if date else None
        except (TypeError, ValueError):
            return None

    def _visible(self) -> int:
        return int(self._visible_messages()["Attributes"]["ApproximateNumberOfMessages"])

    def _worker(self) -> None:
        try:
            while not self._stop.is_set():
                messages = self.sqs.receive_message(
                    QueueUrl=self.queue_url,
                    MaxNumberOfMessages=self.batch,
                    WaitTimeSeconds=self.wait_seconds,
                    VisibilityTimeout=VISIBILITY_SECONDS,
                    MessageSystemAttributeNames=["SentTimestamp"],
                ).get("Messages", [])
                if not messages:
                    return
                self._handle(messages)
                with self._left_lock:
                    left = len(self._left)
                if left >= MAX_LEFT:
                    self.tally.stop(
                        f"{left:,} messages left in the queue by this replay are hidden, near SQS's limit of about "
                        "120,000 in flight; replay with an earlier --since, or read the unreadable ones out"
                    )
                    self._stop.set()
        except Exception as error:  # noqa: BLE001 - one worker's failure stops the replay, worded
            self._stop.set()
            self.tally.stop(f"{type(error).__name__}: {error}")

    def _handle(self, messages: Sequence[dict]) -> None:
        done: list[dict] = []
        left: list[dict] = []
        published: list[str] = []  # journaled together once the batch is out
        now = datetime.now(timezone.utc)
        try:
            for message in messages:
                with self._left_lock:
                    seen = message["MessageId"] in self._left
                failed = None if seen else parse(message, self.rule_name, self.pattern)
                if seen:  # left earlier in this run and visible again: leave it, counted once
                    left.append(message)
                elif failed is None:
                    self.tally.add("unreadable")
                    self.tally.left_at(queued_at(message), now)
                    left.append(message)
                elif failed.queued_at < self.since:
                    self.tally.add("left_before_since")
                    self.tally.left_at(failed.queued_at, now)
                    left.append(message)
                elif failed.queued_at >= self.started:
                    self.tally.add("left_failed_again")
                    left.append(message)
                elif failed.message_id in self.journal:
                    self.tally.add("already_replayed")
                    done.append(message)
                elif self._stop.is_set():
                    left.append(message)
                elif not self.journal.claim(failed.message_id):
                    # SQS handed it to another worker too, which publishes and deletes it now (or,
                    # if that fails, it turns visible again): nothing to do here.
                    continue
                else:
                    try:
                        self.pacer.wait()
                        self.publisher.publish(failed.topic, failed.payload)
                    except BaseException:
                        self.journal.release([failed.message_id])
                        raise
                    published.append(failed.message_id)
                    done.append(message)
        except BaseException:
            handled = {m["MessageId"] for m in done + left}
            left += [m for m in messages if m["MessageId"] not in handled]
            raise
        finally:
            self.journal.record(published)
            self.tally.add("replayed", len(published))
            self._delete(done)
            self._hide(left)

    def _delete(self, messages: Sequence[dict]) -> None:
        if not messages:
            return
        answer = self.sqs.delete_message_batch(
            QueueUrl=self.queue_url,
            Entries=[{"Id": str(n), "ReceiptHandle": m["ReceiptHandle"]} for n, m in enumerate(messages)],
        )
        # A batch answers 200 with failed entries (API Reference, DeleteMessageBatch).
        self.tally.add("delete_failures", len(answer.get("Failed", [])))

    def _hide(self, messages: Sequence[dict]) -> None:
        """Out of the workers' way for the rest of the run; _show_left() brings them back."""
        if not messages:
            return
        with self._left_lock:
            for message in messages:
                self._left[message["MessageId"]] = message["ReceiptHandle"]
        self._change_visibility([m["ReceiptHandle"] for m in messages], LEFT_VISIBILITY_SECONDS)

    def _show_left(self) -> None:
        with self._left_lock:
            left = list(self._left.values())
            self._left.clear()
        for start in range(0, len(left), RECEIVE_BATCH):
            try:
                self._change_visibility(left[start : start + RECEIVE_BATCH], 0)
            except Exception:  # noqa: BLE001 - counted; they come back by themselves after LEFT_VISIBILITY_SECONDS
                self.tally.add("visibility_failures", len(left[start : start + RECEIVE_BATCH]))

    def _change_visibility(self, receipt_handles: Sequence[str], seconds: int) -> None:
        answer = self.sqs.change_message_visibility_batch(
            QueueUrl=self.queue_url,
            Entries=[
                {"Id": str(n), "ReceiptHandle": handle, "VisibilityTimeout": seconds}
                for n, handle in enumerate(receipt_handles)
            ],
        )
        self.tally.add("visibility_failures", len(answer.get("Failed", [])))


def parse_since(text: str, now: datetime | None = None) -> datetime:
    """An ISO 8601 time with its zone (2026-11-26T02:00Z) or an age (90m, 6h, 3d)."""
    now = now or datetime.now(timezone.utc)
    relative = _RELATIVE.match(text)
    if relative:
        return now - timedelta(**{_UNITS[relative["unit"]]: int(relative["amount"])})
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is neither a time with its zone (2026-11-26T02:00Z) nor an age (90m, 6h, 3d)"
        ) from None
    if at.tzinfo is None:
        raise argparse.ArgumentTypeError(f"{text!r} has no time zone; add Z for UTC or an offset such as +01:00")
    if at > now:
        raise argparse.ArgumentTypeError(f"{text} is in the future")
    return at.astimezone(timezone.utc)


def default_journal(config: EnvironmentConfig) -> Path:
    state = Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state")
    return state / "telemetry" / f"replay-{config.resource_prefix}.journal"


def _positive(kind: type, low, high):
    def check(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be {low}-{high:,}, got {text}")
        return value

    return check


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--since", required=True, type=parse_since, metavar="T",
                        help="replay messages that failed from T on: a time with its zone (2026-11-26T02:00Z) "
                        "or an age (90m, 6h, 3d); the queue keeps 14 days")
    parser.add_argument("--rate", type=_positive(float, 1, 100_000), metavar="N",
                        help="publish at most N messages a second (default: a tenth of "
                        "device_gateway.publish_quota_per_s, which devices share)")
    parser.add_argument("--workers", type=_positive(int, 1, 256), default=WORKERS, metavar="N",
                        help=f"threads receiving and publishing, each one publish at a time (default {WORKERS})")
    parser.add_argument("--settle-seconds", type=_positive(int, 0, 600), default=SETTLE_SECONDS, metavar="S",
                        help=f"after the last publish, wait S seconds for messages that fail again (default {SETTLE_SECONDS})")
    parser.add_argument("--journal", type=Path, metavar="FILE",
                        help="the ids already published (default $XDG_STATE_HOME/telemetry/replay-<prefix>.journal)")
    parser.add_argument("--dry-run", action="store_true",
                        help="offline: what a replay would read from the account and publish and delete; call and "
                        "change nothing")


def plan(args: argparse.Namespace, config: EnvironmentConfig, rate: float, journal: Path) -> int:
    """--dry-run: the replay as cdk.json and the flags give it, offline; the queue's contents are
    what a run reads."""
    from telemetry.shared.output import dry_run_plan

    queue, rule, since = device_failed_deliveries_queue_name(config), device_rule_name(config), args.since
    return dry_run_plan(
        args, config,
        summary=[f"replay the device messages rule {rule} could not deliver since {since.isoformat(timespec='seconds')}, "
                 f"from queue {queue}"],
        would_read=[
            f"the queue's URL: output {FAILED_DELIVERIES_QUEUE_OUTPUT} of stack {device_gateway_stack_name(config)} "
            "(CloudFormation)",
            "how many messages wait in the queue (SQS GetQueueAttributes), and each one as it is received",
            "the account's AWS IoT data endpoint (DescribeEndpoint)",
            f"the journal {journal}: the ids an earlier replay published",
        ],
        would_change=[
            f"publish each error action message of rule {rule} queued since then to its original topic under "
            f"{device_topic_filter(config)} (AWS IoT data plane Publish, QoS 1) at most {rate:,.0f} msg/s over "
            f"{args.workers} workers, so the rule writes it to Kafka topic {config.device_gateway.topic}",
            f"record each published id in the journal {journal}, then delete the message from the queue",
            "leave the others in the queue (queued before --since, failing again during the replay, unreadable), "
            f"visible again when the replay ends after waiting {args.settle_seconds} s for messages that fail again",
        ],
        queue=queue, since=since.isoformat(), rate=rate, workers=args.workers, journal=str(journal), rule=rule,
    )


def run(args: argparse.Namespace, session_factory: Callable[[str], object]) -> int:
    from botocore.config import Config

    config = load_environment(read_environments(), args.env)
    rate = args.rate or max(1.0, config.device_gateway.publish_quota_per_s / 10)
    journal_path = args.journal or default_journal(config)
    if args.dry_run:
        return plan(args, config, rate, journal_path)
    session = session_factory(config.region)
    outputs = deployed_outputs(session.client("cloudformation", config=Config(**RETRIES)), device_gateway_stack_name(config))
    queue_url = outputs.get(FAILED_DELIVERIES_QUEUE_OUTPUT)  # ToolError when the stack lacks it
    # One connection per worker (botocore keeps 10 by default).
    clients = Config(**RETRIES, max_pool_connections=args.workers + 1)
    sqs = session.client("sqs", config=clients)
    endpoint = session.client("iot", config=Config(**RETRIES)).describe_endpoint(endpointType="iot:Data-ATS")["endpointAddress"]
    publisher = IotDataPublisher(session.client("iot-data", endpoint_url=f"https://{endpoint}", config=clients))
    journal = Journal(journal_path)
    try:
        replay = Replay(sqs, queue_url, publisher, journal, rule_name=device_rule_name(config),
                        topic_filter=device_topic_filter(config), since=args.since, rate=rate, workers=args.workers,
                        settle_seconds=args.settle_seconds)
        tally = replay.run()
    finally:
        journal.close()
    report(tally, args.format)
    problems = outcome(tally, device_rule_name(config))
    if problems:
        from telemetry.shared.errors import OperationFailed

        raise OperationFailed(problems)
    return 0


def outcome(tally: Tally, rule_name: str) -> str:
    """What the operator must still do, on one line; "" when everything was replayed."""
    if tally.stopped:
        return f"the replay stopped: {tally.stopped}; what it published is journaled, run it again"
    problems = []
    if tally.unreadable:
        problems.append(f"{tally.unreadable:,} messages are not error action messages of rule {rule_name} "
                        "(left in the queue)")
    if tally.left_failed_again:
        problems.append(f"{tally.left_failed_again:,} messages failed while the replay ran (the Kafka action is "
                        "still failing, or new failures): fix the action, then run again")
    if tally.still_visible:
        problems.append(f"about {tally.still_visible:,} messages arrived or stayed visible without being received: "
                        "run again")
    if tally.oldest_left_days >= FAILED_DELIVERIES_EXPIRY_WARNING_DAYS:
        problems.append(f"a message left in the queue is {tally.oldest_left_days:g} days old and SQS deletes it at "
                        f"{SQS_MAX_RETENTION_DAYS}: replay with an earlier --since")
    return "; ".join(problems)


def report(tally: Tally, output_format: str) -> None:
    if output_format == "json":
        from telemetry.shared.output import document

        document(tally.as_dict())
        return
    print(
        f"replayed {tally.replayed:,}; already replayed before (deleted only) {tally.already_replayed:,}; "
        f"left: {tally.left_before_since:,} queued before --since, {tally.left_failed_again:,} failed again during "
        f"the replay, {tally.unreadable:,} unreadable (oldest {tally.oldest_left_days:g} days); deletes to retry "
        f"next run {tally.delete_failures:,}; visibility changes refused {tally.visibility_failures:,}"
    )


if __name__ == "__main__":  # run by path, as before the one front door
    from telemetry.shared.errors import moved

    raise SystemExit(moved("devices replay"))
