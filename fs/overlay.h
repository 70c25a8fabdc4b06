/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * overlay.h - the names the index doesn't have, on every mount; unless
 * -o ro they can be written: small files written through with PutObject,
 * directories made with a zero-byte "name/" marker, and names other hosts
 * created, found by asking S3 (HeadObject, then a one-key ListObjectsV2 for a
 * directory).  This is what tools such as MLPerf Storage's pre-flight
 * checks need on a dataset mount: create, stat and unlink a probe
 * dot-file, see another host's, and mkdir train/, valid/ and test/.
 *
 * The limits (bucketfs(1), WRITES): a new file (made by create, or
 * emptied by O_TRUNC) is buffered in memory and, once it outgrows one
 * part (part_size=), streamed to S3 as a multipart upload (upload.h)
 * while it is written: writes must then be sequential (EINVAL for one
 * before what is buffered, or a hole of more than a part), one writer
 * at a time (EBUSY), and it is not readable until closed (EBUSY).  A
 * file smaller than a part goes up by one PUT.  A file reopened without
 * O_TRUNC is buffered whole, up to write_max bytes.  Either way the
 * upload ends at close (flush) or fsync, which report its error, and
 * nothing is visible on S3 before; after fsync completed a streamed
 * file, writes fail with EBADF.  Objects of the index stay read-only;
 * no rename (EXDEV, so mv copies), hard links (EXDEV) or symlinks;
 * permissions and times are not stored; names made on other hosts are
 * found by lookup at once but listed only after the next index build.
 *
 * Keys here are full S3 keys, prefix included, without a trailing '/'
 * (a directory's marker object is KEY + "/").  Inode numbers are
 * index_key_ino() of the key as the index would hold it, so a path has
 * one st_ino on every host, before and after the next index build.
 *
 * Node numbers are small integers > 0, stable while the node is known;
 * the caller maps them into its node-id space.  Each lookup-like call
 * counts one kernel lookup, overlay_forget() returns them.  Any thread;
 * the calls that talk to S3 block (FUSE worker threads only).
 */
#ifndef BUCKETFS_FS_OVERLAY_H
#define BUCKETFS_FS_OVERLAY_H

#include <glib.h>
#include <sys/types.h>

#include "s3.h"

struct overlay;
struct ov_file;

/* The largest file rewritten in place, unless write_max= says otherwise. */
#define OVERLAY_DEFAULT_WRITE_MAX ((guint64)64 << 20)

struct ov_attr {
	guint64 node; /* the overlay's node number */
	guint64 ino;  /* st_ino */
	gboolean is_dir;
	guint64 size;
	gint64 mtime;
};

/*
 * @s3 is borrowed and must outlive the overlay.  @part_size and
 * @parts_max: upload.h's (0: defaults).  A key S3 says it lacks is
 * believed missing for @negative_timeout seconds (0: asked every time).
 */
struct overlay *overlay_new(struct s3 *s3, guint64 write_max, guint64 part_size,
			    guint parts_max, double negative_timeout);
void overlay_free(struct overlay *ov);

/*
 * Finds @key: a name this overlay knows, else (when @probe) the object
 * KEY on S3 (HEAD), else a directory KEY/ on S3 (any key under it).
 * Returns TRUE and fills @out with one lookup counted; FALSE with @error
 * ENOENT when there is no such name, or the S3 error's cause chain.  A
 * key found missing less than negative_timeout ago is not asked again;
 * a name made here ends that at once.
 */
gboolean overlay_lookup(struct overlay *ov, const char *key, gboolean probe,
			struct ov_attr *out, GError **error);

/* The attributes of node @node; FALSE if unknown or removed. */
gboolean overlay_getattr(struct overlay *ov, guint64 node, struct ov_attr *out);

/* The key of node @node, newly allocated; NULL if unknown or removed. */
char *overlay_key(struct overlay *ov, guint64 node);

/* Returns @nlookup kernel lookups of @node. */
void overlay_forget(struct overlay *ov, guint64 node, guint64 nlookup);

/*
 * A new empty file @key, open for writing (*@file), nothing uploaded
 * yet: the PUT happens at overlay_flush().  An existing overlay file of
 * that name is truncated.  Counts one lookup.
 */
gboolean overlay_create(struct overlay *ov, const char *key,
			struct ov_attr *out, struct ov_file **file,
			GError **error);

/* PUTs the marker KEY/ (zero bytes).  Counts one lookup. */
gboolean overlay_mkdir(struct overlay *ov, const char *key, struct ov_attr *out,
		       GError **error);

/* DELETEs object @key, which must be an overlay file (EPERM otherwise). */
gboolean overlay_unlink(struct overlay *ov, const char *key, GError **error);

/*
 * Removes the directory @key: ENOTEMPTY when any key other than its
 * marker is under it, else DELETEs the marker.
 */
gboolean overlay_rmdir(struct overlay *ov, const char *key, GError **error);

/*
 * Opens file @node.  Its bytes are fetched whole (GET, at most write_max)
 * unless @truncate or another handle has them.  @writable handles may
 * write; the first write marks the file for upload.
 */
struct ov_file *overlay_open(struct overlay *ov, guint64 node,
			     gboolean writable, gboolean truncate,
			     GError **error);

/* Copies up to @size bytes at @off into @buf; returns how many. */
gsize overlay_read(struct ov_file *f, guint64 off, gsize size, char *buf);

/*
 * Writes; EFBIG past write_max, EBADF on a read-only handle, EINTR when
 * *@stop (may be NULL) was set while it waited (overlay_wake()).  After a
 * failed write the file is never uploaded: every later flush fails with
 * that write's errno and cause, until the file is emptied (O_TRUNC,
 * create) again.
 */
gboolean overlay_write(struct ov_file *f, guint64 off, const char *buf,
		       gsize size, const gint *stop, GError **error);

/*
 * A write waiting for a part slot gives up, with EINTR, once its *@stop
 * is set and this is called; its file is then broken (its bytes were not
 * all taken), so close() fails and uploads nothing.  Any thread.
 */
void overlay_wake(struct overlay *ov);

/*
 * Sets the size of @f's file through @f itself (ftruncate): uploaded at
 * its close like any write.  A streamed file's size can change only
 * while none of it is on S3 (under a part, not completed); setting the
 * size it has is always fine.  EINVAL (EBADF once completed) otherwise.
 */
gboolean overlay_ftruncate(struct ov_file *f, guint64 size, GError **error);

/* Sets the size of node @node (open or not; EISDIR for a directory). */
gboolean overlay_truncate(struct overlay *ov, guint64 node, guint64 size,
			  GError **error);

/*
 * Uploads the file if it changed since its last upload: completes its
 * multipart upload, or PUTs it whole.  After a failure the file is not
 * on S3 (an upload is aborted) and every later flush fails the same way.
 * The wait for a streamed file's parts in flight ends with EINTR once
 * *@stop (may be NULL) is set and overlay_wake() called: the upload is
 * then aborted behind the caller (logged with the cause), and a later
 * flush fails with EIO.
 */
gboolean overlay_flush(struct ov_file *f, const gint *stop, GError **error);

/*
 * The process that opened @f: only its close() (FLUSH) completes the
 * upload.  Every close() of a descriptor sharing the open file sends a
 * FLUSH: a forked child's exit must not publish the file half written.
 */
void overlay_set_owner(struct ov_file *f, guint pid);

/*
 * A close() by process @pid: overlay_flush() if @pid opened @f (or @f
 * is read-only); otherwise nothing is uploaded and any earlier failure
 * is returned.  overlay_release() uploads what is still pending.  @stop
 * as for overlay_flush().
 */
gboolean overlay_close(struct ov_file *f, guint pid, const gint *stop,
		       GError **error);

/* Closes without uploading: the open never reached the caller. */
void overlay_discard(struct ov_file *f);

/*
 * Closes at the daemon's stop: a file still open for writing is half
 * written, so nothing of it is uploaded (its multipart upload is
 * aborted), and the log says so.
 */
void overlay_stop(struct ov_file *f);

/* At unmount, after overlay_stop() of every open file and before the S3
 * client shuts down: waits (bounded) for the aborts of interrupted
 * closes, and logs those it leaves. */
void overlay_quiesce(struct overlay *ov);

/* Closes; uploads first if still dirty and no upload through this handle
 * failed yet (the error is logged). */
void overlay_release(struct ov_file *f);

/*
 * Whether node @node is a file on S3 too large to be fetched whole
 * (over write_max), with nothing buffered: then it is read like an
 * indexed file, @size bytes of ETag *@etag (g_free; may be NULL).
 */
gboolean overlay_large_file(struct overlay *ov, guint64 node, guint64 *size,
			    char **etag);

/*
 * The overlay names directly inside directory @dir_key ("" for the
 * bucket's root, else ending with '/'), sorted by name: a GPtrArray of
 * struct ov_dirent (free with g_ptr_array_unref).  No lookup counted.
 */
struct ov_dirent {
	char *name;
	struct ov_attr attr;
};
GPtrArray *overlay_children(struct overlay *ov, const char *dir_key);

#endif
