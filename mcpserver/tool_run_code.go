package mcpserver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/corralhq/corral/sandbox"
	"github.com/corralhq/corral/sandboxfs"
	"github.com/corralhq/corral/session"
)

// maxCodeBytes bounds run_code's code: it goes to a file, so it may be
// longer than a command line.
const maxCodeBytes = 1 << 20

// RunCodeInput are the arguments of the run_code tool.
type RunCodeInput struct {
	// Code is the program text.
	Code string `json:"code" jsonschema:"the program to run, as the text of a script file"`
	// Language picks the interpreter: python (python3), bash or node.
	Language string `json:"language,omitempty" jsonschema:"interpreter: python (python3, the default), bash or node"`
	// TimeoutS, when set, replaces the timeout setting for this run, in
	// seconds; greater than 0 and at most 86400.
	TimeoutS *float64 `json:"timeout_s,omitempty" jsonschema:"seconds after which the program and every process it started are killed; default: the server's timeout setting"`
}

// interpreter is how run_code runs one language.
type interpreter struct {
	ext      string
	commands []string // tried in order; the first found on PATH runs the file
}

// interpreterFor returns run_code's interpreter for lang (a switch, not a
// package-level map: nothing is built at start).
func interpreterFor(lang string) (interpreter, bool) {
	switch lang {
	case "python":
		return interpreter{ext: ".py", commands: []string{"python3", "python"}}, true
	case "bash":
		return interpreter{ext: ".sh", commands: []string{"bash"}}, true
	case "node":
		return interpreter{ext: ".js", commands: []string{"node", "nodejs"}}, true
	}
	return interpreter{}, false
}

// languages lists interpreterFor's languages in the order the schema shows them.
var languages = []string{"python", "bash", "node"}

// noInterpreter starts the line the script wrapper prints when no
// interpreter of the language is on the sandbox's PATH.
const noInterpreter = "corral-run_code: no interpreter: "

func (s *Server) runCodeTool() Tool {
	return newTool(s, &mcp.Tool{
		Name:  "run_code",
		Title: "Run a script in the sandbox",
		Description: "Run a program (python by default, bash or node) in this session's sandbox: the code is written to a script file of its own and run by the interpreter " +
			"in the session's current directory, with the same limits as bash. Returns the exit code and output. Use it for multi-line programs and anything too long for one command line.",
		Annotations: &mcp.ToolAnnotations{Title: "run_code", DestructiveHint: ptr(true), OpenWorldHint: ptr(true)},
	}, func(sc *jsonschema.Schema) {
		if p := sc.Properties["language"]; p != nil {
			for _, l := range languages {
				p.Enum = append(p.Enum, l)
			}
			p.Default = json.RawMessage(`"python"`)
		}
	}, s.runCode)
}

func (s *Server) runCode(ctx context.Context, c *call, in RunCodeInput) (*mcp.CallToolResult, CommandResult, error) {
	var zero CommandResult
	lang := in.Language
	if lang == "" {
		lang = "python"
	}
	ip, ok := interpreterFor(lang)
	if !ok {
		return nil, zero, badInput("language %q is not one of %s", lang, strings.Join(languages, ", "))
	}
	switch {
	case strings.TrimSpace(in.Code) == "":
		return nil, zero, badInput("code is empty; give the program to run")
	case len(in.Code) > maxCodeBytes:
		return nil, zero, badInput("code is %s long; at most %s is accepted: write the program into files with a file tool and run it with bash", sizeText(int64(len(in.Code))), sizeText(maxCodeBytes))
	case strings.IndexByte(in.Code, 0) >= 0:
		return nil, zero, badInput("code contains a NUL byte; a script file cannot hold one (write \"\\0\" escapes instead)")
	}
	timeout, err := timeoutArg(in.TimeoutS)
	if err != nil {
		return nil, zero, err
	}
	if lang == "bash" {
		if ask, err := s.approve(ctx, c, in.Code); err != nil || ask != nil {
			return ask, zero, err
		}
	}
	// One resolution of the settings for the whole call (see call.spec).
	sp, err := c.spec()
	if err != nil {
		return nil, zero, err
	}
	var file string
	inside := helperInside(sp, c.sess)
	if inside {
		// The sandbox does not see the host's scratch directory (docker):
		// the file server writes the script in the sandbox's /tmp, and the
		// command removes it.
		if file, err = writeScriptInside(ctx, c.sess, ip.ext, in.Code); err != nil {
			return nil, zero, err
		}
	} else {
		if file, err = writeScript(c.sess, ip.ext, in.Code); err != nil {
			return nil, zero, err
		}
		defer removeScript(file)
	}

	stop := c.progress(ctx, "run_code", effectiveTimeout(sp, timeout))
	command := scriptCommand(ip, file)
	if inside {
		command = "( " + command + " ); __corral_code_rc=$?; rm -f " + shellQuote(file) + "; exit $__corral_code_rc"
	}
	r, err := c.sess.Exec(ctx, session.ExecRequest{Command: command, Timeout: timeout, Progress: c.note(ctx), Spec: sp})
	stop()
	if err != nil {
		return nil, zero, err
	}
	if r.ExitCode == 127 && strings.Contains(r.Output.Text, noInterpreter) {
		return nil, zero, &ToolError{Msg: fmt.Sprintf("%s is not installed in the sandbox (none of %s is on its PATH), so the code was not run. Use another language (%s), or check what is installed with bash (command -v python3 node).",
			lang, strings.Join(ip.commands, ", "), strings.Join(otherLanguages(lang), ", "))}
	}
	return commandResult(r)
}

