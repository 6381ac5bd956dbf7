/* SPDX-License-Identifier: MIT */
/*
 * `memprof report --sites N`: the top N allocation sites of every kernel
 * (by bytes allocated), each with its call stack (inlined frames
 * expanded) or, without --stacks, its caller.
 */
#ifndef MP_SITES_H
#define MP_SITES_H

#include <stdint.h>
#include <stdio.h>

#include "profile.h"

/* Writes the report to @f; 0, -ENOMEM or -EIO. */
int mp_report_sites(const struct mp_profile *p, uint32_t n, FILE *f);

#endif /* MP_SITES_H */
