// SPDX-License-Identifier: MIT
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "ack.h"
#include "backend.h"
#include "log.h"
#include "memprof.pb-c.h"
#include "profile_pb.h"
#include "stream.h"
#include "util.h"

#if __has_include("pprof.h")
#include "pprof.h"
#define HAVE_PPROF 1
#else
#define HAVE_PPROF 0
#endif

#define BACKOFF_MIN_NS (100ull * 1000000ull)
#define BACKOFF_MAX_NS (5000ull * 1000000ull)
#define MAX_LOST_ENTRIES 4096
/* Name resolution runs in a thread of its own; a collector waits this long
 * for it before it counts as unreachable (and backs off). */
#define RESOLVE_TIMEOUT_NS (5000ull * 1000000ull)
/* Resolver threads alive at once, hung ones included. */
#define MAX_RESOLVERS 16
/* A released per-target collector keeps this long to deliver what it
 * holds (a target's final chunk); the rest is then counted lost. */
#define DRAIN_NS (5000ull * 1000000ull)
/* A tcp:// or unix: collector announces acknowledgements with its hello,
 * right after it accepted the connection; one silent this long is taken
 * for a collector without them (and said). */
#define HELLO_NS (5000ull * 1000000ull)
/* Bytes read from one collector per wakeup: a chatty one cannot hold the
 * streaming thread. */
#define READ_BUDGET (64u << 10)
/* What a collector without acknowledgements may send (its protocol has
 * no replies) before its connection is closed: an endless sender cannot
 * keep the streaming thread reading. */
#define LEGACY_JUNK_MAX (64u << 10)
/* Sockets libcurl may have open at once for the HTTP collectors
 * (connection attempts and its resolver's). */
#define MAX_CURL_SOCKS (4 * MP_STREAM_MAX_COLLECTORS)

enum kind { K_TCP, K_UNIX, K_HTTP };
/* Why a collector lost chunks, for status (the log says each one). */
enum loss {
	LOSS_BUFFER, /* did not fit its buffer, or the total (or no memory) */
	LOSS_CLOSED, /* written, then the connection ended before any hello */
	LOSS_MALFORMED, /* an HTTP answer that is not one */
	LOSS_OVERSIZED, /* an HTTP answer past our caps (headers or body) */
	LOSS_DEADLINE, /* no complete HTTP answer by the request's deadline */
	LOSS_UNDELIVERED, /* still queued when the collector was released or at shutdown */
	N_LOSS,
};
static const char *const loss_names[N_LOSS] = { "buffer",    "closed",	 "malformed",
						"oversized", "deadline", "undelivered" };
enum state { S_IDLE, S_CONNECTING, S_UP, S_RESPONSE, S_RESOLVING };
/* What the collector at the other end of a tcp:// or unix: connection
 * does with chunks: not known yet (no hello so far), acknowledges them,
 * or never will (no hello in HELLO_NS: written counts as delivered). */
enum acks { A_UNKNOWN, A_ACKS, A_LEGACY };

struct item {
	struct item *next;
	size_t len;
	uint64_t target_id;
	uint64_t sequence;
	/* The chunk's lost_chunks, and what its bytes say (less when an
	 * earlier chunk of its target was lost after it was framed). */
	uint64_t lost, framed_lost;
	uint8_t data[];
};

struct lost {
	uint64_t target_id;
	uint64_t n; /* not yet reported in a chunk */
	uint64_t total; /* since the target's first chunk */
};

/* A name resolution in flight. Shared by the resolver thread and the
 * collector: the last one to let go frees it, so a collector never waits
 * for a hung resolver, even to be freed. */
struct resolve_job {
	int refs;
	bool done;
	int err;
	struct addrinfo *ai;
	mp_stream_resolver_fn fn;
	int wake_fd; /* a dup of the streamer's: valid even after it is freed */
	char host[256], port[8];
};

/* Targets of one uid holding a per-target collector. */
struct holder {
	uint32_t uid;
	unsigned refs;
};

struct collector {
	char url[MP_STREAM_MAX_URL];
	enum kind kind;
	char host[256], port[8], path[256];
	bool global;
	int fd;
	enum state state;
	struct mp_streamer *owner;
	/* Every chunk held: those written on this connection and awaiting
	 * their ack come first, then, from unsent on, those to write. */
	struct item *head, *tail, *unsent;
	uint64_t queued_bytes, queued_items;
	uint64_t inflight_bytes, inflight_items;
	size_t off; /* bytes of unsent already written */
	enum acks acks;
	uint64_t hello_until_ns;
	struct mp_ack_reader rx;
	bool told_legacy; /* "no acknowledgements" logged */
	uint64_t junk; /* bytes read from it as such, this connection */
	struct lost *lost;
	size_t n_lost;
	uint64_t next_try_ns, backoff_ns;
	uint64_t sent, dropped, rejected, connects;
	uint64_t lost_by[N_LOSS]; /* dropped, by reason */
	bool down; /* logged as unreachable */
	/* Per-target use: reference-counted, by uid. */
	struct holder *holders;
	size_t n_holders;
	unsigned refs;
	unsigned pins; /* mp_streamer_push() between its two locked parts */
	bool draining; /* released: removed once empty or at drain_until_ns */
	uint64_t drain_until_ns;
	struct resolve_job *job; /* in flight (also after its timeout) */
	uint64_t resolve_until_ns;
	struct mp_backend *be; /* K_HTTP: the protocol (backend.c) */
};

/* A socket libcurl wants watched (CURLMOPT_SOCKETFUNCTION). */
struct curl_sock {
	curl_socket_t fd;
	short events;
};

struct mp_streamer {
	pthread_mutex_t lock;
	pthread_cond_t idle;
	pthread_t thread;
	bool started, quit;
	int wake_fd;
	uint64_t buffer_bytes;
	uint64_t total_bytes, queued_total; /* bound of every queue together */
	unsigned per_uid; /* per-target collectors of one uid (0: no limit) */
	mp_stream_resolver_fn resolver;
	struct collector *c[MP_STREAM_MAX_COLLECTORS];
	size_t n;
	/* The HTTP collectors' transfers, driven by stream_main()'s poll. */
	CURLM *multi;
	struct curl_sock socks[MAX_CURL_SOCKS];
	size_t n_socks;
	uint64_t curl_deadline_ns; /* UINT64_MAX: no timer */
	long http_deadline_ms; /* of each HTTP request */
};

