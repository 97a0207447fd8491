// Package kubernetes is corral's Kubernetes backend (preview): a session's
// commands, background processes and file tools run in a locked-down pod
// of its own that the session starts on its first command and removes
// when it ends (scope "session"), or in one pod that every session with
// the same settings shares (scope "shared").
//
// It talks to the cluster through client-go: the kubeconfig named by the
// settings, else KUBECONFIG or ~/.kube/config, else the in-cluster config.
// Each pod runs the image's sleep as a non-root uid with all capabilities
// dropped, no privilege escalation, a read-only root filesystem with
// writable volumes only at the workspace (at the session's working
// directory, so paths match the host's), /tmp (HOME) and NetDir, and
// /.corral (HelperDir) read-only, the seccomp profile the settings name
// (Localhost) or the runtime's default,
// no service-account token, no host namespaces or paths, and, under the
// restricted, workspace and allowlist profiles, a NetworkPolicy that
// denies all ingress and egress (enforced where the cluster's network
// plugin enforces NetworkPolicy). See buildPod.
//
// Under allowlist the pod reaches corral's egress proxy (egress.Pool, the
// same netproxy server as on the other backends) through a second
// long-lived exec per pod running the tunnel of package inside/tunnel:
// it listens where the docker container's forwarder expects the proxy's
// sockets and on 127.0.0.1:3128 and :1080, and carries each connection,
// multiplexed with yamux over the exec's stdin and stdout, to corral,
// which connects it to the proxy. A broken stream ends the tunnel in the
// pod, so proxied connections fail closed; the next command starts a new
// one (Engine.tunnelFor). Secrets work as on docker: stand-ins in the
// pod, the real values in the proxy, corral's CA trusted through a bundle
// copied into HelperDir (prepareEgress) and the variables that name it.
//
// corral's static executable reaches the pod without a custom image: it is
// copied into the /.corral emptyDir over an exec stream into the pod's
// second container (HelperContainerName: the image's sleep as another
// uid, HelperUID, with HelperDir writable and nothing else mounted), so
// that a command, which sees HelperDir read-only and cannot reach the
// other uid's /proc/PID/root, cannot replace the helper that `corral cp`
// and the agent run (issue 24; the host checks what comes back
// nonetheless: package wscopy). Its SHA-256 is checked in the pod
// (containerd's CRI exec closes stdin as soon as stdout ends, so a plain
// `cat > file` upload can be cut short silently; the upload keeps stdout
// open until stdin ends, and a mismatch is retried).
// Then one exec per corral process and pod runs inside.ModeAgent, and
// every command runs as a child of it over the frame protocol of package
// agentclient, as on the docker backend: a command costs a round trip on
// an open stream, not a new exec.
//
// `corral cp` and `corral sync` (CopyIn, CopyOut) run ModeUntar and
// ModeTar of package inside over an exec; what the pod prints is hostile
// input held in bounded memory: the end of its stderr (internal/tail),
// an answer of at most maxUntarAnswer, and an archive spooled to a file
// no larger than the caller's limit (what the destination may receive).
//
// Pods, their NetworkPolicies and PVCs carry LabelManaged and the owning
// corral process (AnnotationOwner), so `corral cleanup` (Engine.Cleanup)
// removes those of a corral that is gone, and never anything else.
//
// Warm pool (Settings.WarmPool): a long-running engine keeps that many
// free pods per pool key (poolKey: everything that makes two pods differ,
// the helper's SHA-256 included), made exactly as a session's and
// labelled LabelPool=free only once Ready with the helper verified. A
// session claims one with an update that relabels it and takes the
// session's annotations and owner, carrying the resourceVersion it read:
// the API server refuses the second of two concurrent claims (409), whose
// claimer tries the next free pod. The pool refills in the background
// after each claim, when the engine first sees a key and every 30 s (other
// corral processes' claims are not announced); a one-shot engine
// (Options.OneShot) only claims. Free pods belong to the engine that made
// them (AnnotationMaker): Close deletes them (with their resourceVersion
// as a precondition, so a pod claimed meanwhile stays); cleanup removes
// those of a dead corral. When no pod is free the session starts cold.
// The pool sits behind a small interface (warmPool: "a ready pod of key
// K"), so agent-sandbox's SandboxWarmPool and SandboxClaim
// (agents.x-k8s.io) can replace it where a cluster runs that controller.
//
// A pod gone behind corral's back (evicted by its kubelet, for instance
// for a workspace past its sizeLimit, or through the Eviction API;
// deleted; its commands' container ended) is noticed when its agent
// stream breaks or cannot be opened: corral reads the pod (podLoss: the
// kubelet's Evicted message, the DisruptionTarget condition's reason),
// removes it, and runs the command that could not be sent, or else the
// session's next one, in a new pod whose first result notes what went
// (lostNote: the workspace emptyDir, /tmp, background processes). A
// command running when its pod went is sandbox.ErrMayHaveRun, naming the
// cause; it is never run again.
//
// ScopeCluster (issue 29: any replica serves any session): a session's
// pod is its home, named by the session and the settings (homePodName),
// made by whichever corral comes first (the API server refuses the
// others' creates, and they use it once its maker marks its helper
// checked), owned by no corral (HomeOwner) and removed, conditional on
// its UID or resourceVersion, when every corral using it has let it sit
// idle (watchHome). The session's turn, saved state and the marker of
// its running command live in the pod (HomeDir) and are taken over this
// corral's agent (Backend.Turn, sandbox.TurnBackend; inside/turn.go).
//
// Settings.IdleTimeout: a session pod in which no command (background
// processes included) has run for that long is removed; the session's
// next command gets a new pod (from the pool when it can) and a note that
// the workspace was reset, or, under storage pvc, mounts the session's
// PVC again (it outlives the pod until the session ends).
package kubernetes
