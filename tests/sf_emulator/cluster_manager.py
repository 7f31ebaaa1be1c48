"""The Cluster Manager's fabric (runtime code) upgrade: provision, start, progress.

A model of what the open-source runtime does (microsoft/service-fabric, newest snapshot):
- src/prod/src/httpgateway/ClusterManagementHandler.cpp (CMH): the gateway's handlers
  ProvisionFabric, UpgradeFabric, GetUpgradeProgress
- src/prod/src/Management/ClusterManager/ClusterManagerReplica.cpp (CMR):
  BeginAcceptProvisionFabric, BeginAcceptUpgradeFabric
- src/prod/src/httpgateway/FabricUpgradeProgress.h (FUP): the progress document
- src/prod/src/Management/HttpTransport/HttpUtil.cpp ErrorCodeToHttpStatus (HU): HTTP statuses
- src/prod/src/managed/Api/src/System/Fabric/Management/ImageBuilder/ImageBuilder.cs (IB) and
  src/prod/src/managed/ImageBuilderExe/ImageBuilderExe.cs (IBE): what Image Builder, which the
  Cluster Manager runs for a provision, answers
Each rule names its function. What no source says is marked as such. The files the provision
reads are the emulator's image store (image_store.py), which the gateway's upload routes write.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from .failover_manager import EmulatedFabricError
from .image_store import ImageStore

# CMH ProvisionFabric: ParameterValidator::MaxFilePathSize bounds CodeFilePath.
MAX_FILE_PATH = 260  # ParameterValidator.h: MaxFilePathSize = MAX_PATH (260)
CODE_VERSION = re.compile(r"^\d+\.\d+\.\d+\.\d+$")  # FabricCodeVersion::TryParse: major.minor.build.hotfix


def _invalid(message: str) -> EmulatedFabricError:
    # CMH: a body that does not deserialize, or a path out of bounds, is InvalidArgument; HU: 400.
    return EmulatedFabricError(400, "E_INVALIDARG", message)


@dataclass
class FabricUpgrade:
    target: str
    previous: str
    domains: list[str]
    mode: str
    description: dict[str, Any]
    done: list[str] = field(default_factory=list)
    ticks: int = 0
    rolling_back: bool = False


class ClusterManager:
    def __init__(self, image_store: ImageStore, code_version: str = "11.4.268.1") -> None:
        self.code_version = code_version
        self.config_version = "1"
        self.image_store = image_store
        self.provisioned: set[str] = {code_version}
        self.upgrade: FabricUpgrade | None = None
        self.state = "RollingForwardCompleted"
        self.ticks_per_domain = 2
        # What the health checks decide (no source: cluster health is not modelled here). A test
        # sets "RollingBackCompleted" for an upgrade that failed health and rolled back
        # (FailureAction Rollback), or "Failed" where FailureAction is Manual.
        self.outcome = "RollingForwardCompleted"
        self.failure_after_domains = 1
        self.last_failed: FabricUpgrade | None = None  # the run a rollback ended

    def put_in_image_store(self, path: str, data: bytes = b"MSCF placeholder") -> None:
        """The package put in the store some other way (Copy-ServiceFabricClusterPackage)."""
        self.image_store.put(path, data)

    def provisioned_code_versions(self, code_version: str) -> list[dict[str, str]]:
        """CMR GetProvisionedFabricCodeVersions: every provisioned code version, or with the
        CodeVersion filter only the one that equals it (StringUtility::Compare, exact); CMH
        answers the list (ProvisionedFabricCodeVersionQueryResultItem: CodeVersion), [] if none."""
        versions = sorted(self.provisioned, key=lambda v: tuple(int(p) for p in v.split(".")))
        return [{"CodeVersion": v} for v in versions if not code_version or v == code_version]

    def provision(self, body: Any) -> None:
        body = body if isinstance(body, dict) else {}
        code, manifest = str(body.get("CodeFilePath") or ""), str(body.get("ClusterManifestFilePath") or "")
        # CMH ProvisionFabric: both empty -> InvalidArgument; either longer than MaxFilePathSize too.
        if not code and not manifest:
            raise _invalid("CodeFilePath or ClusterManifestFilePath required")
        if len(code) > MAX_FILE_PATH or len(manifest) > MAX_FILE_PATH:
            raise _invalid("file path too long")
        # CMR BeginAcceptProvisionFabric: GetFabricVersionInfo runs Image Builder and rejects the
        # request with its error. IB GetFabricVersionInfo: DownloadIfContentExists false ->
        # FileNotFoundException; IBE ManagedToNativeExceptionTranslation -> FABRIC_E_FILE_NOT_FOUND,
        # which ImageBuilderProxy::GetImageBuilderError reads back; HU: 404.
        if self.image_store.file(code) is None:
            raise EmulatedFabricError(404, "FABRIC_E_FILE_NOT_FOUND", f"{code} is not in the image store")
        # Image Builder reads the version from Fabric.exe inside the cab
        # (FabricProvisionOperation.GetCodeVersion -> CabFileOperations.GetCabVersion); the
        # emulator cannot open a cab and takes it from the file name,
        # MicrosoftServiceFabric.<version>.cab (no source: assumed). A name without one is refused
        # as Image Builder refuses a name it cannot parse (ParseFileNameForProductVersion ->
        # ImageBuilderInvalidMsiFile, a validation error; HU: 400).
        found = re.search(r"(\d+\.\d+\.\d+\.\d+)\.cab$", code, re.IGNORECASE)
        if not found:
            raise EmulatedFabricError(400, "FABRIC_E_IMAGEBUILDER_VALIDATION_ERROR", f"{code}: no version in its name")
        version = found.group(1)
        # CMR BeginAcceptProvisionFabric: a version already provisioned ->
        # FabricVersionAlreadyExists; HU: 409 Conflict.
        if version in self.provisioned:
            raise EmulatedFabricError(409, "FABRIC_E_FABRIC_VERSION_ALREADY_EXISTS", f"Fabric version {version} already exists")
        self.provisioned.add(version)

    def start_upgrade(self, body: Any, domains: list[str], *, manifest_upgrade_rolling: bool = False) -> None:
        if not isinstance(body, dict):
            raise _invalid("FabricUpgradeDescription required")  # CMH UpgradeFabric: deserialize fails
        target = str(body.get("CodeVersion") or "")
        if target and not CODE_VERSION.match(target):
            raise _invalid(f"CodeVersion {target}")  # FabricCodeVersion::TryParse in the wrapper's deserialize
        # No default, whatever the REST reference says: FabricUpgradeDescriptionWrapper starts with
        # rollingUpgradeMode_ FABRIC_ROLLING_UPGRADE_MODE_INVALID (ServiceModel/
        # FabricUpgradeDescriptionWrapper.cpp, its constructor), and a body without the field keeps it.
        mode = str(body.get("RollingUpgradeMode") or "Invalid")
        if mode not in ("UnmonitoredAuto", "UnmonitoredManual", "Monitored"):
            raise _invalid(f"RollingUpgradeMode {mode}")  # CMR BeginAcceptUpgradeFabric: Invalid_Upgrade_Mode2
        # CMR BeginAcceptUpgradeFabric: the target must be provisioned -> FabricVersionNotFound
        # (HU: 404).
        if target not in self.provisioned:
            raise EmulatedFabricError(404, "FABRIC_E_FABRIC_VERSION_NOT_FOUND", f"Fabric version {target} not found")
        # CMR BeginAcceptUpgradeFabric, with an upgrade pending: the same description again has its
        # timeout updated and the caller gets FabricUpgradeInProgress (HU: 409); any other
        # description interrupts the pending upgrade and replaces it (TryInterrupt), which the
        # emulator does not model: a test that gets there fails rather than pass on an invented
        # refusal. A configuration upgrade's manifest upgrade is a pending fabric upgrade too
        # (cluster.py says why), so a code upgrade would interrupt it as well.
        if manifest_upgrade_rolling or (self.upgrade is not None and body != self.upgrade.description):
            raise AssertionError("CMR BeginAcceptUpgradeFabric would interrupt the pending upgrade with this one; "
                                 "the emulator does not model that")
        if self.upgrade is not None:
            raise EmulatedFabricError(409, "FABRIC_E_FABRIC_UPGRADE_IN_PROGRESS", "Fabric upgrade in progress")
        # CMR: the current version as target -> FabricAlreadyInTargetVersion (HU: 409).
        if target == self.code_version:
            raise EmulatedFabricError(409, "FABRIC_E_FABRIC_ALREADY_IN_TARGET_VERSION", f"already at {target}")
        self.upgrade = FabricUpgrade(target=target, previous=self.code_version, domains=sorted(domains), mode=mode,
                                     description=body)
        self.state = "RollingForwardInProgress"

    def tick(self) -> None:
        """One upgrade domain every `ticks_per_domain` ticks (no source gives a duration)."""
        run = self.upgrade
        if run is None:
            return
        run.ticks += 1
        if run.ticks < self.ticks_per_domain:
            return
        run.ticks = 0
        if run.rolling_back:  # the domains done are undone, last first
            if run.done:
                run.done.pop()
            if not run.done:
                self.state, self.upgrade = "RollingBackCompleted", None
                self.code_version = run.previous
            return
        if self.outcome != "RollingForwardCompleted" and len(run.done) >= self.failure_after_domains:
            if self.outcome == "Failed":
                self.state = "Failed"
                return
            run.rolling_back = True
            self.state = "RollingBackInProgress"
            self.last_failed = run
            return
        run.done.append(run.domains[len(run.done)])
        if len(run.done) == len(run.domains):
            self.state, self.upgrade = "RollingForwardCompleted", None
            self.code_version = run.target

    def progress(self) -> dict[str, Any]:
        """FUP: CodeVersion, ConfigVersion, UpgradeDomains [{Name, State}], UpgradeState,
        NextUpgradeDomain, RollingUpgradeMode, and (after a failure) FailureReason. CodeVersion is
        the upgrade's target while one runs, else the cluster's version."""
        run = self.upgrade
        if run is None:
            failed = self.last_failed if self.state == "RollingBackCompleted" else None
            document: dict[str, Any] = {"CodeVersion": self.code_version, "ConfigVersion": self.config_version,
                                        "UpgradeState": self.state, "UpgradeDomains": [], "NextUpgradeDomain": ""}
            if failed is not None:
                document["FailureReason"] = "HealthCheck"
            return document
        domains = [{"Name": name, "State": "Completed" if name in run.done else "Pending"} for name in run.domains]
        pending = [name for name in run.domains if name not in run.done]
        document = {"CodeVersion": run.target, "ConfigVersion": self.config_version, "UpgradeState": self.state,
                    "UpgradeDomains": domains, "NextUpgradeDomain": pending[0] if pending else "",
                    "RollingUpgradeMode": run.mode}
        if self.state in ("RollingBackInProgress", "Failed"):
            document["FailureReason"] = "HealthCheck"
        return document
