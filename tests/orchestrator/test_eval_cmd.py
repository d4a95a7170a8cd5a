"""`eval`: avg@k / pass@k on a fake policy with known answers, the results table and files."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from rich.console import Console
from tests.orchestrator.fakes import CounterEnv, ScriptedClient, tiny_tokenizer, tool_call_text

from prime_rl.config.orchestrator import EvalCommandConfig
from prime_rl.models.renderer import make_renderer
from prime_rl.orchestrator.eval_cmd import evaluate, results_table
from prime_rl.orchestrator.sources import InProcessSource


def _script(prompt, k):
    if "<tool_response>" not in prompt:
        return tool_call_text("add", {"x": int(re.findall(r"Reach (\d+)\.", prompt)[-1])})
    target = int(re.findall(r"Reach (\d+)\.", prompt)[-1])
    # tasks 0-1: always right; task 2: right on one of its 2 rollouts (first); task 3: never
    right = target < 2 or (target == 2 and "first" in _script.seen.setdefault(prompt, "first"))
    _script.seen[prompt] = "second"
    return f"done {target}" if right else "done, no idea"


async def test_eval_metrics_and_table(tmp_path):
    tok = tiny_tokenizer(tmp_path / "tok")
    _script.seen = {}
    cfg = EvalCommandConfig(output_dir=tmp_path / "out", eval={"num_examples": 4, "rollouts_per_example": 2})
    src = InProcessSource("counter", CounterEnv(10))
    res = await evaluate(cfg, client=ScriptedClient(tok, _script), renderer=make_renderer(tok, cfg.renderer), sources=[src])
    m = res.by_source["counter"]
    # rewards per task: [1,1], [1,1], [1,0], [0,0] -> avg@2 = 5/8, pass@2 = 3/4, pass@1 = (1 + 1 + 0.5 + 0) / 4
    assert m["avg@2"] == pytest.approx(5 / 8) and m["pass@2"] == pytest.approx(3 / 4) and m["pass@1"] == pytest.approx(2.5 / 4)
    rows = [json.loads(x) for x in (tmp_path / "out" / "outputs--tiny-model" / "step_0.jsonl").read_text().splitlines()]
    assert [sorted(r["rewards"]) for r in rows] == [[1.0, 1.0], [1.0, 1.0], [0.0, 1.0], [0.0, 0.0]]
    console = Console(record=True, width=140)
    console.print(results_table(res, 2))
    text = console.export_text()
    assert "counter" in text and "0.6250" in text and "0.750" in text


async def test_results_of_a_local_checkpoint_go_to_output_dir_model(tmp_path, monkeypatch):
    """`evals --model.name outputs/demo/sft/weights/step_20` with the default output_dir writes
    `outputs/eval/sft--step_20/step_0.jsonl` (docs/monitoring.md): no second `eval/` level inside output_dir."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "outputs/demo/sft/weights/step_20").mkdir(parents=True)
    tok = tiny_tokenizer(tmp_path / "tok")
    _script.seen = {}
    cfg = EvalCommandConfig(model={"name": "outputs/demo/sft/weights/step_20"}, eval={"num_examples": 2})
    assert cfg.output_dir == Path("outputs/eval")
    await evaluate(cfg, client=ScriptedClient(tok, _script), renderer=make_renderer(tok, cfg.renderer),
                   sources=[InProcessSource("counter", CounterEnv(10))])  # fmt: skip
    folder = tmp_path / "outputs/eval"
    assert sorted(p.name for p in (folder / "sft--step_20").iterdir()) == ["step_0.json", "step_0.jsonl"]
    assert not (folder / "eval").exists()
    assert len((folder / "sft--step_20/step_0.jsonl").read_text().splitlines()) == 2


