package redistest

import "syscall"

// sysProcAttr makes the kernel kill the child if the test binary dies first (a panic, a timeout,
// a SIGKILL), so that no redis-server outlives its test.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
}