// helperInside reports whether the session's backend runs corral's own
// helper at a path of its own inside the sandbox (sandbox.Layout: docker),
// where the host's scratch directory is not mounted: by sp, the call's
// Spec, or when that is nil the session's.
func helperInside(sp *session.Spec, sess *session.Session) bool {
	if sp == nil {
		var err error
		if _, sp, _, err = sess.SandboxRequest(nil); err != nil {
			return false
		}
	}
	l, ok := sp.Backend.(sandbox.Layout)
	return ok && l.HelperPath() != ""
}

// writeScriptInside writes code to a file of its own under /tmp/.corral-code
// in the session's sandbox, through the file server, and returns its path.
func writeScriptInside(ctx context.Context, sess *session.Session, ext, code string) (string, error) {
	fc, err := sandboxfs.For(sess)
	if err != nil {
		return "", err
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	path := "/tmp/.corral-code/code-" + hex.EncodeToString(b[:]) + ext
	if _, err := fc.Write(ctx, path, code); err != nil {
		return "", fmt.Errorf("writing the script in the sandbox: %w", err)
	}
	return path, nil
}

// writeScript writes code to a file of its own in the session's scratch
// directory, which the sandbox sees at the same path, and returns the
// path. The sandbox writes that directory: every step goes through an
// os.Root of it, so a symlink the sandbox left at .corral-code (or
// anywhere) cannot lead the write out of it (a link to ~/.bashrc.d would
// have put a script there that the host's shell sources).
func writeScript(sess *session.Session, ext, code string) (string, error) {
	scratch := sess.ScratchDir()
	if real, err := filepath.EvalSymlinks(scratch); err == nil {
		scratch = real // corral's own directory: its path, not the sandbox's
	}
	root, err := os.OpenRoot(scratch)
	if err != nil {
		return "", sandbox.NotStarted(fmt.Errorf("opening the scratch directory: %w", err))
	}
	defer root.Close()
	const sub = ".corral-code"
	if fi, err := root.Lstat(sub); err == nil && !fi.IsDir() {
		// Not the directory corral made: a file or a link the sandbox
		// put there. Only the entry goes, never what it leads to.
		if err := root.Remove(sub); err != nil {
			return "", sandbox.NotStarted(fmt.Errorf("clearing %s: %w", filepath.Join(scratch, sub), err))
		}
	}
	if err := root.Mkdir(sub, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", sandbox.NotStarted(fmt.Errorf("creating the script directory: %w", err))
	}
	var rnd [8]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return "", err
	}
	name := filepath.Join(sub, "code-"+hex.EncodeToString(rnd[:])+ext)
	f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return "", sandbox.NotStarted(fmt.Errorf("creating the script file: %w", err))
	}
	_, err = f.WriteString(code)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		root.Remove(name)
		return "", sandbox.NotStarted(fmt.Errorf("writing the script file: %w", err))
	}
	return filepath.Join(scratch, name), nil
}

// removeScript removes the script writeScript made at file, through an
// os.Root of its scratch directory: the sandbox may have replaced the
// directory on the way by a link meanwhile.
func removeScript(file string) {
	scratch := filepath.Dir(filepath.Dir(file))
	root, err := os.OpenRoot(scratch)
	if err != nil {
		return
	}
	defer root.Close()
	_ = root.Remove(filepath.Join(filepath.Base(filepath.Dir(file)), filepath.Base(file)))
}

// scriptCommand is the command line that runs file with the first of
// ip.commands on the sandbox's PATH, or says that none is there (exit
// status 127, as a shell does for a missing command).
func scriptCommand(ip interpreter, file string) string {
	var b strings.Builder
	for i, cmd := range ip.commands {
		if i == 0 {
			b.WriteString("if ")
		} else {
			b.WriteString("elif ")
		}
		fmt.Fprintf(&b, "command -v %s >/dev/null 2>&1; then %s %s; ", cmd, cmd, shellQuote(file))
	}
	fmt.Fprintf(&b, "else printf '%%s\\n' %s >&2; exit 127; fi", shellQuote(noInterpreter+strings.Join(ip.commands, " ")))
	return b.String()
}

// shellQuote quotes s for bash as one word.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// otherLanguages lists run_code's languages other than lang.
func otherLanguages(lang string) []string {
	var out []string
	for _, l := range languages {
		if l != lang {
			out = append(out, l)
		}
	}
	return out
}
