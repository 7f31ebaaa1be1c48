"""`telemetry cluster drain`: drain one Service Fabric node out of the cluster, from an operator's shell.

Runs the scale-in steps of the node lifecycle state machine (lambdas/node_lifecycle)
with the same REST client, looping their wait steps itself, in the order Microsoft
documents for standalone clusters: deactivate (RemoveNode), wait for Disabled, then the
configuration upgrade that takes the node out of `nodes` and names it alone in
NodesToBeRemoved while its machine still runs, and wait until the node has left the node
list. Over REST alone; only if the upgrade leaves the node listed does a clean-up stop
FabricHostSvc (over SSM with --instance-id, else by you) and RemoveNodeState. Every step
picks up where the node is, so re-running after a failure or an interruption is safe.

Before its first change it takes the cluster's membership lock (telemetry/shared/cluster_lock.py; DynamoDB,
so credentials are needed even with the gateway given as flags), stating intent drain and the node,
renews it from its waits and releases it at the end, on failure and on Ctrl-C. While a join, a
drain, a patched node or the reaper holds it, the drain is refused with nothing changed, naming the
holder, its intent, its node and since when.

--dry-run plans offline: the steps a drain takes from a node still in the cluster, which
connection it would use, and what it would read first (the gateway's address and certificates from
the stack and its secrets, then the node's state, which decides the steps already done); a seed
node's name (seed-0 ... from cdk.json's seed_node_count) is refused there as a run refuses it.

exit status, as every `telemetry` subcommand: 0 the node is out of the cluster and its
configuration (or already was); 1 failed (unknown node, TLS, the cluster refused, a seed node
refused with nothing changed, the membership lock held by another, or timed out: re-run to go
on); 2 bad usage or configuration; 130 interrupted.
"""

from __future__ import annotations

import argparse
import functools
import logging
import sys
import time
import warnings
from collections.abc import Callable
from typing import Any
from pathlib import Path
from urllib.parse import urlsplit

from node_lifecycle import (
    FabricHost,
    LifecycleError,
    NodeStage,
    Outcome,
    SeedNodeRefused,
    WaitStatus,
    WaitTimedOut,
    check_node_removed,
    deactivate_node,
    node_stage,
    poll_configuration_upgrade,
    poll_deactivation,
    poll_node_down,
    poll_running_upgrade,
    refuse_seed_node,
    remove_node_state,
    start_configuration_removal,
    stop_fabric_host,
    wait_until_done,
)
from node_lifecycle.membership_config import DEFAULT_START_GRACE_SECONDS
from node_lifecycle.node_stage import describe
from sf_rest import FabricError, ServiceFabricClient, TlsError
from sf_rest.cluster_config import node_names, nodes_to_be_removed
from sf_rest.gateway import DEFAULT_RETRY, DEFAULT_TIMEOUTS, normalise_thumbprint

from telemetry.shared.cluster_lock import ClusterBusy, HeldLock, membership_lock, operator_owner
from telemetry.shared.errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, UsageError, one_line, worded

EXIT_REFUSED = EXIT_FAILED  # a seed node: nothing changed, the message says so
EXIT_TIMED_OUT = EXIT_FAILED  # re-run to go on, the message says so
PROGRESS_EVERY_SECONDS = 30.0
# The drain's hold on the membership lock. Renewed from the wait loops at most once a minute (a
# renewal is a DynamoDB write; a look at the node is every --poll-interval).
LOCK_RENEW_SECONDS = 60.0
# The longest stretch without a renewal is one step between two looks: start_configuration_removal
# makes up to eight gateway calls (the node, the configuration, then for the removal and a
# registration before it the upgrade status, the start and a look after an unknown outcome), each
# ending within the REST client's retry budget plus one more attempt and its backoff (110 s).
GATEWAY_CALL_SECONDS = (DEFAULT_RETRY.max_elapsed_seconds + DEFAULT_RETRY.max_delay_seconds
                        + DEFAULT_TIMEOUTS.connect_seconds + DEFAULT_TIMEOUTS.read_seconds)
