"""`--help` (one screen) and `--help-all` (every flag): every flag listed is one the loader accepts, booleans read
`--x/--no-x`, list items `--LIST.N.FIELD`, and each command's most used flags exist."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from prime_rl.cli.command import Command, Group
from prime_rl.config.help import all_flags, panels, render_help
from prime_rl.config.loader import ConfigError, parse_config
from prime_rl.registry import import_path

REPO = Path(__file__).resolve().parents[1]


def _commands() -> list[tuple[str, Command]]:
    out = []

    def add(prog: str, cmd) -> None:
        if isinstance(cmd, Group):
            for name in cmd.commands.names():
                add(f"{prog} {name}", cmd.commands.get(name))
        else:
            out.append((prog, cmd))

    for name in ("rl", "sft", "trainer", "orchestrator", "inference", "evals", "env_server", "dashboard", "prime_rl"):
        add(name.replace("_", "-"), importlib.import_module(f"prime_rl.cli.{name}").main)
    return out


@pytest.mark.parametrize("prog, cmd", _commands(), ids=[p for p, _ in _commands()])
def test_short_and_full_help_of_every_command(prog, cmd):
    cls = import_path(cmd.config, "config")
    short = render_help(cls, prog, cmd.help, common=cmd.common)  # KeyError for a `common` field that is no flag
    full = render_help(cls, prog, cmd.help, full=True)
    for text in (short, full):
        assert "{True,False}" not in text and "[*]" not in text, prog
    assert len(short.splitlines()) < 100, (prog, len(short.splitlines()))
    assert all(f in full for f in all_flags(cls))
    assert "\n  -h, --help                  this help\n" in short, prog  # one wording in every command's --help


def test_evals_help_says_a_bare_backend_value_picks_the_type():
    """`evals --help`: the backend section row says `--backend transformers` (a bare value) sets `backend.type`."""
    cmd = importlib.import_module("prime_rl.cli.evals").main
    short = " ".join(render_help(import_path(cmd.config, "config"), "evals", cmd.help, common=cmd.common).split())
    assert "(a bare value sets `backend.type`: `--backend transformers`; server/transformers/custom;" in short
    flat = parse_config(import_path(cmd.config, "config"), ["--backend", "transformers"])
    assert flat.backend.type == "transformers"


def test_evals_help_leaves_out_the_eval_intervals_it_refuses_and_sft_keeps_them():
    """`evals` scores once per model (per checkpoint with [checkpoints]) and refuses eval.interval and a source's
    interval: its --help-all and docs/config.md do not offer them; sft's [eval], which schedules by interval, does."""
    from prime_rl.cli.config_docs import render

    evals = import_path(importlib.import_module("prime_rl.cli.evals").main.config, "config")
    full = render_help(evals, "evals", full=True)
    assert "--eval.interval" not in full and "--eval.source.N.interval" not in full, full
    assert "--eval.source list[{name, env, ...}]" in full and "--eval.num-examples" in full
    assert "--eval.interval" not in all_flags(evals)
    with pytest.raises(ConfigError, match="eval.interval = 5 is set, but evals scores once per model"):
        parse_config(evals, ["--eval.interval", "5"])  # still refused, not unknown
    sft = import_path(importlib.import_module("prime_rl.cli.sft").main.config, "config")
    assert {"--eval.interval", "--eval.source.N.interval"} <= set(all_flags(sft))
    page = render()
    evals_part = page.split("## `evals`")[1].split("\n## ")[0]
    sft_part = page.split("## `sft`")[1].split("\n## ")[0]
    assert "`eval.interval`" not in evals_part and "`eval.source.N.interval`" not in evals_part
    assert "| `eval.interval` |" in sft_part and "| `eval.source.N.interval` |" in sft_part


_BOX = set("╭╮╰╯│─")


def _shape(text: str) -> list[str]:
    """Each line of a help text as its kind: blank, heading (unindented), row (`  --flag`, `  -h`) or more
    (the description continued from column 30); anything else is returned as the line itself."""
    kinds = []
    for line in text.splitlines():
        if not line.strip():
            kinds.append("blank")
        elif not line.startswith(" "):
            kinds.append("heading")
        elif line.startswith(("  --", "  -h")):
            kinds.append("row")
        elif line.startswith("  ") and kinds and kinds[-1] == "heading":
            kinds.append("heading")  # a long heading wrapped
        elif line.startswith(" " * 30):
            kinds.append("more")
        else:
            kinds.append(line)
    return kinds


@pytest.mark.parametrize("prog, cmd", _commands(), ids=[p for p, _ in _commands()])
def test_help_is_plain_text_of_one_shape(prog, cmd):
    """Every command's `--help` and `--help-all` are plain text: headings, `  --flag` rows, their descriptions
    continued from column 30 (a command with few flags printed boxed panels before)."""
    cls = import_path(cmd.config, "config")
    for text in (render_help(cls, prog, cmd.help, common=cmd.common), render_help(cls, prog, cmd.help, full=True)):
        assert not _BOX & set(text), prog
        body = text.split("\noptions:\n", 1)
        assert len(body) == 2, prog
        assert set(_shape("options:\n" + body[1])) <= {"blank", "heading", "row", "more"}, prog


