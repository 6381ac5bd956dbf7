// SPDX-License-Identifier: MIT
// C++ new/delete reach the interposer through libstdc++'s operator new.
#include <cstddef>
#include <dlfcn.h>

struct S {
	long a, b, c;
};

static void *volatile sink;

int main()
{
	auto kbegin = (int (*)(const char *))dlsym(RTLD_DEFAULT, "memprof_kernel_begin");
	auto kend = (int (*)())dlsym(RTLD_DEFAULT, "memprof_kernel_end");

	if (kbegin)
		kbegin("cxx");
	char *buf = new char[100];
	S *s = new S();
	sink = s;
	delete s;
	int *v = new int[10];
	sink = v;
	delete[] v;
	sink = buf;
	if (kend)
		kend();
	return 0;
}