static int resolvers_alive;

static int parse_url(const char *url, struct collector *c)
{
	struct mp_stream_addr a;
	int r;

	if (strlen(url) >= MP_STREAM_MAX_URL)
		return -EINVAL;
	if (mp_backend_url_is(url)) {
		struct mp_backend_url u;

		r = mp_curl_load();
		if (r < 0)
			return log_error_errno(r, "collector %s: %s", url, mp_curl_error());
		r = mp_backend_url_parse(url, &u);
		if (r < 0)
			return r;
		c->kind = K_HTTP;
		snprintf(c->host, sizeof(c->host), "%s", u.host);
		snprintf(c->port, sizeof(c->port), "%s", u.port);
		snprintf(c->path, sizeof(c->path), "%s", u.path);
		return 0;
	}
	r = mp_stream_addr_parse(url, &a);
	if (r < 0)
		return r;
	c->kind = a.is_unix ? K_UNIX : K_TCP;
	memcpy(c->host, a.host, sizeof(c->host));
	memcpy(c->port, a.port, sizeof(c->port));
	memcpy(c->path, a.path, sizeof(c->path));
	return 0;
}

int mp_stream_url_check(const char *url)
{
	struct collector c;
	int r = parse_url(url, &c);

	if (r == 0 && c.kind == K_HTTP && !HAVE_PPROF)
		return -EPROTONOSUPPORT;
	if (r == 0 && c.kind == K_HTTP)
		r = mp_backend_check(url);
	return r;
}

/* --- the streaming thread --- */

static struct lost *lost_entry(struct collector *c, uint64_t target_id, bool create);
static void pop(struct mp_streamer *s, struct collector *c);

/* The written chunks a collector that never said hello may or may not
 * have: counted lost, and reported (with the loss each one reported) by
 * the next chunk of their target. */
static void lose_inflight(struct collector *c)
{
	for (; c->inflight_items; c->inflight_items--) {
		struct item *x = c->head, *y = x->next;
		struct lost *l = lost_entry(c, x->target_id, true);

		while (y && y->target_id != x->target_id)
			y = y->next;
		if (y)
			y->lost += x->lost + 1; /* reframed before it is written */
		else if (l)
			l->n += x->lost + 1;
		if (l)
			l->total++;
		c->dropped++;
		c->lost_by[LOSS_CLOSED]++;
		c->inflight_bytes -= x->len;
		pop(c->owner, c);
	}
}

static void fail(struct collector *c, int err, uint64_t now)
{
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
	c->state = S_IDLE;
	/* Chunks the collector did not acknowledge go again, and a partly
	 * sent one whole, on the next connection. */
	if (c->acks != A_ACKS)
		lose_inflight(c);
	c->inflight_items = 0;
	c->inflight_bytes = 0;
	c->unsent = c->head;
	c->off = 0;
	if (c->be)
		mp_backend_close(c->be);
	c->backoff_ns = c->backoff_ns ? c->backoff_ns * 2 : BACKOFF_MIN_NS;
	if (c->backoff_ns > BACKOFF_MAX_NS)
		c->backoff_ns = BACKOFF_MAX_NS;
	c->next_try_ns = now + c->backoff_ns;
	if (!c->down) {
		c->down = true;
		log_warning_errno(err, "collector %s unreachable (%m), buffering and retrying",
				  c->url);
	}
}

static void job_put(struct resolve_job *j)
{
	if (__atomic_sub_fetch(&j->refs, 1, __ATOMIC_ACQ_REL))
		return;
	if (j->ai)
		freeaddrinfo(j->ai);
	close(j->wake_fd);
	free(j);
}

static void *resolver_main(void *arg)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV };
	struct resolve_job *j = arg;
	struct addrinfo *ai = NULL;
	uint64_t one = 1;
	int r;

	r = j->fn(j->host, j->port, &hints, &ai);
	j->ai = r ? NULL : ai;
	j->err = r ? -EHOSTUNREACH : 0;
	__atomic_store_n(&j->done, true, __ATOMIC_RELEASE);
	if (write(j->wake_fd, &one, sizeof(one)) < 0) {
		/* Already signalled. */
	}
	job_put(j);
	__atomic_sub_fetch(&resolvers_alive, 1, __ATOMIC_RELAXED);
	return NULL;
}

/* Starts resolving @c's host in a detached thread, outside every lock. */
static int start_resolve(struct mp_streamer *s, struct collector *c)
{
	struct resolve_job *j;
	pthread_attr_t attr;
	pthread_t th;
	int r;

	if (__atomic_add_fetch(&resolvers_alive, 1, __ATOMIC_RELAXED) > MAX_RESOLVERS) {
		__atomic_sub_fetch(&resolvers_alive, 1, __ATOMIC_RELAXED);
		return -EAGAIN;
	}
	j = calloc(1, sizeof(*j));
	if (!j || (j->wake_fd = fcntl(s->wake_fd, F_DUPFD_CLOEXEC, 0)) < 0) {
		free(j);
		__atomic_sub_fetch(&resolvers_alive, 1, __ATOMIC_RELAXED);
		return -ENOMEM;
	}
	j->refs = 2;
	j->fn = s->resolver ? s->resolver : getaddrinfo;
	snprintf(j->host, sizeof(j->host), "%s", c->host);
	snprintf(j->port, sizeof(j->port), "%s", c->port);
	r = pthread_attr_init(&attr);
	if (r == 0) {
		pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
		pthread_attr_setstacksize(&attr, 256 << 10);
		r = pthread_create(&th, &attr, resolver_main, j);
		pthread_attr_destroy(&attr);
	}
	if (r) {
		close(j->wake_fd);
		free(j);
		__atomic_sub_fetch(&resolvers_alive, 1, __ATOMIC_RELAXED);
		return -r;
	}
	c->job = j;
	return 0;
}

static void connect_to(struct collector *c, const struct addrinfo *ai, uint64_t now);

/* A new connection: its collector says first whether it acknowledges. */
static void connected(struct collector *c, uint64_t now)
{
	c->state = S_UP;
	c->acks = A_UNKNOWN;
	c->hello_until_ns = now + HELLO_NS;
	c->junk = 0;
	mp_ack_reader_init(&c->rx);
}

