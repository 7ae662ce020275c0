"""Files on a local/mounted path or under an s3:// prefix, through pyarrow's filesystems.

The SkyRL backend reads SkyRL's checkpoints, stages models and moves the exported adapter and the training parquet
between the driver and S3. pyarrow is in both images (SkyRL's `datasets` brings it; data.py already reads s3://
datasets with it) and takes credentials and the endpoint from the pod's environment (IRSA, AWS_ENDPOINT_URL), so
no S3 client is added for this. Paths are strings: `s3://bucket/key` or a local path (`file://` allowed).
"""

from __future__ import annotations

import functools
import os
import shutil
from pathlib import Path
from typing import Any

CHUNK = 8 * 1024 * 1024  # what one copy step holds in memory


def is_s3(uri: str) -> bool:
    return uri.startswith("s3://")


def join(uri: str, *parts: str) -> str:
    return "/".join([uri.rstrip("/"), *(p.strip("/") for p in parts)])


def filesystem(uri: str) -> tuple[Any, str]:
    """(pyarrow filesystem, path inside it) for a URI or a local path."""
    import pyarrow.fs as pafs

    if is_s3(uri):
        bucket, _, key = uri.removeprefix("s3://").partition("/")
        endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or None
        return _s3(bucket, endpoint), f"{bucket}/{key}".rstrip("/")
    return pafs.LocalFileSystem(), str(Path(uri.removeprefix("file://")).absolute())


@functools.cache
def _s3(bucket: str, endpoint: str | None) -> Any:
    """An S3 filesystem in the bucket's region. Files smaller than a part are written with one PutObject
    (`allow_delayed_open`), not a multipart upload: fewer requests for the adapter and the parquet, and what
    S3-compatible test servers (moto) complete correctly."""
    import pyarrow.fs as pafs

    region = pafs.FileSystem.from_uri(f"s3://{bucket}")[0].region
    return pafs.S3FileSystem(region=region, endpoint_override=endpoint, allow_delayed_open=True)


def read_text(uri: str) -> str | None:
    """The file's text, or None when it does not exist."""
    fs, path = filesystem(uri)
    try:
        with fs.open_input_stream(path) as fh:
            return fh.read().decode()
    except (FileNotFoundError, OSError):
        return None


def file_names(uri: str) -> list[str]:
    """Names of the files directly under a directory (an empty list when it does not exist)."""
    import pyarrow.fs as pafs

    fs, path = filesystem(uri)
    found = fs.get_file_info(pafs.FileSelector(path, recursive=False, allow_not_found=True))
    return sorted(Path(f.path).name for f in found if f.type == pafs.FileType.File)


def download_file(uri: str, target: Path) -> Path:
    """Copy the file at `uri` to `target`; a failed read or write raises (see `upload_file`)."""
    fs, path = filesystem(uri)
    target.parent.mkdir(parents=True, exist_ok=True)
    with fs.open_input_stream(path) as source, open(target, "wb") as out:
        shutil.copyfileobj(source, out, CHUNK)
    return target


def download_tree(uri: str, dest: Path) -> int:
    """Copy every file under `uri` into `dest` (keeping sub-paths); returns how many were copied."""
    import pyarrow.fs as pafs

    fs, path = filesystem(uri)
    files = [f for f in fs.get_file_info(pafs.FileSelector(path, recursive=True, allow_not_found=True)) if f.is_file]
    for info in files:
        download_file(f"s3://{info.path}" if is_s3(uri) else info.path, dest / info.path[len(path.rstrip("/")) + 1 :])
    return len(files)


def upload_tree(src: Path, uri: str) -> None:
    """Copy every file under the local directory `src` to `uri` (keeping sub-paths); a failed upload raises."""
    fs, path = filesystem(uri)
    for file in sorted(p for p in src.rglob("*") if p.is_file()):
        upload_file(fs, file, f"{path.rstrip('/')}/{file.relative_to(src).as_posix()}")


def upload_file(fs: Any, file: Path, path: str) -> None:
    """Write `file` to `path` in `fs` and close it here, so a failed write raises. (pyarrow's `copy_files` closes
    its output in a destructor that only prints the error: with `allow_delayed_open` the PutObject happens at that
    close, so an upload refused or cut off went by silently and the file was simply not there.)"""
    with open(file, "rb") as source, fs.open_output_stream(path) as out:
        shutil.copyfileobj(source, out, CHUNK)
