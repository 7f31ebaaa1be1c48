"""The node lifecycle state machines as synthesized, executed by a real ASL interpreter.

The definitions come from the synthesized NodeLifecycle template (never a hand copy), with its
tokens resolved against the other synthesized stacks. moto 5.2's Step Functions parser (a port
of LocalStack's interpreter) executes them. Every Lambda Task is answered in-process by the real
handler, named by the function's `Handler`, with the function's environment from the template;
AWS calls go to moto, or to aws_wire.py where moto lacks an operation; the Service Fabric gateway
is the HTTPS emulator (tests/sf_emulator).

Time is virtual. Wait states, Retry intervals (each jittered delay at its longest), botocore's
backoff, the REST client's backoff and the functions' clock all read and advance one VirtualClock, so an execution holding an instance
for two hours takes a second, and the lifecycle hook's heartbeat timer, the lock's expiry and the
steps' deadlines meet the same hours they would on AWS. Nothing in the definition is changed.

How the harness stands in for AWS around the interpreter, each with its source:
- Lambda's answer to Step Functions (Lambda Developer Guide, "AWS Lambda function errors in
  Python"): a handler's exception becomes FunctionError "Unhandled" with a payload of
  `errorMessage`, `errorType` (the exception's class name), `requestId`, `stackTrace`; a return
  value is serialized to JSON; a run longer than the function's Timeout ends with errorType
  "Sandbox.Timedout" (Lambda Developer Guide, "Troubleshoot invocation issues", timeouts), even
  though what the handler did before then stays done.
- Each function keeps its initialised module state between invocations, as a warm execution
  environment does (Lambda Developer Guide, "Lambda execution environment lifecycle"); here every
  invocation reuses it.
- EventBridge starts an execution with the event as its input when the target has no Input,
  InputPath or InputTransformer (EventBridge User Guide, "Transforming target input"); the rule's
  pattern is matched with moto's EventBridge pattern matcher.
- States.ALL does not catch States.Runtime or States.DataLimitExceeded on AWS (Step Functions
  Developer Guide, "Error names"), while this interpreter's States.ALL matches everything: any
  such error in an execution's history fails the test instead.
- An execution longer than the definition's TimeoutSeconds ends TIMED_OUT on AWS, and a Task
  whose answer takes longer than its own TimeoutSeconds fails with States.Timeout; the
  interpreter measures both in real time, so the harness applies them on the virtual clock.
- A Standard execution fails at 25,000 history events (Step Functions Developer Guide, "Step
  Functions service quotas"); the interpreter has no such limit, so the harness fails a test
  whose execution wrote that many.
- Lambda's own refusals of an invoke (throttling, a VPC function not ready) start no run of the
  function and reach Step Functions as "Lambda.<code>": "Lambda errors are reported as
  Lambda.ErrorName ... When Lambda exceeds the maximum number of invocations, the reported error
  will be Lambda.TooManyRequestsException" (Step Functions Developer Guide, "Handle Lambda
  service exceptions"). The harness raises them where the interpreter invokes, as the Invoke
  API's error (code and HTTP status from botocore's Lambda model). For a Task whose Resource is
  the function's ARN (what the CDK's LambdaInvoke writes with payload_response_only) the
  interpreter names every such error "Exception"; the harness names it as AWS documents, in a
  LambdaFunctionStartFailed event (the function never started).
- EventBridge starts an execution through the rule target's RetryPolicy and DeadLetterConfig
  (EventBridge User Guide, "Event retry policy and using dead-letter queues"): it retries errors
  that can pass until MaximumRetryAttempts or MaximumEventAgeInSeconds, sends errors that cannot
  (no permission, no such target) to the queue without retries, and a queued message is the event
  with the attributes RULE_ARN, TARGET_ARN, ERROR_CODE, ERROR_MESSAGE, EXHAUSTED_RETRY_CONDITION
  and RETRY_ATTEMPTS. Which answers it retries: "EventBridge retries responses sent with a 5xx
  or 429 HTTP status code ... doesn't retry other 4xx HTTP errors" (AWS re:Post Knowledge Center,
  "Resolve FailedInvocation errors in EventBridge"); throttling is taken as retried too (the DLQ
  page lists a THROTTLING code), though Step Functions answers it with HTTP 400. Not documented,
  so chosen here (a risk): the delays between tries ("exponential back off and jitter": here 2^n s
  up to 5 minutes, no jitter) and which ERROR_CODE of the page's sample list an error becomes.
"""

from __future__ import annotations

