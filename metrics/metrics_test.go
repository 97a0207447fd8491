package metrics

import (
	"bytes"
	"math"
	"strings"
	"sync"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// parse reads r's page with the reference parser of the text format
// (github.com/prometheus/common/expfmt), failing the test on any error.
func parse(t *testing.T, r *Registry) (map[string]*dto.MetricFamily, string) {
	t.Helper()
	var b bytes.Buffer
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(b.Bytes()))
	if err != nil {
		t.Fatalf("the reference parser refuses the page: %v\n%s", err, b.String())
	}
	return fams, b.String()
}

func labelsOf(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

func TestTextFormatParsesWithEscapes(t *testing.T) {
	r := NewRegistry()
	c := r.Counter("corral_test_total", "A counter \\ with a backslash\nand a line feed.", "tool", "outcome")
	odd := []string{`back\slash`, `quo"te`, "line\nfeed", "ütf-8 ✓", ""}
	for i, v := range odd {
		c.With(v, "ok").Add(float64(i + 1))
	}
	g := r.Gauge("corral_test_gauge", "A gauge.")
	g.With().Set(-2.5)
	g.With().Add(1)
	r.GaugeFunc("corral_test_func", "Computed.", []string{"k"}, func() []Sample {
		return []Sample{{Labels: []string{"b"}, Value: math.Inf(1)}, {Labels: []string{"a"}, Value: 3}, {Labels: []string{"x", "y"}, Value: 9}}
	})
	fams, page := parse(t, r)
	f := fams["corral_test_total"]
	if f.GetType() != dto.MetricType_COUNTER || f.GetHelp() != "A counter \\ with a backslash\nand a line feed." {
		t.Fatalf("counter family %v", f)
	}
	got := map[string]float64{}
	for _, m := range f.GetMetric() {
		got[labelsOf(m)["tool"]] = m.GetCounter().GetValue()
	}
	for i, v := range odd {
		if got[v] != float64(i+1) {
			t.Errorf("label value %q: parsed back %v, want %d (page:\n%s)", v, got, i+1, page)
		}
	}
	if v := fams["corral_test_gauge"].GetMetric()[0].GetGauge().GetValue(); v != -1.5 {
		t.Errorf("gauge %v, want -1.5", v)
	}
	ff := fams["corral_test_func"].GetMetric()
	if len(ff) != 2 || labelsOf(ff[0])["k"] != "a" || !math.IsInf(ff[1].GetGauge().GetValue(), 1) {
		t.Errorf("func gauge: %v (the sample with two label values must be left out, the rest sorted)", ff)
	}
}

func TestHistogramConsistent(t *testing.T) {
	r := NewRegistry()
	h := r.Histogram("corral_test_seconds", "Latency.", []float64{0.1, 1, 10}, "tool")
	obs := []float64{0.05, 0.1, 0.5, 1, 5, 50, 0}
	for _, v := range obs {
		h.With("bash").Observe(v)
	}
	h.With("read_file").Observe(0.2)
	fams, page := parse(t, r)
	f := fams["corral_test_seconds"]
	if f.GetType() != dto.MetricType_HISTOGRAM || len(f.GetMetric()) != 2 {
		t.Fatalf("histogram family %v", f)
	}
	m := f.GetMetric()[0]
	if labelsOf(m)["tool"] != "bash" {
		t.Fatalf("first series %v, want bash (sorted)", labelsOf(m))
	}
	hg := m.GetHistogram()
	// le is inclusive: 0, 0.05, 0.1 <= 0.1; 0.5, 1 <= 1; 5 <= 10; 50 only +Inf.
	want := map[float64]uint64{0.1: 3, 1: 5, 10: 6, math.Inf(1): 7}
	for _, b := range hg.GetBucket() {
		if want[b.GetUpperBound()] != b.GetCumulativeCount() {
			t.Errorf("bucket le=%v: %d, want %d\n%s", b.GetUpperBound(), b.GetCumulativeCount(), want[b.GetUpperBound()], page)
		}
	}
	if hg.GetSampleCount() != uint64(len(obs)) || hg.GetSampleSum() != 56.65 {
		t.Errorf("count %d sum %v, want %d and 56.65", hg.GetSampleCount(), hg.GetSampleSum(), len(obs))
	}
	if !strings.Contains(page, `corral_test_seconds_bucket{tool="bash",le="+Inf"} 7`) {
		t.Errorf("no +Inf bucket equal to the count:\n%s", page)
	}
}

// TestConcurrentScrapes observes and scrapes at once (run with -race):
// every scrape's histogram has its +Inf bucket equal to its count, and
// the final figures are exact.
func TestConcurrentScrapes(t *testing.T) {
	r := NewRegistry()
	h := r.Histogram("corral_test_seconds", "Latency.", DefBuckets, "tool")
	c := r.Counter("corral_test_total", "Calls.", "tool")
	const workers, each = 4, 500
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				h.With("bash").Observe(float64(i%7) * 0.3)
				c.With([]string{"a", "b"}[w%2]).Inc()
			}
		})
	}
	for range 20 {
		fams, _ := parse(t, r)
		if f := fams["corral_test_seconds"]; f != nil && len(f.GetMetric()) > 0 {
			hg := f.GetMetric()[0].GetHistogram()
			bs := hg.GetBucket()
			// The parser keeps +Inf as the last bucket when it is written.
			if last := bs[len(bs)-1]; !math.IsInf(last.GetUpperBound(), 1) || last.GetCumulativeCount() != hg.GetSampleCount() {
				t.Fatalf("+Inf bucket %v != count %d", last, hg.GetSampleCount())
			}
		}
	}
	wg.Wait()
	fams, _ := parse(t, r)
	if n := fams["corral_test_seconds"].GetMetric()[0].GetHistogram().GetSampleCount(); n != workers*each {
		t.Errorf("count %d, want %d", n, workers*each)
	}
	var total float64
	for _, m := range fams["corral_test_total"].GetMetric() {
		total += m.GetCounter().GetValue()
	}
	if total != workers*each {
		t.Errorf("counter total %v, want %d", total, workers*each)
	}
}