static void start_connect(struct mp_streamer *s, struct collector *c, uint64_t now)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd, r;

	c->connects++;
	if (c->kind == K_HTTP) {
		/* libcurl resolves, connects and speaks TLS and HTTP. */
		r = mp_backend_start(c->be, s->multi, c->head->data, c->head->len,
				     s->http_deadline_ms, c);
		if (r < 0)
			return fail(c, r, now);
		c->state = S_UP;
		return;
	}
	if (c->kind != K_UNIX) {
		/* A resolution that timed out earlier may still be running:
		 * wait for it rather than start another one. */
		r = c->job ? 0 : start_resolve(s, c);
		if (r < 0)
			return fail(c, r, now);
		c->state = S_RESOLVING;
		c->resolve_until_ns = now + RESOLVE_TIMEOUT_NS;
		return;
	}
	strcpy(sa.sun_path, c->path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return fail(c, -errno, now);
	r = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
	c->fd = fd;
	if (r == 0) {
		connected(c, now);
	} else if (errno == EINPROGRESS || errno == EAGAIN) {
		c->state = S_CONNECTING;
	} else {
		fail(c, -errno, now);
	}
}

/* A resolving collector: connect once its name is resolved, give up on it
 * (for this attempt) at its deadline. */
static void poll_resolve(struct collector *c, uint64_t now, uint64_t *wait_ns)
{
	struct resolve_job *j = c->job;

	if (__atomic_load_n(&j->done, __ATOMIC_ACQUIRE)) {
		c->job = NULL;
		if (j->err)
			fail(c, j->err, now);
		else
			connect_to(c, j->ai, now);
		job_put(j);
		return;
	}
	if (now >= c->resolve_until_ns)
		return fail(c, -ETIMEDOUT, now);
	if (c->resolve_until_ns - now < *wait_ns)
		*wait_ns = c->resolve_until_ns - now;
}

static void connect_to(struct collector *c, const struct addrinfo *ai, uint64_t now)
{
	int fd, r;

	fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
	if (fd < 0)
		return fail(c, -errno, now);
	r = connect(fd, ai->ai_addr, ai->ai_addrlen);
	c->fd = fd;
	if (r == 0) {
		connected(c, now);
	} else if (errno == EINPROGRESS || errno == EAGAIN) {
		c->state = S_CONNECTING;
	} else {
		fail(c, -errno, now);
	}
}

static void pop(struct mp_streamer *s, struct collector *c)
{
	struct item *it = c->head;

	c->head = it->next;
	if (!c->head)
		c->tail = NULL;
	c->queued_bytes -= it->len;
	c->queued_items--;
	s->queued_total -= it->len;
	if (c->unsent == it) {
		c->unsent = it->next;
		c->off = 0;
	}
	free(it);
	if (!c->head)
		pthread_cond_broadcast(&s->idle);
}

static void up(struct collector *c)
{
	if (c->down)
		log_notice("collector %s reachable again", c->url);
	c->down = false;
	c->backoff_ns = 0;
}

/* Whether the next chunk may be written: what awaits an ack stays within
 * the buffer size, but one chunk always may. */
static bool can_write(struct mp_streamer *s, struct collector *c)
{
	return c->unsent && (c->acks == A_LEGACY || !c->inflight_items ||
			     c->inflight_bytes + c->unsent->len <= s->buffer_bytes);
}

static struct item *frame_chunk(const struct mp_chunk_meta *m, const uint8_t *pb, size_t pb_len,
				uint64_t lost);

/* @c->unsent with the lost_chunks it carries now (more than when it was
 * framed: an earlier chunk of its target was lost since). */
static int reframe_unsent(struct collector *c)
{
	struct item *it = c->unsent, *nit, **link = &c->head;
	const uint8_t *p = it->data;
	Memprof__Chunk *ch;
	uint64_t len;
	int h = mp_varint_decode(p, it->len, &len);

	ch = h > 0 ? memprof__chunk__unpack(NULL, (size_t)len, p + h) : NULL;
	if (!ch)
		return -EBADMSG;
	nit = frame_chunk(&(struct mp_chunk_meta){ .target_id = ch->target_id,
						   .pid = ch->pid,
						   .exe = ch->exe,
						   .sequence = ch->sequence,
						   .window_begin_ns = ch->window_begin_ns,
						   .window_end_ns = ch->window_end_ns,
						   .final = ch->final },
			  ch->profile.data, ch->profile.len, it->lost);
	memprof__chunk__free_unpacked(ch, NULL);
	if (!nit)
		return -ENOMEM;
	nit->next = it->next;
	nit->target_id = it->target_id;
	nit->sequence = it->sequence;
	nit->lost = nit->framed_lost = it->lost;
	while (*link != it)
		link = &(*link)->next;
	*link = nit;
	if (c->tail == it)
		c->tail = nit;
	c->unsent = nit;
	c->queued_bytes += nit->len - it->len;
	c->owner->queued_total += nit->len - it->len;
	free(it);
	return 0;
}

static void do_write(struct mp_streamer *s, struct collector *c, uint64_t now)
{
	while (c->state == S_UP && can_write(s, c)) {
		struct item *it = c->unsent;
		ssize_t n;

		if (c->off == 0 && it->lost != it->framed_lost && reframe_unsent(c) == -ENOMEM)
			return; /* kept: tried again at the next wakeup */
		it = c->unsent;
		n = send(c->fd, it->data + c->off, it->len - c->off, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n < 0) {
			if (errno == EAGAIN || errno == EINTR)
				return;
			return fail(c, -errno, now);
		}
		/* Otherwise reachable once it acknowledges: a collector that
		 * takes chunks and answers garbage keeps backing off. */
		if (c->acks == A_LEGACY)
			up(c);
		c->off += (size_t)n;
		if (c->off < it->len)
			continue;
		if (c->acks == A_LEGACY) {
			c->sent++;
			pop(s, c);
			continue;
		}
		/* Held until the collector acknowledges it. */
		c->off = 0;
		c->unsent = it->next;
		c->inflight_items++;
		c->inflight_bytes += it->len;
	}
}

/* The ack of (target_id, sequence) acknowledges it and every chunk
 * written before it on this connection. -ENOENT if it is not in flight. */
static int acknowledge(struct mp_streamer *s, struct collector *c, uint64_t target_id,
		       uint64_t sequence)
{
	struct item *it = c->head;
	uint64_t k = 0;

	while (k < c->inflight_items && (it->target_id != target_id || it->sequence != sequence)) {
		it = it->next;
		k++;
	}
	if (k == c->inflight_items)
		return -ENOENT;
	up(c);
	for (uint64_t i = 0; i <= k; i++) {
		c->inflight_items--;
		c->inflight_bytes -= c->head->len;
		c->sent++;
		pop(s, c);
	}
	return 0;
}

