"""The adapter's digest: one sha256 over every file of an adapter directory, config included, and the only safe way to
read such a directory. A contract between two images: the trainer reports the digest of what it exported
(`status.adapter.digest`), and a shared server's gateway (the operator's image) copies the directory into a place
no trainer can write, computing the digest while it copies, and loads the copy only when the two agree.

The digest is the sha256 of a manifest: a version line, then one line per file, sorted by relative path, with the
file's sha256, its size and its path. Changing any byte of any file, adding, removing or renaming one changes it.

The directory is read as an untrusted tenant's: every component of its path is opened on its own, without following
links (`O_NOFOLLOW` through directory file descriptors), so a link anywhere on the path, or in the tree, is refused,
not followed; only directories and regular files with a single link are read; names must be printable UTF-8; the tree
is bounded in depth, file count and total size. Copying happens in the same pass as hashing (`TreeSink`): the bytes
copied are the bytes hashed, whatever the source does meanwhile.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from typing import BinaryIO, Protocol

MANIFEST_VERSION = "mmrl-adapter-manifest/1"
_CHUNK = 1 << 20
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


@dataclass(frozen=True)
class Limits:
    """How much one adapter directory may hold. A PEFT LoRA export is a config, the weights and a README; rank 512
    on every linear layer of a 72B model is a few GiB."""

    max_files: int = 64
    max_bytes: int = 16 << 30
    max_depth: int = 4


@dataclass(frozen=True)
class Entry:
    path: str  # relative, '/'-separated
    size: int
    sha256: str


class TreeRefused(ValueError):
    """The directory cannot be read as an adapter: a link, a special file, a bad name, or past a limit. The message
    names the path and why."""


class TreeSink(Protocol):
    """Where a copy of the tree goes while it is read (the gateway's staging directory)."""

    def directory(self, path: str) -> None: ...

    def file(self, path: str) -> BinaryIO: ...


def manifest_digest(entries: Iterable[Entry]) -> str:
    """The digest of a manifest: sha256 over the version line and one `<sha256> <size> <path>` line per file,
    sorted by path."""
    h = hashlib.sha256(f"{MANIFEST_VERSION}\n".encode())
    for e in sorted(entries, key=lambda e: e.path):
        h.update(f"{e.sha256} {e.size} {e.path}\n".encode())
    return h.hexdigest()


def tree_digest(path: str | os.PathLike[str], limits: Limits = Limits(), sink: TreeSink | None = None) -> str:
    """The digest of the adapter directory at `path` (absolute), read safely; with `sink`, copied as it is read."""
    return manifest_digest(read_tree(path, limits, sink))


def read_tree(path: str | os.PathLike[str], limits: Limits = Limits(), sink: TreeSink | None = None) -> list[Entry]:
    """Every file under `path` as a manifest entry; raises TreeRefused (or OSError for a missing directory)."""
    fd = open_dir(os.fspath(path))
    try:
        walker = _Walker(limits, sink)
        walker.walk(fd, "", 0)
        return walker.entries
    finally:
        os.close(fd)


def open_dir(path: str) -> int:
    """A directory file descriptor for the absolute `path`, opened one component at a time without following a
    link: a link anywhere on the path raises TreeRefused naming it."""
    if not path.startswith("/"):
        raise TreeRefused(f"{path}: the adapter path must be absolute")
    parts = path.strip("/").split("/") if path.strip("/") else []
    if any(p in ("", ".", "..") for p in parts):
        raise TreeRefused(f"{path}: the adapter path must be normalised (no '//', '.' or '..')")
    fd = os.open("/", _DIR_FLAGS)
    walked = ""
    try:
        for part in parts:
            walked += f"/{part}"
            try:
                nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as err:
                if err.errno in (errno.ELOOP, errno.ENOTDIR):
                    why = "is a symbolic link or not a directory; links are not followed"
                    raise TreeRefused(f"{walked} {why}") from err
                raise
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd


def _checked_name(name: str, where: str) -> str:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError as err:
        raise TreeRefused(f"{where}: a file name that is not UTF-8") from err
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in name):
        raise TreeRefused(f"{where}: a file name with a control character")
    return name


class _Walker:
    def __init__(self, limits: Limits, sink: TreeSink | None) -> None:
        self.limits, self.sink = limits, sink
        self.entries: list[Entry] = []
        self.total = 0

    def walk(self, dir_fd: int, prefix: str, depth: int) -> None:
        for name in sorted(os.listdir(dir_fd)):
            rel = prefix + _checked_name(name, prefix + repr(name)[1:-1])
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                if depth + 1 >= self.limits.max_depth:
                    raise TreeRefused(f"{rel}: directories nested deeper than {self.limits.max_depth}")
                self._directory(dir_fd, name, rel, depth)
            elif stat.S_ISREG(st.st_mode):
                self._file(dir_fd, name, rel)
            else:
                raise TreeRefused(f"{rel} is {_kind(st.st_mode)}; an adapter holds regular files only")

    def _directory(self, dir_fd: int, name: str, rel: str, depth: int) -> None:
        try:
            fd = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
        except OSError as err:
            if err.errno in (errno.ELOOP, errno.ENOTDIR):
                raise TreeRefused(f"{rel} changed into a link while it was read") from err
            raise
        try:
            if self.sink is not None:
                self.sink.directory(rel)
            self.walk(fd, rel + "/", depth + 1)
        finally:
            os.close(fd)

    def _file(self, dir_fd: int, name: str, rel: str) -> None:
        if len(self.entries) + 1 > self.limits.max_files:
            raise TreeRefused(f"{rel}: more than {self.limits.max_files} files")
        try:
            fd = os.open(name, _FILE_FLAGS, dir_fd=dir_fd)
        except OSError as err:
            if err.errno == errno.ELOOP:
                raise TreeRefused(f"{rel} changed into a link while it was read") from err
            raise
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode):
                raise TreeRefused(f"{rel} is {_kind(st.st_mode)}; an adapter holds regular files only")
            if st.st_nlink != 1:
                raise TreeRefused(f"{rel} has {st.st_nlink} hard links; an adapter's files have one")
            os.set_blocking(f.fileno(), True)
            out = self.sink.file(rel) if self.sink is not None else None
            try:
                self.entries.append(Entry(rel, *self._copy(f, out, rel)))
            finally:
                if out is not None:
                    out.close()

    def _copy(self, f: BinaryIO, out: BinaryIO | None, rel: str) -> tuple[int, str]:
        h, size = hashlib.sha256(), 0
        while chunk := f.read(_CHUNK):
            size += len(chunk)
            self.total += len(chunk)
            if self.total > self.limits.max_bytes:
                raise TreeRefused(f"{rel}: the adapter is larger than {self.limits.max_bytes} bytes")
            h.update(chunk)
            if out is not None:
                out.write(chunk)
        return size, h.hexdigest()


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISFIFO(mode):
        return "a named pipe"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"
