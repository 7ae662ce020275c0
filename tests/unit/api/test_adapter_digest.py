"""The adapter digest: every file counts (config included), and a directory is read only through real directories and
regular files, never through a link anywhere on its path."""

from __future__ import annotations

import hashlib
import io
import os
from pathlib import Path

import pytest

from mmrl_api.adapter_digest import (
    MANIFEST_VERSION,
    Entry,
    Limits,
    TreeRefused,
    manifest_digest,
    read_tree,
    tree_digest,
)


def adapter(root: Path) -> Path:
    root.mkdir(parents=True)
    (root / "adapter_config.json").write_text('{"r": 8}')
    (root / "adapter_model.safetensors").write_bytes(b"\0" * 100)
    return root


def test_the_digest_is_the_sha256_of_the_sorted_manifest(tmp_path: Path) -> None:
    a = adapter(tmp_path / "a")
    lines = "".join(
        f"{hashlib.sha256(p.read_bytes()).hexdigest()} {p.stat().st_size} {p.name}\n" for p in sorted(a.iterdir())
    )
    assert tree_digest(a) == hashlib.sha256(f"{MANIFEST_VERSION}\n{lines}".encode()).hexdigest()
    assert manifest_digest([Entry("b", 1, "x"), Entry("a", 2, "y")]) == manifest_digest(
        [Entry("a", 2, "y"), Entry("b", 1, "x")]
    )


def test_a_changed_config_a_new_file_or_a_rename_changes_the_digest(tmp_path: Path) -> None:
    a = adapter(tmp_path / "a")
    before = tree_digest(a)
    (a / "adapter_config.json").write_text('{"r": 16}')
    changed = tree_digest(a)
    assert changed != before
    (a / "README.md").write_text("")
    added = tree_digest(a)
    assert added != changed
    (a / "README.md").rename(a / "NOTES.md")
    assert tree_digest(a) != added


def test_nested_directories_are_part_of_the_manifest(tmp_path: Path) -> None:
    a = adapter(tmp_path / "a")
    (a / "extra").mkdir()
    (a / "extra" / "x.bin").write_bytes(b"1")
    assert [e.path for e in read_tree(a)] == ["adapter_config.json", "adapter_model.safetensors", "extra/x.bin"]


@pytest.mark.parametrize("where", ["parent", "adapter dir", "file", "nested dir"])
def test_a_link_anywhere_on_the_path_or_in_the_tree_is_refused(tmp_path: Path, where: str) -> None:
    real = adapter(tmp_path / "real" / "adapter")
    if where == "parent":
        (tmp_path / "job").symlink_to(tmp_path / "real")
        path = tmp_path / "job" / "adapter"
    elif where == "adapter dir":
        (tmp_path / "linked").symlink_to(real)
        path = tmp_path / "linked"
    elif where == "file":
        (real / "adapter_model.safetensors").unlink()
        (tmp_path / "elsewhere").write_bytes(b"secret")
        (real / "adapter_model.safetensors").symlink_to(tmp_path / "elsewhere")
        path = real
    else:
        (real / "sub").symlink_to(tmp_path)
        path = real
    with pytest.raises(TreeRefused, match="link"):
        read_tree(path)


def test_special_files_and_hard_links_are_refused(tmp_path: Path) -> None:
    a = adapter(tmp_path / "a")
    os.mkfifo(a / "pipe")
    with pytest.raises(TreeRefused, match="named pipe"):
        read_tree(a)
    (a / "pipe").unlink()
    os.link(a / "adapter_config.json", tmp_path / "other-name")
    with pytest.raises(TreeRefused, match="2 hard links"):
        read_tree(a)


def test_bad_names_and_unnormalised_paths_are_refused(tmp_path: Path) -> None:
    a = adapter(tmp_path / "a")
    with pytest.raises(TreeRefused, match="normalised"):
        read_tree(f"{a}/../a")
    with pytest.raises(TreeRefused, match="absolute"):
        read_tree("relative/adapter")
    (a / "bad\nname").write_text("")
    with pytest.raises(TreeRefused, match="control character"):
        read_tree(a)


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        (Limits(max_files=1), "more than 1 files"),
        (Limits(max_bytes=50), "larger than 50 bytes"),
        (Limits(max_depth=1), "nested deeper than 1"),
    ],
)
def test_the_tree_is_bounded(tmp_path: Path, limits: Limits, message: str) -> None:
    a = adapter(tmp_path / "a")
    (a / "sub").mkdir()
    with pytest.raises(TreeRefused, match=message):
        read_tree(a, limits)


def test_the_sink_gets_the_bytes_that_were_hashed(tmp_path: Path) -> None:
    a = adapter(tmp_path / "a")
    copies: dict[str, io.BytesIO] = {}

    class Keep(io.BytesIO):
        def close(self) -> None:  # keep the contents readable after the walker closes it
            pass

    class Sink:
        def directory(self, path: str) -> None:
            copies[path + "/"] = io.BytesIO()

        def file(self, path: str) -> Keep:
            copies[path] = Keep()
            return copies[path]

    entries = read_tree(a, sink=Sink())
    assert {e.path: e.sha256 for e in entries} == {
        name: hashlib.sha256(buf.getvalue()).hexdigest() for name, buf in copies.items()
    }
