# `make demo` and `make test` are the only two commands a new user needs:
# each creates .venv/ on first use and installs the project into it.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
ARCH := $(shell uname -m)
# torch/torchvision are pinned on x86_64, where these versions are served locally.
ifeq ($(ARCH),x86_64)
TORCH_PINS := torch==2.14.1 torchvision==0.29.1
endif
STAMP := $(VENV)/.installed
DEMO_DIR ?= build/demo
DEMO_IMAGES ?= 2000

.PHONY: venv system demo test test-full test-room docs lint format bench bench-fields bench-large bench-restart bench-video bench-peers bench-peers-recipe bench-reshard bench-packing bench-vlm bench-scale bench-parquet bench-split bench-sft faults mutants clean
BENCH_DATA ?= bench/data
BENCH_IMAGES ?= 10000
BENCH_WORKERS ?= 1,2
BENCH_REPEATS ?= 3

venv: $(STAMP)

$(STAMP): pyproject.toml setup.py wdstool/format/_jpegcrop.c wdstool/format/_jpegtran.c wdstool/format/_jpegguard.h wdstool/format/_mapread.c loaders/recipe/_pilresample.c loaders/kinds/_planar.c
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet $(TORCH_PINS) -e '.[dev,ray,parquet,lightning,accelerate,torchtnt,show,docs,monitor,video,text]'
	touch $(STAMP)

demo: $(STAMP)
	test -d $(DEMO_DIR)/images || $(PY) -m wdstool sample-data $(DEMO_DIR)/images --images $(DEMO_IMAGES) --classes 10 --seed 0
	$(PY) -m wdstool pack $(DEMO_DIR)/images $(DEMO_DIR)/shards --max-count 250 --overwrite
	$(PY) -m wdstool inspect $(DEMO_DIR)/shards
	$(PY) -m wdstool verify $(DEMO_DIR)/shards
	$(PY) examples/s3_demo.py $(DEMO_DIR)/images $(DEMO_DIR)/shards

# System libraries the suite uses, installed with apt-get where make runs as root on Debian or
# Ubuntu; elsewhere each test that needs one is a skip naming the package. chromium and
# chromium-driver: the browser test of `wdstool show`; libavdevice59: FFmpeg 5.1's shared
# libraries, which TorchCodec loads at its first decode (PyAV's wheels carry their own).
# SYSTEM_PACKAGES= (empty) installs nothing.
SYSTEM_PACKAGES ?= chromium chromium-driver libavdevice59
system:
	@missing=""; for p in $(SYSTEM_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'ok installed' || missing="$$missing $$p"; \
	done; \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "installing system packages:$$missing"; \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; } \
	    || echo "note: apt-get could not install$$missing; the tests that need them are skipped, naming them"; \
	else echo "note: not installed:$$missing (apt-get install$$missing as root); the tests that need them are skipped, naming them"; fi

# The suite on TEST_WORKERS processes (pytest-xdist), a test file at a time in each: a good part
# of its serial time is spent waiting on subprocesses, servers and retries, so 3 processes on 2
# cores finish sooner than 2. Tests that look at every process on the machine (Ray's) share one
# file. TEST_WORKERS=0 runs it in one process; the 30 slowest tests are listed at the end.
# `make test` leaves out the tests marked `full` (pyproject.toml): the long system tests (Ray
# clusters with nodes and workers killed, kill -9 at random moments, the Lightning, torchtnt and
# Accelerate jobs, a sigkilled torchrun job resumed, a two-node torchrun job over S3, the
# 2-rank and timm-flag DDP jobs and the 3-rank exact top-1 beside their harder cases, S3 faults
# on every other connection, reshard/split/append, a listing's pack and a killed pack on S3 (the
# same on disk stays), the guides' pages run in an empty folder (the README's and the index's
# stay), the stream-bench sweep, the Ray token check and index-after-a-kill, the text-only SFT,
# packed VLM resume, real-tokenizer CLIP, spawned-worker and 3-rank DDP jobs): half of the
# suite's time, so that `make test` stays within 10 minutes on 2 cores; `make test-full` runs
# just them (CI runs both).
TEST_WORKERS ?= 3
PYTEST := $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --durations=30
# The venv (pip, CPU) and the system libraries (apt, mostly the network) are set up side by side
# on a first run: a minute less of waiting than one after the other.
test:
	@$(MAKE) --no-print-directory -j2 $(STAMP) system
	$(PYTEST) -m "not full"

