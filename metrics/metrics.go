// Package metrics is corral's own small metrics registry: counters,
// gauges and histograms with labels, written in the Prometheus text
// exposition format, version 0.0.4
// (https://prometheus.io/docs/instrumenting/exposition_formats/).
//
// Why not github.com/prometheus/client_golang: corral is one executable,
// and every command (`corral run`, once per agent command) pays every
// linked package's init. Linking client_golang's prometheus and promhttp
// packages cost 15% more instructions per process start (callgrind, `corral
// --help`: 10.42M to 11.96M; its default registry's init, the Go
// collector's runtime/metrics rules and procfs's regexps) and 3.2 MB of
// executable, measured 2026-12-04 (docs/serve.md, "Metrics"). This package
// does no work at init, and the process and Go figures are read at scrape
// time (process.go). Its output is checked against the reference parser
// (github.com/prometheus/common/expfmt) in its tests.
package metrics

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// ContentType is the media type of [Registry.WriteText]'s output, the
// text format 0.0.4 as Prometheus servers ask for it.
const ContentType = "text/plain; version=0.0.4; charset=utf-8"

// Registry holds metric families and writes them. The zero value is not
// usable: call [NewRegistry]. Safe for concurrent use.
type Registry struct {
	mu   sync.Mutex
	fams map[string]*family
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{fams: map[string]*family{}} }

// kind is a family's TYPE.
type kind string

const (
	kindCounter   kind = "counter"
	kindGauge     kind = "gauge"
	kindHistogram kind = "histogram"
)

// family is one metric name: its help, type, label names and series.
type family struct {
	name, help string
	kind       kind
	labels     []string
	buckets    []float64 // histograms: upper bounds, ascending, without +Inf

	mu     sync.Mutex
	series map[string]*series // by joined label values
	fn     func() []Sample    // a family computed at scrape time
}

// series is one set of label values' figures.
type series struct {
	values []string
	val    atomic.Uint64 // counter or gauge: float64 bits

	hmu    sync.Mutex // histogram: counts, sum and count move together
	counts []uint64   // per bucket, not cumulative; len(buckets)+1 (+Inf)
	sum    float64
	count  uint64
}

// Sample is one value of a family computed at scrape time
// ([Registry.GaugeFunc], [Registry.CounterFunc]): label values in the
// order of the family's label names, and the value.
type Sample struct {
	Labels []string
	Value  float64
}

// family returns the family called name, made on first use. A second
// call with the same name must give the same kind, label names and
// buckets (it returns the same family, so two users share it); anything
// else panics, as does a name or label name outside the format's
// grammar ([a-zA-Z_:][a-zA-Z0-9_:]*, labels without ':'): both are
// programming errors.
func (r *Registry) family(name, help string, k kind, buckets []float64, labels []string) *family {
	if !validName(name, true) {
		panic("metrics: invalid metric name " + strconv.Quote(name))
	}
	for _, l := range labels {
		if !validName(l, false) || strings.HasPrefix(l, "__") || (k == kindHistogram && l == "le") {
			panic("metrics: invalid label name " + strconv.Quote(l) + " of " + name)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if f, ok := r.fams[name]; ok {
		if f.kind != k || !slices.Equal(f.labels, labels) || !slices.Equal(f.buckets, buckets) {
			panic("metrics: " + name + " registered twice with different shapes")
		}
		return f
	}
	f := &family{name: name, help: help, kind: k, labels: slices.Clone(labels), buckets: slices.Clone(buckets), series: map[string]*series{}}
	r.fams[name] = f
	return f
}

// validName reports whether s is a metric name (colons allowed) or a
// label name (not) of the text format.
func validName(s string, colon bool) bool {
	if s == "" {
		return false
	}
	for i, c := range s {
		ok := c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (colon && c == ':') || (i > 0 && c >= '0' && c <= '9')
		if !ok {
			return false
		}
	}
	return true
}

// with returns the series of the label values vs, made on first use; a
// wrong number of values panics (a programming error).
func (f *family) with(vs []string) *series {
	if len(vs) != len(f.labels) {
		panic(fmt.Sprintf("metrics: %s takes %d label values (%v), got %d", f.name, len(f.labels), f.labels, len(vs)))
	}
	key := strings.Join(vs, "\xff")
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.series[key]
	if !ok {
		s = &series{values: slices.Clone(vs)}
		if f.kind == kindHistogram {
			s.counts = make([]uint64, len(f.buckets)+1)
		}
		f.series[key] = s
	}
	return s
}

// addFloat adds d to the float64 held in v.
func addFloat(v *atomic.Uint64, d float64) {
	for {
		old := v.Load()
		if v.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+d)) {
			return
		}
	}
}