/* No hello: a collector of the protocol before acknowledgements. What it
 * was written counts as delivered, as it did then. */
static void go_legacy(struct mp_streamer *s, struct collector *c)
{
	c->acks = A_LEGACY;
	up(c);
	for (; c->inflight_items; c->inflight_items--) {
		c->inflight_bytes -= c->head->len;
		c->sent++;
		pop(s, c);
	}
	if (!c->told_legacy)
		log_warning("collector %s sent no hello in %llu s: it does not acknowledge chunks, "
			    "so those it has not read when it ends are lost uncounted",
			    c->url, HELLO_NS / 1000000000ull);
	c->told_legacy = true;
}

/* The collector's hello and acknowledgements; any end of input means it
 * is gone, anything malformed ends the connection (what it did not
 * acknowledge goes again on the next one). */
static void do_read(struct mp_streamer *s, struct collector *c, uint64_t now)
{
	uint8_t junk[4096];

	for (size_t total = 0; total < READ_BUDGET;) {
		struct mp_ack_msg m = { 0 };
		size_t room;
		uint8_t *to = mp_ack_space(&c->rx, &room);
		ssize_t n;
		int r;

		if (c->acks == A_LEGACY) {
			to = junk;
			room = sizeof(junk);
		}
		n = recv(c->fd, to, room, MSG_DONTWAIT);
		if (n < 0) {
			if (errno == EAGAIN || errno == EINTR)
				return;
			return fail(c, -errno, now);
		}
		if (n == 0)
			return fail(c, -ECONNRESET, now);
		total += (size_t)n;
		if (c->acks == A_LEGACY && (c->junk += (uint64_t)n) > LEGACY_JUNK_MAX) {
			log_warning("collector %s sent more than %u KiB without acknowledging "
				    "anything, closing the connection",
				    c->url, LEGACY_JUNK_MAX >> 10);
			return fail(c, -EPROTO, now);
		}
		if (c->acks == A_LEGACY)
			continue;
		mp_ack_received(&c->rx, (size_t)n);
		while ((r = mp_ack_next(&c->rx, &m)) > 0) {
			if (m.kind == MP_ACK_HELLO)
				c->acks = A_ACKS;
			else if ((r = acknowledge(s, c, m.target_id, m.sequence)) < 0)
				break;
		}
		if (r < 0) {
			if (!c->down) /* once until it acknowledges again */
				log_warning("collector %s: %s (target %" PRIu64 " sequence %" PRIu64
					    "), closing the connection",
					    c->url,
					    r == -ENOENT ?
						    "acknowledgement of a chunk not in flight" :
						    "malformed reply",
					    m.target_id, m.sequence);
			return fail(c, r == -ENOENT ? -EPROTO : r, now);
		}
	}
}

/* The HTTP collector @c's first chunk is dropped for @cause: refused by
 * the collector, or its answer broke one of our bounds. Either way its
 * target's profile counts it (the log said why). */
static void http_lost(struct collector *c, enum mp_drop_cause cause)
{
	static const enum loss of[] = { [MP_DROP_MALFORMED] = LOSS_MALFORMED,
					[MP_DROP_OVERSIZED] = LOSS_OVERSIZED,
					[MP_DROP_DEADLINE] = LOSS_DEADLINE };
	struct lost *l = lost_entry(c, c->head->target_id, true);

	if (l)
		l->total++;
	if (cause == MP_DROP_REFUSED || (size_t)cause >= ARRAY_SIZE(of)) {
		c->rejected++;
		return;
	}
	c->dropped++;
	c->lost_by[of[cause]]++;
}

/* An HTTP collector's transfer of its first chunk ended with @rc: its
 * backend (backend.c) says what that means and logs what the server
 * said. */
static void http_done(struct mp_streamer *s, struct collector *c, CURLcode rc, uint64_t now)
{
	struct mp_outcome o;
	int r = mp_backend_finish(c->be, rc, &o);

	if (r < 0)
		return fail(c, r, now);
	if (o.verdict == MP_V_RETRY) {
		c->down = true; /* logged by the backend */
		fail(c, -EAGAIN, now);
		if (o.retry_after_ns)
			c->next_try_ns = now + o.retry_after_ns;
		return;
	}
	up(c);
	if (o.verdict == MP_V_SENT)
		c->sent++;
	else
		http_lost(c, o.cause);
	pop(s, c);
	c->state = S_IDLE;
	c->next_try_ns = now;
}

static int on_curl_socket(CURL *easy, curl_socket_t fd, int what, void *arg, void *sockp)
{
	struct mp_streamer *s = arg;
	size_t i = 0;

	(void)easy;
	(void)sockp;
	while (i < s->n_socks && s->socks[i].fd != fd)
		i++;
	if (what == CURL_POLL_REMOVE) {
		if (i < s->n_socks)
			s->socks[i] = s->socks[--s->n_socks];
		return 0;
	}
	if (i == s->n_socks) {
		/* Not watched: that transfer ends at its timeout and is
		 * retried. (-1 would stop the multi handle for good.) */
		if (s->n_socks == MAX_CURL_SOCKS)
			return 0;
		s->n_socks++;
	}
	s->socks[i].fd = fd;
	s->socks[i].events =
		(short)((what & CURL_POLL_IN ? POLLIN : 0) | (what & CURL_POLL_OUT ? POLLOUT : 0));
	return 0;
}

static int on_curl_timer(CURLM *multi, long timeout_ms, void *arg)
{
	struct mp_streamer *s = arg;

	(void)multi;
	s->curl_deadline_ns =
		timeout_ms < 0 ? UINT64_MAX : mp_now_ns() + (uint64_t)timeout_ms * 1000000ull;
	return 0;
}

/* Lets libcurl act on socket @fd (CURL_SOCKET_TIMEOUT: its timer), then
 * takes the transfers that ended. */