test-full:
	@$(MAKE) --no-print-directory -j2 $(STAMP) system
	$(PYTEST) -m full

# One room of the suite, a folder under tests/ named after the part of the library it tests
# (ROOM=loaders/plan, loaders/recipe, format, ...: docs/guides/development.md lists them), in one
# process: seconds for most, where `make test` takes minutes.
ROOM ?=
test-room: $(STAMP)
	@test -n "$(ROOM)" || { echo "make test-room ROOM=<folder under tests/>, e.g. ROOM=loaders/plan"; exit 2; }
	$(PY) -m pytest -q tests/$(ROOM)

# The documentation site (mkdocs.yml, docs/) into build/site/: --strict makes any warning fatal,
# so a broken link or anchor, a page missing from the nav or an API reference that does not
# resolve fails (CI runs it). NO_MKDOCS_2_WARNING: Material's banner about MkDocs 2.0.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir build/site

# 10,000 sample images, generated and packed once (bench/data/ is git-ignored), then one full
# epoch per run: the loader against ImageFolder+PIL and upstream webdataset, interleaved and
# repeated, plus the decode+augment ceiling; then worker processes against decode threads
# (worker_mode="thread") at 1, 2 and 4 workers with the process tree's peak PSS; then
# bench-split (few shards over S3 and HTTP against disk); results land in bench/results/.
bench: $(STAMP)
	test -d $(BENCH_DATA)/images || $(PY) -m wdstool sample-data $(BENCH_DATA)/images --images $(BENCH_IMAGES) --classes 100 --seed 0
	test -f $(BENCH_DATA)/shards/index.json || $(PY) -m wdstool pack $(BENCH_DATA)/images $(BENCH_DATA)/shards --max-count 1000
	mkdir -p bench/results
	$(PY) -m wdstool stream-bench $(BENCH_DATA)/shards --workers $(BENCH_WORKERS) --batch-size 64 \
		--repeats $(BENCH_REPEATS) --compare imagefolder=$(BENCH_DATA)/images --compare webdataset \
		--compare webdataset-fast \
		--ceiling --json bench/results/stream-bench.json --plot bench/results/stream-bench.png \
		| tee bench/results/stream-bench.txt
	$(PY) -m wdstool stream-bench $(BENCH_DATA)/shards --workers 1,2,4 --batch-size 64 \
		--repeats $(BENCH_REPEATS) --compare threads --memory \
		--json bench/results/stream-bench-threads.json | tee bench/results/stream-bench-threads.txt
	$(MAKE) --no-print-directory bench-split

# A small data set (2,000 images) of 1 and of 8 shards, read from disk, moto's S3 (with and
# without the sample offsets pack records) and a loopback web server, by 2 and 4 workers: first
# batch, epoch, requests (bench/split_bench.py); results in bench/results/split-bench.md
SPLIT_ROUNDS ?= 5
bench-split: $(STAMP)
	mkdir -p bench/results
	$(PY) bench/split_bench.py $(BENCH_DATA) --rounds $(SPLIT_ROUNDS) --out bench/results/split-bench

