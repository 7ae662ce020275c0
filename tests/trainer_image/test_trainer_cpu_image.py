"""The trainer image's CPU target (`--target cpu` of docker/trainer.Dockerfile, built by
``images_build.build_trainer_cpu``) tests itself: `python -m mmrl_trainer selftest` passes inside it, started by runc
from the image's own config (user 1000:100, its venv first on PATH) under restricted pod security with a read-only
root; its work directory, /tmp and ~/.cache (Hugging Face's) on writable mounts, as a pod gives them with
emptyDirs."""

from __future__ import annotations

import json

from mmrl_local.node import image_run
from mmrl_local.node.mountns import Mount
from mmrl_local.toolchain import images_build


def test_selftest_passes_in_the_cpu_trainer_image(tmp_path) -> None:
    image = images_build.build_trainer_cpu()
    work, tmp, cache = tmp_path / "work", tmp_path / "tmp", tmp_path / "cache"
    for directory in (work, tmp, cache):  # emptyDirs, writable by the image's user
        directory.mkdir()
        directory.chmod(0o1777)
    done = image_run.run(
        image.image,
        command=["python", "-m", "mmrl_trainer", "selftest", "--json", "--backend", "local", "--workdir", "/work"],
        mounts=[Mount("/work", str(work)), Mount("/tmp", str(tmp)), Mount("/home/ray/.cache", str(cache))],
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(done.stdout[done.stdout.rindex('{\n  "passed"') :])
    failed = [c for c in report["checks"] if c["status"] != "PASS"]
    assert report["passed"] and report["backend"] == "local" and not failed, failed
