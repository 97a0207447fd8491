package seccomp

import (
	"encoding/binary"
	"fmt"
	"runtime"

	"golang.org/x/net/bpf"
)

// retUserNotif is SECCOMP_RET_USER_NOTIF (linux/seccomp.h, Linux 5.0):
// the call waits until the holder of the filter's listener answers it.
const retUserNotif = 0x7fc00000

// ConnectNotifyBPF returns a filter, in the format of [BPF], whose only
// action other than allow is SECCOMP_RET_USER_NOTIF for connect(2) made
// through the native ABI of the running architecture. Installed with
// seccomp(2) SECCOMP_SET_MODE_FILTER and SECCOMP_FILTER_FLAG_NEW_LISTENER,
// it hands every connect of the process and its descendants to whoever
// holds the listener (seccomp_unotify(2)). Calls through another ABI are
// allowed here because corral's main filter ([BPF], stacked on top) kills
// foreign ABIs and refuses x32 calls (their numbers carry
// __X32_SYSCALL_BIT, so they never equal connect's).
//
// The error wraps [ErrUnsupported] on an architecture other than amd64 and
// arm64.
func ConnectNotifyBPF() ([]byte, error) {
	insts, err := connectNotifyProgram(runtime.GOARCH)
	if err != nil {
		return nil, err
	}
	raw, err := bpf.Assemble(insts)
	if err != nil {
		return nil, fmt.Errorf("assembling connect notification filter: %w", err)
	}
	out := make([]byte, 0, 8*len(raw))
	for _, ins := range raw {
		out = binary.NativeEndian.AppendUint16(out, ins.Op)
		out = append(out, ins.Jt, ins.Jf)
		out = binary.NativeEndian.AppendUint32(out, ins.K)
	}
	return out, nil
}

func connectNotifyProgram(goarch string) ([]bpf.Instruction, error) {
	p, err := platformFor(goarch)
	if err != nil {
		return nil, err
	}
	nr, ok := p.info.SyscallNames["connect"]
	if !ok {
		return nil, fmt.Errorf("seccomp: no connect syscall on %s", p.info.Name)
	}
	return []bpf.Instruction{
		bpf.LoadAbsolute{Off: offArch, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(p.info.ID), SkipFalse: 3},
		bpf.LoadAbsolute{Off: offNr, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(nr), SkipFalse: 1},
		bpf.RetConstant{Val: retUserNotif},
		bpf.RetConstant{Val: retAllow},
	}, nil
}
