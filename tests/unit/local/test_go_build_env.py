"""The environment the control plane's, KubeRay's and Kueue's Go builds run in."""

from __future__ import annotations

import pytest

from mmrl_local.toolchain import build


def test_the_go_toolchain_runs_without_its_collector_up_to_a_memory_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GOGC", raising=False)
    monkeypatch.delenv("GOMEMLIMIT", raising=False)
    env = build._go_env()
    assert env["GOGC"] == "off"
    limit = int(env["GOMEMLIMIT"].removesuffix("MiB"))
    assert 512 <= limit <= 3 * 1024
    assert "-mod=mod" in env["GOFLAGS"].split()


def test_a_callers_gogc_is_kept_and_sets_no_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GOGC", "200")
    monkeypatch.delenv("GOMEMLIMIT", raising=False)
    env = build._go_env()
    assert env["GOGC"] == "200"
    assert "GOMEMLIMIT" not in env
