// SPDX-License-Identifier: MIT
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stddef.h>

#include <stdio.h>

#include "curl_dl.h"

struct mp_curl mp_curl;

/* Debian's libcurl4-gnutls-dev links against the first; a build against
 * another flavour's headers finds its library under the second. */
static const char *const sonames[] = { "libcurl-gnutls.so.4", "libcurl.so.4" };

static const struct {
	const char *name;
	size_t off;
} fns[] = {
#define FN(f, sym)                               \
	{                                        \
		sym, offsetof(struct mp_curl, f) \
	}
	FN(global_init, "curl_global_init"),
	FN(easy_strerror, "curl_easy_strerror"),
	FN(easy_init, "curl_easy_init"),
	FN(easy_setopt, "curl_easy_setopt"),
	FN(easy_getinfo, "curl_easy_getinfo"),
	FN(easy_header, "curl_easy_header"),
	FN(easy_reset, "curl_easy_reset"),
	FN(easy_cleanup, "curl_easy_cleanup"),
	FN(slist_append, "curl_slist_append"),
	FN(slist_free_all, "curl_slist_free_all"),
	FN(free, "curl_free"),
	FN(url, "curl_url"),
	FN(url_set, "curl_url_set"),
	FN(url_get, "curl_url_get"),
	FN(url_cleanup, "curl_url_cleanup"),
	FN(multi_init, "curl_multi_init"),
	FN(multi_setopt, "curl_multi_setopt"),
	FN(multi_add_handle, "curl_multi_add_handle"),
	FN(multi_remove_handle, "curl_multi_remove_handle"),
	FN(multi_socket_action, "curl_multi_socket_action"),
	FN(multi_info_read, "curl_multi_info_read"),
	FN(multi_cleanup, "curl_multi_cleanup"),
#undef FN
};

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int load_rc;
static char why[256];

static void load(void)
{
	struct mp_curl t;
	const char *err = NULL;
	void *h = NULL;

	for (size_t i = 0; i < sizeof(sonames) / sizeof(sonames[0]) && !h; i++) {
		h = dlopen(sonames[i], RTLD_NOW | RTLD_LOCAL);
		if (!h && !err)
			err = dlerror();
	}
	if (!h) {
		snprintf(why, sizeof(why),
			 "HTTP collectors need libcurl (Debian: libcurl3-gnutls): %s",
			 err ? err : "not found");
		load_rc = -ENOENT;
		return;
	}
	for (size_t i = 0; i < sizeof(fns) / sizeof(fns[0]); i++) {
		void *f = dlsym(h, fns[i].name);

		if (!f) {
			snprintf(why, sizeof(why),
				 "HTTP collectors need libcurl 7.84 or later: no %s", fns[i].name);
			load_rc = -ENOENT;
			return;
		}
		*(void **)((char *)&t + fns[i].off) = f;
	}
	/* kept loaded for the life of the process */
	mp_curl = t;
}

int mp_curl_load(void)
{
	pthread_once(&once, load);
	return load_rc;
}

const char *mp_curl_error(void)
{
	return why[0] ? why : "libcurl loaded";
}
