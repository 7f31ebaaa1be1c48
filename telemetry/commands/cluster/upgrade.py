"""`telemetry cluster upgrade`: a monitored upgrade of the Service Fabric runtime (cluster code
upgrade) over the REST API, as the standalone guide does it for a cluster without internet access
("Upgrade the Service Fabric version that runs on your cluster"):

1. GetProvisionedCodeVersions: a version the cluster has provisioned already needs neither the
   package nor a provision, and the next two steps are left out;
2. with --package CAB (MicrosoftServiceFabric.<version>.cab, the Cab link of the release notes,
   on this machine), the package goes into the cluster's image store at --code-file-path (default
   its usual name), over the REST API in chunks of --chunk-size (Upload File Chunk, then Commit
   Image Store Upload Session; telemetry/shared/runtime_package.py and sf_rest/image_store.py). The file is
   checked before any call: a cabinet (MSCF) no shorter than its header says, the version its name
   carries equal to --version, and its SHA-256 equal to --package-sha256 when given. An upload that
   stops is resumed by running the command again within 30 minutes (the store keeps a session's
   chunks that long after the last one): the session id follows from the path, size and SHA-256,
   so the rerun finds it and sends only what the store lacks. Without --package the package must
   be there already (Copy-ServiceFabricClusterPackage -Code, as before);
3. Provision Cluster (POST /$/Provision, CodeFilePath); a version provisioned already is fine;
4. Start Cluster Upgrade (POST /$/Upgrade): Rolling, Monitored, FailureAction Rollback, with
   health checks after each upgrade domain and no unhealthy node or application tolerated;
5. Get Cluster Upgrade Progress (GET /$/GetUpgradeProgress) every --poll-interval seconds, a line
   each time, until RollingForwardCompleted (exit 0); RollingBackCompleted or Failed is exit 1
   with the failure reason. An upgrade to this version already under way is followed, not
   started again; one that completed (the cluster runs the version, its last upgrade
   RollingForwardCompleted) is done: exit 0, saying so, with the cdk.json edit printed again
   unless cdk.json names the version already (a run again after the process died at the end).

Refused (exit 2): a version that is not four dot-separated numbers, a version older than the one
the cluster runs (or equal to it without a completed upgrade to it), an upgrade to another version
under way, and a --package that is missing, not a file, empty, not a cabinet, cut short, named for
another version or of another SHA-256.

Refused (exit 1), before anything is uploaded, provisioned or started: the cluster's membership lock
held (a join, a drain, a patched node or the reaper: the line names the holder, its intent, its node
and since when) or a patch run under way (its progress lease held: the patch-progress item of the
same table, as lambdas/node_lifecycle/patch_progress.py writes it); telemetry/shared/cluster_lock.py reads
both, from DynamoDB even when the gateway and certificate are given as flags. The upgrade restarts
nodes by upgrade domain while they would take one out of service; patching, for its part, refuses
to take a node out of service during a code upgrade. It holds the lock only for the moment of its
start (intent upgrade): it looks at the cluster's upgrade progress again and starts under it, because
a start sent while another upgrade is pending, a drain's removal upgrade included, interrupts that
upgrade and replaces it (ClusterManagerReplica::BeginAcceptUpgradeFabric); a drain then waits for the
code upgrade before its removal. Following an upgrade already under way starts nothing, so that is
not refused.

Launches are suspended for the upgrade's window. A node that joins while the cluster's target code
version is not the runtime it installed is refused, so target tracking would keep launching
instances abandoned in their launch hook. Right before the start, the scaling group's Launch
process is suspended (SuspendProcesses; EC2 Auto Scaling User Guide, "How suspended processes
affect other processes": no scale-out, an instance refresh replaces none, an unhealthy instance is
terminated and replaced only when Launch resumes) and resumed when the upgrade ends, completed,
rolled back or failed, or when the command fails after suspending it; both are said. A completed
upgrade leaves it suspended, saying so: the deployed launch template still prepares the old runtime,
so Launch is resumed (by the command it prints) once cdk.json names the new version and the deploy
has run. A Launch found
suspended already (someone else's, or Auto Scaling's own) is left as found. Interrupted (Ctrl-C) or
out of --timeout while the upgrade runs, the command leaves it suspended and prints the
`aws autoscaling resume-processes` command to run once the upgrade ends. Following an upgrade
already under way changes no process.

When it completes, it prints the edit cdk.json needs so that nodes joining later (AddNode installs
cdk.json's runtime) run the same version: runtime_version, and the release's runtime_cab_url,
standalone_package_url and standalone_package_sha256, then `make deploy`.

--dry-run plans offline from cdk.json: its runtime_version -> --version; with --package it reads
and hashes the file (nothing from AWS or the cluster) and says how many chunks it would send.
"""

