# netdra — node network driver. `make help` lists the targets.

SHELL := /usr/bin/env bash -o pipefail
.DEFAULT_GOAL := help

GO        ?= go
TOOLS     := $(CURDIR)/.tools
TOOLS_BIN := $(TOOLS)/bin
OUT       := $(CURDIR)/_output
SERVICES  := $(patsubst services/%/main.go,%,$(wildcard services/*/main.go))
# nri's OCI hook binary (not a service: no image of its own; nri's holds it).
HOOK      := services/nri/cmd/netdra-hook
# kubectl netdra, the on-call tool (not a service: dra's image holds it).
CLI       := services/cli/cmd/kubectl-netdra
# The binaries' version (process.Version), set at link time.
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null)
VERSION_LDFLAGS := -X github.com/netdra/netdra/shared/process.version=$(VERSION)

# Pinned tools, built from module sources by `make tools` (promtool, the
# alert rules' checks and unit tests, by `make promtool`): buf and the
# protoc plugins each from its own module at the version below; grpcurl,
# controller-gen, helm and promtool from one module, shared/tools, whose go.mod pins them (go's tool
# directives) with their dependencies at the test world's versions, so that
# a cold run compiles Kubernetes' packages once for the tools and the tests
# instead of once per tool.
BUF_VERSION                 := v1.75.0
PROTOC_GEN_GO_VERSION       := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION  := v1.6.2
TOOLS_MOD                   := shared/tools

BUF     := $(TOOLS_BIN)/buf
GRPCURL := $(TOOLS_BIN)/grpcurl
CONTROLLER_GEN := $(TOOLS_BIN)/controller-gen
HELM    := $(TOOLS_BIN)/helm
PROMTOOL := $(TOOLS_BIN)/promtool
export PATH := $(TOOLS_BIN):$(PATH)

# Tests: the state and rpc suites run real processes; keep parallelism sane
# on 2 cores.
GOTEST_FLAGS ?= -count=1 -p 2 -timeout 20m
# go test's own vet (a subset of go vet's analyzers) for test-unit, fuzz
# and test-kernel; make test sets -vet=off, since it runs go vet (vet,
# vet-kernel), every analyzer, on the same packages with both tag sets
# beside them: go test would otherwise type-check every dependency once
# more for its vet facts (its flags are not go vet's, so nothing of go
# vet's is reused).
GOTEST_VET ?=

# Build tags of the shipped binaries (make build, the images, the binaries
# tests start: pods/images and shared/testinfra/nodetest say the same).
# grpcnotrace leaves grpc's x/net/trace out, and html/template with it: 19
# MB less code in dra, a third of its idle RSS.
GO_TAGS := grpcnotrace

# One build configuration for every go command make runs, the shipped
# binaries' one: static (CGO_ENABLED=0), -trimpath, GO_TAGS. -trimpath is
# in every package's cache key, CGO_ENABLED in that of package net and all
# above it, a tag in that of the packages it selects files of and all above
# them: in one configuration the unit tests, go vet, the images, the
# kernel-rig tests, the node processes the tests build, the test world's
# Kubernetes and the tools share one build cache, and a cold run compiles
# the standard library and each dependency once, not once per
# configuration. A command's own -tags (test-kernel's) replaces GOFLAGS'.
# -dwarf=false: the compiler writes no debug information, a good part of
# a cold build's compile time (bench/RESULTS.md); stack traces and pprof
# use the symbol table, which stays, and the shipped binaries are linked
# with -s -w, which dropped the DWARF anyway. A debugger needs a build
# without it (GOFLAGS= go build ...).
export CGO_ENABLED := 0
export GOFLAGS := -trimpath -tags=$(GO_TAGS) -buildvcs=false -gcflags=all=-dwarf=false

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  \033[36m%-14s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

# tool installs one pinned tool: $(call tool,name,module/cmd,version[,go install flags])
define tool
$(TOOLS)/stamps/$(1)-$(3):
	@echo ">> installing $(1) $(3) (cached after the first time)"
	@mkdir -p $(TOOLS_BIN) $(TOOLS)/stamps
	GOBIN=$(TOOLS_BIN) $(GO) install $(4) $(2)@$(3)
	@rm -f $(TOOLS)/stamps/$(1)-* && touch $$@
TOOL_STAMPS += $(TOOLS)/stamps/$(1)-$(3)
endef
$(eval $(call tool,buf,github.com/bufbuild/buf/cmd/buf,$(BUF_VERSION)))
$(eval $(call tool,protoc-gen-go,google.golang.org/protobuf/cmd/protoc-gen-go,$(PROTOC_GEN_GO_VERSION)))
$(eval $(call tool,protoc-gen-go-grpc,google.golang.org/grpc/cmd/protoc-gen-go-grpc,$(PROTOC_GEN_GO_GRPC_VERSION)))
# remove_all_sd leaves out Prometheus' service discoveries (cloud SDKs,
# Kubernetes' client), which promtool's rule checks and tests never use.
# The module's tools build with one set of tags so that the packages they
# share compile once.
TOOLS_MOD_TAGS := $(GO_TAGS),remove_all_sd
# grpcurl, controller-gen and helm: what generate, the unit tests and the
# chart need.
MODTOOLS := $(TOOLS)/stamps/modtools
$(MODTOOLS): $(TOOLS_MOD)/go.mod $(TOOLS_MOD)/go.sum
	@echo ">> building grpcurl, controller-gen and helm from $(TOOLS_MOD) (cached after the first time)"
	@mkdir -p $(TOOLS_BIN) $(TOOLS)/stamps
	cd $(TOOLS_MOD) && $(GO) build -tags=$(TOOLS_MOD_TAGS) -o $(TOOLS_BIN)/ \
		github.com/fullstorydev/grpcurl/cmd/grpcurl sigs.k8s.io/controller-tools/cmd/controller-gen helm.sh/helm/v3/cmd/helm
	@touch $@
TOOL_STAMPS += $(MODTOOLS)
# promtool, the largest, for the alert rules' tests in the test world
# alone: make test builds it after the unit tests, off the path to them.
PROMTOOL_STAMP := $(TOOLS)/stamps/promtool
$(PROMTOOL_STAMP): $(TOOLS_MOD)/go.mod $(TOOLS_MOD)/go.sum
	@echo ">> building promtool from $(TOOLS_MOD) (cached after the first time)"
	@mkdir -p $(TOOLS_BIN) $(TOOLS)/stamps
	cd $(TOOLS_MOD) && $(GO) build -tags=$(TOOLS_MOD_TAGS) -o $(TOOLS_BIN)/ github.com/prometheus/prometheus/cmd/promtool
	@touch $@

.PHONY: promtool
promtool: $(PROMTOOL_STAMP) ## Build promtool (the alert rules' tests) into .tools/bin.

# Every Go module the tests build with (this module's, the images', the
# test world's and its real node's), downloaded in the background while the
# tools compile: a cold run's downloads then overlap its compiles. A go
# command fetches what is still missing itself, so this cannot fail a run;
# its output is in _output/prefetch.log. shared/tools is left to its build:
# its go.mod lists every cloud SDK of Prometheus' service discoveries,
# which promtool's build tags leave out and nothing needs downloaded.
GO_MODULES := . bench/cmd pods/images shared/testinfra/testworld shared/testinfra/testworld/realnode/tools/containerd shared/testinfra/testworld/realnode/tools/cni

.PHONY: prefetch
prefetch:
	@mkdir -p $(OUT); for d in $(GO_MODULES); do echo "== $$d"; (cd $$d && $(GO) mod download -x); done </dev/null >$(OUT)/prefetch.log 2>&1 &

# The tools are built three at a time: a cold build is mostly fetching
# modules and linking, which overlap well on 2 cores.
.PHONY: tools
tools: ## Install the pinned tools into .tools/bin.
	@$(MAKE) --no-print-directory -s -j3 $(TOOL_STAMPS)

.PHONY: build
build: ## Build every service binary, netdra-hook and kubectl-netdra into _output/.
	@mkdir -p $(OUT)
	$(GO) build -tags $(GO_TAGS) -ldflags '$(VERSION_LDFLAGS)' -o $(OUT)/ $(addprefix ./services/,$(SERVICES)) ./$(HOOK) ./$(CLI)

.PHONY: cli
cli: ## Build kubectl-netdra, the on-call tool (a kubectl plugin: kubectl netdra), into _output/.
	@mkdir -p $(OUT)
	$(GO) build -tags $(GO_TAGS) -ldflags '$(VERSION_LDFLAGS)' -o $(OUT)/ ./$(CLI)

# Generated code, checked by checkgenerate.
CRD_DIR   := pods/chart/netdra/files/crds
GENERATED := protos shared/apis $(CRD_DIR) pods/base pods/chart/netdra/README.md services/provisioner/ebpf

.PHONY: generate
generate: tools ## Generate the protos' Go code (buf), deepcopy and the CRDs (controller-gen), the eBPF objects (bpf2go, clang), pods/base and the chart's README (make manifests).
	$(BUF) generate
	$(CONTROLLER_GEN) object paths=./shared/apis/...
	$(CONTROLLER_GEN) crd paths=./shared/apis/... output:crd:artifacts:config=$(CRD_DIR)
	$(MAKE) --no-print-directory manifests
	@command -v clang-14 >/dev/null && command -v llvm-strip-14 >/dev/null && test -e /usr/include/bpf/bpf_helpers.h || { \
		echo ">> installing clang-14, llvm-14 and libbpf-dev from Debian to compile the eBPF programs"; \
		apt-get install -y --no-install-recommends clang-14 llvm-14 libbpf-dev; }
	$(GO) generate ./services/provisioner/ebpf/

# The Helm chart is the one source of netdra's manifests: pods/base (the
# kustomize base) is the chart rendered with its default values into
# netdra-system, and the chart's README's table of values is made from
# values.yaml's comments (pods/chartgen; its tests and deploytest's check
# both).
.PHONY: manifests
manifests: $(MODTOOLS) ## Render pods/base from the chart, and the chart README's values from values.yaml.
	$(GO) run ./pods/chartgen -helm $(HELM)

.PHONY: checkgenerate
checkgenerate: generate ## Fail when the committed generated code is stale.
	@git diff --exit-code -- $(GENERATED) || { echo "generated code is stale: run make generate and commit"; exit 1; }
	@test -z "$$(git status --porcelain -- $(GENERATED))" || { git status --porcelain -- $(GENERATED); echo "generated files are not committed"; exit 1; }

.PHONY: lint
lint: vet vet-kernel tidy ## buf lint, gofmt, go vet (both tag sets), go mod tidy -diff.

.PHONY: vet
vet: tools ## buf lint, gofmt, go vet.
	$(BUF) lint
	@out=$$(gofmt -l $$(git ls-files '*.go')); test -z "$$out" || { echo "gofmt would change:"; echo "$$out"; exit 1; }
	$(GO) vet ./...
	cd bench/cmd && $(GO) vet ./...

# go vet with the kernel-rig tests' tag, on the packages that have files
# under it (make test runs it in its checks lane, before test-kernel, which
# compiles the same packages with the same tags): every other package is
# the same with or without the tag, and vet has seen it.
.PHONY: vet-kernel
vet-kernel: ## go vet with the kernelrig tag.
	$(GO) vet -tags kernelrig,$(GO_TAGS) $(KERNEL_PKGS)

# go vet of the test world's module, every analyzer (make test runs it in
# its checks lane, beside the end-to-end tests, with TESTWORLD_VET=0 for
# test.sh; make test-world alone runs it first).
.PHONY: vet-world
vet-world: ## go vet of the test world's module.
	cd shared/testinfra/testworld && $(GO) vet ./...

# go mod tidy -diff of every module: mostly downloading the test
# dependencies of every dependency, which nothing else needs (make test
# runs it in its checks lane, off the test world's path).
.PHONY: tidy
# shared/tools is not checked: tidying it loads every build tag's imports,
# which means downloading those cloud SDKs; `go get -tool` writes its go.mod
# and make tools builds it.
tidy: ## Fail when a go.mod is not tidy.
	@out=$$($(GO) mod tidy -diff 2>&1) || { echo "go.mod is not tidy (run go mod tidy):"; echo "$$out"; exit 1; }
	@cd shared/testinfra/testworld && out=$$($(GO) mod tidy -diff 2>&1) || { echo "shared/testinfra/testworld/go.mod is not tidy (run go mod tidy there):"; echo "$$out"; exit 1; }
	@cd pods/images && out=$$($(GO) mod tidy -diff 2>&1) || { echo "pods/images/go.mod is not tidy (run go mod tidy there):"; echo "$$out"; exit 1; }
	@cd bench/cmd && out=$$($(GO) mod tidy -diff 2>&1) || { echo "bench/cmd/go.mod is not tidy (run go mod tidy there):"; echo "$$out"; exit 1; }

# make test: the apt packages, then two lanes side by side
# (shared/testinfra/maketest.sh): the tools, checkgenerate, the unit tests
# and promtool, then go vet, go.mod's tidiness, the images', the chart's
# and the kernel-rig checks; beside them, from the start, the test world's
# binaries, then its tests once the unit tests are done. The go tests run
# with -vet=off (GOTEST_VET): go vet runs every analyzer on their packages
# in the same run. The fuzz search is `make fuzz`, not part of it (the
# targets' seeds and found inputs run in the unit tests).
.PHONY: test
test: prefetch node-deps unit-deps ## Run every test, all set-up included (as root).
	@MAKE='$(MAKE)' GOTEST_VET=-vet=off bash shared/testinfra/maketest.sh

.PHONY: unit-deps
unit-deps: ## Install what the root tests take from Debian (dnsmasq, the DHCP server of the provisioner's DHCP tests) when missing.
	@command -v dnsmasq >/dev/null || { echo ">> installing dnsmasq-base from Debian for the DHCP tests"; \
		apt-get install -y -q --no-install-recommends dnsmasq-base || { apt-get update -q && apt-get install -y -q --no-install-recommends dnsmasq-base; }; }

.PHONY: test-unit
test-unit: unit-deps ## Run the tests on this machine's kernel (root tests use throwaway netns).
	GRPCURL=$(GRPCURL) $(GO) test $(GOTEST_FLAGS) $(GOTEST_VET) ./...
	cd bench/cmd && $(GO) test $(GOTEST_FLAGS) $(GOTEST_VET) ./...

# Fuzz targets: every `func FuzzX(f *testing.F)` in this module's test
# files, as pkg:FuzzX, found afresh each time so that a new one is run too
# (shared/testinfra/testworld is a module of its own, with none). A crash's input is
# written to the package's testdata/fuzz/FuzzX/, where plain `go test`
# replays it; commit it with the fix.
FUZZTIME         ?= 4s
FUZZMINIMIZETIME ?= 5s
FUZZ_TARGETS = $(shell grep -rEo --include='*_test.go' --exclude-dir=.git --exclude-dir=.tools --exclude-dir=_output --exclude-dir=testworld \
	'^func Fuzz[A-Za-z0-9_]*\(f \*testing\.F\)' . | sed -E 's|^\./(.*)/[^/]*_test\.go:func (Fuzz[A-Za-z0-9_]*).*|\1:\2|' | sort)

.PHONY: fuzz
fuzz: ## Search with each fuzz target for FUZZTIME (default 4s), one after another (not in make test).
	@test -n "$(FUZZ_TARGETS)" || { echo "no fuzz targets found"; exit 1; }
	@set -e; out=$$(mktemp); trap 'rm -f $$out' EXIT; for t in $(FUZZ_TARGETS); do \
	  pkg=$${t%%:*}; name=$${t##*:}; \
	  echo ">> $$name (./$$pkg) for $(FUZZTIME)"; \
	  if $(GO) test $(GOTEST_VET) -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZETIME) ./$$pkg 2>&1 | tee $$out; then continue; fi; \
	  if grep -q '^    context deadline exceeded$$' $$out && ! grep -q 'Failing input written' $$out; then \
	    echo ">> $$name: go1.26's fuzz coordinator raced its own -fuzztime deadline (go.dev/issue/75804, fixed in go1.27); no input failed"; continue; fi; \
	  exit 1; \
	done

# Packages with kernel-rig tests (//go:build kernelrig); see shared/testinfra/kernelrig/README.md.
# They build as everything make runs does (static, -trimpath, GO_TAGS and
# kernelrig): the test binaries run in the VM, which has no C library.
KERNEL_PKGS = $(shell grep -rlE --include='*_test.go' --exclude-dir=.git --exclude-dir=.tools --exclude-dir=_output --exclude-dir=testdata '^//go:build.*\bkernelrig\b' . | xargs -r -n1 dirname | sort -u)

.PHONY: test-kernel
test-kernel: ## Run the kernel-rig tests in QEMU (dummy, VLAN, SR-IOV VFs); builds the rig once.
	bash shared/testinfra/kernelrig/setup.sh
	$(GO) test $(GOTEST_VET) -tags kernelrig,$(GO_TAGS) -exec "$(CURDIR)/shared/testinfra/kernelrig/vmrun.sh" -p 1 -count=1 -timeout 30m $(KERNEL_PKGS)

# `make dev`: netdra's whole job on this machine, as root (see docs/testing.md):
# the test world, the four node processes, demo veths, a NodeConfig, a
# DeviceClass, a ResourceClaimTemplate and a pod that gets net1; until
# Ctrl-C, then everything it made is removed. DEV_ONESHOT=1 checks the pod
# and net1, cleans up and exits (shared/testinfra/testworld/e2e/dev_test.go runs the
# same in CI). The program is shared/testinfra/testworld/cmd/devdemo.
DEV_DIR     ?= /tmp/netdra-dev
DEV_ONESHOT ?=

.PHONY: dev
dev: build world-bin node-bin dev-bin $(MODTOOLS) ## Run netdra's whole job here (as root): test world, node processes, a pod with a device; until Ctrl-C (DEV_ONESHOT=1: once).
	@$(OUT)/devdemo -dir $(DEV_DIR) -bin $(OUT) -testworld $(OUT)/testworld -grpcurl $(GRPCURL) \
		-crds $(CURDIR)/$(CRD_DIR) $(if $(filter 1 yes true,$(DEV_ONESHOT)),-oneshot)

.PHONY: dev-bin
dev-bin: ## Build make dev's program into _output/devdemo.
	@echo ">> building make dev's program (shared/testinfra/testworld/cmd/devdemo) into $(OUT)/devdemo"
	@bash shared/testinfra/testworld/dev/gobuild.sh shared/testinfra/testworld $(OUT)/devdemo ./cmd/devdemo

# The Kubernetes version the test world's components report; the same as
# controlplane.LDFlags (cmd/testworld's tests check it).
TESTWORLD_LDFLAGS := -X k8s.io/component-base/version.gitVersion=v1.37.2 -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37 -X k8s.io/component-base/version.gitTreeState=clean

.PHONY: world-bin
world-bin: ## Build the test world (Kubernetes v1.37.2 from module sources) into _output/testworld.
	@echo ">> building Kubernetes v1.37.2 from module sources into $(OUT)/testworld (about 7 minutes the first time, cached after)"
	@bash shared/testinfra/testworld/dev/gobuild.sh shared/testinfra/testworld $(OUT)/testworld ./cmd/testworld -ldflags '$(TESTWORLD_LDFLAGS)'

.PHONY: node-bin
node-bin: world-bin node-deps ## Build the test world's real node (kubelet, containerd, CNI plugins, images) into its cache.
	@$(OUT)/testworld build-node

.PHONY: node-deps
node-deps: ## Install what the test world's real node takes from Debian (runc; conmon for CRI-O) when missing.
	@command -v runc >/dev/null || { echo ">> installing runc from Debian for the test world's real node"; \
		apt-get install -y -q --no-install-recommends runc || { apt-get update -q && apt-get install -y -q --no-install-recommends runc; }; }
	@command -v conmon >/dev/null || { echo ">> installing conmon from Debian for the test world's CRI-O node"; \
		apt-get install -y -q --no-install-recommends conmon || { apt-get update -q && apt-get install -y -q --no-install-recommends conmon; }; }

# The test world: a real control plane and real nodes (a real kubelet,
# containerd with NRI, runc, containers), in its own Go module
# (shared/testinfra/testworld). The first build of Kubernetes from module sources
# takes about 7 minutes on 2 cores, the kubelet, containerd and the CNI
# plugins a few more; later builds reuse the Go build cache. The end-to-end
# tests run in two processes at once, beside the other packages
# (shared/testinfra/testworld/dev/test.sh).
.PHONY: test-world
test-world: node-deps $(MODTOOLS) $(PROMTOOL_STAMP) ## Run the test world's tests, the operator's and the end-to-end tests (real control plane).
	@echo ">> test world: building Kubernetes v1.37.2 from module sources if not cached (about 7 minutes the first time)"
	GO=$(GO) GRPCURL=$(GRPCURL) HELM=$(HELM) PROMTOOL=$(PROMTOOL) bash shared/testinfra/testworld/dev/test.sh

.PHONY: chart
chart: $(MODTOOLS) ## helm lint and helm template of pods/chart/netdra (helm built from its module); make test-world also checks it renders what pods/base does.
	$(HELM) lint --strict pods/chart/netdra
	$(HELM) template netdra pods/chart/netdra --namespace netdra-system >/dev/null
	$(GO) run ./pods/chartgen -helm $(HELM) -check

.PHONY: e2e
e2e: node-deps $(MODTOOLS) $(PROMTOOL_STAMP) ## Run the end-to-end tests alone, on the real node (as root).
	cd shared/testinfra/testworld && GRPCURL=$(GRPCURL) HELM=$(HELM) PROMTOOL=$(PROMTOOL) $(GO) test -count=1 -p 1 -timeout 40m ./e2e/

# The chaos test on the real node: pod lifecycles, several at once, while
# nri, state, the provisioner, dra, containerd and the kubelet are killed
# with SIGKILL at random moments and restarted. CI runs 24 lifecycles (in
# the e2e tests); this runs CHAOS_LIFECYCLES (CHAOS_SEED replays the
# choices; CHAOS_VICTIMS and CHAOS_MOMENTS aim the kills; CHAOS_RUNTIME=crio
# runs it on a CRI-O node).
CHAOS_LIFECYCLES ?= 200
CHAOS_LOG        ?= /tmp/netdra-chaos.log
.PHONY: chaos
chaos: node-deps ## Run the long chaos test on the real node (as root; CHAOS_LIFECYCLES, default 200).
	cd shared/testinfra/testworld && CHAOS_LIFECYCLES=$(CHAOS_LIFECYCLES) GRPCURL=$(GRPCURL) \
		$(GO) test -count=1 -p 1 -timeout 120m -v -run 'TestE2E_Chaos$$' ./e2e/ >$(CHAOS_LOG) 2>&1; rc=$$?; \
		grep -E '^(--- |ok|FAIL)|CHAOS|kill -9|VIOLATION|chaos_test' $(CHAOS_LOG); echo "full log: $(CHAOS_LOG)"; exit $$rc

# The soak on the real node: pod lifecycles back to back (the chaos run's,
# nothing killed) for SOAK_DURATION while each netdra process's RSS, fds
# and goroutines, the state file's size and the netns and link counts are
# sampled; it rewrites the soak section of bench/RESULTS.md and
# bench/soak.png (also when the test failed: the figures show why). CI
# runs the same test for 3 minutes (in the e2e tests). The samples stay in
# the folder it names.
SOAK_DURATION ?= 1h
SOAK_LOG      ?= /tmp/netdra-soak.log
.PHONY: soak
soak: node-deps ## Run the soak on the real node and write its section of bench/RESULTS.md (as root; SOAK_DURATION, default 1h).
	@out=$$(mktemp -d /tmp/netdra-soak.XXXXXX); start=$$(date +%s); \
	( cd shared/testinfra/testworld && NETDRA_BENCH_OUT=$$out SOAK_DURATION=$(SOAK_DURATION) GRPCURL=$(GRPCURL) \
		$(GO) test -vet=off -count=1 -p 1 -timeout 0 -v -run '^TestE2E_Soak$$' ./e2e/ ) >$(SOAK_LOG) 2>&1; rc=$$?; \
	grep -E '^(--- |ok|FAIL)|SOAK|VIOLATION|soak_test' $(SOAK_LOG); echo "full log: $(SOAK_LOG)"; \
	if [ -s $$out/soak-run.jsonl ]; then \
		$(GO) -C bench/cmd run ./benchreport -soak -in $$out -out $(CURDIR)/bench/RESULTS.md -soak-png $(CURDIR)/bench/soak.png -elapsed $$(( $$(date +%s) - start ))s || rc=1; fi; \
	echo "the samples: $$out"; exit $$rc

.PHONY: world
world: world-bin node-bin ## Start the test world by hand (control plane + a real node, as root) until Ctrl-C.
	$(OUT)/testworld -dir /tmp/netdra-world

# Images. `make images` needs no container engine: pods/images (a Go
# module of its own, with go-containerregistry) builds the static binaries
# and writes one OCI image layout archive per service,
# _output/images/<service>.tar, reproducible (SOURCE_DATE_EPOCH or the
# commit's time). `make images-load` imports them into a containerd with
# ctr; `make images-engine` builds the same images from pods/Dockerfile
# with docker or podman (pods/images' tests check that both describe the
# same images).
CONTAINER_ENGINE  ?= docker
# The images' default name and tag are the chart's (values.yaml's
# image.registry, Chart.yaml's appVersion), so that the images built are
# those pods/base and the chart ask for.
IMAGE_PREFIX      ?= ghcr.io/netdra
IMAGE_TAG         ?= $(shell sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\} *$$/\1/p' pods/chart/netdra/Chart.yaml)
IMAGE_LICENSES    ?= Apache-2.0
# ctr and the containerd it talks to (the test world's real node has a ctr
# at ~/.cache/netdra-realnode/bin/ctr, and its containerd's socket under
# the node's directory).
CTR               ?= ctr
CONTAINERD_SOCKET ?= /run/containerd/containerd.sock

.PHONY: images
images: ## Build every service's image as an OCI archive, _output/images/<service>.tar (no container engine needed).
	$(GO) run -C pods/images . -root $(CURDIR) -out $(OUT)/images \
		-prefix $(IMAGE_PREFIX) -tag $(IMAGE_TAG) -licenses '$(IMAGE_LICENSES)' -go $(GO)

.PHONY: images-load
images-load: images ## Import _output/images/*.tar into containerd's k8s.io namespace (CTR, CONTAINERD_SOCKET).
	@command -v $(CTR) >/dev/null || { echo "make images-load: no ctr ('$(CTR)'): set CTR (the test world's real node has ~/.cache/netdra-realnode/bin/ctr)" >&2; exit 1; }
	@set -e; for f in $(OUT)/images/*.tar; do \
	  echo ">> $(CTR) --address $(CONTAINERD_SOCKET) -n k8s.io images import $$f"; \
	  $(CTR) --address $(CONTAINERD_SOCKET) -n k8s.io images import $$f; \
	done

.PHONY: test-images
test-images: $(MODTOOLS) ## Run pods/images' tests: the builder, pods/Dockerfile and pods/base describe the same images; one image read back; a release pushed to a registry.
	cd pods/images && $(GO) vet ./... && HELM=$(HELM) $(GO) test -vet=off -count=1 -p 1 ./...

# A release: `make release VERSION=v0.4.0` builds every image for
# RELEASE_ARCHS as one OCI index each (_output/release/<service>.tar),
# tagged VERSION under RELEASE_REGISTRY, and packages the chart with
# version 0.4.0, appVersion v0.4.0, image.registry RELEASE_REGISTRY and
# every image pinned to its index's digest (_output/release/
# netdra-0.4.0.tgz, and images.txt). PUSH=1 pushes the images and then the
# chart to oci://RELEASE_REGISTRY/charts (credentials from docker login;
# plain HTTP to a registry on localhost).
RELEASE_REGISTRY ?= $(IMAGE_PREFIX)
RELEASE_ARCHS    ?= amd64,arm64
PUSH             ?= 0

.PHONY: release
release: $(MODTOOLS) ## Build a release (VERSION=vX.Y.Z): multi-arch images as OCI indexes and the chart pinned to them; PUSH=1 pushes both to RELEASE_REGISTRY.
	@test -n "$(VERSION)" || { echo "usage: make release VERSION=vX.Y.Z [RELEASE_REGISTRY=$(IMAGE_PREFIX)] [RELEASE_ARCHS=$(RELEASE_ARCHS)] [PUSH=1]" >&2; exit 2; }
	$(GO) run -C pods/images . -root $(CURDIR) -out $(OUT)/release -release $(VERSION) \
		-prefix $(RELEASE_REGISTRY) -arch $(RELEASE_ARCHS) -licenses '$(IMAGE_LICENSES)' -go $(GO) -helm $(HELM) \
		$(if $(filter 1,$(PUSH)),-push)

.PHONY: images-engine
images-engine: ## Build every service's image from pods/Dockerfile with a container engine; fails clearly without one.
	@$(CONTAINER_ENGINE) info >/dev/null 2>&1 || { \
	  echo "make images-engine: no container engine reachable ('$(CONTAINER_ENGINE) info' failed): start one, or set CONTAINER_ENGINE (e.g. podman), or use make images (no engine needed). Nothing was built." >&2; exit 1; }
	@set -e; for s in $(SERVICES); do \
	  echo ">> $(IMAGE_PREFIX)/$$s:$(IMAGE_TAG)"; \
	  $(CONTAINER_ENGINE) build -f pods/Dockerfile --target $$s -t $(IMAGE_PREFIX)/$$s:$(IMAGE_TAG) .; \
	done

# Tilt's image build (see the Tiltfile): SERVICE's binary from _output/,
# built by `CGO_ENABLED=0 make build`, and a static grpcurl, into the dev
# image IMAGE.
DEV_GRPCURL := $(OUT)/dev/grpcurl

$(DEV_GRPCURL): $(MODTOOLS)
	@mkdir -p $(OUT)/dev
	cp $(GRPCURL) $@

.PHONY: image-dev
image-dev: $(DEV_GRPCURL)
	@test -n "$(SERVICE)" && test -n "$(IMAGE)" || { echo "usage: make image-dev SERVICE=<service> IMAGE=<image ref>" >&2; exit 2; }
	@test -x $(OUT)/$(SERVICE) -a -x $(OUT)/netdra-hook || { echo "make image-dev: $(OUT)/$(SERVICE) or $(OUT)/netdra-hook is missing: run CGO_ENABLED=0 make build" >&2; exit 1; }
	$(CONTAINER_ENGINE) build -f pods/Dockerfile --target dev --build-arg SERVICE=$(SERVICE) -t $(IMAGE) $(OUT)

.PHONY: bench
bench: node-deps ## Run the benchmarks (bench/, shared/testinfra/testworld/benchworld) and regenerate bench/RESULTS.md and bench/latency.png (root; ~20 min).
	@out=$$(mktemp -d /tmp/netdra-bench.XXXXXX); start=$$(date +%s); \
	{ NETDRA_BENCH_OUT=$$out $(GO) test -run '^$$' -bench 'State|Sriov' -benchtime 2s -count 1 ./bench/ && \
	  NETDRA_BENCH_OUT=$$out $(GO) test -run '^$$' -bench 'Attach' -benchtime 1x -count 1 -timeout 30m ./bench/ && \
	  NETDRA_BENCH_OUT=$$out $(GO) test -run '^$$' -bench 'Hook' -benchtime 300x -count 1 ./bench/ && \
	  NETDRA_BENCH_OUT=$$out $(GO) test -run '^$$' -bench BenchmarkAttach_SubifVsMove -benchtime 200x -count 1 ./services/provisioner/link/ && \
	  NETDRA_BENCH_OUT=$$out $(GO) test -run '^$$' -bench BenchmarkAttach_Settings -benchtime 200x -count 1 ./services/provisioner/link/ && \
	  ( cd shared/testinfra/testworld && NETDRA_BENCH_OUT=$$out $(GO) test -p 1 -run '^$$' -bench . -benchtime 1x -count 1 -timeout 60m ./benchworld/ ) ; \
	  echo $$? > $$out/rc; \
	} 2>&1 | grep --line-buffered -v 'level=info' | tee $$out/bench.txt; rc=$$(cat $$out/rc); \
	if [ $$rc = 0 ]; then $(GO) -C bench/cmd run ./benchreport -in $$out -out $(CURDIR)/bench/RESULTS.md -png $(CURDIR)/bench/latency.png -elapsed $$(( $$(date +%s) - start ))s; rc=$$?; fi; \
	rm -rf $$out; exit $$rc

# make bench-scale: the scale simulation (shared/testinfra/testworld/scale):
# a real control plane, netdra's operator and SCALE_NODES simulated nodes
# each running dra's real code, one run per count, stopping at the first
# that fails; it rewrites only the scale section of bench/RESULTS.md and
# bench/scale.png. SCALE_REST is the window writes at rest are counted
# over, SCALE_PODS the pods of each kind the scheduler places,
# SCALE_COMPONENT_QPS the controller-manager's and scheduler's client rate
# of a second scheduling round (scheduler_perf's 5000; 0: no second round).
SCALE_NODES ?= 100 500 1000
SCALE_REST  ?= 3m
SCALE_PODS  ?= 1000
SCALE_COMPONENT_QPS ?= 5000
.PHONY: bench-scale
bench-scale: ## Run the scale simulation at SCALE_NODES (default "100 500 1000") and regenerate RESULTS.md's scale section and bench/scale.png (root).
	@out=$$(mktemp -d /tmp/netdra-scale.XXXXXX); start=$$(date +%s); \
	( cd shared/testinfra/testworld && NETDRA_BENCH_OUT=$$out NETDRA_SCALE_NODES='$(SCALE_NODES)' NETDRA_SCALE_REST=$(SCALE_REST) NETDRA_SCALE_PODS=$(SCALE_PODS) NETDRA_SCALE_COMPONENT_QPS=$(SCALE_COMPONENT_QPS) \
	  $(GO) test -count=1 -v -run '^TestScale_Bench$$' -timeout 0 ./scale/ ) 2>&1 | grep --line-buffered -vE '^\s*>|level=(INFO|WARN).*"node=' | tee $$out/scale.txt; \
	$(GO) -C bench/cmd run ./benchreport -scale -in $$out -out $(CURDIR)/bench/RESULTS.md -scale-png $(CURDIR)/bench/scale.png -elapsed $$(( $$(date +%s) - start ))s; rc=$$?; \
	rm -rf $$out; exit $$rc

# make ci-cold: `bash .ci/run` timed as on a fresh machine: on a clean
# clone of HEAD (what is committed), with HOME (and so the Go build and
# module caches and the real node's) and KERNELRIG_DIR empty, under
# CI_COLD_DIR; the apt packages are this machine's. It rewrites the cold CI
# section of bench/RESULTS.md from the run's log, kept as
# CI_COLD_DIR/ci.log; the rest of CI_COLD_DIR is removed. Measure on a
# machine doing nothing else: a cold run is compile-bound.
CI_COLD_DIR ?= /tmp/netdra-ci-cold
.PHONY: ci-cold
ci-cold: ## Time .ci/run as on a fresh machine (clean clone of HEAD, empty caches under CI_COLD_DIR) and write RESULTS.md's cold CI section (root).
	@rm -rf $(CI_COLD_DIR) && mkdir -p $(CI_COLD_DIR)/home && git clone -q $(CURDIR) $(CI_COLD_DIR)/repo && \
	commit=$$(git -C $(CI_COLD_DIR)/repo log -1 --format='%h (%cs)'); load=$$(cut -d' ' -f1-3 /proc/loadavg); \
	echo ">> cold CI run of $$commit in $(CI_COLD_DIR) (log $(CI_COLD_DIR)/ci.log)"; \
	( cd $(CI_COLD_DIR)/repo && env -i PATH=/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
		HOME=$(CI_COLD_DIR)/home KERNELRIG_DIR=$(CI_COLD_DIR)/kernelrig CI=true bash .ci/run ) >$(CI_COLD_DIR)/ci.log 2>&1; rc=$$?; \
	tail -n 20 $(CI_COLD_DIR)/ci.log; \
	$(GO) -C bench/cmd run ./benchreport -coldci $(CI_COLD_DIR)/ci.log -coldci-rc $$rc -out $(CURDIR)/bench/RESULTS.md \
		-coldci-about "Commit $$commit on $$(nproc) cores, load average $$load at its start." || rc=1; \
	find $(CI_COLD_DIR) -mindepth 1 -maxdepth 1 ! -name ci.log -exec rm -rf {} +; exit $$rc

.PHONY: clean
clean: ## Remove build output and the installed tools.
	rm -rf $(OUT) $(TOOLS)
