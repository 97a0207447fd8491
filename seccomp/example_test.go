package seccomp_test

import (
	"fmt"
	"os"
	"os/exec"

	"github.com/corralhq/corral/seccomp"
)

// A bwrap sandbox with corral's filter: the memfd goes in as descriptor 3.
func ExampleFile() {
	opts := seccomp.Options{DenyUnixSockets: true}
	f, err := seccomp.File(opts)
	if err != nil {
		fmt.Println("not running the command:", err) // fail closed
		return
	}
	defer f.Close()
	cmd := exec.Command("bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
		"--unshare-all", "--die-with-parent", "--seccomp", "3", "--", "true")
	cmd.ExtraFiles = []*os.File{f} // ExtraFiles[0] is descriptor 3
	_ = cmd.Run()
}

// The table, as `corral doctor` prints it.
func ExampleRules() {
	for _, r := range seccomp.Rules(seccomp.Options{DenyUnixSockets: true})[:3] {
		fmt.Println(r)
	}
	// Output:
	// every foreign-ABI call -> kill-process
	// every x32-ABI call -> errno ENOSYS (amd64 only)
	// socket [arg0: domain == AF_UNIX] -> errno EPERM
}

// A Docker container with the same rules, through the CLI or the Engine API
// (HostConfig.SecurityOpt).
func ExampleDockerProfile() {
	profile, err := seccomp.DockerProfile(seccomp.Options{DenyUnixSockets: true})
	if err != nil {
		fmt.Println("not creating the container:", err)
		return
	}
	securityOpt := []string{"seccomp=" + string(profile), "no-new-privileges"}
	_ = securityOpt
}