from __future__ import annotations

import argparse
import re
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from simulator.topic_admin import positive_seconds  # as telemetry topics and cluster refresh read theirs
from stacks.config import (
    RUNTIME_VERSION_PATTERN,
    SERVICE_FABRIC_RUNTIME_VERSION,
    SHA256_PATTERN,
    load_environment,
    read_environments,
)
from stacks.naming import membership_lock_table_name, scaling_group_name
from telemetry.commands.cluster.drain import add_gateway_arguments, check_gateway_arguments, connect
from telemetry.shared import runtime_package
from telemetry.shared import output
from telemetry.shared.cluster_lock import HeldLock, membership_lock, operator_owner, refuse_while_held
from telemetry.shared.errors import OperationFailed, UsageError
from telemetry.shared.scaling_group import resume_launch_command

ALREADY_PROVISIONED = "FABRIC_E_FABRIC_VERSION_ALREADY_EXISTS"  # ClusterManagerReplica::BeginAcceptProvisionFabric
UPGRADE_IN_PROGRESS = "FABRIC_E_FABRIC_UPGRADE_IN_PROGRESS"  # ClusterManagerReplica::BeginAcceptUpgradeFabric
# How long the start's hold on the membership lock outlives a command killed while it holds it: the
# hold spans one look and one start (each a gateway call of at most a minute with its retries).
START_LOCK_TTL_SECONDS = 300


def version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def code_file_path(args: argparse.Namespace) -> str:
    """Where Copy-ServiceFabricClusterPackage puts the cab by default, its file name; --package too.
    Relative to the store's root, as the upload keeps it: Image Builder refuses a rooted path
    (ImageBuilderUtility.ValidateRelativePath)."""
    from sf_rest.image_store import store_relative_path

    return store_relative_path(args.code_file_path or f"MicrosoftServiceFabric.{args.version}.cab")


def upgrade_description(version: str) -> Any:
    from sf_rest.code_upgrade import MonitoredCodeUpgrade

    return MonitoredCodeUpgrade(code_version=version)


def cdk_json_edit(env: str, version: str) -> dict[str, str]:
    key = f"environments.{env}.service_fabric"
    return {
        f"{key}.runtime_version": version,
        f"{key}.runtime_cab_url": f"the Cab link of {version} in its release notes (microsoft/service-fabric release_notes)",
        f"{key}.standalone_package_url": f"the Package link of {version} in the same release notes",
        f"{key}.standalone_package_sha256": "Get-FileHash -Algorithm SHA256 of that package, after review",
    }


def edit_lines(env: str, version: str) -> list[str]:
    lines = [f"cdk.json must follow, so nodes that join later install {version} too:"]
    lines += [f"  {key}: {value}" for key, value in cdk_json_edit(env, version).items()]
    lines.append(f"then: make deploy ENV={env}")
    return lines


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--version", required=True, metavar="V", help="the runtime version to upgrade to, such as 11.5.0.1")
    parser.add_argument("--code-file-path", metavar="PATH",
                        help="the code package's path in the image store (default MicrosoftServiceFabric.V.cab, where "
                             "--package and Copy-ServiceFabricClusterPackage put it)")
    parser.add_argument("--package", metavar="CAB",
                        help="the runtime package on this machine (MicrosoftServiceFabric.V.cab, the Cab link of V's "
                             "release notes): uploaded into the image store at --code-file-path first, in chunks, "
                             "resumable for 30 minutes by running again; not when the cluster has V provisioned already")
    parser.add_argument("--package-sha256", metavar="HEX",
                        help="refuse the package, before any call, unless its SHA-256 is this (what Get-FileHash "
                             "-Algorithm SHA256 or sha256sum printed for the file you reviewed)")
    parser.add_argument("--chunk-size", type=runtime_package.chunk_size, default=runtime_package.DEFAULT_CHUNK_BYTES,
                        metavar="SIZE", help="bytes per upload request, each sent again whole if it fails "
                                             "(default 8MiB; 64KiB to 32MiB)")
    parser.description = (f"{parser.description or ''} Before it uploads, provisions or starts anything it reads "
                          "the cluster's membership lock and the patch progress lease (DynamoDB) and starts nothing "
                          "while either is held; it takes neither.").strip()
    add_gateway_arguments(parser, "the only AWS calls are the reads of the membership lock and the patch progress "
                                  "lease")
    parser.add_argument("--timeout", type=positive_seconds, default=12 * 3600.0, metavar="SECONDS",
                        help="follow the upgrade this long (default 43200); it goes on after")
    parser.add_argument("--poll-interval", type=positive_seconds, default=60.0, metavar="SECONDS",
                        help="seconds between progress lines (default 60)")
    parser.add_argument("--dry-run", action="store_true",
                        help="offline: the upgrade from cdk.json's runtime_version to --version, its policy and what a "
                             "run would read from the cluster first (with --package: the file checked and hashed, the "
                             "chunks a run would send); call and change nothing")  # fmt: skip