import contextlib
import io
import importlib
import json
import os
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import boto3
import botocore.config
import botocore.endpoint
import botocore.session
from botocore.exceptions import ClientError
from moto.core import DEFAULT_ACCOUNT_ID
from moto.events.models import EventPattern
from moto.stepfunctions.parser.models import StepFunctionsParserBackend
from moto.stepfunctions.parser.api import HistoryEventType, LambdaFunctionStartFailedEventDetails
from moto.stepfunctions.parser.asl.component.common.error_name.custom_error_name import CustomErrorName
from moto.stepfunctions.parser.asl.component.common.error_name.failure_event import FailureEvent
from moto.stepfunctions.parser.asl.component.common.retry import jitter_strategy_decl, retrier_decl
from moto.stepfunctions.parser.asl.component.state.exec.state_task.state_task_lambda import StateTaskLambda
from moto.stepfunctions.parser.asl.eval.event.event_detail import EventDetails
from moto.stepfunctions.parser.asl.component.state.exec.state_task import lambda_eval_utils
from moto.stepfunctions.parser.asl.component.state.wait.wait_function.wait_function import WaitFunction
from moto.stepfunctions.parser.asl.parse.asl_parser import AmazonStateLanguageParser
from moto.stepfunctions.parser.asl.parse.preprocessor import Preprocessor
from moto.stepfunctions.parser.backend.execution import BaseExecutionWorkerCommunication

from .lifecycle_actions import LifecycleAction, LifecycleActions

UNCATCHABLE = ("States.Runtime", "States.DataLimitExceeded")
HISTORY_EVENT_LIMIT = 25_000
# The DLQ's ERROR_CODE for a StartExecution error (from the EventBridge page's sample codes).
EVENTBRIDGE_ERROR_CODES = {"ThrottlingException": "THROTTLING", "StateMachineDoesNotExist": "NO_RESOURCE",
                           "AccessDeniedException": "NO_PERMISSIONS"}  # fmt: skip
LAMBDA_MODEL = botocore.session.get_session().get_service_model("lambda")
_VALIDATED: set[str] = set()
_PARSE_TREES: dict[str, Any] = {}  # definition -> its ANTLR parse tree


class VirtualClock:
    """Wall-clock time plus every second slept so far; `sleep` returns at once."""

    def __init__(self) -> None:
        self.offset = 0.0
        self._lock = threading.Lock()

    def __call__(self) -> float:
        return time.time() + self.offset

    def sleep(self, seconds: float) -> None:
        with self._lock:
            self.offset += max(float(seconds), 0.0)


# -- the synthesized app ------------------------------------------------------------------


class Templates:
    """Resolves CloudFormation tokens across the synthesized stacks to the physical values the
    harness created (`physical`, keyed by (stack part, logical id))."""

    PSEUDO = {"AWS::Partition": "aws", "AWS::URLSuffix": "amazonaws.com"}

    def __init__(self, stacks: Mapping[str, dict], *, region: str, account: str) -> None:
        self.stacks = stacks
        self.region, self.account = region, account
        self.physical: dict[tuple[str, str], str] = {}

    def resources(self, part: str, kind: str) -> dict[str, dict]:
        return {lid: r for lid, r in self.stacks[part]["Resources"].items() if r["Type"] == kind}

    def resolve(self, part: str, value: Any) -> Any:
        if isinstance(value, list):
            return [self.resolve(part, item) for item in value]
        if not isinstance(value, dict):
            return value
        if len(value) == 1:
            (key, argument), = value.items()
            if key == "Fn::Join":
                separator, items = argument
                return separator.join(str(self.resolve(part, item)) for item in items)
            if key == "Ref":
                return self._ref(part, argument)
            if key == "Fn::GetAtt":
                return self._arn(part, argument[0], argument[1])
            if key == "Fn::ImportValue":
                return self._import(argument)
        return {key: self.resolve(part, item) for key, item in value.items()}

    def _ref(self, part: str, name: str) -> str:
        if name in self.PSEUDO:
            return self.PSEUDO[name]
        if name == "AWS::Region":
            return self.region
        if name == "AWS::AccountId":
            return self.account
        try:
            return self.physical[(part, name)]
        except KeyError:
            raise KeyError(f"the harness created nothing for Ref {name} in {part}") from None

    def _arn(self, part: str, logical_id: str, attribute: str) -> str:
        if attribute != "Arn":
            raise KeyError(f"Fn::GetAtt {logical_id}.{attribute} is not resolved by the harness")
        return self._ref(part, logical_id)  # the harness keeps ARNs for what it names by ARN

    def _import(self, export_name: str) -> str:
        for part, template in self.stacks.items():
            for output in (template.get("Outputs") or {}).values():
                if (output.get("Export") or {}).get("Name") == export_name:
                    return self.resolve(part, output["Value"])
        raise KeyError(f"no stack exports {export_name}")


@dataclass(frozen=True)
class Function:
    arn: str
    handler: str  # module.function, as the function's Handler property
    environment: dict[str, str]
    timeout_seconds: int


@dataclass
class Invocation:
    function: str  # the handler's name: scale_in, scale_out
    step: str
    error: str | None  # errorType, or None when it returned
    message: str = ""


@dataclass
class InvokeFault:
    """The next invokes of `step` (any step when None), in order: refused by Lambda with the code
    given, or run (None); used up once the sequence is."""

    step: str | None
    sequence: list[str | None]


@dataclass
class Delivery:
    """What EventBridge did with one event: the execution it started, or the queued message."""

    execution: Execution | None
    tries: int
    dead_letter: dict[str, Any] | None  # {"body": event, "attributes": {...}}


