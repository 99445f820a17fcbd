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

.PHONY: setup test test-fast bench-smoke lint docs gallery demo lab lab-env

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX)) "$(TORCH)"
	$(BIN)/python -m pip install --quiet -e ".[test]"
	# papermill runs the report notebooks on the kernel named python3: this environment's.
	$(BIN)/python -m ipykernel install --sys-prefix --name python3
	touch $(STAMP)

setup: $(STAMP)

# Two worker processes (pytest-xdist). Work units are whole test files (their module fixtures,
# rendered notebooks and batches, are built once), except that the Ray files form one unit so that
# one worker drives the shared cluster; tests/conftest.py names the units and orders them, the
# longest first (hence no reordering by test count). Override XDIST= to run in one process.
XDIST ?= -n 2 --dist loadfile --no-loadscope-reorder

# pytest exits 5 when it collects or selects no test at all: make fails then, as on any non-zero
# status (never add `|| true` or a `-` prefix here).
# PYTHONDONTWRITEBYTECODE= (empty): bytecode is cached even where the environment turns that off.
# The suite starts hundreds of Python processes (kernels, CLI children, Ray workers) that import
# this package, and every xdist worker rewrites and compiles 222 test modules: uncached, that cost
# each worker 8 s of collection alone.
test: setup
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest $(XDIST) -m "not bench" --durations=15

# The edit-test loop: the same without the tests marked slow (Ray, notebook executions, signalled
# and killed children, full-size boards). `make test` stays the whole suite, the one CI runs.
test-fast: setup
	$(BIN)/python -m pytest $(XDIST) -m "not slow and not bench"

# Every script in benchmarks/ as shipped, at its smallest size (tests marked bench): each is a
# process that pays its own imports, tiny models and Ray workers, about 85 s of CPU in all, so
# they run beside the suite rather than in it; CI runs this after `make test`.
bench-smoke: setup
	$(BIN)/python -m pytest $(XDIST) -m bench tests/perf/test_perf_scripts.py tests/perf/test_perf_scripts_ray.py

# The rules are in pyproject.toml ([tool.ruff]); CI runs this before the tests.
lint: setup
	$(BIN)/ruff check .

# The documentation site (mkdocs.yml, docs/) into build/docs/; strict: a broken link or anchor, a page
# missing from the navigation or an asset from the network fails it. CI builds it after the lint.
# (NO_MKDOCS_2_WARNING: Material's banner about MkDocs 2, which this site does not use.)
docs: setup
	NO_MKDOCS_2_WARNING=1 $(BIN)/python -m mkdocs build --strict

# The screenshots of docs/reports.md's gallery: real reports of every kind, rendered as the demo
# renders them (offline backend, tiny reward model, a local mock server for judges and CoSER),
# shot in headless Chromium. Needs the official data (`charactereval data use DIR`) and the CoSER
# data with its released files (`charactereval coser data fetch --with-results`).
gallery: setup
	$(BIN)/python docs/gallery/shoot.py

# The demo's tiny model has its tokenizer trained on the official data's text (a tiny model made
# otherwise is replaced). One trained on synthetic text split the demo's RM inputs into 2.9x more
# tokens (median 2,137 vs 730) and truncated 12.6% of them (45 of 358) where the data-trained one
# truncates none; of the 8,032 RM inputs of each released model, at most 16 even exceed 4,096
# characters (seed 000). --vocab 8000: the data needs more than the default 2,000 pieces.
demo: setup
	$(BIN)/charactereval data fetch
	$(BIN)/charactereval data verify
	$(BIN)/charactereval doctor
	grep -qs "official data's text" models/tiny-rm/README.md || \
		$(BIN)/charactereval rm make-tiny models/tiny-rm --from-data --vocab 8000
	$(BIN)/charactereval batch configs/demo.yaml

# Jupyter Lab on the runs' notebooks (outputs/RUN/analyse.ipynb, made by `charactereval notebook`
# when missing; RUN=NAME picks the run). The server has its own environment, .venv-lab, with the
# lab extra only: what Lab installs (rfc3987-syntax, 1.1 s in every process that imports nbformat
# or Ray) stays out of .venv, whose python3 kernel runs the notebooks (cli/lab.py).
LAB_VENV := .venv-lab
LAB_STAMP := $(LAB_VENV)/.installed
RUN ?= demo-offline-a

$(LAB_STAMP): $(STAMP)
	test -x $(LAB_VENV)/bin/python || $(PYTHON) -m venv $(LAB_VENV)
	$(LAB_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m charactereval_lib.cli.lab requirements > $(LAB_VENV)/requirements.txt
	$(LAB_VENV)/bin/python -m pip install --quiet -r $(LAB_VENV)/requirements.txt
	touch $(LAB_STAMP)

# The Lab environment alone: CI makes it before `make test`, so that tests/project/test_lab.py runs a
# notebook through a real Lab server (without it that test is skipped, saying so).
lab-env: $(LAB_STAMP)

lab: setup $(LAB_STAMP)
	$(BIN)/python -m charactereval_lib.cli.lab open --lab-python $(LAB_VENV)/bin/python --run $(RUN)