static void curl_act(struct mp_streamer *s, curl_socket_t fd, short revents, uint64_t now)
{
	int flags = (revents & POLLIN ? CURL_CSELECT_IN : 0) |
		    (revents & POLLOUT ? CURL_CSELECT_OUT : 0) |
		    (revents & (POLLERR | POLLHUP | POLLNVAL) ? CURL_CSELECT_ERR : 0);
	int running, left;
	CURLMsg *msg;

	if (fd == CURL_SOCKET_TIMEOUT)
		s->curl_deadline_ns = UINT64_MAX;
	curl_multi_socket_action(s->multi, fd, fd == CURL_SOCKET_TIMEOUT ? 0 : flags, &running);
	while ((msg = curl_multi_info_read(s->multi, &left))) {
		struct collector *c = NULL;

		if (msg->msg != CURLMSG_DONE)
			continue;
		curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&c);
		if (c)
			http_done(s, c, msg->data.result, now);
	}
}

/* Chunks still queued for @c, as lost: logged once, where they end. */
static void count_undelivered(struct collector *c, const char *when)
{
	if (!c->head)
		return;
	for (struct item *it = c->head; it; it = it->next) {
		struct lost *l = lost_entry(c, it->target_id, true);

		if (l)
			l->total++;
	}
	c->dropped += c->queued_items;
	c->lost_by[LOSS_UNDELIVERED] += c->queued_items;
	log_warning("collector %s: %" PRIu64 " chunks (%" PRIu64 " bytes) never delivered "
		    "(%s); %" PRIu64 " lost in all, %" PRIu64 " sent",
		    c->url, c->queued_items, c->queued_bytes, when, c->dropped, c->sent);
}

static void collector_free(struct mp_streamer *s, struct collector *c)
{
	/* Its transfer leaves the multi handle before its chunk is freed. */
	mp_backend_free(c->be);
	while (c->head)
		pop(s, c);
	if (c->fd >= 0)
		close(c->fd);
	if (c->job)
		job_put(c->job);
	free(c->holders);
	free(c->lost);
	free(c);
}

/* Removes the released collectors that delivered everything or whose
 * time is up. Under the lock, in the streaming thread only. */
static void reap_drained(struct mp_streamer *s, uint64_t now, uint64_t *wait_ns)
{
	for (size_t i = 0; i < s->n;) {
		struct collector *c = s->c[i];

		if (!c->draining || c->pins || (c->head && now < c->drain_until_ns)) {
			if (c->draining && c->drain_until_ns > now &&
			    c->drain_until_ns - now < *wait_ns)
				*wait_ns = c->drain_until_ns - now;
			i++;
			continue;
		}
		count_undelivered(c, "released");
		s->c[i] = s->c[--s->n];
		collector_free(s, c);
	}
	pthread_cond_broadcast(&s->idle);
}

static void *stream_main(void *arg)
{
	struct mp_streamer *s = arg;
	struct pollfd pf[MP_STREAM_MAX_COLLECTORS + 1 + MAX_CURL_SOCKS];
	size_t idx[MP_STREAM_MAX_COLLECTORS + 1 + MAX_CURL_SOCKS];

	pthread_mutex_lock(&s->lock);
	while (!s->quit) {
		uint64_t now = mp_now_ns(), wait_ns = UINT64_MAX, v;
		size_t n = 1;
		int timeout;

		reap_drained(s, now, &wait_ns);
		pf[0] = (struct pollfd){ .fd = s->wake_fd, .events = POLLIN };
		for (size_t i = 0; i < s->n; i++) {
			struct collector *c = s->c[i];

			if (c->state == S_RESOLVING)
				poll_resolve(c, now, &wait_ns);
			if (c->state == S_IDLE && c->head) {
				if (now >= c->next_try_ns)
					start_connect(s, c, now);
				else if (c->next_try_ns - now < wait_ns)
					wait_ns = c->next_try_ns - now;
			}
			if (c->state == S_UP && c->kind != K_HTTP && c->acks == A_UNKNOWN) {
				if (now >= c->hello_until_ns)
					go_legacy(s, c);
				else if (c->hello_until_ns - now < wait_ns)
					wait_ns = c->hello_until_ns - now;
			}
			if (c->state == S_UP && c->head && c->kind != K_HTTP)
				do_write(s, c, now);
			if (c->fd < 0) {
				if (c->state == S_IDLE && c->head && c->next_try_ns - now < wait_ns)
					wait_ns = c->next_try_ns > now ? c->next_try_ns - now : 0;
				continue;
			}
			pf[n] = (struct pollfd){ .fd = c->fd, .events = POLLIN | POLLRDHUP };
			if (c->state == S_CONNECTING || (c->state == S_UP && can_write(s, c)))
				pf[n].events |= POLLOUT;
			idx[n++] = i;
		}
		for (size_t i = 0; i < s->n_socks; i++) {
			pf[n] = (struct pollfd){ .fd = s->socks[i].fd,
						 .events = s->socks[i].events };
			idx[n++] = SIZE_MAX;
		}
		if (s->curl_deadline_ns != UINT64_MAX) {
			uint64_t d = s->curl_deadline_ns > now ? s->curl_deadline_ns - now : 0;

			if (d < wait_ns)
				wait_ns = d;
		}
		timeout = wait_ns == UINT64_MAX ? -1 : (int)(wait_ns / 1000000ull) + 1;
		pthread_mutex_unlock(&s->lock);
		poll(pf, n, timeout);
		pthread_mutex_lock(&s->lock);
		if (pf[0].revents & POLLIN && read(s->wake_fd, &v, sizeof(v)) < 0) {
			/* Nothing pending after all. */
		}
		now = mp_now_ns();
		for (size_t k = 1; k < n; k++) {
			struct collector *c;
			short re = pf[k].revents;

			if (re && idx[k] == SIZE_MAX)
				curl_act(s, pf[k].fd, re, now);
			if (!re || idx[k] == SIZE_MAX || idx[k] >= s->n)
				continue;
			c = s->c[idx[k]];
			if (c->fd != pf[k].fd)
				continue;
			if (c->state == S_CONNECTING) {
				int err = 0;
				socklen_t len = sizeof(err);

				if (!(re & (POLLOUT | POLLERR | POLLHUP)))
					continue;
				getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len);
				if (err) {
					fail(c, -err, now);
					continue;
				}
				connected(c, now);
			}
			if (re & (POLLIN | POLLRDHUP | POLLHUP | POLLERR))
				do_read(s, c, now);
			if (c->state == S_UP && (re & POLLOUT))
				do_write(s, c, now);
		}
		if (mp_now_ns() >= s->curl_deadline_ns)
			curl_act(s, CURL_SOCKET_TIMEOUT, 0, now);
	}
	pthread_mutex_unlock(&s->lock);
	return NULL;
}

