/* SPDX-License-Identifier: MIT */
/*
 * libcurl, loaded the first time a collector needs it rather than with
 * every memprof and memprofd: libcurl-gnutls brings ~30 libraries, all
 * bound at once (Debian builds them with BIND_NOW), which cost 6-10 ms of
 * every start here, stream or not. Every file of the transport that
 * calls libcurl includes this instead of <curl/curl.h>: the calls below
 * go through a table filled by mp_curl_load().
 */
#ifndef MP_CURL_DL_H
#define MP_CURL_DL_H

/* the type-checking wrappers are macros over the names redirected below */
#define CURL_DISABLE_TYPECHECK 1
#include <curl/curl.h>

struct mp_curl {
	CURLcode (*global_init)(long flags);
	const char *(*easy_strerror)(CURLcode);
	CURL *(*easy_init)(void);
	CURLcode (*easy_setopt)(CURL *, CURLoption, ...);
	CURLcode (*easy_getinfo)(CURL *, CURLINFO, ...);
	CURLHcode (*easy_header)(CURL *, const char *, size_t, unsigned int, int,
				 struct curl_header **);
	void (*easy_reset)(CURL *);
	void (*easy_cleanup)(CURL *);
	struct curl_slist *(*slist_append)(struct curl_slist *, const char *);
	void (*slist_free_all)(struct curl_slist *);
	void (*free)(void *);
	CURLU *(*url)(void);
	CURLUcode (*url_set)(CURLU *, CURLUPart, const char *, unsigned int);
	CURLUcode (*url_get)(const CURLU *, CURLUPart, char **, unsigned int);
	void (*url_cleanup)(CURLU *);
	CURLM *(*multi_init)(void);
	CURLMcode (*multi_setopt)(CURLM *, CURLMoption, ...);
	CURLMcode (*multi_add_handle)(CURLM *, CURL *);
	CURLMcode (*multi_remove_handle)(CURLM *, CURL *);
	CURLMcode (*multi_socket_action)(CURLM *, curl_socket_t, int, int *);
	CURLMsg *(*multi_info_read)(CURLM *, int *);
	CURLMcode (*multi_cleanup)(CURLM *);
};
extern struct mp_curl mp_curl;

/* Loads libcurl once (thread-safe) and fills mp_curl: 0, or -ENOENT when
 * it cannot be loaded or lacks a function (mp_curl_error() says why).
 * Every entry point of the transport calls it before any call below. */
int mp_curl_load(void);
const char *mp_curl_error(void);

/* curl.h's own three-argument checks of these, as function-like macros */
#undef curl_easy_setopt
#undef curl_easy_getinfo
#undef curl_multi_setopt

#define curl_global_init (*mp_curl.global_init)
#define curl_easy_strerror (*mp_curl.easy_strerror)
#define curl_easy_init (*mp_curl.easy_init)
#define curl_easy_setopt (*mp_curl.easy_setopt)
#define curl_easy_getinfo (*mp_curl.easy_getinfo)
#define curl_easy_header (*mp_curl.easy_header)
#define curl_easy_reset (*mp_curl.easy_reset)
#define curl_easy_cleanup (*mp_curl.easy_cleanup)
#define curl_slist_append (*mp_curl.slist_append)
#define curl_slist_free_all (*mp_curl.slist_free_all)
#define curl_free (*mp_curl.free)
#define curl_url (*mp_curl.url)
#define curl_url_set (*mp_curl.url_set)
#define curl_url_get (*mp_curl.url_get)
#define curl_url_cleanup (*mp_curl.url_cleanup)
#define curl_multi_init (*mp_curl.multi_init)
#define curl_multi_setopt (*mp_curl.multi_setopt)
#define curl_multi_add_handle (*mp_curl.multi_add_handle)
#define curl_multi_remove_handle (*mp_curl.multi_remove_handle)
#define curl_multi_socket_action (*mp_curl.multi_socket_action)
#define curl_multi_info_read (*mp_curl.multi_info_read)
#define curl_multi_cleanup (*mp_curl.multi_cleanup)

#endif
