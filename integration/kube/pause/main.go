// Command pause is the test cluster's sandbox ("pause") container: the first
// process of every pod, which holds the pod's namespaces. It sleeps until
// SIGINT or SIGTERM and, as PID 1 of the pod's PID namespace when that is
// shared, reaps the zombies of the pod's other processes. No registry is
// reachable where the cluster runs, so integration/kube/build.sh builds this
// into an image of its own.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range sigs {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
