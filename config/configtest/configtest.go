// Package configtest loads settings files in tests of the packages whose
// settings register with package config (a backend's section of keys):
// the file written to a test's temporary directory, loaded by
// config.Load with HOME=/home/u and the variables given, as a user's
// would be.
package configtest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/corralhq/corral/config"
)

// LoadErr loads a settings file of body with the variables env
// ("NAME=value") and returns config.Load's error (nil when they load).
func LoadErr(t testing.TB, body string, env ...string) error {
	t.Helper()
	_, err := load(t, body, env)
	return err
}

// Refused loads a settings file of body with the variables env and fails
// the test unless the load is refused with an error holding every one of
// want (the key and what it accepts).
func Refused(t testing.TB, body string, env []string, want ...string) {
	t.Helper()
	err := LoadErr(t, body, env...)
	for _, w := range want {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("error %v lacks %q", err, w)
		}
	}
}

// Load loads a settings file of body and returns the settings; an error
// fails the test.
func Load(t testing.TB, body string) *config.Settings {
	t.Helper()
	st, err := load(t, body, nil)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func load(t testing.TB, body string, env []string) (*config.Settings, error) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return config.Load(p, append([]string{"HOME=/home/u"}, env...))
}
