# prime-rl: two commands do everything. `make demo` runs the main job; `make test` runs the whole suite.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
DATA_DIR ?=
SYNTHETIC ?=

.PHONY: install demo demo-reverse-text demo-reasoning-gym test test-fast test-learning lint clean

$(BIN)/.installed: pyproject.toml scripts/install.sh
	PYTHON=$(PY) VENV=$(VENV) bash scripts/install.sh
	touch $@

install: $(BIN)/.installed

demo: install
	DATA_DIR=$(DATA_DIR) SYNTHETIC=$(SYNTHETIC) PATH=$(abspath $(BIN)):$$PATH bash scripts/demo.sh

demo-reverse-text: install
	PATH=$(abspath $(BIN)):$$PATH bash scripts/demo_reverse_text.sh

demo-reasoning-gym: install
	PATH=$(abspath $(BIN)):$$PATH bash scripts/demo_reasoning_gym.sh

test: install lint
	PATH=$(abspath $(BIN)):$$PATH $(BIN)/python -m pytest tests --durations=25

test-fast: install
	PATH=$(abspath $(BIN)):$$PATH $(BIN)/python -m pytest tests -m "not slow"

lint: install
	$(BIN)/ruff check src tests benchmarks

clean:
	rm -rf $(VENV) outputs .pytest_cache

# The learning ladder's slow rungs and multi-seed runs (docs/learning.md); not part of `make test`.
test-learning: install
	PATH=$(abspath $(BIN)):$$PATH PRIME_RL_LEARNING=1 $(BIN)/python -m pytest tests/learning -m learning -x
