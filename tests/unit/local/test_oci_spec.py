"""How a pod's container and its image's config become runc's config.json (``mmrl_local.node.oci_spec``), by Kubernetes'
rules: command/args over Entrypoint/Cmd, securityContext over the image's user, runAsNonRoot refusals, capabilities
from the runtime default, a read-only root, volumes as bind mounts, the pod's network namespace."""

from __future__ import annotations

from pathlib import Path

import pytest

from mmrl_local.common import procs
from mmrl_local.node import image_run, oci_spec
from mmrl_local.node.mountns import Mount

PASSWD = (
    "root:x:0:0:root:/root:/bin/sh\nmmrl:x:10001:10002::/nonexistent:/bin/false\nray:x:1000:100::/home/ray:/bin/sh\n"
)
GROUP = "root:x:0:\nusers:x:100:\nmmrl:x:10002:\n"


@pytest.mark.parametrize(
    ("command", "args", "argv"),
    [
        (None, None, ["python", "-m", "app", "serve"]),  # entrypoint + cmd
        (None, ["--help"], ["python", "-m", "app", "--help"]),  # args replace cmd
        (["sh", "-c", "id"], None, ["sh", "-c", "id"]),  # command drops the image's cmd too
        (["sh"], ["-c", "id"], ["sh", "-c", "id"]),
    ],
)
def test_process_args_follow_kubernetes_command_and_args_rules(command, args, argv) -> None:
    config = {"Entrypoint": ["python", "-m", "app"], "Cmd": ["serve"]}
    assert oci_spec.process_args(config, command, args) == argv


def test_an_image_with_nothing_to_run_and_no_command_is_refused() -> None:
    with pytest.raises(oci_spec.CreateContainerConfigError, match="no entrypoint or cmd"):
        oci_spec.process_args({}, None, None)


@pytest.mark.parametrize(
    ("user", "security", "expected"),
    [
        ("10001:10001", {}, oci_spec.Identity(10001, 10001, (), "/nonexistent")),
        ("mmrl:mmrl", {}, oci_spec.Identity(10001, 10002, (), "/nonexistent")),
        ("10001", {}, oci_spec.Identity(10001, 10002, (), "/nonexistent")),  # the group from passwd
        ("", {}, oci_spec.Identity(0, 0, (), "/root")),  # no User: root
        ("ray", {}, oci_spec.Identity(1000, 100, (), "/home/ray")),
        # runAsUser replaces the image's user and its group; an unknown uid gets gid 0 and home /
        ("10001:10001", {"runAsUser": 4242}, oci_spec.Identity(4242, 0, (), "/")),
        ("10001:10001", {"runAsUser": 1000, "runAsGroup": 7}, oci_spec.Identity(1000, 7, (), "/home/ray")),
        (
            "10001:10001",
            {"supplementalGroups": [5, 6], "fsGroup": 9},
            oci_spec.Identity(10001, 10001, (5, 6, 9), "/nonexistent"),
        ),
        ("mmrl", {"runAsNonRoot": True, "runAsUser": 10001}, oci_spec.Identity(10001, 10002, (), "/nonexistent")),
    ],
)
def test_the_user_is_the_images_unless_the_security_context_says_otherwise(user, security, expected) -> None:
    assert oci_spec.identity(user, security, PASSWD, GROUP) == expected


@pytest.mark.parametrize(
    ("user", "security", "message"),
    [
        ("", {"runAsNonRoot": True}, "runAsNonRoot and image will run as root"),
        ("0:0", {"runAsNonRoot": True}, "runAsNonRoot and image will run as root"),
        ("10001", {"runAsNonRoot": True, "runAsUser": 0}, "runAsNonRoot and image will run as root"),
        ("mmrl", {"runAsNonRoot": True}, r"non-numeric user \(mmrl\), cannot verify user is non-root"),
        ("nobody", {}, "unable to find user nobody"),
    ],
)
def test_run_as_non_root_refuses_what_the_kubelet_refuses(user, security, message) -> None:
    with pytest.raises(oci_spec.CreateContainerConfigError, match=message):
        oci_spec.identity(user, security, PASSWD, GROUP)


def test_capabilities_start_from_the_runtime_default_and_follow_drop_and_add() -> None:
    default = oci_spec.capabilities({}, 0)
    assert default["bounding"] == list(oci_spec.RUNTIME_DEFAULT_CAPS) == default["effective"]
    dropped = oci_spec.capabilities({"capabilities": {"drop": ["NET_RAW", "CAP_KILL"], "add": ["SYS_PTRACE"]}}, 0)
    assert "CAP_NET_RAW" not in dropped["bounding"] and "CAP_KILL" not in dropped["bounding"]
    assert dropped["bounding"][-1] == "CAP_SYS_PTRACE"
    none = oci_spec.capabilities({"capabilities": {"drop": ["ALL"]}}, 0)
    assert all(not caps for caps in none.values())
    # a non-root process holds them only in its bounding set
    non_root = oci_spec.capabilities({}, 10001)
    assert non_root["bounding"] and not non_root["effective"] and not non_root["permitted"]


