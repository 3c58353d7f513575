# bridge: build, test, benchmark and demo.
#
#   make test    THE test command (CI runs it through .ci/run): setup, image,
#                lint, unit, fuzz (briefly), integration, in that order
#   make demo    setup, image, then `bridge doctor` and examples/hello.py
#   make help    every target
#
# setup and the integration targets need root: they start Docker and Podman,
# import images and run tests as an unprivileged user (integration/env/).

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := build

GO ?= go
BIN := bin
# Where `make install` puts bin/bridge: $(PREFIX)/bin/bridge (DESTDIR for
# packagers). `make uninstall` removes it; README.md says what else to remove.
PREFIX ?= /usr/local
# The version `bridge version` prints: the nearest tag and the commits since,
# or the commit; "dev" outside a git checkout.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.version=$(VERSION)
ENVDIR := integration/env
# Written by setup.sh: engine sockets, the rootless user, daemons it started.
ENV_FILE := /run/bridge-test/env
# The Kubernetes test cluster (integration/kube/README.md).
KUBE := integration/kube
# Written by kube-up: the test cluster's kubeconfig, node, kubectl.
KUBE_ENV := /run/bridge-test/kube.env
KUBE_VERSION := $(shell sed -n 's/^KUBE_VERSION=//p' $(KUBE)/lib.sh)
# Where the rootless run's files go when the user cannot read this tree.
ROOTLESS_STAGE := /var/tmp/bridge-rootless-test

# The Podman bindings (libpod) built as an API client only ("remote"),
# without the storage drivers and the GPGME code that need cgo. Every go
# command gets these tags and CGO_ENABLED=0, also the ones the tests start.
BUILD_TAGS := remote exclude_graphdriver_btrfs exclude_graphdriver_devicemapper containers_image_openpgp
# ENGINES are the engines built in: `make build ENGINES=docker` makes a
# bridge without Podman's and Kubernetes' clients (about half the size).
ALL_ENGINES := docker podman kubernetes
ENGINES ?= $(ALL_ENGINES)
BUILD_TAGS += $(addprefix bridge_no_,$(filter-out $(ENGINES),$(ALL_ENGINES)))
# NO_ENGINE_TAGS build without any engine: lint holds those files to it.
NO_ENGINE_TAGS = $(subst $(space),$(comma),$(BUILD_TAGS) $(addprefix bridge_no_,$(ALL_ENGINES)))
empty :=
space := $(empty) $(empty)
comma := ,
export CGO_ENABLED := 0
export GOFLAGS := $(strip $(filter-out -tags=%,$(GOFLAGS)) -tags=$(subst $(space),$(comma),$(BUILD_TAGS)))

# The race detector needs cgo, so unit tests alone run with CGO_ENABLED=1
# (these tags build with cgo too). `make unit RACE=` runs without it.
RACE ?= $(if $(shell command -v gcc 2>/dev/null),-race)
# staticcheck 2026.2.2, the newest release; it supports Go 1.26.
STATICCHECK_VERSION := v0.8.2
INTEGRATION_TIMEOUT ?= 30m
FUZZTIME ?= 30s
TEST_FUZZTIME ?= 10s
# A test name pattern (go test -run) that narrows every integration pass;
# empty: all. Which tests run on which engine the tests say themselves
# (integration/main_test.go): a pass runs every test, and a test that
# cannot run on the pass's engine skips, saying why.
RUN ?=

# make -n still runs recipes that call $(MAKE); this keeps such a dry run
# from stopping daemons.
DRYRUN = $(findstring n,$(firstword -$(MAKEFLAGS)))

banner = @printf '\n==> %s\n' "$(1)"

.PHONY: help setup build install uninstall image unit integration integration-rootful integration-gvisor integration-rootless integration-kubernetes integration-long test demo lint bench bench-table bench-eras bench-gvisor bench-kube fuzz soak clean need-env kube-build kube-up kube-down scorecard scorecard-check

