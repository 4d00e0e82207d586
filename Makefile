# Two commands on a fresh clone:  `make demo`  and  `make test`  (see README).
PYTHON ?= python3
VENV   ?= .venv
PY      = $(VENV)/bin/python
DEMO_ROWS ?= 100000
DEMO_DIR  ?= demo_output

.PHONY: install demo test test-fast bench clean

install: $(VENV)/.installed

$(VENV)/.installed: requirements.txt requirements-dev.txt setup.py
	@$(PYTHON) -c 'import sys; assert sys.version_info[:2] == (3, 11), "Python 3.11 is required (set PYTHON=python3.11)"'
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt -r requirements-dev.txt
	$(PY) -m pip install -q --no-deps -e .
	touch $@

demo: install
	$(PY) -m preprocessing.datagen --rows $(DEMO_ROWS) --output $(DEMO_DIR)/data/taxi.csv
	$(PY) -m beam_jobs.preprocess --input $(DEMO_DIR)/data/taxi.csv --output $(DEMO_DIR)/prep \
	    --schema_spec preprocessing/specs/taxi.yaml \
	    --direct_num_workers 2 --direct_running_mode multi_processing
	@echo "demo: preprocessed data in $(DEMO_DIR)/prep (summary: $(DEMO_DIR)/prep/summary.json)"

test: install
	$(PY) -m pytest tests

test-fast: install
	$(PY) -m pytest tests -m "not slow"

bench: install
	$(PY) benchmarks/preprocess_csv.py --rows 1000000

clean:
	rm -rf $(DEMO_DIR) .pytest_cache