def check_arguments(args: argparse.Namespace) -> argparse.Namespace:
    if not re.fullmatch(RUNTIME_VERSION_PATTERN, args.version):
        raise UsageError(f"--version {args.version!r} is not a Service Fabric runtime version (four dot-separated "
                         f"numbers, such as {SERVICE_FABRIC_RUNTIME_VERSION})")
    check_gateway_arguments(args)
    if args.code_file_path is not None and not args.code_file_path.endswith(".cab"):
        # Image Builder reads a path ending otherwise (.CAB too: ImageBuilderUtility.IsCabFile
        # compares case-sensitively) as an XCopy package, which a runtime cab is not.
        raise UsageError(f"--code-file-path {args.code_file_path} must end in .cab (lower case), the runtime "
                         "package's extension as Image Builder reads it")
    named = runtime_package.NAMED_VERSION.search(args.code_file_path or "")
    if named and named.group(1) != args.version:
        raise UsageError(f"--code-file-path {args.code_file_path} names the runtime {named.group(1)}, not --version "
                         f"{args.version}")
    if args.package_sha256 and not args.package:
        raise UsageError("--package-sha256 goes with --package")
    if args.package_sha256 and not re.fullmatch(SHA256_PATTERN, args.package_sha256):
        raise UsageError(f"--package-sha256 {args.package_sha256!r} is not a SHA-256 (64 hexadecimal characters)")
    if args.package:
        runtime_package.check_file(args.package, args.version)
    return args


def refuse_not_newer(version: str, current: str, where: str) -> None:
    if version_key(version) <= version_key(current):
        raise UsageError(f"--version {version} is not newer than {current}, which {where}; a code upgrade goes to a "
                         "newer runtime")