help:
	@echo "Targets:"
	@echo "  test         setup, image, lint, unit, integration (CI runs this)"
	@echo "  setup        install and start the engines, base image, rootless user (root)"
	@echo "  build        $(BIN)/bridge, version $(VERSION) (ENGINES=docker: Docker's client only, about half the size)"
	@echo "  install      $(BIN)/bridge to $(PREFIX)/bin (PREFIX=..., DESTDIR=...); uninstall removes it"
	@echo "  image        runner images (slim, datascience) for docker, podman and the rootless user"
	@echo "  lint         gofmt, go vet, staticcheck $(STATICCHECK_VERSION)"
	@echo "  unit         go test $(RACE) (not ./integration/...), Python runner tests"
	@echo "  integration  end-to-end tests on docker and podman, then on the runsc engine"
	@echo "               (GVISOR_RUN), then as the rootless user, then on the Kubernetes test cluster"
	@echo "               (integration-rootful, integration-gvisor, integration-rootless,"
	@echo "               integration-kubernetes; RUN=PATTERN narrows each)"
	@echo "  bench        benchmarks, integration ones included (runs setup and image),"
	@echo "               then the table of docs/performance.md (TestBenchTable)"
	@echo "  bench-table  setup, image, and only that table, into docs/performance.md"
	@echo "  bench-eras   MCP 2026-07-28 against 2025-11-25 over HTTP, tasks, memory per principal, into bench-eras.md"
	@echo "  bench-gvisor memory snapshots on the runsc engine (gVisor), into bench-gvisor.md"
	@echo "  bench-kube   the kubernetes engine beside docker on the test cluster (BENCH_KUBE=40 runs)"
	@echo "  fuzz         every fuzz target for $(FUZZTIME) each (make test: $(TEST_FUZZTIME))"
	@echo "  soak         500 sequential and 200 8-way runs through bridge serve, each engine"
	@echo "  scorecard    docs/security-scorecard.md from the last make integration's logs (CI checks it)"
	@echo "  demo         setup, image, bridge doctor, bridge run examples/hello.py"
	@echo "  kube-build   Kubernetes $(KUBE_VERSION) and etcd for the test cluster, built once from the"
	@echo "               Go module proxy and cached in /var/cache/bridge-kube ($(KUBE)/README.md)"
	@echo "  kube-up      start the one-node test cluster on loopback, import the runner images"
	@echo "               (after setup and image; root); writes /run/bridge-test/kube.env"
	@echo "  kube-down    stop it and undo its changes to the host (teardown.sh runs it too)"
	@echo "  clean        remove $(BIN)/ and the rootless stage"

need-env:
	@test -r $(ENV_FILE) || { echo "$(ENV_FILE) is missing: run 'make setup' first" >&2; exit 1; }

setup:
	$(call banner,setup: engines$(comma) base image$(comma) rootless user)
	bash $(ENVDIR)/setup.sh

build:
	$(call banner,build: $(BIN)/bridge $(VERSION))
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/bridge ./cmd/bridge

install: build
	$(call banner,install: $(DESTDIR)$(PREFIX)/bin/bridge)
	install -d $(DESTDIR)$(PREFIX)/bin
	install -m 0755 $(BIN)/bridge $(DESTDIR)$(PREFIX)/bin/bridge

uninstall:
	rm -f $(DESTDIR)$(PREFIX)/bin/bridge

# The data-science variant is built once, with Docker, and copied into
# Podman's stores by load-image.sh (about 12 s each, where a build downloads
# and installs its packages again, about 50 s).
image: build need-env
	$(call banner,image: runner images (slim$(comma) datascience) for docker$(comma) podman and $(ENVDIR)/load-image.sh)
	. $(ENV_FILE) && $(BIN)/bridge image build --runtime docker
	. $(ENV_FILE) && $(BIN)/bridge image build --runtime podman
	. $(ENV_FILE) && $(BIN)/bridge image build --runtime docker --variant datascience
	. $(ENV_FILE) && bash $(ENVDIR)/load-image.sh "$$($(BIN)/bridge image name)" --from-docker "$$($(BIN)/bridge image name --variant datascience)"

