# prime-rl: two commands do everything. `make demo` runs the main job; `make test` runs the whole suite.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
DATA_DIR ?=
SYNTHETIC ?=

.PHONY: install demo test test-fast lint clean

$(BIN)/.installed: pyproject.toml scripts/install.sh
	PYTHON=$(PY) VENV=$(VENV) bash scripts/install.sh
	touch $@

install: $(BIN)/.installed

demo: install
	DATA_DIR=$(DATA_DIR) SYNTHETIC=$(SYNTHETIC) PATH=$(abspath $(BIN)):$$PATH bash scripts/demo.sh

test: install lint
	PATH=$(abspath $(BIN)):$$PATH $(BIN)/python -m pytest tests

test-fast: install
	PATH=$(abspath $(BIN)):$$PATH $(BIN)/python -m pytest tests -m "not slow"

lint: install
	$(BIN)/ruff check src tests benchmarks

clean:
	rm -rf $(VENV) outputs .pytest_cache
