# netdra — node network driver. `make help` lists the targets.

SHELL := /usr/bin/env bash -o pipefail
.DEFAULT_GOAL := help

GO        ?= go
TOOLS     := $(CURDIR)/.tools
TOOLS_BIN := $(TOOLS)/bin
OUT       := $(CURDIR)/_output
SERVICES  := $(patsubst services/%/main.go,%,$(wildcard services/*/main.go))

# Pinned tools, installed from the module proxy by `make tools`.
BUF_VERSION                 := v1.75.0
PROTOC_GEN_GO_VERSION       := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION  := v1.6.2
GRPCURL_VERSION             := v1.9.4
CONTROLLER_TOOLS_VERSION    := v0.23.0

BUF     := $(TOOLS_BIN)/buf
GRPCURL := $(TOOLS_BIN)/grpcurl
CONTROLLER_GEN := $(TOOLS_BIN)/controller-gen
export PATH := $(TOOLS_BIN):$(PATH)

# Tests: the state and rpc suites run real processes; keep parallelism sane
# on 2 cores.
GOTEST_FLAGS ?= -count=1 -p 2 -timeout 20m

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  \033[36m%-14s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

# tool installs one pinned tool: $(call tool,name,module/cmd,version)
define tool
$(TOOLS)/stamps/$(1)-$(3):
	@echo ">> installing $(1) $(3) (cached after the first time)"
	@mkdir -p $(TOOLS_BIN) $(TOOLS)/stamps
	GOBIN=$(TOOLS_BIN) $(GO) install $(2)@$(3)
	@rm -f $(TOOLS)/stamps/$(1)-* && touch $$@
TOOL_STAMPS += $(TOOLS)/stamps/$(1)-$(3)
endef
$(eval $(call tool,buf,github.com/bufbuild/buf/cmd/buf,$(BUF_VERSION)))
$(eval $(call tool,protoc-gen-go,google.golang.org/protobuf/cmd/protoc-gen-go,$(PROTOC_GEN_GO_VERSION)))
$(eval $(call tool,protoc-gen-go-grpc,google.golang.org/grpc/cmd/protoc-gen-go-grpc,$(PROTOC_GEN_GO_GRPC_VERSION)))
$(eval $(call tool,grpcurl,github.com/fullstorydev/grpcurl/cmd/grpcurl,$(GRPCURL_VERSION)))
$(eval $(call tool,controller-gen,sigs.k8s.io/controller-tools/cmd/controller-gen,$(CONTROLLER_TOOLS_VERSION)))

.PHONY: tools
tools: $(TOOL_STAMPS) ## Install the pinned tools into .tools/bin.

.PHONY: build
build: ## Build every service binary into _output/.
	@mkdir -p $(OUT)
	$(GO) build -o $(OUT)/ $(addprefix ./services/,$(SERVICES))

# Generated code, checked by checkgenerate.
GENERATED := protos shared/apis pods/crds

.PHONY: generate
generate: tools ## Generate the protos' Go code (buf), deepcopy and the CRDs (controller-gen).
	$(BUF) generate
	$(CONTROLLER_GEN) object paths=./shared/apis/...
	$(CONTROLLER_GEN) crd paths=./shared/apis/... output:crd:artifacts:config=pods/crds

.PHONY: checkgenerate
checkgenerate: generate ## Fail when the committed generated code is stale.
	@git diff --exit-code -- $(GENERATED) || { echo "generated code is stale: run make generate and commit"; exit 1; }
	@test -z "$$(git status --porcelain -- $(GENERATED))" || { git status --porcelain -- $(GENERATED); echo "generated files are not committed"; exit 1; }

.PHONY: lint
lint: tools ## buf lint, gofmt, go vet.
	$(BUF) lint
	@out=$$(gofmt -l $$(git ls-files '*.go')); test -z "$$out" || { echo "gofmt would change:"; echo "$$out"; exit 1; }
	$(GO) vet ./...
	$(GO) vet -tags kernelrig ./...
	@cd shared/testworld && out=$$($(GO) mod tidy -diff 2>&1) || { echo "shared/testworld/go.mod is not tidy (run go mod tidy there):"; echo "$$out"; exit 1; }

.PHONY: test
test: tools checkgenerate lint test-unit test-kernel test-world ## Run every test, all set-up included (as root).

.PHONY: test-unit
test-unit: ## Run the tests on this machine's kernel (root tests use throwaway netns).
	GRPCURL=$(GRPCURL) $(GO) test $(GOTEST_FLAGS) ./...

# Packages with kernel-rig tests (//go:build kernelrig); see shared/kernelrig/README.md.
KERNEL_PKGS = $(shell grep -rlE --include='*_test.go' --exclude-dir=.git --exclude-dir=.tools --exclude-dir=_output --exclude-dir=testdata '^//go:build.*\bkernelrig\b' . | xargs -r -n1 dirname | sort -u)

.PHONY: test-kernel
test-kernel: ## Run the kernel-rig tests in QEMU (dummy, VLAN, SR-IOV VFs); builds the rig once.
	bash shared/kernelrig/setup.sh
	CGO_ENABLED=0 $(GO) test -tags kernelrig -exec "$(CURDIR)/shared/kernelrig/vmrun.sh" -p 1 -count=1 -timeout 30m $(KERNEL_PKGS)

# Where `make dev` keeps its sockets and state; removed when it stops.
DEV_DIR ?= /tmp/netdra-dev

define DEV_SCRIPT
set -euo pipefail
dir=$(DEV_DIR); bin=$(OUT); grpcurl=$(GRPCURL)
rm -rf "$$dir"; mkdir -p "$$dir"
cleanup() {
  trap - INT TERM EXIT
  kill $$(jobs -p) 2>/dev/null || true; wait || true
  ip link del ndemo0 2>/dev/null || true
  rm -rf "$$dir"; echo ">> stopped; processes, the demo veth and $$dir removed"
}
trap cleanup INT TERM EXIT
$$bin/state -socket "$$dir/state.sock" -db "$$dir/state.db" 2>"$$dir/state.log" &
$$bin/provisioner -socket "$$dir/provisioner.sock" 2>"$$dir/provisioner.log" &
for p in state provisioner; do
  for i in $$(seq 100); do $$bin/$$p health -socket "$$dir/$$p.sock" 2>/dev/null && break; sleep 0.1; done
  $$bin/$$p health -socket "$$dir/$$p.sock" || { cat "$$dir/$$p.log"; exit 1; }
  echo ">> $$p serving on $$dir/$$p.sock (log: $$dir/$$p.log)"
done
echo ">> demo device: veth ndemo0 (peer ndemo1), offered by the host manager"
ip link add ndemo0 type veth peer name ndemo1
$$grpcurl -plaintext -unix -d '{"managers":{"host":{"enabled":true,"ifNames":["ndemo0"]}}}' \
  "$$dir/provisioner.sock" netdra.provisioner.v1.ProvisionerService/Configure
echo
echo "Look around:"
echo "  $$grpcurl -plaintext -unix $$dir/state.sock list"
echo "  $$grpcurl -plaintext -unix $$dir/provisioner.sock list"
echo "  $$grpcurl -plaintext -unix -max-time 2 $$dir/provisioner.sock netdra.provisioner.v1.ProvisionerService/WatchDevices"
echo "  $$grpcurl -plaintext -unix $$dir/state.sock netdra.state.v1.StateService/Dump"
echo
echo "Running until Ctrl-C."
wait
endef
export DEV_SCRIPT

.PHONY: dev
dev: build $(TOOLS)/stamps/grpcurl-$(GRPCURL_VERSION) ## Run netdra's node processes locally until Ctrl-C.
	@bash -c "$$DEV_SCRIPT"

# The test world: a real control plane, an emulated kubelet and the NRI
# runtime side, in its own Go module (shared/testworld). The first build of
# Kubernetes from module sources takes about 7 minutes on 2 cores; later
# builds reuse the Go build cache.
.PHONY: test-world
test-world: ## Run the test world's tests, the operator's and the end-to-end tests (real control plane).
	@echo ">> test world: building Kubernetes v1.37.2 from module sources if not cached (about 7 minutes the first time)"
	cd shared/testworld && $(GO) vet ./... && GRPCURL=$(GRPCURL) $(GO) test -count=1 -p 1 -timeout 40m ./...

.PHONY: world
world: ## Start the test world by hand (control plane + node) until Ctrl-C.
	cd shared/testworld && $(GO) run ./cmd/testworld -dir /tmp/netdra-world

.PHONY: bench
bench: ## Run the benchmarks in bench/ (ratios against a baseline of the same run).
	$(GO) test -run '^$$' -bench . -benchtime 2s -count 1 ./bench/...

.PHONY: clean
clean: ## Remove build output and the installed tools.
	rm -rf $(OUT) $(TOOLS)