// CounterVec is a counter family: a value per set of label values that
// only grows (it starts at 0 with the process).
type CounterVec struct{ f *family }

// Counter returns the counter family name (help: its HELP line) with the
// given label names, made on first use (see family for the panics).
func (r *Registry) Counter(name, help string, labels ...string) *CounterVec {
	return &CounterVec{r.family(name, help, kindCounter, nil, labels)}
}

// With returns the counter of the label values vs (as many as the
// family's label names; a wrong count panics).
func (c *CounterVec) With(vs ...string) *Counter { return &Counter{c.f.with(vs)} }

// Counter is one series of a CounterVec.
type Counter struct{ s *series }

// Inc adds 1.
func (c *Counter) Inc() { addFloat(&c.s.val, 1) }

// Add adds d, which must not be negative (a counter only grows): a
// negative d panics.
func (c *Counter) Add(d float64) {
	if d < 0 {
		panic("metrics: a counter cannot decrease")
	}
	addFloat(&c.s.val, d)
}

// GaugeVec is a gauge family: a value per set of label values that goes
// up and down.
type GaugeVec struct{ f *family }

// Gauge returns the gauge family name with the given label names, made on
// first use.
func (r *Registry) Gauge(name, help string, labels ...string) *GaugeVec {
	return &GaugeVec{r.family(name, help, kindGauge, nil, labels)}
}

// With returns the gauge of the label values vs.
func (g *GaugeVec) With(vs ...string) *Gauge { return &Gauge{g.f.with(vs)} }

// Gauge is one series of a GaugeVec.
type Gauge struct{ s *series }

// Set sets the value.
func (g *Gauge) Set(v float64) { g.s.val.Store(math.Float64bits(v)) }

// Add adds d (negative to subtract).
func (g *Gauge) Add(d float64) { addFloat(&g.s.val, d) }

// GaugeFunc registers a gauge family whose samples fn computes at each
// scrape (called without the registry's lock held; it must be safe for
// concurrent use). A later call for the same name replaces fn.
func (r *Registry) GaugeFunc(name, help string, labels []string, fn func() []Sample) {
	f := r.family(name, help, kindGauge, nil, labels)
	f.mu.Lock()
	f.fn = fn
	f.mu.Unlock()
}

// CounterFunc is GaugeFunc for a counter: fn's values must only grow
// (process_cpu_seconds_total).
func (r *Registry) CounterFunc(name, help string, labels []string, fn func() []Sample) {
	f := r.family(name, help, kindCounter, nil, labels)
	f.mu.Lock()
	f.fn = fn
	f.mu.Unlock()
}

// DefBuckets are latency buckets in seconds, from 5 ms to 10 min: a tool
// call is a file read (about a millisecond) or a command (seconds to
// minutes).
var DefBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}

// HistogramVec is a histogram family: per set of label values, a count of
// observations in each bucket (written cumulative, as le="BOUND"), their
// sum and their count.
type HistogramVec struct{ f *family }

// Histogram returns the histogram family name with the given bucket upper
// bounds (ascending, finite; +Inf is added) and label names, made on
// first use. Bad bounds panic.
func (r *Registry) Histogram(name, help string, buckets []float64, labels ...string) *HistogramVec {
	for i, b := range buckets {
		if math.IsNaN(b) || math.IsInf(b, 0) || (i > 0 && b <= buckets[i-1]) {
			panic("metrics: " + name + ": buckets must be finite and ascending")
		}
	}
	return &HistogramVec{r.family(name, help, kindHistogram, buckets, labels)}
}

// With returns the histogram of the label values vs.
func (h *HistogramVec) With(vs ...string) *Histogram { return &Histogram{h.f, h.f.with(vs)} }

// Histogram is one series of a HistogramVec.
type Histogram struct {
	f *family
	s *series
}

// Observe records one observation v (seconds, for a latency).
func (h *Histogram) Observe(v float64) {
	i, _ := slices.BinarySearch(h.f.buckets, v) // the first bound >= v: le is inclusive
	h.s.hmu.Lock()
	h.s.counts[i]++
	h.s.sum += v
	h.s.count++
	h.s.hmu.Unlock()
}