def plan(args: argparse.Namespace, config: Any) -> int:
    current = config.service_fabric.runtime_version
    refuse_not_newer(args.version, current, "cdk.json names (runtime_version)")
    body = upgrade_description(args.version).to_body()
    path = code_file_path(args)
    policy = body["MonitoringPolicy"]
    package = runtime_package.read(args.package, args.package_sha256) if args.package else None
    uploading, would_read, would_change = [], [], []
    if package is not None:
        described = package.describe(path, args.chunk_size)
        uploading = [f"  upload {package.path.name} ({runtime_package.mib(package.size)}, SHA-256 {package.sha256}) "
                     f"into the image store at {path}: {runtime_package.chunks(described['chunks'])} of at most "
                     f"{runtime_package.mib(args.chunk_size)}, resumable for 30 minutes by running again"]
        would_read = [f"what the image store has of it from an earlier run (upload session {described['session_id']})"]
        would_change = [f"upload {package.path.name} ({package.size} bytes) into the image store at {path} (PUT "
                        f"/ImageStore/{path}/$/UploadChunk x {described['chunks']}, then POST "
                        "/ImageStore/$/CommitUploadSession), unless the image store has part of it already"]
    return output.dry_run_plan(
        args, config,
        summary=[f"Service Fabric runtime {current} (cdk.json) -> {args.version}",
                 *uploading,
                 f"  provision {path} from the image store, then a Rolling, Monitored upgrade, FailureAction "
                 f"{policy['FailureAction']}: health checked {policy['HealthCheckWaitDurationInMilliseconds']} after "
                 f"each upgrade domain, stable for {policy['HealthCheckStableDurationInMilliseconds']}, no unhealthy "
                 "node or application",
                 *("  " + line for line in edit_lines(config.name, args.version))],
        would_read=[
            f"who holds the membership lock and the patch progress lease ({membership_lock_table_name(config)}, items "
            "cluster-membership and patch-progress): either held, and nothing is uploaded, provisioned or started",
            "the gateway's endpoint and the admin certificate (the ServiceFabric stack's outputs and the certificate "
            "secret), unless given as flags",
            "the cluster's runtime version and whether an upgrade is under way (GetUpgradeProgress): a version not "
            "newer, or another upgrade under way, is refused",
            f"whether {args.version} is provisioned already (GetProvisionedCodeVersions): then nothing is uploaded or "
            "provisioned",
            *would_read,
        ],
        would_change=[
            *would_change,
            f"provision {path} (POST /$/Provision; "
            + ("the package just uploaded)" if package else "it must be in the image store already: --package puts it there)"),
            f"suspend the Launch process of {scaling_group_name(config)} (SuspendProcesses) right before the start, "
            "unless it is suspended already: no node launches to join a cluster whose target version it does not run",
            f"take the membership lock (intent upgrade) for the start alone, look at the upgrade progress again, "
            f"start the code upgrade to {args.version} (POST /$/Upgrade), let the lock go, and follow it (GET /$/GetUpgradeProgress) "
            f"a line every {args.poll_interval:g} s until it completes or rolls back",
            f"resume the Launch process of {scaling_group_name(config)} (ResumeProcesses) when the upgrade rolls back "
            "or fails, or when the command fails after suspending it; after a completed upgrade, and when interrupted or "
            "out of --timeout while the upgrade runs, it is left suspended and the resume command printed (once "
            "completed: to run after cdk.json names the version and the deploy has run)",
        ],
        from_version=current, version=args.version, code_file_path=path,
        package=package.describe(path, args.chunk_size) if package else None, upgrade=body,
        cdk_json=cdk_json_edit(config.name, args.version),
    )  # fmt: skip


def run(args: argparse.Namespace, session_factory: Callable[[str], Any]) -> int:
    config = load_environment(read_environments(), args.env)
    if args.dry_run:
        return plan(args, config)
    # Read whole and hashed before any call: a package other than --package-sha256 calls nothing.
    package = runtime_package.read(args.package, args.package_sha256) if args.package else None
    session = session_factory(config.region)
    client, clean_up = connect(args, session_factory)
    try:
        return upgrade(args, config, client, package=package,
                       refuse_if_held=lambda: refuse_while_held(config, session, "telemetry cluster upgrade"),
                       launches=LaunchSuspension(session, scaling_group_name(config), config.region),
                       hold_for_start=lambda: start_lock(config, session))
    finally:
        clean_up()
        client.close()


def provision(args: argparse.Namespace, client: Any, package: runtime_package.RuntimePackage | None) -> dict | None:
    """Upload the package if there is one, then provision it; neither when the cluster has the
    version provisioned already. What the upload did, for the run's document."""
    from sf_rest import FabricError

    path = code_file_path(args)
    if args.version in client.get_provisioned_code_versions(args.version):
        print(f"{args.version} is provisioned already" + (": the package is not uploaded" if package else ""))
        return {"skipped": f"{args.version} is provisioned already"} if package else None
    uploaded = runtime_package.upload(client, package, path, args.chunk_size) if package else None
    try:
        client.provision_cluster(path)
        print(f"provisioned {path}")
    except FabricError as error:
        if error.code != ALREADY_PROVISIONED:
            hint = ("" if package else "; is the package in the image store? --package "
                    f"MicrosoftServiceFabric.{args.version}.cab uploads it")
            raise OperationFailed(f"provisioning {path} failed: {error.code} {error}{hint}") from None
        print(f"{args.version} is provisioned already")
    return uploaded


def already_done(args: argparse.Namespace, config: Any, progress: Any) -> int:
    """The cluster runs --version and its last upgrade completed: what the completed run ended with,
    the cdk.json edit, again, unless cdk.json's runtime_version is the version already. Exit 0."""
    edit = None if config.service_fabric.runtime_version == args.version else cdk_json_edit(config.name, args.version)
    print(f"the cluster runs {args.version} already ({progress.state}): the upgrade is done, nothing was started")
    if edit:
        print("\n".join(edit_lines(config.name, args.version)))
    else:
        print(f"cdk.json names {args.version} too (environments.{config.name}.service_fabric.runtime_version): "
              "nothing to edit")
    if args.format == "json":
        output.document({"environment": config.name, "version": args.version, "previous": None, "state": progress.state,
                         "upload": None, "cdk_json": edit, "already_done": True})
    return 0


