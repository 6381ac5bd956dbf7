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

const char *mp_text_python_frame(const struct mp_location *l, char *buf, size_t len)
{
	const char *base = l->file ? strrchr(l->file, '/') : NULL;

	base = base && base[1] ? base + 1 : l->file;
	if (!base)
		snprintf(buf, len, "%s", l->function ? l->function : "??");
	else if (l->line)
		snprintf(buf, len, "%s (%s:%u)", l->function ? l->function : "??", base, l->line);
	else
		snprintf(buf, len, "%s (%s)", l->function ? l->function : "??", base);
	return buf;
}

int mp_text_name_col(int w, const char *s)
{
	size_t n = s ? strnlen(s, 256) : 0;

	return (int)n > w ? (int)n : w;
}
