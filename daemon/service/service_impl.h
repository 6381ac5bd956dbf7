/* SPDX-License-Identifier: MIT */
/*
 * Inside the service (memprofd without --pid): its state, shared by
 * service.c (targets, requests, the loop), budget.c (the memory budget)
 * and conn.c (admission of control connections). authorize.c needs none
 * of it.
 */
#ifndef MP_SERVICE_IMPL_H
#define MP_SERVICE_IMPL_H

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <unistd.h>

#include "config.h"
#include "control.h"
#include "service.h"
#include "session.h"

#define MAX_TARGET_STREAMS 8
/* Bounds how long a client may keep a connection thread busy sending or
 * reading. */
#define IO_TIMEOUT_S 5
#define ATTACH_TIMEOUT_S 60
#define DUMP_TIMEOUT_S 30
#define SHUTDOWN_FLUSH_NS (5ull * 1000000000ull)

enum target_state { T_STARTING, T_RUNNING, T_DONE };

struct service;

struct target {
	struct service *svc;
	struct target *next;
	uint64_t id;
	pid_t pid;
	uid_t uid; /* who attached */
	gid_t gid;
	char exe[PATH_MAX];
	char no_inject[160]; /* sopts.no_inject's text */
	uint64_t started_ns;
	uint64_t cost; /* mp_service_target_cost() */
	uint64_t ring_bytes;
	int out_fd;
	char *streams[MAX_TARGET_STREAMS];
	size_t n_streams;
	char *owners[MP_CONFIG_MAX_OWNERS];
	char *wrappers[MP_CONFIG_MAX_OWNERS], *wrapper_fns[MP_CONFIG_MAX_OWNERS];
	struct mp_session_opts sopts;
	struct mp_session_ctl ctl;
	pthread_t thread;
	bool joined;
	/* Under svc->lock. */
	enum target_state state;
	int result;
	unsigned users; /* connection threads holding a pointer */
	bool dump_wanted, dump_ready;
	bool over_budget; /* being detached by budget_enforce() */
	/* Limits: its live table's bytes (the session stores them, relaxed
	 * atomic): the largest is detached first. */
	uint64_t tables_bytes;
	struct mp_profile *dump;
	int dump_err;
	/* Session thread only. */
	uint64_t seq;
	pthread_mutex_t dump_lock; /* one dump at a time */
};

struct service {
	const struct mp_service_opts *o;
	const char *control_path, *config_path;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct mp_config *cfg; /* under lock */
	uint64_t budget; /* bytes for targets; 0: none (under lock) */
	uint64_t budget_total; /* targets and the service's own reserve */
	uint64_t cgroup_max; /* the service cgroup's memory.max; 0: none */
	struct target *targets; /* under lock */
	unsigned n_targets; /* not DONE */
	/* Control connections (under lock): every connection thread is on
	 * the list; n_live counts those not dropped to make room. */
	struct request *conns;
	unsigned n_conns, n_live;
	uint64_t conns_dropped, conns_refused;
	uint64_t budget_detaches; /* targets ended by budget_enforce() */
	uint64_t budget_checked_ns; /* service loop only */
	uint64_t next_id;
	bool stopping;
	int reap_fd; /* eventfd: a target ended or was released */
	struct mp_streamer *streamer;
	uint64_t started_ns;
	_Atomic uint64_t trimmed_ns; /* last heap_trim_later() trim */
};

struct request {
	struct service *svc;
	struct request *next; /* svc->conns, under svc->lock */
	uint64_t since_ns; /* accepted */
	bool busy; /* its request arrived: being served, never dropped */
	bool dropped; /* made room for a newer connection */
	int sock;
	uid_t uid;
	gid_t gid;
	pid_t peer_pid;
	struct mp_ctl_msg msg;
	int fd; /* passed by the client, or -1 */
	struct mp_ctl_builder reply;
};

/* Makes the eventfd @fd readable (a target's stop or snapshot request). */
static inline void mp_svc_signal_fd(int fd)
{
	uint64_t one = 1;

	if (write(fd, &one, sizeof(one)) < 0) {
		/* An eventfd only fails here on overflow: already signalled. */
	}
}

/* budget.c */
/* The memory limit of the cgroup this process runs in: memory.max (v2)
 * or memory.limit_in_bytes (v1); 0 when none or unknown. */
uint64_t mp_svc_cgroup_memory_max(void);
int mp_svc_budget_check(struct service *svc, uint64_t cost, uint32_t mode, char *why,
			size_t why_len);
void mp_svc_budget_enforce(struct service *svc);
void mp_svc_budget_update(struct service *svc);
#define BUDGET_CHECK_MS 1000

/* conn.c: accepts a control connection (SO_PEERCRED, admission) and
 * serves it on a thread of its own running mp_svc_conn_main(). */
void mp_svc_accept_one(struct service *svc, int lfd);
void mp_svc_conn_remove(struct service *svc, struct request *q);
/* service.c: a connection's thread: reads the request, answers it. */
void *mp_svc_conn_main(void *arg);

#endif /* MP_SERVICE_IMPL_H */
