package sandbox

import "fmt"

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
)

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
