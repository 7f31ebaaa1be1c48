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
        """ListExecutions sorts running executions by their startDate (or redriveDate) and the
        others by their stopDate, newest first (Step Functions API Reference, ListExecutions). So
        paging stops at the first execution whose sort key is older than `since`, and one that
        sorts after it but started earlier (a long hold that stopped lately, a redrive) is
        skipped: it began before any action still waiting could have."""
        served: set[str] = set()
        for page in self._client.get_paginator("list_executions").paginate(stateMachineArn=state_machine_arn):
            for execution in page["executions"]:
                sorted_by = execution.get("stopDate") or execution.get("redriveDate") or execution["startDate"]
                if sorted_by < since:
                    return served
                if execution["startDate"] < since:
                    continue
                described = self._client.describe_execution(executionArn=execution["executionArn"])
                instance = instance_of(described.get("input") or "")
                if instance:
                    served.add(instance)
        return served

    def start(self, state_machine_arn: str, name: str, event: Mapping[str, Any]) -> str:
        answer = self._client.start_execution(stateMachineArn=state_machine_arn, name=name, input=json.dumps(event))
        return str(answer["executionArn"])
