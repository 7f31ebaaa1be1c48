"""What moto cannot answer, answered on the wire: botocore's `before-send` event, the same hook
moto itself uses (moto/core/models.py registers `botocore_stubber` there), placed before moto's.

Every request is still built, validated and signed by botocore from the real API model, and every
answer is parsed by botocore with that model, so a call our adapters make wrongly fails here as it
would against AWS. Requests this module does not claim go on to moto.

What is answered here, each with its source:
- Auto Scaling `CompleteLifecycleAction` and `RecordLifecycleActionHeartbeat`, which moto 5.2 does
  not implement (see lifecycle_actions.py for the model of a pending action), and
  `DescribeAutoScalingGroups`, for the instances those pending actions hold.
- The machines behind SSM Run Command: moto records `SendCommand` but cannot run PowerShell, so the
  add-node document joins the node to the emulated cluster and the stop script stops its host;
  AWS-RunPatchBaseline and the patch states it reports are patch_baseline_stand_in.py's.
- Faults: an AWS error answered instead of moto's, `times` times, so that botocore's own retries
  and then ours meet it.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs
from xml.sax.saxutils import escape

from botocore.awsrequest import AWSResponse
from moto.core.botocore_stubber import BotocoreStubber

from tests.sf_emulator import EmulatedCluster

from .lifecycle_actions import LifecycleActions, NoActiveAction

# Wire protocols (botocore/data/<service>/<version>/service-2.json, metadata.protocol).
JSON_SERVICES = {"dynamodb", "ssm", "secrets-manager", "sfn"}
QUERY_NAMESPACES = {
    "auto-scaling": "http://autoscaling.amazonaws.com/doc/2011-01-01/",
    "sns": "http://sns.amazonaws.com/doc/2010-03-31/",
}
ADD_NODE_STATUS_FAILED = "Failed"


class _RawBody:
    """The body of an answer made here, read as urllib3's response would be."""

    def __init__(self, body: bytes) -> None:
        self._body = body

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self._body

    def read(self, *_: Any, **__: Any) -> bytes:
        body, self._body = self._body, b""
        return body


def _answer(url: str, status: int, body: str, content_type: str) -> AWSResponse:
    headers = {"Content-Type": content_type, "x-amzn-RequestId": str(uuid.uuid4())}
    return AWSResponse(url, status, headers, _RawBody(body.encode()))


def _json_error(url: str, status: int, code: str, message: str) -> AWSResponse:
    # JSON protocols: the code in `__type` (botocore's parsers strip any "namespace#" prefix).
    return _answer(url, status, json.dumps({"__type": code, "message": message}), "application/x-amz-json-1.1")


def _query_error(url: str, status: int, code: str, message: str, namespace: str) -> AWSResponse:
    # Query protocol: AWS's ErrorResponse document (botocore QueryParser._do_error_parse).
    body = (
        f'<ErrorResponse xmlns="{namespace}"><Error><Type>Sender</Type><Code>{escape(code)}</Code>'
        f"<Message>{escape(message)}</Message></Error><RequestId>{uuid.uuid4()}</RequestId></ErrorResponse>"
    )
    return _answer(url, status, body, "text/xml")


def _query_ok(url: str, operation: str, namespace: str) -> AWSResponse:
    body = (
        f'<{operation}Response xmlns="{namespace}"><{operation}Result/><ResponseMetadata>'
        f"<RequestId>{uuid.uuid4()}</RequestId></ResponseMetadata></{operation}Response>"
    )
    return _answer(url, 200, body, "text/xml")


def error_answer(service: str, url: str, status: int, code: str, message: str) -> AWSResponse:
    if service in QUERY_NAMESPACES:
        return _query_error(url, status, code, message, QUERY_NAMESPACES[service])
    if service in JSON_SERVICES:
        return _json_error(url, status, code, message)
    raise ValueError(f"no error format for {service} here; add its protocol")


@dataclass
class AwsFault:
    """`times` calls of `service`/`operation` get this error instead of moto's answer."""

    service: str  # botocore's hyphenated service id: dynamodb, ssm, sns, auto-scaling
    operation: str  # e.g. PutItem
    code: str
    message: str
    status: int = 400
    times: int = 1
    seen: int = 0
    hang_seconds: float = 0.0  # virtual seconds the call takes before the answer (a hung connection)


