# Two entry points: `make demo` (the main job) and `make test` (the whole suite).
# Both create .venv and install everything on first use.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
# CPU build by default (on this project's machines `torch==2.13.0` resolves to the CPU wheel).
# GPU users: e.g. `make setup TORCH_INDEX=https://download.pytorch.org/whl/cu126`, see README.
TORCH ?= torch==2.13.0
TORCH_INDEX ?=
STAMP := $(VENV)/.installed

.PHONY: setup test demo

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX)) "$(TORCH)"
	$(BIN)/python -m pip install --quiet -e ".[test]"
	# papermill runs the report notebooks on the kernel named python3: this environment's.
	$(BIN)/python -m ipykernel install --sys-prefix --name python3
	touch $(STAMP)

setup: $(STAMP)

test: setup
	$(BIN)/python -m pytest

demo: setup
	$(BIN)/charactereval data fetch
	$(BIN)/charactereval data verify
	$(BIN)/charactereval doctor
	test -f models/tiny-rm/config.json || $(BIN)/charactereval rm make-tiny models/tiny-rm
	$(BIN)/charactereval batch configs/demo.yaml
