/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * ov_buf.c - an overlay file's write buffer (ov_buf.h), in pages of its
 * own (pages.h).
 */
#include <string.h>

#include "ov_buf.h"
#include "pages.h"

struct ov_buf *ov_buf_new(void)
{
	return g_new0(struct ov_buf, 1);
}

void ov_buf_free(struct ov_buf *b)
{
	if (b && b->cap)
		pages_unmap(b->data, b->cap);
	g_free(b);
}

/* Grows the mapping by half again at least, so a file written in small
 * pieces is not remapped at each one.  A new mapping and a copy, not
 * mremap(): TSan does not follow the pages mremap() moves, and reports the
 * moved range's old accesses as races. */
void ov_buf_set_size(struct ov_buf *b, gsize len)
{
	gsize cap;
	void *p;

	if (len > b->cap) {
		cap = pages_round(MAX(len, b->cap + b->cap / 2));
		p = pages_map_or_die(cap, 0, "a file's write buffer");
		if (b->cap) {
			memcpy(p, b->data, MIN(b->len, b->cap));
			pages_unmap(b->data, b->cap);
		}
		b->data = p;
		b->cap = cap;
	}
	b->len = len;
}

void ov_buf_drop_front(struct ov_buf *b, gsize len)
{
	g_assert(len <= b->len);
	memmove(b->data, b->data + len, b->len - len);
	b->len -= len;
}

static void buf_unmap(void *data)
{
	ov_buf_free(data);
}

GBytes *ov_buf_free_to_bytes(struct ov_buf *b)
{
	if (!b->cap) {
		g_free(b);
		return g_bytes_new(NULL, 0);
	}
	return g_bytes_new_with_free_func(b->data, b->len, buf_unmap, b);
}
