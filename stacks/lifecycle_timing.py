"""The node lifecycle's timing inside AWS's limits: one model that the configuration is validated
against and the state machines are built from.

A lifecycle action lives only as long as heartbeats keep it, and never longer than the hook's
global timeout; a Standard execution dies at a fixed number of history events. Each limit below
names its source, and each retry the state machines use is declared here, so that the longest
the hook can go without a heartbeat, how long a failed drain is really held and how many events
an execution writes are computed from the very numbers that are synthesized.

Heartbeats. Every step a state machine runs while it works on an action records a heartbeat
before anything else (lambdas/node_lifecycle/workflow.py). So between two heartbeat attempts
there is at most one attempt's span: the invoke retries that start no run (Lambda throttling),
the run (its Task's timeout), and the longest wait before the next step (a Wait state, a Retry
delay or the alarm's publish). The hook must outlive three such spans (two attempts in a row
that fail, and a third that lands), the time the third takes to land, and a margin.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# -- AWS's limits -------------------------------------------------------------------------

# A lifecycle action times out at the smaller of 48 hours and 100 x its heartbeat timeout, however
# many heartbeats it gets (Auto Scaling API Reference, LifecycleHook: GlobalTimeout; User Guide,
# "Amazon EC2 Auto Scaling lifecycle hooks", "Lifecycle action timeout").
GLOBAL_TIMEOUT_CAP_SECONDS = 48 * 3600
GLOBAL_TIMEOUT_HEARTBEATS = 100
# A Standard execution fails, uncatchably, at 25,000 events in its history (Step Functions
# Developer Guide, "Step Functions service quotas", quotas related to state machine executions).
HISTORY_EVENT_LIMIT = 25_000
# Half of it is left for retries: a retry writes 3 more events (TaskFailed, TaskScheduled,
# TaskStarted), so a loop would need 3 retries in every iteration, on average, to reach the limit.
HISTORY_EVENT_BUDGET = HISTORY_EVENT_LIMIT // 2
# One turn of a wait loop: a Lambda Task (TaskStateEntered, LambdaFunctionScheduled,
# LambdaFunctionStarted, LambdaFunctionSucceeded, TaskStateExited for a Task whose Resource is the
# function's ARN), a Choice and a Wait (entered, exited). Counted in the executed history
# (tests/lambdas/node_lifecycle/test_lifecycle_within_aws_limits.py).
EVENTS_PER_LOOP = 9
# The events of an execution's straight path (no loops), with room for its retries.
EVENTS_OUTSIDE_LOOPS = 300
# EventBridge RetryPolicy bounds (EventBridge API Reference, RetryPolicy).
EVENT_AGE_MIN_SECONDS, EVENT_AGE_MAX_SECONDS = 60, 86_400
EVENT_RETRIES_MAX = 185

# Lambda Invoke errors that start no run of the function and pass with time, as Step Functions
# reports them ("Lambda.<code>"; Step Functions Developer Guide, "Handle Lambda service
# exceptions"): its four 5xx service exceptions, the throttle (TooManyRequestsException, "When
# Lambda hits the maximum number of invocations"), and the Invoke API's errors of a function in a
# VPC whose connection is being (re)built after idling or while it is Pending, in which state
# "any invocations ... will fail" (Lambda API Reference, Invoke, Errors; Lambda Developer Guide,
# "Lambda function states").
LAMBDA_INVOKE_ERRORS = (
    "Lambda.TooManyRequestsException",
    "Lambda.ServiceException",
    "Lambda.AWSLambdaException",
    "Lambda.SdkClientException",
    "Lambda.ClientExecutionTimeoutException",
    "Lambda.ResourceNotReadyException",
    "Lambda.ENINotReadyException",
    "Lambda.EC2ThrottledException",
    "Lambda.EC2UnexpectedException",
    "Lambda.ResourceConflictException",
)
# What a run of our function reports when it may succeed if run again: its TransientError
# (lambdas/node_lifecycle/step_errors.py), running out of time, which the Lambda runtime reports
# as Sandbox.Timedout and Step Functions' page above as Lambda.Unknown, and the Task's own
# TimeoutSeconds passing with no answer (States.Timeout).
STEP_ERRORS = ("TransientError", "Sandbox.Timedout", "Lambda.Unknown", "States.Timeout")


@dataclass(frozen=True)
class Retrier:
    """One Retry entry: exponential backoff with full jitter (each delay is uniform up to the
    value below), each entry counting its own attempts within one visit of a state."""

    errors: tuple[str, ...]
    interval_seconds: int
    max_attempts: int
    max_delay_seconds: int
    backoff_rate: float = 2.0

    @property
    def delays(self) -> tuple[float, ...]:
        return tuple(
            min(self.interval_seconds * self.backoff_rate**attempt, self.max_delay_seconds)
            for attempt in range(self.max_attempts)
        )

    @property
    def span_seconds(self) -> float:
        """The most this entry's retries wait in all."""
        return sum(self.delays)


