package seccomp

import (
	"encoding/json"
	"fmt"
	"math/bits"
	"slices"
)

// Docker seccomp profile, as read by dockerd (docs.docker.com/engine/security/seccomp/
// and moby's profiles/seccomp types). Only the fields corral writes.
type dockerProfile struct {
	DefaultAction string          `json:"defaultAction"`
	ArchMap       []dockerArch    `json:"archMap"`
	Syscalls      []dockerSyscall `json:"syscalls"`
}

type dockerArch struct {
	Architecture     string   `json:"architecture"`
	SubArchitectures []string `json:"subArchitectures"`
}

type dockerSyscall struct {
	Names    []string    `json:"names"`
	Action   string      `json:"action"`
	ErrnoRet uint        `json:"errnoRet"`
	Args     []dockerArg `json:"args,omitempty"`
	Comment  string      `json:"comment,omitempty"`
}

type dockerArg struct {
	Index    uint   `json:"index"`
	Value    uint64 `json:"value"`
	ValueTwo uint64 `json:"valueTwo"`
	Op       string `json:"op"`
}

// DockerProfile returns corral's filter as a Docker seccomp profile (JSON,
// the format of https://docs.docker.com/engine/security/seccomp/), for
// HostConfig.SecurityOpt = ["seccomp=" + string(profile)] through the Engine
// API, or a file given to `docker run --security-opt seccomp=FILE`. It
// needs Docker 20.10 or later (errnoRet). It is independent of the running
// architecture: its archMap covers x86_64 and aarch64 and the daemon picks
// its own.
//
// The rules are those of [Rules]; their translation:
//   - ABIForeign: the archMap lists no sub-architectures (no SCMP_ARCH_X86,
//     SCMP_ARCH_X32, SCMP_ARCH_ARM), so libseccomp's bad-arch action, which
//     runc keeps at its default SCMP_ACT_KILL, kills the thread making an
//     i386, arm or x32 call (SECCOMP_RET_KILL_THREAD rather than the whole
//     process as with [BPF]). This package's tests read the filter back from
//     a container of Docker 20.10/runc 1.1 to check it.
//   - an ArgEqual32 condition becomes SCMP_CMP_MASKED_EQ with mask
//     0xffffffff, so high bits in the register cannot bypass it;
//   - an ArgMaskedEqual condition becomes SCMP_CMP_MASKED_EQ with its Mask
//     (value) and Value (valueTwo), e.g. socketpair's type & 0xe == 2;
//   - an ArgAnyBit condition becomes one SCMP_CMP_MASKED_EQ alternative per
//     flag bit;
//   - Docker ANDs the args of one entry and ORs separate entries, so a rule
//     becomes one entry per combination of its conditions' alternatives: the
//     AF_NETLINK rule (domain == AF_NETLINK, protocol != NETLINK_ROUTE, that
//     is any of the protocol int's 32 bits set) is 32 entries. Each entry
//     carries the rule's errno as errnoRet (EPROTONOSUPPORT for that one)
//     and a comment: the rule's Reason on the first, its one-line form
//     ([Rule.String]) on the others.
//
// The trade: a profile with defaultAction SCMP_ACT_ALLOW replaces Docker's
// default profile, which is an allowlist (SCMP_ACT_ERRNO by default), since
// a container gets exactly one profile. Calls Docker's default refuses and
// this table does not become allowed: personality with unusual flags, NUMA
// policy calls, kcmp, fanotify_init, and every call newer than the profile
// (Docker's default refuses calls it does not list; this one allows them).
// corral accepts that because its containers run with every capability
// dropped and no-new-privileges, so the kernel itself refuses the
// capability-gated calls most of Docker's list is about, and because the
// table keeps the denials that matter to a process without capabilities:
// new namespaces through clone and unshare (Docker's default allows them
// only with CAP_SYS_ADMIN), clone3 as ENOSYS, keyrings, bpf, perf_event_open,
// userfaultfd and mounts. It refuses more than Docker's default in places:
// ptrace and process_vm_* (Docker allows them on Linux 4.8+), and io_uring
// (Docker allowed it before 25.0). runc skips a syscall name the daemon's
// libseccomp does not know (open_tree_attr, Linux 6.15, is newer than
// libseccomp 2.5), so such a rule is not enforced in Docker; for
// open_tree_attr the kernel still refuses the mount-changing form
// (OPEN_TREE_CLONE) to a process without CAP_SYS_ADMIN.
//
// The error wraps any inconsistency in the table; the caller must then not
// create the container.
func DockerProfile(opts Options) ([]byte, error) {
	if opts.MediatedUnixSockets {
		return nil, fmt.Errorf("seccomp: MediatedUnixSockets needs a connect(2) supervisor, which Docker containers do not have")
	}
	p := dockerProfile{DefaultAction: "SCMP_ACT_ALLOW"}
	for _, goarch := range platformNames {
		pl, err := platformFor(goarch)
		if err != nil {
			return nil, err
		}
		p.ArchMap = append(p.ArchMap, dockerArch{Architecture: pl.docker, SubArchitectures: []string{}})
	}
	for _, r := range Rules(opts) {
		if r.ABI != "" {
			if r.Action != ActionKillProcess && r.ABI != ABIX32 {
				return nil, fmt.Errorf("seccomp rule %v: Docker profiles cannot express this ABI rule", r)
			}
			continue // handled by archMap, see above
		}
		if r.Action != ActionErrno || r.Errno == 0 {
			return nil, fmt.Errorf("seccomp rule %v: unsupported action", r)
		}
		// x86-only names stay in an arm64 daemon's profile: runc skips
		// names unknown on the daemon's architecture.
		base := dockerSyscall{Names: slices.Clone(r.Syscalls), Action: "SCMP_ACT_ERRNO", ErrnoRet: uint(r.Errno), Comment: r.Reason}
		if len(r.Args) == 0 {
			p.Syscalls = append(p.Syscalls, base)
			continue
		}
		if err := r.checkArgs(); err != nil {
			return nil, err
		}
		// One entry per combination of the conditions' alternatives:
		// Docker ANDs the args of an entry and ORs the entries.
		entries := [][]dockerArg{nil}
		for _, a := range r.Args {
			alts := dockerArgs(a)
			var next [][]dockerArg
			for _, prefix := range entries {
				for _, alt := range alts {
					next = append(next, append(slices.Clone(prefix), alt))
				}
			}
			entries = next
		}
		for i, args := range entries {
			e := base
			e.Args = args
			if i > 0 { // the reason once per rule keeps the profile small
				e.Comment = fmt.Sprintf("%v (alternative %d of %d, reason on the first)", r, i+1, len(entries))
			}
			p.Syscalls = append(p.Syscalls, e)
		}
	}
	out, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encoding Docker seccomp profile: %w", err)
	}
	return out, nil
}

// dockerArgs translates one condition, checked by Rule.checkArgs, into the
// Docker args any one of which makes it hold. Every one is
// SCMP_CMP_MASKED_EQ with a mask of at most 32 bits, so the upper half of the
// register is ignored as by [BPF].
func dockerArgs(a Arg) []dockerArg {
	idx := uint(a.Index)
	switch a.Op {
	case ArgEqual32:
		return []dockerArg{{Index: idx, Value: 0xffffffff, ValueTwo: a.Value, Op: "SCMP_CMP_MASKED_EQ"}}
	case ArgMaskedEqual:
		return []dockerArg{{Index: idx, Value: a.Mask, ValueTwo: a.Value, Op: "SCMP_CMP_MASKED_EQ"}}
	}
	// ArgAnyBit: one alternative per bit of the mask.
	var out []dockerArg
	for m := a.Value; m != 0; m &= m - 1 {
		bit := uint64(1) << bits.TrailingZeros64(m)
		out = append(out, dockerArg{Index: idx, Value: bit, ValueTwo: bit, Op: "SCMP_CMP_MASKED_EQ"})
	}
	return out
}
