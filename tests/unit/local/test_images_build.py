"""The pure parts of `make images`: what an image's cache key covers and which host files a build sees. How an
image's config becomes runc's process is tests/unit/local/test_oci_spec.py; the builds themselves run in
tests/images."""

from __future__ import annotations

from pathlib import Path

import pytest

from mmrl_local.toolchain import images_build

ROOT = Path(__file__).resolve().parents[3]


def test_copy_sources_are_the_context_paths_each_dockerfile_takes() -> None:
    operator = (ROOT / "docker" / "operator.Dockerfile").read_text()
    trainer = (ROOT / "docker" / "trainer.Dockerfile").read_text()
    assert images_build.copy_sources(operator) == ["requirements.lock", "api/mmrl_api/", "operator/mmrl_operator/"]
    # SkyRL's source comes from a git URL, not the context.
    expected = ["api/mmrl_api/", "trainer/mmrl_trainer/", "requirements.lock", "docker/trainer-pins.txt"]
    assert images_build.copy_sources(trainer) == expected


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
