package seccomp

import "testing"

// The per-command cost of the filter: compiling it, and compiling it into
// a sealed memfd for bwrap.
func BenchmarkBPF(b *testing.B) {
	opts := Options{DenyUnixSockets: true}
	for b.Loop() {
		if _, err := BPF(opts); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkFile(b *testing.B) {
	opts := Options{DenyUnixSockets: true}
	for b.Loop() {
		f, err := File(opts)
		if err != nil {
			b.Fatal(err)
		}
		_ = f.Close()
	}
}

func BenchmarkDockerProfile(b *testing.B) {
	opts := Options{DenyUnixSockets: true}
	for b.Loop() {
		if _, err := DockerProfile(opts); err != nil {
			b.Fatal(err)
		}
	}
}
