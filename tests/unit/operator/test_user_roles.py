"""The ClusterRoles the chart aggregates into Kubernetes' `admin`, `edit` and `view`: editors write every mmrl.dev
kind but never its status; viewers read every kind and its status; view's rules reach edit and admin as Kubernetes'
own do. (tests/cluster/test_chart_security.py checks them on the live apiserver.)"""

from __future__ import annotations

from mmrl_api import constants as c
from mmrl_operator.codegen.chart import render_user_roles
from mmrl_operator.codegen.crd import KINDS
from mmrl_operator.codegen.user_roles import user_roles


def grants(role) -> set[tuple[str, str]]:
    return {(res, verb) for rule in role.rules for res in rule["resources"] for verb in rule["verbs"]}


def test_editors_write_every_kind_but_no_status_and_viewers_read_every_kind_with_its_status() -> None:
    edit, view = user_roles()
    plurals = {k.plural for k in KINDS}
    assert plurals == {c.PLURAL, c.SERVER_PLURAL}
    assert all(rule["apiGroups"] == [c.GROUP] for role in (edit, view) for rule in role.rules)
    assert {res for res, _ in grants(edit)} == plurals  # no `/status`: the operator and the trainer own it
    verbs = {"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"}
    assert grants(edit) == {(p, v) for p in plurals for v in verbs}
    readable = plurals | {f"{p}/status" for p in plurals}
    assert grants(view) == {(r, v) for r in readable for v in ("get", "list", "watch")}


def test_edit_aggregates_into_edit_and_admin_and_view_into_all_three() -> None:
    edit, view = user_roles()
    prefix = "rbac.authorization.k8s.io/aggregate-to-"
    assert edit.labels == {f"{prefix}admin": "true", f"{prefix}edit": "true"}
    assert view.labels == {f"{prefix}admin": "true", f"{prefix}edit": "true", f"{prefix}view": "true"}


def test_the_template_is_switched_by_its_value_and_named_after_the_release() -> None:
    text = render_user_roles()
    assert text.splitlines()[1] == "{{- if .Values.aggregatedRoles.enabled }}"
    assert '{{ include "mmrl-operator.fullname" . }}-edit' in text
    assert '{{ include "mmrl-operator.fullname" . }}-view' in text