lint:
	$(call banner,lint: gofmt$(comma) go vet$(comma) staticcheck $(STATICCHECK_VERSION))
	@echo "gofmt -l"; \
	unformatted=$$(find . -name '*.go' -not -path './.git/*' -not -path './$(BIN)/*' -not -path '*/node_modules/*' -print0 | xargs -0 -r gofmt -l); \
	if [ -n "$$unformatted" ]; then echo "not gofmt-ed (run gofmt -w):"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	@echo "go vet and test without the engines (build tags bridge_no_*)"; \
	$(GO) vet -tags=$(NO_ENGINE_TAGS) ./sandbox/detect ./sandbox/doctor ./cmd/bridge && \
	$(GO) test -count=1 -tags=$(NO_ENGINE_TAGS) ./sandbox/detect ./sandbox/doctor
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...

unit:
	$(call banner,unit: go test $(RACE) (all but ./integration/...)$(comma) Python runner tests)
	@pkgs=$$($(GO) list ./... | grep -Ev "^$$($(GO) list -m)/integration(/|$$)"); \
	echo "CGO_ENABLED=$(if $(RACE),1,0) $(GO) test $(RACE) $$(echo $$pkgs | wc -w) packages"; \
	CGO_ENABLED=$(if $(RACE),1,0) $(GO) test $(RACE) $$pkgs
	python3 -m unittest discover -s images/runner

# The rootful suite (docker and podman), then the same test binary as the
# unprivileged user against that user's Podman service. The user must be able
# to read the binaries (and any test data, and the npm peers in
# integration/npm/node_modules, passed as BRIDGE_NPM_DIR): when this tree is
# not readable by others (a clone under /root, say), it is copied to
# $(ROOTLESS_STAGE).
integration: build need-env
	@rm -f $(BIN)/integration-long.log; long=; \
	for pass in rootful gvisor rootless kubernetes; do \
		t0=$$(date +%s); \
		if ! $(MAKE) --no-print-directory integration-$$pass; then \
			printf '\n==> integration-%s: FAILED after %d s\n' $$pass $$(( $$(date +%s) - t0 )); \
			if [ -n "$$long" ]; then kill $$long 2>/dev/null; fi; exit 1; \
		fi; \
		printf '\n==> integration-%s: passed in %d s\n' $$pass $$(( $$(date +%s) - t0 )); \
		if [ $$pass = rootful ]; then \
			$(MAKE) --no-print-directory integration-long > $(BIN)/integration-long.log 2>&1 & long=$$!; \
		fi; \
	done; \
	t0=$$(date +%s); \
	if ! wait $$long; then cat $(BIN)/integration-long.log; printf '\n==> integration-long: FAILED\n'; exit 1; fi; \
	tail -n 5 $(BIN)/integration-long.log; \
	printf '\n==> integration-long: passed (waited %d s for it after the other passes)\n' $$(( $$(date +%s) - t0 ))
	@$(MAKE) --no-print-directory scorecard-check

# docs/security-scorecard.md, from the passes' logs that `make integration`
# keeps in $(SCORECARD_LOGS): `make scorecard` writes it, scorecard-check
# (the end of `make integration`) fails when it and the run disagree.
SCORECARD_LOGS := $(BIN)/scorecard

scorecard:
	$(GO) run ./integration/scorecard -logs $(SCORECARD_LOGS) -out docs/security-scorecard.md

scorecard-check:
	$(call banner,scorecard: docs/security-scorecard.md against this run)
	$(GO) run ./integration/scorecard -logs $(SCORECARD_LOGS) -out docs/security-scorecard.md -check

