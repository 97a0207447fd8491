package approval

import (
	"fmt"
	"sync"
)

// Verdict is what [Check] decides about a command line.
type Verdict int

const (
	// Allow means the command line may run at once.
	Allow Verdict = iota
	// Ask means a person must approve the command line before it runs;
	// when nobody can be asked it must be refused.
	Ask
	// Deny means the command line is on the hard floor and never runs.
	Deny
)

// String returns "allow", "ask" or "deny".
func (v Verdict) String() string {
	switch v {
	case Allow:
		return "allow"
	case Ask:
		return "ask"
	case Deny:
		return "deny"
	}
	return fmt.Sprintf("Verdict(%d)", int(v))
}

// MarshalText returns the verdict's [Verdict.String], so that verdicts
// appear as words in JSON.
func (v Verdict) MarshalText() ([]byte, error) { return []byte(v.String()), nil }

// Mode says what happens to command lines that match a policy's patterns.
type Mode string

const (
	// ModeAsk puts command lines that match a pattern to a person (the
	// verdict [Ask]). The zero Mode means ModeAsk.
	ModeAsk Mode = "ask"
	// ModeOff lets command lines that match a pattern run (the verdict
	// [Allow]); the hard floor is still refused.
	ModeOff Mode = "off"
)

// Rules of the hard floor, as found in [Decision.Rule] with the verdict
// [Deny]. See the package documentation for what each covers.
const (
	RuleRmRoot      = "rm-root"      // recursive rm of /
	RuleChmodRoot   = "chmod-root"   // recursive chmod, chown or chgrp of /
	RuleMkfs        = "mkfs"         // making a file system on a device
	RuleBlockDevice = "block-device" // writing onto a block device
	RuleForkBomb    = "fork-bomb"    // a fork bomb
	RuleShutdown    = "shutdown"     // shutting down or restarting the machine
)

// Policy is the configurable part of the decision: the approval and
// approval_patterns settings. The zero Policy asks about [DefaultPatterns].
type Policy struct {
	// Mode is ModeAsk or ModeOff; "" and unknown words mean ModeAsk.
	Mode Mode
	// Patterns are the dangerous patterns, tried in order (the first
	// match names the rule). Nil means [DefaultPatterns]; an empty non-nil
	// slice means none.
	Patterns []Pattern
}

// NewPolicy builds a Policy from the settings approval and
// approval_patterns: mode is "ask", "off" or "" (ask) and patterns are
// pattern texts as described in the package documentation, none (nil or
// empty) meaning [DefaultPatterns]. It fails on an unknown mode or on the
// first pattern that does not parse, naming it.
func NewPolicy(mode string, patterns []string) (Policy, error) {
	p := Policy{Mode: Mode(mode)}
	switch p.Mode {
	case "", ModeAsk, ModeOff:
	default:
		return Policy{}, fmt.Errorf("approval mode %q is not one of ask, off", mode)
	}
	if p.Mode == "" {
		p.Mode = ModeAsk
	}
	if len(patterns) == 0 {
		return p, nil
	}
	p.Patterns = make([]Pattern, 0, len(patterns))
	for i, s := range patterns {
		pat, err := ParsePattern(s)
		if err != nil {
			return Policy{}, fmt.Errorf("approval pattern %d %q: %w", i+1, s, err)
		}
		p.Patterns = append(p.Patterns, pat)
	}
	return p, nil
}

// Decision is the outcome of [Check].
type Decision struct {
	// Verdict is Allow, Ask or Deny.
	Verdict Verdict `json:"verdict"`
	// Rule names what decided: one of the Rule* constants for Deny, the
	// pattern's text (as in approval_patterns) for Ask, and "" for Allow.
	Rule string `json:"rule,omitempty"`
	// Reason is one or two sentences for the model and the person: what
	// matched, why it matters and what to do instead; "" for Allow.
	Reason string `json:"reason,omitempty"`
}

// DefaultPatterns returns the built-in dangerous patterns, used when the
// approval_patterns setting is empty, as pattern texts (a new slice each
// call).
func DefaultPatterns() []string {
	return []string{
		"git push {--force,-f,--force-with-lease,--force-if-includes,--mirror,+*}",
		"git push {--delete,-d,:*}",
		"git reset --hard",
		"git clean {-f,--force}",
		"git branch -D",
		"rm {-r,-R,--recursive}",
		"{curl,wget} | {sh,bash,zsh,dash,ksh,fish,python,python3,perl,ruby,node}",
		`re:\b(ba|z|da|k)?sh\b[^|;&]*[$<]\(\s*(curl|wget)\b`,
		"chmod {-R,--recursive}",
		"chown {-R,--recursive}",
		`re:(?i)\b(drop|truncate)\s+(table|database|schema)\b`,
	}
}

var defaultPatterns = sync.OnceValue(func() []Pattern {
	texts := DefaultPatterns()
	out := make([]Pattern, len(texts))
	for i, s := range texts {
		p, err := ParsePattern(s)
		if err != nil {
			panic("approval: default pattern " + s + ": " + err.Error())
		}
		out[i] = p
	}
	return out
})

// Check decides about command, a shell command line (bash syntax, any
// number of lines) that is about to run. The hard floor is checked first
// and gives [Deny] whatever p says; then, under ModeAsk, p's patterns are
// tried in order and the first match gives [Ask]; anything else is
// [Allow]. Check has no side effects and is safe for concurrent use; its
// work grows with the length of command (nested scripts are followed at
// most a few levels deep).
func Check(command string, p Policy) Decision {
	a := analyze(command)
	if len(a.denies) > 0 {
		return a.denies[0]
	}
	for _, c := range a.cmds {
		if d, ok := floorCommand(c); ok {
			return d
		}
	}
	if p.Mode == ModeOff {
		return Decision{Verdict: Allow}
	}
	pats := p.Patterns
	if pats == nil {
		pats = defaultPatterns()
	}
	for i := range pats {
		if what, ok := pats[i].match(a, command); ok {
			return Decision{
				Verdict: Ask,
				Rule:    pats[i].String(),
				Reason: fmt.Sprintf("%s matches the approval pattern \"%s\" (setting approval_patterns): "+
					"it runs only once a person approves it.", quoteCmd(what), pats[i].String()),
			}
		}
	}
	return Decision{Verdict: Allow}
}
