package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/corralhq/corral"
)

// versionLine is the one line `corral --version` and `corral version`
// print: the version, the revision and the toolchain.
func versionLine() string {
	b := corral.Build()
	s := "corral " + b.Version
	if b.Revision != "" {
		s += " (" + b.Revision[:min(12, len(b.Revision))]
		if b.Modified {
			s += ", modified"
		}
		s += ")"
	}
	return s + " " + b.GoVersion
}

func newVersionCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print corral's version, the VCS revision it was built from, and the Go toolchain",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if asJSON {
				enc := json.NewEncoder(os.Stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(corral.Build())
			}
			fmt.Println(versionLine())
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the build information as JSON (version, revision, time, modified, go_version)")
	return cmd
}
