"""Parallel test workers each run a control plane; MMRL_POD_SLICE gives each its own part of kwok's pod range and of
the local kubelet's, so the pods two workers run for real never get the same address."""

from __future__ import annotations

import ipaddress

import pytest

from mmrl_local.network import podnet
from mmrl_local.node import kubelet


def test_without_a_slice_a_run_has_the_whole_range(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(podnet.SLICE_ENV, raising=False)
    assert podnet.slice_of(podnet.KWOK_POD_CIDR) == ipaddress.ip_network(podnet.KWOK_POD_CIDR)


def test_the_slices_are_disjoint_parts_of_each_range_and_miss_the_gateway(monkeypatch: pytest.MonkeyPatch) -> None:
    gateway = ipaddress.ip_address(podnet.GATEWAY)
    for whole in (podnet.KWOK_POD_CIDR, kubelet.POD_RANGE):
        parts = []
        for index in range(podnet.SLICES):
            monkeypatch.setenv(podnet.SLICE_ENV, str(index))
            parts.append(podnet.slice_of(whole))
        assert all(part.subnet_of(ipaddress.ip_network(whole)) for part in parts)
        assert len({part.network_address for part in parts}) == podnet.SLICES
        assert sum(part.num_addresses for part in parts) == ipaddress.ip_network(whole).num_addresses
    # kwok's slices never hold the bridge's address (the kubelet skips it in its own range by name).
    for index in range(podnet.SLICES):
        monkeypatch.setenv(podnet.SLICE_ENV, str(index))
        assert gateway not in podnet.slice_of(podnet.KWOK_POD_CIDR)


@pytest.mark.parametrize("bad", ["8", "-1", "gw0", "1.5"])
def test_a_bad_slice_is_refused_naming_the_variable(monkeypatch: pytest.MonkeyPatch, bad: str) -> None:
    monkeypatch.setenv(podnet.SLICE_ENV, bad)
    with pytest.raises(podnet.PodNetError, match=f"{podnet.SLICE_ENV}='{bad}': must be a number from 0 to 7"):
        podnet.slice_of(podnet.KWOK_POD_CIDR)