@dataclass
class Machines:
    """The instances as Run Command reaches them: which node each runs, whether its SSM agent has
    registered, and whether AddNode.ps1 works on it."""

    cluster: EmulatedCluster
    add_node_document: str
    node_by_instance: dict[str, str] = field(default_factory=dict)
    unregistered: set[str] = field(default_factory=set)
    add_node_fails: bool = False
    patching: Any = None  # patch_baseline_stand_in.PatchBaselineStandIn: AWS-RunPatchBaseline on the machines
    add_node_failure = "AddNode.ps1: the node could not reach the seed's client connection endpoint"

    def send_command(self, url: str, body: dict[str, Any]) -> AWSResponse | None:
        instance_id = body["InstanceIds"][0]
        if instance_id in self.unregistered:
            # SendCommand's documented answer for an instance whose SSM Agent is not registered
            # yet (SSM API reference, SendCommand, Errors: InvalidInstanceId).
            return _json_error(url, 400, "InvalidInstanceId", "Instances [[%s]] not in a valid state for account" % instance_id)
        document = body["DocumentName"]
        parameters = {name: values[0] for name, values in body.get("Parameters", {}).items()}
        if document == self.add_node_document:
            self.node_by_instance[instance_id] = parameters["nodeName"]
            if not self.add_node_fails:
                self.cluster.join_by_add_node(parameters)
        elif document.endswith("-sf-stop-host"):  # stop_fabric_host.ps1, the stack's stop-host document
            self.cluster.stop_host(self.node_by_instance[instance_id])
        return None  # moto records the command and answers

    def command_invocation(self, url: str, body: dict[str, Any]) -> AWSResponse | None:
        if not self.add_node_fails:
            return None  # moto answers Success
        answer = {
            "CommandId": body["CommandId"],
            "InstanceId": body["InstanceId"],
            "Status": ADD_NODE_STATUS_FAILED,
            "StatusDetails": ADD_NODE_STATUS_FAILED,
            "ResponseCode": 1,  # AddNode.ps1 reports failure by exit code (FACTS.md)
            "StandardErrorContent": self.add_node_failure,
        }
        return _answer(url, 200, json.dumps(answer), "application/x-amz-json-1.1")


