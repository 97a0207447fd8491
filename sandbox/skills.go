package sandbox

import (
	"path/filepath"
	"strings"
)

// SkillBinds returns the read-only binds that show r.Skills at their host
// paths, and the entries of home (the home directory, resolved) they lie
// in, relative to it, for the home rules to allow (a skill directory is
// usually in a dot entry: ~/.agents/skills). A skill directory inside the
// working directory is left out: the sandbox sees it there already.
func SkillBinds(r *Request, home string) (binds []Bind, homeAllow []string) {
	for _, d := range r.Skills {
		if d == "" || !filepath.IsAbs(d) {
			continue
		}
		d = filepath.Clean(d)
		if w := filepath.Clean(r.Workdir); r.Workdir != "" && (d == w || strings.HasPrefix(d, w+"/")) {
			continue
		}
		binds = append(binds, Bind{Src: d, ReadOnly: true})
		if home != "" && home != "/" && strings.HasPrefix(d, home+"/") {
			homeAllow = append(homeAllow, strings.TrimPrefix(d, home+"/"))
		}
	}
	return binds, homeAllow
}