func TestProcessFamilies(t *testing.T) {
	r := NewRegistry()
	RegisterProcess(r)
	fams, page := parse(t, r)
	for _, name := range []string{"process_cpu_seconds_total", "process_resident_memory_bytes", "process_virtual_memory_bytes",
		"process_open_fds", "process_max_fds", "process_start_time_seconds", "go_goroutines", "go_threads",
		"go_memstats_heap_alloc_bytes", "go_gc_cycles_total", "go_info"} {
		f := fams[name]
		if f == nil || len(f.GetMetric()) != 1 {
			t.Errorf("%s missing or not one sample:\n%s", name, page)
		}
	}
	if v := fams["process_resident_memory_bytes"].GetMetric()[0].GetGauge().GetValue(); v < 1<<20 {
		t.Errorf("resident memory %v bytes, want at least 1 MiB", v)
	}
	if v := fams["process_open_fds"].GetMetric()[0].GetGauge().GetValue(); v < 3 {
		t.Errorf("open fds %v, want at least stdin, stdout, stderr", v)
	}
	// The start is before now and after the machine's boot.
	st := fams["process_start_time_seconds"].GetMetric()[0].GetGauge().GetValue()
	if st < 1.6e9 || st > 4e9 {
		t.Errorf("start time %v is not a time of this century", st)
	}
}

func TestShapeRules(t *testing.T) {
	r := NewRegistry()
	a := r.Counter("corral_x_total", "X.", "tool")
	b := r.Counter("corral_x_total", "X.", "tool") // the same family, shared
	a.With("t").Inc()
	b.With("t").Inc()
	fams, _ := parse(t, r)
	if v := fams["corral_x_total"].GetMetric()[0].GetCounter().GetValue(); v != 2 {
		t.Errorf("shared family: %v, want 2", v)
	}
	for name, f := range map[string]func(){
		"other labels":   func() { r.Counter("corral_x_total", "X.", "other") },
		"other kind":     func() { r.Gauge("corral_x_total", "X.", "tool") },
		"bad name":       func() { r.Counter("corral-x", "X.") },
		"bad label":      func() { r.Counter("corral_y", "X.", "a:b") },
		"le label":       func() { r.Histogram("corral_h", "X.", []float64{1}, "le") },
		"bad buckets":    func() { r.Histogram("corral_h", "X.", []float64{2, 1}) },
		"label count":    func() { a.With("t", "u") },
		"negative count": func() { a.With("t").Add(-1) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f()
		}()
	}
}