class AwsWire:
    """The `before-send` handler: faults first, then the lifecycle actions and the machines."""

    def __init__(self, lifecycle: LifecycleActions, machines: Machines) -> None:
        self.lifecycle = lifecycle
        self.machines = machines
        self.faults: list[AwsFault] = []
        self.calls: list[tuple[str, str]] = []  # (service, operation) of every AWS call, in order
        self._lock = threading.Lock()

    def fail(self, service: str, operation: str, code: str, *, times: int, message: str = "", status: int = 400,
             hang_seconds: float = 0.0) -> AwsFault:  # fmt: skip
        fault = AwsFault(service, operation, code, message or f"{code} (injected by the test)", status, times,
                         hang_seconds=hang_seconds)  # fmt: skip
        self.faults.append(fault)
        return fault

    def __call__(self, event_name: str, request: Any, **_: Any) -> AWSResponse | None:
        _, service, operation = event_name.split(".", 2)
        with self._lock:
            self.calls.append((service, operation))
            for fault in self.faults:
                if (fault.service, fault.operation) == (service, operation) and fault.seen < fault.times:
                    fault.seen += 1
                    if fault.hang_seconds:
                        self.lifecycle.clock.sleep(fault.hang_seconds)
                    return error_answer(service, request.url, fault.status, fault.code, fault.message)
        body = request.body.decode() if isinstance(request.body, bytes) else (request.body or "")
        if service == "auto-scaling" and operation in ("CompleteLifecycleAction", "RecordLifecycleActionHeartbeat"):
            return self._lifecycle_action(request.url, operation, {k: v[0] for k, v in parse_qs(body).items()})
        if service == "auto-scaling" and operation == "DescribeAutoScalingGroups":
            return self._waiting_instances(request.url, {k: v[0] for k, v in parse_qs(body).items()})
        patching = self.machines.patching
        if patching is not None and service == "ssm":
            payload = json.loads(body)
            if operation == "SendCommand" and payload.get("DocumentName") == "AWS-RunPatchBaseline":
                return patching.send_command(request.url, payload)
            if operation == "GetCommandInvocation" and patching.owns(payload["CommandId"]):
                return patching.command_invocation(request.url, payload)
            if operation == "ListCommandInvocations":
                return patching.command_invocations(request.url, payload)
            if operation == "DescribeInstancePatchStates":
                return patching.patch_states(request.url, payload)
        if service == "ssm" and operation == "SendCommand":
            return self.machines.send_command(request.url, json.loads(body))
        if service == "ssm" and operation == "GetCommandInvocation":
            return self.machines.command_invocation(request.url, json.loads(body))
        return None

    def _lifecycle_action(self, url: str, operation: str, form: dict[str, str]) -> AWSResponse:
        namespace = QUERY_NAMESPACES["auto-scaling"]
        address = dict(
            group=form["AutoScalingGroupName"],
            hook=form["LifecycleHookName"],
            token=form.get("LifecycleActionToken", ""),
            instance_id=form.get("InstanceId", ""),
        )
        try:
            if operation == "CompleteLifecycleAction":
                self.lifecycle.complete(result=form["LifecycleActionResult"], **address)
            else:
                self.lifecycle.heartbeat(**address)
        except NoActiveAction as err:
            return _query_error(url, 400, "ValidationError", str(err), namespace)
        return _query_ok(url, operation, namespace)

    def _waiting_instances(self, url: str, form: dict[str, str]) -> AWSResponse:
        """DescribeAutoScalingGroups with each instance a lifecycle hook holds, in the
        LifecycleState the User Guide gives it ("Amazon EC2 Auto Scaling instance lifecycle":
        Pending:Wait, Terminating:Wait), and those whose actions ended as below. Instances no
        action here ever held are not modelled."""
        namespace = QUERY_NAMESPACES["auto-scaling"]
        names = [value for key, value in form.items() if key.startswith("AutoScalingGroupNames.member.")]
        states = {"launch": "Pending:Wait", "terminate": "Terminating:Wait"}
        groups = []
        for name in names:
            # Retained instances too (Terminating:Retained, "Manage retained instances"): the API
            # model's LifecycleState of the Instance shape DescribeAutoScalingGroups answers lists
            # it (botocore's autoscaling service-2.json). A launch completed with CONTINUE is
            # InService; one ABANDONed (or timed out) is Terminating: "If you choose ABANDON for a
            # launch hook, the instance is terminated" (User Guide, lifecycle hooks). Whether its
            # terminate hook then holds it in Terminating:Wait, no page says: a risk.
            listed = [(a, states[a.transition]) for a in self.lifecycle.pending(name)]
            listed += [(a, "Terminating:Retained") for a in self.lifecycle.retained(name)]
            held = {a.instance_id for a, _ in listed}  # an instance's later action says where it is now
            listed += [(a, "InService" if a.result == "CONTINUE" else "Terminating") for a in self.lifecycle.ended(name)
                       if a.transition == "launch" and a.instance_id not in held]  # fmt: skip
            members = "".join(
                f"<member><InstanceId>{escape(a.instance_id)}</InstanceId><LifecycleState>{state}</LifecycleState>"
                "<AvailabilityZone>eu-west-1a</AvailabilityZone><HealthStatus>Healthy</HealthStatus>"
                "<ProtectedFromScaleIn>false</ProtectedFromScaleIn></member>"
                for a, state in listed
            )
            groups.append(f"<member><AutoScalingGroupName>{escape(name)}</AutoScalingGroupName><Instances>{members}</Instances></member>")
        body = (
            f'<DescribeAutoScalingGroupsResponse xmlns="{namespace}"><DescribeAutoScalingGroupsResult>'
            f"<AutoScalingGroups>{''.join(groups)}</AutoScalingGroups></DescribeAutoScalingGroupsResult>"
            f"<ResponseMetadata><RequestId>{uuid.uuid4()}</RequestId></ResponseMetadata></DescribeAutoScalingGroupsResponse>"
        )
        return _answer(url, 200, body, "text/xml")

    def count(self, service: str, operation: str) -> int:
        return self.calls.count((service, operation))


def route_through(wire: Callable[..., AWSResponse | None], monkeypatch: Any) -> None:
    """While moto is active, every botocore session asks `wire` first and moto only for what
    `wire` leaves.

    botocore calls every `before-send` handler and takes the first answer
    (endpoint.Endpoint._do_get_response), so moto's handler, which raises for operations it does
    not implement, is wrapped rather than preceded; patching its class reaches the sessions that
    exist already too."""
    original = BotocoreStubber.__call__

    def wire_then_moto(self: BotocoreStubber, event_name: str, request: Any, **kwargs: Any) -> AWSResponse | None:
        if self.enabled:
            answer = wire(event_name=event_name, request=request, **kwargs)
            if answer is not None:
                return answer
        return original(self, event_name, request, **kwargs)

    monkeypatch.setattr(BotocoreStubber, "__call__", wire_then_moto)
