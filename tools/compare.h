/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * compare.h - the state and the steps of bucketfs-compare, shared by its
 * modules: compare_tree.c (the listing, the walk of the mount, names and
 * sizes), compare_read.c (--content and --bench: reading both paths) and
 * compare_output.c (text and JSON).  bucketfs-compare.c parses the
 * options and runs the steps in order.
 *
 * Threads: everything here runs on the main thread, except that
 * compare_content() and compare_bench() read on worker threads of their
 * own, which touch nothing in struct compare but the S3 client
 * (thread-safe) and their own slots of the results.
 */
#ifndef BUCKETFS_COMPARE_H
#define BUCKETFS_COMPARE_H

#include <glib.h>

#include "compare_keys.h"
#include "config.h"
#include "s3.h"

#define PROG	     "bucketfs-compare"
#define EXAMPLES_MAX 1000 /* keys that are not paths kept as examples */

enum diff_kind {
	DIFF_MISSING,	  /* a file in S3, absent on the mount */
	DIFF_EXTRA,	  /* a file on the mount, not in S3 */
	DIFF_SIZE,	  /* both, sizes differ */
	DIFF_TYPE,	  /* a file on one side, a directory on the other */
	DIFF_DIR_MISSING, /* a directory the keys make, absent */
	DIFF_DIR_EXTRA,	  /* a directory no key makes */
	DIFF_MOUNT_ERROR, /* the mount could not be walked or read there */
	DIFF_S3_ERROR,	  /* S3 could not be read there */
	DIFF_CONTENT,	  /* same size, different bytes */
	DIFF_KINDS,
};

struct diff {
	enum diff_kind kind;
	char *path; /* relative to the prefix and MOUNTPOINT, raw bytes */
	guint64 s3_size;
	guint64 mount_size;
	char *detail; /* the cause, or NULL */
};

struct diffs {
	GPtrArray *all; /* of struct diff * */
	guint64 count[DIFF_KINDS];
};

/* A key the rules do not show, or hide behind a directory. */
struct hidden {
	char *key; /* relative */
	const char *reason;
	const char *reason_id;
};

enum side { SIDE_MOUNT, SIDE_S3 };

/* One side of one --bench run, or the medians of the runs. */
struct bench_run {
	double files_s, mb_s, p50, p99, max;
	guint errors;
	char *first_error;
};

struct bench_result {
	guint files;
	guint64 bytes;
	struct bench_run med[2]; /* by enum side */
	guint errors[2];
};

/* The whole state of one comparison, for the compare_*.c modules. */
struct compare {
	/* the options */
	struct config cfg;
	char *mount; /* MOUNTPOINT as given */
	gboolean content, all, bench, json, quiet, verbose;
	int max_diffs, sample, procs, files, runs;
	gint64 seed;
	char *order;	     /* alternate, mount-first or s3-first */
	char *endpoint_note; /* where the endpoints came from */
	gboolean progress;   /* on stderr: a terminal and not --quiet */
	gint64 last_progress;
	struct s3 *s3;

	/* the listing */
	GPtrArray *objects; /* of struct s3_object *, owned */
	gsize plen;
	GHashTable *expected_files; /* rel -> struct s3_object * */
	GHashTable *expected_dirs;  /* rel -> NULL (set) */
	guint64 hidden_count[COMPARE_KEY_DEEP + 2];
	guint64 shadowed, markers;
	GPtrArray *hidden; /* of struct hidden *, the first EXAMPLES_MAX */
	/* the walk */
	GHashTable *mount_files; /* rel -> guint64 * */
	GHashTable *mount_dirs;	 /* rel -> NULL */
	struct diffs ns, ct, bn;
	/* files on both sides with the same size, sorted */
	GPtrArray *common; /* of struct s3_object *, borrowed */
	guint content_checked;
	struct bench_result bench_res;
};

/* -- compare.c: helpers --------------------------------------------------- */

/* Seconds of the monotonic clock. */
double compare_now(void);

/*
 * Rewrites one progress line on stderr, at most twice a second (always
 * when @final, which also ends the line), if progress is on.
 */
void compare_progress(struct compare *t, gboolean final, const char *fmt, ...)
	G_GNUC_PRINTF(3, 4);

/* Records a difference; @path is copied, @detail (may be NULL) taken. */
void compare_diffs_add(struct diffs *ds, enum diff_kind kind, const char *path,
		       guint64 s3_size, guint64 mount_size, char *detail);

/* Sorts the differences by path, then kind. */
void compare_diffs_sort(struct diffs *ds);

void compare_diff_free(struct diff *d);
void compare_hidden_free(struct hidden *h);

/* -- compare_tree.c ------------------------------------------------------- */

/*
 * Lists the prefix (t->s3) and applies the key rules: fills objects,
 * expected_files, expected_dirs and the keys that are not paths.  Errors:
 * the listing's cause chain.
 */
gboolean compare_load_listing(struct compare *t, GError **error);

/*
 * Walks t->mount (readdir and lstat, breadth first, one directory open at
 * a time): fills mount_files and mount_dirs; entries that cannot be read
 * are differences.  Fails only when t->mount cannot be opened.
 */
gboolean compare_walk_mount(struct compare *t, GError **error);

/* The namespace differences (t->ns) and t->common, both sorted. */
void compare_namespace(struct compare *t);

/* -- compare_read.c ------------------------------------------------------- */

/* --content: SHA-256 through both paths of a sample of t->common (t->ct). */
void compare_content(struct compare *t);

/* --bench: both paths, t->procs in flight each (t->bench_res, t->bn). */
void compare_bench(struct compare *t);

/* -- compare_output.c ----------------------------------------------------- */

/* All differences found, in every section. */
guint64 compare_total_diffs(const struct compare *t);

/* The report on stdout, as text or as one JSON object. */
void compare_print_text(const struct compare *t);
void compare_print_json(const struct compare *t);

#endif
