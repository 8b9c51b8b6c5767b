//go:build !purego

#include "textflag.h"

// Byte constants of wordsSSE, 16 of each: bias that maps a-z (and, from 0x3f, A-Z) onto
// 0x80-0x99, the signed limit 0x9a below which a biased byte is in that range, and the space.
DATA wordsConst<>+0x00(SB)/8, $0x1f1f1f1f1f1f1f1f
DATA wordsConst<>+0x08(SB)/8, $0x1f1f1f1f1f1f1f1f
DATA wordsConst<>+0x10(SB)/8, $0x3f3f3f3f3f3f3f3f
DATA wordsConst<>+0x18(SB)/8, $0x3f3f3f3f3f3f3f3f
DATA wordsConst<>+0x20(SB)/8, $0x9a9a9a9a9a9a9a9a
DATA wordsConst<>+0x28(SB)/8, $0x9a9a9a9a9a9a9a9a
DATA wordsConst<>+0x30(SB)/8, $0x2020202020202020
DATA wordsConst<>+0x38(SB)/8, $0x2020202020202020
GLOBL wordsConst<>(SB), RODATA|NOPTR, $64

// headMask<>+8n keeps the low n bytes of a word (n = 0 to 8).
DATA headMask<>+0x00(SB)/8, $0
DATA headMask<>+0x08(SB)/8, $0xff
DATA headMask<>+0x10(SB)/8, $0xffff
DATA headMask<>+0x18(SB)/8, $0xffffff
DATA headMask<>+0x20(SB)/8, $0xffffffff
DATA headMask<>+0x28(SB)/8, $0xffffffffff
DATA headMask<>+0x30(SB)/8, $0xffffffffffff
DATA headMask<>+0x38(SB)/8, $0xffffffffffffff
DATA headMask<>+0x40(SB)/8, $0xffffffffffffffff
GLOBL headMask<>(SB), RODATA|NOPTR, $72

// func wordsSSE(t []byte, i int, w *wordTable) (next, count int)
//
// Registers: SI the text, DX the last i with 16 bytes left, R8 i, AX the count, DI the
// wordTable, R9 its slots, R10 headMask; X8-X11 the constants, X12 the byte that may not end
// a word, X13 the fold. Locals: 0(SP) a long word's last 8 bytes, 8(SP) its bytes 8 to n-1.
TEXT ·wordsSSE(SB), NOSPLIT, $16-56
	MOVQ  t_base+0(FP), SI
	MOVQ  t_len+8(FP), DX
	SUBQ  $16, DX
	MOVQ  i+24(FP), R8
	MOVQ  w+32(FP), DI
	MOVQ  0(DI), R9
	LEAQ  headMask<>(SB), R10
	XORQ  AX, AX
	MOVOU wordsConst<>+0x00(SB), X8
	MOVOU wordsConst<>+0x10(SB), X9
	MOVOU wordsConst<>+0x20(SB), X10
	MOVOU wordsConst<>+0x30(SB), X11
	MOVOU 80(DI), X12
	MOVOU 64(DI), X13

loop:
	CMPQ  R8, DX
	JGT   done
	MOVOU (SI)(R8*1), X0

	// R11: the letters of a word (bit j for byte j); R12: the capitals (o200k_base); BX: the
	// spaces.
	MOVOU    X0, X1
	POR      X13, X1
	PADDB    X8, X1
	MOVOU    X10, X2
	PCMPGTB  X1, X2
	PMOVMSKB X2, R11
	MOVOU    X0, X3
	PADDB    X9, X3
	MOVOU    X10, X4
	PCMPGTB  X3, X4
	PMOVMSKB X4, R12
	ANDQ     24(DI), R12
	MOVOU    X0, X5
	PCMPEQB  X11, X5
	PMOVMSKB X5, BX

	// R13, the prefix: bit 0 for a space or a capital at byte 0, bit 1 for a capital at
	// byte 1 after a space. CX, the word's length n: the first byte that is neither prefix
	// nor letter. BX, the prefix's length.
	MOVQ BX, R13
	ORQ  R12, R13
	ANDQ $1, R13
	SHLQ $1, BX
	ANDQ BX, R12
	ANDQ $2, R12
	ORQ  R12, R13
	ORQ  R13, R11
	NOTQ R11
	BSFQ R11, CX
	NOTQ R13
	BSFQ R13, BX
	CMPQ CX, BX
	JLE  symbol
	CMPQ CX, $15
	JGT  done

	// The byte that ends the word must be ASCII, and (o200k_base) not an apostrophe.
	MOVOU    X0, X6
	PCMPEQB  X12, X6
	POR      X0, X6
	PMOVMSKB X6, BX
	BTQ      CX, BX
	JCS      done

	// R12: n; BX: the word's bytes (its first 8 when n > 8).
	MOVQ CX, R12
	MOVQ (SI)(R8*1), BX
	CMPQ CX, $8
	JGT  long
	ANDQ (R10)(CX*8), BX

	// R11: the slot's offset, shortHash(head) >> shift, 16-aligned.
	MOVQ  $0xBF58476D1CE4E5B9, R11
	IMULQ BX, R11
	MOVQ  16(DI), CX
	SHRQ  CX, R11
	ANDQ  $-16, R11

