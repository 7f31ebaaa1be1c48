"""Executions of the node lifecycle state machines, over boto3's Step Functions client: which
instances they served, and starting one (the reaper's backstop for lost lifecycle events)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from .orphans import instance_of


class StepFunctionsExecutions:
    def __init__(self, client: Any) -> None:
        self._client = client

    def instances_served(self, state_machine_arn: str, *, since: datetime) -> set[str]:
        """ListExecutions answers newest first (Step Functions API Reference, ListExecutions),
        so paging stops at the first execution started before `since`."""
        served: set[str] = set()
        for page in self._client.get_paginator("list_executions").paginate(stateMachineArn=state_machine_arn):
            for execution in page["executions"]:
                if execution["startDate"] < since:
                    return served
                described = self._client.describe_execution(executionArn=execution["executionArn"])
                instance = instance_of(described.get("input") or "")
                if instance:
                    served.add(instance)
        return served

    def start(self, state_machine_arn: str, name: str, event: Mapping[str, Any]) -> str:
        answer = self._client.start_execution(stateMachineArn=state_machine_arn, name=name, input=json.dumps(event))
        return str(answer["executionArn"])
