package docker

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"golang.org/x/sys/unix"

	"github.com/corralhq/corral/sandbox"
)

// engineKind names an engine's flavor as CORRAL_TEST_ENGINE does.
func engineKind(fl Flavor) string {
	switch {
	case fl.Podman && fl.Rootless:
		return "podman-rootless"
	case fl.Podman:
		return "podman-rootful"
	case fl.Rootless:
		return "docker-rootless"
	}
	return "docker"
}

// hostCgroupV1 says whether this machine's cgroup hierarchy is v1 (or
// hybrid): /sys/fs/cgroup is not cgroup2 itself. The engines under test
// are this machine's, so this is the engine host's answer, read apart
// from the engine's.
func hostCgroupV1(t *testing.T) bool {
	var st unix.Statfs_t
	if err := unix.Statfs("/sys/fs/cgroup", &st); err != nil {
		t.Fatalf("statfs /sys/fs/cgroup: %v", err)
	}
	return st.Type != unix.CGROUP2_SUPER_MAGIC
}

// TestEngineLimitsOrRefusal: the engine under test is the one the run
// says (CORRAL_TEST_ENGINE: docker, the default, podman-rootful,
// podman-rootless), and corral either runs a command on it or, for an
// engine that would ignore every limit of the container (the run says
// so in CORRAL_TEST_ENGINE_LIMITS=ignored, "enforced" by default),
// refuses it: ErrUnavailable naming the cause and the fix, nothing run,
// no container made; doctor names the same problem exactly then. A
// rootless engine on a cgroup v1 machine must be "ignored" or
// "per-process": there rootless Podman's containers get their limits as
// rlimits (perProcessUlimits), which every process of the container,
// one exec'd as corral's commands are, must carry.
func TestEngineLimitsOrRefusal(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	fl, err := f.e.flavor(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := os.Getenv("CORRAL_TEST_ENGINE")
	if want == "" {
		want = "docker"
	}
	if got := engineKind(fl); got != want {
		t.Fatalf("the engine at %s is %s (%+v); CORRAL_TEST_ENGINE says %s", f.e.address().Addr, got, fl, want)
	}
	// Whether the engine enforces limits, as the run found apart from
	// corral (.ci/run: the cgroup version and, on v2, the controllers
	// delegated to the rootless service's cgroup); a rootless engine on
	// a cgroup v1 machine never does.
	limits := os.Getenv("CORRAL_TEST_ENGINE_LIMITS")
	if limits == "" {
		limits = "enforced"
	}
	if fl.Rootless && hostCgroupV1(t) && limits != "ignored" && limits != "per-process" {
		t.Fatalf("a rootless engine on this cgroup v1 machine, but CORRAL_TEST_ENGINE_LIMITS says %q", limits)
	}
	refuse := limits == "ignored"
	perProcess := limits == "per-process"
	if (fl.NoLimits != "") != refuse || (fl.PerProcess != "") != perProcess {
		t.Errorf("flavor %+v: corral's reading of the limits, want them %s", fl, limits)
	}
	if perProcess {
		// Each limit as the kernel holds it for a process of the
		// container (proc(5)'s limits: soft, hard), the session's
		// first command and a later one alike.
		req := &sandbox.Request{Argv: []string{"cat", "/proc/self/limits"}, Policy: sandbox.Policy{Workdir: f.ws, Profile: sandbox.ProfileWorkspace, Limits: sandbox.Limits{CPUSeconds: 17}}, Session: "limits", Timeout: time.Minute}
		for i := range 2 {
			var out strings.Builder
			req.Stdout = &out
			res, err := f.b.Run(ctx, req)
			if err != nil || res.ExitCode != 0 {
				t.Fatalf("Run %d: %v %+v", i, err, res)
			}
			p, err := f.b.st.check(os.Getuid(), os.Getgid())
			if err != nil {
				t.Fatal(err)
			}
			want := map[string][2]string{
				"Max data size": {strconv.FormatInt(p.memory, 10), strconv.FormatInt(p.memory, 10)},
				"Max processes": {strconv.Itoa(f.b.st.PidsLimit), strconv.Itoa(f.b.st.PidsLimit)},
				"Max cpu time":  {"17", "18"}, // the agent's soft limit, made hard for each command by its reaper
			}
			for line := range strings.SplitSeq(out.String(), "\n") {
				for name, w := range want {
					if rest, ok := strings.CutPrefix(line, name); ok {
						if fs := strings.Fields(rest); len(fs) < 2 || fs[0] != w[0] || fs[1] != w[1] {
							t.Errorf("%s: %q, want soft %s, hard %s", name, rest, w[0], w[1])
						}
						delete(want, name)
					}
				}
			}
			if len(want) > 0 {
				t.Errorf("no %v in the container's limits:\n%s", want, out.String())
			}
		}
	}
	d := f.e.Diagnose(ctx, f.b.st)
	named := false
	for _, p := range d.Problems {
		named = named || strings.Contains(p.What, "would ignore containers' limits")
	}
	if named != refuse || d.Facts == nil {
		t.Errorf("doctor's problems %+v (facts %+v), want the limits one: %v", d.Problems, d.Facts, refuse)
	} else if (d.Facts.Flavor.PerProcess != "") != perProcess {
		t.Errorf("doctor's facts %+v, want limits per process: %v", d.Facts, perProcess)
	}

	marker := filepath.Join(f.ws, "ran")
	req := &sandbox.Request{Argv: []string{"touch", marker}, Policy: sandbox.Policy{Workdir: f.ws, Profile: sandbox.ProfileWorkspace}, Session: "limits", Timeout: time.Minute}
	res, err := f.b.Run(ctx, req)
	if !refuse {
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("Run: %v %+v", err, res)
		}
		if _, err := os.Stat(marker); err != nil {
			t.Errorf("the command did not run: %v", err)
		}
		return
	}
	if !errors.Is(err, sandbox.ErrUnavailable) {
		t.Fatalf("a rootless engine on cgroup v1: %v %+v, want ErrUnavailable", err, res)
	}
	for _, w := range []string{"rootless engine", fl.NoLimits, "ignore containers' limits", "nothing was run", "rootful engine", "cgroup v2"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("the refusal lacks %q: %v", w, err)
		}
	}
	if _, err := os.Lstat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the refused command ran: %s: %v", marker, err)
	}
	cs, err := f.cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: client.Filters{}.Add("label", LabelOwner+"="+f.e.self.String())})
	if err != nil {
		t.Fatal(err)
	}
	if len(cs.Items) != 0 {
		t.Errorf("%d container(s) made for a refused engine", len(cs.Items))
	}
}

