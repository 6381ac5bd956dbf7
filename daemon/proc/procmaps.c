// SPDX-License-Identifier: MIT
#include "procmaps.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static bool parse_hex(const char **p, const char *end, char stop, uint64_t *ret)
{
	uint64_t v = 0;
	int n = 0;

	while (*p < end && **p != stop) {
		char c = **p;
		int d;

		if (c >= '0' && c <= '9')
			d = c - '0';
		else if (c >= 'a' && c <= 'f')
			d = c - 'a' + 10;
		else if (c >= 'A' && c <= 'F')
			d = c - 'A' + 10;
		else
			return false;
		if (++n > 16)
			return false;
		v = v << 4 | (uint64_t)d;
		(*p)++;
	}
	if (!n || *p >= end)
		return false;
	(*p)++; /* the separator */
	*ret = v;
	return true;
}

static bool parse_dec(const char **p, const char *end, uint64_t *ret)
{
	uint64_t v = 0;
	int n = 0;

	while (*p < end && **p >= '0' && **p <= '9') {
		if (++n > 19)
			return false;
		v = v * 10 + (uint64_t)(**p - '0');
		(*p)++;
	}
	*ret = v;
	return n > 0;
}

/* "start-end perms offset major:minor inode   path" */
static int parse_line(const char *p, const char *end, struct mp_mapping *m, const char **ret_path,
		      size_t *ret_path_len)
{
	uint64_t maj, min;

	if (!parse_hex(&p, end, '-', &m->start) || !parse_hex(&p, end, ' ', &m->end) ||
	    m->end <= m->start)
		return -EINVAL;
	if (end - p < 5 || p[4] != ' ')
		return -EINVAL;
	m->perms = (p[0] == 'r' ? MP_MAP_R : 0) | (p[1] == 'w' ? MP_MAP_W : 0) |
		   (p[2] == 'x' ? MP_MAP_X : 0) | (p[3] == 's' ? MP_MAP_SHARED : 0);
	p += 5;
	if (!parse_hex(&p, end, ' ', &m->offset) || !parse_hex(&p, end, ':', &maj) ||
	    !parse_hex(&p, end, ' ', &min) || maj > UINT32_MAX || min > UINT32_MAX ||
	    !parse_dec(&p, end, &m->inode))
		return -EINVAL;
	m->dev_major = (uint32_t)maj;
	m->dev_minor = (uint32_t)min;
	if (p < end && *p != ' ')
		return -EINVAL;
	while (p < end && *p == ' ')
		p++;
	*ret_path = p;
	*ret_path_len = (size_t)(end - p);
	return 0;
}

int mp_procmaps_parse(const char *buf, size_t len, struct mp_procmaps **ret)
{
	struct mp_procmaps *pm;
	size_t lines = 0, sp = 0;
	const char *p, *end = buf + len;
	int r = -EINVAL;

	if (len > MP_PROCMAPS_MAX_SIZE)
		return -EFBIG;
	for (size_t i = 0; i < len; i++)
		if (buf[i] == '\n')
			lines++;
	if (len && buf[len - 1] != '\n')
		lines++;
	pm = calloc(1, sizeof(*pm));
	if (!pm)
		return -ENOMEM;
	/* Paths are shorter than their lines, so len + lines bounds them. */
	pm->maps = calloc(lines ? lines : 1, sizeof(*pm->maps));
	pm->strings = malloc(len + lines + 1);
	if (!pm->maps || !pm->strings) {
		r = -ENOMEM;
		goto fail;
	}
	for (p = buf; p < end;) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		const char *le = nl ? nl : end;
		struct mp_mapping *m = &pm->maps[pm->n];
		const char *path;
		size_t plen;

		if (le - p > MP_PROCMAPS_MAX_LINE || memchr(p, '\0', (size_t)(le - p)))
			goto fail;
		if (parse_line(p, le, m, &path, &plen) < 0)
			goto fail;
		if (pm->n && m->start < pm->maps[pm->n - 1].end) {
			r = -EAGAIN;
			goto fail;
		}
		memcpy(pm->strings + sp, path, plen);
		pm->strings[sp + plen] = '\0';
		m->path = (const char *)(uintptr_t)sp; /* fixed up below */
		sp += plen + 1;
		pm->n++;
		p = nl ? nl + 1 : end;
	}
	for (size_t i = 0; i < pm->n; i++)
		pm->maps[i].path = pm->strings + (uintptr_t)pm->maps[i].path;
	*ret = pm;
	return 0;
fail:
	mp_procmaps_free(pm);
	return r;
}