# the loader with captions tokenized in the workers (fields_fn) against image + label only,
# interleaved in one run: the same 10,000 images packed from a caption listing
bench-fields: $(STAMP)
	test -d $(BENCH_DATA)/images || $(PY) -m wdstool sample-data $(BENCH_DATA)/images --images $(BENCH_IMAGES) --classes 100 --seed 0
	test -f $(BENCH_DATA)/captions.jsonl || $(PY) bench/caption_listing.py $(BENCH_DATA)/images $(BENCH_DATA)/captions.jsonl
	test -f $(BENCH_DATA)/caption-shards/index.json || $(PY) -m wdstool pack $(BENCH_DATA)/captions.jsonl $(BENCH_DATA)/caption-shards --max-count 1000
	mkdir -p bench/results
	$(PY) -m wdstool stream-bench $(BENCH_DATA)/caption-shards --workers 2 --batch-size 64 \
		--repeats $(BENCH_REPEATS) --field caption=txt --tokenize caption --compare plain \
		--json bench/results/stream-bench-fields.json | tee bench/results/stream-bench-fields.txt

# reshard against `cp` of the same bytes on the same disk (page cache warm, and durable: both
# fsync'd), 1 and 2 workers, interleaved and repeated; then reshard's peak memory (PSS of its
# process tree) on 2 and on all 10 shards of the standard set (bench/reshard_bench.py)
bench-reshard: $(STAMP)
	test -d $(BENCH_DATA)/images || $(PY) -m wdstool sample-data $(BENCH_DATA)/images --images $(BENCH_IMAGES) --classes 100 --seed 0
	test -f $(BENCH_DATA)/shards/index.json || $(PY) -m wdstool pack $(BENCH_DATA)/images $(BENCH_DATA)/shards --max-count 1000
	mkdir -p bench/results
	$(PY) bench/reshard_bench.py $(BENCH_DATA)/shards --repeats $(BENCH_REPEATS) --workers 1,2 \
		--memory-shards 2,10 --floor --json bench/results/reshard-bench.json | tee bench/results/reshard-bench.txt

# The peer table: the same epoch through DALI (CPU), SPDL, litdata, MosaicML streaming, FFCV,
# upstream webdataset and ImageFolder, interleaved with wdstool's loader (bench/peers/run.py).
# The peers live in their own venv (.venv-peers, never touched by `make test`), with torch pinned
# as above; SPDL also needs FFmpeg's shared libraries, and FFCV (built from its sdist) OpenCV's
# and libjpeg-turbo's headers and pkg-config (each installed with apt-get when run as root, else
# its row is a skip). Their formats are converted once into $(PEERS_DATA)/peers/.
# Another data folder (images/ + shards/): make bench-peers PEERS_DATA=bench/data-large
# PEERS_OUT=bench/results/peers-large. `make bench-peers-recipe`: the same with the full training
# recipe (RRC bicubic + flip + TrivialAugmentWide + RandomErasing 0.25; DALI with its closest ops,
# FFCV a skip: its ops have neither), results in $(PEERS_RECIPE_OUT).
PEERS_VENV := .venv-peers
PEERS_PY := $(PEERS_VENV)/bin/python
PEERS_STAMP := $(PEERS_VENV)/.installed
PEERS_DATA ?= $(BENCH_DATA)
PEERS_OUT ?= bench/results/peers
PEERS_ROUNDS ?= 3
PEERS_FLAGS ?=
PEERS_RECIPE_OUT ?= bench/results/peers-recipe

$(PEERS_STAMP): pyproject.toml setup.py wdstool/format/_jpegcrop.c wdstool/format/_jpegtran.c wdstool/format/_jpegguard.h wdstool/format/_mapread.c loaders/recipe/_pilresample.c loaders/kinds/_planar.c bench/peers/requirements.txt
	test -x $(PEERS_PY) || $(PYTHON) -m venv $(PEERS_VENV)
	$(PEERS_PY) -m pip install --quiet --upgrade pip
	@pkg-config --exists opencv4 libturbojpeg 2>/dev/null || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get update -qq && apt-get install -y -qq --no-install-recommends pkg-config libopencv-dev libturbojpeg0-dev; \
	  else echo "note: FFCV builds against OpenCV and libjpeg-turbo (apt-get install pkg-config libopencv-dev libturbojpeg0-dev); its row will be a skip"; fi; }
	if pkg-config --exists opencv4 libturbojpeg 2>/dev/null; then req=bench/peers/requirements.txt; \
	else req=$(PEERS_VENV)/requirements-noffcv.txt; grep -v '^ffcv' bench/peers/requirements.txt > $$req; fi; \
	$(PEERS_PY) -m pip install --quiet $(TORCH_PINS) -e . -r $$req
	touch $(PEERS_STAMP)