class UpgradeGoesOn(OperationFailed):
    """--timeout passed while the upgrade runs on (exit 1)."""


class LaunchSuspension:
    """The scaling group's Launch process suspended for the upgrade's window, and resumed after it,
    unless it was suspended before (then it is left as found). A blank one (no session) does nothing."""

    def __init__(self, session: Any, group: str, region: str, say: Callable[[str], None] = print) -> None:
        self.client = session.client("autoscaling") if session is not None else None
        self.group, self.region, self.say = group, region, say
        self.suspended = False  # by this command, and not resumed yet

    def suspend(self) -> None:
        if self.client is None:
            return
        found = self._suspended()
        if "Launch" in found:
            self.say(f"the Launch process of {self.group} is suspended already ({found['Launch'] or 'no reason given'}): "
                     "left as it is, and not resumed when the upgrade ends")
            return
        self.client.suspend_processes(AutoScalingGroupName=self.group, ScalingProcesses=["Launch"])
        self.suspended = True
        self.say(f"suspended the Launch process of {self.group} for the upgrade's window: no instance launches, so no "
                 "node tries to join while the cluster's target version differs from the runtime it would install "
                 "(target tracking cannot scale out meanwhile)")

    def resume(self) -> None:
        from botocore.exceptions import BotoCoreError, ClientError

        if not self.suspended:
            return
        self.suspended = False
        try:
            self.client.resume_processes(AutoScalingGroupName=self.group, ScalingProcesses=["Launch"])
        except (BotoCoreError, ClientError) as err:  # the upgrade's own outcome is what the command ends with
            self.say(f"resuming the Launch process of {self.group} failed ({err}): run {self.resume_command()}")
            return
        self.say(f"resumed the Launch process of {self.group}: the group launches instances again")

    def keep_until_deployed(self, version: str, env: str) -> None:
        """The upgrade completed: the group's launch template still prepares cdk.json's old runtime,
        so a node launched now would be refused at its join. Launch stays suspended until the
        deploy that carries the new version; say so, and how to resume."""
        if not self.suspended and not self._launch_suspended():  # a run that followed: an earlier one suspended it
            return
        self.suspended = False
        self.say(f"the Launch process of {self.group} stays suspended: a node launched now would install the runtime "
                 f"the deployed launch template names and be refused by a cluster at {version}. Once cdk.json names "
                 f"{version} and make deploy ENV={env} has run, resume it: {self.resume_command()}")

    def _launch_suspended(self) -> bool:
        return self.client is not None and "Launch" in self._suspended()

    def _suspended(self) -> dict[str, str]:
        """The group's suspended processes, each with its reason."""
        groups = self.client.describe_auto_scaling_groups(AutoScalingGroupNames=[self.group])["AutoScalingGroups"]
        return {p["ProcessName"]: p.get("SuspensionReason", "") for g in groups for p in g.get("SuspendedProcesses", [])}

    def resume_command(self) -> str:
        return resume_launch_command(self.group, self.region)

    def leave_suspended(self) -> None:
        """The upgrade runs on without this command: Launch stays suspended; say how to resume it."""
        if not self.suspended:
            return
        self.suspended = False
        self.say(f"the Launch process of {self.group} stays suspended while the upgrade runs; once it has rolled back, "
                 f"or completed and the deploy carries its version, resume it: {self.resume_command()}")


def start_lock(config: Any, session: Any) -> HeldLock:
    """The membership lock for the moment of the start: no drain is between its own look at the
    cluster and its removal upgrade's start while the upgrade looks and starts (either start would
    interrupt the other's upgrade)."""
    return HeldLock(membership_lock(config, session), membership_lock_table_name(config),
                    operator_owner("upgrade", "cluster"), intent="upgrade", node="",
                    ttl_seconds=START_LOCK_TTL_SECONDS, renew_every_seconds=START_LOCK_TTL_SECONDS, say=print)  # fmt: skip