# The tests too long for the serial passes (TestTaskTenMinutes: a task of
# 10 minutes on docker), run by `make integration` beside the passes after
# the rootful one (whose fault tests stop and start the engines).
integration-long: build need-env
	$(call banner,integration: the long tests (beside the others))
	. $(ENV_FILE) && BRIDGE_TEST_ENGINES=docker BRIDGE_TEST_LONG=1 $(GO) test -count=1 -v -timeout 20m -run '^TestTaskTenMinutes$$' ./integration/

# The kubernetes engine on the test cluster (make kube-up: built once,
# then started in seconds): every test that depends on the engine, and
# the DaemonSet of deploy/kubernetes. The others skip, each saying why
# (docs/testing.md, "Which tests run on which engine").
integration-kubernetes: build need-env
	@$(MAKE) --no-print-directory kube-up
	$(call banner,integration: the kubernetes engine on the test cluster)
	@mkdir -p $(SCORECARD_LOGS)
	. $(ENV_FILE) && . $(KUBE_ENV) && BRIDGE_TEST_ENGINES=kubernetes $(GO) test -count=1 -v -timeout $(INTEGRATION_TIMEOUT) $(if $(RUN),-run '$(RUN)') ./integration/ 2>&1 | tee $(SCORECARD_LOGS)/kubernetes.log

integration-rootful: build need-env
	$(call banner,integration: rootful engines (go test ./integration/...))
	@mkdir -p $(SCORECARD_LOGS)
	. $(ENV_FILE) && $(GO) test -count=1 -v -timeout $(INTEGRATION_TIMEOUT) $(if $(RUN),-run '$(RUN)') ./integration/... 2>&1 | tee $(SCORECARD_LOGS)/rootful.log

# The runsc engine (gVisor driven by the bridge, as root, with Docker's
# images): the tests of what it adds, and a few that prove it runs code
# as the others do (GVISOR_RUN; RUN=PATTERN instead).
GVISOR_RUN ?= TestOutputAndErrors$$|TestRootReadOnly$$|TestIdentityAndPrivileges$$|TestNetworkUnreachable$$|TestMemoryLimitKills$$|TestHostile$$|TestPersistenceAcrossRuns$$|TestInputs$$|TestMountsRefusedAndReported$$|TestTmpfsLimits$$|TestForkBombHitsPidsLimit$$|TestTimeoutKills$$|TestConcurrentRunsAreIsolated$$|TestSessions$$|TestMemorySnapshots$$|TestMemorySnapshotsHostile$$|TestSnapshotsHostile$$|TestCLIRun$$

integration-gvisor: build need-env
	$(call banner,integration: the runsc engine (gVisor driven by the bridge; images from docker))
	@mkdir -p $(SCORECARD_LOGS)
	. $(ENV_FILE) && BRIDGE_TEST_ENGINES=runsc $(GO) test -count=1 -v -timeout $(INTEGRATION_TIMEOUT) -run '$(or $(RUN),$(GVISOR_RUN))' ./integration/ 2>&1 | tee $(SCORECARD_LOGS)/gvisor.log

