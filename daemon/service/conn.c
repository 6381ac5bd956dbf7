// SPDX-License-Identifier: MIT
/* Control connections: accepted with their peer's credentials, admitted
 * within max_connections (max_connections_per_uid for each non-root uid;
 * the idlest connection makes room), served on a thread each. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "log.h"
#include "service_impl.h"
#include "util.h"

void mp_svc_conn_remove(struct service *svc, struct request *q)
{
	pthread_mutex_lock(&svc->lock);
	for (struct request **pp = &svc->conns; *pp; pp = &(*pp)->next)
		if (*pp == q) {
			*pp = q->next;
			break;
		}
	if (!q->dropped)
		svc->n_live--;
	svc->n_conns--;
	pthread_cond_broadcast(&svc->cond);
	pthread_mutex_unlock(&svc->lock);
}

/* Under svc->lock. The connection still waiting for its request that was
 * accepted first: of @uid only when @same_uid; otherwise of anyone, but
 * root's only to make room for root. */
static struct request *idlest(struct service *svc, uid_t uid, bool same_uid)
{
	struct request *best = NULL;

	for (struct request *q = svc->conns; q; q = q->next) {
		if (q->busy || q->dropped)
			continue;
		if (same_uid ? q->uid != uid : q->uid == 0 && uid != 0)
			continue;
		if (!best || q->since_ns < best->since_ns)
			best = q;
	}
	return best;
}

/* Under svc->lock. Its thread wakes from recv and answers why. */
static void drop_conn(struct service *svc, struct request *q)
{
	q->dropped = true;
	svc->n_live--;
	svc->conns_dropped++;
	shutdown(q->sock, SHUT_RD);
	log_debug("dropping idle control connection of uid %u (pid %d) for a newer one",
		  (unsigned)q->uid, (int)q->peer_pid);
}

/* Under svc->lock. Makes room for one more connection of @uid, dropping
 * the idlest ones: per non-root uid at most max_connections_per_uid, in
 * all at most max_connections, of which the last is root's. A
 * connection whose request arrived is never dropped; false when only
 * such connections hold the room. */
static bool admit(struct service *svc, uid_t uid)
{
	const struct mp_config *c = svc->cfg;
	unsigned mine = 0, cap = uid == 0 ? c->max_conns : c->max_conns - 1;
	struct request *v;

	for (struct request *q = svc->conns; q; q = q->next)
		mine += !q->dropped && q->uid == uid;
	if (uid != 0 && mine >= c->max_conns_per_uid) {
		v = idlest(svc, uid, true);
		if (!v)
			return false;
		drop_conn(svc, v);
	}
	while (svc->n_live >= cap) {
		v = idlest(svc, uid, false);
		if (!v)
			return false;
		drop_conn(svc, v);
	}
	return true;
}

static void refuse_conn(struct service *svc, int s, const struct ucred *cred)
{
	struct mp_ctl_builder *b = malloc(sizeof(*b));

	/* The reply fits the socket buffer of a new connection: never
	 * blocks the accepting thread. */
	if (b) {
		mp_ctl_build_init(b);
		mp_ctl_add(b, "status", "error");
		mp_ctl_add(b, "errno", "%d", EUSERS);
		mp_ctl_add(b, "message",
			   "too many control connections in progress (max_connections %u, "
			   "per uid %u)",
			   svc->cfg->max_conns, svc->cfg->max_conns_per_uid);
		if (mp_ctl_build_end(b) == 0)
			mp_ctl_send(s, b->buf, b->len, -1);
		free(b);
	}
	log_warning("too many control connections in progress, refusing one of uid %u (pid %d)",
		    (unsigned)cred->uid, (int)cred->pid);
}

void mp_svc_accept_one(struct service *svc, int lfd)
{
	struct timeval tv = { .tv_sec = IO_TIMEOUT_S };
	struct ucred cred;
	socklen_t len = sizeof(cred);
	struct request *q;
	pthread_attr_t attr;
	pthread_t th;
	bool ok;
	int s, r;

	s = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	if (s < 0)
		return;
	if (getsockopt(s, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0) {
		close(s);
		return;
	}
	setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	q = malloc(sizeof(*q));
	if (!q) {
		close(s);
		return;
	}
	*q = (struct request){ .svc = svc,
			       .since_ns = mp_now_ns(),
			       .sock = s,
			       .uid = cred.uid,
			       .gid = cred.gid,
			       .peer_pid = cred.pid,
			       .fd = -1 };
	pthread_mutex_lock(&svc->lock);
	ok = admit(svc, cred.uid);
	if (ok) {
		q->next = svc->conns;
		svc->conns = q;
		svc->n_conns++;
		svc->n_live++;
	} else {
		svc->conns_refused++;
	}
	pthread_mutex_unlock(&svc->lock);
	if (!ok) {
		refuse_conn(svc, s, &cred);
		close(s);
		free(q);
		return;
	}
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&attr, 256 * 1024);
	r = pthread_create(&th, &attr, mp_svc_conn_main, q);
	pthread_attr_destroy(&attr);
	if (r) {
		log_error_errno(r, "control connection of pid %d: %m", (int)cred.pid);
		mp_svc_conn_remove(svc, q);
		close(s);
		free(q);
	}
}
