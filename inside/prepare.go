package inside

import (
	"encoding/json"
	"errors"
	"flag"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Prepared is what `__corral-prepare` prints as JSON on stdout.
type Prepared struct {
	// Missing lists the required tools not found in PATH.
	Missing []string `json:"missing,omitempty"`
	// Optional lists the optional tools (python3) not found in PATH.
	OptionalMissing []string `json:"optional_missing,omitempty"`
	// Entries are up to MaxEntries names in the workspace as the container
	// sees it; Err says why it could not be listed.
	Entries []string `json:"entries"`
	Err     string   `json:"err,omitempty"`
	// HomeErr says why the container's user cannot make a file in --home
	// (HOME, corral's /tmp): an image whose /tmp is not 1777, which
	// Docker's tmpfs copies (tmpcopyup), leaves git, the tools' caches
	// and the relay's own files nowhere to write.
	HomeErr string `json:"home_err,omitempty"`
}

// MaxEntries bounds the workspace listing the mount check compares.
const MaxEntries = 2000

// prepareMain is `__corral-prepare --workspace DIR --tools a,b
// --optional c --home H`: it looks the tools up in PATH, lists DIR, and
// when H/.gitconfig does not exist writes one that trusts DIR (git's
// safe.directory, git-config(1)), so `git status` works in the workspace
// even where its owner differs from the container's user. Nothing else is
// trusted: never "*".
func prepareMain(args []string) int {
	fs := flag.NewFlagSet(ModePrepare, flag.ContinueOnError)
	ws := fs.String("workspace", "", "workspace path inside the container")
	tools := fs.String("tools", "", "comma-separated required tools")
	optional := fs.String("optional", "", "comma-separated optional tools")
	home := fs.String("home", "", "home directory for .gitconfig")
	if err := fs.Parse(args); err != nil {
		return fail(ModePrepare, err)
	}
	if !filepath.IsAbs(*ws) {
		return fail(ModePrepare, errors.New("--workspace must be absolute"))
	}
	var p Prepared
	for _, t := range splitList(*tools) {
		if _, err := exec.LookPath(t); err != nil {
			p.Missing = append(p.Missing, t)
		}
	}
	for _, t := range splitList(*optional) {
		if _, err := exec.LookPath(t); err != nil {
			p.OptionalMissing = append(p.OptionalMissing, t)
		}
	}
	p.Entries = []string{}
	if f, err := os.Open(*ws); err != nil {
		p.Err = err.Error()
	} else {
		names, err := f.Readdirnames(MaxEntries)
		f.Close()
		if err != nil && len(names) == 0 && !errors.Is(err, io.EOF) {
			p.Err = err.Error()
		}
		p.Entries = append(p.Entries, names...)
	}
	if *home != "" {
		if f, err := os.CreateTemp(*home, ".corral-prepare-*"); err != nil {
			p.HomeErr = err.Error()
		} else {
			f.Close()
			os.Remove(f.Name())
		}
		gc := filepath.Join(*home, ".gitconfig")
		if _, err := os.Lstat(gc); errors.Is(err, os.ErrNotExist) {
			_ = os.WriteFile(gc, []byte("[safe]\n\tdirectory = "+gitQuote(*ws)+"\n"), 0o644)
		}
	}
	if err := json.NewEncoder(os.Stdout).Encode(&p); err != nil {
		return 125
	}
	return 0
}

func splitList(s string) []string {
	var out []string
	for t := range strings.SplitSeq(s, ",") {
		if t = strings.TrimSpace(t); t != "" {
			out = append(out, t)
		}
	}
	return out
}

// gitQuote writes s as a git-config value in double quotes, escaping
// backslash and double quote (git-config(1), "Syntax").
func gitQuote(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`, "\t", `\t`)
	return `"` + r.Replace(s) + `"`
}
