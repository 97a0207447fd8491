package secrets

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/corralhq/corral/sandbox"
)

// maxFileBytes bounds a file a secret is read from: credentials are short,
// and a larger file is more likely a mistake (a directory of keys, a log).
const maxFileBytes = 64 << 10

// ErrUnusable means a secret's real value could not be read or cannot be
// used; the wrapping error names the secret and its source, never the
// value. It wraps sandbox.ErrBadRequest: the command does not run.
var ErrUnusable = fmt.Errorf("%w: secret", sandbox.ErrBadRequest)

// Resolve reads the real values of specs on the host and gives each its
// stand-in under key ([ProcessKey] in corral). getenv looks up the
// caller's own environment (for "env:VAR"); "file:/path" is read whole,
// one trailing newline dropped. A value must be at least [MinValueLen]
// bytes of printable ASCII without spaces (it travels in an HTTP header),
// and its stand-in must differ from it. Before reading anything it makes
// the process non-dumpable ([ProtectProcess]). Errors wrap [ErrUnusable]
// and name the secret and the source.
func Resolve(specs []sandbox.Secret, getenv func(string) (string, bool), key []byte) ([]Secret, error) {
	if len(specs) > 0 {
		// From here on the process holds real values: no core of it.
		if err := ProtectProcess(); err != nil {
			return nil, fmt.Errorf("%w: corral cannot keep its memory out of core dumps, so it reads no value: %v", ErrUnusable, err)
		}
	}
	out := make([]Secret, 0, len(specs))
	for _, sp := range specs {
		v, si, err := resolveOne(sp.Name, sp.From, getenv, key)
		if err != nil {
			return nil, err
		}
		hosts := make([]string, len(sp.Hosts))
		for i, h := range sp.Hosts {
			hosts[i] = strings.ToLower(strings.TrimSuffix(h, "."))
		}
		sec := Secret{Name: sp.Name, Value: v, StandIn: si, Hosts: hosts, Headers: sp.Headers}
		if sp.Kind == KindAWS {
			sec.Kind, sec.SecretName = KindAWS, sp.SecretVar()
			if sec.SecretValue, sec.SecretStandIn, err = resolveOne(sec.SecretName, sp.SecretFrom, getenv, key); err != nil {
				return nil, err
			}
		}
		out = append(out, sec)
	}
	return out, nil
}

// resolveOne reads the value of the variable name from src and makes its
// stand-in.
func resolveOne(name, src string, getenv func(string) (string, bool), key []byte) (value, standIn string, err error) {
	v, err := readValue(src, getenv)
	if err != nil {
		return "", "", fmt.Errorf("%w %s (from %s): %v", ErrUnusable, name, src, err)
	}
	if why := checkValue(v); why != "" {
		return "", "", fmt.Errorf("%w %s (from %s): the value %s", ErrUnusable, name, src, why)
	}
	si, ok := StandIn(key, name, v)
	if !ok {
		return "", "", fmt.Errorf("%w %s (from %s): the value has too few letters and digits for a stand-in that differs from it", ErrUnusable, name, src)
	}
	return v, si, nil
}

func readValue(src string, getenv func(string) (string, bool)) (string, error) {
	if name, ok := sandbox.SourceEnv(src); ok {
		v, ok := getenv(name)
		if !ok || v == "" {
			return "", fmt.Errorf("the variable %s is not set in corral's environment", name)
		}
		return v, nil
	}
	path, ok := sandbox.SourceFile(src)
	if !ok {
		return "", errors.New(`from is neither "env:VAR" nor "file:/abs/path"`)
	}
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("cannot open the file: %w", errors.Unwrap(err))
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		return "", errors.New("not a regular file")
	}
	b, err := io.ReadAll(io.LimitReader(f, maxFileBytes+1))
	if err != nil {
		return "", errors.New("cannot read the file")
	}
	if len(b) > maxFileBytes {
		return "", fmt.Errorf("the file is larger than %d bytes", maxFileBytes)
	}
	s := strings.TrimSuffix(string(b), "\n")
	return strings.TrimSuffix(s, "\r"), nil
}

// checkValue returns why v cannot be a secret's value, or "". It never
// quotes v.
func checkValue(v string) string {
	if len(v) < MinValueLen {
		return fmt.Sprintf("is shorter than %d bytes", MinValueLen)
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c <= ' ' || c >= 0x7f {
			return fmt.Sprintf("has a space, control or non-ASCII byte at offset %d (it must fit in an HTTP header)", i)
		}
	}
	return ""
}

// Env returns "NAME=STANDIN" entries for secs, in order: what the sandbox's
// environment holds in place of the real values.
func Env(secs []Secret) []string {
	out := make([]string, 0, len(secs))
	for _, s := range secs {
		out = append(out, s.Name+"="+s.StandIn)
		if s.Kind == KindAWS {
			out = append(out, s.SecretName+"="+s.SecretStandIn)
		}
	}
	return out
}

// SourceVars returns the variables the real values were read from
// ("env:VAR" sources): the sandbox's environment must not hold them, even
// when env_allow names them.
func SourceVars(specs []sandbox.Secret) []string {
	var out []string
	for _, sp := range specs {
		for _, src := range sp.Sources() {
			if v, ok := sandbox.SourceEnv(src); ok {
				out = append(out, v)
			}
		}
	}
	return out
}