def test_a_privileged_container_is_refused_not_run_unprivileged() -> None:
    with pytest.raises(oci_spec.CreateContainerConfigError, match="privileged"):
        oci_spec.capabilities({"privileged": True}, 0)


def test_the_containers_security_context_wins_over_the_pods() -> None:
    pod = {"securityContext": {"runAsUser": 1, "runAsNonRoot": True, "fsGroup": 3}}
    container = {"securityContext": {"runAsUser": 2, "readOnlyRootFilesystem": True}}
    assert oci_spec.merged_security(pod, container) == {
        "runAsUser": 2,
        "runAsNonRoot": True,
        "fsGroup": 3,
        "readOnlyRootFilesystem": True,
    }


def test_runtime_spec_under_the_charts_restricted_security(tmp_path: Path) -> None:
    security = {
        "runAsNonRoot": True,
        "readOnlyRootFilesystem": True,
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }
    who = oci_spec.identity("10001:10001", security, PASSWD, GROUP)
    mounts = [
        Mount("/tmp", str(tmp_path / "tmp")),
        Mount("/var/run/secrets/kubernetes.io/serviceaccount", str(tmp_path / "sa"), read_only=True),
        Mount("/dev/shm/x", None, tmpfs=True),
    ]
    spec = oci_spec.runtime_spec(
        root=tmp_path / "rootfs",
        argv=["python", "-m", "mmrl_operator.cli", "operator"],
        env={"PYTHONPATH": "/opt/mmrl", "POD_NAME": "op-0"},
        cwd="/opt/mmrl",
        who=who,
        security=security,
        mounts=mounts,
        hostname="op-0",
        netns="/var/run/netns/mmrl-x",
    )
    process = spec["process"]
    assert process["user"] == {"uid": 10001, "gid": 10001}
    assert process["env"] == ["PYTHONPATH=/opt/mmrl", "POD_NAME=op-0", "HOME=/nonexistent"]
    assert process["cwd"] == "/opt/mmrl" and process["terminal"] is False and process["noNewPrivileges"] is True
    assert all(not caps for caps in process["capabilities"].values())
    assert spec["root"] == {"path": str(tmp_path / "rootfs"), "readonly": True}
    assert spec["hostname"] == "op-0"
    assert {"type": "network", "path": "/var/run/netns/mmrl-x"} in spec["linux"]["namespaces"]
    binds = {m["destination"]: m for m in spec["mounts"] if m["type"] in ("bind", "tmpfs")}
    assert binds["/tmp"]["options"] == ["rbind", "rprivate"]
    assert "ro" in binds["/var/run/secrets/kubernetes.io/serviceaccount"]["options"]
    assert binds["/dev/shm/x"]["type"] == "tmpfs"


def test_defaults_let_the_root_be_written_and_privileges_escalate(tmp_path: Path) -> None:
    """Kubernetes' defaults: a writable root, allowPrivilegeEscalation true, no network namespace path means a
    namespace of the container's own."""
    who = oci_spec.identity("", {}, PASSWD, GROUP)
    spec = oci_spec.runtime_spec(
        root=tmp_path,
        argv=["sh"],
        env={"HOME": "/work"},
        cwd="",
        who=who,
        security={},
        mounts=[],
        hostname="h",
        netns=None,
    )
    assert spec["root"]["readonly"] is False and spec["process"]["noNewPrivileges"] is False
    assert spec["process"]["cwd"] == "/" and "HOME=/work" in spec["process"]["env"]
    assert {"type": "network"} in spec["linux"]["namespaces"]


def test_the_spec_runc_gets_ends_with_the_runs_mark_and_keeps_the_containers_env(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A container's env is its image's and its pod's, not its starter's: the run's mark is appended (``leftovers``
    finds the containers a run left by it), and a mark the image or pod set does not make it another run's."""
    monkeypatch.setenv(procs.RUN_MARK, "this-run")
    who = oci_spec.identity("", {}, PASSWD, GROUP)
    env = {"PATH": "/usr/bin", procs.RUN_MARK: "another-run", "POD_NAME": "op-0"}
    spec = oci_spec.runtime_spec(
        root=tmp_path, argv=["sh"], env=env, cwd="/", who=who, security={}, mounts=[], hostname="h", netns=None
    )
    marked = image_run.marked(spec)
    assert marked["process"]["env"] == ["PATH=/usr/bin", "POD_NAME=op-0", "HOME=/root", f"{procs.RUN_MARK}=this-run"]
    assert {k: v for k, v in marked.items() if k != "process"} == {k: v for k, v in spec.items() if k != "process"}
    monkeypatch.delenv(procs.RUN_MARK)  # a run without a mark (a developer's one-off) adds none
    assert f"{procs.RUN_MARK}=" not in " ".join(image_run.marked(spec)["process"]["env"])
