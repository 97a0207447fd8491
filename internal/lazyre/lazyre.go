// Package lazyre is a regular expression compiled at its first use rather
// than at package initialisation. Every start of corral's executable,
// helpers included, runs every linked package's initialisation, so a
// package-level regexp.MustCompile is paid by processes that never match
// anything; a package-level *Regexp from New costs nothing until used.
package lazyre

import (
	"regexp"
	"sync"
)

// Regexp is a regexp.Regexp compiled (with regexp.MustCompile, so a bad
// expression panics at first use, which every test of its caller reaches)
// on the first call of any method. Methods are safe for concurrent use.
type Regexp struct {
	expr string
	once sync.Once
	re   *regexp.Regexp
}

// New returns a Regexp for expr (RE2 syntax, as regexp.Compile). It does
// not compile it. Used in a package-level variable declaration, it is
// initialised statically by the compiler: no code runs at start.
func New(expr string) *Regexp { return &Regexp{expr: expr} }

// Get returns the compiled expression.
func (r *Regexp) Get() *regexp.Regexp {
	r.once.Do(func() { r.re = regexp.MustCompile(r.expr) })
	return r.re
}

// MatchString is regexp.Regexp.MatchString.
func (r *Regexp) MatchString(s string) bool { return r.Get().MatchString(s) }

// FindStringSubmatch is regexp.Regexp.FindStringSubmatch.
func (r *Regexp) FindStringSubmatch(s string) []string { return r.Get().FindStringSubmatch(s) }

// FindAllStringSubmatch is regexp.Regexp.FindAllStringSubmatch.
func (r *Regexp) FindAllStringSubmatch(s string, n int) [][]string {
	return r.Get().FindAllStringSubmatch(s, n)
}

// FindString is regexp.Regexp.FindString.
func (r *Regexp) FindString(s string) string { return r.Get().FindString(s) }

// FindAllString is regexp.Regexp.FindAllString.
func (r *Regexp) FindAllString(s string, n int) []string { return r.Get().FindAllString(s, n) }

// ReplaceAllString is regexp.Regexp.ReplaceAllString.
func (r *Regexp) ReplaceAllString(src, repl string) string {
	return r.Get().ReplaceAllString(src, repl)
}
