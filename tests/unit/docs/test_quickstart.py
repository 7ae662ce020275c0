"""docs/quickstart-hyperpod.md, offline: every command block says whether a test runs it, and the blocks that need
no cluster run as written. `make push` pushes the images the chart values and the job name, the job validates and
renders with them, and the dataset check passes on geometry3k-shaped files. The blocks that need a cluster run in
tests/cluster/test_quickstart.py."""

from __future__ import annotations

import io
import subprocess
from pathlib import Path

import jsonschema
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from PIL import Image

from mmrl_api.lifecycle import InferenceSpec
from mmrl_operator.codegen.chart import CHART_DIR
from tests.support import quickstart as qs
from tests.support import runbook

# Which test file runs each `<!-- run: NAME -->` block of the page.
RUN_BY = {
    "make-push": "tests/support/quickstart.py",  # make_push_commands, for the tests below
    "dataset-check": "tests/unit/docs/test_quickstart.py",
    "job": "tests/unit/docs/test_quickstart.py",
    "namespace": "tests/cluster/test_quickstart.py",
    "install": "tests/cluster/test_quickstart.py",
    "trainer-identity": "tests/cluster/test_quickstart.py",
    "fsx-claim": "tests/cluster/test_quickstart.py",
    "apply": "tests/cluster/test_quickstart.py",
    "status": "tests/cluster/test_quickstart.py",
    "clean-up": "tests/cluster/test_quickstart.py",
}
APP_VERSION = yaml.safe_load((CHART_DIR / "Chart.yaml").read_text())["appVersion"]


def test_every_command_block_says_whether_a_test_runs_it() -> None:
    found = runbook.blocks()
    unmarked = [b.line for b in found if b.lang == "sh" and not (b.name or b.why_not)]
    assert unmarked == [], f"sh blocks without <!-- run: NAME --> or <!-- not run here: WHY --> at lines {unmarked}"
    assert all(b.lang == "sh" for b in found if b.name), "only sh blocks can be run"
    names = [b.name for b in found if b.name]
    assert sorted(names) == sorted(RUN_BY)  # each block once, each run by a test
    for name, test_file in RUN_BY.items():
        assert f'block("{name}")' in (qs.ROOT / test_file).read_text(), f"{test_file} does not run {name}"


def test_make_push_builds_and_pushes_the_operator_and_trainer_under_the_charts_version(tmp_path: Path) -> None:
    commands = qs.make_push_commands(tmp_path)
    registry = qs.STEP_1["REGISTRY"]
    operator, trainer = f"{registry}/mmrl-operator:{APP_VERSION}", f"{registry}/mmrl-trainer:{APP_VERSION}"
    builds = {c[c.index("-t") + 1]: c for c in commands if c[1] == "build"}
    assert set(builds) == {operator, trainer}
    assert builds[operator][builds[operator].index("-f") + 1] == "docker/operator.Dockerfile"
    trainer_build = builds[trainer]
    assert trainer_build[trainer_build.index("-f") + 1] == "docker/trainer.Dockerfile"
    assert "--target" not in trainer_build  # the GPU image, the Dockerfile's last stage
    assert f"EFA_INSTALLER_SHA256={qs.STEP_1['EFA_INSTALLER_SHA256']}" in trainer_build
    assert all(c[c.index("--platform") + 1] == "linux/amd64" for c in builds.values())  # HyperPod's instances
    assert [c[2] for c in commands if c[1] == "push"] == [operator, trainer]
    assert commands.index(builds[trainer]) < len(commands) - 2  # both built before either is pushed