async def test_a_policy_version_is_named_by_its_step_in_the_log(tmp_path, monkeypatch):
    """`evals --model.name outputs/demo/sft/weights/step_20` logs the policy step 20 of its run, not "step 0" (the
    result is still stored as the single model's step_0 files); a model folder outside `weights/` has no step."""
    import logging

    from prime_rl.orchestrator.eval_sweep import policy_step

    monkeypatch.chdir(tmp_path)
    (tmp_path / "outputs/demo/sft/weights/step_20").mkdir(parents=True)
    (tmp_path / "models/step_3").mkdir(parents=True)
    assert policy_step("outputs/demo/sft/weights/step_20") == 20
    assert policy_step("models/step_3") is None and policy_step("Qwen/Qwen3-0.6B") is None
    assert policy_step("outputs/demo/sft/weights/step_99") is None  # no such folder: a hub id, not a version
    tok = tiny_tokenizer(tmp_path / "tok")
    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record):
            lines.append(record.getMessage())

    logger = logging.getLogger("prime_rl.eval")
    handler, level = Keep(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        for name in ("outputs/demo/sft/weights/step_20", "models/step_3"):
            _script.seen = {}
            cfg = EvalCommandConfig(model={"name": name}, eval={"num_examples": 2}, output_dir=tmp_path / "out")
            await evaluate(cfg, client=ScriptedClient(tok, _script), renderer=make_renderer(tok, cfg.renderer),
                           sources=[InProcessSource("counter", CounterEnv(10))])  # fmt: skip
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    done = [ln for ln in lines if " evaluated in " in ln]
    assert done[0].startswith("sft--step_20 (policy step 20 of outputs/demo/sft) evaluated in "), done
    assert done[1].startswith("step_3 evaluated in "), done
    assert not any("step 0" in ln for ln in lines), lines
    assert (tmp_path / "out/sft--step_20/step_0.jsonl").is_file()


def test_eval_without_server_fails_within_health_timeout_naming_the_url(tmp_path):
    import subprocess
    import sys
    import time

    from prime_rl.models.tiny import cached_tiny_model
    from prime_rl.ports import free_port

    REPO = Path(__file__).resolve().parents[2]

    url = f"http://127.0.0.1:{free_port()}"
    t0 = time.monotonic()
    r = subprocess.run(
        [sys.executable, "-m", "prime_rl.cli.evals", "@", str(REPO / "examples/gridsim/eval.toml"), "--model.name",
         str(cached_tiny_model()), "--client.base-url", url, "--client.health-timeout-s", "2",
         "--output-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=120,
    )
    assert r.returncode == 1
    assert url in r.stderr and "not healthy" in r.stderr, r.stderr
    assert time.monotonic() - t0 < 60


def test_prime_rl_eval_forwards_to_the_eval_command(tmp_path):
    """`prime-rl eval ...` is `evals ...` (a bare `eval` is the shell's builtin in bash and zsh)."""
    from prime_rl.cli.prime_rl import main as prime_rl_main

    REPO = Path(__file__).resolve().parents[2]
    with pytest.raises(SystemExit) as e:
        prime_rl_main(["eval", "@", str(REPO / "examples/gridsim/eval.toml"), "--backend", "transformers",
                       "--output-dir", str(tmp_path), "--dry-run"])
    assert e.value.code == 0
    written = (tmp_path / "configs" / "evals.toml").read_text()
    assert '[backend]\ntype = "transformers"' in written and "gridsim" in written


def test_eval_refuses_a_model_name_the_server_does_not_serve(tmp_path):
    from prime_rl.inference.client import check_served_model

    served = {"http://127.0.0.1:8000": ["outputs/demo/sft/weights/step_20"]}
    check_served_model("outputs/demo/sft/weights/step_20", served)
    check_served_model(str(Path("outputs/demo/sft/weights/step_20").resolve()), served)  # same folder, absolute
    with pytest.raises(ValueError, match=r"model.name = 'outputs/demo/tiny-model', but the inference server at "
                                         r"http://127.0.0.1:8000 serves \['outputs/demo/sft/weights/step_20'\]"):
        check_served_model("outputs/demo/tiny-model", served)


def test_eval_against_a_server_of_another_model_exits_2_without_a_traceback(tmp_path):
    """A server that serves another model is a user error: `evals` exits 2 with the message that names both
    models and the fix, and no traceback (it exited 1 with one)."""
    import asyncio
    import subprocess
    import sys
    import threading

    from aiohttp import web

    from prime_rl.models.tiny import cached_tiny_model
    from prime_rl.ports import free_port

    async def health(request: web.Request) -> web.Response:
        return web.json_response({})

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "/models/other", "object": "model"}]})

    port = free_port()
    loop = asyncio.new_event_loop()
    app = web.Application()
    app.router.add_get("/health", health)
    app.router.add_get("/v1/models", models)
    runner = web.AppRunner(app, access_log=None)

    async def serve() -> None:
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()

    loop.run_until_complete(serve())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    REPO = Path(__file__).resolve().parents[2]
    try:
        r = subprocess.run(
            [sys.executable, "-m", "prime_rl.cli.evals", "@", str(REPO / "examples/gridsim/eval.toml"),
             "--model.name", str(cached_tiny_model()), "--client.base-url", f"http://127.0.0.1:{port}",
             "--output-dir", str(tmp_path)],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
    assert r.returncode == 2, r.stderr
    assert "serves ['/models/other']" in r.stderr and "pass --model.name /models/other" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr, r.stderr


async def test_served_models_reads_v1_models():
    from aiohttp import web

    from prime_rl.config.orchestrator import ClientConfig
    from prime_rl.inference.client import InferenceClient, InferenceError
    from prime_rl.ports import free_port

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "m1", "object": "model"}]})

    app = web.Application()
    app.router.add_get("/v1/models", models)  # anything else: 404
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    url = f"http://127.0.0.1:{port}"
    try:
        ok = InferenceClient(ClientConfig(base_url=[url]))
        assert await ok.served_models() == {url: ["m1"]}
        bad = InferenceClient(ClientConfig.model_construct(base_url=[url + "/nothing-here"]))  # a path: refused when validated
        with pytest.raises(InferenceError, match="404"):
            await bad.served_models()
        await ok.aclose()
        await bad.aclose()
    finally:
        await runner.cleanup()


