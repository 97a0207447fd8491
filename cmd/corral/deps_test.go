package main

import (
	"bufio"
	"bytes"
	"os/exec"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// helperPackages are the packages whose code runs when corral's executable
// is re-executed as a helper (reexec and the packages that
// register modes with it), and what they may not link.
// TestHelperDependencies also finds every package that imports reexec
// and fails on one that is neither here nor in hostHelpers.
var helperPackages = []string{
	"github.com/corralhq/corral/reexec",
	"github.com/corralhq/corral/egress/inside",
	"github.com/corralhq/corral/netproxy/forward",
	"github.com/corralhq/corral/sandboxfs",
	"github.com/corralhq/corral/inside",
	"github.com/corralhq/corral/inside/tunnel",
	"github.com/corralhq/corral/internal/reaper",
	"github.com/corralhq/corral/portfwd",
	"github.com/corralhq/corral/secrets/gitcred",
	"github.com/corralhq/corral/cmd/corral-helper",
}

// hostHelpers are packages that import reexec for a mode that runs on the
// host, outside every sandbox, or that only call helpers; badHelperDeps
// do not apply to them.
var hostHelpers = map[string]string{
	"github.com/corralhq/corral/backend/bwrap":      "its layer holder runs on the host, beside the session",
	"github.com/corralhq/corral/helperbin":          "finds and checks the helper executable, on the host",
	"github.com/corralhq/corral/backend/local":      "asks whether reexec.Init ran before it re-executes corral as the reaper",
	"github.com/corralhq/corral/backend/docker":     "names, on the host, the variable of limits its containers' helpers read (reexec.RlimitsEnv); it registers no mode",
	"github.com/corralhq/corral/cmd/corral":         "the executable itself: it dispatches every mode",
	"github.com/corralhq/corral/bench/reviewbench":  "a bench program",
	"github.com/corralhq/corral/bench/sessionbench": "a bench program",
}

// badHelperDeps are import path prefixes a helper must not link, with why
// (issue 13: helpers never import net/http, the moby client or the MCP
// SDK).
var badHelperDeps = map[string]string{
	"net/http":                         "the host-side proxies' HTTP stack; a helper relays bytes",
	"github.com/moby/":                 "the Docker engine client; helpers run inside sandboxes and containers",
	"github.com/docker/":               "Docker libraries, pulled by the engine client",
	"github.com/distribution/":         "image reference parsing, pulled by the engine client (3600 allocations at init)",
	"github.com/modelcontextprotocol/": "the MCP SDK; only `corral mcp` serves MCP",
	"github.com/google/jsonschema-go/": "the MCP SDK's schemas",
	"k8s.io/":                          "client-go and the Kubernetes API types; only the host talks to the API server",
	"sigs.k8s.io/":                     "Kubernetes libraries, pulled by client-go",
	"github.com/spf13/cobra":           "the CLI; a helper has no command line to parse",
	"github.com/knadh/koanf":           "the settings; a helper is told what to do by corral",
}

// TestHelperExecutableHasEveryMode checks that cmd/corral-helper, the small
// executable of the helper modes, links every package whose mode runs
// inside sandboxes, so that it can stand in for corral's executable there.
func TestHelperExecutableHasEveryMode(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("the go tool is not on PATH: cannot list the helper's dependencies")
	}
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", "github.com/corralhq/corral/cmd/corral-helper").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	for _, pkg := range helperPackages {
		if !slices.Contains(deps, pkg) {
			t.Errorf("cmd/corral-helper does not link %s: its mode would be missing inside sandboxes", pkg)
		}
	}
}

func TestHelperDependencies(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("the go tool is not on PATH: cannot list the helpers' dependencies")
	}
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, "github.com/corralhq/corral/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) > 1 && slices.Contains(f[1:], "github.com/corralhq/corral/reexec") && !slices.Contains(helperPackages, f[0]) && hostHelpers[f[0]] == "" {
			t.Errorf("%s imports reexec but is in neither helperPackages nor hostHelpers: say whether its mode runs inside sandboxes", f[0])
		}
	}
	for _, pkg := range helperPackages {
		out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", pkg).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", pkg, err)
		}
		for _, dep := range strings.Fields(string(out)) {
			for bad, why := range badHelperDeps {
				if dep == bad || strings.HasSuffix(bad, "/") && strings.HasPrefix(dep, bad) {
					t.Errorf("helper package %s links %s: %s", pkg, dep, why)
				}
			}
		}
	}
}