probe:
	CMPQ BX, (R9)(R11*1)
	JNE  miss
	CMPL R12, 12(R9)(R11*1)
	JNE  miss
	INCQ AX
	ADDQ R12, R8
	JMP  loop

miss:
	CMPL 8(R9)(R11*1), $0
	JEQ  done
	ADDQ $16, R11
	ANDQ 8(DI), R11
	JMP  probe

symbol:
	// No letters: one ASCII punctuation byte before a space is a piece and a token.
	MOVBQZX (SI)(R8*1), BX
	CMPQ    BX, $0x80
	JAE     done
	MOVQ    48(DI), R12
	MOVBQZX (R12)(BX*1), BX
	TESTQ   56(DI), BX
	JNE     done
	CMPB    1(SI)(R8*1), $0x20
	JNE     done
	INCQ    AX
	INCQ    R8
	JMP     loop

long:
	// A word of 9 to 15 bytes: keyOf's hash of head, mid (bytes 8 to n-1) and tail (the
	// last 8 bytes), then rank's probe, the tail compared with the token's own in the arena.
	MOVQ 8(SI)(R8*1), R11
	ANDQ -64(R10)(CX*8), R11
	MOVQ R11, 8(SP)
	LEAQ -8(R8)(R12*1), CX
	MOVQ (SI)(CX*1), CX
	MOVQ CX, 0(SP)

	MOVQ  $0x9E3779B97F4A7C15, R11
	XORQ  BX, R11
	MOVQ  $0xBF58476D1CE4E5B9, CX
	IMULQ CX, R11
	MOVQ  R11, CX
	SHRQ  $31, CX
	XORQ  CX, R11
	XORQ  8(SP), R11
	MOVQ  $0x9E3779B97F4A7C15, CX
	IMULQ CX, R11
	MOVQ  R11, CX
	SHRQ  $29, CX
	XORQ  CX, R11
	XORQ  0(SP), R11
	MOVQ  R12, CX
	SHLQ  $56, CX
	XORQ  CX, R11

	// fmix
	MOVQ  R11, CX
	SHRQ  $33, CX
	XORQ  CX, R11
	MOVQ  $0xff51afd7ed558ccd, CX
	IMULQ CX, R11
	MOVQ  R11, CX
	SHRQ  $33, CX
	XORQ  CX, R11
	MOVQ  $0xc4ceb9fe1a85ec53, CX
	IMULQ CX, R11
	MOVQ  R11, CX
	SHRQ  $33, CX
	XORQ  CX, R11
	MOVQ  16(DI), CX
	SHRQ  CX, R11
	ANDQ  $-16, R11

lprobe:
	CMPQ    BX, (R9)(R11*1)
	JNE     lmiss
	CMPL    R12, 12(R9)(R11*1)
	JNE     lmiss
	MOVLQZX 8(R9)(R11*1), CX
	MOVQ    40(DI), R13
	MOVLQZX (R13)(CX*4), CX
	MOVQ    32(DI), R13
	MOVQ    -8(R13)(CX*1), CX
	CMPQ    CX, 0(SP)
	JNE     lmiss
	INCQ    AX
	ADDQ    R12, R8
	JMP     loop

lmiss:
	CMPL 8(R9)(R11*1), $0
	JEQ  done
	ADDQ $16, R11
	ANDQ 8(DI), R11
	JMP  lprobe

done:
	MOVQ R8, next+40(FP)
	MOVQ AX, count+48(FP)
	RET