integration-rootless: build need-env
	$(call banner,integration: rootless Podman as the unprivileged user)
	@mkdir -p $(SCORECARD_LOGS)
	rm -f $(BIN)/integration.test
	$(GO) test -c -o $(BIN)/integration.test ./integration
	@. $(ENV_FILE); \
	user=$$BRIDGE_ROOTLESS_USER; \
	home=$$(getent passwd "$$user" | cut -d: -f6); \
	dir=$(CURDIR); \
	if ! runuser -u "$$user" -- test -r "$$dir/go.mod" -a -x "$$dir/$(BIN)/integration.test" -a -x "$$dir/$(BIN)/bridge" \
		-a \( ! -e "$$dir/integration/npm/node_modules" -o -x "$$dir/integration/npm/node_modules/.bin/mcp-inspector" \); then \
		dir=$(ROOTLESS_STAGE); \
		echo "$(CURDIR) is not readable by $$user: copying it to $$dir"; \
		rm -rf "$$dir"; mkdir -p "$$dir"; \
		tar -C $(CURDIR) --exclude=./.git -c . | tar -C "$$dir" -x --no-same-owner; \
		chmod -R a+rX "$$dir"; \
	fi; \
	cd "$$dir/integration"; \
	set -x; \
	runuser -u "$$user" -- env -i \
		HOME="$$home" USER="$$user" LOGNAME="$$user" \
		PATH=/usr/local/bin:/usr/bin:/bin LANG=C.UTF-8 CI="$${CI:-}" \
		XDG_RUNTIME_DIR="$$BRIDGE_ROOTLESS_RUNTIME_DIR" BRIDGE_TEST_ROOTLESS=1 \
		BRIDGE_TEST_BIN="$$dir/$(BIN)/bridge" BRIDGE_NPM_DIR="$$dir/integration/npm/node_modules" \
		"$$dir/$(BIN)/integration.test" -test.count=1 -test.v -test.timeout $(INTEGRATION_TIMEOUT) \
		$(if $(RUN),-test.run '$(RUN)') 2>&1 | tee $(CURDIR)/$(SCORECARD_LOGS)/rootless.log

# THE test command. Each step is its own make so the order holds under -j.
# In CI (CI=true) the daemons setup.sh started are stopped on exit, pass or
# fail; on a developer machine they stay up for the next run.
test:
	$(call banner,test: setup$(comma) image$(comma) lint$(comma) unit$(comma) fuzz ($(TEST_FUZZTIME) a target)$(comma) integration$(if $(filter true,$(CI)),; teardown on exit (CI=true)))
	@if [ "$${CI:-}" = true ] && [ -z "$(DRYRUN)" ]; then trap 'bash $(ENVDIR)/teardown.sh' EXIT; fi; \
	took=; t00=$$(date +%s); \
	for step in setup image lint unit fuzz integration; do \
		extra=; if [ $$step = fuzz ]; then extra=FUZZTIME=$(TEST_FUZZTIME); fi; \
		t0=$$(date +%s); \
		if ! $(MAKE) --no-print-directory $$step $$extra; then \
			printf '\n==> test: %s FAILED after %d s (before it:%s)\n' $$step $$(( $$(date +%s) - t0 )) "$$took"; exit 1; \
		fi; \
		d=$$(( $$(date +%s) - t0 )); took="$$took $$step $${d}s"; \
		printf '\n==> test: %s passed in %d s\n' $$step $$d; \
	done; \
	printf '\n==> test: all steps passed in %d s:%s\n' $$(( $$(date +%s) - t00 )) "$$took"

demo:
	@for step in setup image; do $(MAKE) --no-print-directory $$step; done
	$(call banner,demo: bridge doctor; bridge run examples/hello.py)
	. $(ENV_FILE) && $(BIN)/bridge doctor
	. $(ENV_FILE) && $(BIN)/bridge run examples/hello.py
	$(call banner,demo: code in the sandbox uses other MCP servers (everything$(comma) filesystem$(comma) memory from npm))
	. $(ENV_FILE) && BRIDGE_DEMO_DIR=$(CURDIR)/examples $(BIN)/bridge run --servers-config examples/servers.json examples/upstreams.py
	$(call banner,demo: an MCP client (the MCP Inspector CLI) calls run_python through bridge serve)
	. $(ENV_FILE) && "$$BRIDGE_NPM_DIR/.bin/mcp-inspector" --cli --method tools/call --tool-name run_python \
		--tool-arg 'code=import mcp_tools; hit = mcp_tools.search("sum of two numbers", limit=1)[0]; print(hit["server"], hit["tool"], "->", mcp_tools.call(hit["server"], hit["tool"], a=2, b=40))' \
		-e BRIDGE_NPM_DIR="$$BRIDGE_NPM_DIR" -e BRIDGE_DEMO_DIR=$(CURDIR)/examples \
		-- $(CURDIR)/$(BIN)/bridge serve --servers-config $(CURDIR)/examples/servers.json
	$(call banner,demo: code reads a mounted CSV and draws a chart; it reaches the MCP client as an image)
	printf 'version: 1\nsandbox:\n  variant: datascience\nmounts:\n  - host: %s\n    path: /data/sales\n' "$(CURDIR)/examples/data" > $(BIN)/demo-policy.yaml
	. $(ENV_FILE) && "$$BRIDGE_NPM_DIR/.bin/mcp-inspector" --cli --method tools/call --tool-name run_python \
		--tool-arg "code=$$(cat examples/chart.py)" --format json \
		-- $(CURDIR)/$(BIN)/bridge serve --policy $(CURDIR)/$(BIN)/demo-policy.yaml | python3 examples/check_image.py

