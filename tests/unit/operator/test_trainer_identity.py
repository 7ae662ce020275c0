"""Each namespace's trainer identity: what the operator builds (no job owns it; the Role grants only status patches),
how it tells from its watch cache that an object is not as built, and the platform's settings (the chart's
trainerIdentity values) that put the annotations on it."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from mmrl_api import constants as c
from mmrl_operator.core.builders.identity import build_trainer_identity, differs
from mmrl_operator.core.names import TRAINER_IDENTITY
from mmrl_operator.runtime.identity import IdentitySettings, TrainerIdentities

ROLE_ARN = {"eks.amazonaws.com/role-arn": "arn:aws:iam::111122223333:role/team-a-trainer"}


def identity(annotations: dict[str, str] | None = None) -> dict[str, dict[str, Any]]:
    return {o["kind"]: o for o in build_trainer_identity("team-a", annotations or {})}


def as_stored(obj: dict[str, Any]) -> dict[str, Any]:
    """The object as the apiserver returns it: with fields and labels of its own and other managers'."""
    stored = copy.deepcopy(obj)
    meta = stored["metadata"]
    meta.update(resourceVersion="42", uid="u-1", creationTimestamp="2026-01-01T00:00:00Z")
    meta["labels"]["team"] = "vision"  # someone else's label: theirs to keep
    meta["annotations"]["note"] = "by hand"
    return stored


def test_the_identity_is_the_namespaces_not_a_jobs_and_may_only_patch_job_status() -> None:
    made = identity(ROLE_ARN)
    assert list(made) == ["ServiceAccount", "Role", "RoleBinding"]  # the order they can be applied in
    for obj in made.values():
        meta = obj["metadata"]
        assert (meta["name"], meta["namespace"]) == (TRAINER_IDENTITY, "team-a")
        assert "ownerReferences" not in meta and c.LABEL_JOB not in meta["labels"]  # it outlives every job
        assert meta["labels"][c.LABEL_MANAGED_BY] == c.MANAGED_BY
    # No read of any job, no write of a spec: the policy narrows the patch to the pod's own job and fields.
    assert made["Role"]["rules"] == [
        {"apiGroups": [c.GROUP], "resources": ["multimodalrljobs/status"], "verbs": ["patch"]}
    ]
    assert made["RoleBinding"]["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": TRAINER_IDENTITY,
    }
    assert made["RoleBinding"]["subjects"] == [
        {"kind": "ServiceAccount", "name": TRAINER_IDENTITY, "namespace": "team-a"}
    ]
    assert ROLE_ARN.items() <= made["ServiceAccount"]["metadata"]["annotations"].items()
    assert "eks.amazonaws.com/role-arn" not in made["Role"]["metadata"]["annotations"]


def test_an_object_as_built_needs_no_write_whatever_others_added() -> None:
    for obj in identity(ROLE_ARN).values():
        assert differs(obj, None)  # missing
        assert not differs(obj, as_stored(obj))


def test_an_edit_of_what_the_operator_sets_needs_a_write() -> None:
    built = identity(ROLE_ARN)
    changed_arn = as_stored(built["ServiceAccount"])
    changed_arn["metadata"]["annotations"]["eks.amazonaws.com/role-arn"] = "arn:aws:iam::999999999999:role/theirs"
    removed_arn = as_stored(built["ServiceAccount"])
    del removed_arn["metadata"]["annotations"]["eks.amazonaws.com/role-arn"]
    unlabelled = as_stored(built["ServiceAccount"])
    del unlabelled["metadata"]["labels"][c.LABEL_MANAGED_BY]
    wider = as_stored(built["Role"])
    wider["rules"] = [*wider["rules"], {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]
    rebound = as_stored(built["RoleBinding"])
    rebound["subjects"] = [*rebound["subjects"], {"kind": "ServiceAccount", "name": "default", "namespace": "team-a"}]
    for edited in (changed_arn, removed_arn, unlabelled, wider, rebound):
        assert differs(built[edited["kind"]], edited), edited


def test_an_annotation_the_platform_stops_setting_is_applied_away() -> None:
    # Server-side apply removes a field its manager no longer sends: for that the object must be applied again, so
    # the digest of what the operator sets differs though every annotation it still sets is there.
    before = as_stored(identity(ROLE_ARN)["ServiceAccount"])
    assert differs(identity({})["ServiceAccount"], before)


def test_per_namespace_settings_replace_the_default_annotations() -> None:
    settings = IdentitySettings.parse(
        {"annotations": ROLE_ARN, "namespaces": {"team-b": {"annotations": {"x.example.com/a": "b"}}, "team-c": None}}
    )
    assert settings.annotations_for("team-a") == ROLE_ARN
    assert settings.annotations_for("team-b") == {"x.example.com/a": "b"}
    assert settings.annotations_for("team-c") == {}


@pytest.mark.parametrize(
    ("raw", "named"),
    [
        ({"annotation": {}}, "unknown key(s) annotation"),
        ({"annotations": {"a": 1}}, "trainerIdentity.annotations"),
        ({"namespaces": {"team-a": {"labels": {}}}}, "trainerIdentity.namespaces.team-a"),
        ({"namespaces": ["team-a"]}, "trainerIdentity.namespaces"),
    ],
)
def test_settings_of_the_wrong_shape_are_refused_naming_the_value(raw: dict[str, Any], named: str) -> None:
    with pytest.raises(ValueError, match=named.replace("(", r"\(").replace(")", r"\)")):
        IdentitySettings.parse(raw)


def test_settings_are_read_from_the_file_the_chart_mounts(tmp_path: Path) -> None:
    path = tmp_path / "trainer-identity.json"
    path.write_text(json.dumps({"annotations": ROLE_ARN, "namespaces": {}}))  # as the chart renders it (toJson)
    assert IdentitySettings.load(str(path)).annotations_for("anywhere") == ROLE_ARN
    assert IdentitySettings.load(None) == IdentitySettings()


class Kube:
    api_client = None  # the informers are fed below, never started


def test_a_namespace_costs_writes_only_until_its_identity_is_in_the_cache_and_an_edit_wakes_it() -> None:
    woken: list[str] = []
    identities = TrainerIdentities(Kube(), [], IdentitySettings(ROLE_ARN), woken.append)  # type: ignore[arg-type]
    due = identities.due("team-a")
    assert [o["kind"] for o in due] == ["ServiceAccount", "Role", "RoleBinding"]
    for obj in due:
        identities.wrote(as_stored(obj))  # the apiserver's answer to the apply
    assert identities.due("team-a") == [] and woken == []
    # A tenant's edit arrives through the watch: the namespace is woken and the ServiceAccount is due again.
    edited = as_stored(due[0])
    edited["metadata"]["annotations"]["eks.amazonaws.com/role-arn"] = "arn:aws:iam::999999999999:role/theirs"
    edited["metadata"]["resourceVersion"] = "43"
    identities.watches["ServiceAccount"]._put(edited)
    assert woken == ["team-a"] and [o["kind"] for o in identities.due("team-a")] == ["ServiceAccount"]
    # A change that leaves it as built (someone's own label) wakes nobody.
    relabelled = {**as_stored(due[1]), "metadata": {**as_stored(due[1])["metadata"], "resourceVersion": "44"}}
    identities.watches["Role"]._put(relabelled)
    assert woken == ["team-a"]
