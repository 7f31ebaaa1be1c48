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
  unreadable (the exit code says so);
- otherwise: its original payload is published to its original topic with AWS IoT's data plane
  Publish (QoS 1), the same topic the device used, so the rule runs on it again and writes it to
  Kafka with the key and headers a device message gets; then the message is deleted.

Once, idempotently. SQS standard queues deliver a message at least once, and a delete can fail or
come too late (SQS Developer Guide, "Amazon SQS standard queues", "Amazon SQS visibility
timeout"). The replay keeps a journal of the SQS message ids it published (a local file,
--journal), written after each publish and before the delete: a message received again whose id is
in the journal is deleted without being published again. The journal keeps an id for 15 days
(the queue keeps a message for 14). What it cannot cover: a replay killed between a publish and its
journal line (at most one message per worker is then published twice), and a failure AWS IoT
reported to the error action although the broker had the message (a timeout after the write): the
lake has it twice, with the same device_id and seq.

Pacing. Published messages count against the account's inbound publish quota that devices share
(AWS IoT Core endpoints and quotas). The replay publishes at most --rate messages a second
(default a tenth of device_gateway.publish_quota_per_s) over --workers threads; throttling is
retried by botocore's standard retry mode and, past it, stops the replay (what was published is
journaled and deleted; run it again).

