/* tests/peers/dlopen_main.c: the shape of heaptrack's tests/manual/dlopen
 * test, written for this battery. The program allocates and frees, then
 * loads a library of its own (argv[1], an absolute path) with RTLD_DEEPBIND,
 * so that the library's own calls to malloc bind to libc's, not to a
 * profiler's interposer; it calls the library's function, which allocates
 * and frees, and the process exits at once, without dlclose(). */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
	void (*fn)(void);
	void *lib, *p;

	if (argc != 2)
		return 2;
	p = malloc(100);
	if (!p)
		return 1;
	memset(p, 1, 100);
	free(p);
	lib = dlopen(argv[1], RTLD_DEEPBIND | RTLD_NOW | RTLD_GLOBAL);
	if (!lib)
		return 1;
	*(void **)&fn = dlsym(lib, "peers_lib_work");
	if (!fn)
		return 1;
	fn();
	return 0;
}