// WriteText writes every family, sorted by name, each series sorted by its
// label values, in the text format 0.0.4: HELP and TYPE lines, then one
// line per sample; a histogram's buckets cumulative, ending with
// le="+Inf", whose count equals _count, all read at one moment. A family
// without series (no call yet) writes its HELP and TYPE alone. It returns
// the first write error.
func (r *Registry) WriteText(w io.Writer) error {
	r.mu.Lock()
	fams := make([]*family, 0, len(r.fams))
	for _, f := range r.fams {
		fams = append(fams, f)
	}
	r.mu.Unlock()
	slices.SortFunc(fams, func(a, b *family) int { return strings.Compare(a.name, b.name) })
	bw := bufio.NewWriter(w)
	for _, f := range fams {
		f.write(bw)
	}
	return bw.Flush()
}

func (f *family) write(w *bufio.Writer) {
	f.mu.Lock()
	fn := f.fn
	ss := make([]*series, 0, len(f.series))
	for _, s := range f.series {
		ss = append(ss, s)
	}
	f.mu.Unlock()
	fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n", f.name, escapeHelp(f.help), f.name, f.kind)
	if fn != nil {
		samples := fn()
		slices.SortFunc(samples, func(a, b Sample) int { return slices.Compare(a.Labels, b.Labels) })
		for _, s := range samples {
			if len(s.Labels) != len(f.labels) {
				continue // a bad sample is left out rather than break the page
			}
			writeSample(w, f.name, "", f.labels, s.Labels, "", "", s.Value)
		}
		return
	}
	slices.SortFunc(ss, func(a, b *series) int { return slices.Compare(a.values, b.values) })
	for _, s := range ss {
		if f.kind != kindHistogram {
			writeSample(w, f.name, "", f.labels, s.values, "", "", math.Float64frombits(s.val.Load()))
			continue
		}
		s.hmu.Lock()
		counts, sum, count := slices.Clone(s.counts), s.sum, s.count
		s.hmu.Unlock()
		var cum uint64
		for i, c := range counts {
			cum += c
			le := "+Inf"
			if i < len(f.buckets) {
				le = formatFloat(f.buckets[i])
			}
			writeSample(w, f.name, "_bucket", f.labels, s.values, "le", le, float64(cum))
		}
		writeSample(w, f.name, "_sum", f.labels, s.values, "", "", sum)
		writeSample(w, f.name, "_count", f.labels, s.values, "", "", float64(count))
	}
}

// writeSample writes `name{l="v",...} value`, with one more label (extra,
// extraVal: a histogram's le) when extra is set.
func writeSample(w *bufio.Writer, name, suffix string, labels, values []string, extra, extraVal string, v float64) {
	w.WriteString(name)
	w.WriteString(suffix)
	if len(labels) > 0 || extra != "" {
		w.WriteByte('{')
		for i, l := range labels {
			if i > 0 {
				w.WriteByte(',')
			}
			w.WriteString(l)
			w.WriteString(`="`)
			w.WriteString(EscapeLabelValue(values[i]))
			w.WriteByte('"')
		}
		if extra != "" {
			if len(labels) > 0 {
				w.WriteByte(',')
			}
			w.WriteString(extra)
			w.WriteString(`="`)
			w.WriteString(extraVal)
			w.WriteByte('"')
		}
		w.WriteByte('}')
	}
	w.WriteByte(' ')
	w.WriteString(formatFloat(v))
	w.WriteByte('\n')
}

// EscapeLabelValue escapes a label value for the text format: backslash,
// double quote and line feed become \\, \" and \n (exposition formats,
// "Text format details"). Other bytes, any UTF-8, pass as they are.
func EscapeLabelValue(s string) string {
	if !strings.ContainsAny(s, "\\\"\n") {
		return s
	}
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s)
}

// escapeHelp escapes a HELP text: backslash and line feed (the format
// leaves double quotes as they are there).
func escapeHelp(s string) string {
	return strings.NewReplacer(`\`, `\\`, "\n", `\n`).Replace(s)
}

// formatFloat writes v as the format's values are written: Go's shortest
// float, +Inf, -Inf, NaN.
func formatFloat(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	case math.IsNaN(v):
		return "NaN"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}
