# The two commands of the README:  `make train`  and  `make test`.
# Everything builds into build/ (Release), the CLI at build/bin/tower.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
TRAIN_ARGS ?=

.PHONY: all deps build train test bench debug asan tsan clean

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

bench: deps
	$(MAKE) build
	scripts/bench-all

# Sanitizer and debug builds, each in its own folder, running the unit tests.
debug asan tsan: deps
	cmake --preset $@
	cmake --build --preset $@ -j $(JOBS)
	cd build-$@ && ctest --output-on-failure -j $(JOBS) --timeout 1800 $(CTEST_ARGS)

clean:
	rm -rf $(BUILD) build-debug build-asan build-tsan
