//go:build !purego

#include "textflag.h"

// Byte constants of wordsSSE, 16 of each: bias that maps a-z (and, from 0x3f, A-Z) onto
// 0x80-0x99, the signed limit 0x9a below which a biased byte is in that range, the space; the
// bias that maps 0-9 onto 0x80-0x89 and its limit 0x8a; the bias that maps \t to \r onto
// 0x80-0x84, and 0x84, above which a biased byte is not in that range.
DATA wordsConst<>+0x00(SB)/8, $0x1f1f1f1f1f1f1f1f
DATA wordsConst<>+0x08(SB)/8, $0x1f1f1f1f1f1f1f1f
DATA wordsConst<>+0x10(SB)/8, $0x3f3f3f3f3f3f3f3f
DATA wordsConst<>+0x18(SB)/8, $0x3f3f3f3f3f3f3f3f
DATA wordsConst<>+0x20(SB)/8, $0x9a9a9a9a9a9a9a9a
DATA wordsConst<>+0x28(SB)/8, $0x9a9a9a9a9a9a9a9a
DATA wordsConst<>+0x30(SB)/8, $0x2020202020202020
DATA wordsConst<>+0x38(SB)/8, $0x2020202020202020
DATA wordsConst<>+0x40(SB)/8, $0x5050505050505050
DATA wordsConst<>+0x48(SB)/8, $0x5050505050505050
DATA wordsConst<>+0x50(SB)/8, $0x8a8a8a8a8a8a8a8a
DATA wordsConst<>+0x58(SB)/8, $0x8a8a8a8a8a8a8a8a
DATA wordsConst<>+0x60(SB)/8, $0x7777777777777777
DATA wordsConst<>+0x68(SB)/8, $0x7777777777777777
DATA wordsConst<>+0x70(SB)/8, $0x8484848484848484
DATA wordsConst<>+0x78(SB)/8, $0x8484848484848484
GLOBL wordsConst<>(SB), RODATA|NOPTR, $128

// The same for AVX2, 32 of each, compared the other way round: 0x99, above which a byte biased
// as for a letter is not one; 0x89 and 0x84 likewise for digits and \t to \r.
#define AVX(off, v) DATA avxConst<>+off(SB)/8, v; DATA avxConst<>+off+8(SB)/8, v; DATA avxConst<>+off+16(SB)/8, v; DATA avxConst<>+off+24(SB)/8, v
AVX(0x00, $0x1f1f1f1f1f1f1f1f)
AVX(0x20, $0x3f3f3f3f3f3f3f3f)
AVX(0x40, $0x9999999999999999)
AVX(0x60, $0x2020202020202020)
AVX(0x80, $0x5050505050505050)
AVX(0xa0, $0x8989898989898989)
AVX(0xc0, $0x7777777777777777)
AVX(0xe0, $0x8484848484848484)
GLOBL avxConst<>(SB), RODATA|NOPTR, $256

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

// The masks of a window, 16 bytes at a time: LETTERS, CAPITALS, SPACES and ENDINGS classify
// the bytes of x as the loop16 code below does, into the 16 bits of r; JOIN(r) puts R12, BX
// and CX above r as bits 16-31, 32-47 and 48-63.
#define LETTERS(x, r) \
	MOVOU    x, X4; \
	POR      X13, X4; \
	PADDB    X8, X4; \
	MOVOU    X10, X5; \
	PCMPGTB  X4, X5; \
	PMOVMSKB X5, r

#define CAPITALS(x, r) \
	MOVOU    x, X4; \
	PADDB    X9, X4; \
	MOVOU    X10, X5; \
	PCMPGTB  X4, X5; \
	PMOVMSKB X5, r

#define SPACES(x, r) \
	MOVOU    x, X4; \
	PCMPEQB  X11, X4; \
	PMOVMSKB X4, r

#define ENDINGS(x, r) \
	MOVOU    x, X4; \
	PCMPEQB  X12, X4; \
	POR      x, X4; \
	PMOVMSKB X4, r

#define JOIN(r) \
	SHLQ $16, R12; \
	SHLQ $32, BX; \
	SHLQ $48, CX; \
	ORQ  R12, r; \
	ORQ  BX, r; \
	ORQ  CX, r

// NOTOTHER: the bytes of x that are ASCII, not digits and not \t to \r.
#define NOTOTHER(x, r) \
	MOVOU    x, X4; \
	PADDB    X6, X4; \
	MOVOU    X7, X5; \
	PCMPGTB  X4, X5; \
	POR      x, X5; \
	MOVOU    x, X4; \
	PADDB    X14, X4; \
	PCMPGTB  X15, X4; \
	PANDN    X4, X5; \
	PMOVMSKB X5, r

