package layer

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkChangesApply measures Changes, Diff and Apply of 100 changed
// files (in 100 directories) in a working directory of 20,000. Changes
// and Diff cost what upper holds; Apply also reads and rewrites
// base.json (one entry per path of Lower), writes its journal twice and
// syncs the filesystem twice (bench/applybench measures many files).
func BenchmarkChangesApply(b *testing.B) {
	base := os.Getenv("CORRAL_TEST_DIR")
	if base == "" {
		base = "/var/tmp"
	}
	root, err := os.MkdirTemp(base, "corral-layer-bench-")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(root)
	lower := filepath.Join(root, "lower")
	for i := 0; i < 20000; i++ {
		p := filepath.Join(lower, fmt.Sprintf("d%03d", i/100), fmt.Sprintf("f%d.txt", i))
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, []byte("line\n"), 0o644)
	}
	var changesT, diffT, applyT time.Duration
	b.ResetTimer()
	for n := 0; n < b.N; n++ {
		b.StopTimer()
		l := New(filepath.Join(root, fmt.Sprintf("layer%d", n)), lower)
		if err := l.Ensure(); err != nil {
			b.Fatal(err)
		}
		for i := 0; i < 100; i++ {
			p := filepath.Join(l.Upper(), fmt.Sprintf("d%03d", i), fmt.Sprintf("f%d.txt", i*100))
			os.MkdirAll(filepath.Dir(p), 0o755)
			os.WriteFile(p, []byte(fmt.Sprintf("line\nmore %d\n", n)), 0o644)
		}
		b.StartTimer()
		t0 := time.Now()
		cs, err := Changes(l, nil)
		changesT += time.Since(t0)
		if err != nil || len(cs) != 100 {
			b.Fatal(err, len(cs))
		}
		t0 = time.Now()
		if err := Diff(discard{}, cs, DiffOptions{}); err != nil {
			b.Fatal(err)
		}
		diffT += time.Since(t0)
		t0 = time.Now()
		if _, err := Apply(l, nil, ApplyOptions{}); err != nil {
			b.Fatal(err)
		}
		applyT += time.Since(t0)
	}
	b.ReportMetric(float64(changesT.Microseconds())/float64(b.N), "changes-us/op")
	b.ReportMetric(float64(diffT.Microseconds())/float64(b.N), "diff-us/op")
	b.ReportMetric(float64(applyT.Microseconds())/float64(b.N), "apply-us/op")
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
