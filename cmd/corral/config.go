package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/corralhq/corral/config"
	"github.com/corralhq/corral/sandbox"
)

// newConfigCmd builds `corral config` and its subcommands, which read and
// edit the settings file named by --config (default: $CORRAL_CONFIG, else
// $XDG_CONFIG_HOME/corral/config.yaml).
func newConfigCmd(g *globalOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Show and change corral's settings",
		Long:  configLong, // + keyHelp(), added when the help is shown
		// NoArgs plus a RunE makes `corral config typo` an error instead of
		// the help text.
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	// The key list is built only when this command's help is shown: every
	// start of corral builds the command tree, and rendering every key's
	// default and doc is a good share of that.
	help := cmd.HelpFunc()
	cmd.SetHelpFunc(func(c *cobra.Command, args []string) {
		if c == cmd && c.Long == configLong {
			c.Long = configLong + keyHelp()
		}
		help(c, args)
	})
	cmd.AddCommand(
		newConfigGetCmd(g),
		newConfigSetCmd(g),
		newConfigUnsetCmd(g),
		newConfigListCmd(g),
		newConfigPathCmd(g),
	)
	return cmd
}

// configLong is the start of `corral config`'s help; keyHelp follows it.
const configLong = `Show and change corral's settings.

Settings come from defaults, then the settings file (YAML), then environment
variables CORRAL_<KEY> (the key upper-cased, '.' as '_'; lists as JSON).

Keys:
`

// keyHelp lists every key with its environment variable, default and doc.
func keyHelp() string {
	var b strings.Builder
	d := config.Defaults()
	for _, k := range config.Keys() {
		def, _ := d.Value(k.Name)
		fmt.Fprintf(&b, "  %s (%s, default %s)\n      %s\n", k.Name, k.EnvName(), showDefault(def), k.Doc)
	}
	return strings.TrimRight(b.String(), "\n")
}

// showDefault renders a default for help text.
func showDefault(v any) string {
	switch v := v.(type) {
	case string:
		if v == "" {
			return `""`
		}
		return v
	case []string, []sandbox.Bind:
		return "[]"
	}
	return fmt.Sprint(v)
}

// corralErr marks err as corral's own failure (exit status 125).
func corralErr(err error) error {
	if err == nil {
		return nil
	}
	return &exitError{Code: sandbox.ExitCorralError, Err: err}
}

// configPath returns the settings file in use.
func configPath(g *globalOptions) (string, error) {
	return config.ResolvePath(g.configPath, os.Environ())
}

// completeKeys completes the first argument with the registry's keys.
func completeKeys(_ *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var out []cobra.Completion
	for _, k := range config.Keys() {
		out = append(out, cobra.CompletionWithDesc(k.Name, k.Doc))
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

func newConfigGetCmd(g *globalOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "get KEY",
		Short: "Print a setting's effective value",
		Long: `Print a setting's effective value (file, environment or default), in the
form ` + "`corral config set`" + ` accepts: lists as JSON, durations as Go durations.`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeKeys,
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := configPath(g)
			if err != nil {
				return corralErr(err)
			}
			e, err := config.Get(p, args[0])
			if err != nil {
				return corralErr(err)
			}
			fmt.Fprintln(cmd.OutOrStdout(), e.Text)
			return nil
		},
	}
}

func newConfigSetCmd(g *globalOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "set KEY VALUE",
		Short: "Store a setting in the settings file",
		Long: `Store a setting in the settings file, after checking the value. The file and
its directory are created when missing; other keys and comments are kept.

Lists take JSON or YAML flow syntax, string lists also a comma-separated list:

  corral config set memory_mb 2048
  corral config set timeout 5m
  corral config set binds '[{src: /data}, {src: /srv/cache, readonly: false}]'
  corral config set home_allow '[.gitconfig, .config/nvim]'`,
		Args:              cobra.ExactArgs(2),
		ValidArgsFunction: completeKeys,
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := configPath(g)
			if err != nil {
				return corralErr(err)
			}
			if err := config.Set(p, args[0], args[1]); err != nil {
				return corralErr(err)
			}
			warnEnvOverride(cmd, args[0])
			warnDeprecated(cmd, args[0])
			return nil
		},
	}
	// "config set memory_mb -5" must reach the validator (which names the
	// key), not be taken for a flag.
	cmd.Flags().SetInterspersed(false)
	return cmd
}

func newConfigUnsetCmd(g *globalOptions) *cobra.Command {
	return &cobra.Command{
		Use:               "unset KEY",
		Short:             "Remove a setting from the settings file",
		Long:              "Remove a setting from the settings file, so the environment or the default applies again.",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeKeys,
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := configPath(g)
			if err != nil {
				return corralErr(err)
			}
			was, err := config.Unset(p, args[0])
			if err != nil {
				return corralErr(err)
			}
			if !was {
				fmt.Fprintf(cmd.ErrOrStderr(), "corral: %s was not set in %s\n", args[0], p)
			}
			warnEnvOverride(cmd, args[0])
			return nil
		},
	}
}

// warnEnvOverride notes on stderr that an environment variable beats the
// file for key.
func warnEnvOverride(cmd *cobra.Command, key string) {
	if _, ok := config.Lookup(key); !ok {
		return
	}
	name := config.EnvName(key)
	if v, ok := os.LookupEnv(name); ok && v != "" {
		fmt.Fprintf(cmd.ErrOrStderr(), "corral: note: %s is set in the environment and overrides the file\n", name)
	}
}

// warnDeprecated notes on stderr that key, just set, has no effect
// (config.Key.Deprecated): it is stored, as old files keep it, but
// changes nothing.
func warnDeprecated(cmd *cobra.Command, key string) {
	if k, ok := config.Lookup(key); ok && k.Deprecated != "" {
		fmt.Fprintf(cmd.ErrOrStderr(), "corral: warning: %s is deprecated and has no effect: %s\n", k.Name, k.Deprecated)
	}
}

func newConfigListCmd(g *globalOptions) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "Show every setting with its effective value and source",
		Long: `Show every setting with its effective value and where it came from: default,
file, or env (with the variable's name). --json prints a list of
{key, value, source, origin, doc} objects.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := configPath(g)
			if err != nil {
				return corralErr(err)
			}
			entries, err := config.List(p)
			if err != nil {
				return corralErr(err)
			}
			out := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				return corralErr(enc.Encode(entries))
			}
			return corralErr(writeConfigTable(out, entries))
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// writeConfigTable prints entries as `corral config list` shows them: KEY,
// SOURCE, VALUE. The value comes last so that a long one (the built-in
// protected_paths, approval_patterns: hundreds of characters) does not pad
// every other row to its width, as it did when VALUE sat in the middle.
func writeConfigTable(w io.Writer, entries []config.Entry) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tSOURCE\tVALUE")
	for _, e := range entries {
		src := string(e.Source)
		if e.Source == config.SourceEnv {
			src += " (" + e.Origin + ")"
		}
		val := e.Text
		if val == "" {
			val = `""`
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", e.Key, src, val)
	}
	return tw.Flush()
}

func newConfigPathCmd(g *globalOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "path",
		Short: "Print the settings file in use",
		Long:  "Print the settings file in use: --config, else $CORRAL_CONFIG, else $XDG_CONFIG_HOME/corral/config.yaml. It need not exist.",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := configPath(g)
			if err != nil {
				return corralErr(err)
			}
			fmt.Fprintln(cmd.OutOrStdout(), p)
			return nil
		},
	}
}
