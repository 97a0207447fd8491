package corral_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/corralhq/corral"
	"github.com/corralhq/corral/config"
	"github.com/corralhq/corral/session"
)

// Example embeds corral: one Host per process, a session, a command in its
// sandbox (bubblewrap, the default backend). A program that wants the
// person's own settings passes corral.Options{} instead.
func Example() {
	// A project and a state directory, outside /tmp (each sandbox has a
	// fresh /tmp) and apart (the sandbox writes the project).
	project, _ := os.MkdirTemp("/var/tmp", "corral-example-")
	state, _ := os.MkdirTemp("/var/tmp", "corral-state-")
	defer os.RemoveAll(project)
	defer os.RemoveAll(state)
	st := config.Defaults()
	st.Cwd = project
	h, err := corral.Open(corral.Options{Settings: st, StateDir: state})
	if err != nil {
		log.Fatal(err)
	}
	defer h.Close()
	s, _ := h.Session("example")
	r, err := s.Exec(context.Background(), session.ExecRequest{Command: "echo hello"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(r.Output.Text)
	// Output: hello
}