def test_prime_rl_eval_config_error_exits_2_naming_the_field(capsys):
    from prime_rl.cli.prime_rl import main as prime_rl_main

    with pytest.raises(SystemExit) as e:
        prime_rl_main(["eval", "--eval.bogus", "1"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "prime-rl eval: config error" in err and "eval.bogus: unknown key" in err and "Traceback" not in err


async def test_transformers_backend_names_a_missing_model_folder(tmp_path):
    cfg = EvalCommandConfig(model={"name": str(tmp_path / "nope")}, backend="transformers", output_dir=tmp_path)
    with pytest.raises(FileNotFoundError, match=r"model.name = .*nope.*no such model folder"):
        await evaluate(cfg)


@pytest.mark.parametrize("prog", [["eval"], ["rl"]])
def test_greedy_eval_with_several_rollouts_per_example_is_refused_naming_both_fields(capsys, prog, tmp_path):
    """Temperature 0 samples every rollout of a task alike: four of them reported as avg@4 / pass@4 would count one
    rollout four times. The config is refused (exit 2) naming both fields and the fixes, for `eval` and for `rl`'s
    orchestrator eval; one rollout per example, or a temperature above 0, is accepted."""
    from prime_rl.cli.evals import main as evals_main
    from prime_rl.cli.rl import main as rl_main

    main, pre = (evals_main, "--eval.") if prog == ["eval"] else (rl_main, "--orchestrator.eval.")
    with pytest.raises(SystemExit) as e:
        main([f"{pre}sampling.temperature", "0", f"{pre}rollouts-per-example", "4", "--dry-run",
              "--output-dir", str(tmp_path)])  # fmt: skip
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "sampling.temperature = 0 with " in err and "rollouts_per_example = 4" in err and "Traceback" not in err
    assert "rollouts_per_example = 1, or " in err and "sampling.temperature > 0" in err


def test_greedy_eval_is_accepted_with_one_rollout_and_sampled_eval_with_several():
    from prime_rl.config.orchestrator import EvalConfig, repeated_greedy_problem

    assert EvalConfig(sampling={"temperature": 0}, rollouts_per_example=1).sampling.temperature == 0
    assert EvalConfig(sampling={"temperature": 0.7, "seed": 3}, rollouts_per_example=4).rollouts_per_example == 4
    assert repeated_greedy_problem(0.0, 2, prefix="") == (
        "sampling.temperature = 0 with rollouts_per_example = 2: greedy decoding samples the same rollout 2 times per "
        "task, and avg@2, pass@2 and pass@1 would count it as 2 independent ones; set rollouts_per_example = 1, or "
        "sampling.temperature > 0 (with sampling.seed set, each rollout gets its own reproducible seed)"
    )


async def test_run_eval_refuses_repeated_greedy_rollouts():
    from prime_rl.config.orchestrator import EvalSamplingConfig
    from prime_rl.orchestrator.agent import AgentLimits
    from prime_rl.orchestrator.eval import run_eval

    with pytest.raises(ValueError, match="greedy decoding samples the same rollout 3 times"):
        await run_eval([], None, None, EvalSamplingConfig(temperature=0), AgentLimits(64, 8), num_examples=1,
                       rollouts_per_example=3)  # fmt: skip


async def test_num_examples_above_the_eval_split_is_said_once(tmp_path, monkeypatch):
    """`eval.num_examples = 12` on a source whose eval split holds 10 tasks evaluates the 10 and warns once (not at
    every eval), naming the field, the file that set it, the source, the split size and the fix."""
    import logging

    from prime_rl.config.loader import parse_config
    from prime_rl.orchestrator.eval import capped_num_examples

    monkeypatch.chdir(tmp_path)
    Path("e.toml").write_text(f'output_dir = "{tmp_path / "out"}"\n[eval]\nnum_examples = 12\n')
    cfg = parse_config(EvalCommandConfig, ["@", "e.toml"])
    tok = tiny_tokenizer(tmp_path / "tok")
    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record):
            lines.append(record.getMessage())

    logger = logging.getLogger("prime_rl.orchestrator.eval")
    handler = Keep()
    logger.addHandler(handler)
    try:
        for _ in range(2):
            _script.seen = {}
            res = await evaluate(cfg, client=ScriptedClient(tok, _script), renderer=make_renderer(tok, cfg.renderer),
                                 sources=[InProcessSource("counter", CounterEnv(10))])  # fmt: skip
            assert res.by_source["counter"]["tasks"] == 10
    finally:
        logger.removeHandler(handler)
    warned = [ln for ln in lines if "num_examples" in ln]
    assert warned == [
        "eval.num_examples=12 (in e.toml) is above the 10 tasks in the eval split of source 'counter': it is "
        "evaluated on all 10; set eval.num_examples to at most 10 (unset: the whole split)"
    ]
    # a source's own num_examples is named by its entry; within the split (or unset) nothing is said
    own = EvalCommandConfig(eval={"num_examples": 3, "source": [{"name": "counter", "num_examples": 11}]})
    src = InProcessSource("counter", CounterEnv(10))
    assert capped_num_examples([src], own.eval, prefix="orchestrator.", where=lambda f: " (from --x)") == [
        "orchestrator.eval.source.0.num_examples=11 (from --x) is above the 10 tasks in the eval split of source "
        "'counter': it is evaluated on all 10; set orchestrator.eval.source.0.num_examples to at most 10 (unset: the "
        "whole split)"
    ]
    assert capped_num_examples([src], EvalCommandConfig(eval={"num_examples": 10}).eval) == []
    assert capped_num_examples([src], EvalCommandConfig().eval) == []