bench-peers: $(STAMP) $(PEERS_STAMP)
	@if [ "$(PEERS_DATA)" = "$(BENCH_DATA)" ]; then \
	  test -d $(BENCH_DATA)/images || $(PY) -m wdstool sample-data $(BENCH_DATA)/images --images $(BENCH_IMAGES) --classes 100 --seed 0; \
	  test -f $(BENCH_DATA)/shards/index.json || $(PY) -m wdstool pack $(BENCH_DATA)/images $(BENCH_DATA)/shards --max-count 1000; \
	fi
	@ldconfig -p | grep -q 'libavfilter\.so\.' || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get update -qq && apt-get install -y -qq --no-install-recommends ffmpeg; \
	  else echo "note: SPDL needs FFmpeg's shared libraries (apt-get install ffmpeg); its row will be a skip"; fi; }
	mkdir -p $(dir $(PEERS_OUT))
	$(PEERS_PY) bench/peers/run.py $(PEERS_DATA) --rounds $(PEERS_ROUNDS) $(PEERS_FLAGS) --out $(PEERS_OUT)

bench-peers-recipe:
	$(MAKE) bench-peers PEERS_FLAGS="--recipe full" PEERS_OUT=$(PEERS_RECIPE_OUT)

# Large images (issue 20): 2,000 JPEGs of about 1600x1200 (~1.1 MB each), generated and packed
# once under bench/data-large/ (git-ignored); the loader with the scaled decode on against the
# same loader with it off (--compare exact), interleaved and repeated, for the train path and
# the eval path (resize + centre crop). Results in bench/results/stream-bench-large*.
BENCH_LARGE ?= bench/data-large
BENCH_LARGE_IMAGES ?= 2000
BENCH_LARGE_SIZE ?= 1600x1200
BENCH_LARGE_WORKERS ?= 2
bench-large: $(STAMP)
	test -d $(BENCH_LARGE)/images || $(PY) -m wdstool sample-data $(BENCH_LARGE)/images --images $(BENCH_LARGE_IMAGES) --classes 10 --seed 0 --size $(BENCH_LARGE_SIZE)
	test -f $(BENCH_LARGE)/shards/index.json || $(PY) -m wdstool pack $(BENCH_LARGE)/images $(BENCH_LARGE)/shards --max-count 250
	mkdir -p bench/results
	$(PY) -m wdstool stream-bench $(BENCH_LARGE)/shards --workers $(BENCH_LARGE_WORKERS) --batch-size 64 \
		--repeats $(BENCH_REPEATS) --compare exact --json bench/results/stream-bench-large.json \
		| tee bench/results/stream-bench-large.txt
	$(PY) -m wdstool stream-bench $(BENCH_LARGE)/shards --workers $(BENCH_LARGE_WORKERS) --batch-size 64 \
		--repeats $(BENCH_REPEATS) --compare exact --eval --json bench/results/stream-bench-large-eval.json \
		| tee bench/results/stream-bench-large-eval.txt
	$(PY) bench/decode_quality.py $(BENCH_LARGE)/images --images 300 | tee bench/results/decode-quality-large.txt

