# Ferry's front end. The README's two commands: `make run` and `make test`.
SHELL := /bin/bash
PY := $(CURDIR)/.venv/bin/python
JOBS ?= $(shell nproc)
PYBIND11_DIR = $(shell $(PY) -m pybind11 --cmakedir)

.PHONY: all setup build build-asan run lint test test-cpp test-asan test-python test-install test-wheel test-deb package bench format clean

all: build

setup:
	@scripts/setup

build: setup
	@cmake --preset release -Dpybind11_DIR=$(PYBIND11_DIR) >/dev/null
	@cmake --build --preset release -j $(JOBS)

build-asan: setup
	@cmake --preset asan >/dev/null
	@cmake --build --preset asan -j $(JOBS)

# The main job: a C++ producer hands a record batch to pyarrow and polars in
# one process and prints it with the telemetry that shows no byte was copied;
# then a Python -> C++ -> Python dataflow runs under `ferry run` and prints its
# per-edge summary (messages, bytes, bytes copied, drops); then a fleet control
# plane (SQLite store) with two agents declaring 4 GPUs each runs three jobs,
# one of them a gang across both nodes (scripts/fleet-demo).
run: build
	@PYTHONPATH=$(CURDIR)/python $(PY) examples/exchange_demo.py
	@echo
	@cd examples/python-cpp-python && FERRY_PYTHON=$(PY) $(CURDIR)/build/release/bin/ferry run \
	  --log-dir $(CURDIR)/build/logs dataflow.yml
	@cat examples/python-cpp-python/summary-legend.txt
	@echo
	@scripts/fleet-demo

test: test-cpp lint test-asan test-python test-install test-wheel test-deb

test-cpp: build
	@ctest --preset release -j $(JOBS)

test-asan: build-asan
	@ctest --preset asan -j $(JOBS)

test-python: build
	@PYTHONPATH=$(CURDIR)/python $(PY) -m pytest -q tests/python

# cmake --install into a fresh prefix, used from outside the checkout: a
# find_package(Ferry) project, pkg-config, the installed `ferry run` and server.
test-install: build
	@tests/install/run build/release

# The wheel (pip wheel ., build tree build/wheel) in a fresh virtual environment.
test-wheel: setup
	@tests/install/wheel

# The Debian package: its control data and files, the units verified and
# their ExecStart lines run from the unpacked package (a server, an agent, a job).
test-deb: build
	@tests/install/deb build/release

# The Debian package (CPack) with systemd units: build/release/package/ferry_*.deb.
package: build
	@cd build/release && cpack -G DEB -B package >/dev/null && ls package/ferry_*.deb

bench: build
	@scripts/bench

# clang-format check over every C/C++ file and clang-tidy over src/'s non-test
# sources (.clang-tidy), results cached per translation unit; part of `make test`.
lint: build
	@scripts/lint

format:
	@scripts/lint --fix-format

clean:
	@rm -rf build python/ferry/_ferry*.so
