"""Credentials never reach an error message or a log line."""

from __future__ import annotations

import logging
import os
import re
from typing import Any

_SECRET_OPTIONS = ("key", "secret", "token", "aws_access_key_id", "aws_secret_access_key")


def redact(text: str, storage_options: dict[str, Any] | None = None) -> str:
    """Replace credential values (from ``storage_options`` and the AWS environment) by ***."""
    secrets = [
        os.environ.get(v)
        for v in ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ACCESS_KEY_ID")
    ]
    for k in _SECRET_OPTIONS:
        if storage_options and storage_options.get(k):
            secrets.append(str(storage_options[k]))
    for s in secrets:
        if s and len(s) >= 4:
            text = text.replace(s, "***")
    return text


_CREDENTIAL_PATTERNS = (
    re.compile(r"(Credential=)[^/,\s'\"]+"),
    re.compile(r"(Signature=)[0-9a-fA-F]+"),
    re.compile(
        r"((?:x-amz-security-token|X-Amz-Security-Token)['\"]?\s*[:=]\s*b?['\"]?)[^'\"\s,}&]+"
    ),
    re.compile(
        r"((?:aws_secret_access_key|aws_session_token|aws_access_key_id)['\"]?\s*[:=]\s*['\"]?)[^'\"\s,}]+"
    ),
)


def scrub(text: str) -> str:
    """Remove credentials from a log line: known values (:func:`redact`) and the places SDK
    debug logs print them (SigV4 ``Credential=``, ``Signature=``, security-token headers)."""
    text = redact(text)
    for pattern in _CREDENTIAL_PATTERNS:
        text = pattern.sub(r"\1***", text)
    return text


class ScrubbingFilter(logging.Filter):
    """A handler filter: every record is formatted, scrubbed of credentials, and passed on."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a malformed record: let logging report it as usual
            return True
        clean = scrub(message)
        if clean != message:
            record.msg, record.args = clean, None
        return True
