/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * index_writer_commit(): the layout pass that reads the streams once each
 * and writes every section at its final offset, the header, and the
 * rename into place.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <glib/gstdio.h>

#include "error.h"
#include "index_build.h"
#include "log.h"

static void entry_encode(guint8 *p, const struct entry *e)
{
	guint64 mt = (guint64)e->mtime & ((G_GUINT64_CONSTANT(1) << 48) - 1);

	put64(p + E_SIZE, e->size);
	put64(p + E_MTIME, mt | (guint64)e->parts << MTIME_BITS);
	memcpy(p + E_ETAG, e->etag, 16);
	put64(p + E_NAME, e->name_off | (guint64)e->name_len << NAME_OFF_BITS |
				  (guint64)e->flags << 48);
}

/* A section being written sequentially at its place in the final file. */
struct swriter {
	guint64 off;	 /* file offset of buf[0] */
	guint64 written; /* bytes handed to it */
	guint8 *buf;
	gsize used;
	XXH64_state_t hash;
};

/* What commit works with. */
struct layout {
	struct index_writer *w;
	int fd;
	guint64 off[SEC_COUNT];
	guint64 len[SEC_COUNT];
	struct swriter sec[SEC_COUNT];
	guint64 next_id;  /* the next entry's id */
	guint64 next_dir; /* the next directory's number */
	guint8 *rbuf;	  /* the stream being read */
	gsize rstart, rend;
	guint64 rloaded; /* stream bytes of this depth read so far */
};

static gboolean sec_flush(struct layout *l, struct swriter *s, GError **error)
{
	int err = pwrite_all(l->fd, s->buf, s->used, s->off);

	if (err)
		return writer_fail(l->w, err, "writing", error);
	s->off += s->used;
	s->used = 0;
	return TRUE;
}

static gboolean sec_put(struct layout *l, enum section k, const void *data,
			gsize len, GError **error)
{
	struct swriter *s = &l->sec[k];
	const guint8 *p = data;

	XXH64_update(&s->hash, data, len);
	s->written += len;
	while (len > 0) {
		gsize n = MIN(len, SECTION_BUF - s->used);

		memcpy(s->buf + s->used, p, n);
		s->used += n;
		p += n;
		len -= n;
		if (s->used == SECTION_BUF && !sec_flush(l, s, error))
			return FALSE;
	}
	return TRUE;
}

static gboolean sec_put64(struct layout *l, enum section k, guint64 v,
			  GError **error)
{
	guint8 b[8];

	put64(b, v);
	return sec_put(l, k, b, sizeof(b), error);
}

/* Makes @n bytes of the stream of @ds available at l->rbuf + l->rstart. */
static gboolean stream_need(struct layout *l, struct dstream *ds, gsize n,
			    GError **error)
{
	guint64 total = ds->flushed;

	while (l->rend - l->rstart < n) {
		guint64 chunk = l->rloaded / STREAM_CHUNK;
		gsize len;
		int err;

		if (l->rloaded >= total) {
			g_set_error(error, BFS_ERROR, EIO,
				    "index %s: the key stream ends early",
				    l->w->shown);
			return FALSE;
		}
		if (l->rstart > 0) {
			memmove(l->rbuf, l->rbuf + l->rstart,
				l->rend - l->rstart);
			l->rend -= l->rstart;
			l->rstart = 0;
		}
		len = MIN(STREAM_CHUNK, total - l->rloaded);
		g_assert(l->rend + len <= READ_BUF);
		err = pread_all(l->w->sfd, l->rbuf + l->rend, len,
				g_array_index(ds->chunks, guint64, chunk));
		if (err)
			return writer_fail(l->w, err, "reading the key stream",
					   error);
		l->rend += len;
		l->rloaded += len;
	}
	return TRUE;
}

static gboolean layout_entry(struct layout *l, const struct rec *r,
			     const char *name, const char *etag, GError **error)
{
	struct entry e = { 0 };
	guint8 buf[ENTRY_SIZE];
	guint8 blob[16] = { 0 };
	static const guint8 nul;

	e.name_off = l->sec[SEC_NAMES].written;
	e.name_len = r->name_len;
	e.mtime = r->mtime;
	e.etag = blob;
	if (r->kind & REC_DIR) {
		e.flags = F_DIR;
		e.size = l->next_dir++;
		if (!sec_put64(l, SEC_DIR_ENTRY, l->next_id, error))
			return FALSE;
	} else {
		e.size = r->size;
		e.parts = r->etag_kind == ETAG_MULTI ? r->parts : 0;
		e.flags = r->etag_kind << F_ETAG_SHIFT;
		if (r->etag_kind == ETAG_STRING) {
			put64(blob, l->sec[SEC_ETAGS].written);
			put32(blob + 8, r->etag_len);
			if (!sec_put(l, SEC_ETAGS, etag, r->etag_len, error))
				return FALSE;
		} else {
			memcpy(blob, r->etag, 16);
		}
	}
	entry_encode(buf, &e);
	l->next_id++;
	return sec_put(l, SEC_ENTRIES, buf, sizeof(buf), error) &&
	       sec_put(l, SEC_NAMES, name, r->name_len, error) &&
	       sec_put(l, SEC_NAMES, &nul, 1, error);
}

/*
 * Writes the entries of depth @d, the entries of its directories, and the
 * first child of each of the @nparents directories of depth @d - 1.
 */
static gboolean layout_depth(struct layout *l, guint d, guint64 nparents,
			     GError **error)
{
	struct dstream *ds =
		d < l->w->depths->len ? l->w->depths->pdata[d] : NULL;
	guint64 total = ds ? ds->flushed : 0;
	guint64 consumed = 0, next_parent = 0;

	l->rstart = l->rend = 0;
	l->rloaded = 0;
	while (consumed < total) {
		struct rec r;
		const char *name;

		if (!stream_need(l, ds, sizeof(r), error))
			return FALSE;
		memcpy(&r, l->rbuf + l->rstart, sizeof(r));
		if (!stream_need(l, ds, sizeof(r) + r.name_len + r.etag_len,
				 error))
			return FALSE;
		name = (const char *)l->rbuf + l->rstart + sizeof(r);
		l->rstart += sizeof(r) + r.name_len + r.etag_len;
		consumed += sizeof(r) + r.name_len + r.etag_len;
		if (r.kind & REC_HIDDEN)
			continue;
		g_assert(r.parent_ord < nparents);
		for (; next_parent <= r.parent_ord; next_parent++) {
			if (!sec_put64(l, SEC_DIR_FIRST, l->next_id, error))
				return FALSE;
		}
		if (!layout_entry(l, &r, name, name + r.name_len, error))
			return FALSE;
	}
	for (; next_parent < nparents; next_parent++) {
		if (!sec_put64(l, SEC_DIR_FIRST, l->next_id, error))
			return FALSE;
	}
	return TRUE;
}

static gboolean layout_root(struct layout *l, GError **error)
{
	struct rec r = { .kind = REC_DIR, .mtime = l->w->root_mtime };

	return layout_entry(l, &r, "", NULL, error);
}

static void header_build(struct layout *l, guint8 *h, gsize hlen)
{
	struct index_writer *w = l->w;
	const struct index_stats *st = &w->st;
	gsize blen = strlen(w->bucket);

	memset(h, 0, hlen);
	memcpy(h, INDEX_MAGIC, MAGIC_LEN);
	put32(h + H_VERSION, INDEX_FORMAT_VERSION);
	put32(h + H_HEADER_LEN, hlen);
	put64(h + H_FILE_SIZE, st->file_size);
	put64(h + H_CREATED, st->created);
	put64(h + H_KEYS, st->keys);
	put64(h + H_FILES, st->files);
	put64(h + H_DIRS, st->dirs);
	put64(h + H_MARKERS, st->markers);
	put64(h + H_BYTES, st->bytes);
	put64(h + H_SKIPPED_EMPTY, st->skipped_empty);
	put64(h + H_SKIPPED_DOT, st->skipped_dot);
	put64(h + H_SKIPPED_LONG, st->skipped_long);
	put64(h + H_SKIPPED_DEEP, st->skipped_deep);
	put64(h + H_SHADOWED, st->shadowed);
	put64(h + H_ENTRIES, st->entries);
	put64(h + H_NDIRS, st->dirs + 1);
	put32(h + H_BUCKET_LEN, blen);
	put32(h + H_PREFIX_LEN, w->prefix_len);
	for (int k = 0; k < SEC_COUNT; k++) {
		guint8 *d = h + H_SECTIONS + k * SECTION_DESC;

		put64(d, l->off[k]);
		put64(d + 8, l->len[k]);
		put64(d + 16, XXH64_digest(&l->sec[k].hash));
	}
	memcpy(h + HEADER_FIXED, w->bucket, blen);
	memcpy(h + HEADER_FIXED + blen, w->prefix, w->prefix_len);
	put64(h + H_CHECKSUM, header_checksum(h, hlen));
}

/* Sizes and places every section from the counts of phase one. */
static gboolean layout_plan(struct layout *l, GError **error)
{
	struct index_writer *w = l->w;
	guint64 hlen = HEADER_FIXED + strlen(w->bucket) + w->prefix_len;
	guint64 n_dirs = w->st.dirs + 1;

	if (w->names_len - 1 > NAME_OFF_MAX) {
		g_set_error(error, BFS_ERROR, EFBIG,
			    "index %s: %" G_GUINT64_FORMAT " bytes of names; "
			    "the format holds at most %" G_GUINT64_FORMAT,
			    w->shown, w->names_len, NAME_OFF_MAX);
		return FALSE;
	}
	w->st.entries = w->st.files + n_dirs;
	l->len[SEC_ENTRIES] = w->st.entries * ENTRY_SIZE;
	l->len[SEC_DIR_FIRST] = (n_dirs + 1) * 8;
	l->len[SEC_DIR_ENTRY] = n_dirs * 8;
	l->len[SEC_NAMES] = w->names_len;
	l->len[SEC_ETAGS] = w->etags_len;
	l->off[0] = (hlen + 7) & ~(guint64)7;
	for (int k = 1; k < SEC_COUNT; k++)
		l->off[k] = l->off[k - 1] + l->len[k - 1];
	w->st.file_size = l->off[SEC_COUNT - 1] + l->len[SEC_COUNT - 1];
	for (int k = 0; k < SEC_COUNT; k++) {
		l->sec[k].off = l->off[k];
		l->sec[k].buf = g_malloc(SECTION_BUF);
		XXH64_reset(&l->sec[k].hash, 0);
	}
	return TRUE;
}

static gboolean layout_write(struct layout *l, GError **error)
{
	struct index_writer *w = l->w;
	guint64 nparents = 1;
	guint maxdepth = w->depths->len ? w->depths->len - 1 : 0;

	if (!layout_root(l, error))
		return FALSE;
	for (guint d = 1; d <= maxdepth + 1; d++) {
		struct dstream *ds =
			d < w->depths->len ? w->depths->pdata[d] : NULL;

		if (!layout_depth(l, d, nparents, error))
			return FALSE;
		nparents = ds ? ds->ndirs : 0;
	}
	if (!sec_put64(l, SEC_DIR_FIRST, w->st.entries, error))
		return FALSE;
	for (int k = 0; k < SEC_COUNT; k++) {
		if (!sec_flush(l, &l->sec[k], error))
			return FALSE;
		/* The counts of phase one must match what was laid out. */
		g_assert(l->sec[k].written == l->len[k]);
	}
	return TRUE;
}

static gboolean layout_header(struct layout *l, GError **error)
{
	gsize hlen = l->off[0];
	g_autofree guint8 *h = g_malloc(hlen);
	int err;

	header_build(l, h, hlen);
	err = pwrite_all(l->fd, h, hlen, 0);
	if (err)
		return writer_fail(l->w, err, "writing", error);
	return TRUE;
}

/*
 * A new temporary file beside the index, locked (flock) for as long as it
 * is open so that remove_stale_temps() in another build leaves it alone.
 * Sets w->tmp_path; returns the descriptor or -1 with errno set.
 */
static int temp_create(struct index_writer *w)
{
	g_autofree char *dir = g_path_get_dirname(w->path);
	g_autofree char *base = g_path_get_basename(w->path);

	for (int tries = 0; tries < 8; tries++) {
		struct stat st;
		int fd, err;

		g_free(w->tmp_path);
		w->tmp_path = g_strdup_printf("%s/.%s.tmp-XXXXXX", dir, base);
		fd = g_mkstemp_full(w->tmp_path, O_RDWR | O_CLOEXEC, 0600);
		if (fd < 0)
			break;
		/* A cleaner may have taken it between mkstemp and flock:
		 * then it is locked, or already unlinked; take another. */
		if (flock(fd, LOCK_EX | LOCK_NB) == 0 && fstat(fd, &st) == 0 &&
		    st.st_nlink > 0)
			return fd;
		err = errno;
		close(fd);
		errno = err;
	}
	g_clear_pointer(&w->tmp_path, g_free);
	return -1;
}

/* Creates the final file under a temporary name, at its full size. */
static gboolean layout_create(struct layout *l, GError **error)
{
	struct index_writer *w = l->w;
	int err;

	l->fd = temp_create(w);
	if (l->fd < 0) {
		err = errno ? errno : EEXIST;
		return writer_fail(w, err, "creating the temporary file",
				   error);
	}
	if (fchmod(l->fd, 0600) < 0) {
		err = errno;
		return writer_fail(w, err, "chmod", error);
	}
	/* Fail early on a full disk rather than after gigabytes. */
	err = posix_fallocate(l->fd, 0, w->st.file_size);
	if (err && err != EOPNOTSUPP && err != EINVAL)
		return writer_fail(w, err, "allocating space", error);
	return TRUE;
}

static void fsync_dir(const char *path)
{
	g_autofree char *dir = g_path_get_dirname(path);
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int err = 0;

	if (fd < 0 || fsync(fd) < 0)
		err = errno;
	if (fd >= 0)
		close(fd);
	/* The rename is done: failing now would misreport the index. */
	if (err) {
		g_autofree char *d = log_escape(dir, -1);

		log_msg(LOG_LEVEL_WARNING, "index: fsync of directory %s: %s",
			d, g_strerror(err));
	}
}

static gboolean layout_finish(struct layout *l, GError **error)
{
	struct index_writer *w = l->w;
	int fd = l->fd;
	int err;

	l->fd = -1;
	if (fsync(fd) < 0) {
		err = errno;
		close(fd);
		return writer_fail(w, err, "fsync", error);
	}
	/* Renamed while still open, so still locked: see temp_create(). */
	if (rename(w->tmp_path, w->path) < 0) {
		err = errno;
		close(fd);
		return writer_fail(w, err, "renaming into place", error);
	}
	g_clear_pointer(&w->tmp_path, g_free);
	if (close(fd) < 0)
		log_msg(LOG_LEVEL_WARNING, "index %s: close: %s", w->shown,
			g_strerror(errno));
	fsync_dir(w->path);
	return TRUE;
}

static void layout_clear(struct layout *l)
{
	for (int k = 0; k < SEC_COUNT; k++)
		g_free(l->sec[k].buf);
	g_free(l->rbuf);
	if (l->fd >= 0)
		close(l->fd);
}

gboolean index_writer_commit(struct index_writer *w, struct index_stats *stats,
			     GError **error)
{
	struct layout l = { .w = w, .fd = -1 };
	gboolean ok = FALSE;

	g_return_val_if_fail(w != NULL && !w->done, FALSE);
	g_return_val_if_fail(error == NULL || *error == NULL, FALSE);

	w->done = TRUE;
	if (!writer_usable(w, error))
		return FALSE;
	for (guint d = 1; d < w->depths->len; d++) {
		if (w->depths->pdata[d] &&
		    !dstream_flush(w, w->depths->pdata[d], error))
			return FALSE;
	}
	l.rbuf = g_malloc(READ_BUF);
	if (!layout_plan(&l, error) || !layout_create(&l, error) ||
	    !layout_write(&l, error) || !layout_header(&l, error) ||
	    !layout_finish(&l, error))
		goto out;
	if (stats)
		*stats = w->st;
	ok = TRUE;

out:
	layout_clear(&l);
	if (!ok && w->tmp_path) {
		g_unlink(w->tmp_path);
		g_clear_pointer(&w->tmp_path, g_free);
	}
	close(w->sfd);
	w->sfd = -1;
	return ok;
}
