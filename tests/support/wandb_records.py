"""Read back what W&B wrote for an offline run: the records of its `run-<id>.wandb` file, parsed with W&B's own
protobuf schema (`wandb.proto.wandb_internal_pb2.Record`).

The file is W&B's transaction log, the one `wandb sync` uploads: a 7-byte header (":W&B", magic 0xBEE1, version
0) and then LevelDB-log framing, 32 KiB blocks of chunks with a 7-byte header each (crc32c, length, type: 1 full,
2 first, 3 middle, 4 last); a block's tail shorter than a header is padding. W&B 0.31 keeps its reader in its Go
core, so this is the few lines needed to get the records out; the CRCs are not checked.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

BLOCK, HEADER = 32768, 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def chunks(data: bytes) -> list[bytes]:
    assert data[:4] == b":W&B", "not a W&B transaction log"
    records, pending, pos = [], b"", HEADER
    while pos + HEADER <= len(data):
        left = BLOCK - pos % BLOCK
        if left < HEADER:
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + HEADER])
        body = data[pos + HEADER : pos + HEADER + length]
        pos += HEADER + length
        if kind == 0 and length == 0:
            continue
        if kind in (FULL, FIRST):
            pending = body
        else:
            pending += body
        if kind in (FULL, LAST):
            records.append(pending)
    return records


def history(run_file: Path) -> list[dict[str, Any]]:
    """Every `history` record of the run file: the rows the run logged, values decoded from JSON."""
    from wandb.proto import wandb_internal_pb2 as pb

    rows = []
    for raw in chunks(run_file.read_bytes()):
        record = pb.Record()
        record.ParseFromString(raw)
        if record.WhichOneof("record_type") == "history":
            rows.append(
                {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item}
            )
    return rows


def run_ids(run_file: Path) -> set[str]:
    from wandb.proto import wandb_internal_pb2 as pb

    ids = set()
    for raw in chunks(run_file.read_bytes()):
        record = pb.Record()
        record.ParseFromString(raw)
        if record.WhichOneof("record_type") == "run":
            ids.add(record.run.run_id)
    return ids
