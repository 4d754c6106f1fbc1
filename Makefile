# The stable interface: make variables (see README). Every target creates or reuses the venv.
PYTHON  ?= python3
VENV    ?= .venv
PY      := $(VENV)/bin/python
STAMP   := $(VENV)/.installed-stamp

INPUT   ?= books:sample/books,text:sample/text
OUT     ?= out/sample
# the build's own defaults apply (bert-shards build --help): these pass a flag only when set
FORMAT  ?=
VOCAB   ?=
SEQ_LEN ?=
DUPE    ?=
SEED    ?=
WORKERS ?=
RUNNER  ?=
DASK_ADDRESS ?=
PROJECT ?=
REGION  ?=
TEMP    ?=
ARGS    ?=
DATA    ?= data
# training
MODEL   ?= tiny
RUN     ?= runs/$(MODEL)-$(call basename_of,$(OUT))
STEPS   ?= 300
DEVICE  ?= cpu
TASK    ?= sst2
# make finetune reads DATA when it is given, else the task's bundled sample: sample/finetune/TASK
# (sst2, ner, squad). DATA's own default, data/, is where make corpora and make bench keep files.
FINETUNE_DATA = $(if $(filter file,$(origin DATA)),sample/finetune/$(TASK),$(DATA))
CKPT    ?= $(RUN)/last.pt
EXPORT  ?= $(RUN)/export

# The sample: `make pretrain` builds it on the way only into its own OUT, from its own INPUT.
SAMPLE_INPUT := books:sample/books,text:sample/text
SAMPLE_OUT   := out/sample

# Paths may hold spaces and quotes: every path is passed single-quoted by q, which writes each
# ' inside as '\'' (the shell's way to put one in a quoted word): $(call q,$(OUT)).
# basename_of gives a path's last part, spaces kept (make's own notdir splits on them):
# "out/my corpus/" -> "my corpus".
q = '$(subst ','\'',$(1))'
empty :=
space := $(empty) $(empty)
basename_of = $(subst |,$(space),$(notdir $(patsubst %/,%,$(subst $(space),|,$(strip $(1))))))

# what `make shards` and `make vocab` share: the input, OUT, and how the command runs
READ_FLAGS = --input $(call q,$(INPUT)) --out $(call q,$(OUT)) \
	$(if $(FORMAT),--format $(FORMAT)) \
	$(if $(SEED),--seed $(SEED)) $(if $(WORKERS),--workers $(WORKERS)) \
	$(if $(RUNNER),--runner $(RUNNER))
SHARD_FLAGS = $(READ_FLAGS) $(if $(SEQ_LEN),--max-seq-length $(SEQ_LEN)) \
	$(if $(DUPE),--dupe-factor $(DUPE)) \
	$(if $(VOCAB),--vocab $(call q,$(VOCAB))) \
	$(if $(DASK_ADDRESS),--dask-address $(call q,$(DASK_ADDRESS))) \
	$(if $(filter DataflowRunner,$(RUNNER)),--project $(PROJECT) --region $(REGION) \
	  --temp_location $(call q,$(TEMP)) --setup_file ./setup.py)

.PHONY: help venv shards vocab validate inspect export-shards pretrain finetune glue export \
	evaluate test test-fast lint bench corpora clean

# Every target with its line (the `## ` after it); needs no venv.
help: ## this list
	@echo 'make TARGET [VARIABLE=value ...]; every variable: docs/build-flags.md'
	@awk -F ':.*## ' '/^[a-z-]+:.*## / {printf "  make %-14s %s\n", $$1, $$2}' $(call q,$(firstword $(MAKEFILE_LIST)))

venv: $(STAMP) ## create .venv and install everything (every target does it first)