LONGEST_STEP_SECONDS = 8 * GATEWAY_CALL_SECONDS


def lock_ttl_seconds(poll_interval: float) -> float:
    """How long the lock outlives its last renewal: the longest step, the renewal's own spacing and
    the sleep before the next look. A drain killed outright keeps others out this long (about 16
    minutes at the default --poll-interval), where the functions' lock_ttl_seconds (an hour or more)
    covers a whole join or drain that never renews."""
    return LONGEST_STEP_SECONDS + LOCK_RENEW_SECONDS + poll_interval


class UnknownNode(Exception):
    pass


def add_gateway_arguments(parser: argparse.ArgumentParser, without_aws: str) -> None:
    """How connect() reaches the HTTP gateway; `without_aws` ends --endpoint's help: what AWS it
    still calls given the certificate and a way to trust the gateway."""
    parser.add_argument("--endpoint", help="HTTP gateway, https://HOST:19080 (default: the stack's HttpGatewayEndpoint "
                        f"output); with the client certificate and a way to trust the gateway, {without_aws}")
    parser.add_argument("--client-cert", metavar="PEM", help="admin client certificate")
    parser.add_argument("--client-key", metavar="PEM", help="its private key")
    trust = parser.add_mutually_exclusive_group()
    trust.add_argument("--ca-bundle", metavar="PEM", help="cluster CA to verify the gateway")
    trust.add_argument(
        "--server-thumbprint",
        metavar="HEX",
        help="verify the gateway by its certificate's SHA-1 (or SHA-256) thumbprint instead",
    )
    trust.add_argument("--insecure", action="store_true", help="do not verify the gateway")