def execution_history(execution_arn: str) -> list[dict[str, Any]]:
    """Every history event of an execution, as GetExecutionHistory lists them, read from moto's
    Step Functions backend itself: the events are the ones its API would return (moto's
    get_execution_history answers with this list, unpaginated), without serializing thousands of
    events into a response and parsing them back, which took most of a held drain's test time."""
    from moto.stepfunctions.responses import get_backend  # the backend the API answers from

    _, _, _, region, account, _ = execution_arn.split(":", 5)
    return list(get_backend(account, region).get_execution_history(execution_arn)["events"])


@dataclass
class Execution:
    status: str  # SUCCEEDED, FAILED, TIMED_OUT
    error: str | None
    cause: str | None
    output: dict[str, Any] | None
    history: list[dict[str, Any]]
    invocations: list[Invocation]
    virtual_seconds: float

    def steps(self, name: str | None = None) -> list[Invocation]:
        return [i for i in self.invocations if name is None or i.step == name]

    def retried(self, step: str) -> int:
        """How many times `step` was called again after it failed."""
        calls = self.steps(step)
        return sum(1 for before in calls[:-1] if before.error) if calls else 0

    @property
    def state_errors(self) -> list[str]:
        """Every error a state reported, in order (caught, retried or final)."""
        found = []
        for event in self.history:
            for key, details in event.items():
                if key.endswith("EventDetails") and isinstance(details, dict) and details.get("error"):
                    found.append(details["error"])
        return found


@dataclass
class Alarm:
    subject: str
    message: str


@dataclass
class Metrics:
    recorded: list[tuple[str, float]] = field(default_factory=list)

    def names(self) -> list[str]:
        return [name for name, _ in self.recorded]