Needs sqs:ReceiveMessage, sqs:DeleteMessage, sqs:ChangeMessageVisibility and
sqs:GetQueueAttributes on the queue, iot:Publish on arn:aws:iot:<region>:<account>:topic/telemetry/*,
iot:DescribeEndpoint and cloudformation:DescribeStacks.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import json
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Protocol

from scripts.cluster_inventory import ToolError, deployed_outputs
from scripts.provision_devices import device_gateway_stack_name
from stacks.config import EnvironmentConfig, load_environment, read_environments
from stacks.naming import FAILED_DELIVERIES_QUEUE_OUTPUT, device_rule_name, device_topic_filter

# ReceiveMessage: at most 10 messages per call; WaitTimeSeconds up to 20 makes it a long poll,
# which "queries all of the servers" where a short poll samples some of them, so an empty answer
# means the queue has nothing visible (SQS Developer Guide, "Amazon SQS short and long polling").
RECEIVE_BATCH = 10
WAIT_SECONDS = 5
# How long a received message stays invisible while its worker publishes and deletes it.
VISIBILITY_SECONDS = 300
# A message left in the queue is hidden for the rest of the run, so the workers do not receive it
# again, and made visible when the run ends. SQS caps a message's visibility at 12 hours from the
# ReceiveMessage, extensions included (API Reference, ChangeMessageVisibility); a run longer than
# this sees such a message again and does not count it twice.
LEFT_VISIBILITY_SECONDS = 6 * 3600
# The journal remembers an id a day longer than SQS keeps a message (14 days).
JOURNAL_DAYS = 15
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
    """SQS message ids already published, one `<id> <epoch seconds>` line each, fsynced."""

    def __init__(self, path: Path, now: float | None = None) -> None:
        self.path = path
        self._lock = threading.Lock()
        now = time.time() if now is None else now
        horizon = now - JOURNAL_DAYS * 86400
        self._published: dict[str, float] = {}
        self._claimed: set[str] = set()
        if path.exists():
            for line in path.read_text().splitlines():
                message_id, _, at = line.partition(" ")
                try:
                    if float(at) >= horizon:
                        self._published[message_id] = float(at)
                except ValueError:
                    raise ToolError(f"{path} is not a replay journal (line {line[:60]!r}); move it away or pass --journal") from None
        path.parent.mkdir(parents=True, exist_ok=True)
        # Rewritten without what expired, then appended to.
        kept = "".join(f"{i} {at:.0f}\n" for i, at in self._published.items())
        temporary = path.with_name(path.name + ".tmp")
        temporary.write_text(kept)
        os.replace(temporary, path)
        self._file = open(path, "a")  # noqa: SIM115 - closed by close()

    def __contains__(self, message_id: str) -> bool:
        with self._lock:
            return message_id in self._published

    def claim(self, message_id: str) -> bool:
        """True when this id is neither published nor being published by another worker (SQS
        may hand one message to two receivers at once)."""
        with self._lock:
            if message_id in self._published or message_id in self._claimed:
                return False
            self._claimed.add(message_id)
            return True

    def release(self, message_id: str) -> None:
        """Not published after all: another receive of it may try again."""
        with self._lock:
            self._claimed.discard(message_id)

    def record(self, message_id: str) -> None:
        with self._lock:
            at = time.time()
            self._file.write(f"{message_id} {at:.0f}\n")
            self._file.flush()
            os.fsync(self._file.fileno())
            self._published[message_id] = at
            self._claimed.discard(message_id)

    def close(self) -> None:
        self._file.close()


@dataclass
class Tally:
    replayed: int = 0
    already_replayed: int = 0  # in the journal: deleted without publishing again
    left_before_since: int = 0
    left_failed_again: int = 0  # queued after the replay started
    unreadable: int = 0
    delete_failures: int = 0  # published and journaled; the next replay deletes them
    stopped: str = ""  # why the replay stopped before the queue was empty
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, name: str, count: int = 1) -> None:
        with self._lock:
            setattr(self, name, getattr(self, name) + count)

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
    ) -> None:
        self.sqs, self.queue_url, self.publisher, self.journal = sqs, queue_url, publisher, journal
        self.rule_name, self.pattern = rule_name, topic_pattern(topic_filter)
        self.since = since
        self.pacer = Pacer(rate)
        self.workers = workers
        self.wait_seconds = WAIT_SECONDS if wait_seconds is None else wait_seconds
        # A worker's batch is published well within the visibility timeout even at the slowest
        # --rate, so no message turns visible to another worker while its first one holds it.
        self.batch = max(1, min(RECEIVE_BATCH, int(rate * VISIBILITY_SECONDS / 2 / workers)))
        self.tally = Tally()
        self.started = datetime.now(timezone.utc)
        self._left: dict[str, str] = {}  # message id -> receipt handle, made visible at the end
        self._left_lock = threading.Lock()
        self._stop = threading.Event()

    def run(self) -> Tally:
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
        finally:
            self._show_left()
        return self.tally

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
        except Exception as error:  # noqa: BLE001 - one worker's failure stops the replay, worded
            self._stop.set()
            with self.tally._lock:
                self.tally.stopped = self.tally.stopped or f"{type(error).__name__}: {error}"

    def _handle(self, messages: Sequence[dict]) -> None:
        done: list[dict] = []
        left: list[dict] = []
        try:
            for message in messages:
                failed = parse(message, self.rule_name, self.pattern)
                with self._left_lock:
                    seen = message["MessageId"] in self._left
                if seen:  # left earlier in this run and visible again: leave it, counted once
                    left.append(message)
                elif failed is None:
                    self.tally.add("unreadable")
                    left.append(message)
                elif failed.queued_at < self.since:
                    self.tally.add("left_before_since")
                    left.append(message)
                elif failed.queued_at >= self.started:
                    self.tally.add("left_failed_again")
                    left.append(message)
                elif failed.message_id in self.journal:
                    self.tally.add("already_replayed")
                    done.append(message)
                elif self._stop.is_set() or not self.journal.claim(failed.message_id):
                    left.append(message)  # stopping, or another worker publishes it right now
                else:
                    try:
                        self.pacer.wait()
                        self.publisher.publish(failed.topic, failed.payload)
                    except BaseException:
                        self.journal.release(failed.message_id)
                        raise
                    self.journal.record(failed.message_id)
                    self.tally.add("replayed")
                    done.append(message)
        except BaseException:
            handled = {m["MessageId"] for m in done + left}
            left += [m for m in messages if m["MessageId"] not in handled]
            raise
        finally:
            self._delete(done)
            self._hide(left)

    def _delete(self, messages: Sequence[dict]) -> None:
        if not messages:
            return
        answer = self.sqs.delete_message_batch(
            QueueUrl=self.queue_url,
            Entries=[{"Id": str(n), "ReceiptHandle": m["ReceiptHandle"]} for n, m in enumerate(messages)],
        )
        self.tally.add("delete_failures", len(answer.get("Failed", [])))

    def _hide(self, messages: Sequence[dict]) -> None:
        """Out of the workers' way for the rest of the run; _show_left() brings them back."""
        if not messages:
            return
        with self._left_lock:
            for message in messages:
                self._left[message["MessageId"]] = message["ReceiptHandle"]
        self._change_visibility([(m["MessageId"], m["ReceiptHandle"]) for m in messages], LEFT_VISIBILITY_SECONDS)

    def _show_left(self) -> None:
        with self._left_lock:
            left = list(self._left.items())
            self._left.clear()
        for start in range(0, len(left), RECEIVE_BATCH):
            try:
                self._change_visibility(left[start : start + RECEIVE_BATCH], 0)
            except Exception:  # noqa: BLE001 - they come back by themselves after LEFT_VISIBILITY_SECONDS
                pass

    def _change_visibility(self, messages: Iterable[tuple[str, str]], seconds: int) -> None:
        self.sqs.change_message_visibility_batch(
            QueueUrl=self.queue_url,
            Entries=[
                {"Id": str(n), "ReceiptHandle": handle, "VisibilityTimeout": seconds}
                for n, (_, handle) in enumerate(messages)
            ],
        )


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
    parser.add_argument("--workers", type=_positive(int, 1, 64), default=8, metavar="N",
                        help="threads receiving and publishing (default 8)")
    parser.add_argument("--journal", type=Path, metavar="FILE",
                        help="the ids already published (default $XDG_STATE_HOME/telemetry/replay-<prefix>.journal)")
    parser.add_argument("--dry-run", action="store_true",
                        help="show the queue and what would be replayed; receive, publish and delete nothing")


def plan_text(config: EnvironmentConfig, queue_url: str, attributes: dict, args, rate: float, journal: Path) -> str:
    visible = int(attributes.get("ApproximateNumberOfMessages", 0))
    hidden = int(attributes.get("ApproximateNumberOfMessagesNotVisible", 0))
    return (
        f"queue {queue_url}: about {visible:,} messages waiting ({hidden:,} received by someone and not yet deleted)\n"
        f"would publish each one queued since {args.since.isoformat(timespec='seconds')} to its topic under "
        f"{device_topic_filter()} at {rate:,.0f} msg/s over {args.workers} workers, rule {device_rule_name(config)} "
        f"writing it to Kafka topic {config.device_gateway.topic}; journal {journal}"
    )


def run(args: argparse.Namespace, session_factory: Callable[[str], object]) -> int:
    from botocore.config import Config

    from scripts.telemetry.errors import OperationFailed

    config = load_environment(read_environments(), args.env)
    session = session_factory(config.region)
    outputs = deployed_outputs(session.client("cloudformation", config=Config(**RETRIES)), device_gateway_stack_name(config))
    queue_url = outputs.get(FAILED_DELIVERIES_QUEUE_OUTPUT)  # ToolError when the stack lacks it
    sqs = session.client("sqs", config=Config(**RETRIES))
    rate = args.rate or max(1.0, config.device_gateway.publish_quota_per_s / 10)
    journal_path = args.journal or default_journal(config)
    if args.dry_run:
        attributes = sqs.get_queue_attributes(
            QueueUrl=queue_url, AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
        )["Attributes"]
        text = plan_text(config, queue_url, attributes, args, rate, journal_path)
        print(json.dumps({"queue_url": queue_url, **attributes, "since": args.since.isoformat(), "rate": rate,
                          "journal": str(journal_path), "dry_run": True}, indent=2) if args.format == "json" else text)
        return 0
    endpoint = session.client("iot", config=Config(**RETRIES)).describe_endpoint(endpointType="iot:Data-ATS")["endpointAddress"]
    publisher = IotDataPublisher(session.client("iot-data", endpoint_url=f"https://{endpoint}", config=Config(**RETRIES)))
    journal = Journal(journal_path)
    try:
        replay = Replay(sqs, queue_url, publisher, journal, rule_name=device_rule_name(config),
                        topic_filter=device_topic_filter(), since=args.since, rate=rate, workers=args.workers)
        tally = replay.run()
    finally:
        journal.close()
    report(tally, args.format)
    if tally.stopped:
        raise OperationFailed(f"the replay stopped: {tally.stopped}; what it published is journaled, run it again")
    problems = []
    if tally.unreadable:
        problems.append(f"{tally.unreadable} messages are not error action messages of rule {device_rule_name(config)} "
                        "(left in the queue)")
    if tally.left_failed_again:
        problems.append(f"{tally.left_failed_again} messages failed while the replay ran (the Kafka action is "
                        "still failing, or new failures): fix the action, then run again")
    if problems:
        raise OperationFailed("; ".join(problems))
    return 0


def report(tally: Tally, output_format: str) -> None:
    if output_format == "json":
        print(json.dumps(tally.as_dict(), indent=2))
        return
    print(
        f"replayed {tally.replayed:,}; already replayed before (deleted only) {tally.already_replayed:,}; "
        f"left: {tally.left_before_since:,} queued before --since, {tally.left_failed_again:,} failed again during "
        f"the replay, {tally.unreadable:,} unreadable; deletes to retry next run {tally.delete_failures:,}"
    )
