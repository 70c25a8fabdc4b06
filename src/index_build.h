/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The state of a build, shared by index_writer.c (which adds the keys to the
 * per-depth streams) and index_commit.c (which lays the streams out as the
 * final file).
 */
#ifndef BUCKETFS_INDEX_BUILD_H
#define BUCKETFS_INDEX_BUILD_H

#include "index_internal.h"

#define STREAM_CHUNK (64 * 1024)
#define READ_BUF     (4 * STREAM_CHUNK)
#define SECTION_BUF  (256 * 1024)

/* A stream record; the name and a string ETag follow it. */
struct rec {
	guint8 kind; /* REC_*; first, so it can be patched */
	guint8 etag_kind;
	guint8 name_len;
	guint8 pad;
	guint16 parts;
	guint16 etag_len;   /* of a string ETag */
	guint64 parent_ord; /* the parent's rank among its depth's dirs */
	guint64 size;
	gint64 mtime;
	guint8 etag[16];
};

#define REC_FILE   0x01
#define REC_DIR	   0x02
#define REC_HIDDEN 0x80 /* a file shadowed by a directory */

/* The records of one depth. */
struct dstream {
	guint8 *buf; /* STREAM_CHUNK bytes not yet in the file */
	gsize used;
	guint64 flushed; /* stream bytes before buf[0] */
	GArray *chunks;	 /* guint64 file offset of each full chunk */
	guint64 ndirs;	 /* directories at this depth */
	GArray *cands;	 /* struct cand, a stack */
};

struct index_writer {
	char *path;
	char *shown; /* path, escaped for messages */
	char *bucket;
	char *prefix;
	gsize prefix_len;
	int sfd;	   /* the stream file, already unlinked */
	guint64 send;	   /* its length */
	GPtrArray *depths; /* struct dstream *, [d] for depth d >= 1 */
	GArray *levels;	   /* struct level, the path of the last key */
	GString *prev;	   /* the last key */
	gboolean have_prev;
	struct index_stats st;
	guint64 names_len; /* of the final 'names' section */
	guint64 etags_len;
	gint64 root_mtime;
	GError *failed; /* the I/O error that ended the build */
	gboolean done;	/* commit was called */
	char *tmp_path; /* the final file while it is written */
};

/* index_writer.c: the stream file and the build's errors. */
int pwrite_all(int fd, const void *buf, gsize len, guint64 off);
int pread_all(int fd, void *buf, gsize len, guint64 off);
gboolean writer_fail(struct index_writer *w, int err, const char *what,
		     GError **error);
gboolean dstream_flush(struct index_writer *w, struct dstream *ds,
		       GError **error);
gboolean writer_usable(struct index_writer *w, GError **error);
void remove_stale_temps(const char *path);

#endif
