# The two commands of the README, and the build steps they share.
#   make quickstart   install what is missing, build, run the quickstart
#                     (ARGS="key=value ..." overrides its config)
#   make test         install what is missing, build, run every test
BUILD ?= build
JOBS ?= 2
CMAKE_FLAGS ?=

.PHONY: all setup configure build test quickstart k8s-test gpu-rehearsal asan format clean

all: build

setup:
	@scripts/setup.sh

configure: setup
	@test -f $(BUILD)/build.ninja || cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

test: build
	@cd $(BUILD) && ctest --output-on-failure --timeout 1500 -j $(JOBS)

quickstart: build
	@BUILD=$(BUILD) scripts/quickstart.sh $(ARGS)

# The chart on a real one-node Kubernetes built from Debian's packages (docs/deploy.md, "A
# real cluster on one machine"); not part of `make test`. Needs root; the first run builds
# Kubernetes (about 10 minutes on 2 cores).
k8s-test: build
	@BUILD=$(BUILD) scripts/k8s/k8s-test.sh

# tests/gpu/run.sh rehearsed here before device time is spent on it: in a Debian 13 root with
# GCC 14 and LibTorch 2.6 and none of the build's other dependencies but the carried ones, the
# project built as the GPU machine would build it, its unit and integration tests, and the
# quickstart (tests/gpu/rehearse.sh). Needs root; not part of `make test` (about 20 minutes the
# first time, 3 on an unchanged tree).
gpu-rehearsal:
	@tests/gpu/rehearse.sh

# Address + undefined-behaviour sanitizer build of the unit tests (label "unit").
asan: setup
	@test -f build-asan/build.ninja || cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DRLMESH_SANITIZE=ON
	@cmake --build build-asan -j $(JOBS)
	@cd build-asan && ctest --output-on-failure -L unit -j $(JOBS)

format:
	@git ls-files '*.h' '*.cc' | xargs clang-format -i

clean:
	rm -rf $(BUILD) build-asan
