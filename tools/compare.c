/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * compare.c - small helpers of bucketfs-compare: progress, differences.
 */
#include <stdio.h>
#include <string.h>

#include "compare.h"

double compare_now(void)
{
	return g_get_monotonic_time() / 1e6;
}

void compare_progress(struct compare *t, gboolean final, const char *fmt, ...)
{
	gint64 now = g_get_monotonic_time();
	g_autofree char *text = NULL;
	va_list ap;

	if (!t->progress || (!final && now - t->last_progress < 500000))
		return;
	t->last_progress = now;
	va_start(ap, fmt);
	text = g_strdup_vprintf(fmt, ap);
	va_end(ap);
	fprintf(stderr, "\r\033[K%s%s", text, final ? "\n" : "");
	fflush(stderr);
}

void compare_diff_free(struct diff *d)
{
	g_free(d->path);
	g_free(d->detail);
	g_free(d);
}

void compare_hidden_free(struct hidden *h)
{
	g_free(h->key);
	g_free(h);
}

void compare_diffs_add(struct diffs *ds, enum diff_kind kind, const char *path,
		       guint64 s3_size, guint64 mount_size, char *detail)
{
	struct diff *d = g_new0(struct diff, 1);

	d->kind = kind;
	d->path = g_strdup(path);
	d->s3_size = s3_size;
	d->mount_size = mount_size;
	d->detail = detail;
	g_ptr_array_add(ds->all, d);
	ds->count[kind]++;
}

static int diff_cmp(gconstpointer a, gconstpointer b)
{
	const struct diff *x = *(struct diff *const *)a;
	const struct diff *y = *(struct diff *const *)b;
	int c = strcmp(x->path, y->path);

	return c ? c : (int)x->kind - (int)y->kind;
}

void compare_diffs_sort(struct diffs *ds)
{
	g_ptr_array_sort(ds->all, diff_cmp);
}