def test_make_push_refuses_to_run_without_a_registry() -> None:
    # A clean environment: a REGISTRY exported on a developer's machine would make this build and push for real.
    env = runbook.shell_env({})
    done = subprocess.run(["make", "push"], cwd=qs.ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "make push: set REGISTRY" in done.stderr


def test_the_chart_install_pulls_the_operator_image_make_push_pushed(tmp_path: Path) -> None:
    # The chart's image is `<image.repository>:<image.tag or appVersion>`; the install sets the repository only.
    install = runbook.block("install").text
    assert "--set image.repository=$REGISTRY/mmrl-operator" in install
    assert "-f examples/chart-values/quickstart.yaml" in install
    values = yaml.safe_load(qs.CHART_VALUES.read_text())
    assert "tag" not in values.get("image", {}) and yaml.safe_load((CHART_DIR / "values.yaml").read_text())["image"][
        "tag"
    ] in ("", None)
    repository = install.split("--set image.repository=", 1)[1].split()[0].replace("$REGISTRY", qs.STEP_1["REGISTRY"])
    assert qs.pushed_images(tmp_path)["mmrl-operator"] == f"{repository}:{APP_VERSION}"


def merged(base: dict, over: dict) -> dict:
    """Helm's merge of a values file over the chart's values: maps key by key, anything else replaced."""
    out = dict(base)
    for key, value in over.items():
        out[key] = merged(base[key], value) if isinstance(value, dict) and isinstance(base.get(key), dict) else value
    return out


def test_the_chart_values_pass_the_charts_schema_and_watch_the_jobs_namespace() -> None:
    values = yaml.safe_load(qs.CHART_VALUES.read_text())
    schema = yaml.safe_load((CHART_DIR / "values.schema.json").read_text())
    defaults = yaml.safe_load((CHART_DIR / "values.yaml").read_text())
    assert [e.message for e in jsonschema.Draft7Validator(schema).iter_errors(merged(defaults, values))] == []
    job = yaml.safe_load(qs.JOB.read_text())
    assert job["metadata"]["namespace"] == qs.NAMESPACE in values["watchNamespaces"]


def test_the_fsx_claim_the_page_makes_is_the_claim_the_job_reads_and_writes() -> None:
    text = runbook.block("fsx-claim").text
    manifest = text.split("<<EOF\n", 1)[1].split("\nEOF\n", 1)[0]
    pv, pvc = yaml.safe_load_all(manifest)
    spec = yaml.safe_load(qs.JOB.read_text())["spec"]
    claims = {u.split("/")[2] for u in (spec["model"]["name"], spec["dataset"]["train"], spec["dataset"]["validation"])}
    assert claims == {spec["checkpoint"]["pvc"]["claimName"]} == {pvc["metadata"]["name"]}
    assert pvc["metadata"]["namespace"] == qs.NAMESPACE and pvc["spec"]["volumeName"] == pv["metadata"]["name"]
    assert pv["spec"]["claimRef"] == {"namespace": qs.NAMESPACE, "name": pvc["metadata"]["name"]}
    assert "ReadWriteMany" in pv["spec"]["accessModes"]  # every Ray pod of a job mounts it, on several nodes


@pytest.fixture
def job_step(tmp_path: Path) -> tuple[Path, str]:
    """The page's job step, run in a copy of the checkout's layout: its directory and what it printed."""
    work = qs.workdir(tmp_path)
    out = runbook.ran(runbook.block("job"), work, runbook.shell_env(qs.STEP_1, home=tmp_path), timeout=120)
    return work, out


def test_the_job_step_writes_a_job_with_the_pushed_images_that_validates(job_step, tmp_path: Path) -> None:
    work, out = job_step
    job = yaml.safe_load((work / "job.yaml").read_text())
    pushed = qs.pushed_images(tmp_path)
    assert job["spec"]["trainer"]["image"] == pushed["mmrl-trainer"]
    # vLLM's image, copied into the registry by the page's `docker tag`/`docker push`, is the one mmrl defaults to.
    default_vllm = InferenceSpec().image
    copy_block = next(b for b in runbook.blocks() if b.why_not and "docker push" in b.text and "vllm" in b.text)
    assert f"docker pull --platform linux/amd64 {default_vllm}\n" in copy_block.text
    assert job["spec"]["inference"]["image"] == f"{qs.STEP_1['REGISTRY']}/{default_vllm.split('/', 1)[1]}"
    assert f"job.yaml: ok: {qs.NAMESPACE}/qwen3vl-geo3k:" in out
    assert "peak" in out and ": fits" in out  # the GPU memory plan the operator enforces


def test_the_rendered_objects_run_the_pushed_images(job_step, tmp_path: Path) -> None:
    work, out = job_step
    objects = [o for o in yaml.safe_load_all((work / "rendered.yaml").read_text()) if o]
    assert out.strip().splitlines()[-1] == str(len(objects))  # the step's `grep -c '^kind:'`
    kinds = {o["kind"]: o for o in objects}
    assert {"RayCluster", "RayJob", "Deployment", "Service", "ConfigMap"} <= set(kinds)
    cluster = kinds["RayCluster"]["spec"]
    templates = [cluster["headGroupSpec"]["template"], *(g["template"] for g in cluster["workerGroupSpecs"])]
    images = {c["image"] for t in templates for c in t["spec"]["containers"]}
    assert images == {qs.pushed_images(tmp_path)["mmrl-trainer"]}
    volumes = {
        v["persistentVolumeClaim"]["claimName"]
        for t in templates
        for v in t["spec"]["volumes"]
        if "persistentVolumeClaim" in v
    }
    assert volumes == {"fsx-claim"}
    (server,) = kinds["Deployment"]["spec"]["template"]["spec"]["containers"]
    assert server["image"].startswith(qs.STEP_1["REGISTRY"] + "/vllm-openai:")


def png(colour: tuple[int, int, int]) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (12, 9), colour).save(buf, format="PNG")
    return buf.getvalue()


def geometry3k(directory: Path, rows: int) -> None:
    """train.parquet and test.parquet as `datasets` writes hiyouga/geometry3k: problem, images (image structs),
    answer."""
    directory.mkdir(parents=True)
    for split in ("train", "test"):
        records = [
            {"images": [{"bytes": png((i, 2 * i, 0)), "path": None}], "problem": f"<image>Find x. ({i})", "answer": "4"}
            for i in range(rows)
        ]
        pq.write_table(pa.Table.from_pylist(records), directory / f"{split}.parquet")


def test_the_dataset_check_step_passes_geometry3k_with_the_jobs_columns(tmp_path: Path) -> None:
    work = qs.workdir(tmp_path)
    geometry3k(work / "geometry3k", rows=5)
    out = runbook.ran(runbook.block("dataset-check"), work, runbook.shell_env(qs.STEP_1), timeout=120)
    assert "geometry3k/train.parquet: 5 rows; columns: images, problem, answer" in out
    assert "geometry3k/test.parquet: ok: the skyrl backend's rows built from all 5" in out
    assert "images from 'images': 5 decoded" in out


def test_the_dataset_check_step_stops_on_a_row_the_trainer_could_not_read(tmp_path: Path) -> None:
    work = qs.workdir(tmp_path)
    geometry3k(work / "geometry3k", rows=3)
    table = pq.read_table(work / "geometry3k" / "test.parquet").to_pylist()
    table[1]["problem"] = None
    pq.write_table(pa.Table.from_pylist(table), work / "geometry3k" / "test.parquet")
    done = runbook.run(runbook.block("dataset-check"), work, runbook.shell_env(qs.STEP_1), timeout=120)
    assert done.returncode == 1
    assert "geometry3k/test.parquet: row 1: column 'problem' (named by dataset.promptField) is null" in done.stderr