// The same masks from 32 bytes in y, into the 32 bits of r (Y4 the fold, Y5 the byte that
// may not end a word, 32 times). HALVES(r) puts CX above r as bits 32-63.
#define WLETTERS(y, r) \
	VPOR      Y4, y, Y2; \
	VPADDB    avxConst<>+0x00(SB), Y2, Y2; \
	VPCMPGTB  avxConst<>+0x40(SB), Y2, Y2; \
	VPMOVMSKB Y2, r; \
	NOTL      r

#define WCAPITALS(y, r) \
	VPADDB    avxConst<>+0x20(SB), y, Y2; \
	VPCMPGTB  avxConst<>+0x40(SB), Y2, Y2; \
	VPMOVMSKB Y2, r; \
	NOTL      r

#define WSPACES(y, r) \
	VPCMPEQB  avxConst<>+0x60(SB), y, Y2; \
	VPMOVMSKB Y2, r

#define WENDINGS(y, r) \
	VPCMPEQB  Y5, y, Y2; \
	VPOR      y, Y2, Y2; \
	VPMOVMSKB Y2, r

#define WNOTOTHER(y, r) \
	VPADDB    avxConst<>+0x80(SB), y, Y2; \
	VPCMPGTB  avxConst<>+0xa0(SB), Y2, Y2; \
	VPADDB    avxConst<>+0xc0(SB), y, Y3; \
	VPCMPGTB  avxConst<>+0xe0(SB), Y3, Y3; \
	VPAND     Y2, Y3, Y3; \
	VPANDN    Y3, y, Y3; \
	VPMOVMSKB Y3, r

#define HALVES(r) \
	SHLQ $32, CX; \
	ORQ  CX, r

// CONSTANTS loads the vector constants (DI the wordTable).
#define CONSTANTS \
	MOVOU wordsConst<>+0x00(SB), X8; \
	MOVOU wordsConst<>+0x10(SB), X9; \
	MOVOU wordsConst<>+0x20(SB), X10; \
	MOVOU wordsConst<>+0x30(SB), X11; \
	MOVOU 80(DI), X12; \
	MOVOU 64(DI), X13; \
	MOVOU wordsConst<>+0x40(SB), X6; \
	MOVOU wordsConst<>+0x50(SB), X7; \
	MOVOU wordsConst<>+0x60(SB), X14; \
	MOVOU wordsConst<>+0x70(SB), X15

// WINDOW classifies the 64 bytes at SI+R8 (DI the wordTable) into the masks wordsSSE decides
// its pieces from, and leaves R13 the starts up to the cut and R11 the cut. It uses X0-X5 (and
// Y0-Y5), BX, CX, DX, DI, R11-R13, 0(SP) and 8(SP). The masks come from four SSE2 compares of
// 16 bytes, or two AVX2 ones of 32 where the wordTable says the machine has AVX2 (VZEROUPPER
// then leaves the upper halves clean for SSE code).
#define WINDOW \
	CMPB    96(DI), $0; \
	JNE     win_avx; \
	MOVOU   0(SI)(R8*1), X0; \
	MOVOU   16(SI)(R8*1), X1; \
	MOVOU   32(SI)(R8*1), X2; \
	MOVOU   48(SI)(R8*1), X3; \
	LETTERS(X0, R13); \
	LETTERS(X1, R12); \
	LETTERS(X2, BX); \
	LETTERS(X3, CX); \
	JOIN(R13); \
	CAPITALS(X0, R11); \
	CAPITALS(X1, R12); \
	CAPITALS(X2, BX); \
	CAPITALS(X3, CX); \
	JOIN(R11); \
	ANDQ    24(DI), R11; \
	SPACES(X0, DX); \
	SPACES(X1, R12); \
	SPACES(X2, BX); \
	SPACES(X3, CX); \
	JOIN(DX); \
	ENDINGS(X0, DI); \
	ENDINGS(X1, R12); \
	ENDINGS(X2, BX); \
	ENDINGS(X3, CX); \
	JOIN(DI); \
	MOVQ    DI, 0(SP); \
	NOTOTHER(X0, DI); \
	NOTOTHER(X1, R12); \
	NOTOTHER(X2, BX); \
	NOTOTHER(X3, CX); \
	JOIN(DI); \
	JMP     win_derive; \
