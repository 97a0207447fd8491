package config

import (
	"reflect"
	"strings"
	"testing"
)

func TestPortsKey(t *testing.T) {
	for _, tc := range []struct {
		name    string
		file    string
		environ []string
		want    []int
		wantErr string
	}{
		{name: "absent", want: nil},
		{name: "file", file: "ports: [3000, 5173, 3000]\n", want: []int{3000, 5173}},
		{name: "quoted numbers", file: "ports: [\"8080\"]\n", want: []int{8080}},
		{name: "env comma list", environ: env("CORRAL_PORTS=3000, 8000"), want: []int{3000, 8000}},
		{name: "env JSON", environ: env("CORRAL_PORTS=[4321]"), want: []int{4321}},
		{name: "env empty clears", file: "ports: [1]\n", environ: env("CORRAL_PORTS=[]"), want: []int{}},
		{name: "zero", file: "ports: [0]\n", wantErr: "ports[0]"},
		{name: "too big", file: "ports: [65536]\n", wantErr: "is not a TCP port from 1 to 65535"},
		{name: "word", file: "ports: [http]\n", wantErr: "is not a TCP port"},
		{name: "scalar", file: "ports: 3000\n", wantErr: "is not a list of TCP ports"},
		{name: "route", file: "routes: [{sessions: \"dev:*\", ports: [5173]}]\n", want: nil},
		{name: "route bad port", file: "routes: [{ports: [-1]}]\n", wantErr: "routes[0].ports[0]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			environ := tc.environ
			if environ == nil {
				environ = testEnv
			}
			s, err := Load(writeFile(t, tc.file), environ)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(s.Ports, tc.want) {
				t.Errorf("Ports = %#v, want %#v", s.Ports, tc.want)
			}
		})
	}
	s, err := Load(writeFile(t, "ports: [3000]\nroutes: [{sessions: \"dev:*\", ports: [5173, 8000]}]\n"), testEnv)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.ForSession("dev:1").Ports; !reflect.DeepEqual(got, []int{5173, 8000}) {
		t.Errorf("route's ports = %v", got)
	}
	if got := s.ForSession("other").Ports; !reflect.DeepEqual(got, []int{3000}) {
		t.Errorf("ports outside the route = %v", got)
	}
}
