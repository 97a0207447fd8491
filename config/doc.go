// Package config reads and edits corral's settings.
//
// Settings come from three layers, later ones winning key by key:
//
//  1. the defaults in the key registry (see [Keys]);
//  2. a YAML file, by default $XDG_CONFIG_HOME/corral/config.yaml (see
//     [DefaultPath]; CORRAL_CONFIG or the --config flag name another one);
//  3. environment variables CORRAL_<KEY>, where KEY is the key upper-cased
//     with '.' replaced by '_' (memory_mb is CORRAL_MEMORY_MB, docker.image
//     would be CORRAL_DOCKER_IMAGE). An empty variable counts as unset.
//
// A settings file looks like this; nested keys (docker.image) are nested
// mappings:
//
//	backend: bwrap
//	profile: workspace
//	memory_mb: 2048    # MiB of memory (see corral doctor); 0 disables
//	timeout: 5m        # or a whole number of seconds
//	binds:
//	  - {src: /data}                       # read-only unless readonly: false
//	  - {src: /srv/cache, dest: /cache, readonly: false}
//	home_allow: [.gitconfig, .config/nvim]
//
// Every value is checked against the registry. A bad value is refused with
// a [*ValueError] naming the key, the value, what the key accepts and where
// the value came from; a key the registry does not know, in the file, is a
// [*UnknownKeyError]. Unknown CORRAL_* variables are ignored, since other
// parts of corral use that prefix too.
//
// [Load] is meant to be called every time a sandbox is created: it reads
// one file and the given environment, nothing else. [Get], [Set], [Unset]
// and [List] back the `corral config` command; Set and Unset rewrite the
// file atomically and keep its other keys and comments.
package config
