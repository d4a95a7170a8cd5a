"""Reading an offline W&B run back, for tests: the `.wandb` file's records, decoded independently of the SDK.

wandb 0.31 has no Python reader for its run files. The file is `:W&B` + magic 0xBEE1 + version byte, then records
in LevelDB's log format (32 KiB blocks; each chunk: crc32 u32, length u16, type u8 = FULL/FIRST/MIDDLE/LAST) whose
payloads are `wandb.proto.wandb_internal_pb2.Record` messages.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BLOCK = 32 * 1024
HEADER = 7


@dataclass
class OfflineRun:
    """What an offline run holds: its identity, config, history rows (dicts keyed by the logged names) and dir."""

    run_id: str = ""
    name: str = ""
    project: str = ""
    job_type: str = ""
    config: dict[str, Any] = field(default_factory=dict)
    history: list[dict[str, Any]] = field(default_factory=list)
    exit_code: int | None = None
    dir: Path = Path()

    def rows(self, process: str) -> list[dict[str, Any]]:
        """History rows that logged `<process>/step`, as {key without the `process/` prefix: value}."""
        p = f"{process}/"
        return [{k[len(p):]: v for k, v in h.items() if k.startswith(p)} for h in self.history if f"{p}step" in h]

    def table(self, entry: dict[str, Any]) -> dict[str, Any]:
        """The JSON of a logged table (`{"columns": [...], "data": [[...], ...]}`) from its history entry."""
        return json.loads((self.dir / "files" / entry["path"]).read_text())


def records(path: Path) -> list[bytes]:
    data = Path(path).read_bytes()
    assert data[:4] == b":W&B" and struct.unpack("<H", data[4:6])[0] == 0xBEE1, "not a W&B run file"
    out, buf, pos = [], b"", HEADER
    while pos + HEADER <= len(data):
        left = BLOCK - pos % BLOCK
        if left < HEADER:  # block trailer (zero padding)
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + HEADER])
        pos += HEADER
        chunk = data[pos:pos + length]
        pos += length
        if kind == 1:
            out.append(chunk)
        elif kind == 2:
            buf = chunk
        elif kind == 3:
            buf += chunk
        elif kind == 4:
            out.append(buf + chunk)
            buf = b""
        else:
            break
    return out


def _set(row: dict[str, Any], keys: list[str], value: Any) -> None:
    for k in keys[:-1]:
        row = row.setdefault(k, {})
    row[keys[-1]] = value


def read_offline_run(run_dir: Path) -> OfflineRun:
    """The single offline run under `run_dir/wandb/` (asserts there is exactly one)."""
    from wandb.proto import wandb_internal_pb2 as pb

    files = sorted(Path(run_dir).glob("wandb/offline-run-*/run-*.wandb"))
    assert len(files) == 1, files
    run = OfflineRun(dir=files[0].parent)
    for raw in records(files[0]):
        rec = pb.Record()
        rec.ParseFromString(raw)
        kind = rec.WhichOneof("record_type")
        if kind == "run":
            r = rec.run
            run.run_id, run.name, run.project, run.job_type = r.run_id, r.display_name, r.project, r.job_type
            for item in r.config.update:
                run.config[item.key] = json.loads(item.value_json)
        elif kind == "config":
            for item in rec.config.update:
                _set(run.config, list(item.nested_key) or [item.key], json.loads(item.value_json))
        elif kind == "history":
            row: dict[str, Any] = {}
            for item in rec.history.item:
                _set(row, list(item.nested_key) or [item.key], json.loads(item.value_json))
            run.history.append(row)
        elif kind == "exit":
            run.exit_code = rec.exit.exit_code
    return run