@pytest.mark.parametrize("argv, flags", [
    (["prime-rl", "dashboard"], ["--run PATH", "--port INT", "--host STR", "--token STR|None"]),
    (["prime-rl", "export-sft"], ["--run PATH", "--out PATH", "--top-k INT|None", "--errors/--no-errors"]),
    (["dashboard"], ["--run PATH", "--port INT"]),
])  # fmt: skip
def test_small_command_help_lists_every_flag_plainly(argv, flags):
    """A command with few flags: `--help` shows each of them with its whole description, in the shape of `rl
    --help` (headings and rows, no box), with no sections line."""
    import os
    import subprocess
    import sys

    exe = Path(sys.executable).parent / argv[0]
    r = subprocess.run([str(exe), *argv[1:], "--help"], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "COLUMNS": "100"})  # fmt: skip
    assert r.returncode == 0 and not r.stderr, r.stderr
    assert not _BOX & set(r.stdout), r.stdout
    rows = r.stdout.split("\noptions:\n", 1)[1]
    assert rows.startswith("  -h, --help                  this help\n  --help-all                  every flag"), rows
    for flag in flags:
        assert f"\n  {flag} " in rows, (flag, rows)
    assert "sections (" not in r.stdout and "most used:" not in r.stdout
    if argv[-1] == "dashboard":  # a description is whole, not cut to its first sentence
        assert "Without it, a bind other than loopback shows the run to anyone who reaches the port." in " ".join(
            rows.split())


def test_rl_help_is_one_screen_with_the_most_used_flags(capsys):
    from prime_rl.cli.rl import main

    with pytest.raises(SystemExit) as e:
        main(["--help"])
    out = capsys.readouterr().out
    assert e.value.code == 0
    assert len(out.splitlines()) < 90
    assert "most used:" in out and "--orchestrator.train.group-size INT" in out and "--trainer.optim.lr FLOAT" in out
    assert "--orchestrator.advantage.type {grpo,rloo,maxrl,custom}" in out
    assert "--orchestrator.*" in out and "`rl --help-all`" in out and "--resume/--no-resume" in out
    with pytest.raises(SystemExit):
        main(["--help-all"])
    full = capsys.readouterr().out
    assert "--orchestrator.train.source.N.env.agent.max-turns INT" in full
    assert "--orchestrator.eval.source.N.name STR" in full and "--trainer.model.lora.rank" in full


_REFUSED = ("unknown key", "Unrecognized arguments", "config group", "not a list of sections", "no @ file gives",
            "requires a value")  # fmt: skip


@pytest.mark.parametrize("prog, config, files", [
    ("rl", "prime_rl.config.rl:RLConfig", ["examples/gridsim/rl.toml"]),
    ("evals", "prime_rl.config.orchestrator:EvalCommandConfig", ["examples/gridsim/eval.toml"]),
    ("sft", "prime_rl.config.trainer:SFTConfig", []),
])  # fmt: skip
def test_every_flag_help_all_lists_is_accepted(prog, config, files, tmp_path, monkeypatch):
    """Each flag of `--help-all`, with a value, is taken by the loader: at worst its value is wrong for the field
    (or the key belongs to another `type` of its section), never an unknown flag."""
    monkeypatch.chdir(REPO)
    cls = import_path(config, "config")
    extra = tmp_path / "lists.toml"  # one item in every list of sections the example file leaves empty
    extra.write_text({"rl": '[[orchestrator.eval.source]]\nname = "e"\nenv.id = "gridsim"\n',
                      "sft": '[[data.source]]\npath = "a.jsonl"\n[eval]\ninterval = 1\n[[eval.source]]\nname = "e"\n'
                             'env.id = "gridsim"\n'}.get(prog, ""))  # fmt: skip
    base = [x for f in files for x in ("@", f)] + (["@", str(extra)] if prog in ("rl", "sft") else [])
    flags = sorted(set(all_flags(cls)) - {"--help", "--help-all", "--dry-run"})
    assert len(flags) > 30
    for flag in flags:
        name = flag.split("/")[0].replace(".N.", ".0.")
        try:
            parse_config(cls, [*base, name, "1", "--output-dir", str(tmp_path)])
        except ConfigError as e:
            assert not any(r in str(e) for r in _REFUSED) or "not a setting of" in str(e), (flag, str(e))


def test_a_bare_backend_example_needs_no_other_field():
    """`orchestrator --help`: the backend row shows no bare-value example, since its only other variant (`custom`)
    needs an import_path (`--backend custom` alone is refused)."""
    from prime_rl.config.orchestrator import OrchestratorConfig

    short = " ".join(render_help(OrchestratorConfig, "orchestrator").split())
    assert "(a bare value sets `backend.type`; server/custom;" in short
    assert "`--backend custom`" not in short


