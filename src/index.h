/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * index.h - the persisted listing of a bucket (or of a prefix of one).
 *
 * A bucket is listed once; the listing is written to an index file that
 * mounts (on any host) mmap and then answer lookup, getattr and readdir
 * from, without a single request.  docs/INDEX-FORMAT.md describes the file
 * byte by byte and the rules that turn keys into paths; in short:
 *
 *   - keys are relative to the prefix and split on '/';
 *   - "dir/" keys (markers) make the directory exist, and so does any key
 *     below it;
 *   - when a key is both an object and a prefix ("a" and "a/b"), the
 *     directory wins and the object is hidden (counted as shadowed);
 *   - keys with an empty component ("a//b", "/a"), a "." or ".." component
 *     or a component over 255 bytes are not shown (each reason counted);
 *     the directories above the bad component still exist;
 *   - any other byte (control characters, invalid UTF-8) is shown as it is.
 *
 * Entries are identified by an index_id: INDEX_ROOT is the root directory
 * (the prefix); the others are positions in the file, valid for the life of
 * the struct index they came from and meaningless in any other.  The
 * children of a directory have consecutive ids, sorted by name ("name/" for
 * directories, which is S3's listing order), so a lookup is a binary search
 * and a readdir position is simply the child's rank in its directory.
 *
 * Inode numbers are derived from the key (see index_key_ino()), so one path
 * has one st_ino on every host and across remounts and rebuilds.
 *
 * Trust: index_open() checks in O(1) the header (magic, checksum, version,
 * bucket and prefix) and that every section lies inside the file, and
 * index_verify() checks the checksum of every byte and the structure.  The
 * accessors are bounds-checked on every access, so that even a body that is
 * corrupt and not yet verified can never crash or make them read outside
 * the mapping; it can only give wrong answers (never a name holding '/',
 * NUL, "." or "..", which readdir and lookup skip).  The one thing they
 * cannot survive is the file being truncated under the mapping (SIGBUS):
 * the writer never does that, it renames a new file into place.
 *
 * Errors are in BFS_ERROR, with the path (escaped) and the whole reason:
 *   ENOENT   no index at the path;
 *   ELOOP    the path is a symbolic link (refused, never followed);
 *   EBADMSG  not an index, truncated, or corrupt (a checksum, a section
 *            bound or a count is wrong): "section 'names' ends at byte 9812
 *            but the file has 4096 bytes (truncated?)";
 *   EPROTO   a valid index of another format version;
 *   ESRCH    a valid index of another bucket or prefix ("was built for
 *            s3://other/ not s3://ds/train/");
 *   EINVAL   not a regular file; arguments a caller got wrong at run time
 *            (a key out of order or outside the prefix);
 *   EFBIG    a build too large for the format (over 1 TiB of names);
 *   other    the errno of a failed system call (EACCES, ENOSPC, EIO, ...).
 *
 * Threads: a struct index is immutable and refcounted; any thread may use
 * it concurrently.  A struct index_writer belongs to one thread at a time.
 */
#ifndef BUCKETFS_INDEX_H
#define BUCKETFS_INDEX_H

#include <glib.h>

/* The format version this code writes and reads. */
#define INDEX_FORMAT_VERSION 1

/* The longest name shown; longer components are skipped (NAME_MAX). */
#define INDEX_NAME_MAX 255

/* The deepest path shown, in components; deeper keys are skipped. */
#define INDEX_DEPTH_MAX 1024

/* Why one component of a key (between slashes) can't be a name. */
enum index_component {
	INDEX_COMPONENT_OK,
	INDEX_COMPONENT_EMPTY, /* "a//b", "/a" */
	INDEX_COMPONENT_DOT,   /* "." or ".." */
	INDEX_COMPONENT_LONG,  /* over INDEX_NAME_MAX bytes */
};

/*
 * The rule the index applies to each component of a key (@len bytes at
 * @s): a key with a component other than OK is not shown.  Pure; any
 * thread.
 */
enum index_component index_component_check(const char *s, gsize len);

/* st_ino of the root directory (FUSE's root node id); no key gets it. */
#define INDEX_ROOT_INO ((guint64)1)

struct index;

/* An entry of one open index; INDEX_ROOT is the root directory. */
typedef guint64 index_id;
#define INDEX_ROOT ((index_id)0)

/* What getattr needs.  Plain data. */
struct index_attr {
	gboolean is_dir;
	guint64 size;	   /* bytes; 0 for directories */
	gint64 mtime;	   /* seconds since the epoch: the object's
			    * LastModified; for a directory its marker's,
			    * or the index's creation time without one */
	guint64 ino;	   /* index_key_ino() of index_key() */
	guint64 nchildren; /* directories: readdir positions */
};

/*
 * Counts of a build, stored in the header.  Every key added is counted in
 * exactly one of files, markers, shadowed and skipped_*, so keys is their
 * sum.  Plain data.
 */
struct index_stats {
	guint64 keys;	       /* keys added */
	guint64 files;	       /* files shown */
	guint64 dirs;	       /* directories shown, the root not counted */
	guint64 markers;       /* zero-size "dir/" keys (the root's too) */
	guint64 bytes;	       /* sum of the sizes of the files shown */
	guint64 skipped_empty; /* an empty component: "a//b", "/a" */
	guint64 skipped_dot;   /* a "." or ".." component */
	guint64 skipped_long;  /* a component over INDEX_NAME_MAX bytes */
	guint64 skipped_deep;  /* over INDEX_DEPTH_MAX components */
	guint64 shadowed;      /* hidden by a directory of the same name:
				* "a" beside "a/b", and "dir/" keys with data */
	gint64 created;	       /* when the build started, seconds since the
				* epoch; no object in it is newer than that */
	guint64 entries;       /* files + dirs + 1 (the root) */
	guint64 file_size;     /* bytes of the index file */
	guint32 version;       /* INDEX_FORMAT_VERSION */
};

/* --- reading ------------------------------------------------------------ */

/*
 * Where the index of s3://@bucket/@prefix lives by default:
 * g_get_user_cache_dir()/bucketfs/<bucket>/<16 hex digits>.idx, the digits
 * being a hash of bucket and prefix (bytes of the bucket name other than
 * letters, digits, '-' and '_' become '_' in the directory name).  Returns
 * a newly allocated path (g_free).  Does no I/O.  Any thread.
 */
char *index_default_path(const char *bucket, const char *prefix);

/*
 * Opens and maps the index at @path and checks its header: in O(1), not
 * reading the body.  When @bucket is not NULL, the index must have been
 * built for @bucket and @prefix (prefix NULL means "", and both NULL means
 * any: for tools that describe a file).  Returns a new reference (unref
 * with index_unref()) or NULL with @error set (see the top of this file).
 * The file descriptor is closed before returning.  Any thread.
 */
struct index *index_open(const char *path, const char *bucket,
			 const char *prefix, GError **error);

/* Takes a reference.  Any thread. */
struct index *index_ref(struct index *idx);

/* Drops a reference; the last one unmaps.  NULL is allowed.  Any thread. */
void index_unref(struct index *idx);

/*
 * The full check: the checksum of the header and of every section, then
 * the structure (every directory's children in range and strictly sorted,
 * every name a valid one, every ETag inside its blob).  Reads the whole
 * file: seconds for tens of millions of keys, so not at mount time.
 * EBADMSG with what is wrong and where.  Any thread.
 */
gboolean index_verify(struct index *idx, GError **error);

/* Copies the counts from the header.  Any thread. */
void index_get_stats(const struct index *idx, struct index_stats *out);

/*
 * The bucket and prefix the index was built for, NUL-terminated, borrowed
 * until the last unref.  The prefix is "" or ends with '/'.
 */
const char *index_bucket(const struct index *idx);
const char *index_prefix(const struct index *idx);

/* The path it was opened from; borrowed until the last unref. */
const char *index_path(const struct index *idx);

/*
 * Finds the child called @name (@len bytes, not necessarily NUL-terminated)
 * of the directory @dir.  Returns TRUE and sets *@out; FALSE if there is no
 * such child, or @dir is not a directory, or @name cannot be a name (empty,
 * ".", "..", over INDEX_NAME_MAX, holding '/' or NUL).  O(log n), no
 * allocation.  Any thread.
 */
gboolean index_lookup(const struct index *idx, index_id dir, const char *name,
		      gsize len, index_id *out);

/*
 * Fills *@out for @id.  An @id that is not an entry gives an empty
 * directory's attributes with ino 0, and so does, for the ino alone, an
 * entry whose key cannot be rebuilt (a damaged name on its path).  Costs
 * one hash of the key (depth x log(directories) to rebuild it), no
 * allocation for paths up to 64 deep.  Any thread.
 */
void index_get_attr(const struct index *idx, index_id id,
		    struct index_attr *out);

/* Whether @id is a directory.  O(1).  Any thread. */
gboolean index_is_dir(const struct index *idx, index_id id);

/*
 * The name of @id inside its directory: NUL-terminated, and *@len (if not
 * NULL) set to its length.  Never holds '/' and is never "." or "..".
 * Borrowed: points into the mapping, valid until the last unref.  The root
 * gives "".  NULL when @id is not an entry or its name is damaged.  Any
 * thread.
 */
const char *index_name(const struct index *idx, index_id id, gsize *len);

/*
 * For readdir: the first child of @dir at position @pos or later (positions
 * run from 0 to nchildren - 1 in name order, and stay the same for the life
 * of the index, so they serve as stable readdir offsets).  Returns TRUE
 * and sets *@child and *@next_pos (the position after it, to resume from);
 * FALSE at the end or when @dir is not a directory.  Damaged children are
 * skipped.  O(1) per child.  Any thread.
 */
gboolean index_child_at(const struct index *idx, index_id dir, guint64 pos,
			index_id *child, guint64 *next_pos);

/*
 * The directory holding @id; INDEX_ROOT for the root itself (and for ids
 * that are not entries).  O(log directories).  Any thread.
 */
index_id index_parent(const struct index *idx, index_id id);

/*
 * The full S3 key of @id, prefix included, newly allocated (g_free).  A
 * directory's key ends with '/' ("train/"); the root's is the prefix.  NULL
 * when @id is not an entry or a name on its path is damaged.  Any thread.
 */
char *index_key(const struct index *idx, index_id id);

/*
 * The ETag of file @id as S3 sent it, without quotes, newly allocated
 * (g_free); NULL if it had none, or @id is a directory or not an entry.
 * Any thread.
 */
char *index_etag(const struct index *idx, index_id id);

/*
 * The inode number of the object or directory with the full key @key
 * (@len bytes, or up to the NUL if -1; directories end with '/'): a 64-bit
 * hash of the key, never 0 or 1, the same on every host.  For names that
 * are not in the index (a file created on the mount).  Any thread.
 */
guint64 index_key_ino(const char *key, gssize len);

/* --- building ----------------------------------------------------------- */

struct index_writer;

/*
 * Starts building the index of s3://@bucket/@prefix (@prefix "" or ending
 * with '/'; NULL means "") to be committed at @path.  Creates the missing
 * directories of @path with mode 0700 and a temporary stream file beside
 * @path, which is unlinked at once (so nothing is left behind even by a
 * crash).  First removes the temporary files of builds of @path that were
 * killed mid-way (".NAME.tmp-*", ".NAME.stream-*", ".NAME.spool-*" that no
 * live build holds an flock on), logging each.  Memory stays bounded
 * whatever the number of keys: they stream to that file.  Returns the
 * writer (free with index_writer_free()) or NULL with @error: EINVAL for a
 * bad bucket or prefix, or the errno of mkdir or open.  One thread at a
 * time.
 */
struct index_writer *index_writer_new(const char *path, const char *bucket,
				      const char *prefix, GError **error);

/*
 * Adds the object @key (full key, prefix included, NUL-terminated) of @size
 * bytes, LastModified @mtime (seconds) and ETag @etag (as S3 sent it; one
 * pair of surrounding double quotes is dropped; NULL or "" for none).
 * Keys must come in strictly increasing byte order, as ListObjectsV2 lists
 * them.
 *
 * Errors: EINVAL naming the key (and the previous one) when it is not after
 * the previous key, not under the prefix, or its ETag is over 65535 bytes;
 * the key is then rejected and the writer stays usable.  An I/O error
 * (ENOSPC, EIO, ...) leaves the writer failed: every later call fails and
 * only index_writer_free() remains.
 */
gboolean index_writer_add(struct index_writer *w, const char *key, guint64 size,
			  gint64 mtime, const char *etag, GError **error);

/*
 * Lays the index out (one sequential pass per depth of the tree), writes
 * it with checksums to a temporary file beside the path (mode 0600, held
 * under an flock until renamed), fsyncs it, renames it over the path and
 * fsyncs the directory.  Fills
 * *@stats if not NULL.  On failure nothing at the path has changed (an old
 * index stays in place), the temporary file is removed, and @error says
 * why, with the path: e.g. ENOSPC when the disk is full.  Call once; then
 * only index_writer_free() remains.
 */
gboolean index_writer_commit(struct index_writer *w, struct index_stats *stats,
			     GError **error);

/*
 * Frees the writer; an uncommitted build is abandoned and its temporary
 * files are removed.  NULL is allowed.
 */
void index_writer_free(struct index_writer *w);

/* For g_autoptr(index_writer).  (struct index has no such typedef: it
 * would clash with index(3).) */
typedef struct index_writer index_writer;
G_DEFINE_AUTOPTR_CLEANUP_FUNC(index_writer, index_writer_free)

#endif
