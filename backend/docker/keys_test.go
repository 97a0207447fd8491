package docker

import (
	"reflect"
	"testing"

	"github.com/corralhq/corral/config"
	"github.com/corralhq/corral/config/configtest"
)

// TestBadSettings: a bad docker.* value is refused by config.Load, naming
// the key and what it accepts (the checks declared in keys.go).
func TestBadSettings(t *testing.T) {
	for _, tc := range []struct {
		name string
		file string   // settings file body, or
		env  []string // extra variables
		want []string // substrings of the error
	}{
		{"docker pids below 16", "docker:\n  pids_limit: 8", nil, []string{"docker.pids_limit: 8 is not a whole number of at least 16"}},
		{"docker memory", "docker:\n  memory: lots", nil, []string{`docker.memory: "lots" is not a size`}},
		{"docker user", "docker:\n  user: alice", nil, []string{`docker.user: "alice" is not uid:gid in numbers`}},
		{"docker read_only", "docker:\n  read_only: maybe", nil, []string{`docker.read_only: "maybe" is not true or false`}},
		{"docker host without a scheme", "docker:\n  host: /run/podman/podman.sock", nil, []string{`docker.host: "/run/podman/podman.sock" is not an engine address`}},
		{"docker host, a relative socket", "docker:\n  host: unix://podman.sock", nil, []string{"docker.host", "not an absolute path"}},
		{"docker host from the environment", "", []string{"CORRAL_DOCKER_HOST=podman.sock"}, []string{"docker.host", "is not an engine address"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			configtest.Refused(t, tc.file, tc.env, tc.want...)
		})
	}
}

// TestSettingsKeys: the docker.* keys load into this package's Settings
// (SettingsOf): no settings give DefaultSettings; YAML's boolean false for
// read_only, and the word, turn it off.
func TestSettingsKeys(t *testing.T) {
	if got := SettingsOf(config.Defaults()); !reflect.DeepEqual(got, DefaultSettings) {
		t.Errorf("defaults %+v, want %+v", got, DefaultSettings)
	}
	for _, body := range []string{"docker:\n  read_only: false", "docker:\n  read_only: \"false\""} {
		if st := configtest.Load(t, body); SettingsOf(st).ReadOnly {
			t.Errorf("%q: read_only still on", body)
		}
	}
	st := configtest.Load(t, "docker:\n  image: alpine\n  pids_limit: 64\n  binds: [{src: /data}]\n  host: unix:///run/podman/podman.sock")
	got := SettingsOf(st)
	if got.Host != "unix:///run/podman/podman.sock" || got.Image != "alpine" || got.PidsLimit != 64 || len(got.Binds) != 1 || got.Binds[0].Src != "/data" || !got.ReadOnly {
		t.Errorf("loaded %+v", got)
	}
	if v, err := st.Value("docker.read_only"); err != nil || v != true {
		t.Errorf("Value(docker.read_only) = %#v, %v", v, err)
	}
}