def test_rl_help_and_docs_show_the_teacher_servers_effective_defaults(tmp_path):
    """`[teacher]`'s port (8001), vLLM log (logs/vllm-teacher.log), model name (required) and dtype (the student's)
    are what `rl --help-all` and docs/config.md say, and what the config resolves."""
    import re

    from prime_rl.cli.config_docs import render
    from prime_rl.config.rl import RLConfig

    full = " ".join(render_help(RLConfig, "rl", full=True).split())
    assert re.search(r"--teacher\.server\.port INT [^-]*\(default: 8001\)", full), full
    assert re.search(r"--teacher\.server\.log-file PATH\|None vLLM's own output; default: "
                     r"<output_dir>/logs/vllm-teacher\.log\.", full)  # fmt: skip
    assert re.search(r"--teacher\.model\.name STR [^-]*\(required\)", full)
    assert re.search(r"--teacher\.model\.dtype \S+ Compute dtype; None = the student's", full)
    page = render()
    assert "| `teacher.server.port` | `int` | 8001 |" in page
    assert "| `teacher.model.name` | `str` | (required) |" in page
    assert "<output_dir>/logs/vllm-teacher.log" in page
    cfg = parse_config(RLConfig, ["--trainer.loss.type", "opd", "--teacher.model.name", "t"])
    inference = cfg.teacher.inference_config(tmp_path)
    assert (inference.server.port, inference.server.log_file) == (8001, tmp_path / "logs" / "vllm-teacher.log")
    with pytest.raises(ConfigError, match="teacher.model.name: required"):  # was: the default outputs/tiny-model
        parse_config(RLConfig, ["--trainer.loss.type", "opd", "--teacher.model.dtype", "float32"])


def test_rl_help_and_docs_show_that_unset_teacher_vllm_fields_are_inference_vllms(tmp_path):
    """A `[teacher.vllm]` field left unset is `[inference.vllm]`'s (`TeacherServerConfig.inherit_vllm`), so `rl
    --help-all` and docs/config.md show that as its default, not vLLM's own; the fields it does not inherit (the
    parallel sizes, LoRA, ...) keep their own defaults, and the config resolves accordingly."""
    import re

    from prime_rl.cli.config_docs import render
    from prime_rl.config.inference import VllmConfig
    from prime_rl.config.rl import RLConfig
    from prime_rl.config.teacher import NOT_INHERITED

    _, subs = panels(RLConfig)
    defaults = {re.match(r"--teacher\.vllm\.([\w-]+)", flag)[1].replace("-", "_"): default
                for _, rows in subs for flag, _, default in rows if flag.startswith("--teacher.vllm.")}  # fmt: skip
    assert {name for name, default in defaults.items() if default == "default: [inference.vllm]'s"} == set(
        VllmConfig.model_fields) - set(NOT_INHERITED)  # fmt: skip
    assert defaults["tensor_parallel_size"] == "default: 1" and defaults["enable_lora"] == "default: False"
    full = " ".join(render_help(RLConfig, "rl", full=True).split())
    assert re.search(r"--teacher\.vllm\.gpu-memory-utilization FLOAT [^-]*\(default: \[inference\.vllm\]'s\)", full)
    assert re.search(r"--teacher\.vllm\.tensor-parallel-size INT [^-]*\(default: 1\)", full)
    assert re.search(r"--inference\.vllm\.gpu-memory-utilization FLOAT [^-]*\(default: 0\.9\)", full)  # its own
    page = render()
    assert "| `teacher.vllm.gpu_memory_utilization` | `float` | [inference.vllm]'s |" in page
    assert "| `teacher.vllm.tensor_parallel_size` | `int` | 1 |" in page
    assert "| `inference.vllm.gpu_memory_utilization` | `float` | 0.9 |" in page
    rows = {line.split("`")[1]: line.split(" | ")[2] for line in page.splitlines()
            if line.startswith("| `teacher.vllm.")}  # fmt: skip
    shown = {path.removeprefix("teacher.vllm.") for path, default in rows.items() if default == "[inference.vllm]'s"}
    assert shown == set(VllmConfig.model_fields) - set(NOT_INHERITED)
    cfg = parse_config(RLConfig, ["--trainer.loss.type", "opd", "--teacher.model.name", "t",
                                  "--inference.vllm.gpu-memory-utilization", "0.4", "--inference.vllm.seed", "7",
                                  "--inference.vllm.max-lora-rank", "8"])  # fmt: skip
    vllm = cfg.teacher.inference_config(tmp_path).vllm
    assert type(vllm) is VllmConfig
    assert (vllm.gpu_memory_utilization, vllm.seed, vllm.max_lora_rank) == (0.4, 7, 64)
