/* SPDX-License-Identifier: MIT */
#ifndef STK_H
#define STK_H

#include <stddef.h>

void *lib_recurse(int n, size_t size);
void *leaf_c(size_t size);
void run_a(void);
void run_b(void);
void run_c(void);

#endif
