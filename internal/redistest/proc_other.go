//go:build !linux

package redistest

import "syscall"

// sysProcAttr: without Linux's Pdeathsig, children are killed only by t.Cleanup.
func sysProcAttr() *syscall.SysProcAttr { return nil }