static int read_once(pid_t pid, struct mp_procmaps **ret)
{
	char path[64], *buf = NULL;
	size_t len = 0, cap = 0;
	int fd, r;

	snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	for (;;) {
		ssize_t n;

		if (cap - len < 65536) {
			char *nb;

			if (cap >= MP_PROCMAPS_MAX_SIZE) {
				r = -EFBIG;
				goto out;
			}
			cap = cap ? cap * 2 : 262144;
			nb = realloc(buf, cap);
			if (!nb) {
				r = -ENOMEM;
				goto out;
			}
			buf = nb;
		}
		n = read(fd, buf + len, cap - len);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			r = -errno;
			goto out;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	r = mp_procmaps_parse(buf ? buf : "", len, ret);
out:
	free(buf);
	close(fd);
	return r;
}

/* A read of the maps file is not one snapshot: the kernel takes the
 * target's mappings a few at a time, and a target that maps or unmaps
 * meanwhile can make a range appear twice or overlap the one before (a
 * busy multi-threaded target does this often). Read again then. */
#define MP_PROCMAPS_READS 16

int mp_procmaps_read(pid_t pid, struct mp_procmaps **ret)
{
	int r = -EAGAIN;

	for (int i = 0; i < MP_PROCMAPS_READS && r == -EAGAIN; i++)
		r = read_once(pid, ret);
	/* A process that has exited (a zombie, or one tearing its address
	 * space down) reads as no mapping at all, which a live one never is:
	 * a copy read before is worth more than that. */
	if (r == 0 && !(*ret)->n) {
		mp_procmaps_free(*ret);
		*ret = NULL;
		r = -ESRCH;
	}
	return r;
}

/* Whether a mapping of @m (sorted) overlaps [start, end). */
static bool overlaps(const struct mp_procmaps *m, uint64_t start, uint64_t end)
{
	size_t lo = 0, hi = m->n;

	/* the first mapping that ends past @start */
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (m->maps[mid].end <= start)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < m->n && m->maps[lo].start < end;
}

int mp_procmaps_merge(struct mp_procmaps **into, struct mp_procmaps *fresh)
{
	struct mp_procmaps *old = *into, *m;
	size_t n = fresh->n, bytes = 0, i = 0, j = 0, sp = 0;
	bool *keep;

	if (!old) {
		*into = fresh;
		return 0;
	}
	keep = calloc(old->n ? old->n : 1, sizeof(*keep));
	m = calloc(1, sizeof(*m));
	if (!keep || !m) {
		free(keep);
		free(m);
		mp_procmaps_free(fresh);
		return -ENOMEM;
	}
	for (size_t k = 0; k < old->n; k++) {
		keep[k] = !overlaps(fresh, old->maps[k].start, old->maps[k].end);
		if (keep[k]) {
			n++;
			bytes += strlen(old->maps[k].path) + 1;
		}
	}
	for (size_t k = 0; k < fresh->n; k++)
		bytes += strlen(fresh->maps[k].path) + 1;
	m->maps = calloc(n ? n : 1, sizeof(*m->maps));
	m->strings = malloc(bytes ? bytes : 1);
	if (!m->maps || !m->strings) {
		mp_procmaps_free(m);
		free(keep);
		mp_procmaps_free(fresh);
		return -ENOMEM;
	}
	/* both lists are sorted and what is kept of @old overlaps nothing
	 * of @fresh: one sorted list */
	while (i < old->n || j < fresh->n) {
		const struct mp_mapping *src;
		size_t len;

		if (i < old->n && !keep[i]) {
			i++;
			continue;
		}
		if (j >= fresh->n || (i < old->n && old->maps[i].start < fresh->maps[j].start))
			src = &old->maps[i++];
		else
			src = &fresh->maps[j++];
		len = strlen(src->path) + 1;
		m->maps[m->n] = *src;
		memcpy(m->strings + sp, src->path, len);
		m->maps[m->n++].path = m->strings + sp;
		sp += len;
	}
	free(keep);
	mp_procmaps_free(old);
	mp_procmaps_free(fresh);
	*into = m;
	return 0;
}

void mp_procmaps_free(struct mp_procmaps *m)
{
	if (!m)
		return;
	free(m->maps);
	free(m->strings);
	free(m);
}

const struct mp_mapping *mp_procmaps_find(const struct mp_procmaps *m, uint64_t addr)
{
	size_t lo = 0, hi = m->n, h = __atomic_load_n(&m->hint, __ATOMIC_RELAXED);

	if (h < m->n && addr >= m->maps[h].start && addr < m->maps[h].end)
		return &m->maps[h];
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (addr < m->maps[mid].start) {
			hi = mid;
		} else if (addr >= m->maps[mid].end) {
			lo = mid + 1;
		} else {
			/* the struct is the caller's, never const itself */
			__atomic_store_n((size_t *)&m->hint, mid, __ATOMIC_RELAXED);
			return &m->maps[mid];
		}
	}
	return NULL;
}
