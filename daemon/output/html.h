/* SPDX-License-Identifier: MIT */
/*
 * The HTML report: one self-contained page (style, script and the
 * profile's figures inline, nothing loaded from anywhere) that draws the
 * heap and RSS timeline with the kernels and phases under it, the kernel
 * table, tf.profile's view of any region, flame graphs of the allocation
 * sites' stacks, owners, tags and pools, and every flag of the profile.
 * The script and style are daemon/output/html/report.{js,css}, embedded at
 * build time (docs/OUTPUT.md "HTML report").
 */
#ifndef MP_HTML_H
#define MP_HTML_H

#include <stdio.h>

#include "profile.h"

/* Writes the page for @p to @f; 0, -ENOMEM or -EIO. */
int mp_html_write(const struct mp_profile *p, FILE *f);

/* The page's data alone (the JSON object the script reads), to @f
 * unescaped; 0 or -EIO. For tests. */
int mp_html_write_data(const struct mp_profile *p, FILE *f);

#endif /* MP_HTML_H */