# Every Lambda Task: a throttling burst ridden out for up to 51 s before the Task fails into its
# Catch.
INVOKE_RETRY = Retrier(LAMBDA_INVOKE_ERRORS, interval_seconds=1, max_attempts=6, max_delay_seconds=20)
# Steps of the main path: the gateway or an AWS API not answering, for up to 130 s of waiting.
STEP_RETRY = Retrier(STEP_ERRORS, interval_seconds=10, max_attempts=4, max_delay_seconds=60)
# The alarm's publish: any error, each try bounded by its own timeout.
ALARM_RETRY = Retrier(("States.ALL",), interval_seconds=2, max_attempts=4, max_delay_seconds=16)
ALARM_PUBLISH_TIMEOUT_SECONDS = 5

# Every node lifecycle function's timeout. A run can also spend up to 10 s in its Init phase ("The
# Init phase is limited to 10 seconds", Lambda Developer Guide, "Lambda execution environment
# lifecycle"), so a Task waits at most both for its answer: its TimeoutSeconds, after which Step
# Functions stops waiting (States.Timeout) rather than "an execution is stuck waiting for a
# response that will never come" (Step Functions Developer Guide, "Stuck executions").
FUNCTION_TIMEOUT_SECONDS = 120
LAMBDA_INIT_SECONDS = 10
LAMBDA_TASK_TIMEOUT_SECONDS = LAMBDA_INIT_SECONDS + FUNCTION_TIMEOUT_SECONDS
# From the start of a run to its heartbeat being recorded: the Init phase and that call.
HEARTBEAT_LANDING_SECONDS = 60
# What no page bounds: Step Functions' own time between states and to schedule a Task.
SAFETY_MARGIN_SECONDS = 60