def check_gateway_arguments(args: argparse.Namespace) -> None:
    """add_gateway_arguments' options, refused in one line before anything is called."""
    if bool(args.client_cert) != bool(args.client_key):
        raise UsageError("--client-cert and --client-key go together")
    for flag in ("client_cert", "client_key", "ca_bundle"):
        path = getattr(args, flag)
        if path and not Path(path).is_file():
            raise UsageError(f"--{flag.replace('_', '-')} {path}: no such file")
    if args.endpoint:
        scheme = urlsplit(args.endpoint).scheme
        if scheme not in ("http", "https") or not urlsplit(args.endpoint).netloc:
            raise UsageError(f"--endpoint must be https://HOST:PORT, got {args.endpoint!r}")
    if args.server_thumbprint:
        try:
            normalise_thumbprint(args.server_thumbprint)  # the check the client makes itself
        except ValueError:
            raise UsageError("--server-thumbprint must be 40 (SHA-1) or 64 (SHA-256) hex digits") from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Everything but --env and --region, which `telemetry` gives every subcommand."""
    parser.description = (f"{parser.description or ''} It holds the cluster's membership lock (DynamoDB) from its "
                          "first change to its end, and is refused, changing nothing, while a join, a drain, a "
                          "patched node or the reaper holds it.").strip()
    parser.add_argument("--node", required=True, help="Service Fabric node name to drain")
    add_gateway_arguments(parser, "the only AWS calls are the membership lock's (DynamoDB)")
    parser.add_argument(
        "--instance-id",
        help="clean-up only: stop Fabric on this EC2 instance over SSM if the removal upgrade "
        "leaves the node listed",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=1800.0,
        metavar="SECONDS",
        help="give up after this long in all (default 1800)",
    )
    parser.add_argument(
        "--poll-interval",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="seconds between looks at the cluster (default 10)",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="offline: the steps a drain takes, the connection it would use and what it would read from the stack, "
        "its secrets and the cluster first (the node's state decides which steps are done); call and change nothing",
    )


def check_arguments(args: argparse.Namespace) -> argparse.Namespace:
    check_gateway_arguments(args)
    if args.timeout <= 0 or args.poll_interval <= 0:
        raise UsageError("--timeout and --poll-interval must be positive")
    return args


def say(line: str) -> None:
    print(line, flush=True)


class Drain:
    """The scale-in steps in order, each wait looped until done or out of time."""

    def __init__(
        self,
        client: ServiceFabricClient,
        args: argparse.Namespace,
        host: FabricHost | None,
        renew_lock: Callable[[], None] = lambda: None,
    ) -> None:
        self.client, self.name, self.host, self.args = client, args.node, host, args
        self.renew_lock = renew_lock  # called at every look; renews when it is due
        self.started = time.monotonic()
        self.last_said: dict[str, str] = {}  # label -> the state last printed for it

    def wait(self, what: str, poll: Callable[[], WaitStatus], label: str) -> WaitStatus:
        said_at = [0.0]

        def progress(result: WaitStatus, elapsed: float) -> None:
            self.renew_lock()
            state = result.detail or result.status
            if state != self.last_said.get(label):
                say(f"  {label}: {state}")
                self.last_said[label], said_at[0] = state, elapsed
            elif elapsed - said_at[0] >= PROGRESS_EVERY_SECONDS:
                say(f"  still waiting for {what}: {state} ({elapsed:.0f} s)")
                said_at[0] = elapsed

        remaining = self.args.timeout - (time.monotonic() - self.started)
        try:
            return wait_until_done(
                poll,
                what=what,
                timeout_seconds=max(remaining, 0.0),
                interval_seconds=self.args.poll_interval,
                on_poll=progress,
                sleep=lambda seconds: time.sleep(seconds),  # looked up per call: benchmarks swap it
            )
        except WaitTimedOut as err:
            last_seen = err.last.detail if isinstance(err.last, WaitStatus) else "?"
            raise WaitTimedOut(
                f"--timeout {self.args.timeout:g} s passed waiting for {what} "
                f"(last: {last_seen}); re-run to go on",
                err.last,
            ) from err

    def run(self) -> int:
        client, name = self.client, self.name
        deactivation = deactivate_node(client, name)
        if deactivation.outcome == Outcome.REQUESTED:
            say(f"deactivating {name} (intent {deactivation.intent})")
        elif deactivation.outcome == Outcome.ALREADY_DONE:
            say(f"{name} is already deactivated for removal (intent {deactivation.intent})")
        self.wait(f"{name} to be Disabled", lambda: poll_deactivation(client, name), name)
        self.remove_from_configuration()
        check = check_node_removed(client, name)
        if not check.removed:
            self.clean_up(check.status, check.down)
        return self.confirm_removed()

    def remove_from_configuration(self) -> None:
        client, name, interval = self.client, self.name, self.args.poll_interval
        while True:
            start = start_configuration_removal(client, name, now=time.time())
            if start.outcome != Outcome.WAIT_FOR_UPGRADE:
                break
            say(f"another configuration upgrade is running ({start.detail}); waiting for it first")
            self.wait("the running configuration upgrade", lambda: poll_running_upgrade(client), "upgrade")
            self.pause(interval)  # the UOS may still refuse for a moment after the status clears
        if start.outcome == Outcome.ALREADY_DONE:
            say(f"{name} is already out of the node list and the configuration")
            return
        said = "started" if start.confirmed else "sent; the gateway's timeout passed, the upgrade goes on"
        say(
            f"configuration upgrade to version {start.target_version} {said}: {name} out of "
            "nodes, alone in NodesToBeRemoved; its machine keeps running until it is done"
        )
        change = start.to_dict()
        grace = min(DEFAULT_START_GRACE_SECONDS, 90 * interval)
        self.wait(
            f"the configuration upgrade to {start.target_version}",
            lambda: poll_configuration_upgrade(client, change, now=time.time(), grace_seconds=grace),
            "upgrade",
        )

    def clean_up(self, status: str, down: bool) -> None:
        """The upgrade completed but the node is still listed: the UOS's own RemoveNodeState
        did not happen (it is best effort). Finish it: Down first, then RemoveNodeState."""
        client, name = self.client, self.name
        say(f"clean-up: the upgrade completed but {name} is still listed ({status})")
        if not down:
            self.wait(f"{name} to go Down", self.stop_host(), name)
        if remove_node_state(client, name).changed:
            say(f"clean-up: removed the node state of {name}")

    def pause(self, seconds: float) -> None:
        if time.monotonic() - self.started + seconds > self.args.timeout:
            raise WaitTimedOut(f"--timeout {self.args.timeout:g} s passed; re-run to go on")
        self.renew_lock()
        time.sleep(seconds)

    def stop_host(self) -> Callable[[], WaitStatus]:
        """Stop Fabric over SSM when we can, else leave it to the operator; return the poll."""
        client, name = self.client, self.name
        if self.host is None:
            say(
                f"clean-up: stop FabricHostSvc on {name}'s machine (no --instance-id given); "
                "waiting for the node to go Down"
            )
            return lambda: poll_node_down(client, name)
        stop = stop_fabric_host(client, self.host, name, self.args.instance_id)
        if stop.changed:
            say(
                f"clean-up: stopping FabricHostSvc on {stop.instance_id} over SSM "
                f"(command {stop.command_id})"
            )
        host = self.host
        return lambda: poll_node_down(
            client, name, host=host, instance_id=stop.instance_id, command_id=stop.command_id
        )

    def confirm_removed(self) -> int:
        node = self.client.get_node_info(self.name)
        if node_stage(node) != NodeStage.REMOVED:
            raise LifecycleError(f"{self.name} is still in the node list ({describe(node)})")
        if self.name in node_names(self.client.get_cluster_configuration()):
            raise LifecycleError(f"{self.name} is still in the cluster configuration")
        say(
            f"done: {self.name} is out of the node list and the cluster configuration "
            f"({time.monotonic() - self.started:.0f} s)"
        )
        return EXIT_OK


def precheck(client: ServiceFabricClient, name: str) -> int | None:
    """Stop early for a node that is unknown, already removed, or a seed node."""
    node = client.get_node_info(name)
    config = client.get_cluster_configuration()
    if node is None and name not in node_names(config):
        if name in nodes_to_be_removed(config):
            say(f"{name} is not in the cluster: already removed (listed in NodesToBeRemoved)")
            return EXIT_OK
        removed = [n for n in client.get_node_info_list(status_filter="removed") if n.name == name]
        if removed:  # the FM keeps a removed node's entry for a while (RemovedNodeKeepDuration)
            say(f"{name} is not in the cluster: already removed (the node list shows it Removed)")
            return EXIT_OK
        raise UnknownNode(
            f"node {name!r} is not known to the cluster at {client.endpoint} "
            "(neither in the node list nor in the cluster configuration)"
        )
    check = refuse_seed_node(client, name)
    if check.refused:
        raise SeedNodeRefused(f"{name} is a seed node; nothing was changed ({check.reason})")
    where = "in" if name in node_names(config) else "not in"
    say(
        f"{name}: {describe(node)}; {where} the cluster configuration "
        f"(version {config.get('clusterConfigurationVersion', '?')})"
    )
    return None


def plan(args: argparse.Namespace) -> int:
    """--dry-run: the whole drain from a node still in the cluster, offline; what the node's state
    would skip is named as something a run reads."""
    from stacks.naming import membership_lock_table_name, seed_node_name, stop_host_document_name

    from telemetry.shared.cluster_inventory import service_fabric_stack_name
    from telemetry.shared.output import dry_run_plan

    config = environment(args)
    name, fabric = args.node, config.service_fabric
    seeds = [seed_node_name(index) for index in range(fabric.seed_node_count)]
    if name in seeds:
        raise SeedNodeRefused(f"{name} is a seed node of {config.name} ({', '.join(seeds)}); a drain refuses it and "
                              "changes nothing")
    stack = service_fabric_stack_name(config)
    reads = []
    if not standalone(args):  # as connect() reaches the gateway: the stack's outputs, then its secrets
        reads.append(f"the outputs of stack {stack} (CloudFormation): "
                     + ("" if args.endpoint else "the HTTP gateway's address (HttpGatewayEndpoint), ")
                     + "the certificate secrets' names")
        if not args.client_cert:
            reads.append(f"the admin client certificate: secret {fabric.admin_certificate_secret} (Secrets Manager)")
        if not (args.ca_bundle or args.insecure):
            reads.append(f"the cluster certificate, to verify the gateway: secret {fabric.cluster_certificate_secret} "
                         "(Secrets Manager)")
    reads += [
        f"from the cluster's HTTP gateway: {name}'s status and node type (a seed node is refused, an unknown one is a "
        "failure, one already removed is done), the cluster configuration and its version, and any configuration "
        "upgrade running; so which of the steps below are done already (a drain picks up where the node is)",
    ]
    if args.instance_id:
        reads.append(f"whether {args.instance_id} is a managed node SSM Run Command reaches")
    stop = (f"stop FabricHostSvc on {args.instance_id} over SSM Run Command (document {stop_host_document_name(config)})"
            if args.instance_id else "ask you to stop FabricHostSvc on its machine (no --instance-id)")
    changes = [
        f"take the membership lock ({membership_lock_table_name(config)}) as operator-drain:{name}:<you>@<host>:<pid>, "
        f"intent drain, node {name}, for the whole drain: refused, with nothing changed, while a join, a drain, a "
        f"patched node or the reaper holds it; renewed every {LOCK_RENEW_SECONDS:g} s from the waits (it expires "
        f"{lock_ttl_seconds(args.poll_interval):.0f} s after the last renewal), released at the end, on "
        "failure and on Ctrl-C",
        f"deactivate {name} with intent RemoveNode (RemoveData if refused) and wait until it is Disabled",
        f"start a configuration upgrade to the next version with {name} out of nodes and alone in NodesToBeRemoved "
        "(any earlier value dropped), while its machine runs; first wait for a configuration upgrade already running",
        f"wait until the upgrade has rolled forward and {name} has left the node list",
        f"only if the upgrade leaves {name} listed: {stop}, wait until it is Down, then RemoveNodeState",
        f"give up after --timeout {args.timeout:g} s (a run started again goes on from there)",
    ]
    return dry_run_plan(args, config, summary=[f"drain {name} out of the {config.name} cluster"],
                        would_read=reads, would_change=changes, node=name)


def standalone(args: argparse.Namespace) -> bool:
    """The flags name the whole connection (endpoint, client certificate, how to trust the
    gateway): nothing is read from the stack outputs or the certificate secrets."""
    if not args.endpoint:
        return False
    if urlsplit(args.endpoint).scheme == "http":
        return True
    return bool(args.client_cert and (args.ca_bundle or args.server_thumbprint or args.insecure))


def connect(args: argparse.Namespace, session_factory: Callable[[str], Any]) -> tuple[ServiceFabricClient, Callable[[], None]]:
    """The gateway client and a cleanup for any certificate files written for it."""
    if standalone(args):
        cert = (args.client_cert, args.client_key) if args.client_cert else None
        client = ServiceFabricClient(
            args.endpoint,
            client_certificate=cert,
            ca_bundle=args.ca_bundle,
            server_thumbprint=args.server_thumbprint,
            insecure=args.insecure,
        )
        return client, lambda: None
    # Otherwise the operator tools' shared lookups: stack outputs, then the certificate secrets.
    from telemetry.shared.cluster_inventory import deployed_outputs, gateway_client, service_fabric_stack_name

    session = session_factory(environment(args).region)
    outputs = deployed_outputs(session.client("cloudformation"), service_fabric_stack_name(environment(args)))
    return gateway_client(args, outputs, lambda: session.client("secretsmanager"))


def environment(args: argparse.Namespace) -> Any:
    from stacks.config import load_environment, read_environments

    return load_environment(read_environments(), args.env)


def make_fabric_host(args: argparse.Namespace, session_factory: Callable[[str], Any]) -> FabricHost | None:
    if not args.instance_id:
        return None
    from botocore.exceptions import BotoCoreError, ClientError

    from node_lifecycle.fabric_host import SsmFabricHost

    try:
        from stacks.naming import stop_host_document_name

        config = environment(args)
        host = SsmFabricHost(session_factory(config.region).client("ssm"), stop_host_document=stop_host_document_name(config))
        host.check_access(args.instance_id)
    except (BotoCoreError, ClientError) as err:
        raise LifecycleError(f"cannot use SSM Run Command for {args.instance_id}: {err}") from err
    return host


def drain_holding_the_lock(client: ServiceFabricClient, args: argparse.Namespace,
                           session_factory: Callable[[str], Any]) -> int:
    """The drain's changes, under the membership lock: taken first (refused while another holds
    it), renewed at the waits' looks, released however the drain ends (Ctrl-C included)."""
    from stacks.naming import membership_lock_table_name

    config = environment(args)
    lock = HeldLock(membership_lock(config, session_factory(config.region)), membership_lock_table_name(config),
                    operator_owner("drain", args.node), intent="drain", node=args.node,
                    ttl_seconds=lock_ttl_seconds(args.poll_interval), renew_every_seconds=LOCK_RENEW_SECONDS, say=say)
    with lock:
        return Drain(client, args, make_fabric_host(args, session_factory), renew_lock=lock.renew).run()


