// SPDX-License-Identifier: MIT
/* A static program without libc, hence without any allocator: the tracer
 * must refuse it with "no allocator found". */
void _start(void);

void _start(void)
{
	for (;;)
		__asm__ volatile("mov $34, %%eax\n\tsyscall" ::
					 : "rax", "rcx", "r11", "memory"); /* pause() */
}
