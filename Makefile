# The two set-up commands: `make demo` and `make test`. Both create .venv on first use.
# torch is installed first, pinned, so pip never resolves a multi-GB CUDA build.
VENV := .venv
BIN := $(VENV)/bin
TORCH := torch==2.13.0
# The real-weights fixture of tests/convert/test_real_checkpoints.py: sapiens ships two fairseq RoBERTa
# checkpoints with a symbol dict.txt. Its wheel requires fairseq and torch<2.5, neither of which the
# tests import, so it is installed without dependencies (as an extra, pip would replace torch).
SAPIENS := sapiens==1.0.5
# tests/test_onnx_interop.py loads ONNX exports in the HF ecosystem's libraries. optimum-onnx (Optimum's
# ORTModelFor*) pins transformers<4.58, older than ours, so it and sentence-transformers' ONNX backend
# live in a venv of their own, run as a subprocess; transformers.js is npm's, in tests/interop/js.
OPTIMUM_VENV := .venv-optimum
OPTIMUM := 'optimum-onnx[onnxruntime]==0.1.0' sentence-transformers==5.7.0

.PHONY: demo test test-fast lint install clean bench bench-full gpu-check

$(BIN)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet $(TORCH)
	$(BIN)/pip install --quiet -e '.[test]'
	$(BIN)/pip install --quiet --no-deps $(SAPIENS)
	touch $@

# The interop peers, for the tests only (the demo needs neither). npm ci: transformers.js as
# package-lock.json pins it. onnxruntime-node ships its CPU binaries; its install script would fetch
# CUDA ones from NuGet (ONNXRUNTIME_NODE_INSTALL=skip).
$(OPTIMUM_VENV)/.installed: Makefile
	python3 -m venv $(OPTIMUM_VENV)
	$(OPTIMUM_VENV)/bin/pip install --quiet $(TORCH) $(OPTIMUM)
	touch $@

tests/interop/js/node_modules/.installed: tests/interop/js/package-lock.json
	cd tests/interop/js && ONNXRUNTIME_NODE_INSTALL=skip npm ci --no-audit --no-fund --loglevel=error
	touch $@

INTEROP := $(OPTIMUM_VENV)/.installed tests/interop/js/node_modules/.installed

install: $(BIN)/.installed $(INTEROP)

demo: $(BIN)/.installed
	$(BIN)/roberta demo

# Two workers, a file each at a time (a file's module fixtures stay in one process), one thread each
# (tests/conftest.py): most tests wait on a subprocess starting or a server answering, so two
# halve the wall time on two cores where one worker left a core idle.
test: $(BIN)/.installed $(INTEROP)
	$(BIN)/python -m pytest -q -n 2 --dist loadfile

# The formatter's layout and the linter's rules ([tool.ruff] in pyproject.toml); CI runs it first.
lint: $(BIN)/.installed
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/ruff check src tests benchmarks

# The suite without the end-to-end runs (`slow`): a minute or two, for the edit-test loop.
test-fast: $(BIN)/.installed $(INTEROP)
	$(BIN)/python -m pytest -q -m "not slow"

# `make bench` (<= 15 minutes on a quiet 2-core CPU) and `make bench-full` rewrite the table at the
# top of benchmarks/RESULTS.md. They add the bench extra (HF Trainer baselines); the torch pin is
# given again so that resolving the extras can never replace the torch installed above.
$(BIN)/.bench-installed: $(BIN)/.installed pyproject.toml
	$(BIN)/pip install --quiet $(TORCH) -e '.[test,bench]'
	touch $@

bench: $(BIN)/.bench-installed
	$(BIN)/python benchmarks/bench.py

bench-full: $(BIN)/.bench-installed
	$(BIN)/python benchmarks/bench.py --full

# One GPU, <= 8 minutes: the GPU path checked and timed (bf16, the attention kernel, throughput beside
# HF, resume, DDP/FSDP, fine-tuning, serving) into benchmarks/results/<date>-gpu-check.{json,md}
# (docs/training.md#on-a-gpu). `--dry-run` runs the same parts on the CPU at a tiny shape.
gpu-check: $(BIN)/.bench-installed
	$(BIN)/python benchmarks/gpu_check.py

clean:
	rm -rf $(VENV) $(OPTIMUM_VENV) tests/interop/js/node_modules build src/*.egg-info .pytest_cache
