# SPACE: `make run` sets everything up and starts spaced; `make test` sets up and runs every test.
BUILD    ?= build
DATA_DIR ?= $(CURDIR)/.space-data
LISTEN   ?= 127.0.0.1:7070
JOBS     ?= $(shell nproc)

.PHONY: all deps configure build run test bench clean

all: build

deps:
	@bash scripts/install-deps.sh

configure: deps
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

# The python template is built from Debian on the first run (several minutes, its progress in
# the log; later runs and other data dirs take it from /var/cache/space/templates).
run: build
	$(BUILD)/bin/spaced --listen $(LISTEN) --data-dir $(DATA_DIR) --warm-pool base=2 \
	  --prepare-template python --default-template python

test: build
	cd $(BUILD) && ctest --output-on-failure -j 2 --timeout 900

bench: build
	bash bench/run.sh

clean:
	rm -rf $(BUILD)
