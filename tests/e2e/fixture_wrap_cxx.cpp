// SPDX-License-Identifier: MIT
// Allocator wrappers: new and new[] inside kernel "cxx" (100 + 24 + 40
// bytes), linked with libmemprof; operator new is a default wrapper, so
// the owner is this program, not libstdc++.
#include <memprof.h>

struct S {
	long a, b, c;
};

static void *volatile sink;

int main()
{
	memprof_kernel_begin("cxx");
	char *buf = new char[100];
	S *s = new S();
	sink = s;
	delete s;
	int *v = new int[10];
	sink = v;
	delete[] v;
	sink = buf;
	memprof_kernel_end();
	delete[] buf;
	return 0;
}
