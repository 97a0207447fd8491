// Package docker is corral's Docker backend: a session's commands, background
// processes and file tools run in a locked-down container that the session
// starts on first use and removes when it ends (scope "session"), or in one
// container that every session shares (scope "shared").
//
// It talks to the Docker Engine API through github.com/moby/moby/client,
// honouring DOCKER_HOST, DOCKER_API_VERSION, DOCKER_CERT_PATH and
// DOCKER_TLS_VERIFY; Podman works through its Docker-compatible socket.
// That client was chosen over the frozen github.com/docker/docker client
// because it is the maintained one, and because it still negotiates down to
// old engines: v0.6.2 declares MinAPIVersion 1.40, and against Debian 12's
// docker.io 20.10 (API 1.41) it negotiated 1.41 (checked 2026-11-30; the
// report that it refuses APIs below 1.44 does not hold for this version).
// Engines 24 to 29 speak 1.43 to 1.52, above that floor. Every call corral
// makes exists in API 1.41.
//
// Every container runs with all capabilities dropped, no-new-privileges,
// a read-only root filesystem with a tmpfs /tmp (HOME=/tmp), no network
// unless the settings name one, memory, CPU and process limits, an init
// process that reaps orphans, the host user's uid:gid, and only the
// workspace (at its own path), the configured binds and corral's own
// executable (read-only, at /.corral/corral) mounted from the host. The
// executable runs the helpers of package inside, which give each command
// its own session and process group, relay its output and exit status, and
// report memory kills. Each corral process keeps one docker exec open per
// container (inside.ModeAgent) and runs every command as a child of that
// agent: a docker exec costs a runc start (about 90 ms on Docker 20.10 on
// the 2-core test machine), a fork about a millisecond. Only a command for
// another user (corral exec --user) takes a docker exec of its own.
//
// Secrets (issue 14) work as on bwrap, through the same egress pool and
// the preparation in package secrets: stand-ins and the CA variables go
// into each command's environment, never the container's Env, and a trust
// bundle is bound read-only at the image's system bundle paths (trust.go).
//
// Review mode (workspace_mode review, package layer) makes the workspace an
// overlay volume that the engine mounts over the session's layer, so the
// host's files stay as they were until a person applies the changes
// (review.go says how and why; on Podman the volume is a named one made
// first, podman.go's podmanVolumes).
package docker