# Restart markers (issue 38): 1,000 photos of 1.5-5.2 MP (three sizes, landscape and portrait,
# ~1.8 MB each) generated once under bench/data-photos/ (git-ignored), packed plain and with
# --restart-markers (shards-rm/); the transcode and the region decode one image at a time, then
# the loader on marked shards against the whole decode and against itself on plain shards.
# The peers on the same photos: make bench-peers PEERS_DATA=bench/data-photos
# PEERS_FLAGS="--wdstool-shards shards-rm" PEERS_OUT=bench/results/peers-photos
BENCH_PHOTOS ?= bench/data-photos
# Video clips (issue 37): 200 sample videos of 10-60 s (640x360, 30 fps, GOP 2 s, x264 with
# B-frames), packed once (bench/data-video/ is git-ignored), then one epoch of 16-frame clips
# (stride 2) per run: wdstool against upstream webdataset decoding whole videos, the careful
# per-sample seek (PyAV, TorchCodec) and decord (from .venv-peers, when built), 3 rounds
# interleaved; then 3 epochs of wdstool for bytes read and peak memory.
BENCH_VIDEO ?= bench/data-video
bench-video: $(STAMP)
	$(PY) bench/video_bench.py generate $(BENCH_VIDEO) --videos 200
	mkdir -p bench/results
	PYTHONPATH=. $(PY) bench/video_bench.py $(BENCH_VIDEO) --rounds 3 --out bench/results/video
	PYTHONPATH=. $(PY) bench/video_bench.py memory $(BENCH_VIDEO)