def _fail(code: int, kind: str, message: object = None, *, json_output: bool = False) -> int:
    """The one line every telemetry command ends with, `telemetry: error: ...`, the kind of failure
    (refused, timed out, interrupted) first in its message: the exit code says it too."""
    from telemetry.shared.output import error as print_error

    if message is None:  # fail(*worded(error)): (code, message)
        kind, message = "error", kind
    text = one_line(message, limit=400)
    print_error(text if kind == "error" else f"{kind}: {text}", json_output=json_output)
    return code


def run(args: argparse.Namespace, session_factory: Callable[[str], object]) -> int:
    """`telemetry cluster drain`."""
    return drain(args, session_factory)


def drain(args: argparse.Namespace, session_factory: Callable[[str], object]) -> int:
    # Retry notes from the client go to stdout with the progress, so stderr only ever
    # holds the one line that says why we failed.
    logging.basicConfig(stream=sys.stdout, level=logging.WARNING, format="  note: %(message)s")
    json_output = getattr(args, "format", "text") == "json"
    fail = functools.partial(_fail, json_output=json_output)
    if args.insecure:
        warnings.filterwarnings("ignore", message="Unverified HTTPS request")
        say("warning: --insecure: the gateway's certificate is not verified")
    cleanup: Callable[[], None] = lambda: None
    try:
        if args.dry_run:
            return plan(args)
        client, cleanup = connect(args, session_factory)
        with client:
            early = precheck(client, args.node)
            result = "already removed" if early is not None else "removed"
            code = early if early is not None else drain_holding_the_lock(client, args, session_factory)
        if json_output:
            from telemetry.shared.output import document

            document({"node": args.node, "result": result})
        return code
    except (SeedNodeRefused, ClusterBusy) as err:
        return fail(EXIT_REFUSED, "refused", err)
    except WaitTimedOut as err:
        return fail(EXIT_TIMED_OUT, "timed out", err)
    except TlsError as err:
        return fail(
            EXIT_FAILED,
            "error",
            f"TLS with {args.endpoint or 'the gateway'} failed (check "
            f"{'--server-thumbprint' if args.server_thumbprint else '--ca-bundle'} "
            f"and the client certificate): {err.message or err.code}",
        )
    except FabricError as err:
        return fail(EXIT_FAILED, "error", f"the cluster refused or did not answer: {err}")
    except (LifecycleError, UnknownNode) as err:
        return fail(EXIT_FAILED, "error", err)
    except KeyboardInterrupt:
        return fail(EXIT_INTERRUPTED, "interrupted", "re-run to pick up where the node is")
    except Exception as err:  # noqa: BLE001 - an operator tool ends with one line, not a traceback
        return fail(*worded(err))
    finally:
        cleanup()


if __name__ == "__main__":  # run by path, as before the one front door
    from telemetry.shared.errors import moved

    raise SystemExit(moved("cluster drain"))