win_avx: \
	VMOVDQU      0(SI)(R8*1), Y0; \
	VMOVDQU      32(SI)(R8*1), Y1; \
	VPBROADCASTB 64(DI), Y4; \
	VPBROADCASTB 80(DI), Y5; \
	WLETTERS(Y0, R13); \
	WLETTERS(Y1, CX); \
	HALVES(R13); \
	WCAPITALS(Y0, R11); \
	WCAPITALS(Y1, CX); \
	HALVES(R11); \
	ANDQ         24(DI), R11; \
	WSPACES(Y0, DX); \
	WSPACES(Y1, CX); \
	HALVES(DX); \
	WENDINGS(Y0, DI); \
	WENDINGS(Y1, CX); \
	HALVES(DI); \
	MOVQ         DI, 0(SP); \
	WNOTOTHER(Y0, DI); \
	WNOTOTHER(Y1, CX); \
	HALVES(DI); \
	VZEROUPPER; \
win_derive: \
	MOVQ    DI, 8(SP); \
	MOVQ    R13, R12; \
	ORQ     R11, R12; \
	MOVQ    R12, BX; \
	SHRQ    $1, BX; \
	ANDQ    DX, BX; \
	MOVQ    R13, CX; \
	SHRQ    $1, CX; \
	ANDQ    R11, CX; \
	ORQ     CX, BX; \
	MOVQ    0(SP), CX; \
	SHRQ    $1, CX; \
	NOTQ    CX; \
	ANDQ    CX, R13; \
	ORQ     R13, BX; \
	MOVQ    DX, R13; \
	SHLQ    $1, R13; \
	NOTQ    R13; \
	ANDQ    R11, R13; \
	ORQ     DX, R13; \
	ORQ     $1, R13; \
	ORQ     DX, R12; \
	NOTQ    R12; \
	ORQ     R12, R13; \
	SHRQ    $1, DX; \
	ANDQ    DX, R12; \
	ANDQ    8(SP), R12; \
	ORQ     R12, BX; \
	NOTQ    BX; \
	BTSQ    $63, BX; \
	BSFQ    BX, CX; \
	MOVQ    $2, R12; \
	SHLQ    CX, R12; \
	DECQ    R12; \
	ANDQ    R12, R13; \
	BSRQ    R13, R11

// func wordsSSE(t []byte, i int, w *wordTable) (next, count int)
//
// Two ways to find the pieces. Where 80 bytes are left, the 64 at i are a window, classified
// at once into 64-bit masks (bit j for byte j) of the bytes that start a piece (a space, a
// capital not after a space, punctuation, byte 0) and of the bytes that lie in a piece this
// loop decides (a space before a letter, a capital before a lower-case letter, a letter whose
// next byte may end a word, punctuation before a space). The window ends at the cut: the last
// start at or before the first byte in no such piece. The pieces before the cut lie between
// consecutive start bits, so each one is found by a BSF, independently of the lookup of the
// one before, and punctuation is looked up like a word, without a branch of its own. Every
// piece and the 16 bytes from its start lie within the 80. Where fewer bytes are left, where
// the cut is at i, and for words of 9 to 15 bytes, one piece is classified from its own 16
// bytes (loop16). Both decide the same pieces by the same rules as wordsGo.
//
// Registers: SI the text, R8 i (the window's start), AX the count, R9 the slots, R10 headMask;
// DX the last i with 16 bytes left and DI the wordTable in loop16; X8-X11 the constants, X12
// the byte that may not end a word, X13 the fold, X6, X7, X14, X15 the constants of digits
// and \t to \r. Locals: 0(SP) and 8(SP) two of a window's masks while WINDOW derives the
// others; 16(SP) the wordTable,
// 24(SP) the last i with 16 bytes left, 32(SP) the byte offset of the last slot, 40(SP) the
// table's shift, 48(SP) the starts left in the window while loop16 decides a long word in it
// (else 0), 56(SP) the window's start.
TEXT ·wordsSSE(SB), NOSPLIT, $64-56
	MOVQ  t_base+0(FP), SI
	MOVQ  t_len+8(FP), DX
	SUBQ  $16, DX
	MOVQ  DX, 24(SP)
	MOVQ  i+24(FP), R8
	MOVQ  w+32(FP), DI
	MOVQ  DI, 16(SP)
	MOVQ  0(DI), R9
	MOVQ  8(DI), CX
	MOVQ  CX, 32(SP)
	MOVQ  16(DI), CX
	MOVQ  CX, 40(SP)
	MOVQ  $0, 48(SP)
	LEAQ  headMask<>(SB), R10
	XORQ  AX, AX
	CONSTANTS