int mp_streamer_new(uint64_t buffer_bytes, struct mp_streamer **ret)
{
	struct mp_streamer *s = calloc(1, sizeof(*s));
	pthread_condattr_t ca;
	int r;

	if (!s)
		return -ENOMEM;
	pthread_mutex_init(&s->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&s->idle, &ca);
	pthread_condattr_destroy(&ca);
	s->buffer_bytes = buffer_bytes;
	s->curl_deadline_ns = UINT64_MAX;
	s->http_deadline_ms = MP_BACKEND_TRANSFER_MS;
	s->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (s->wake_fd < 0) {
		r = -errno;
		mp_streamer_free(s);
		return r;
	}
	r = mp_backend_multi_new(&s->multi);
	if (r < 0) {
		mp_streamer_free(s);
		return r;
	}
	curl_multi_setopt(s->multi, CURLMOPT_SOCKETFUNCTION, on_curl_socket);
	curl_multi_setopt(s->multi, CURLMOPT_SOCKETDATA, s);
	curl_multi_setopt(s->multi, CURLMOPT_TIMERFUNCTION, on_curl_timer);
	curl_multi_setopt(s->multi, CURLMOPT_TIMERDATA, s);
	r = -pthread_create(&s->thread, NULL, stream_main, s);
	if (r < 0) {
		mp_streamer_free(s);
		return r;
	}
	s->started = true;
	*ret = s;
	return 0;
}

static void wake(struct mp_streamer *s)
{
	uint64_t one = 1;

	if (write(s->wake_fd, &one, sizeof(one)) < 0) {
		/* Already signalled. */
	}
}

void mp_streamer_free(struct mp_streamer *s)
{
	if (!s)
		return;
	if (s->started) {
		pthread_mutex_lock(&s->lock);
		s->quit = true;
		pthread_mutex_unlock(&s->lock);
		wake(s);
		pthread_join(s->thread, NULL);
	}
	for (size_t i = 0; i < s->n; i++) {
		count_undelivered(s->c[i], "shutdown");
		collector_free(s, s->c[i]);
	}
	if (s->wake_fd >= 0)
		close(s->wake_fd);
	if (s->multi)
		curl_multi_cleanup(s->multi);
	pthread_cond_destroy(&s->idle);
	pthread_mutex_destroy(&s->lock);
	free(s);
}

/* Under the lock. */
static struct collector *find(struct mp_streamer *s, const char *url)
{
	for (size_t i = 0; i < s->n; i++)
		if (!strcmp(s->c[i]->url, url))
			return s->c[i];
	return NULL;
}

/* Under the lock. Per-target collectors leave MP_STREAM_GLOBAL_SLOTS
 * slots to the configured ones, so that no user can make a reload fail. */
static struct collector *create(struct mp_streamer *s, const char *url, bool global, int *err)
{
	struct collector *c;
	size_t n_target = 0;
	int r;

	for (size_t i = 0; i < s->n; i++)
		n_target += !s->c[i]->global;
	if (s->n >= MP_STREAM_MAX_COLLECTORS ||
	    (!global && n_target >= MP_STREAM_MAX_COLLECTORS - MP_STREAM_GLOBAL_SLOTS)) {
		*err = -ENOSPC;
		return NULL;
	}
	c = calloc(1, sizeof(*c));
	if (!c) {
		*err = -ENOMEM;
		return NULL;
	}
	r = parse_url(url, c);
	if (r == 0 && c->kind == K_HTTP && !HAVE_PPROF)
		r = -EPROTONOSUPPORT;
	if (r == 0 && c->kind == K_HTTP)
		r = mp_backend_new(url, &c->be);
	if (r < 0) {
		free(c);
		*err = r;
		return NULL;
	}
	snprintf(c->url, sizeof(c->url), "%s", url);
	c->fd = -1;
	c->owner = s;
	c->global = global;
	s->c[s->n++] = c;
	return c;
}

/* Under the lock: a collector nobody uses any more drains and goes. */
static void maybe_release(struct mp_streamer *s, struct collector *c)
{
	if (c->global || c->refs || c->draining)
		return;
	c->draining = true;
	c->drain_until_ns = mp_now_ns() + DRAIN_NS;
	wake(s);
}

int mp_streamer_set_global(struct mp_streamer *s, char *const *urls, size_t n)
{
	bool keep[MP_STREAM_MAX_COLLECTORS] = { false };
	int r = 0;

	for (size_t i = 0; i < n; i++) {
		r = mp_stream_url_check(urls[i]);
		if (r < 0)
			return r;
	}
	pthread_mutex_lock(&s->lock);
	for (size_t i = 0; i < n && r == 0; i++) {
		struct collector *c = find(s, urls[i]);

		if (!c)
			c = create(s, urls[i], true, &r);
		if (!c)
			break;
		c->global = true;
		c->draining = false;
		for (size_t k = 0; k < s->n; k++)
			keep[k] |= s->c[k] == c;
	}
	for (size_t k = 0; k < s->n && r == 0; k++) {
		if (keep[k] || !s->c[k]->global)
			continue;
		s->c[k]->global = false;
		maybe_release(s, s->c[k]);
	}
	pthread_mutex_unlock(&s->lock);
	return r;
}

static struct holder *holder_of(struct collector *c, uint32_t uid)
{
	for (size_t i = 0; i < c->n_holders; i++)
		if (c->holders[i].uid == uid)
			return &c->holders[i];
	return NULL;
}

int mp_streamer_acquire(struct mp_streamer *s, const char *url, uint32_t uid)
{
	struct collector *c;
	struct holder *h;
	size_t held = 0;
	int r = mp_stream_url_check(url);

	if (r < 0)
		return r;
	pthread_mutex_lock(&s->lock);
	c = find(s, url);
	if (!c || !holder_of(c, uid)) {
		for (size_t i = 0; i < s->n; i++)
			held += holder_of(s->c[i], uid) != NULL;
		if (uid != 0 && s->per_uid && held >= s->per_uid) {
			r = -EDQUOT;
			goto out;
		}
	}
	if (!c)
		c = create(s, url, false, &r);
	if (!c)
		goto out;
	h = holder_of(c, uid);
	if (!h) {
		h = realloc(c->holders, (c->n_holders + 1) * sizeof(*h));
		if (!h) {
			r = -ENOMEM;
			maybe_release(s, c);
			goto out;
		}
		c->holders = h;
		h = &h[c->n_holders++];
		*h = (struct holder){ .uid = uid };
	}
	h->refs++;
	c->refs++;
	c->draining = false;
out:
	pthread_mutex_unlock(&s->lock);
	return r;
}

