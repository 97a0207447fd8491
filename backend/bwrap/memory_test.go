package bwrap

import (
	"testing"

	"github.com/corralhq/corral/hostview"
	"github.com/corralhq/corral/internal/tail"
	"github.com/corralhq/corral/sandbox"
)

func TestDataLimit(t *testing.T) {
	for mb, want := range map[int]uint64{256: 256 << 20, 2048: 2048 << 20, 0: 0, -1: 0} {
		if got := dataLimit(mb); got != want {
			t.Errorf("dataLimit(%d) = %d, want %d", mb, got, want)
		}
	}
}

// TestLimitHitMemory: what runtimes print when an allocation fails under
// RLIMIT_DATA (each line as measured in a sandbox here) is told apart as
// the memory limit, only where memory_mb is set and the command failed.
func TestLimitHitMemory(t *testing.T) {
	lim := sandbox.Limits{MemoryMB: 256}
	for _, end := range []string{
		"Traceback (most recent call last):\n  File \"<string>\", line 1, in <module>\nMemoryError\n",
		"fatal error: runtime: out of memory\n",
		"#\n# Fatal process out of memory: Zone\n#\n",
		"# There is insufficient memory for the Java Runtime Environment to continue.\n",
		"Exception in thread \"main\" java.lang.OutOfMemoryError: Java heap space\n",
		"bomb: malloc: Cannot allocate memory\n",
	} {
		tb := &tail.Buffer{Size: 8 << 10}
		tb.Write([]byte(end))
		if got := limitHit(&sandbox.Result{ExitCode: 1}, lim, tb); got != sandbox.LimitMemory {
			t.Errorf("limitHit(%q) = %q, want %q", end, got, sandbox.LimitMemory)
		}
		if got := limitHit(&sandbox.Result{ExitCode: 1}, sandbox.Limits{}, tb); got != "" {
			t.Errorf("limitHit(%q) without memory_mb = %q, want none", end, got)
		}
		if got := limitHit(&sandbox.Result{ExitCode: 0}, lim, tb); got != "" {
			t.Errorf("limitHit(%q) of a command that succeeded = %q, want none", end, got)
		}
	}
	tb := &tail.Buffer{Size: 8 << 10}
	tb.Write([]byte("error: no such file\n"))
	if got := limitHit(&sandbox.Result{ExitCode: 1}, lim, tb); got != "" {
		t.Errorf("limitHit of an unrelated failure = %q, want none", got)
	}
}

// TestWithJavaMaxRAM: the JVM is told memory_mb first in
// JAVA_TOOL_OPTIONS, the command's own options after it (they win), and a
// session's saved copy of a previous command's option is replaced, never
// stacked.
func TestWithJavaMaxRAM(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  []string
		mb   int
		want string // JAVA_TOOL_OPTIONS; "-" for unset
	}{
		{"none before", []string{"PATH=/bin"}, 256, "-XX:MaxRAM=256m"},
		{"the command's own options after", []string{"JAVA_TOOL_OPTIONS=-Dfile.encoding=UTF-8 -XX:MaxRAM=1g"}, 256, "-XX:MaxRAM=256m -Dfile.encoding=UTF-8 -XX:MaxRAM=1g"},
		{"a previous command's, saved by the session", []string{"JAVA_TOOL_OPTIONS=-XX:MaxRAM=256m -Dx=1"}, 512, "-XX:MaxRAM=512m -Dx=1"},
		{"the same again: unchanged", []string{"JAVA_TOOL_OPTIONS=-XX:MaxRAM=256m"}, 256, "-XX:MaxRAM=256m"},
		{"no per-process memory: corral's option goes", []string{"JAVA_TOOL_OPTIONS=-XX:MaxRAM=256m -Dx=1"}, 0, "-Dx=1"},
		{"no per-process memory: an only option goes with its variable", []string{"JAVA_TOOL_OPTIONS=-XX:MaxRAM=256m"}, 0, "-"},
		{"no per-process memory: others untouched", []string{"JAVA_TOOL_OPTIONS= -Dx=1 -XX:MaxRAM=2g"}, 0, " -Dx=1 -XX:MaxRAM=2g"},
		{"not corral's form (g) is the command's", []string{"JAVA_TOOL_OPTIONS=-XX:MaxRAM=2g"}, 256, "-XX:MaxRAM=256m -XX:MaxRAM=2g"},
		{"nothing at all", []string{"PATH=/bin"}, 0, "-"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := withJavaMaxRAM(tc.env, tc.mb)
			v, ok := hostview.LookupEnv(got, "JAVA_TOOL_OPTIONS")
			if !ok {
				v = "-"
			}
			if v != tc.want {
				t.Errorf("JAVA_TOOL_OPTIONS = %q, want %q (env %q)", v, tc.want, got)
			}
			if p, _ := hostview.LookupEnv(got, "PATH"); p != "" && p != "/bin" {
				t.Errorf("PATH changed: %q", got)
			}
		})
	}
}

func TestCutCorralMaxRAM(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		cut      bool
	}{
		{"-XX:MaxRAM=256m", "", true},
		{"-XX:MaxRAM=256m -Dx=1", "-Dx=1", true},
		{"  -XX:MaxRAM=8192m   -Dx=1", "-Dx=1", true},
		{"-XX:MaxRAM=256", "-XX:MaxRAM=256", false},
		{"-XX:MaxRAM=256k", "-XX:MaxRAM=256k", false},
		{"-XX:MaxRAM=m", "-XX:MaxRAM=m", false},
		{"-XX:MaxRAM=256mx", "-XX:MaxRAM=256mx", false},
		{"-Dx=1 -XX:MaxRAM=256m", "-Dx=1 -XX:MaxRAM=256m", false},
		{"", "", false},
	} {
		got, cut := cutCorralMaxRAM(tc.in)
		if got != tc.want || cut != tc.cut {
			t.Errorf("cutCorralMaxRAM(%q) = %q, %v; want %q, %v", tc.in, got, cut, tc.want, tc.cut)
		}
	}
}
