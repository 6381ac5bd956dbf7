// SPDX-License-Identifier: MIT
#include "text.h"

#include <string.h>

void mp_text_put_name(FILE *f, const char *s, int width)
{
	int n = 0;

	for (; s && *s; s++, n++)
		fputc(*s >= 0x20 && *s < 0x7f ? *s : '?', f);
	for (; n < width; n++)
		fputc(' ', f);
}

int mp_text_name_col(int w, const char *s)
{
	size_t n = s ? strnlen(s, 256) : 0;

	return (int)n > w ? (int)n : w;
}
