"""`mmrl` as a user types it: `-f FILE|DIR|-`, `--version`, the namespace offline commands default to, one line and
a non-zero exit status for a user's mistake (never a traceback), and a quiet end when stdout's reader goes away."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from mmrl_api import validate_manifest
from mmrl_local.cluster.controlplane import free_port
from mmrl_operator.cli.errors import EXIT_BROKEN_PIPE
from mmrl_operator.cli.main import main
from mmrl_operator.cli.output import formatted, yaml_documents
from mmrl_operator.cli.render import as_submitted, render_objects
from mmrl_operator.cli.version import mmrl_version
from tests.support.corpus import EXAMPLES, ROOT, example


@pytest.fixture
def no_kubeconfig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A user without any kubeconfig: HOME is empty and KUBECONFIG names a file that does not exist."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing-kubeconfig"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    return home


def kubeconfig(path: Path, namespace: str | None = None, server: str = "https://127.0.0.1:6443") -> Path:
    """A kubeconfig with a current context `here` (in `namespace`) and a second context `there` (in `there-ns`)."""
    context = {"cluster": "c", "user": "u", **({"namespace": namespace} if namespace else {})}
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [
            {"name": "here", "context": context},
            {"name": "there", "context": {"cluster": "c", "user": "u", "namespace": "there-ns"}},
        ],
        "current-context": "here",
    }
    path.write_text(yaml.safe_dump(doc))
    return path


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def without_namespace(name: str = "local.yaml") -> str:
    doc = example(name)
    del doc["metadata"]["namespace"]
    return yaml.safe_dump(doc)


def test_version_is_the_distributions(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert capsys.readouterr().out == f"mmrl {mmrl_version()}\n"
    assert f'version = "{mmrl_version()}"' in pyproject


def test_validate_reads_a_file_a_directory_and_stdin(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, no_kubeconfig: Path
) -> None:
    folder = tmp_path / "jobs"
    folder.mkdir()
    (folder / "a.yaml").write_text((EXAMPLES / "local.yaml").read_text())
    (folder / "b.yml").write_text((EXAMPLES / "local-model-server.yaml").read_text())
    (folder / "notes.txt").write_text("not yaml: [")
    monkeypatch.setattr(sys, "stdin", io.StringIO((EXAMPLES / "job.yaml").read_text()))
    code, out, err = run(["validate", "-f", str(folder), "-f", "-", str(EXAMPLES / "local.yaml")], capsys)
    assert (code, err) == (0, "")
    oks = [line.split(": ok: ")[0] for line in out.splitlines() if ": ok: " in line]
    assert oks == [str(folder / "a.yaml"), str(folder / "b.yml"), "<stdin>", str(EXAMPLES / "local.yaml")]


def test_a_directorys_files_without_jobs_are_skipped_but_a_named_one_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], no_kubeconfig: Path
) -> None:
    (tmp_path / "job.yaml").write_text((EXAMPLES / "local.yaml").read_text())
    claim = tmp_path / "claim.yaml"
    claim.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "c"}}))
    assert run(["validate", "-f", str(tmp_path)], capsys)[0] == 0
    code, out, err = run(["validate", "-f", str(claim)], capsys)
    assert (code, out, err) == (1, "", f"{claim}: no MultimodalRLJob or ModelServer documents\n")


@pytest.mark.parametrize("command", ["validate", "render"])
def test_a_missing_file_is_one_line_and_exit_status_1(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], no_kubeconfig: Path
) -> None:
    missing = tmp_path / "nope.yaml"
    assert run([command, "-f", str(missing)], capsys) == (1, "", f"error: {missing}: no such file or directory\n")
    assert run([command, "-f", str(tmp_path)], capsys) == (
        1,
        "",
        f"error: {tmp_path}: a directory without *.yaml or *.yml files\n",
    )


@pytest.mark.parametrize("command", ["validate", "render"])
def test_yaml_that_does_not_parse_is_named_in_one_line(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], no_kubeconfig: Path
) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("spec: [unclosed\n")
    code, out, err = run([command, "-f", str(broken)], capsys)
    assert (code, out) == (1, "")
    assert err.startswith(f"{broken}: invalid YAML: ") and err.count("\n") == 1


def test_a_command_without_files_says_how_to_name_them(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["validate"], capsys) == (
        1,
        "",
        "error: mmrl validate: name the files with -f FILE|DIR|- (or as arguments)\n",
    )


def test_render_has_a_version_header_and_no_yaml_anchors(
    capsys: pytest.CaptureFixture[str], no_kubeconfig: Path
) -> None:
    path = EXAMPLES / "job.yaml"
    code, out, _ = run(["render", "-f", str(path)], capsys)
    assert code == 0
    assert out.splitlines()[0] == f"# rendered by mmrl {mmrl_version()} from {path}"
    job, _ = validate_manifest(example("job.yaml"))
    objects = render_objects(as_submitted(job, None))
    # The objects share values, which PyYAML's SafeDumper would print once with an anchor and then as an alias.
    assert re.search(r"&id\d+", yaml.dump_all(objects, Dumper=yaml.SafeDumper))
    assert not re.search(r"[&*]id\d+", out)
    assert list(yaml.safe_load_all(out)) == objects


def test_render_reads_stdin(capsys: pytest.CaptureFixture[str], monkeypatch, no_kubeconfig: Path) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO((EXAMPLES / "local.yaml").read_text()))
    code, out, _ = run(["render", "-f", "-"], capsys)
    assert code == 0 and out.startswith(f"# rendered by mmrl {mmrl_version()} from <stdin>\n")
    assert {d["kind"] for d in yaml.safe_load_all(out)} >= {"RayCluster", "RayJob", "ConfigMap"}


def rendered_namespaces(argv: list[str], capsys: pytest.CaptureFixture[str]) -> set[str]:
    code, out, err = run(argv, capsys)
    assert code == 0, err
    return {d["metadata"]["namespace"] for d in yaml.safe_load_all(out)}


def test_offline_commands_default_to_the_contexts_namespace_like_the_others(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, no_kubeconfig: Path
) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(without_namespace())
    assert rendered_namespaces(["render", "-f", str(job)], capsys) == {"default"}  # no kubeconfig
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig(tmp_path / "kubeconfig", "team-k")))
    assert rendered_namespaces(["render", "-f", str(job)], capsys) == {"team-k"}
    assert rendered_namespaces(["render", "-f", str(job), "--context", "there"], capsys) == {"there-ns"}
    assert rendered_namespaces(["render", "-f", str(job), "-n", "team-n"], capsys) == {"team-n"}
    # The file's own namespace comes before the context's.
    assert rendered_namespaces(["render", "-f", str(EXAMPLES / "job.yaml")], capsys) == {"hyperpod-ns-research"}
    code, out, _ = run(["validate", "-f", str(job)], capsys)
    assert code == 0 and ": ok: team-k/tiny-colors: " in out
    code, out, _ = run(["validate", "-f", str(EXAMPLES / "job.yaml")], capsys)
    assert code == 0 and ": ok: hyperpod-ns-research/qwen3vl-geo3k-lora: " in out
    code, out, _ = run(["validate", "-f", str(EXAMPLES / "job.yaml"), "-n", "team-n"], capsys)
    assert code == 0 and ": ok: team-n/qwen3vl-geo3k-lora: " in out


def test_a_kubeconfig_or_context_asked_for_by_name_must_exist(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], no_kubeconfig: Path
) -> None:
    config = kubeconfig(tmp_path / "kubeconfig", "team-k")
    missing = tmp_path / "other"
    assert run(["render", str(EXAMPLES / "local.yaml"), "--kubeconfig", str(missing)], capsys) == (
        1,
        "",
        f"error: --kubeconfig {missing}: no such file\n",
    )
    assert run(["status", "geo", "--kubeconfig", str(config), "--context", "nowhere"], capsys) == (
        1,
        "",
        f"error: context 'nowhere' is not in {config} (contexts: here, there)\n",
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["status", "geo"],
        ["status", "geo", "--server"],
        ["logs", "geo"],
        ["plot", "geo"],
        ["chat", "geo", "hello?"],
        ["rollback", "prod", "--server", "s"],
    ],
)
def test_a_cluster_command_without_a_kubeconfig_says_so_in_one_line(
    argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str], no_kubeconfig: Path
) -> None:
    code, out, err = run(argv, capsys)
    assert (code, out) == (1, "")
    assert err == (
        f"error: no kubeconfig: KUBECONFIG={tmp_path / 'missing-kubeconfig'} does not exist; pass --kubeconfig FILE "
        "or set KUBECONFIG (for EKS: aws eks update-kubeconfig --name CLUSTER)\n"
    )


def test_a_cluster_that_cannot_be_reached_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], no_kubeconfig: Path
) -> None:
    config = kubeconfig(tmp_path / "kubeconfig", "team-k", server=f"http://127.0.0.1:{free_port()}")
    code, out, err = run(["status", "geo", "--kubeconfig", str(config)], capsys)
    assert (code, out) == (1, "")
    assert err.startswith("error: cannot reach the cluster: ") and "Connection refused" in err
    assert err.count("\n") == 1


def test_status_output_is_yaml_or_json_only(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["status", "geo", "-o", "xml"])
    assert done.value.code == 2
    assert "invalid choice: 'xml'" in capsys.readouterr().err


def test_data_output_parses_back_to_the_object_without_anchors() -> None:
    shared = {"app": "geo"}
    obj = {"metadata": {"labels": shared, "annotations": shared}, "spec": {"text": "a\nb\n"}}
    assert yaml.safe_load(formatted(obj, "yaml")) == obj
    assert yaml.safe_load(formatted(obj, "json")) == obj
    assert not re.search(r"[&*]id\d+", formatted(obj, "yaml") + yaml_documents([obj, obj]))
    assert "text: |\n" in formatted(obj, "yaml")  # multi-line strings as literal blocks


@pytest.mark.parametrize("command", ["validate", "render"])
def test_a_closed_pipe_ends_the_command_quietly(command: str, tmp_path: Path) -> None:
    # Far more output than a pipe buffers (64 KiB), so the writer is still writing when `head -1` exits: 200 jobs
    # to validate, or 8 (of different names) to render.
    many = tmp_path / "jobs.yaml"
    many.write_text(yaml_documents({**example(), "metadata": {"name": f"geo-{i}"}} for i in range(8)))
    files = [str(EXAMPLES / "job.yaml")] * 200 if command == "validate" else [str(many)]
    env = {"HOME": str(tmp_path), "KUBECONFIG": str(tmp_path / "none"), "PYTHONPATH": os.environ["PYTHONPATH"]}
    mmrl = subprocess.Popen(
        [sys.executable, "-m", "mmrl_operator.cli", command, *files],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert mmrl.stdout is not None and mmrl.stderr is not None
    head = subprocess.run(["head", "-1"], stdin=mmrl.stdout, capture_output=True, text=True, check=True)
    mmrl.stdout.close()
    stderr = mmrl.stderr.read().decode()
    assert mmrl.wait(timeout=120) == EXIT_BROKEN_PIPE
    assert stderr == ""
    assert head.stdout.startswith(str(EXAMPLES / "job.yaml") if command == "validate" else "# rendered by mmrl")
