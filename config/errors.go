package config

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors, matched with errors.Is.
var (
	// ErrInvalid is matched by every [*ValueError]: a setting has a value
	// its key does not accept.
	ErrInvalid = errors.New("invalid setting")
	// ErrUnknownKey is matched by every [*UnknownKeyError]: a key the
	// registry does not know.
	ErrUnknownKey = errors.New("unknown setting")
)

// Source says which layer a setting's effective value came from.
type Source string

// The layers, lowest precedence first.
const (
	SourceDefault Source = "default" // the registry's default
	SourceFile    Source = "file"    // the settings file
	SourceEnv     Source = "env"     // a CORRAL_* environment variable
)

// ValueError is a setting value that its key does not accept. Its message
// reads `KEY: VALUE REASON; set in WHERE`, for example
//
//	memory_mb: "lots" is not a whole number of MiB (0 disables); set by environment variable CORRAL_MEMORY_MB
type ValueError struct {
	// Key is the setting's name, followed for an element of a list by its
	// index and field ("binds[0].src", "home_allow[1]").
	Key string
	// Value is the offending value as read: a string for text from the
	// environment or the command line, else what YAML decoded.
	Value any
	// Reason completes the sentence "KEY: VALUE ..." and says what the key
	// accepts ("is not a whole number of MiB (0 disables)").
	Reason string
	// Source is where the value came from: SourceFile, SourceEnv, or ""
	// when it was given directly (`corral config set`, [Settings.Apply]).
	Source Source
	// Origin is the file's path for SourceFile and the variable's name for
	// SourceEnv.
	Origin string
}

// Error implements error.
func (e *ValueError) Error() string {
	msg := e.Key + ": " + showValue(e.Value) + " " + e.Reason
	switch e.Source {
	case SourceFile:
		msg += "; set in " + e.Origin
	case SourceEnv:
		msg += "; set by environment variable " + e.Origin
	}
	return msg
}

// Is makes errors.Is(err, ErrInvalid) true.
func (e *ValueError) Is(target error) bool { return target == ErrInvalid }

// UnknownKeyError is a key the registry does not know, in the settings
// file (Origin is the file's path) or given to Get, Set or Unset (Origin is
// empty). Its message lists the valid keys and, for a likely typo, the key
// meant.
type UnknownKeyError struct {
	// Key is the unknown key, with dots between levels.
	Key string
	// Origin is the settings file that holds the key, or "".
	Origin string
}

// Error implements error.
func (e *UnknownKeyError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "unknown setting %q", e.Key)
	if e.Origin != "" {
		fmt.Fprintf(&b, " in %s", e.Origin)
	}
	if s := Suggest(e.Key); s != "" {
		fmt.Fprintf(&b, " (did you mean %s?)", s)
	}
	fmt.Fprintf(&b, "; valid keys: %s", strings.Join(Names(), ", "))
	return b.String()
}

// Is makes errors.Is(err, ErrUnknownKey) true.
func (e *UnknownKeyError) Is(target error) bool { return target == ErrUnknownKey }

// Suggest returns the registered key closest to name (ignoring case, '-'
// for '_', and up to two typed letters), or "" when none is close.
func Suggest(name string) string {
	n := strings.ReplaceAll(strings.ToLower(name), "-", "_")
	best, bestD := "", 3
	for _, k := range registry() {
		if d := distance(n, k.Name); d < bestD {
			best, bestD = k.Name, d
		}
	}
	return best
}

// distance is the Levenshtein distance between a and b, in bytes.
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
