"""Gateway routes: (method, path, query, body) -> (status, JSON document or None)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import unquote

from .cluster import EmulatedCluster, EmulatedFabricError

Handler = Callable[[EmulatedCluster, Mapping[str, str], Mapping[str, str], Any], tuple[int, Any]]


def _version_at_least(value: str, minimum: str) -> bool:
    try:
        return tuple(int(p) for p in value.split(".")) >= tuple(int(p) for p in minimum.split("."))
    except ValueError:
        return False


def _get_node(cluster, match, query, body):
    node = cluster.get_node(match["name"])
    return (204, None) if node is None else (200, node)


def _list_nodes(cluster, match, query, body):
    try:
        max_results = int(query.get("MaxResults", "0") or 0)
    except ValueError as exc:
        raise EmulatedFabricError(400, "E_INVALIDARG", "MaxResults") from exc
    return 200, cluster.list_nodes(
        query.get("ContinuationToken", ""), query.get("NodeStatusFilter", "default"), max_results
    )


def _deactivate(cluster, match, query, body):
    intent = body.get("DeactivationIntent") if isinstance(body, dict) else None
    if not intent:
        raise EmulatedFabricError(400, "E_INVALIDARG", "DeactivationIntent required")
    cluster.deactivate(match["name"], intent)
    return 200, None


def _activate(cluster, match, query, body):
    cluster.activate(match["name"])
    return 200, None


def _remove_node_state(cluster, match, query, body):
    cluster.remove_node_state(match["name"])
    return 200, None


def _get_configuration(cluster, match, query, body):
    if not query.get("ConfigurationApiVersion"):
        raise EmulatedFabricError(400, "E_INVALIDARG", "ConfigurationApiVersion required")
    return 200, cluster.get_configuration()


def _start_upgrade(cluster, match, query, body):
    cluster.start_upgrade(body)
    return 202, None


def _cluster_health(cluster, match, query, body):
    # httpgateway/ClusterManagementHandler.cpp: GET (and POST, with a policy) /$/GetClusterHealth
    # -> EvaluateClusterHealth. Filters are accepted and not applied: every node is returned.
    return 200, cluster.cluster_health()


def _upgrade_status(cluster, match, query, body):
    return 200, cluster.upgrade_status()


def _provision_fabric(cluster, match, query, body):
    cluster.provision_fabric(body)
    return 200, None  # ClusterManagementHandler::OnProvisionComplete: an empty body


def _start_fabric_upgrade(cluster, match, query, body):
    cluster.start_fabric_upgrade(body)
    return 202, None  # ClusterManagementHandler::OnUpgradeFabricComplete: StatusAccepted


def _fabric_upgrade_progress(cluster, match, query, body):
    return 200, cluster.fabric_upgrade_progress()


def _provisioned_code_versions(cluster, match, query, body):
    # ClusterManagementHandler::GetProvisionedFabricCodeVersions: the CodeVersion filter from the URI.
    return 200, cluster.provisioned_code_versions(query.get("CodeVersion", ""))


# The image store (image_store.py; httpgateway/imagestorehandler.cpp registers these routes on
# Windows only: a Linux gateway has no chunked upload).


def _upload_chunk(cluster, match, query, body):
    cluster.upload_chunk(match["path"], query, body)
    return 200, None  # ImageStoreHandler::OnUploadChunkComplete: OnSuccess, an empty body


def _get_upload_session(cluster, match, query, body):
    return cluster.get_upload_session(query)


def _delete_upload_session(cluster, match, query, body):
    cluster.delete_upload_session(query)
    return 200, None  # OnDeleteUploadSessionComplete: an empty body


def _commit_upload_session(cluster, match, query, body):
    cluster.commit_upload_session(query)
    return 200, None  # OnCommitUploadSessionComplete: an empty body


_NODE = r"/Nodes/(?P<name>[^/]+)"
# The suffixes the Nodes handler lists after /Nodes/{name}/$/ (httpgateway/NodesHandler.cpp,
# Initialize: validHandlerUris), whether the emulator models them or not.
NODE_SUFFIXES = frozenset({"GetLoadInformation", "Activate", "Deactivate", "RemoveNodeState", "GetHealth", "ReportHealth",
                           "Restart", "Stop", "Start"})  # fmt: skip
ROUTES: list[tuple[str, re.Pattern[str], str, Handler]] = [
    ("GET", re.compile(r"^/Nodes$"), "6.3", _list_nodes),
    ("GET", re.compile(rf"^{_NODE}$"), "6.0", _get_node),
    ("POST", re.compile(rf"^{_NODE}/\$/Deactivate$"), "6.0", _deactivate),
    ("POST", re.compile(rf"^{_NODE}/\$/Activate$"), "6.0", _activate),
    ("POST", re.compile(rf"^{_NODE}/\$/RemoveNodeState$"), "6.0", _remove_node_state),
    ("GET", re.compile(r"^/\$/GetClusterConfiguration$"), "6.0", _get_configuration),
    ("POST", re.compile(r"^/\$/StartClusterConfigurationUpgrade$"), "6.0", _start_upgrade),
    ("GET", re.compile(r"^/\$/GetClusterConfigurationUpgradeStatus$"), "6.0", _upgrade_status),
    ("GET", re.compile(r"^/\$/GetClusterHealth$"), "6.0", _cluster_health),
    ("POST", re.compile(r"^/\$/Provision$"), "6.0", _provision_fabric),
    ("POST", re.compile(r"^/\$/Upgrade$"), "6.0", _start_fabric_upgrade),
    ("GET", re.compile(r"^/\$/GetUpgradeProgress$"), "6.0", _fabric_upgrade_progress),
    ("GET", re.compile(r"^/\$/GetProvisionedCodeVersions$"), "6.0", _provisioned_code_versions),
    ("GET", re.compile(r"^/ImageStore/\$/GetUploadSession$"), "6.0", _get_upload_session),
    ("DELETE", re.compile(r"^/ImageStore/\$/DeleteUploadSession$"), "6.0", _delete_upload_session),
    ("POST", re.compile(r"^/ImageStore/\$/CommitUploadSession$"), "6.0", _commit_upload_session),
    ("PUT", re.compile(r"^/ImageStore/(?P<path>.+)/\$/UploadChunk$"), "6.0", _upload_chunk),
]


def dispatch(
    cluster: EmulatedCluster, method: str, path: str, query: Mapping[str, str], body: Any
) -> tuple[int, Any]:
    for route_method, pattern, api_version, handler in ROUTES:
        found = pattern.match(path)
        if route_method != method or not found:
            continue
        if not _version_at_least(query.get("api-version", ""), api_version):
            raise EmulatedFabricError(400, "E_INVALIDARG", f"api-version {api_version} required")
        groups = {key: unquote(value) for key, value in found.groupdict().items()}
        cluster.tick()  # one request, one tick of the cluster's clock
        return handler(cluster, groups, query, body)
    suffix = re.fullmatch(rf"{_NODE}/\$/(?P<suffix>[^/]+)", path)
    if suffix and suffix["suffix"] not in NODE_SUFFIXES:
        # A URL the Nodes handler does not list: GatewayUri::TryParse fails, and the handler answers
        # InvalidArgument (httpgateway/RequestHandlerBase.HandlerAsyncOperation.cpp, OnStart), which
        # the gateway sends as 400 E_INVALIDARG (HttpTransport/HttpUtil.cpp, ErrorCodeToHttpStatus).
        raise EmulatedFabricError(400, "E_INVALIDARG", f"Invalid URL {path}")
    # A URL the real gateway serves and the emulator does not model, or one outside the Nodes
    # handler: loud, so that no test passes on a call nothing here answered.
    raise EmulatedFabricError(404, "EMULATOR_UNKNOWN_ROUTE", f"{method} {path}")
