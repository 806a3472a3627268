# The two commands of the README:  `make train`  and  `make test`.
# Everything builds into build/ (Release), the CLI at build/bin/tower.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
TRAIN_ARGS ?=

.PHONY: all deps build train test compat bench debug asan tsan clean

all: build

deps:
	@scripts/install-deps

$(BUILD)/build.ninja:
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

build: $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS)

train: deps
	$(MAKE) build
	$(BUILD)/bin/tower train $(TRAIN_ARGS)

test: deps
	$(MAKE) build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 900

# tower against torchvision (installs torch and torchvision into a venv: too large for `test`).
compat: deps
	$(MAKE) build
	BUILD=$(BUILD) scripts/compat

bench: deps
	$(MAKE) build
	scripts/bench-all

# Sanitizer and debug builds, each in its own folder, running the tests. Under tsan only the
# threaded code's tests run (thread pool, reducers, towers, input pipeline): the rest is
# single-threaded, and full models under tsan take far too long.
TSAN_TESTS ?= SchedulerTest|DataParallelOptimizer|ContendedModeRepeatsItsBits|ImageFolderTest|ThreadPool|TraceRecorder|GradientReducer|TowersEquivalenceTest.*mlp|DataParallelTest.(Batch|Missing|Staged|MicroBatches|TowerGroup)|TreeReducer|RanksTest|CommunicatorTest|Pipeline|Worker
debug asan tsan: deps
	cmake --preset $@
	cmake --build --preset $@ -j $(JOBS)
	cd build-$@ && $(if $(filter tsan,$@),TSAN_OPTIONS=suppressions=$(CURDIR)/scripts/tsan.supp) ctest --output-on-failure -j $(JOBS) --timeout 1800 -E data_fuzz \
	  $(if $(filter tsan,$@),-R '$(TSAN_TESTS)') $(CTEST_ARGS)

clean:
	rm -rf $(BUILD) build-debug build-asan build-tsan
