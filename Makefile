# huddle: the two commands a newcomer needs are `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin

.PHONY: demo test system-deps lint typecheck unit bench clean

$(BIN)/python:
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "huddle needs Python >= 3.11, $(PYTHON) is " + sys.version.split()[0])'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed: $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install --quiet -e '.[pipeline,test]'
	@touch $@

demo: $(VENV)/.installed
	$(BIN)/huddle demo

lint: $(VENV)/.installed
	$(BIN)/ruff check src tests $(wildcard bench)

typecheck: $(VENV)/.installed
	$(BIN)/mypy

unit: $(VENV)/.installed
	$(BIN)/pytest -q -m "not processes"

# The Debian packages the tests use (network namespaces, nft, chromium, Java for Spark):
# installed as root; otherwise it says what is missing, how to install it, and what will skip.
system-deps:
	scripts/system-deps

# The Python packages (Playwright among them) come with the test extras ($(VENV)/.installed).
test: system-deps lint typecheck
	$(BIN)/pytest -q

bench: $(VENV)/.installed
	$(BIN)/python bench/run_all.py

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache .mypy_cache .ruff_cache .hypothesis
