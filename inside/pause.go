package inside

import (
	"os"
	"os/signal"
	"syscall"
)

// pauseMain is the container's main process: it does nothing until SIGTERM,
// SIGINT or SIGHUP (docker stop, or docker-init passing one on) and then
// exits 0. Zombies are reaped by the init process Docker runs as pid 1
// (HostConfig.Init).
func pauseMain() int {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	<-ch
	return 0
}