void mp_streamer_release(struct mp_streamer *s, const char *url, uint32_t uid)
{
	struct collector *c;
	struct holder *h;

	pthread_mutex_lock(&s->lock);
	c = find(s, url);
	h = c ? holder_of(c, uid) : NULL;
	if (h) {
		c->refs--;
		if (!--h->refs)
			*h = c->holders[--c->n_holders];
		maybe_release(s, c);
	}
	pthread_mutex_unlock(&s->lock);
}

void mp_streamer_set_limits(struct mp_streamer *s, unsigned per_uid, uint64_t total_bytes)
{
	pthread_mutex_lock(&s->lock);
	s->per_uid = per_uid;
	s->total_bytes = total_bytes;
	pthread_mutex_unlock(&s->lock);
}

void mp_streamer_set_http_deadline(struct mp_streamer *s, long deadline_ms)
{
	pthread_mutex_lock(&s->lock);
	s->http_deadline_ms = deadline_ms > 0 ? deadline_ms : MP_BACKEND_TRANSFER_MS;
	pthread_mutex_unlock(&s->lock);
}

void mp_streamer_set_resolver(struct mp_streamer *s, mp_stream_resolver_fn fn)
{
	pthread_mutex_lock(&s->lock);
	s->resolver = fn;
	pthread_mutex_unlock(&s->lock);
}

size_t mp_streamer_slots(struct mp_streamer *s, size_t *ret_target)
{
	size_t n, t = 0;

	pthread_mutex_lock(&s->lock);
	n = s->n;
	for (size_t i = 0; i < s->n; i++)
		t += !s->c[i]->global;
	pthread_mutex_unlock(&s->lock);
	if (ret_target)
		*ret_target = t;
	return n;
}

uint64_t mp_streamer_queued_total(struct mp_streamer *s)
{
	uint64_t v;

	pthread_mutex_lock(&s->lock);
	v = s->queued_total;
	pthread_mutex_unlock(&s->lock);
	return v;
}

uint64_t mp_streamer_target_lost(struct mp_streamer *s, uint64_t target_id, bool with_queued)
{
	uint64_t n = 0;

	pthread_mutex_lock(&s->lock);
	for (size_t i = 0; i < s->n; i++) {
		struct collector *c = s->c[i];
		struct lost *l = lost_entry(c, target_id, false);

		n += l ? l->total : 0;
		for (struct item *it = c->head; it && with_queued; it = it->next)
			n += it->target_id == target_id;
	}
	pthread_mutex_unlock(&s->lock);
	return n;
}

void mp_streamer_set_buffer(struct mp_streamer *s, uint64_t buffer_bytes)
{
	pthread_mutex_lock(&s->lock);
	s->buffer_bytes = buffer_bytes;
	pthread_mutex_unlock(&s->lock);
}

static struct lost *lost_entry(struct collector *c, uint64_t target_id, bool create)
{
	struct lost *l;

	for (size_t i = 0; i < c->n_lost; i++)
		if (c->lost[i].target_id == target_id)
			return &c->lost[i];
	if (!create)
		return NULL;
	/* The oldest entry (of a long-gone target, most likely) goes. */
	if (c->n_lost >= MAX_LOST_ENTRIES)
		memmove(c->lost, c->lost + 1, --c->n_lost * sizeof(*c->lost));
	l = realloc(c->lost, (c->n_lost + 1) * sizeof(*l));
	if (!l)
		return NULL;
	c->lost = l;
	l[c->n_lost] = (struct lost){ .target_id = target_id };
	return &l[c->n_lost++];
}

static struct item *frame_chunk(const struct mp_chunk_meta *m, const uint8_t *pb, size_t pb_len,
				uint64_t lost)
{
	Memprof__Chunk ch = MEMPROF__CHUNK__INIT;
	uint8_t hdr[10];
	struct item *it;
	size_t len, hl;

	ch.target_id = m->target_id;
	ch.pid = m->pid;
	ch.exe = (char *)(m->exe ? m->exe : "");
	ch.sequence = m->sequence;
	ch.window_begin_ns = m->window_begin_ns;
	ch.window_end_ns = m->window_end_ns;
	ch.final = m->final;
	ch.lost_chunks = lost;
	ch.profile.data = (uint8_t *)pb;
	ch.profile.len = pb_len;
	len = memprof__chunk__get_packed_size(&ch);
	hl = mp_varint_encode(len, hdr);
	it = malloc(sizeof(*it) + hl + len);
	if (!it)
		return NULL;
	it->next = NULL;
	it->len = hl + len;
	memcpy(it->data, hdr, hl);
	memprof__chunk__pack(&ch, it->data + hl);
	return it;
}

int mp_streamer_push(struct mp_streamer *s, const struct mp_chunk_meta *m,
		     const struct mp_profile *p, char *const *extra, size_t n_extra)
{
	return mp_streamer_push_encoded(s, m, p, NULL, 0, extra, n_extra);
}

/* Under the lock: the global collectors and the target's own (acquired
 * by it; others are ignored), each once, pinned so that none is removed
 * while the chunk is encoded outside the lock. */
static size_t pin_targets(struct mp_streamer *s, char *const *extra, size_t n_extra,
			  struct collector **targets)
{
	size_t nt = 0;

	for (size_t i = 0; i < s->n; i++)
		if (s->c[i]->global)
			targets[nt++] = s->c[i];
	for (size_t i = 0; i < n_extra; i++) {
		struct collector *c = find(s, extra[i]);
		bool dup = false;

		if (!c)
			continue;
		for (size_t k = 0; k < nt; k++)
			dup |= targets[k] == c;
		if (!dup)
			targets[nt++] = c;
	}
	for (size_t k = 0; k < nt; k++)
		targets[k]->pins++;
	return nt;
}

/* A copy of an HTTP collector's request @req as a queue item. */
static struct item *request_item(const uint8_t *req, size_t len)
{
	struct item *it = req ? malloc(sizeof(*it) + len) : NULL;

	if (!it)
		return NULL;
	it->next = NULL;
	it->len = len;
	memcpy(it->data, req, len);
	return it;
}

/* Under the lock: queues @it (NULL: it could not be made) for @c, or
 * drops and counts it. At least one chunk always fits in a collector's
 * buffer, whatever its size; never more than the total in all. */
