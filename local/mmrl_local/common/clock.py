"""Timestamps as the Kubernetes API writes them (RFC 3339, UTC): one-second resolution for Time fields, and
microseconds for MicroTime fields such as a Lease's renewTime."""

from __future__ import annotations

from datetime import UTC, datetime


def now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def micro_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
