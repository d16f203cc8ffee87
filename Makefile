# Thin wrapper around CMake and the test runners (docs/design.md §2.5).
#   make demo   deps + build + `strata demo`
#   make test   deps + build + every test
#   make check  fast loop: build the sanitized tree, unit tests + simulator + tree rules
#   make check-tree  only the tree rules (tests/tools/check_tree.py), no build
BUILD     ?= build
SAN_BUILD ?= build-san
JOBS      ?= $(shell nproc)
PYTEST    ?= /usr/bin/python3 -m pytest
FUZZ_SECONDS ?= 15
# make test fuzzes each target this long (make fuzz: FUZZ_SECONDS).
TEST_FUZZ_SECONDS ?= 5
SIM_SEEDS ?= 2000

.PHONY: all deps postgres build build-san test check check-tree format format-check unit sim fuzz integration demo clean

all: build

deps:
	@bash cli/install-deps.sh

# The patched PostgreSQL 15, cached under ~/.cache/strata (as root: /var/cache/strata).
postgres:
	@bash compute/postgres/build.sh --check-make
	@bash compute/postgres/build.sh >/dev/null

build: postgres
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo \
		-DSTRATA_PG_PREFIX="$$(bash compute/postgres/build.sh --prefix-only)" >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

build-san:
	@CC=clang cmake -S . -B $(SAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DSTRATA_SANITIZE=ON \
		-DSTRATA_FUZZ=ON -DSTRATA_EXTENSION=OFF -DSTRATA_FUZZ_SECONDS=$(FUZZ_SECONDS) >/dev/null
	@cmake --build $(SAN_BUILD) -j $(JOBS)

unit: build-san
	cd $(SAN_BUILD) && ctest -j $(JOBS) --output-on-failure -L unit

sim: build-san
	cd $(SAN_BUILD) && STRATA_SIM_SEEDS=$(SIM_SEEDS) ctest -j $(JOBS) --output-on-failure -L sim

fuzz: build-san
	cd $(SAN_BUILD) && STRATA_FUZZ_SECONDS=$(FUZZ_SECONDS) ctest -j $(JOBS) --output-on-failure -L fuzz

integration: build build-san
	STRATA_BUILD=$(CURDIR)/$(BUILD) STRATA_SAN_BUILD=$(CURDIR)/$(SAN_BUILD) \
		$(PYTEST) -q -ra tests/integration $(S3_DESELECT)

# Every C file but PostgreSQL's own is in .clang-format's style: `make format`
# rewrites them, `make format-check` (part of check and test) fails naming the
# files that differ.
FORMAT_FILES = git ls-files '*.c' '*.h' | grep -v '^compute/postgres/'
CLANG_FORMAT ?= clang-format

format:
	$(FORMAT_FILES) | xargs $(CLANG_FORMAT) -i

format-check:
	@command -v $(CLANG_FORMAT) >/dev/null || { echo "format-check: $(CLANG_FORMAT) not found (make deps installs it)"; exit 1; }
	@$(FORMAT_FILES) | xargs $(CLANG_FORMAT) --dry-run --Werror 2>&1 | grep -o '^[^:]*\.[ch]' | sort -u > .format-diff || true
	@if [ -s .format-diff ]; then echo "format-check: not in .clang-format style (run make format):"; cat .format-diff; rm -f .format-diff; exit 1; fi; rm -f .format-diff; echo "format-check: $$($(FORMAT_FILES) | wc -l) files in style"

# The tree's rules (no .c file over 1,300 lines, no function over 100 lines, a
# README.md table naming each file of a product folder: docs/source-tree.md)
# run in check and test as the ctest test tree.check_tree (label fast);
# check-tree runs them alone, without a build.
check: format-check build-san
	cd $(SAN_BUILD) && STRATA_SIM_SEEDS=200 ctest -j $(JOBS) --output-on-failure -L fast

check-tree:
	@/usr/bin/python3 tests/tools/check_tree.py --root $(CURDIR)

# The real HammerDB run needs the kit a user names with HAMMERDB_KIT (a tool,
# never part of the project): without it make test runs the HammerDB driver's
# own tests and leaves out the one real run, which fails naming the variable
# when run by hand without it (bench/README.md).
HAMMERDB_DESELECT = $(if $(HAMMERDB_KIT),,--deselect bench/test_tprocc_hammerdb.py::test_quick_hammerdb_run_on_strata)

# Likewise the S3 test of the remote storage runs a real radosgw from the start
# script a user names with STRATA_S3_SCRIPT (docs/operations.md); without it
# the test is left out here and fails naming the variable when run by hand.
S3_DESELECT = $(if $(STRATA_S3_SCRIPT),,--deselect tests/integration/test_remote_storage.py::test_remote_s3_radosgw \
	--deselect tests/integration/test_cli_remote_up.py::test_up_remote_s3_radosgw \
	--deselect tests/integration/test_pageserver_restore.py::test_lost_pageserver_volume_restored_from_radosgw)

# PYTEST_WORKERS=N runs the integration tests N at a time (pytest-xdist; each
# test starts its own processes on free ports in its own directories).  Three
# by default, on a 2-core machine: a test waits on its processes more than it
# computes.  Measured here: test_cluster + test_walproposer (21 tests) took
# 111 s one at a time and 89 s two at a time with sanitized daemons, 73 s and
# 48 s with release ones; the whole pytest run took 1,792 s with two workers
# and 1,629 s with three (clean clones, warm cache, one run each).
# PYTEST_WORKERS=0 runs them one at a time.
# The long benchmark tests come first, so that no long test starts last
# while the other workers have nothing left to do.
# --durations names the slowest tests of every run.
PYTEST_WORKERS ?= 3
PYTEST_PAR = $(if $(filter 0,$(PYTEST_WORKERS)),,-n $(PYTEST_WORKERS)) --durations=15

test: deps format-check build build-san
	cd $(SAN_BUILD) && STRATA_SIM_SEEDS=$(SIM_SEEDS) STRATA_FUZZ_SECONDS=$(TEST_FUZZ_SECONDS) \
		ctest -j $(JOBS) --output-on-failure
	STRATA_BUILD=$(CURDIR)/$(BUILD) STRATA_SAN_BUILD=$(CURDIR)/$(SAN_BUILD) \
		$(PYTEST) -q -ra $(PYTEST_PAR) bench/test_constrained.py bench/test_tprocc.py \
		bench/test_stateless_tpcb.py bench/test_remote_recovery.py bench/test_replica_lag.py \
		bench/test_branch_create.py bench/test_tprocc_hammerdb.py bench/test_image_sweep.py \
		bench/test_pageserver_bench.py bench/test_proc_groups.py bench/test_bench.py \
		bench/test_netdisk.py \
		tests/integration $(HAMMERDB_DESELECT) $(S3_DESELECT)

demo: deps build
	$(BUILD)/bin/strata demo

clean:
	rm -rf $(BUILD) $(SAN_BUILD)

# Docker Compose stack (docker/), built and run for real with podman: config, build, up,
# pgbench from the bench service, kill one safekeeper, commits go on, down -v.
.PHONY: compose-test
compose-test:
	bash tests/compose/run.sh
