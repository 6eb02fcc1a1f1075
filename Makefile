# The two set-up commands: `make demo` and `make test`. Both create .venv on first use.
# torch is installed first, pinned, so pip never resolves a multi-GB CUDA build.
VENV := .venv
BIN := $(VENV)/bin
TORCH := torch==2.13.0

.PHONY: demo test test-fast install clean

$(BIN)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet $(TORCH)
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@

install: $(BIN)/.installed

demo: $(BIN)/.installed
	$(BIN)/roberta demo

test: $(BIN)/.installed
	$(BIN)/python -m pytest -q

# The suite without the end-to-end runs (`slow`): a minute or two, for the edit-test loop.
test-fast: $(BIN)/.installed
	$(BIN)/python -m pytest -q -m "not slow"

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache
