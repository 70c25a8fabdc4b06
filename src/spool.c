/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * spool.c - listing records on disk; external merge sort.
 *
 * Record format (host byte order; the file never leaves this process):
 * u32 key length, key, u64 size, i64 mtime, u32 ETag length, ETag.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "error.h"
#include "spool.h"

struct spool {
	FILE *f;
	char *dir; /* for messages */
	guint64 count;
};

void spool_rec_init(struct spool_rec *rec)
{
	rec->key = g_string_new(NULL);
	rec->etag = g_string_new(NULL);
	rec->size = 0;
	rec->mtime = 0;
}

void spool_rec_clear(struct spool_rec *rec)
{
	if (rec->key)
		g_string_free(rec->key, TRUE);
	if (rec->etag)
		g_string_free(rec->etag, TRUE);
	rec->key = rec->etag = NULL;
}

static gboolean io_error(const struct spool *s, const char *what,
			 GError **error)
{
	int e = errno ? errno : EIO;

	g_set_error(error, BFS_ERROR, e, "%s the listing spool in %s: %s", what,
		    s->dir, g_strerror(e));
	return FALSE;
}

static int open_tmp(const char *dir, const char *base)
{
	int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);

	if (fd < 0 &&
	    (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL)) {
		g_autofree char *tmpl =
			g_strdup_printf("%s/.%s.spool-XXXXXX", dir, base);

		fd = g_mkstemp_full(tmpl, O_RDWR | O_CLOEXEC, 0600);
		if (fd >= 0 && unlink(tmpl) < 0 && errno != ENOENT) {
			int e = errno;

			close(fd);
			errno = e;
			fd = -1;
		}
	}
	return fd;
}

struct spool *spool_new(const char *dir, const char *base, GError **error)
{
	int fd = open_tmp(dir, base);
	struct spool *s;
	FILE *f;

	if (fd < 0) {
		int e = errno;

		g_set_error(error, BFS_ERROR, e, "temporary file in %s: %s",
			    dir, g_strerror(e));
		return NULL;
	}
	f = fdopen(fd, "w+");
	if (!f) {
		int e = errno;

		close(fd);
		g_set_error(error, BFS_ERROR, e, "fdopen: %s", g_strerror(e));
		return NULL;
	}
	s = g_new0(struct spool, 1);
	s->f = f;
	s->dir = g_strdup(dir);
	return s;
}

void spool_free(struct spool *s)
{
	if (!s)
		return;
	fclose(s->f);
	g_free(s->dir);
	g_free(s);
}

gboolean spool_put(struct spool *s, const char *key, guint64 size, gint64 mtime,
		   const char *etag, GError **error)
{
	guint32 kl = strlen(key), el = etag ? strlen(etag) : 0;

	errno = 0;
	if (fwrite(&kl, 4, 1, s->f) != 1 || fwrite(key, 1, kl, s->f) != kl ||
	    fwrite(&size, 8, 1, s->f) != 1 || fwrite(&mtime, 8, 1, s->f) != 1 ||
	    fwrite(&el, 4, 1, s->f) != 1 ||
	    (el && fwrite(etag, 1, el, s->f) != el))
		return io_error(s, "writing", error);
	s->count++;
	return TRUE;
}

guint64 spool_count(const struct spool *s)
{
	return s->count;
}

gboolean spool_rewind(struct spool *s, GError **error)
{
	errno = 0;
	if (fflush(s->f) != 0 || fseek(s->f, 0, SEEK_SET) != 0)
		return io_error(s, "rewinding", error);
	return TRUE;
}

gboolean spool_next(struct spool *s, struct spool_rec *rec, GError **error)
{
	guint32 kl, el;

	errno = 0;
	if (fread(&kl, 4, 1, s->f) != 1)
		goto end;
	g_string_set_size(rec->key, kl);
	if (fread(rec->key->str, 1, kl, s->f) != kl ||
	    fread(&rec->size, 8, 1, s->f) != 1 ||
	    fread(&rec->mtime, 8, 1, s->f) != 1 || fread(&el, 4, 1, s->f) != 1)
		goto short_read;
	g_string_set_size(rec->etag, el);
	if (el && fread(rec->etag->str, 1, el, s->f) != el)
		goto short_read;
	return TRUE;
end:
	if (ferror(s->f))
		return io_error(s, "reading", error);
	return FALSE;
short_read:
	if (!ferror(s->f))
		errno = EIO; /* truncated: we wrote it, so never expected */
	return io_error(s, "reading", error);
}

/* -- sorting ------------------------------------------------------------- */

/* One record held in memory, in one allocation: key, NUL, ETag, NUL. */
struct held {
	guint64 seq; /* keeps equal keys in their first order */
	guint64 size;
	gint64 mtime;
	guint32 klen;
	char text[];
};

static int held_cmp(const void *a, const void *b)
{
	const struct held *x = *(struct held *const *)a;
	const struct held *y = *(struct held *const *)b;
	int c = strcmp(x->text, y->text);

	if (c)
		return c;
	return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* Sorts @held and writes it as one new run appended to @runs. */
static gboolean write_run(GPtrArray *held, const char *dir, const char *base,
			  GPtrArray *runs, GError **error)
{
	struct spool *run;
	guint i;

	qsort(held->pdata, held->len, sizeof(void *), held_cmp);
	run = spool_new(dir, base, error);
	if (!run)
		return FALSE;
	g_ptr_array_add(runs, run);
	for (i = 0; i < held->len; i++) {
		const struct held *h = g_ptr_array_index(held, i);
		const char *etag = h->text + h->klen + 1;

		if (!spool_put(run, h->text, h->size, h->mtime,
			       *etag ? etag : NULL, error))
			return FALSE;
	}
	g_ptr_array_set_size(held, 0);
	return spool_rewind(run, error);
}

gboolean spool_sort(struct spool *s, const char *dir, const char *base,
		    gsize mem_max, GPtrArray *runs, GError **error)
{
	g_autoptr(GPtrArray) held = g_ptr_array_new_with_free_func(g_free);
	struct spool_rec rec;
	gsize used = 0;
	guint64 seq = 0;
	gboolean ok = FALSE;

	spool_rec_init(&rec);
	if (!spool_rewind(s, error))
		goto out;
	while (spool_next(s, &rec, error)) {
		struct held *h =
			g_malloc(sizeof(*h) + rec.key->len + rec.etag->len + 2);

		h->seq = seq++;
		h->size = rec.size;
		h->mtime = rec.mtime;
		h->klen = rec.key->len;
		memcpy(h->text, rec.key->str, rec.key->len + 1);
		memcpy(h->text + h->klen + 1, rec.etag->str, rec.etag->len + 1);
		g_ptr_array_add(held, h);
		used += sizeof(*h) + rec.key->len + rec.etag->len + 2 +
			sizeof(void *);
		if (used >= mem_max) {
			if (!write_run(held, dir, base, runs, error))
				goto out;
			used = 0;
		}
	}
	if (error && *error)
		goto out;
	ok = held->len == 0 || write_run(held, dir, base, runs, error);
out:
	spool_rec_clear(&rec);
	return ok;
}

/* -- merging ------------------------------------------------------------- */

struct cursor {
	struct spool *run;
	guint order; /* position in @runs: ties go to the earlier run */
	struct spool_rec rec;
};

static gboolean cursor_less(const struct cursor *a, const struct cursor *b)
{
	int c = strcmp(a->rec.key->str, b->rec.key->str);

	return c < 0 || (c == 0 && a->order < b->order);
}

/* Restores the heap property below @i (a binary min-heap of cursors). */
static void sift_down(struct cursor **heap, guint n, guint i)
{
	for (;;) {
		guint l = 2 * i + 1, r = l + 1, m = i;
		struct cursor *t;

		if (l < n && cursor_less(heap[l], heap[m]))
			m = l;
		if (r < n && cursor_less(heap[r], heap[m]))
			m = r;
		if (m == i)
			return;
		t = heap[i];
		heap[i] = heap[m];
		heap[m] = t;
		i = m;
	}
}

gboolean spool_merge(GPtrArray *runs, spool_emit_fn emit, void *user,
		     guint64 *dups, GError **error)
{
	guint n = 0, i;
	struct cursor *cur = g_new0(struct cursor, runs->len ? runs->len : 1);
	struct cursor **heap =
		g_new0(struct cursor *, runs->len ? runs->len : 1);
	g_autoptr(GString) last = NULL;
	gboolean ok = FALSE;

	for (i = 0; i < runs->len; i++) {
		cur[i].run = g_ptr_array_index(runs, i);
		cur[i].order = i;
		spool_rec_init(&cur[i].rec);
		if (spool_next(cur[i].run, &cur[i].rec, error))
			heap[n++] = &cur[i];
		else if (error && *error)
			goto out;
	}
	for (i = n; i-- > 0;)
		sift_down(heap, n, i);
	while (n) {
		struct cursor *c = heap[0];

		if (last && !strcmp(last->str, c->rec.key->str)) {
			if (dups)
				(*dups)++;
		} else {
			if (!emit(&c->rec, user, error))
				goto out;
			if (!last)
				last = g_string_new(NULL);
			g_string_assign(last, c->rec.key->str);
		}
		if (!spool_next(c->run, &c->rec, error)) {
			if (error && *error)
				goto out;
			heap[0] = heap[--n];
		}
		sift_down(heap, n, 0);
	}
	ok = TRUE;
out:
	for (i = 0; i < runs->len; i++)
		spool_rec_clear(&cur[i].rec);
	g_free(cur);
	g_free(heap);
	return ok;
}