next:
	// A window at i when 80 bytes are left.
	MOVQ  24(SP), DX
	LEAQ  64(R8), CX
	CMPQ  CX, DX
	JGT   loop16
	MOVQ  16(SP), DI
	MOVQ  R8, 56(SP)
	// R11, the cut; R13, the starts after byte 0 up to it. None: the piece at i goes through
	// loop16.
	WINDOW
	TESTQ   R11, R11
	JEQ     loop16
	ANDQ    $-2, R13

	// The pieces: R12 the start of one (in the window), R11 the next start, DI the window, CX
	// the table's shift.
	MOVQ 40(SP), CX
	LEAQ (SI)(R8*1), DI
	XORQ R12, R12

piece:
	BSFQ  R13, R11
	MOVQ  (DI)(R12*1), BX
	NEGQ  R12
	ADDQ  R11, R12
	CMPQ  R12, $8
	JGT   wlong
	ANDQ  (R10)(R12*8), BX
	MOVQ  $0xBF58476D1CE4E5B9, DX
	IMULQ BX, DX
	SHRQ  CX, DX
	ANDQ  $-16, DX

wprobe:
	CMPQ  BX, (R9)(DX*1)
	JNE   wmiss
	CMPL  R12, 12(R9)(DX*1)
	JNE   wmiss
	INCQ  AX
	MOVQ  R11, R12
	LEAQ  -1(R13), DX
	ANDQ  DX, R13
	JNE   piece
	ADDQ  R11, R8
	JMP   next

wmiss:
	CMPL 8(R9)(DX*1), $0
	JEQ  wstop
	ADDQ $16, DX
	ANDQ 32(SP), DX
	JMP  wprobe

wstop:
	// Not a token: the run ends at its piece.
	SUBQ R12, R11
	ADDQ R11, R8
	JMP  done

wlong:
	// A word of 9 to 15 bytes: long decides it, and resumes the window after it (R13, the
	// starts left, in 48(SP)); a longer one ends the run.
	CMPQ R12, $15
	JGT  wstop
	SUBQ R12, R11
	ADDQ R11, R8
	LEAQ -1(R13), DX
	ANDQ DX, R13
	MOVQ R13, 48(SP)
	MOVQ 16(SP), DI
	MOVQ R12, CX
	JMP  long

resume:
	// After a long word found in the window: R12 its end, the next piece's start.
	MOVQ $0, 48(SP)
	MOVQ R8, R12
	MOVQ 56(SP), R8
	SUBQ R8, R12
	LEAQ (SI)(R8*1), DI
	MOVQ 40(SP), CX
	JMP  piece

loop16:
	// One piece from its own 16 bytes (DX and DI back from the window's use of them).
	MOVQ  24(SP), DX
	MOVQ  16(SP), DI
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
	MOVOU    X0, X4
	PCMPEQB  X12, X4
	POR      X0, X4
	PMOVMSKB X4, BX
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
	JMP  next

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
	JMP     next

long:
	// A word of 9 to 15 bytes (BX its first 8, R12 its length): R11 the rest of its key,
	// bytes 8 to n-1 and n in the top byte; DX its entry in vocab.longs (longHash, then
	// isLong's probe).
	MOVQ  8(SI)(R8*1), R11
	ANDQ  -64(R10)(R12*8), R11
	MOVQ  R12, CX
	SHLQ  $56, CX
	ORQ   CX, R11
	MOVQ  $0x9E3779B97F4A7C15, DX
	IMULQ R11, DX
	XORQ  BX, DX
	MOVQ  $0xBF58476D1CE4E5B9, CX
	IMULQ CX, DX
	MOVQ  40(DI), CX
	SHRQ  CX, DX
	SHLQ  $4, DX
	ADDQ  32(DI), DX

lprobe:
	CMPQ  BX, (DX)
	JNE   lmiss
	CMPQ  R11, 8(DX)
	JNE   lmiss
	INCQ  AX
	ADDQ  R12, R8
	MOVQ  48(SP), R13
	TESTQ R13, R13
	JNE   resume
	JMP   next

lmiss:
	CMPQ 8(DX), $0
	JEQ  done
	ADDQ $16, DX
	JMP  lprobe

done:
	MOVQ R8, next+40(FP)
	MOVQ AX, count+48(FP)
	RET

// func wordsWindow(t []byte, i int, w *wordTable) (cut int, starts uint64)
//
// WINDOW alone, for TestWordsWindow: the cut of the window at i (i+64 <= len(t)) and its
// starts up to the cut.
TEXT ·wordsWindow(SB), NOSPLIT, $16-56
	MOVQ  t_base+0(FP), SI
	MOVQ  i+24(FP), R8
	MOVQ  w+32(FP), DI
	CONSTANTS
	WINDOW
	MOVQ  R11, cut+40(FP)
	MOVQ  R13, starts+48(FP)
	RET
