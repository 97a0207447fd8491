package sandbox

import (
	"fmt"
	"strings"
)

// Names of the limits a Result.LimitHit may carry.
const (
	LimitCPU    = "cpu"
	LimitMemory = "memory"
	LimitProcs  = "procs"
	// LimitCommandMemory: the memory cgroup that bounds the whole command
	// (every process of it together) by memory_mb had the kernel's OOM
	// killer end a process of it (its oom_kill count rose); bwrap backend,
	// where corral can use a memory cgroup.
	LimitCommandMemory = "command-memory"
	// LimitContainerMemory: the container's memory cgroup killed a process
	// (the engine's OOMKilled); docker backend only.
	LimitContainerMemory = "container-memory"
	// LimitPodMemory: the pod's memory limit (kubernetes.memory) killed a
	// process (the helper's cgroup count, or the kubelet's OOMKilled);
	// kubernetes backend.
	LimitPodMemory = "pod-memory"
	// LimitContainerProcessMemory: a process of the command most likely
	// ran out of memory under docker.memory held per process
	// (RLIMIT_DATA), on an engine that cannot limit the container as a
	// whole (a rootless Podman on cgroup v1); docker backend only.
	LimitContainerProcessMemory = "container-process-memory"
	// LimitContainerProcs: the command hit docker.pids_limit held as
	// RLIMIT_NPROC in the container's user namespace, on such an engine;
	// docker backend only.
	LimitContainerProcs = "container-procs"
)

// memoryPatterns are (lower-cased) messages programs print when an
// allocation fails under RLIMIT_DATA: mmap(2) and brk(2) fail with ENOMEM
// (strerror "Cannot allocate memory"), and runtimes say it their way
// (Python's MemoryError, Go's "fatal error: runtime: out of memory",
// V8's "Fatal process out of memory", the JVM's "There is insufficient
// memory for the Java Runtime Environment" or OutOfMemoryError).
var memoryPatterns = []string{
	"memoryerror", "cannot allocate memory", "out of memory", "bad_alloc",
	"memory exhausted", "xmalloc: cannot allocate", "failed to reserve",
	"allocation failed", "could not allocate", "unable to allocate",
	"insufficient memory", "outofmemoryerror",
}

// RanOutOfMemory says whether text (the end of a command's stderr)
// holds what a program prints when an allocation fails under
// RLIMIT_DATA (memoryPatterns), in any case. Pure.
func RanOutOfMemory(text string) bool {
	t := strings.ToLower(text)
	for _, pat := range memoryPatterns {
		if strings.Contains(t, pat) {
			return true
		}
	}
	return false
}

// ForkRefused says whether text (the end of a command's stderr) holds
// what shells print when fork(2) fails with EAGAIN, as it does at
// RLIMIT_NPROC (bash's "fork: Resource temporarily unavailable" and
// "fork: retry", dash's "Cannot fork", busybox's "can't fork"). Pure.
func ForkRefused(text string) bool {
	t := strings.ToLower(text)
	return strings.Contains(t, "fork: resource temporarily unavailable") ||
		strings.Contains(t, "fork: retry") || strings.Contains(t, "can't fork") || strings.Contains(t, "cannot fork")
}

// LimitMessage returns one sentence, for a person or a model, that says
// which limit ended a command (or, with r.MemoryKills, killed some of its
// processes while it went on) and which setting raises it, or "" when
// neither happened.
func LimitMessage(r *Result, l Limits) string {
	switch r.LimitHit {
	case LimitCPU:
		return fmt.Sprintf("corral: the command was killed by the CPU time limit (%d s of CPU per process); raise cpu_seconds (--cpu-seconds, or `corral config set cpu_seconds 600`; 0 disables)", l.CPUSeconds)
	case LimitMemory:
		return fmt.Sprintf("corral: the command most likely ran out of memory under the memory limit (%d MiB of memory per process: RLIMIT_DATA, no memory cgroup here); raise memory_mb (--memory-mb, or `corral config set memory_mb 2048`; 0 disables)", l.MemoryMB)
	case LimitCommandMemory:
		return fmt.Sprintf("corral: the command was killed by its memory limit (%d MiB for the whole command, all its processes together); raise memory_mb (--memory-mb, or `corral config set memory_mb 2048`; 0 disables)", l.MemoryMB)
	case LimitContainerMemory:
		return "corral: out of memory: the container's memory limit killed the command (the engine reported OOMKilled); raise docker.memory (`corral config set docker.memory 2g`)"
	case LimitPodMemory:
		return "corral: out of memory: the pod's memory limit killed the command (OOM kill in the pod's memory cgroup); raise kubernetes.memory (`corral config set kubernetes.memory 2Gi`)"
	case LimitContainerProcessMemory:
		return "corral: the command most likely ran out of memory under the container's memory limit (docker.memory of memory per process, not in total: RLIMIT_DATA, as this rootless engine cannot limit the container as a whole); raise docker.memory (`corral config set docker.memory 2g`)"
	case LimitContainerProcs:
		return "corral: the command hit the container's process limit (docker.pids_limit processes and threads of the container's user: RLIMIT_NPROC, as this rootless engine has no pids cgroup for the container); raise docker.pids_limit (`corral config set docker.pids_limit 1024`)"
	case LimitProcs:
		return fmt.Sprintf("corral: the command hit the process limit (%d processes and threads); raise max_procs (--max-procs, or `corral config set max_procs 1024`; 0 disables)", l.MaxProcs)
	}
	if r.MemoryKills > 0 {
		what, verb := "a process", "was"
		if r.MemoryKills > 1 {
			what, verb = fmt.Sprintf("%d processes", r.MemoryKills), "were"
		}
		switch r.MemoryLimit {
		case LimitContainerMemory:
			return fmt.Sprintf("corral: %s in the container %s killed by the container's memory limit, though the command itself went on; raise docker.memory (`corral config set docker.memory 2g`)", what, verb)
		case LimitPodMemory:
			return fmt.Sprintf("corral: %s in the pod %s killed by the pod's memory limit, though the command itself went on; raise kubernetes.memory (`corral config set kubernetes.memory 2Gi`)", what, verb)
		}
		return fmt.Sprintf("corral: %s of the command %s killed by its memory limit (%d MiB for the whole command, all its processes together), though the command itself went on; raise memory_mb (--memory-mb, or `corral config set memory_mb 2048`; 0 disables)", what, verb, l.MemoryMB)
	}
	return ""
}
