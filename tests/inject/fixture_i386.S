/* SPDX-License-Identifier: MIT */
/* A 32-bit x86 process (tests/inject): the injector must refuse it. Writes
 * "ready\n", then sleeps 100 ms at a time until killed. Static, no libc. */
	.section .rodata
msg:	.ascii "ready\n"
ts:	.long 0, 100000000
	.text
	.globl _start
_start:
	movl $4, %eax		/* write(1, msg, 6) */
	movl $1, %ebx
	movl $msg, %ecx
	movl $6, %edx
	int $0x80
1:	movl $162, %eax		/* nanosleep(&ts, NULL) */
	movl $ts, %ebx
	xorl %ecx, %ecx
	int $0x80
	jmp 1b
