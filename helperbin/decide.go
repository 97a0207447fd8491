package helperbin

import (
	"fmt"
	"slices"
	"strings"
)

// Source says where a candidate helper comes from.
type Source string

// The candidates' sources, in the order they are tried.
const (
	// SourceNext is corral-helper next to corral's executable.
	SourceNext Source = "next-to-corral"
	// SourceCache is corral-helper built into corral's cache.
	SourceCache Source = "cache"
	// SourceSelf is corral's own executable, the fallback.
	SourceSelf Source = "self"
)

// Facts are what was learnt of one candidate: whether it exists, what it
// answered to reexec.ProtocolMode (or why it could not be asked), and
// whether it is static.
type Facts struct {
	Source Source
	Path   string
	// Missing is set when no file is at Path.
	Missing bool
	// Answer is the candidate's output in reexec.ProtocolMode; "" with
	// Err set when it could not be run or failed.
	Answer string
	// Err is why the candidate could not be asked (not executable, exit
	// status, not an ELF file).
	Err string
	// Static is set when the ELF file has no PT_INTERP.
	Static bool
}

// Choice is Choose's verdict: the helper to use, and why each candidate
// before it was passed over (Passed, one line per candidate, empty when
// the first was taken).
type Choice struct {
	Source Source
	Path   string
	Passed []string
}

// Choose returns the first candidate of cands that is present, answers
// want (Compatible), and is static when needStatic is set; self is taken
// when none is. It is the whole policy of which helper runs, and does no
// I/O.
func Choose(cands []Facts, want string, needStatic bool, self string) Choice {
	var passed []string
	for _, c := range cands {
		if c.Missing {
			continue
		}
		if c.Err != "" {
			passed = append(passed, fmt.Sprintf("%s %s: %s", c.Source, c.Path, c.Err))
			continue
		}
		if err := Compatible(c.Answer, want); err != nil {
			passed = append(passed, fmt.Sprintf("%s %s: %v", c.Source, c.Path, err))
			continue
		}
		if needStatic && !c.Static {
			passed = append(passed, fmt.Sprintf("%s %s: dynamically linked (PT_INTERP), and a container's image may lack its C library; build it with CGO_ENABLED=0", c.Source, c.Path))
			continue
		}
		return Choice{Source: c.Source, Path: c.Path, Passed: passed}
	}
	return Choice{Source: SourceSelf, Path: self, Passed: passed}
}

// Compatible says whether a helper's answer to reexec.ProtocolMode (got)
// lets it stand in for the executable whose reexec.Answer is want: the
// same first line (the protocol version), and every sandbox mode of want
// among got's. A helper with more modes is accepted; one that lacks a
// mode, or speaks another version, is refused with an error naming the
// difference.
func Compatible(got, want string) error {
	gv, gm, _ := strings.Cut(got, "\n")
	wv, wm, _ := strings.Cut(want, "\n")
	if gv != wv {
		return fmt.Errorf("speaks %q, corral speaks %q: it was built from other source", clip(gv), wv)
	}
	have := strings.Fields(gm)
	var missing []string
	for _, m := range strings.Fields(wm) {
		if !slices.Contains(have, m) {
			missing = append(missing, m)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("lacks the helper modes %s that corral uses: it was built from other source", strings.Join(missing, ", "))
	}
	return nil
}

// clip shortens what a foreign executable printed for a message.
func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}