# Hugging Face `datasets` (and the pandas it brings), for the test that loads a shard set with
# it, in a folder of its own that only that test's child process puts on its path: Beam imports
# pandas whenever it can, in every process that imports Beam (docs/benchmarks.md).
HF_DATASETS_DIR = $(VENV)/hf-datasets

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[model,gcs,export,dev,gcp,dask]'
	$(PY) -m pip install -q --no-deps 'mosaicml-streaming==0.13.0'  # its pins: see pyproject dev
	$(PY) -m pip install -q --no-deps --upgrade --target $(call q,$(HF_DATASETS_DIR)) \
		'datasets==5.2.0' 'pandas==3.1.1' 'dill==0.4.1' 'multiprocess==0.70.19'
	touch $(STAMP)

shards: $(STAMP) ## build a shard set from INPUT (FORMAT) into OUT; the sample by default
	$(PY) -m pipeline build $(SHARD_FLAGS) $(ARGS)

vocab: $(STAMP) ## train the WordPiece vocab of INPUT into OUT alone
	$(PY) -m pipeline vocab $(READ_FLAGS) $(ARGS)

validate: $(STAMP) ## check the set in OUT against the contract
	$(PY) -m schemas.cli validate $(call q,$(OUT)) $(ARGS)

inspect: $(STAMP) ## print rows of the set in OUT, decoded, and its summary (ARGS='--n 2 --shard 0')
	$(PY) -m schemas.cli inspect $(call q,$(OUT)) $(ARGS)

# The set in OUT for another trainer: EXPORT_FORMAT=hdf5|tfrecord|mds into DEST (docs/export.md).
# Neither has a default; FORMAT stays the input's format of `make shards`.
export-shards: $(STAMP) ## write the set in OUT for another trainer: EXPORT_FORMAT=hdf5|tfrecord|mds DEST=...
	@test -n $(call q,$(EXPORT_FORMAT)) -a -n $(call q,$(DEST)) || { echo "make export-shards: \
	give EXPORT_FORMAT=hdf5|tfrecord|mds and DEST=folder (the set is OUT='$(OUT)')" >&2; exit 2; }
	$(PY) -m schemas.cli export $(call q,$(OUT)) $(call q,$(DEST)) --format $(call q,$(EXPORT_FORMAT)) $(ARGS)

pretrain: $(STAMP) ## pre-train MODEL on the set in OUT for STEPS steps on DEVICE into RUN
ifeq ($(OUT)|$(INPUT),$(SAMPLE_OUT)|$(SAMPLE_INPUT))
	@test -f $(call q,$(OUT)/manifest.json) || $(MAKE) shards OUT=$(call q,$(OUT))