// TestMaskedPaths: what the spec masks (maskedPaths) and makes read-only
// (readonlyPaths) in /proc and /sys is so in a running container, on
// every engine: each masked path the container has is a mount of its own
// that reads as empty, each read-only one a read-only mount. /proc/kcore
// and /proc/sys, which every host here has, must be among them.
func TestMaskedPaths(t *testing.T) {
	f := newFixture(t, nil)
	var script strings.Builder
	for _, p := range maskedPaths {
		// A file reads as no bytes, a directory lists nothing.
		script.WriteString(`p=` + p + `; if [ -d "$p" ]; then echo "M $p dir $(ls -A "$p" 2>&1 | wc -l)"; elif [ -e "$p" ]; then echo "M $p file $(head -c 64 "$p" 2>&1 | wc -c) $(head -c 64 "$p" >/dev/null 2>&1; echo $?)"; fi` + "\n")
	}
	for _, p := range readonlyPaths {
		script.WriteString(`[ -e ` + p + ` ] && echo "R ` + p + `"` + "\n")
	}
	script.WriteString("cat /proc/self/mountinfo\n")
	res, out := f.run("masked", script.String())
	if res.ExitCode != 0 {
		t.Fatalf("exit %d: %s", res.ExitCode, out)
	}
	// The last mount at each mount point is the one seen there.
	opts := map[string]string{}
	for line := range strings.SplitSeq(out, "\n") {
		fs := strings.Fields(line)
		if len(fs) > 6 && strings.Contains(line, " - ") {
			opts[strings.ReplaceAll(fs[4], `\040`, " ")] = fs[5]
		}
	}
	seen := map[string]bool{}
	for line := range strings.SplitSeq(out, "\n") {
		fs := strings.Fields(line)
		switch {
		case len(fs) >= 4 && fs[0] == "M":
			p := fs[1]
			seen[p] = true
			if _, ok := opts[p]; !ok {
				t.Errorf("%s: not masked (no mount of its own)", p)
			}
			empty := fs[2] == "dir" && fs[3] == "0" || fs[2] == "file" && len(fs) == 5 && fs[3] == "0" && fs[4] == "0"
			if !empty {
				t.Errorf("%s: not empty in the container: %s", p, line)
			}
		case len(fs) == 2 && fs[0] == "R":
			p := fs[1]
			seen[p] = true
			if o, ok := opts[p]; !ok || !strings.HasPrefix(o, "ro") {
				t.Errorf("%s: not a read-only mount (options %q)", p, o)
			}
		}
	}
	for _, p := range []string{"/proc/kcore", "/proc/sys"} {
		if _, err := os.Stat(p); err == nil && !seen[p] {
			t.Errorf("%s: on the host, missing in the container:\n%s", p, out)
		}
	}
	if len(seen) == 0 {
		t.Fatalf("no masked or read-only path checked:\n%s", out)
	}
}
