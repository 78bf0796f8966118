# Entry points: `make scenario NAME=allreduce-torus [SET="workload.bytes_per_rank=4MiB"]`, `make test`.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
NAME ?= allreduce-torus
SET ?=
SET_ARGS := $(foreach s,$(SET),--set $(s))

.PHONY: setup host venv bpf nic scenario check calibrate analyze baseline spread regress sabotage bench test test-unit clean-state list docs

# venv and bpf need what host installs (python3-venv, clang), also under make -j.
setup: host venv bpf nic

# Each compiled file carries its source's SHA-256, which its loader checks (testbed/built.py).
SOURCE_HASH = -DSOURCE_SHA256='"'$$(sha256sum $< | cut -d' ' -f1)'"'

# The per-packet port program (ECN marking, buffer accounting): clang's BPF target; the
# multiarch include dir holds the kernel UAPI headers' asm/ for this machine.
BPF_OBJ := build/port_qos.bpf.o
bpf: $(BPF_OBJ)
$(BPF_OBJ): testbed/fabric/bpf/port_qos.bpf.c | host
	@mkdir -p build
	clang -O2 -g -Wall -target bpf -I/usr/include/$$(gcc -print-multiarch) $(SOURCE_HASH) -c $< -o $@

# The NIC data plane (testbed/traffic/nic/nicdp.c), loaded by the engine and the unit tests with ctypes.
NIC_LIB := build/libnicdp.so
nic: $(NIC_LIB)
$(NIC_LIB): testbed/traffic/nic/nicdp.c | host
	@mkdir -p build
	gcc -O2 -g -Wall -Wextra -Wno-unused-parameter -shared -fPIC $(SOURCE_HASH) -o $@ $< -lz

host:
	@bash tools/setup-host.sh

# Mininet's module exists only for Debian's /usr/bin/python3, so the venv is built from it.
venv: $(VENV)/.installed
$(VENV)/.installed: pyproject.toml | host
	@test -x /usr/bin/python3 || { echo "need /usr/bin/python3 (Debian python3)"; exit 1; }
	/usr/bin/python3 -m venv --system-site-packages $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -e '.[test]'
	@touch $@

scenario: setup
	$(PY) -m testbed run $(NAME) $(SET_ARGS)

# Re-analyse a scenario's latest run (or RUN=<run folder>) from its raw files.
analyze: venv
	$(PY) -m testbed analyze $(if $(RUN),$(RUN),$(NAME))

# Store a new run of NAME (or RUN=<run folder>) as its baseline in baselines/.
baseline: setup
	$(PY) -m testbed baseline $(NAME) $(if $(RUN),--run $(RUN))

# NAME's run-to-run spread over its stored runs (results/NAME, or RUNS="dir ...") and its spread
# ledger, as the [[tolerance]] tables its scenario file records; RECORD=1 adds the runs to the ledger.
spread: venv
	$(PY) -m testbed spread $(NAME) $(RUNS) $(if $(RECORD),--record)

# Run the regression suite (every shipped scenario but those whose file says why not; or
# NAMES="a b"), one verdict table.
regress: setup
	$(PY) -m testbed regress $(NAMES) $(SET_ARGS)

# Break one policy at a time (testbed/regress/sabotage.py; or SABOTAGE="ecn-off,pfc-off"): the
# suite must call each regressed.
sabotage: setup
	$(PY) -m testbed regress --sabotage $(SABOTAGE)

# The benchmark suite (bench/README.md): ARGS="--only agent,bringup" or "--quick".
bench: setup
	$(PY) -m bench $(ARGS)

# Validate NAME and show what a run would build and do (fabric, traffic, bound, port policy,
# this machine's mechanisms); no root, starts nothing.
check: venv
	@$(PY) -m testbed check $(NAME) $(SET_ARGS)

# Measure the emulated rate this machine carries NAME's fabric at faithfully (run.dilation = "auto"
# divides by it; a run measures it when it is missing or stale).
calibrate: setup
	$(PY) -m testbed calibrate $(NAME) $(SET_ARGS)

list: venv
	@$(PY) -m testbed list

# docs/scenario-reference.md from the field declarations in testbed/scenario.py
docs: venv
	$(PY) -m testbed reference --write

# the slowest tests listed at the end: where CI's time goes
test: setup
	$(PY) -m pytest -q -rs --durations=30

test-unit: venv bpf nic
	$(PY) -m pytest -q tests/unit

clean-state: venv
	$(PY) -m testbed clean
