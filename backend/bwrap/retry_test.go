package bwrap

import (
	"bytes"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/corralhq/corral/sandbox"
)

func TestHostChangedLine(t *testing.T) {
	for _, tc := range []struct {
		line      string
		transient bool
	}{
		{`bwrap: Can't bind mount /oldroot/ on /newroot/: Unable to apply mount flags: remount "/newroot/var/lib/docker/overlay2/ab12/merged": No such file or directory`, true},
		{`bwrap: Can't bind mount /oldroot/ on /newroot/: Unable to apply mount flags: remount "/newroot/var/lib/docker/overlay2/ab12/merged": Invalid argument`, true},
		{`bwrap: Can't mkdir parents for /home/other/.aws: Read-only file system`, true},
		{`bwrap: Can't mkdir /home/other/.aws: No such file or directory`, true},
		{`bwrap: Can't create file at /home/other/.netrc: Read-only file system`, true},
		{`bwrap: Can't find source path /srv/data: No such file or directory`, true},
		{`bwrap: Can't mount tmpfs on /newroot/home/other/.aws: No such file or directory`, true},
		{`bwrap: Can't bind mount /oldroot/var/tmp/s/empty on /newroot/etc/gshadow: Unable to find "/newroot/etc/gshadow" in mount table`, true},
		{`bwrap: Can't mkdir /home/other/.aws: Permission denied`, true},
		// The command's own failures, and a machine that cannot sandbox.
		{`bwrap: execvp nosuchcmd: No such file or directory`, false},
		{`bwrap: Can't chdir to /gone: No such file or directory`, false},
		{`bwrap: No permissions to creating new namespace, likely because the kernel does not allow non-privileged user namespaces.`, false},
		{`bwrap: Can't mount proc on /newroot/proc: Operation not permitted`, false},
		{`bwrap: Can't bind mount /oldroot/ on /newroot/: Unable to apply mount flags: remount "/newroot/x": Operation not permitted`, false},
		{`Can't mkdir parents for /x: Read-only file system`, false}, // not bwrap's
	} {
		got := hostChangedLine([]string{"bwrap: something else first", tc.line})
		if (got != "") != tc.transient || got != "" && got != tc.line {
			t.Errorf("hostChangedLine(%q) = %q, want transient=%v", tc.line, got, tc.transient)
		}
	}
}

// The leading lines of bwrap's own are held back until the attempt ends;
// anything else passes at once, and so does all that follows it.
func TestStartHold(t *testing.T) {
	var w bytes.Buffer
	h := &startHold{w: &w}
	// bwrap writes "bwrap: ", the message and ": strerror\n" apart.
	for _, p := range []string{"bwr", "ap: ", "Can't mkdir parents for /x", ": Read-only file system\n"} {
		h.Write([]byte(p))
	}
	if w.Len() != 0 {
		t.Fatalf("passed %q before the attempt ended", w.String())
	}
	if l := h.bwrapLines(); len(l) != 1 || l[0] != "bwrap: Can't mkdir parents for /x: Read-only file system" {
		t.Errorf("bwrapLines = %q", l)
	}
	h.release(false)
	h.Write([]byte("late\n"))
	if w.String() != "late\n" {
		t.Errorf("after release(false): %q, want only what came after", w.String())
	}

	w.Reset()
	h = &startHold{w: &w}
	h.Write([]byte("b"))
	h.Write([]byte("uild ok\n"))
	h.Write([]byte("more\n"))
	if w.String() != "build ok\nmore\n" || h.bwrapLines() != nil {
		t.Errorf("a command's output: %q, lines %q", w.String(), h.bwrapLines())
	}
	h.release(true)
	if w.String() != "build ok\nmore\n" {
		t.Errorf("release wrote again: %q", w.String())
	}

	w.Reset()
	h = &startHold{w: &w}
	h.Write([]byte("bwrap: execvp x: No such file or directory\n"))
	h.release(true)
	if w.String() != "bwrap: execvp x: No such file or directory\n" {
		t.Errorf("release(true) of the last attempt: %q", w.String())
	}

	w.Reset()
	h = &startHold{w: &w}
	h.Write([]byte("bwrap: a line\n\n"))
	if w.String() != "bwrap: a line\n\n" {
		t.Errorf("an empty line is not bwrap's: %q", w.String())
	}
	w.Reset()
	h = &startHold{w: &w}
	h.Write([]byte("bwrap: " + strings.Repeat("x", maxHeld)))
	if w.Len() == 0 {
		t.Error("held more than maxHeld")
	}
}

func TestHoldStderrLeavesTerminalsAndFiles(t *testing.T) {
	if holdStderr(&sandbox.Request{Stderr: os.Stderr}) != nil {
		t.Error("a file without limits is passed as is (wrapping it would turn it into a pipe)")
	}
	if holdStderr(&sandbox.Request{Stderr: os.Stderr, Policy: sandbox.Policy{Limits: sandbox.Limits{MemoryMB: 1}}}) == nil && !isTerminal(os.Stderr) {
		t.Error("a non-terminal file with limits already goes through a pipe: hold it")
	}
	if holdStderr(&sandbox.Request{Stderr: io.Discard}) == nil {
		t.Error("a writer: hold it")
	}
}

func TestStdinRewinder(t *testing.T) {
	r := strings.NewReader("abcdef")
	r.Read(make([]byte, 2))
	rw := stdinRewinder(&sandbox.Request{Stdin: r})
	io.ReadAll(r)
	if rw == nil || !rw() {
		t.Fatal("a seekable reader rewinds")
	}
	if rest, _ := io.ReadAll(r); string(rest) != "cdef" {
		t.Errorf("rewound to %q, want cdef", rest)
	}
	if stdinRewinder(&sandbox.Request{Stdin: io.MultiReader(strings.NewReader("x"))}) != nil {
		t.Error("a reader that cannot seek must not be retried")
	}
	if stdinRewinder(&sandbox.Request{}) == nil || stdinRewinder(&sandbox.Request{Stdin: os.Stdin}) == nil {
		t.Error("no stdin, or a file, needs no rewinding")
	}
}