bench-restart: $(STAMP)
	test -d $(BENCH_PHOTOS)/images || { \
	  $(PY) -m wdstool sample-data $(BENCH_PHOTOS)/parts/a --images 350 --size 1600x1200 --seed 1 -q && \
	  $(PY) -m wdstool sample-data $(BENCH_PHOTOS)/parts/b --images 350 --size 2400x1800 --seed 2 -q && \
	  $(PY) -m wdstool sample-data $(BENCH_PHOTOS)/parts/c --images 300 --size 1400x2500 --seed 3 -q && \
	  for part in a b c; do for d in $(BENCH_PHOTOS)/parts/$$part/*/; do c=$$(basename $$d); \
	    mkdir -p $(BENCH_PHOTOS)/images/$$c; for f in $$d*.jpg; do mv $$f $(BENCH_PHOTOS)/images/$$c/$${part}_$$(basename $$f); done; \
	  done; done && rm -rf $(BENCH_PHOTOS)/parts; }
	test -f $(BENCH_PHOTOS)/shards/index.json || $(PY) -m wdstool pack $(BENCH_PHOTOS)/images $(BENCH_PHOTOS)/shards --max-count 125
	test -f $(BENCH_PHOTOS)/shards-rm/index.json || $(PY) -m wdstool pack $(BENCH_PHOTOS)/images $(BENCH_PHOTOS)/shards-rm --max-count 125 --restart-markers
	mkdir -p bench/results
	$(PY) bench/restart_bench.py $(BENCH_PHOTOS)/images --images 200 --crops 2 --targets 64,32,128 --out bench/results/restart-decode
	$(PY) bench/recipe_bench.py $(BENCH_PHOTOS) --set restart --rounds 3 --out bench/results/recipe-restart

# Planning at internet scale (bench/scale_bench.py): one rank's make_loader + len in a fresh
# process from manifests of 10^8 and 10^9 samples (written once under bench/data/scale/, ~165 MB;
# no shard exists), 4,096 and 16,384 ranks x 8 workers, and an elastic resume 16,384 -> 12,288,
# the manifest on local disk and behind a loopback S3 server; a few minutes.
bench-scale: $(STAMP)
	mkdir -p bench/results
	$(PY) bench/scale_bench.py --out bench/results/scale.md

# Parquet read in place (bench/parquet_bench.py): a Hub-layout split written by `datasets` from
# 4,000 of the bench JPEGs (bench/data/parquet/), streamed by wdstool, HF datasets streaming and
# litdata's ParquetLoader (.venv-peers), and the same rows as tars; on disk and loopback HTTP,
# interleaved rounds. PARQUET_ROWS, PARQUET_ROUNDS set the size.
PARQUET_ROWS ?= 4000
PARQUET_ROUNDS ?= 3
bench-parquet: $(STAMP) $(PEERS_STAMP)
	test -d $(BENCH_DATA)/images || $(PY) -m wdstool sample-data $(BENCH_DATA)/images --images $(BENCH_IMAGES) --classes 100 --seed 0
	mkdir -p bench/results
	$(PY) bench/parquet_bench.py $(BENCH_DATA) --rows $(PARQUET_ROWS) --rounds $(PARQUET_ROUNDS) \
		--litdata-python $(PEERS_PY) --out bench/results/parquet.md

# Packing samples of images and text into sequences of 4,096 tokens (bench/packing_bench.py):
# first-fit against best-fit at windows of 4 to unbounded open sequences, on a modelled LLaVA-like
# mix of 100,000 samples (3 seeds); pure CPU, no data set, about a minute on 2 shared cores.
bench-packing: $(STAMP)
	mkdir -p bench/results
	$(PY) bench/packing_bench.py --out bench/results/packing.md

# Packed vision-language loading (bench/vlm_packing_bench.py grid): wdstool's loader against
# Megatron-Energon's TaskEncoder packing (run from .venv-peers, where bench/peers/requirements.txt
# installs it) at 400, 800, 2,000 and 8,000 samples a rank x 2 and 4 workers (each data set
# generated once under $(BENCH_DATA)/vlm-N), the same image rule, tokenizer and best-fit packing;
# $(VLM_ROUNDS) rounds interleaved after a warm one. About an hour on 2 cores.
VLM_ROUNDS ?= 3
VLM_FLAGS ?=
bench-vlm: $(STAMP) $(PEERS_STAMP)
	mkdir -p bench/results
	$(PY) bench/vlm_packing_bench.py grid --data $(BENCH_DATA) --pipelines wdstool,energon \
		--rounds $(VLM_ROUNDS) --energon-python $(PEERS_PY) $(VLM_FLAGS) \
		--out bench/results/vlm-packing.md

# Fine-tuning batches (bench/vlm_sft_bench.py): 1,000 LLaVA-Instruct-like conversations through
# the loader's chat template and assistant-only mask against HF datasets + apply_chat_template +
# a masking collate (bench/results/vlm-sft.md), and Qwen2-VL's model inputs against its
# processor in DataLoader workers, fast and slow (bench/results/vlm-model-inputs.md)
bench-sft: $(STAMP)
	mkdir -p bench/results
	$(PY) bench/vlm_sft_bench.py sft --rounds $(VLM_ROUNDS) --out bench/results/vlm-sft.md
	$(PY) bench/vlm_sft_bench.py model-inputs --rounds $(VLM_ROUNDS) --out bench/results/vlm-model-inputs.md

# the fault suite's long, randomized variant (each randomized case FAULT_RUNS times its
# `make test` count); prints the table and writes build/faults.md
FAULT_RUNS ?= 5
faults: $(STAMP)
	WDSTOOL_FAULT_RUNS=$(FAULT_RUNS) WDSTOOL_FAULT_TABLE=build/faults.md $(PY) -m pytest -q tests/faults

# mutation testing (mutmut) of the modules that carry the README's promises, each in a scratch
# copy under build/mutants/ against its own fast tests (tests/support/mutation.py lists them); hours on
# 2 cores, so not part of `make test`: run it before closing an issue that touches one of them.
# MUTANTS="retry tar_read" for some; kill rates in build/mutants/summary.md, the surviving
# mutants of each in build/mutants/<target>/survivors.txt (tests/EQUIVALENT_MUTANTS.md: why
# the ones left are equivalent)
MUTANTS ?=
MUTANT_CHILDREN ?= 2
mutants: $(STAMP)
	$(PY) tests/support/mutation.py --children $(MUTANT_CHILDREN) $(MUTANTS)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports

format: $(STAMP)
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

clean:
	rm -rf build .pytest_cache