class LifecycleStateMachines:
    """The NodeLifecycle stack's state machines on moto, started by lifecycle actions."""

    def __init__(
        self,
        stacks: Mapping[str, dict],
        *,
        region: str,
        gateway_endpoints: list[str],
        admin_certificate: dict[str, str],
        gateway_thumbprint: str,
        clock: VirtualClock,
        lifecycle: LifecycleActions,
        monkeypatch: Any,
    ) -> None:
        """Call inside moto's mock, with execute_state_machine on; `monkeypatch` undoes the
        patches (time, the Lambda invocation) when the test ends."""
        self.templates = Templates(stacks, region=region, account=DEFAULT_ACCOUNT_ID)
        self.region, self.clock, self.lifecycle = region, clock, lifecycle
        self.gateway_endpoints = gateway_endpoints
        self.metrics = Metrics()
        self.invocations: list[Invocation] = []
        # step name -> what happens in the world right after that step first returns
        self.after_step: dict[str, Callable[[], None]] = {}
        self.invoke_faults: list[InvokeFault] = []
        self.throttle_each_step_once = False  # the first invoke of every step is throttled
        self._throttled_steps: set[str] = set()
        self._invoke_lock = threading.Lock()
        self._ended: dict[str, threading.Event] = {}  # execution ARN -> set once its status is final
        self._ended_lock = threading.Lock()
        self._containers: dict[str, Any] = {}
        self._sfn = boto3.client("stepfunctions", region_name=region)
        # EventBridge's own tries, one call each: no SDK retries between them.
        self._eventbridge = boto3.client("stepfunctions", region_name=region,
                                         config=botocore.config.Config(retries={"total_max_attempts": 1}))  # fmt: skip
        self._create_resources(admin_certificate, gateway_thumbprint)
        self.functions = self._functions()
        self.state_machines = self._state_machines()
        # step -> its Task's TimeoutSeconds (a step has one in either state machine)
        self.task_timeouts = {
            state["Parameters"]["step"]: state["TimeoutSeconds"]
            for machine in self.state_machines.values() for state in machine["definition"]["States"].values()
            if state["Type"] == "Task" and "step" in (state.get("Parameters") or {}) and "TimeoutSeconds" in state
        }  # fmt: skip
        self.hooks = self._hooks()
        self._install(monkeypatch)

    # -- what the stacks own, created in moto ---------------------------------------------

    def _create_resources(self, admin_certificate: dict[str, str], thumbprint: str) -> None:
        t = self.templates
        dynamodb = boto3.client("dynamodb", region_name=self.region)
        for lid, table in t.resources("node_lifecycle", "AWS::DynamoDB::GlobalTable").items():
            p = table["Properties"]
            dynamodb.create_table(
                TableName=p["TableName"], KeySchema=p["KeySchema"],
                AttributeDefinitions=p["AttributeDefinitions"], BillingMode=p["BillingMode"],
            )  # fmt: skip
            t.physical[("node_lifecycle", lid)] = p["TableName"]
        sns, sqs = boto3.client("sns", region_name=self.region), boto3.client("sqs", region_name=self.region)
        for lid, topic in t.resources("monitoring", "AWS::SNS::Topic").items():
            arn = sns.create_topic(Name=topic["Properties"]["TopicName"])["TopicArn"]
            t.physical[("monitoring", lid)] = arn
            self.alarm_topic_arn = arn
        # The operators' inbox: an SQS queue subscribed to the alarm topic (SNS delivers to it).
        self._inbox = sqs.create_queue(QueueName="operators-inbox")["QueueUrl"]
        inbox_arn = sqs.get_queue_attributes(QueueUrl=self._inbox, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        sns.subscribe(TopicArn=self.alarm_topic_arn, Protocol="sqs", Endpoint=inbox_arn)
        self._sqs = sqs
        for lid, queue in t.resources("node_lifecycle", "AWS::SQS::Queue").items():
            url = sqs.create_queue(QueueName=queue["Properties"]["QueueName"])["QueueUrl"]
            t.physical[("node_lifecycle", lid)] = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
            self.dead_letter_queue_url = url
        environment = next(iter(t.resources("node_lifecycle", "AWS::Lambda::Function").values()))["Properties"]["Environment"]["Variables"]
        boto3.client("secretsmanager", region_name=self.region).create_secret(
            Name=environment["SF_ADMIN_CERTIFICATE_SECRET"], SecretString=json.dumps(admin_certificate)
        )
        boto3.client("ssm", region_name=self.region).put_parameter(
            Name=environment["SF_GATEWAY_THUMBPRINT_PARAMETER"], Value=thumbprint, Type="String"
        )

    def _functions(self) -> dict[str, Function]:
        functions = {}
        for lid, resource in self.templates.resources("node_lifecycle", "AWS::Lambda::Function").items():
            if not resource["Properties"]["Handler"].startswith("node_lifecycle."):
                continue  # the CDK's own helper functions (log retention and the like)
            p = resource["Properties"]
            arn = f"arn:aws:lambda:{self.region}:{DEFAULT_ACCOUNT_ID}:function:{p.get('FunctionName') or lid}"
            self.templates.physical[("node_lifecycle", lid)] = arn
            environment = self.templates.resolve("node_lifecycle", p["Environment"]["Variables"])
            # The values changed: the seeds' gateways are the emulator's, and the state machines'
            # literal ARNs name moto's one account instead of the environment's.
            environment["SF_GATEWAY_ENDPOINTS"] = ",".join(self.gateway_endpoints)
            for name in ("SCALE_IN_STATE_MACHINE_ARN", "SCALE_OUT_STATE_MACHINE_ARN"):
                if name in environment:
                    parts = environment[name].split(":")
                    environment[name] = ":".join([*parts[:4], DEFAULT_ACCOUNT_ID, *parts[5:]])
            functions[arn] = Function(arn, p["Handler"], environment, int(p.get("Timeout", 3)))
        return functions

    def _state_machines(self) -> dict[str, dict[str, Any]]:
        """name -> {arn, definition, rule pattern}."""
        made: dict[str, dict[str, Any]] = {}
        resources = self.templates.stacks["node_lifecycle"]["Resources"]
        for lid, resource in self.templates.resources("node_lifecycle", "AWS::StepFunctions::StateMachine").items():
            p = resource["Properties"]
            definition = json.loads(self.templates.resolve("node_lifecycle", p["DefinitionString"]))
            arn = f"arn:aws:states:{self.region}:{DEFAULT_ACCOUNT_ID}:stateMachine:{p['StateMachineName']}"
            self.templates.physical[("node_lifecycle", lid)] = arn
            rule = next(
                r["Properties"] for r in resources.values()
                if r["Type"] == "AWS::Events::Rule"
                and any(target["Arn"] == {"Ref": lid} for target in r["Properties"].get("Targets", []))
            )  # fmt: skip
            target = next(t for t in rule["Targets"] if t["Arn"] == {"Ref": lid})
            assert not {"InputPath", "InputTransformer"} & set(target), "the harness passes the event or Input as input"
            # A lifecycle rule passes its event; a schedule passes the target's Input (EventBridge
            # User Guide, "Transforming target input": a constant Input replaces the event).
            assert ("Input" in target) == ("ScheduleExpression" in rule), "a lifecycle rule passes the event as input"
            made[p["StateMachineName"]] = {
                "name": p["StateMachineName"], "arn": arn, "definition": definition,
                "pattern": rule.get("EventPattern"), "schedule": rule.get("ScheduleExpression"),
                "scheduled_input": json.loads(target["Input"]) if "Input" in target else None,
                "role": f"arn:aws:iam::{DEFAULT_ACCOUNT_ID}:role/{lid}",
                "retry_policy": target.get("RetryPolicy") or {},
                "dead_letter_arn": self.templates.resolve("node_lifecycle", (target.get("DeadLetterConfig") or {}).get("Arn")),
                "rule_arn": f"arn:aws:events:{self.region}:{DEFAULT_ACCOUNT_ID}:rule/{lid}",
            }  # fmt: skip
        return made

    def _hooks(self) -> dict[str, dict[str, Any]]:
        """transition -> the scaling group's hook (group name, hook name, timeout, default)."""
        hooks = {}
        for group in self.templates.resources("service_fabric", "AWS::AutoScaling::AutoScalingGroup").values():
            p = group["Properties"]
            for spec in p.get("LifecycleHookSpecificationList", []):
                transition = "launch" if spec["LifecycleTransition"].endswith("LAUNCHING") else "terminate"
                hooks[transition] = {
                    "group": p["AutoScalingGroupName"],
                    "hook": spec["LifecycleHookName"],
                    "heartbeat_timeout": int(spec.get("HeartbeatTimeout", 3600)),
                    "default_result": spec.get("DefaultResult", "ABANDON"),
                    "retains": (p.get("InstanceLifecyclePolicy") or {}).get("RetentionTriggers", {}).get("TerminateHookAbandon") == "retain",
                }
        return hooks

    # -- time and the Lambda runtime, patched into the interpreter ---------------------------

    def _install(self, monkeypatch: Any) -> None:
        import node_lifecycle.handlers as handlers
        from node_lifecycle.runtime import Runtime

        clock = self.clock
        monkeypatch.setattr(lambda_eval_utils, "_invoke_lambda_function", self._invoke)
        named_by_interpreter = StateTaskLambda._from_error

        def named_as_aws_does(task: StateTaskLambda, env: Any, ex: Exception) -> FailureEvent:
            if not isinstance(ex, ClientError):
                return named_by_interpreter(task, env, ex)
            error = f"Lambda.{ex.response['Error']['Code']}"
            details = LambdaFunctionStartFailedEventDetails(error=error, cause=ex.response["Error"].get("Message", ""))
            return FailureEvent(env=env, error_name=CustomErrorName(error), event_type=HistoryEventType.LambdaFunctionStartFailed,
                                event_details=EventDetails(lambdaFunctionStartFailedEventDetails=details))  # fmt: skip

        monkeypatch.setattr(StateTaskLambda, "_from_error", named_as_aws_does)
        monkeypatch.setattr(WaitFunction, "_wait_interval", lambda _self, env, wait_seconds: clock.sleep(wait_seconds))
        monkeypatch.setattr(retrier_decl, "time", SimpleNamespace(sleep=clock.sleep))
        # Full jitter waits a random part of each Retry delay; here always the whole delay, the
        # longest AWS could wait, so heartbeat gaps and deadlines meet their worst case.
        monkeypatch.setattr(jitter_strategy_decl, "random", SimpleNamespace(uniform=lambda low, high: high))
        monkeypatch.setattr(botocore.endpoint, "time", SimpleNamespace(sleep=clock.sleep, time=time.time))
        original = Runtime.from_settings.__func__

        def from_settings(cls: type, settings: Any, session: Any, **_: Any) -> Any:
            return original(cls, settings, session, clock=clock, sleep=clock.sleep)

        monkeypatch.setattr(Runtime, "from_settings", classmethod(from_settings))
        monkeypatch.setattr(handlers, "_runtime", None)
        # CreateStateMachine parses the definition to validate it (about a second each); the
        # same synthesized definition is validated once per test session.
        validate = StepFunctionsParserBackend._validate_definition

        def validate_once(definition: str) -> None:
            if definition not in _VALIDATED:
                validate(definition=definition)
                _VALIDATED.add(definition)

        monkeypatch.setattr(StepFunctionsParserBackend, "_validate_definition", staticmethod(validate_once))
        # Each execution parses its definition with ANTLR and turns the parse tree into fresh
        # evaluation components (moto/stepfunctions/parser/asl/parse/asl_parser.py,
        # AmazonStateLanguageParser.parse; about a tenth of a lifecycle test's time). The parse
        # tree is only read by the Preprocessor that builds the components, so one per definition
        # serves every execution; each still gets components of its own, built from it. (moto's
        # Preprocessor keeps its query-language scopes in a list on the class, shared by threads
        # that build components at once: harmless while every definition is JSONPath, a risk for
        # a JSONata one, with or without this cache.)
        parse = AmazonStateLanguageParser.parse

        def parse_once(definition: str) -> tuple[Any, Any]:
            tree = _PARSE_TREES.get(definition)
            if tree is None:
                program, tree = parse(definition)
                _PARSE_TREES[definition] = tree
                return program, tree
            return Preprocessor().visit(tree), tree

        monkeypatch.setattr(AmazonStateLanguageParser, "parse", staticmethod(parse_once))
        # An execution's worker thread calls terminated() once its program ends, which sets the
        # status DescribeExecution answers (moto/stepfunctions/parser/backend/execution.py,
        # BaseExecutionWorkerCommunication._reflect_execution_status): the harness waits for that
        # call instead of asking moto again and again, each call taking the GIL from the execution.
        reflect = BaseExecutionWorkerCommunication.terminated

        def terminated(communication: BaseExecutionWorkerCommunication) -> None:
            reflect(communication)
            self._ended_event(communication.execution.exec_arn).set()

        monkeypatch.setattr(BaseExecutionWorkerCommunication, "terminated", terminated)

    def _ended_event(self, execution_arn: str) -> threading.Event:
        with self._ended_lock:
            return self._ended.setdefault(execution_arn, threading.Event())

    def fail_invoke(self, code: str, *, step: str | None = None, times: int = 1, then_run: int = 0,
                    after_runs: int = 0) -> InvokeFault:  # fmt: skip
        """Lambda refuses `times` invokes (of `step`, or of any step) with its Invoke error `code`;
        with `then_run`, one invoke then runs before the next `times` refusals, `then_run` times
        over; `after_runs` invokes run before any of that."""
        LAMBDA_MODEL.shape_for(code)  # an error Lambda's Invoke API really has
        sequence: list[str | None] = [code] * times
        if then_run:
            sequence = ([code] * times + [None]) * then_run
        sequence = [None] * after_runs + sequence
        fault = InvokeFault(step, sequence)
        self.invoke_faults.append(fault)
        return fault

    def _refused(self, step: str) -> str | None:
        """The Invoke error Lambda answers this invoke with, if any."""
        if self.throttle_each_step_once and step not in self._throttled_steps:
            self._throttled_steps.add(step)
            return "TooManyRequestsException"
        for fault in self.invoke_faults:
            if fault.step in (None, step) and fault.sequence:
                return fault.sequence.pop(0)
        return None

    def _invoke(self, parameters: dict, region: str, state_credentials: Any) -> dict[str, Any]:
        function = self.functions[parameters["FunctionName"]]
        payload = json.loads(parameters["Payload"])
        module_name, _, name = function.handler.rpartition(".")
        step = str(payload.get("step", ""))
        refusal = self._refused(step)
        if refusal:
            shape = LAMBDA_MODEL.shape_for(refusal)
            self.invocations.append(Invocation(name, step, f"Lambda.{refusal}", "refused at the invoke"))
            raise ClientError(
                {"Error": {"Code": refusal, "Message": f"{refusal} (injected by the test)"},
                 "ResponseMetadata": {"HTTPStatusCode": shape.metadata["error"]["httpStatusCode"], "RequestId": str(uuid.uuid4())}},
                "Invoke",
            )  # fmt: skip
        module = importlib.import_module(module_name)
        request_id = str(uuid.uuid4())
        context = SimpleNamespace(function_name=name, aws_request_id=request_id,
                                  get_remaining_time_in_millis=lambda: function.timeout_seconds * 1000)  # fmt: skip
        output = io.StringIO()
        with self._invoke_lock, _environment({**function.environment, "AWS_REGION": self.region}), contextlib.redirect_stdout(output):
            module._runtime = self._containers.get(function.arn)
            started = self.clock()
            try:
                answer, error = json.loads(json.dumps(getattr(module, name)(payload, context))), None
            except Exception as err:  # noqa: BLE001 - the Lambda runtime reports every exception
                answer, error = None, {
                    "errorMessage": str(err),
                    "errorType": type(err).__name__,
                    "requestId": request_id,
                    "stackTrace": traceback.format_tb(err.__traceback__),
                }
            finally:
                self._containers[function.arn] = module._runtime
            elapsed = self.clock() - started
        self._read_metrics(output.getvalue())
        task_timeout = self.task_timeouts.get(step, float("inf"))
        if task_timeout < function.timeout_seconds and elapsed > task_timeout:
            # The Task's TimeoutSeconds passed first: Step Functions stops waiting (States.Timeout),
            # while the run itself goes on to its end (Step Functions Developer Guide, Task state).
            self.invocations.append(Invocation(name, step, "States.Timeout", f"no answer within {task_timeout} s"))
            raise TimeoutError(f"{step}: no answer within the Task's {task_timeout} s")
        if elapsed > function.timeout_seconds:
            error = {
                "errorType": "Sandbox.Timedout",
                "errorMessage": f"RequestId: {request_id} Error: Task timed out after {function.timeout_seconds:.2f} seconds",
            }
        self.invocations.append(Invocation(name, step, error and error["errorType"], error and error["errorMessage"] or ""))
        if not error and step in self.after_step:
            self.after_step.pop(step)()
        if error:
            return {"StatusCode": 200, "FunctionError": "Unhandled", "Payload": error}
        return {"StatusCode": 200, "Payload": answer}

    def _read_metrics(self, printed: str) -> None:
        for line in printed.splitlines():
            try:
                document = json.loads(line)
            except ValueError:
                continue
            if isinstance(document, dict) and "_aws" in document:
                for directive in document["_aws"]["CloudWatchMetrics"]:
                    for metric in directive["Metrics"]:
                        for value in document[metric["Name"]]:
                            self.metrics.recorded.append((metric["Name"], float(value)))

    # -- running ---------------------------------------------------------------------------

    def begin(self, transition: str, instance_id: str) -> LifecycleAction:
        return self.lifecycle.begin(instance_id=instance_id, transition=transition, **self.hooks[transition])

    def run(self, action: LifecycleAction, *, real_seconds: float = 60.0) -> Execution:
        """Routes the action's event to the state machine whose rule matches it, and runs it."""
        machine, event = self._route(action)
        return self.start(machine, event, real_seconds=real_seconds)

    def _create(self, machine: dict[str, Any]) -> None:
        if not machine.get("created"):
            self._sfn.create_state_machine(name=machine["name"], definition=json.dumps(machine["definition"]), roleArn=machine["role"])
            machine["created"] = True

    def start(self, machine: dict[str, Any], event: Any, *, real_seconds: float = 60.0) -> Execution:
        (execution,) = self._run_together([(machine, event)], real_seconds)
        return execution

    def run_together(self, *actions: LifecycleAction, real_seconds: float = 60.0) -> list[Execution]:
        """Several lifecycle actions at once, as when the group scales by more than one: their
        executions run concurrently (their Lambda calls one at a time, in whatever order the
        interpreter's threads reach them)."""
        return self._run_together([self._route(action) for action in actions], real_seconds)

    def run_mixed(self, *runs: LifecycleAction | tuple[dict[str, Any], Any], real_seconds: float = 60.0,
                  then: tuple[str, LifecycleAction] | None = None) -> list[Execution]:  # fmt: skip
        """Lifecycle actions (routed by their rules) and (state machine, input) pairs, at once.

        `then` = (step, action): the action's execution starts when a step of that name first ends
        without error, inside the other executions' run (its event arriving mid-way); it is waited
        for after them and comes last in the list."""
        later: list[tuple[dict[str, Any], str]] = []
        if then:
            step, action = then
            machine, event = self._route(action)
            self.after_step[step] = lambda: later.append((machine, self._start(machine, event)))
        first_invocation, started = len(self.invocations), self.clock()
        executions = self._run_together([self._route(r) if isinstance(r, LifecycleAction) else r for r in runs], real_seconds)
        if then:
            assert later, f"no step {then[0]!r} ended, so the later execution never started"
            executions += self._wait(later, first_invocation=first_invocation, started=started, real_seconds=real_seconds)
        return executions

    def start_now(self, action: LifecycleAction, *, real_seconds: float = 60.0) -> Callable[[], Execution]:
        """Starts the action's execution and returns at once (its event arriving while the test
        does something else); call what it returns to wait for the execution's end."""
        machine, event = self._route(action)
        first_invocation, started = len(self.invocations), self.clock()
        arn = self._start(machine, event)

        def wait() -> Execution:
            (execution,) = self._wait([(machine, arn)], first_invocation=first_invocation, started=started, real_seconds=real_seconds)
            return execution

        return wait

    def _route(self, action: LifecycleAction) -> tuple[dict[str, Any], dict[str, Any]]:
        event = action.event(DEFAULT_ACCOUNT_ID, self.region)
        matching = [m for m in self.state_machines.values()
                    if m["pattern"] and EventPattern.load(json.dumps(m["pattern"])).matches_event(event)]  # fmt: skip
        assert len(matching) == 1, f"{len(matching)} rules match {event['detail-type']}"
        return matching[0], event

    def _start(self, machine: dict[str, Any], event: Any) -> str:
        self._create(machine)
        return self._sfn.start_execution(stateMachineArn=machine["arn"], name=str(uuid.uuid4()), input=json.dumps(event))["executionArn"]

    def _run_together(self, runs: list[tuple[dict[str, Any], Any]], real_seconds: float) -> list[Execution]:
        first_invocation = len(self.invocations)
        started = self.clock()
        started_runs = []
        for machine, event in runs:
            started_runs.append((machine, self._start(machine, event)))
        return self._wait(started_runs, first_invocation=first_invocation, started=started, real_seconds=real_seconds)

    def _wait(self, runs: list[tuple[dict[str, Any], str]], *, first_invocation: int, started: float, real_seconds: float) -> list[Execution]:
        deadline = time.monotonic() + real_seconds
        executions = []
        for machine, arn in runs:
            if not self._ended_event(arn).wait(timeout=max(deadline - time.monotonic(), 0.0)):
                self._sfn.stop_execution(executionArn=arn)
                raise AssertionError(f"the execution still ran after {real_seconds} s of real time")
            described = self._sfn.describe_execution(executionArn=arn)
            assert described["status"] != "RUNNING", described
            executions.append(self._finished(machine, described, first_invocation, started))
        self.lifecycle.settle()
        return executions

    def _finished(self, machine: dict[str, Any], described: dict[str, Any], first_invocation: int, started: float) -> Execution:
        history = execution_history(described["executionArn"])
        assert len(history) < HISTORY_EVENT_LIMIT, f"{len(history)} history events: AWS fails the execution at {HISTORY_EVENT_LIMIT:,}"
        execution = Execution(
            status=described["status"],
            error=described.get("error"),
            cause=described.get("cause"),
            output=json.loads(described["output"]) if described.get("output") else None,
            history=history,
            invocations=self.invocations[first_invocation:],
            virtual_seconds=self.clock() - started,
        )
        uncatchable = [e for e in execution.state_errors if e in UNCATCHABLE]
        assert not uncatchable, f"{uncatchable}: AWS ends the execution there, whatever Catch says"
        if execution.virtual_seconds > machine["definition"].get("TimeoutSeconds", float("inf")):
            execution.status = "TIMED_OUT"
        return execution

    def deliver(self, action: LifecycleAction, *, real_seconds: float = 60.0) -> Delivery:
        """The action's event as EventBridge delivers it to the rule's target: StartExecution
        tried through the target's RetryPolicy (errors injected on the wire, service "sfn"), the
        event queued in its DeadLetterConfig when the tries run out, the execution run when one
        started."""
        machine, event = self._route(action)
        self._create(machine)
        policy = machine["retry_policy"]
        max_age = int(policy.get("MaximumEventAgeInSeconds", 86_400))
        max_retries = int(policy.get("MaximumRetryAttempts", 185))
        first = self.clock()
        first_invocation = len(self.invocations)
        tries = 0
        while True:
            tries += 1
            try:
                arn = self._eventbridge.start_execution(stateMachineArn=machine["arn"], name=str(uuid.uuid4()), input=json.dumps(event))["executionArn"]
            except ClientError as err:
                code, message = err.response["Error"]["Code"], err.response["Error"].get("Message", "")
                status = int(err.response["ResponseMetadata"]["HTTPStatusCode"])
                delay = min(2.0 ** tries, 300.0)
                if not (status >= 500 or status == 429 or code == "ThrottlingException"):
                    condition = ""
                elif tries > max_retries:
                    condition = "MaximumRetryAttempts"
                elif self.clock() + delay - first > max_age:
                    condition = "MaximumEventAgeInSeconds"
                else:
                    self.clock.sleep(delay)
                    continue
                return Delivery(None, tries, self._dead_letter(machine, event, code, message, condition, tries - 1))
            break
        (execution,) = self._wait([(machine, arn)], first_invocation=first_invocation, started=first, real_seconds=real_seconds)
        return Delivery(execution, tries, None)

    def _dead_letter(self, machine: dict[str, Any], event: Any, code: str, message: str, condition: str, retries: int) -> dict[str, Any]:
        assert machine["dead_letter_arn"], "the target has no dead-letter queue: EventBridge drops the event"
        url = self._sqs.get_queue_url(QueueName=machine["dead_letter_arn"].rsplit(":", 1)[1])["QueueUrl"]
        attributes = {
            "RULE_ARN": machine["rule_arn"], "TARGET_ARN": machine["arn"],
            "ERROR_CODE": EVENTBRIDGE_ERROR_CODES.get(code, "ERROR_FROM_TARGET"),
            "ERROR_MESSAGE": f"{code}: {message}", "RETRY_ATTEMPTS": str(retries),
            **({"EXHAUSTED_RETRY_CONDITION": condition} if condition else {}),
        }  # fmt: skip
        self._sqs.send_message(
            QueueUrl=url, MessageBody=json.dumps(event),
            MessageAttributes={k: {"DataType": "String", "StringValue": v} for k, v in attributes.items()},
        )  # fmt: skip
        return {"body": event, "attributes": attributes}

    def dead_letters(self) -> list[dict[str, Any]]:
        """What the lifecycle events' dead-letter queue holds, as an operator reads it."""
        found = []
        while messages := self._sqs.receive_message(QueueUrl=self.dead_letter_queue_url, MaxNumberOfMessages=10,
                                                    MessageAttributeNames=["All"]).get("Messages"):  # fmt: skip
            for message in messages:
                found.append({"body": json.loads(message["Body"]),
                              "attributes": {k: v["StringValue"] for k, v in message.get("MessageAttributes", {}).items()}})  # fmt: skip
                self._sqs.delete_message(QueueUrl=self.dead_letter_queue_url, ReceiptHandle=message["ReceiptHandle"])
        return found

    def run_reaper(self, *, real_seconds: float = 60.0) -> tuple[dict[str, Any], list[Execution]]:
        """One scheduled run of the reaper function (an EventBridge scheduled event as its input),
        and the executions it started, run to their end."""
        (function,) = [f for f in self.functions.values() if f.handler.endswith(".reaper")]
        first_invocation, started = len(self.invocations), self.clock()
        before = {m["name"]: {e["executionArn"] for e in self._sfn.list_executions(stateMachineArn=m["arn"])["executions"]}
                  for m in self.state_machines.values() if m.get("created")}  # fmt: skip
        for machine in self.state_machines.values():
            self._create(machine)
        event = {"source": "aws.events", "detail-type": "Scheduled Event", "detail": {}}
        answer = self._invoke({"FunctionName": function.arn, "Payload": json.dumps(event)}, self.region, None)
        assert "FunctionError" not in answer, answer["Payload"]
        runs = [
            (machine, execution["executionArn"])
            for machine in self.state_machines.values()
            for execution in self._sfn.list_executions(stateMachineArn=machine["arn"])["executions"]
            if execution["executionArn"] not in before.get(machine["name"], set())
        ]
        return answer["Payload"], self._wait(runs, first_invocation=first_invocation, started=started, real_seconds=real_seconds)

    def alarms(self) -> list[Alarm]:
        """What reached the operators' inbox since the last look."""
        found = []
        while messages := self._sqs.receive_message(QueueUrl=self._inbox, MaxNumberOfMessages=10).get("Messages"):
            for message in messages:
                envelope = json.loads(message["Body"])  # SNS's JSON envelope (raw delivery off)
                found.append(Alarm(envelope.get("Subject", ""), envelope["Message"]))
                self._sqs.delete_message(QueueUrl=self._inbox, ReceiptHandle=message["ReceiptHandle"])
        return found


@contextlib.contextmanager
def _environment(values: Mapping[str, str]) -> Iterator[None]:
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