bench:
	@for step in setup image; do $(MAKE) --no-print-directory $$step; done
	$(call banner,bench: go test -bench . -benchmem ./...)
	. $(ENV_FILE) && $(GO) test -run '^$$' -bench . -benchmem -timeout $(INTEGRATION_TIMEOUT) ./...
	. $(ENV_FILE) && BRIDGE_TEST_ENGINES=runsc $(GO) test -run '^$$' -bench 'Snapshots' -benchmem -timeout $(INTEGRATION_TIMEOUT) ./integration/
	$(bench_table)
	$(MAKE) --no-print-directory bench-eras
	$(MAKE) --no-print-directory bench-gvisor

bench-table:
	@for step in setup image; do $(MAKE) --no-print-directory $$step; done
	$(bench_table)

# MCP 2026-07-28 against 2025-11-25 over HTTP, tasks, and memory per
# principal and per kept task result (TestBenchEras): its table, for
# docs/performance.md's "Both MCP eras over HTTP, and tasks".
bench-eras: build need-env
	$(call banner,bench: both MCP eras over HTTP$(comma) and tasks)
	. $(ENV_FILE) && BRIDGE_TEST_ENGINES=docker BRIDGE_BENCH_TABLE=full BRIDGE_BENCH_OUT=$(CURDIR)/bench-eras.md \
		$(GO) test -count=1 -v -run '^TestBenchEras$$' -timeout $(INTEGRATION_TIMEOUT) ./integration/

# Memory snapshots on the runsc engine (TestBenchMemorySnapshots; as root):
# its table, for docs/performance.md's "Memory snapshots (gVisor)".
bench-gvisor: build need-env
	$(call banner,bench: memory snapshots on the runsc engine)
	. $(ENV_FILE) && BRIDGE_TEST_ENGINES=runsc BRIDGE_BENCH_TABLE=full BRIDGE_BENCH_OUT=$(CURDIR)/bench-gvisor.md \
		$(GO) test -count=1 -v -run '^TestBenchMemorySnapshots$$' -timeout $(INTEGRATION_TIMEOUT) ./integration/

# The kubernetes engine beside Docker on the test cluster (TestBenchKubernetes;
# docs/performance.md, "Kubernetes"): BENCH_KUBE runs of each figure.
BENCH_KUBE ?= 40
bench-kube:
	@for step in setup image kube-up; do $(MAKE) --no-print-directory $$step; done
	$(call banner,bench-kube: the kubernetes engine beside docker ($(BENCH_KUBE) runs each))
	. $(ENV_FILE) && . $(KUBE_ENV) && BRIDGE_TEST_ENGINES=docker,kubernetes BRIDGE_BENCH_KUBE=$(BENCH_KUBE) \
		$(GO) test -count=1 -v -timeout $(INTEGRATION_TIMEOUT) -run '^TestBenchKubernetes$$' ./integration/

