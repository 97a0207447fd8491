package handback

import (
	"fmt"
	"strings"

	"github.com/corralhq/corral/internal/termsafe"
)

// Held is a path a command made at a protected path, taken out of the tree
// after the command ran (the backends' quarantine, docs/sandbox.md):
// programs on the host would run it later.
type Held struct {
	// Path names it as the person knows it: relative to the working
	// directory when it lies there, else absolute.
	Path string
	// Removed is set when it was removed rather than moved to the
	// quarantine directory (another file system, a review layer).
	Removed bool
	// Kept says what became of a git configuration's settings
	// (WriteBackGitConfig's clause without its "; "); "" for anything
	// else.
	Kept string
}

// maxHeldNamed is how many held paths HeldNotice names; the rest are
// counted.
const maxHeldNamed = 6

// HeldNotice returns the one line that tells a person what a command made
// at protected paths and corral held (one line per command, not one per
// file: `git init` alone makes two), with where they are and the command
// that lists them: `ls -A DIR`, DIR being the command's quarantine
// directory ("" when nothing was moved there). "" when held is empty.
func HeldNotice(held []Held, dir string) string {
	if len(held) == 0 {
		return ""
	}
	names := make([]string, 0, min(len(held), maxHeldNamed))
	moved := 0
	for i, h := range held {
		if !h.Removed {
			moved++
		}
		if i >= maxHeldNamed {
			continue
		}
		n := termsafe.Path(h.Path)
		var notes []string
		if h.Removed {
			notes = append(notes, "removed")
		}
		if h.Kept != "" {
			notes = append(notes, h.Kept)
		}
		if len(notes) > 0 {
			n += " (" + strings.Join(notes, "; ") + ")"
		}
		names = append(names, n)
	}
	list := strings.Join(names, ", ")
	if len(held) > maxHeldNamed {
		list += fmt.Sprintf(" and %d more", len(held)-maxHeldNamed)
	}
	msg := fmt.Sprintf("held %d protected path", len(held))
	if len(held) > 1 {
		msg += "s"
	}
	msg += " the command made (programs on the host run them): " + list
	if moved > 0 && dir != "" {
		msg += fmt.Sprintf("; see them: ls -A %s (move one back to release it)", termsafe.Path(dir))
	}
	return msg
}
