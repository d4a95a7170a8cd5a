"""examples/gridsim/argmax.py --sft-scores: an earlier run's SFT argmax scores are reused only for the same start
model, named by the same folder or by a folder with byte-identical *.safetensors files (a clean clone's copy)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _argmax():
    spec = importlib.util.spec_from_file_location("gridsim_argmax", REPO / "examples" / "gridsim" / "argmax.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _model(path: Path, payload: bytes) -> Path:
    path.mkdir(parents=True)
    (path / "model.safetensors").write_bytes(payload)
    return path


def _earlier_run(root: Path, start: Path) -> Path:
    (root / "configs").mkdir(parents=True)
    (root / "configs" / "orchestrator.toml").write_text(f'[model]\nname = "{start}"\n')
    (root / "argmax").mkdir()
    scores = root / "argmax" / "argmax_sft.jsonl"
    scores.write_text("".join(json.dumps({"task_id": t, "score": s}) + "\n" for t, s in (("d1", 0.5), ("d2", 1.0))))
    return scores


def test_same_bytes_at_another_path_is_reused_other_bytes_refused(tmp_path):
    argmax = _argmax()
    first = _model(tmp_path / "clone_a" / "step_1000", b"weights-A")
    scores = _earlier_run(tmp_path / "run_a", first)
    assert argmax.reuse_sft(scores, first.resolve()) == {"d1": 0.5, "d2": 1.0}
    copy = _model(tmp_path / "clone_b" / "step_1000", b"weights-A")
    assert argmax.reuse_sft(scores, copy.resolve()) == {"d1": 0.5, "d2": 1.0}
    other = _model(tmp_path / "clone_c" / "step_1000", b"weights-B")
    with pytest.raises(SystemExit, match="differ"):
        argmax.reuse_sft(scores, other.resolve())
    empty = tmp_path / "no_weights"
    empty.mkdir()
    with pytest.raises(SystemExit, match="differ"):
        argmax.reuse_sft(scores, empty.resolve())