// initAllocBudget bounds the allocations of package initialisation of the
// corral binary, summed over GODEBUG=inittrace=1's lines (allocation
// counts are deterministic, unlike clock times, which are never gated on).
// Measured 2026-12-01: 6281 in all, of which github.com/distribution/
// reference 3600 and opencontainers/go-digest 841 (both linked by the moby
// client), encoding/gob 368 and jsonschema 296 (the MCP SDK), yaml 276;
// corral's own packages about 20 (from 2030 before their regexps and tables
// became lazy). The kubernetes backend's client-go (REST client, exec, two
// API groups; not the typed clientset, which alone made 14,000) brought it
// to 10,555 (2026-12-01): k8s.io/apimachinery validation 479, api/core/v1
// 405, apimachinery/util/version 322, client auth exec 312, meta/v1 259.
const (
	initAllocBudget    = 11500
	ownInitAllocBudget = 60
)

// initAllocRuns is how many times TestInitAllocations runs the binary; each
// package's count is the least it made in any run. A package's inittrace
// count takes in whatever other goroutines (klog's flusher, otel, the
// runtime) allocate while it initialises, and packages that range over maps
// allocate differently from run to run (Go randomises map iteration), so
// one run's counts vary: the egress package measured 2, 3 or 4 and
// seccomp 3 or 6 in 30 runs, and CI once went over the budget from that
// noise alone. Noise only ever adds, so the least of a few runs is the
// package's own cost.
const initAllocRuns = 5

func TestInitAllocations(t *testing.T) {
	least := map[string]int{}
	for run := 0; run < initAllocRuns; run++ {
		counts := initTrace(t)
		if len(counts) < 50 {
			t.Fatalf("only %d inittrace lines; is GODEBUG=inittrace=1 honoured?", len(counts))
		}
		for pkg, n := range counts {
			if m, ok := least[pkg]; !ok || n < m {
				least[pkg] = n
			}
		}
	}
	total, own := 0, 0
	var ours []string
	for pkg, n := range least {
		total += n
		if strings.HasPrefix(pkg, "github.com/corralhq/") {
			own += n
			if n > 0 {
				ours = append(ours, pkg+" "+strconv.Itoa(n))
			}
		}
	}
	sort.Strings(ours)
	t.Logf("init allocations (least of %d runs): %d in all, %d in corral's packages (%s)", initAllocRuns, total, own, strings.Join(ours, ", "))
	if total > initAllocBudget {
		t.Errorf("package initialisation makes %d allocations, over the budget of %d: a heavy package came back into the binary, or a package computes at init (see GODEBUG=inittrace=1 %s --help)", total, initAllocBudget, corralBin)
	}
	if own > ownInitAllocBudget {
		t.Errorf("corral's own packages make %d allocations at init, over %d (%s): build regexps and tables at first use (internal/lazyre, sync.OnceValue)", own, ownInitAllocBudget, strings.Join(ours, ", "))
	}
}

// initTrace runs corral --help once with GODEBUG=inittrace=1 and returns
// each package's allocation count from its line, "init PKG @T ms, C ms
// clock, B bytes, A allocs" (runtime package documentation, GODEBUG).
func initTrace(t *testing.T) map[string]int {
	t.Helper()
	cmd := exec.Command(corralBin, "--help")
	// One P: fewer other goroutines run while a package initialises.
	cmd.Env = []string{"GODEBUG=inittrace=1", "GOMAXPROCS=1", "PATH=/usr/bin:/bin", "HOME=" + t.TempDir()}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("corral --help: %v\n%s", err, stderr.String())
	}
	counts := map[string]int{}
	sc := bufio.NewScanner(&stderr)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 11 || f[0] != "init" || f[10] != "allocs" {
			continue
		}
		n, err := strconv.Atoi(f[9])
		if err != nil {
			t.Fatalf("unreadable inittrace line %q", sc.Text())
		}
		counts[f[1]] += n
	}
	return counts
}

// TestNoPrometheusClient: corral's executable links no Prometheus
// library. Every command pays every linked package's init, and
// client_golang's cost 15% more instructions per start (docs/serve.md,
// "Metrics"); package metrics writes the format itself, and the
// reference parser (prometheus/common/expfmt) is for tests alone.
func TestNoPrometheusClient(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("the go tool is not on PATH: cannot list corral's dependencies")
	}
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", "github.com/corralhq/corral/cmd/corral").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, p := range strings.Fields(string(out)) {
		if strings.HasPrefix(p, "github.com/prometheus/") {
			t.Errorf("corral links %s", p)
		}
	}
}
