"""The Service Fabric REST client used by every Lambda and operator script.

One method per gateway operation, each returning typed results. Paths, api-versions
and bodies follow Microsoft's Service Fabric REST reference (sfclient-api-*).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

import requests

from .client_certificate import ClientCertificate
from .code_upgrade import CodeUpgradeProgress, MonitoredCodeUpgrade
from .errors import FabricError
from .gateway import DEFAULT_RETRY, DEFAULT_TIMEOUTS, Gateway, Timeouts
from .image_store import COMMIT_SECONDS, UploadSession, store_relative_path

# How long the gateway may take over Provision (see provision_cluster): no source gives a duration
# for a runtime package; assumed, as the image store's commit is.
PROVISION_SECONDS = 600
from .models import (
    ClusterConfigurationUpgradeStatus,
    ClusterHealth,
    NodeInfo,
    UpgradeHealthPolicy,
)
from .retry import RetryPolicy

API_VERSION = "6.0"
NODE_LIST_API_VERSION = "6.3"
CONFIGURATION_API_VERSION = "10-2017"


def _node_path(name: str, action: str = "") -> str:
    if not name:
        raise ValueError("node name must not be empty")
    path = "/Nodes/" + quote(name, safe="")
    return f"{path}/$/{action}" if action else path


def _image_store_path(content_path: str, action: str) -> str:
    """/ImageStore/{contentPath}/$/{action}: the path relative to the store's root, its folders
    kept as path segments."""
    relative = store_relative_path(content_path)
    if not relative:
        raise ValueError("image store path must not be empty")
    return f"/ImageStore/{quote(relative, safe='/')}/$/{action}"


class ServiceFabricClient:
    """Client for one cluster's HTTP gateway (e.g. https://10.0.1.10:19080).

    Server verification: exactly one of `ca_bundle` (cluster CA PEM path),
    `server_thumbprint` (pinned server certificate) or `insecure=True` for https.
    """

    def __init__(
        self,
        endpoint: str,
        *,
        client_certificate: ClientCertificate | tuple[str, str] | None = None,
        ca_bundle: str | None = None,
        server_thumbprint: str | None = None,
        insecure: bool = False,
        timeouts: Timeouts = DEFAULT_TIMEOUTS,
        retry: RetryPolicy = DEFAULT_RETRY,
        session: requests.Session | None = None,
    ) -> None:
        self._gateway = Gateway(
            endpoint,
            client_certificate=client_certificate,
            ca_bundle=ca_bundle,
            server_thumbprint=server_thumbprint,
            insecure=insecure,
            timeouts=timeouts,
            retry=retry,
            session=session,
        )

    @property
    def endpoint(self) -> str:
        return self._gateway.endpoint

    def close(self) -> None:
        self._gateway.close()

    def __enter__(self) -> ServiceFabricClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- nodes -------------------------------------------------------------------------

    def get_node_info(self, name: str) -> NodeInfo | None:
        """GET /Nodes/{name}; None when the cluster does not know the node (HTTP 204)."""
        response = self._gateway.request(
            "GET", _node_path(name), params={"api-version": API_VERSION}, idempotent=True
        )
        if response.status_code == 204 or not response.content.strip():
            return None
        return NodeInfo.from_json(response.json())

    def get_node_info_list(
        self, *, status_filter: str | None = None, max_results: int | None = None
    ) -> list[NodeInfo]:
        """GET /Nodes, following ContinuationToken until it is empty; all pages joined.

        `status_filter` is NodeStatusFilter ('default' omits Unknown and Removed nodes,
        'all' includes them); `max_results` is the page size asked of the gateway.
        """
        params: dict[str, str | int] = {"api-version": NODE_LIST_API_VERSION}
        if status_filter:
            params["NodeStatusFilter"] = status_filter
        if max_results:
            params["MaxResults"] = max_results
        nodes: list[NodeInfo] = []
        seen_tokens: set[str] = set()
        token = ""
        while True:
            page_params = {**params, "ContinuationToken": token} if token else params
            page = self._gateway.request(
                "GET", "/Nodes", params=page_params, idempotent=True
            ).json()
            nodes.extend(NodeInfo.from_json(item) for item in page.get("Items") or [])
            token = page.get("ContinuationToken") or ""
            if not token:
                return nodes
            if token in seen_tokens:  # a gateway bug; paging on would never end
                raise FabricError("REPEATED_CONTINUATION_TOKEN", token, method="GET", path="/Nodes")
            seen_tokens.add(token)

    def deactivate_node(self, name: str, intent: str) -> None:
        """POST /Nodes/{name}/$/Deactivate. Asynchronous: poll get_node_info afterwards.

        `intent` is a DeactivationIntent. RemoveNode is not in the documented request
        enum; a runtime that refuses it raises InvalidArgumentError (use RemoveData then).
        """
        self._gateway.request(
            "POST",
            _node_path(name, "Deactivate"),
            params={"api-version": API_VERSION},
            body={"DeactivationIntent": str(intent)},
            idempotent=True,  # repeating the same intent leaves the node as it is
        )

    def activate_node(self, name: str) -> None:
        """POST /Nodes/{name}/$/Activate (cancels a deactivation that has not finished)."""
        self._gateway.request(
            "POST",
            _node_path(name, "Activate"),
            params={"api-version": API_VERSION},
            idempotent=True,
        )

    def remove_node_state(self, name: str) -> None:
        """POST /Nodes/{name}/$/RemoveNodeState; raises NodeIsUpError unless the node is Down."""
        self._gateway.request(
            "POST",
            _node_path(name, "RemoveNodeState"),
            params={"api-version": API_VERSION},
            idempotent=True,
        )

    # -- health ------------------------------------------------------------------------

    def get_cluster_health(self) -> ClusterHealth:
        """GET /$/GetClusterHealth with the cluster's own health policy (the POST form, which
        takes a policy in the body, is not used: the cluster's policy is the one upgrades and
        the Patch Orchestration Application honour). Nodes are returned, applications not."""
        response = self._gateway.request(
            "GET",
            "/$/GetClusterHealth",
            params={"api-version": API_VERSION, "NodesHealthStateFilter": "65535", "ApplicationsHealthStateFilter": "1"},
            idempotent=True,
        )
        return ClusterHealth.from_json(response.json())

    # -- standalone cluster configuration ----------------------------------------------

    def get_cluster_configuration(
        self, configuration_api_version: str = CONFIGURATION_API_VERSION
    ) -> dict[str, Any]:
        """GET /$/GetClusterConfiguration -> the ClusterConfig JSON document as a dict."""
        response = self._gateway.request(
            "GET",
            "/$/GetClusterConfiguration",
            params={
                "api-version": API_VERSION,
                "ConfigurationApiVersion": configuration_api_version,
            },
            idempotent=True,
        )
        document = response.json().get("ClusterConfiguration")
        if isinstance(document, str):
            return json.loads(document)
        if isinstance(document, dict):
            return document
        raise ValueError("GetClusterConfiguration answered without ClusterConfiguration")

    def start_cluster_configuration_upgrade(
        self, config: Mapping[str, Any], policy: UpgradeHealthPolicy | None = None
    ) -> None:
        """POST /$/StartClusterConfigurationUpgrade (202). Poll the upgrade status afterwards.

        Not resent after an unknown outcome (read timeout, FABRIC_E_TIMEOUT): the upgrade
        may have started, so callers check get_cluster_configuration_upgrade_status first.
        """
        body: dict[str, Any] = {"ClusterConfig": json.dumps(config)}
        if policy is not None:
            body.update(policy.to_body())
        self._gateway.request(
            "POST",
            "/$/StartClusterConfigurationUpgrade",
            params={"api-version": API_VERSION},
            body=body,
            idempotent=False,
        )

    def get_cluster_configuration_upgrade_status(self) -> ClusterConfigurationUpgradeStatus:
        """GET /$/GetClusterConfigurationUpgradeStatus."""
        response = self._gateway.request(
            "GET",
            "/$/GetClusterConfigurationUpgradeStatus",
            params={"api-version": API_VERSION},
            idempotent=True,
        )
        return ClusterConfigurationUpgradeStatus.from_json(response.json())

    # -- cluster code (runtime) upgrade -------------------------------------------------

    def provision_cluster(self, code_file_path: str) -> None:
        """POST /$/Provision: register a code package already in the image store (its path
        relative to the image store's root). Raises FabricError FABRIC_E_FABRIC_VERSION_ALREADY_EXISTS
        (409) when that version is provisioned already."""
        # Image Builder opens the package to read its version within the request's own timeout,
        # then the Cluster Manager provisions it before answering (ClusterManagerReplica::
        # BeginAcceptProvisionFabric: GetFabricVersionInfo with clientRequest->Timeout, then a
        # persisted FabricProvisionContext). A gigabyte's package outlasts the 30 s other calls get.
        # One that times out goes on (the retry budget, 60 s, is spent by then); the same command
        # run again sends it again, which joins it while it runs
        # (CMRequestAlreadyProcessing -> UpdateOperationTimeout), and once done answers
        # VersionAlreadyExists.
        connect = self._gateway.timeouts.connect_seconds
        self._gateway.request(
            "POST",
            "/$/Provision",
            params={"api-version": API_VERSION},
            body={"CodeFilePath": code_file_path},
            idempotent=True,
            timeouts=Timeouts(connect_seconds=connect, read_seconds=PROVISION_SECONDS + 5,
                              server_seconds=PROVISION_SECONDS),
        )

    def start_cluster_upgrade(self, upgrade: MonitoredCodeUpgrade) -> None:
        """POST /$/Upgrade (202). Poll get_cluster_upgrade_progress afterwards."""
        self._gateway.request(
            "POST",
            "/$/Upgrade",
            params={"api-version": API_VERSION},
            body=upgrade.to_body(),
            # Not resent: a start that went through answers FABRIC_E_FABRIC_UPGRADE_IN_PROGRESS
            # the second time; callers read the progress instead.
            idempotent=False,
        )

    def get_cluster_upgrade_progress(self) -> CodeUpgradeProgress:
        """GET /$/GetUpgradeProgress."""
        response = self._gateway.request(
            "GET", "/$/GetUpgradeProgress", params={"api-version": API_VERSION}, idempotent=True
        )
        return CodeUpgradeProgress.from_json(response.json())

    def get_provisioned_code_versions(self, code_version: str | None = None) -> list[str]:
        """GET /$/GetProvisionedCodeVersions: the runtime versions provisioned in the cluster
        (FabricCodeVersionInfo list); `code_version` keeps only that one (an exact match)."""
        params: dict[str, str | int] = {"api-version": API_VERSION}
        if code_version:
            params["CodeVersion"] = code_version
        response = self._gateway.request("GET", "/$/GetProvisionedCodeVersions", params=params, idempotent=True)
        return [str(item.get("CodeVersion") or "") for item in response.json() or []]

    # -- image store upload sessions (sf_rest.image_store has the whole upload) ----------

    def upload_file_chunk(self, content_path: str, session_id: str, start: int, data: bytes, file_size: int) -> None:
        """PUT /ImageStore/{contentPath}/$/UploadChunk: bytes start..start+len(data)-1 of a file of
        file_size bytes, in the upload session `session_id` (a GUID the caller chooses; the first
        chunk creates the session)."""
        if not data:
            raise ValueError("a chunk carries at least one byte")
        end = start + len(data) - 1
        self._gateway.request(
            "PUT",
            _image_store_path(content_path, "UploadChunk"),
            params={"api-version": API_VERSION, "session-id": session_id},
            data=data,
            headers={"Content-Range": f"bytes {start}-{end}/{file_size}", "Content-Type": "application/octet-stream"},
            # Sent again after an unknown outcome: a chunk the store took already is then refused
            # as a range it no longer expects, which image_store.upload_file checks with the session.
            idempotent=True,
        )

    def get_upload_session(self, session_id: str) -> UploadSession | None:
        """GET /ImageStore/$/GetUploadSession; None when the store has no such session (HTTP 204:
        never created, committed and expired, deleted, or lost at a failover)."""
        response = self._gateway.request(
            "GET",
            "/ImageStore/$/GetUploadSession",
            params={"api-version": API_VERSION, "session-id": session_id},
            idempotent=True,
        )
        if response.status_code == 204 or not response.content.strip():
            return None
        sessions = response.json().get("UploadSessions") or []
        return UploadSession.from_json(sessions[0]) if sessions else None

    def commit_upload_session(self, session_id: str) -> None:
        """POST /ImageStore/$/CommitUploadSession: the file is written (over any file at its path)
        once every range has arrived; E_INVALIDARG while the session expects any range."""
        connect = self._gateway.timeouts.connect_seconds
        self._gateway.request(
            "POST",
            "/ImageStore/$/CommitUploadSession",
            params={"api-version": API_VERSION, "session-id": session_id},
            idempotent=True,  # a commit of a session that already wrote its file answers success
            timeouts=Timeouts(connect_seconds=connect, read_seconds=COMMIT_SECONDS + 5, server_seconds=COMMIT_SECONDS),
        )

    def delete_upload_session(self, session_id: str) -> None:
        """DELETE /ImageStore/$/DeleteUploadSession: the session and the chunks it holds."""
        self._gateway.request(
            "DELETE",
            "/ImageStore/$/DeleteUploadSession",
            params={"api-version": API_VERSION, "session-id": session_id},
            idempotent=True,
        )
