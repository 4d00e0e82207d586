# Two commands on a fresh clone:  `make demo`  and  `make test`  (see README).
PYTHON ?= python3
VENV   ?= .venv
BQ_VENV ?= .venv-bqemulator
PY      = $(VENV)/bin/python
DEMO_ROWS ?= 100000
DEMO_DIR  ?= demo_output
DEMO_EPOCHS ?= 6
STREAM_ROWS ?= 3000
STREAM_RATE ?= 100
IMG_PER_CLASS ?= 1500
IMG_EPOCHS ?= 20
IMG_DIR ?= demo_images
# Test processes at once: many tests wait on subprocesses, emulators and paced streams.
TEST_PROCS ?= 3

# The project's venv and the BigQuery emulator's install side by side.
MAKEFLAGS += -j2

.PHONY: install install-emulators demo demo-stream demo-images test test-fast bench serving-check clean

install: $(VENV)/.installed

# pip byte-compiles at install (~40 of its ~80 s here). Not skipped with --no-compile: these
# machines set PYTHONDONTWRITEBYTECODE=1, so nothing would be compiled later either and every
# import of TensorFlow would compile from source (a fresh test run went minutes slower).
$(VENV)/.installed: requirements.txt requirements-dev.txt setup.py pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info[:2] == (3, 11), "Python 3.11 is required (set PYTHON=python3.11)"'
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt -r requirements-dev.txt
	$(PY) -m pip install -q --no-deps -e .
	touch $@

# The BigQuery emulator, in a venv of its own (tests; the Pub/Sub one is a Debian package).
install-emulators: $(BQ_VENV)/.installed

$(BQ_VENV)/.installed: requirements-bqemulator.txt
	$(PYTHON) -m venv $(BQ_VENV)
	$(BQ_VENV)/bin/python -m pip install -q --upgrade pip
	$(BQ_VENV)/bin/python -m pip install -q -r requirements-bqemulator.txt
	touch $@

demo: install
	$(PY) -m tools.datagen --rows $(DEMO_ROWS) --output $(DEMO_DIR)/data/taxi.csv
	$(PY) -m beam_jobs.preprocess --input $(DEMO_DIR)/data/taxi.csv --output $(DEMO_DIR)/prep \
	    --schema_spec preprocessing/specs/taxi.yaml \
	    --direct_num_workers 2 --direct_running_mode multi_processing
	$(PY) -m training.task --data_dir $(DEMO_DIR)/prep --job_dir $(DEMO_DIR)/job \
	    --epochs $(DEMO_EPOCHS) --verbose 0
	$(PY) -m beam_jobs.batch_predict --model_dir $(DEMO_DIR)/job/export \
	    --input $(DEMO_DIR)/data/taxi.csv --output $(DEMO_DIR)/predictions/{date} \
	    --evaluate_label fare_amount --output_format both
	@echo "demo: data $(DEMO_DIR)/data, preprocessed $(DEMO_DIR)/prep, model $(DEMO_DIR)/job/export," \
	      "predictions $(DEMO_DIR)/predictions/ (noise sigma of the data: 1.5 = best possible RMSE)"
	@echo "demo: reports (open in a browser):"; ls -1t $(DEMO_DIR)/prep/report.html \
	    $(DEMO_DIR)/job/report.html $(DEMO_DIR)/predictions/*/report.html | sed 's/^/  /'

# Streaming on the real Pub/Sub emulator with the model `make demo` trained (~1 min): publishes
# STREAM_ROWS demo rows (some malformed) at STREAM_RATE/s, swaps in a new model version half way.
demo-stream: install
	$(PY) -m tools.demo_stream --model_dir $(DEMO_DIR)/job/export \
	    --data $(DEMO_DIR)/data/taxi.csv --work_dir $(DEMO_DIR)/stream \
	    --rows $(STREAM_ROWS) --rate $(STREAM_RATE)

# Images end to end (~6 min on 2 cores): generated shapes -> preprocess -> CNN -> batch
# prediction over freshly generated images (another seed: never seen in training).
demo-images: install
	$(PY) -m tools.shapes --output $(IMG_DIR)/shapes --per_class $(IMG_PER_CLASS)
	$(PY) -m beam_jobs.preprocess --format images --input $(IMG_DIR)/shapes/labels.csv \
	    --output $(IMG_DIR)/prep
	$(PY) -m training.task --data_dir $(IMG_DIR)/prep --job_dir $(IMG_DIR)/job \
	    --epochs $(IMG_EPOCHS) --batch_size 32 --learning_rate 0.003 --lr_schedule cosine \
	    --cache --verbose 0
	$(PY) -m tools.shapes --output $(IMG_DIR)/new --per_class 100 --seed 7
	$(PY) -m beam_jobs.batch_predict --model_dir $(IMG_DIR)/job/export \
	    --input $(IMG_DIR)/new/labels.csv --output $(IMG_DIR)/predictions/{date} \
	    --evaluate_label label

# TEST_PROCS test processes at a time (pytest-xdist, tests handed out one by one); they share
# the fixtures that run whole jobs (tests/conftest.py built_once).
test: install install-emulators
	$(PY) -m ruff check .
	$(VENV)/bin/lint-imports --no-cache
	export TESTS_SHARED_DIR="$$(mktemp -d)"; \
	$(PY) -m pytest tests -n $(TEST_PROCS) --dist worksteal; \
	rc=$$?; rm -rf "$$TESTS_SHARED_DIR"; exit $$rc

# The unit tier: no test that runs a whole job, trains or starts an emulator (two processes:
# 46 s here, 72 s in one).
test-fast: install
	$(PY) -m ruff check .
	$(PY) -m pytest tests -m "not slow" -n 2

# TF Serving's TF-DF ops serve make demo's export (a side venv, .venv-tfdf: ~90 s once; docs/serving.md).
serving-check: install
	$(PY) -m tools.tfdf_serving_check --export $(DEMO_DIR)/job/export

bench: install
	$(PY) benchmarks/preprocess_csv.py --rows 1000000

clean:
	rm -rf $(DEMO_DIR) .pytest_cache