@dataclass(frozen=True)
class LifecycleTiming:
    """One environment's timing: its hooks' heartbeat timeout and its node_lifecycle pacing."""

    heartbeat_timeout_seconds: int
    poll_interval_seconds: int
    lock_retry_seconds: int
    drain_timeout_seconds: int
    join_timeout_seconds: int
    reaper_interval_seconds: int = 300  # the backstop that starts executions for lost events

    # -- heartbeats -------------------------------------------------------------------------

    @property
    def alarm_span_seconds(self) -> float:
        """The most the alarm's publish takes, every try timing out."""
        return (ALARM_RETRY.max_attempts + 1) * ALARM_PUBLISH_TIMEOUT_SECONDS + ALARM_RETRY.span_seconds

    @property
    def _run_and_throttles(self) -> float:
        """A step's attempt before the next one can start: its invoke retries, then its run."""
        return INVOKE_RETRY.span_seconds + LAMBDA_TASK_TIMEOUT_SECONDS

    @property
    def waits(self) -> dict[str, float]:
        """Every wait that can follow a step of the main path before the next one, by what sets it."""
        return {
            "node_lifecycle.poll_interval_seconds": self.poll_interval_seconds,
            "node_lifecycle.lock_retry_seconds": self.lock_retry_seconds,
            "the longest Retry delay": STEP_RETRY.max_delay_seconds,
            "the alarm's publish with its retries": self.alarm_span_seconds,
        }

    @property
    def longest_wait(self) -> tuple[str, float]:
        return max(self.waits.items(), key=lambda item: item[1])

    @property
    def attempt_seconds(self) -> float:
        """The most between the starts of two attempts to record a heartbeat: a step's attempt
        and the wait after it."""
        return self._run_and_throttles + self.longest_wait[1]

    @property
    def heartbeat_gap_seconds(self) -> float:
        """The longest the hook can go without a heartbeat when two attempts in a row fail."""
        return 3 * self.attempt_seconds + HEARTBEAT_LANDING_SECONDS + SAFETY_MARGIN_SECONDS

    def least_heartbeat_timeout(self) -> int:
        """The shortest heartbeat timeout the main path's waits allow."""
        return math.ceil(self.heartbeat_gap_seconds)

    # -- the hook's global timeout --------------------------------------------------------

    @property
    def global_timeout_seconds(self) -> int:
        return min(GLOBAL_TIMEOUT_CAP_SECONDS, GLOBAL_TIMEOUT_HEARTBEATS * self.heartbeat_timeout_seconds)

    @property
    def event_age_seconds(self) -> int:
        """How long EventBridge keeps trying to start an execution: any later and the first
        step's heartbeat (after its invoke retries) could not land before the action times out."""
        age = self.heartbeat_timeout_seconds - INVOKE_RETRY.span_seconds - HEARTBEAT_LANDING_SECONDS - SAFETY_MARGIN_SECONDS
        return int(min(max(age, EVENT_AGE_MIN_SECONDS), EVENT_AGE_MAX_SECONDS))

    @property
    def _task_span_seconds(self) -> float:
        """The most one Task of the main path takes through all its retries: every retried run
        timing out, every retrier used up."""
        runs = STEP_RETRY.max_attempts + 1
        return runs * LAMBDA_TASK_TIMEOUT_SECONDS + STEP_RETRY.span_seconds + INVOKE_RETRY.span_seconds

    @property
    def drain_span_seconds(self) -> float:
        """From the terminate action's start to a failed drain's ABANDON, which retains the
        instance: the event delivered at its latest, the first step through its every retry (the
        deadline counts from its answer), the drain failing at its deadline through the step then
        under way (every step that starts work checks the deadline first), and the failure step
        that ABANDONs. Past the global timeout Auto Scaling ABANDONs the action itself (its default
        result): the instance is retained all the same, but mid-drain, with the lock held."""
        return (
            self.event_age_seconds
            + 2 * self._task_span_seconds
            + self.drain_timeout_seconds
            + 2 * self._run_and_throttles
        )

    @property
    def join_span_seconds(self) -> float:
        """From the launch action's start to its ABANDON when the join fails at its deadline."""
        return (
            self.event_age_seconds
            + 2 * self._task_span_seconds
            + self.join_timeout_seconds
            + 2 * self._run_and_throttles
        )

    # -- the history limit ----------------------------------------------------------------

    @property
    def fastest_loop(self) -> tuple[str, int]:
        return min(
            (("node_lifecycle.poll_interval_seconds", self.poll_interval_seconds),
             ("node_lifecycle.lock_retry_seconds", self.lock_retry_seconds)),
            key=lambda item: item[1],
        )  # fmt: skip

    @property
    def drain_history_events(self) -> int:
        """About as many events as a drain that waits until its deadline writes without retries."""
        turns = self.drain_timeout_seconds / self.fastest_loop[1]
        return math.ceil(EVENTS_PER_LOOP * turns) + EVENTS_OUTSIDE_LOOPS

    @property
    def join_history_events(self) -> int:
        turns = self.join_timeout_seconds / self.fastest_loop[1]
        return math.ceil(EVENTS_PER_LOOP * turns) + EVENTS_OUTSIDE_LOOPS

    # -- what the configuration must satisfy ------------------------------------------------

    def problems(self) -> list[str]:
        """Each way this timing breaks a limit, as the one line synthesis stops with."""
        found = []
        heartbeat = self.heartbeat_timeout_seconds
        if self.heartbeat_gap_seconds > heartbeat:
            key, wait = self.longest_wait
            found.append(
                f"service_fabric.lifecycle_heartbeat_seconds: {heartbeat} s cannot outlast two failed heartbeat "
                f"attempts in a row: each attempt can take {self._run_and_throttles + wait:.0f} s (a run of up to "
                f"{LAMBDA_TASK_TIMEOUT_SECONDS} s with its Init, {INVOKE_RETRY.span_seconds:.0f} s of Lambda throttling "
                f"retries and {wait:.0f} s of {key}), so use at least {self.least_heartbeat_timeout()} s"
            )
        # An action whose event was lost waits from its start until the reaper's next run, whose
        # heartbeat must land before the heartbeat timeout (lambdas/node_lifecycle/orphans.py).
        backstop = self.reaper_interval_seconds + LAMBDA_TASK_TIMEOUT_SECONDS + HEARTBEAT_LANDING_SECONDS + SAFETY_MARGIN_SECONDS
        if backstop > heartbeat:
            longest = (heartbeat - backstop + self.reaper_interval_seconds) // 60
            found.append(
                f"node_lifecycle.reaper_interval_minutes: {self.reaper_interval_seconds // 60} minutes between reaper runs "
                f"can leave a lifecycle action whose event was lost without a heartbeat past the hook's {heartbeat} s "
                f"heartbeat timeout; run it at most every {max(longest, 0)} minutes"
            )
        hours = self.global_timeout_seconds / 3600
        cap = (
            f"the hook's global timeout of {hours:.1f} h ({GLOBAL_TIMEOUT_HEARTBEATS} x "
            f"service_fabric.lifecycle_heartbeat_seconds, at most {GLOBAL_TIMEOUT_CAP_SECONDS // 3600} h)"
        )
        if self.drain_span_seconds > self.global_timeout_seconds:
            found.append(
                f"node_lifecycle.drain_timeout_minutes: a drain failing at its {self.drain_timeout_seconds // 60}-minute "
                f"deadline ends {self.drain_span_seconds / 3600:.1f} h after its lifecycle action began, past {cap}, "
                "where Auto Scaling ends the action mid-drain"
            )
        if self.join_span_seconds > self.global_timeout_seconds:
            found.append(
                f"node_lifecycle.join_timeout_minutes: a join failing at its {self.join_timeout_seconds // 60}-minute "
                f"deadline ends {self.join_span_seconds / 3600:.1f} h after its lifecycle action began, past {cap}"
            )
        for kind, events, timeout in (
            ("drain", self.drain_history_events, self.drain_timeout_seconds),
            ("join", self.join_history_events, self.join_timeout_seconds),
        ):
            if events > HISTORY_EVENT_BUDGET:
                key, every = self.fastest_loop
                found.append(
                    f"{key}: a {timeout // 60}-minute {kind} looping every {every} s writes about "
                    f"{events:,} history events, past the {HISTORY_EVENT_BUDGET:,} an execution is kept under (half "
                    f"of Step Functions' hard limit of {HISTORY_EVENT_LIMIT:,}, the rest left for retries); loop less "
                    f"often or shorten the {kind}"
                )
        return found
