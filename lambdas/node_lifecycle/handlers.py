"""Lambda entry points: node_lifecycle.handlers.scale_in / scale_out / patch / reaper.

Thin by design: validate the environment once, build the adapters once per container,
run one step, publish metrics as CloudWatch embedded-metric-format log lines, and let any
failure out as TransientError or PermanentError (step_errors.py), the two names the state
machines match.
"""

from __future__ import annotations

import os
from typing import Any

import boto3
from aws_lambda_powertools import Metrics
from sf_rest import FabricError

from .runtime import UNREACHABLE, Runtime
from .settings import Settings
from .step_errors import as_step_error
from .patching import PATCH_STEPS
from .workflow import SCALE_IN_STEPS, SCALE_OUT_STEPS, reap, run_step

metrics = Metrics()  # namespace and dimension from the validated settings, on first use
_runtime: Runtime | None = None


def runtime() -> Runtime:
    global _runtime
    if _runtime is None:
        settings = Settings.from_environ(os.environ)
        metrics.namespace = settings.metrics_namespace
        metrics.set_default_dimensions(Cluster=settings.cluster_name)
        built = Runtime.from_settings(settings, boto3.session.Session())
        built.record_metric = lambda name, value, unit: metrics.add_metric(
            name=name, unit=unit, value=value
        )
        _runtime = built
    return _runtime


def _run(body: Any) -> Any:
    try:
        current = runtime()
        try:
            return body(current)
        except FabricError as err:
            if err.code in UNREACHABLE:
                current.forget_client()  # the retry picks a gateway that answers
            raise
    except Exception as err:  # noqa: BLE001 - every failure leaves as one of the two kinds
        raise as_step_error(err) from err


@metrics.log_metrics
def scale_in(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return _run(lambda current: run_step(SCALE_IN_STEPS, current, event))


@metrics.log_metrics
def scale_out(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return _run(lambda current: run_step(SCALE_OUT_STEPS, current, event))


@metrics.log_metrics
def patch(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return _run(lambda current: run_step(PATCH_STEPS, current, event))


@metrics.log_metrics
def reaper(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return _run(reap)
