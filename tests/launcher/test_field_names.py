"""`rl`'s pre-flight checks name a field as the user set it: a shared top-level field (`--model.name`, `[model]`)
by its top-level name and the flag or file that set it, a section's own field by its section path."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from prime_rl.config.loader import parse_config
from prime_rl.config.rl import RLConfig
from prime_rl.launcher import preflight
from prime_rl.launcher.errors import PreflightError

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "examples/gridsim/rl.toml"
BIN = Path(sys.executable).parent
NO_FOLDER = ("no such folder. Give a local Hugging Face model folder (e.g. `prime-rl smollm outputs/smollm` or "
             "`prime-rl tiny-model outputs/tiny-model`) or a hub id such as 'HuggingFaceTB/SmolLM2-135M-Instruct'")


def test_dry_run_names_the_flag_of_a_hub_id_that_does_not_resolve(tmp_path):
    """The whole line a user sees for `--model.name Org/Model` (the local cache only, so the same anywhere)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(tmp_path / "hub")}
    r = subprocess.run([str(BIN / "rl"), "@", str(DEMO), "--model.name", "Org/Model", "--output-dir",
                        str(tmp_path / "run"), "--dry-run"], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                       env=env)  # fmt: skip
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr == (
        "error: model.name = 'Org/Model' (from --model.name): no such local folder; no model of that id in the local "
        "Hugging Face cache (HF_HUB_OFFLINE=1). Give a local Hugging Face model folder (none at ./Org/Model: "
        "`prime-rl tiny-model Org/Model` or `prime-rl smollm Org/Model` writes one there), or a hub id that is "
        "downloaded (`hf download Org/Model` where the hub is reachable)\n"
    )


@pytest.mark.parametrize("toml, args, shown", [
    ('[model]\nname = "no/such/model"\n', [], "model.name = 'no/such/model' (in {file})"),
    ('[trainer.model]\nname = "no/such/model"\n', [], "trainer.model.name = 'no/such/model' (in {file})"),
    ("", ["--model.name", "no/such/model"], "model.name = 'no/such/model' (from --model.name)"),
    ("", ["--trainer.model.name", "no/such/model"], "trainer.model.name = 'no/such/model' (from --trainer.model.name)"),
])  # fmt: skip
def test_model_errors_name_the_field_where_it_was_set(tmp_path, toml, args, shown):
    file = tmp_path / "rl.toml"
    file.write_text(toml)
    cfg = parse_config(RLConfig, ["@", str(file), *args])
    with pytest.raises(PreflightError) as e:
        preflight.check_model(cfg)
    assert str(e.value) == f"{shown.format(file=file)}: {NO_FOLDER}"


def test_a_missing_chat_template_names_the_shared_flag(tmp_path):
    cfg = parse_config(RLConfig, ["--model.chat-template", str(tmp_path / "t.jinja")])
    with pytest.raises(PreflightError) as e:
        preflight.check_model(cfg)
    assert str(e.value) == f"model.chat_template = {str(tmp_path / 't.jinja')!r} (from --model.chat-template): no such file"
