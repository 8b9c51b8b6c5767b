package tiktoken

import "unsafe"

// unsafeBytes views s as a byte slice without copying. The caller must not modify it.
func unsafeBytes(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

// unsafePointer returns the address of b's first element.
func unsafePointer(b []byte) unsafe.Pointer { return unsafe.Pointer(unsafe.SliceData(b)) }

// slotsOf views b (len a multiple of the slot size, 8-byte aligned) as slots.
func slotsOf(b []byte) []slot {
	return unsafe.Slice((*slot)(unsafePointer(b)), uintptr(len(b))/unsafe.Sizeof(slot{}))
}

// longSlotsOf is slotsOf for vocab.longs.
func longSlotsOf(b []byte) []longSlot {
	return unsafe.Slice((*longSlot)(unsafePointer(b)), uintptr(len(b))/unsafe.Sizeof(longSlot{}))
}