static void enqueue(struct mp_streamer *s, struct collector *c, const struct mp_chunk_meta *m,
		    struct item *it)
{
	struct lost *l = lost_entry(c, m->target_id, false);

	if (!it || (c->unsent && c->queued_bytes + it->len > s->buffer_bytes) ||
	    (s->total_bytes && s->queued_total + it->len > s->total_bytes)) {
		free(it);
		c->dropped++;
		c->lost_by[LOSS_BUFFER]++;
		l = lost_entry(c, m->target_id, true);
		if (l) {
			l->n++;
			l->total++;
		}
		if (m->final)
			log_warning("collector %s: final chunk of target %" PRIu64
				    " (pid %d) dropped: %s",
				    c->url, m->target_id, (int)m->pid,
				    it ? "buffer full" : "out of memory");
		return;
	}
	it->target_id = m->target_id;
	it->sequence = m->sequence;
	it->lost = it->framed_lost = l && c->kind != K_HTTP ? l->n : 0;
	if (l)
		l->n = 0;
	s->queued_total += it->len;
	if (c->tail)
		c->tail->next = it;
	else
		c->head = it;
	c->tail = it;
	if (!c->unsent)
		c->unsent = it;
	c->queued_bytes += it->len;
	c->queued_items++;
}

int mp_streamer_push_encoded(struct mp_streamer *s, const struct mp_chunk_meta *m,
			     const struct mp_profile *p, const uint8_t *msg, size_t msg_len,
			     char *const *extra, size_t n_extra)
{
	struct collector *targets[MP_STREAM_MAX_COLLECTORS];
	uint8_t *pb = NULL, *pp = NULL, *req[MP_STREAM_MAX_COLLECTORS] = { NULL };
	size_t nt, pb_len = 0, pp_len = 0, req_len[MP_STREAM_MAX_COLLECTORS] = { 0 };
	bool want_pb = false, want_pp = false;
	int r = 0;

	pthread_mutex_lock(&s->lock);
	nt = pin_targets(s, extra, n_extra, targets);
	pthread_mutex_unlock(&s->lock);
	for (size_t k = 0; k < nt; k++) {
		want_pb |= targets[k]->kind != K_HTTP;
		want_pp |= targets[k]->kind == K_HTTP && mp_backend_wants_pprof(targets[k]->be);
	}
	if (!nt)
		return r;
	/* Encoded once (or by the caller), outside the lock, framed per
	 * collector below. */
	if (want_pb && !msg) {
		/* on failure r < 0: every collector is unpinned below */
		r = mp_profile_encode(p, &pb, &pb_len);
		msg = pb;
		msg_len = pb_len;
	}
#if HAVE_PPROF
	if (want_pp && r == 0)
		r = mp_pprof_encode(p, true, &pp, &pp_len);
#else
	(void)want_pp;
	(void)pp_len;
#endif
	/* HTTP requests too: a failure loses the chunk for that collector
	 * only (counted in enqueue()). */
	for (size_t k = 0; k < nt; k++)
		if (r == 0 && targets[k]->kind == K_HTTP &&
		    mp_backend_request(targets[k]->be, m, p, pp, pp_len, &req[k], &req_len[k]) < 0)
			req[k] = NULL;
	pthread_mutex_lock(&s->lock);
	for (size_t k = 0; k < nt; k++) {
		struct collector *c = targets[k];
		struct lost *l = lost_entry(c, m->target_id, false);

		c->pins--;
		if (r < 0)
			continue;
		enqueue(s, c, m,
			c->kind != K_HTTP ? frame_chunk(m, msg, msg_len, l ? l->n : 0) :
					    request_item(req[k], req_len[k]));
	}
	pthread_mutex_unlock(&s->lock);
	wake(s);
	free(pb);
	free(pp);
	for (size_t k = 0; k < nt; k++)
		free(req[k]);
	return r;
}

bool mp_streamer_wanted(struct mp_streamer *s, size_t n_extra)
{
	bool any = n_extra > 0;

	pthread_mutex_lock(&s->lock);
	for (size_t i = 0; i < s->n && !any; i++)
		any = s->c[i]->global;
	pthread_mutex_unlock(&s->lock);
	return any;
}

int mp_streamer_flush(struct mp_streamer *s, uint64_t timeout_ns)
{
	struct timespec ts;
	int r = 0;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_sec += (time_t)(timeout_ns / 1000000000ull);
	ts.tv_nsec += (long)(timeout_ns % 1000000000ull);
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&s->lock);
	for (;;) {
		bool busy = false;

		for (size_t i = 0; i < s->n; i++)
			busy |= s->c[i]->head != NULL;
		if (!busy)
			break;
		if (pthread_cond_timedwait(&s->idle, &s->lock, &ts) == ETIMEDOUT) {
			r = -ETIMEDOUT;
			break;
		}
	}
	pthread_mutex_unlock(&s->lock);
	return r;
}

void mp_streamer_describe(struct mp_streamer *s, void (*line)(void *ctx, const char *text),
			  void *ctx)
{
	static const char *const states[] = { "idle", "connecting", "up", "up", "resolving" };
	char buf[MP_STREAM_MAX_URL + 512];

	pthread_mutex_lock(&s->lock);
	for (size_t i = 0; i < s->n; i++) {
		struct collector *c = s->c[i];
		int k = snprintf(
			buf, sizeof(buf),
			"%s %s state=%s queued_chunks=%" PRIu64 " queued_bytes=%" PRIu64
			" sent=%" PRIu64 " lost=%" PRIu64 " refused=%" PRIu64 " targets=%u%s",
			c->url, c->global ? "global" : "target",
			c->down ? "down" : states[c->state], c->queued_items, c->queued_bytes,
			c->sent, c->dropped, c->rejected, c->refs, c->draining ? " draining" : "");

		/* lost_by=deadline:2,oversized:1 when anything was lost. */
		for (int w = 0, first = 1; w < N_LOSS && k > 0 && (size_t)k < sizeof(buf); w++) {
			if (!c->lost_by[w])
				continue;
			k += snprintf(buf + k, sizeof(buf) - (size_t)k, "%s%s:%" PRIu64,
				      first ? " lost_by=" : ",", loss_names[w], c->lost_by[w]);
			first = 0;
		}
		line(ctx, buf);
	}
	pthread_mutex_unlock(&s->lock);
}
