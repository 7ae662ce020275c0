"""The pure parts of `make images` and of starting a process from an image: what an image's cache key covers, which
host files a build sees, and how an image's config becomes runc's process (Kubernetes' command/args rules, the
image's user). The builds themselves run in tests/images."""

from __future__ import annotations

from pathlib import Path

import pytest

from mmrl_local import image_run, images_build

ROOT = Path(__file__).resolve().parents[3]


def test_copy_sources_are_the_context_paths_each_dockerfile_takes() -> None:
    operator = (ROOT / "docker" / "operator.Dockerfile").read_text()
    trainer = (ROOT / "docker" / "trainer.Dockerfile").read_text()
    assert images_build.copy_sources(operator) == ["requirements.lock", "api/mmrl_api/", "operator/mmrl_operator/"]
    # SkyRL's source comes from a git URL, not the context.
    assert images_build.copy_sources(trainer) == ["docker/trainer-pins.txt", "api/mmrl_api/", "trainer/mmrl_trainer/"]


def _context(tmp_path: Path) -> Path:
    (tmp_path / "pkg" / "__pycache__").mkdir(parents=True)
    (tmp_path / "pkg" / "mod.py").write_text("x = 1\n")
    (tmp_path / "pkg" / "__pycache__" / "mod.cpython-311.pyc").write_bytes(b"\0")
    (tmp_path / "lock.txt").write_text("a==1\n")
    (tmp_path / "Dockerfile").write_text(
        "FROM python:3.12-slim\n# a comment\nCOPY lock.txt /tmp/\nCOPY --chown=1:1 \\\n    pkg/ /opt/pkg/\n"
    )
    return tmp_path


def test_image_key_follows_every_copied_file_and_nothing_dockerignore_drops(tmp_path: Path) -> None:
    context = _context(tmp_path)
    key = images_build.image_key(context / "Dockerfile", context)
    (context / "pkg" / "__pycache__" / "mod.cpython-311.pyc").write_bytes(b"\1")
    (context / "unrelated.txt").write_text("not copied")
    assert images_build.image_key(context / "Dockerfile", context) == key
    (context / "pkg" / "mod.py").write_text("x = 2\n")
    changed = images_build.image_key(context / "Dockerfile", context)
    assert changed != key
    (context / "lock.txt").write_text("a==2\n")
    assert images_build.image_key(context / "Dockerfile", context) not in (key, changed)


def test_image_key_refuses_a_copy_source_the_context_lacks(tmp_path: Path) -> None:
    (tmp_path / "Dockerfile").write_text("FROM scratch\nCOPY missing/ /opt/\n")
    with pytest.raises(images_build.ImageBuildError, match="missing/"):
        images_build.image_key(tmp_path / "Dockerfile", tmp_path)


def test_build_sees_the_ca_bundle_and_pip_config_pip_is_told_to_use(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(images_build, "HOST_CA_BUNDLE", str(tmp_path / "absent.crt"))
    monkeypatch.setattr(images_build, "HOST_PIP_CONFIG", str(tmp_path / "absent.conf"))
    assert images_build.build_mounts({}) == []
    bundle, conf = tmp_path / "proxy.crt", tmp_path / "pip.conf"
    bundle.write_text("cert")
    conf.write_text("[global]\n")
    mounts = images_build.build_mounts({"PIP_CERT": str(bundle), "PIP_CONFIG_FILE": str(conf)})
    assert mounts == [
        "-v",
        f"{bundle}:/etc/ssl/certs/ca-certificates.crt:ro",
        "-v",
        f"{conf}:/etc/pip.conf:ro",
    ]


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
    assert image_run.process_args(config, command, args) == argv


def _root(tmp_path: Path) -> Path:
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "passwd").write_text("root:x:0:0::/root:/bin/sh\nmmrl:x:10001:10002::/nonexistent:/bin/false\n")
    (tmp_path / "etc" / "group").write_text("root:x:0:\nmmrl:x:10002:\n")
    return tmp_path


@pytest.mark.parametrize(
    ("user", "ids"),
    [("10001:10001", (10001, 10001)), ("mmrl:mmrl", (10001, 10002)), ("10001", (10001, 10002)), ("", (0, 0))],
)
def test_image_user_resolves_like_a_runtime_resolves_it(tmp_path: Path, user: str, ids: tuple[int, int]) -> None:
    assert image_run.resolve_user(user, _root(tmp_path)) == ids


def test_runtime_spec_applies_the_image_config_under_restricted_pod_security(tmp_path: Path) -> None:
    template = {
        "process": {"terminal": True, "user": {"uid": 0, "gid": 0}, "capabilities": {"bounding": ["CAP_KILL"]}},
        "root": {"path": "rootfs", "readonly": False},
    }
    config = {"User": "10001:10001", "Env": ["PYTHONPATH=/opt/mmrl"], "WorkingDir": "/opt/mmrl"}
    spec = image_run.runtime_spec(template, config, _root(tmp_path), ["python", "--version"])
    assert spec["process"]["user"] == {"uid": 10001, "gid": 10001}
    assert spec["process"]["env"] == ["PYTHONPATH=/opt/mmrl"]
    assert spec["process"]["cwd"] == "/opt/mmrl"
    assert spec["process"]["args"] == ["python", "--version"]
    assert spec["process"]["terminal"] is False and spec["process"]["noNewPrivileges"] is True
    assert all(not caps for caps in spec["process"]["capabilities"].values())
    assert spec["root"] == {"path": str(tmp_path), "readonly": True}
    assert template["process"]["user"] == {"uid": 0, "gid": 0}  # the template is left as it was