def upgrade(args: argparse.Namespace, config: Any, client: Any, *, package: runtime_package.RuntimePackage | None = None,
            refuse_if_held: Callable[[], None] = lambda: None, launches: LaunchSuspension | None = None,
            clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
            hold_for_start: Callable[[], AbstractContextManager[Any]] = nullcontext) -> int:
    """Start (or follow) the upgrade and follow it to its end; with `launches`, the scaling group's
    Launch process suspended from right before the start until the upgrade ends."""
    window = launches if launches is not None else LaunchSuspension(None, "", "")
    try:
        return _upgrade(args, config, client, package=package, refuse_if_held=refuse_if_held, launches=window,
                        clock=clock, sleep=sleep, hold_for_start=hold_for_start)
    except (KeyboardInterrupt, UpgradeGoesOn):
        window.leave_suspended()  # the upgrade runs on: a join now would be refused
        raise
    finally:
        window.resume()


def _upgrade(args: argparse.Namespace, config: Any, client: Any, *, package: runtime_package.RuntimePackage | None,
             refuse_if_held: Callable[[], None], launches: LaunchSuspension, clock: Callable[[], float],
             sleep: Callable[[float], None], hold_for_start: Callable[[], AbstractContextManager[Any]]) -> int:
    from sf_rest import FabricError
    from sf_rest.code_upgrade import FORWARD_COMPLETED

    progress = client.get_cluster_upgrade_progress()
    following = progress.running and progress.code_version == args.version
    if progress.running and not following:
        raise UsageError(f"an upgrade to {progress.code_version} is under way ({progress.state}); wait until it ends, "
                         "then run again")
    if not following and progress.state == FORWARD_COMPLETED and progress.code_version == args.version:
        return already_done(args, config, progress)
    uploaded = None
    if not following:
        previous = progress.code_version
        refuse_not_newer(args.version, previous, "the cluster runs")
        refuse_if_held()
        uploaded = provision(args, client, package)
        launches.suspend()
        # Looked at again just before the start, under the membership lock: the upload and
        # provisioning take minutes, and a start sent while another upgrade is pending (a drain's
        # removal upgrade included) does not fail, it interrupts that upgrade and replaces it
        # (ClusterManagerReplica::BeginAcceptUpgradeFabric, TryInterrupt).
        with hold_for_start():
            if (running := client.get_cluster_upgrade_progress()).running:
                raise UsageError(f"an upgrade to {running.code_version} began meanwhile ({running.state}); nothing "
                                 "was started: wait until it ends, then run again")
            try:
                client.start_cluster_upgrade(upgrade_description(args.version))
                print(f"upgrade {previous} -> {args.version} started: Rolling, Monitored, FailureAction Rollback")
            except FabricError as error:
                if error.code != UPGRADE_IN_PROGRESS:
                    raise
                running = client.get_cluster_upgrade_progress()
                if running.code_version != args.version:
                    raise UsageError(f"an upgrade to {running.code_version} is under way ({running.state}); wait until "
                                     "it ends, then run again") from None
    else:
        previous = ""
        print(f"an upgrade to {args.version} is under way ({progress.state}); following it")
    started = clock()
    while True:
        progress = client.get_cluster_upgrade_progress()
        elapsed = clock() - started
        print(f"[{elapsed:6.0f} s] {progress.summary()}", flush=True)
        if progress.state == FORWARD_COMPLETED and progress.code_version == args.version:
            print(f"the cluster runs {args.version}")
            print("\n".join(edit_lines(config.name, args.version)))
            launches.keep_until_deployed(args.version, config.name)
            if args.format == "json":
                output.document({"environment": config.name, "version": args.version, "previous": previous or None,
                                 "state": progress.state, "upload": uploaded,
                                 "cdk_json": cdk_json_edit(config.name, args.version)})
            return 0
        if not progress.running:
            raise OperationFailed(f"the upgrade to {args.version} ended {progress.state} (failure: "
                                  f"{progress.failure_reason or 'not given'}); the cluster runs {progress.code_version}; "
                                  "its health evaluations say why (Get-ServiceFabricClusterUpgrade)")
        if elapsed >= args.timeout:
            raise UpgradeGoesOn(f"the upgrade to {args.version} is still {progress.state} after {args.timeout:.0f} s; "
                                "it goes on: run this command again to follow it")
        sleep(args.poll_interval)


if __name__ == "__main__":  # run by path, as before the one front door
    from telemetry.shared.errors import moved

    raise SystemExit(moved("cluster upgrade"))
