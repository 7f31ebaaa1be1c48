"""A Run Command document a stack owns."""

from __future__ import annotations

from typing import Any

from aws_cdk import aws_ssm as ssm
from constructs import Construct


def command_document(scope: Construct, construct_id: str, *, name: str, content: dict[str, Any],
                     document_format: str | None = None) -> ssm.CfnDocument:
    """A Command document named `name`. An update adds a version (NewVersion) instead of replacing
    the document, so a command running it is not cut off; the tools send DocumentVersion $LATEST,
    the version the stack deployed last, since an update's NewVersion is not always made the default
    (cloudformation-coverage-roadmap#2539)."""
    return ssm.CfnDocument(scope, construct_id, name=name, document_type="Command", document_format=document_format,
                           update_method="NewVersion", content=content)