else ifneq ($(filter gs://%,$(OUT)),)
	@: a set in GCS: bert-model checks its manifest there and streams it through its shard cache
else
	@test -f $(call q,$(OUT)/manifest.json) || { echo "make pretrain: no shard set in OUT='$(OUT)' \
	(no manifest.json); build one from your corpus first: make shards INPUT=... \
	FORMAT=... OUT='$(OUT)' (only the sample, INPUT and OUT left at their defaults, \
	is built on the way)" >&2; exit 2; }
endif
	$(PY) -m model.cli pretrain --shards $(call q,$(OUT)) --run $(call q,$(RUN)) \
		--model $(MODEL) --steps $(STEPS) --device $(DEVICE) $(ARGS)

finetune: $(STAMP) ## fine-tune CKPT on TASK's DATA (the bundled sample by default)
	$(PY) -m model.cli finetune --task $(TASK) --data $(call q,$(FINETUNE_DATA)) --ckpt $(call q,$(CKPT)) --device $(DEVICE) $(ARGS)

glue: $(STAMP) ## fine-tune CKPT on every GLUE task in DATA, and their table
	$(PY) -m model.cli glue --data $(call q,$(DATA)) --ckpt $(call q,$(CKPT)) --device $(DEVICE) $(ARGS)

export: $(STAMP) ## write CKPT as a Hugging Face directory into EXPORT
	$(PY) -m model.cli export --ckpt $(call q,$(CKPT)) --out $(call q,$(EXPORT)) $(ARGS)

evaluate: $(STAMP) ## held-out MLM/NSP loss and accuracy of CKPT on the set in OUT
	$(PY) -m model.cli evaluate --ckpt $(call q,$(CKPT)) --shards $(call q,$(OUT)) --device $(DEVICE) $(ARGS)

# The tests in TEST_JOBS processes (pytest-xdist), each file in one of them, so a module's
# fixtures are made once, and in the order tests/conftest.py gives them (heavy files first);
# TEST_JOBS=0 runs them all in this one.
TEST_JOBS ?= 2
TEST_PROCS = $(if $(filter-out 0,$(TEST_JOBS)),-n $(TEST_JOBS) --dist loadfile --no-loadscope-reorder)
# pytest's plugins named here, not loaded from every installed package that offers one: pytest
# rewrites the asserts of every module of an autoloaded plugin's package, all of hypothesis's
# among them (seven test files import it), at a cost in every test process
# (docs/benchmarks.md, "The test suite"). A plugin the tests come to need is added here.
TEST_PLUGINS = -p xdist -p hypothesispytest
PYTEST = PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 $(PY) -m pytest

# The realistic tests read real text from data/ (`make corpora`), fetched first when it is
# missing; where the archive cannot be reached they are skipped, each saying why.
TEST_CORPUS := data/corpora/kernel-docs/books
test: $(STAMP) ## the whole suite on the CPU (fetching the corpora first when missing)
	@test -d $(call q,$(TEST_CORPUS)) || $(MAKE) --no-print-directory corpora DATA=data \
		|| echo "make test: the corpora could not be fetched; the tests that read them are skipped" >&2
	$(PYTEST) tests $(ARGS) $(TEST_PROCS) $(TEST_PLUGINS)

# For local iteration: everything but the tests marked `slow`. `make test` runs them all.
test-fast: $(STAMP) ## the suite without the tests marked slow
	$(PYTEST) tests -m 'not slow' $(ARGS) $(TEST_PROCS) $(TEST_PLUGINS)

lint: $(STAMP) ## ruff check and format check
	$(PY) -m ruff check schemas pipeline model tests bench
	$(PY) -m ruff format --check schemas pipeline model tests bench

KERNEL_DOCS := $(DATA)/debian/linux-doc/usr/share/doc/linux-doc-6.1/Documentation
# corpora and bench pass their interpreters quoted too (a PYTHON with a space or a quote, a VENV
# with a quote). The other targets still give $(PY) bare (the Makefile tests hand them a PY of
# several words), and no target takes a VENV with a space: $(STAMP), a prerequisite, splits on it.
corpora: $(STAMP) ## fetch the real text of the realistic tests and benchmarks into DATA
	PYTHON=$(call q,$(PY)) bash bench/fetch_corpora.sh $(call q,$(DATA))
	$(call q,$(PY)) -m bench.corpora --input $(call q,$(KERNEL_DOCS)) --out $(call q,$(DATA)/corpora/kernel-docs)
	$(call q,$(PY)) -m bench.corpora --input $(call q,$(KERNEL_DOCS)) \
		--out $(call q,$(DATA)/corpora/kernel-docs-200mb) \
		--repeat-to-mb 200

bench: $(STAMP) ## the benchmarks, beside the reference and LDDL (docs/benchmarks.md)
	@test -d $(call q,$(DATA)/corpora/kernel-docs-200mb) || $(MAKE) corpora DATA=$(call q,$(DATA))
	-PYTHON=$(call q,$(PYTHON)) bash bench/reference_env.sh $(call q,$(DATA)/bench-env)
	-PYTHON=$(call q,$(PYTHON)) bash bench/lddl_env.sh $(call q,$(DATA)/lddl-env)
	DATA=$(call q,$(DATA)) $(call q,$(PY)) -m bench.run $(ARGS)

clean: ## remove out/, runs/ and pytest's cache
	rm -rf out runs .pytest_cache
