package tiktoken

import "syscall"

// hugePage is the size of a transparent huge page on linux/amd64 and arm64 (4 KiB base pages).
const hugePage = 2 << 20

// hugeBytes returns n zeroed bytes that the kernel may back with transparent huge pages
// (madvise MADV_HUGEPAGE, which the kernel honours unless THP is set to "never"), and the
// function that unmaps them. It is for the vocabulary's hash table: its lookups land on random
// pages of 8 MiB, and with 4 KiB pages most of them would also miss the TLB once the rest of
// the service shares it. Below one huge page, or when the mapping fails, the bytes come from
// the Go heap and free is nil.
func hugeBytes(n int) (b []byte, free func()) {
	if n < hugePage {
		return make([]byte, n), nil
	}
	size := (n+hugePage-1)&^(hugePage-1) + hugePage // room to align the start
	m, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return make([]byte, n), nil
	}
	// Huge pages back only whole, aligned 2 MiB ranges of a mapping.
	off := 0
	if r := int(uintptr(unsafePointer(m)) & (hugePage - 1)); r != 0 {
		off = hugePage - r
	}
	b = m[off : off+n : off+n]
	_ = syscall.Madvise(b, syscall.MADV_HUGEPAGE) // advice: without it, 4 KiB pages
	return b, func() { _ = syscall.Munmap(m) }
}