# The table of docs/performance.md: TestBenchTable measures every figure of
# the performance targets side by side on each engine (a few minutes each),
# writes the table to BENCH_TABLE, and the script puts it between the
# file's bench-table markers. A failed measurement writes nothing.
BENCH_TABLE := $(BIN)/bench-table.md
define bench_table
$(call banner,bench: the table (TestBenchTable$(comma) BRIDGE_BENCH_TABLE=full) into docs/performance.md)
rm -f $(BENCH_TABLE)
. $(ENV_FILE) && BRIDGE_BENCH_TABLE=full BRIDGE_BENCH_OUT=$(CURDIR)/$(BENCH_TABLE) \
	$(GO) test -count=1 -v -run '^TestBenchTable$$' -timeout $(INTEGRATION_TIMEOUT) ./integration/
python3 $(ENVDIR)/splice-bench-table.py docs/performance.md $(BENCH_TABLE)
endef

# Every fuzz target, as PACKAGE:TARGET. Their seed corpora live in each
# package's testdata/fuzz/TARGET (and in f.Add calls); `make test` fuzzes
# each for TEST_FUZZTIME, `make fuzz` for FUZZTIME.
FUZZ_TARGETS := ./internal/relay:FuzzDecode ./internal/relay:FuzzReadObject ./policy:FuzzParse ./policy:FuzzGlob ./proxy:FuzzServersConfig ./bridge/artifacts:FuzzSanitiseName ./bridge/artifacts:FuzzParseURI ./internal/tokenize:FuzzTokenize ./proxy/catalog:FuzzResultShape ./bridge/transport:FuzzScanID

# Go 1.26's fuzz coordinator can end a run at the -fuzztime deadline with a
# bare "context deadline exceeded" and no failing input (go.dev/issue/75804,
# fixed in Go 1.27). That one outcome is reported and passed; any failure
# that wrote an input, or any other, fails. The seed corpora are replayed by
# `make unit` either way.
fuzz:
	$(call banner,fuzz: $(words $(FUZZ_TARGETS)) targets$(comma) $(FUZZTIME) each)
	@log=$$(mktemp); trap 'rm -f "$$log"' EXIT; \
	for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t##*:}; \
		echo "$(GO) test -run '^$$' -fuzz '^'$$name'$$' -fuzztime $(FUZZTIME) $$pkg"; \
		if ! $(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 2s $$pkg 2>&1 | tee "$$log"; then \
			if grep -q '^    context deadline exceeded$$' "$$log" && ! grep -q 'Failing input written to\|panic:\|_test.go:[0-9]' "$$log"; then \
				echo "fuzz: $$name ended at the deadline without a failing input (go.dev/issue/75804): not a finding"; \
			else exit 1; fi; \
		fi; \
	done

# The full soak (make test runs a short one within the integration suite).
soak: build need-env
	$(call banner,soak: 500 sequential and 200 8-way runs with tool calls through bridge serve$(comma) rootful engines)
	. $(ENV_FILE) && BRIDGE_SOAK=full $(GO) test -count=1 -v -timeout $(INTEGRATION_TIMEOUT) -run '^TestSoak$$' ./integration/

# The Kubernetes test cluster: a one-node cluster on loopback with its own
# containerd, for the Kubernetes engine's tests. The binaries are built from
# the Go module proxy once (about 6.5 minutes on 2 cores) and cached.
kube-build:
	$(call banner,kube-build: Kubernetes $(KUBE_VERSION) and etcd (cached in $${BRIDGE_KUBE_CACHE:-/var/cache/bridge-kube}))
	bash $(KUBE)/kube.sh build

# The runner image must be in Docker's store (make image); the data-science
# variant is imported when it is there.
kube-up: build
	$(call banner,kube-up: the test cluster (Kubernetes $(KUBE_VERSION)$(comma) one node on loopback))
	bash $(KUBE)/kube.sh up --image "$$($(BIN)/bridge image name)" \
		--optional-image "$$($(BIN)/bridge image name --variant datascience)"

kube-down:
	$(call banner,kube-down: stop the test cluster$(comma) undo its host changes)
	bash $(KUBE)/kube.sh down

clean:
	$(call banner,clean)
	rm -rf $(BIN) $(ROOTLESS_STAGE)
