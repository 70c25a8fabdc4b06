/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * bucketfs-index - make, describe and check the persisted listing index.
 *
 *   bucketfs-index build  s3://BUCKET[/PREFIX] [-o OPT...]
 *   bucketfs-index info   s3://BUCKET[/PREFIX] [-o OPT...]
 *   bucketfs-index verify s3://BUCKET[/PREFIX] [-o OPT...]
 *   bucketfs-index publish s3://BUCKET[/PREFIX] [--to s3://B/KEY] [--build]
 *   bucketfs-index unpublish s3://BUCKET[/PREFIX] [--to s3://B/KEY]
 *   bucketfs-index uploads s3://BUCKET[/PREFIX] [--abort]
 *
 * The index lives at -o index=PATH, else at the default location for the
 * bucket and prefix (the one bucketfs uses).  A mounted bucketfs switches
 * to a rebuilt index on SIGHUP.  publish uploads the (checked) local index
 * so that mounts elsewhere take it with -o index_url= instead of listing.
 * uploads lists the multipart uploads left under the prefix (by a writable
 * mount that died mid-file) and, with --abort, aborts them.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/stat.h>

#include "config.h"
#include "emptydirs.h"
#include "error.h"
#include "index.h"
#include "lister.h"
#include "log.h"
#include "s3.h"
#include "version.h"

struct tool {
	struct config cfg;
	char *path;
	guint workers;
	gboolean quiet;
	gboolean build; /* publish: build first even if an index exists */
	char *to;	/* publish: s3://B/KEY, or NULL for the default */
	gboolean abort; /* uploads: abort what is listed */
};

/* Where publish puts the index by default, below the bucket's top-level
 * ".bucketfs/" (outside any prefix mount); "v1" is the format version. */
#define PUBLISH_DIR ".bucketfs/index-v%d/"

static void print_stats(const char *path, const struct index_stats *s)
{
	char when[64] = "?";
	time_t t = (time_t)s->created;
	struct tm tm;
	guint64 hidden = s->skipped_empty + s->skipped_dot + s->skipped_long +
			 s->skipped_deep + s->shadowed;

	if (gmtime_r(&t, &tm))
		strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S UTC", &tm);
	printf("index:        %s\n", path);
	printf("format:       version %u\n", s->version);
	printf("created:      %s\n", when);
	printf("keys:         %" G_GUINT64_FORMAT "\n", s->keys);
	printf("files:        %" G_GUINT64_FORMAT " (%" G_GUINT64_FORMAT
	       " bytes)\n",
	       s->files, s->bytes);
	printf("directories:  %" G_GUINT64_FORMAT " (%" G_GUINT64_FORMAT
	       " markers)\n",
	       s->dirs, s->markers);
	printf("not shown:    %" G_GUINT64_FORMAT
	       " (empty component %" G_GUINT64_FORMAT
	       ", '.'/'..' %" G_GUINT64_FORMAT
	       ", name > 255 bytes %" G_GUINT64_FORMAT
	       ", too deep %" G_GUINT64_FORMAT
	       ", hidden by a directory %" G_GUINT64_FORMAT ")\n",
	       hidden, s->skipped_empty, s->skipped_dot, s->skipped_long,
	       s->skipped_deep, s->shadowed);
	printf("file size:    %" G_GUINT64_FORMAT " bytes (%.1f per key)\n",
	       s->file_size, s->keys ? (double)s->file_size / s->keys : 0.0);
}

/*
 * -o empty_dirs=: what the index does with each declared directory.  The
 * mounts show them (emptydirs.h), so nothing is added to the index: this
 * says which are missing from the bucket, and warns of those an object
 * hides (on stderr, even with -q).
 */
static void print_empty_dirs(struct tool *t, struct index *idx)
{
	g_autoptr(GString) line = g_string_new(NULL);
	struct emptydirs *d;
	guint i;

	if (!t->cfg.empty_dirs->len)
		return;
	d = emptydirs_new(t->cfg.prefix, t->cfg.empty_dirs);
	for (i = 0; i < emptydirs_declared_count(d); i++) {
		g_autofree char *object = NULL;
		g_autofree char *p = log_escape(emptydirs_declared(d, i), -1);
		g_autofree char *o = NULL;

		g_string_append_printf(line, "%s%s", i ? ", " : "", p);
		switch (emptydirs_state(d, i, idx, &object)) {
		case EMPTYDIRS_SHOWN:
			g_string_append(line, " (not in the bucket: shown "
					      "empty by mounts with "
					      "empty_dirs=)");
			break;
		case EMPTYDIRS_INDEXED:
			g_string_append(line, " (a directory of the bucket)");
			break;
		case EMPTYDIRS_OBJECT:
			o = log_escape(object, -1);
			g_string_append_printf(line,
					       " (hidden by the object "
					       "s3://%s/%s)",
					       t->cfg.bucket, o);
			fprintf(stderr,
				"bucketfs-index: empty_dirs: '%s' is not shown "
				"as a directory: the object s3://%s/%s is on "
				"its path, and objects win\n",
				p, t->cfg.bucket, o);
			break;
		}
	}
	if (!t->quiet)
		printf("empty dirs:   %s\n", line->str);
	emptydirs_free(d);
}

static int cmd_build(struct tool *t)
{
	g_autoptr(GError) error = NULL;
	struct lister_options o = { .workers = t->workers };
	struct index_stats s;
	struct s3 *s3 = s3_new(&t->cfg, &error);
	gint64 t0 = g_get_monotonic_time();
	double secs;
	gboolean ok;

	if (!s3) {
		fprintf(stderr, "bucketfs-index: %s\n", error->message);
		return 1;
	}
	if (!t->quiet && isatty(STDERR_FILENO)) {
		o.progress = lister_progress_print;
		o.user = "listing";
	}
	ok = lister_build(s3, t->cfg.prefix, t->path, &o, &s, &error);
	s3_free(s3);
	if (!ok) {
		fprintf(stderr, "bucketfs-index: %s\n", error->message);
		return 1;
	}
	secs = (g_get_monotonic_time() - t0) / 1e6;
	if (!t->quiet) {
		print_stats(t->path, &s);
		printf("built in:     %.2f s (%.0f keys/s)\n", secs,
		       secs > 0 ? s.keys / secs : 0);
	}
	if (t->cfg.empty_dirs->len) {
		struct index *idx = index_open(t->path, t->cfg.bucket,
					       t->cfg.prefix, &error);

		if (!idx) {
			fprintf(stderr, "bucketfs-index: %s\n", error->message);
			return 1;
		}
		print_empty_dirs(t, idx);
		index_unref(idx);
	}
	return 0;
}

static int cmd_open(struct tool *t, gboolean verify)
{
	g_autoptr(GError) error = NULL;
	struct index *idx;
	struct index_stats s;
	gint64 t0;

	idx = index_open(t->path, t->cfg.bucket, t->cfg.prefix, &error);
	if (!idx) {
		fprintf(stderr, "bucketfs-index: %s\n", error->message);
		return 1;
	}
	index_get_stats(idx, &s);
	if (!verify) {
		print_stats(t->path, &s);
		print_empty_dirs(t, idx);
		index_unref(idx);
		return 0;
	}
	t0 = g_get_monotonic_time();
	if (!index_verify(idx, &error)) {
		fprintf(stderr, "bucketfs-index: %s\n", error->message);
		index_unref(idx);
		return 1;
	}
	printf("%s: valid, %" G_GUINT64_FORMAT " keys, checked in %.2f s\n",
	       t->path, s.keys, (g_get_monotonic_time() - t0) / 1e6);
	index_unref(idx);
	return 0;
}

/*
 * The published index's bucket and key: --to, else
 * s3://BUCKET/.bucketfs/index-v1/PREFIX/index.  Refused when it would lie
 * inside the tree the index describes: the next listing would show it.
 */
static gboolean publish_target(struct tool *t, char **bucket, char **key,
			       GError **error)
{
	if (t->to) {
		if (!s3_parse_object_url(t->to, bucket, key, error)) {
			g_prefix_error(error, "--to: ");
			return FALSE;
		}
	} else {
		*bucket = g_strdup(t->cfg.bucket);
		*key = g_strdup_printf(PUBLISH_DIR "%sindex",
				       INDEX_FORMAT_VERSION, t->cfg.prefix);
	}
	if (!strcmp(*bucket, t->cfg.bucket) &&
	    g_str_has_prefix(*key, t->cfg.prefix)) {
		g_autofree char *k = log_escape(*key, -1);
		g_autofree char *p = log_escape(t->cfg.prefix, -1);

		g_set_error(error, BFS_ERROR, EINVAL,
			    "s3://%s/%s lies inside s3://%s/%s, the tree the "
			    "index describes: it would show in the mount and "
			    "in the next listing; give --to s3://BUCKET/KEY "
			    "outside it",
			    *bucket, k, t->cfg.bucket, p);
		g_clear_pointer(bucket, g_free);
		g_clear_pointer(key, g_free);
		return FALSE;
	}
	return TRUE;
}

/* The local index, checked whole: a corrupt one is never published. */
static struct index *open_checked(struct tool *t, GError **error)
{
	struct index *idx;

	idx = index_open(t->path, t->cfg.bucket, t->cfg.prefix, error);
	if (idx && !index_verify(idx, error))
		g_clear_pointer(&idx, index_unref);
	return idx;
}

/*
 * Maps the file at @path if it is still the one @st describes (the one
 * open_checked() verified); EAGAIN if another file took its place.
 */
static GMappedFile *map_checked(const char *path, const struct stat *st,
				GError **error)
{
	struct stat now;
	GMappedFile *map;
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);

	if (fd < 0 || fstat(fd, &now) != 0) {
		int e = errno;

		if (fd >= 0)
			close(fd);
		g_set_error(error, BFS_ERROR, e, "%s: %s", path, g_strerror(e));
		return NULL;
	}
	if (now.st_dev != st->st_dev || now.st_ino != st->st_ino) {
		close(fd);
		g_set_error(error, BFS_ERROR, EAGAIN,
			    "%s was replaced while it was being checked (a "
			    "mount's rebuild?): publish again",
			    path);
		return NULL;
	}
	map = g_mapped_file_new_from_fd(fd, FALSE, error);
	close(fd);
	return map;
}

static int cmd_publish(struct tool *t)
{
	g_autoptr(GError) error = NULL;
	g_autofree char *bucket = NULL, *key = NULL;
	g_autoptr(GMappedFile) map = NULL;
	g_autoptr(GBytes) body = NULL;
	struct s3_object_meta meta = { 0 };
	struct index *idx = NULL;
	struct s3 *s3;
	gboolean tty = !t->quiet && isatty(STDERR_FILENO);
	gint64 t0;
	double secs;
	gboolean ok;
	int stat_errno = ENOENT; /* of the stat() before the check */
	struct stat st;

	if (!publish_target(t, &bucket, &key, &error)) {
		fprintf(stderr, "bucketfs-index: %s\n", error->message);
		return 2;
	}
	if (!t->build) {
		stat_errno = stat(t->path, &st) == 0 ? 0 : errno;
		idx = open_checked(t, &error);
		if (!idx && error->code != ENOENT) {
			fprintf(stderr,
				"bucketfs-index: %s (rebuild it with "
				"--build)\n",
				error->message);
			return 1;
		}
		g_clear_error(&error);
	}
	if (!idx) {
		if (cmd_build(t) != 0)
			return 1;
		stat_errno = stat(t->path, &st) == 0 ? 0 : errno;
		idx = open_checked(t, &error);
		if (!idx) {
			fprintf(stderr, "bucketfs-index: %s\n", error->message);
			return 1;
		}
	}
	/* Mapped, not read: the body goes to curl from the page cache.  The
	 * file mapped must be the one checked: a mount's rebuild may rename
	 * a new one into place meanwhile. */
	map = !stat_errno ? map_checked(t->path, &st, &error) : NULL;
	if (stat_errno)
		g_set_error(&error, BFS_ERROR, stat_errno, "%s: %s", t->path,
			    g_strerror(stat_errno));
	index_unref(idx);
	if (!map) {
		fprintf(stderr, "bucketfs-index: %s\n", error->message);
		return 1;
	}
	body = g_mapped_file_get_bytes(map);
	s3 = s3_new_for_bucket(&t->cfg, bucket, &error);
	if (!s3) {
		fprintf(stderr, "bucketfs-index: %s\n", error->message);
		return 1;
	}
	if (tty)
		fprintf(stderr, "publishing %s (%.1f MiB) to s3://%s/%s...\n",
			t->path, g_bytes_get_size(body) / 1048576.0, bucket,
			key);
	t0 = g_get_monotonic_time();
	ok = s3_put(s3, key, body, NULL, &meta, &error);
	secs = (g_get_monotonic_time() - t0) / 1e6;
	s3_free(s3);
	if (!ok) {
		fprintf(stderr, "bucketfs-index: publishing %s: %s\n", t->path,
			error->message);
		s3_object_meta_clear(&meta);
		return 1;
	}
	if (!t->quiet) {
		printf("published:    s3://%s/%s\n", bucket, key);
		printf("size:         %" G_GSIZE_FORMAT " bytes in %.2f s\n",
		       g_bytes_get_size(body), secs);
		printf("etag:         %s\n", meta.etag ? meta.etag : "(none)");
		printf("mount with:   -o index_url=s3://%s/%s\n", bucket, key);
	}
	s3_object_meta_clear(&meta);
	return 0;
}

static int cmd_unpublish(struct tool *t)
{
	g_autoptr(GError) error = NULL;
	g_autofree char *bucket = NULL, *key = NULL;
	struct s3 *s3;
	gboolean ok;

	if (!publish_target(t, &bucket, &key, &error)) {
		fprintf(stderr, "bucketfs-index: %s\n", error->message);
		return 2;
	}
	s3 = s3_new_for_bucket(&t->cfg, bucket, &error);
	ok = s3 && s3_delete(s3, key, NULL, &error);
	s3_free(s3);
	if (!ok) {
		fprintf(stderr, "bucketfs-index: unpublishing: %s\n",
			error->message);
		return 1;
	}
	if (!t->quiet)
		printf("deleted:      s3://%s/%s\n", bucket, key);
	return 0;
}

/* One leftover upload: listed, and aborted with --abort. */
static void upload_do(struct tool *t, struct s3 *s3, const struct s3_upload *u,
		      guint *failed)
{
	g_autoptr(GError) error = NULL;
	g_autofree char *k = log_escape(u->key, -1);
	char when[32] = "?";
	struct tm tm;
	time_t sec = (time_t)u->initiated;

	if (u->initiated && gmtime_r(&sec, &tm))
		strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
	if (!t->abort) {
		printf("%s  %s  upload id %s\n", when, k, u->upload_id);
		return;
	}
	if (!s3_mpu_abort(s3, u->key, u->upload_id, &error) &&
	    bfs_error_errno(error) != ENOENT) {
		fprintf(stderr, "bucketfs-index: not aborted: %s\n",
			error->message);
		(*failed)++;
		return;
	}
	printf("aborted  %s  %s  upload id %s\n", when, k, u->upload_id);
}

static int cmd_uploads(struct tool *t)
{
	g_autoptr(GError) error = NULL;
	g_autofree char *key_marker = NULL, *id_marker = NULL;
	struct s3 *s3 = s3_new(&t->cfg, &error);
	guint failed = 0, seen = 0;
	gboolean more = TRUE;

	if (!s3) {
		fprintf(stderr, "bucketfs-index: %s\n", error->message);
		return 1;
	}
	while (more) {
		struct s3_uploads_page *page = s3_mpu_list(
			s3, t->cfg.prefix, key_marker, id_marker, &error);

		if (!page) {
			fprintf(stderr, "bucketfs-index: listing uploads: %s\n",
				error->message);
			s3_free(s3);
			return 1;
		}
		for (guint i = 0; i < page->uploads->len; i++, seen++)
			upload_do(t, s3, page->uploads->pdata[i], &failed);
		more = page->is_truncated && page->next_key_marker;
		if (more && !g_strcmp0(page->next_key_marker, key_marker) &&
		    !g_strcmp0(page->next_upload_id_marker, id_marker)) {
			/* The same page again, for ever: stop. */
			fprintf(stderr,
				"bucketfs-index: listing uploads: the server "
				"gave the same markers again (key '%s', upload "
				"id '%s'): stopping\n",
				page->next_key_marker,
				page->next_upload_id_marker
					? page->next_upload_id_marker
					: "");
			s3_uploads_page_free(page);
			s3_free(s3);
			return 1;
		}
		g_free(key_marker);
		g_free(id_marker);
		key_marker = g_strdup(page->next_key_marker);
		id_marker = g_strdup(page->next_upload_id_marker);
		s3_uploads_page_free(page);
	}
	s3_free(s3);
	if (!t->quiet)
		printf("%u upload%s under s3://%s/%s%s\n", seen,
		       seen == 1 ? "" : "s", t->cfg.bucket, t->cfg.prefix,
		       t->abort && !failed ? ", aborted" : "");
	return failed ? 1 : 0;
}

static gboolean is_command(const char *c)
{
	static const char *const cmds[] = { "build",   "info",	    "verify",
					    "publish", "unpublish", "uploads",
					    NULL };
	guint i;

	for (i = 0; cmds[i]; i++)
		if (!strcmp(c, cmds[i]))
			return TRUE;
	return FALSE;
}

static gboolean parse_args(struct tool *t, int *argc, char ***argv,
			   GError **error)
{
	g_auto(GStrv) opts = NULL;
	gboolean version = FALSE;
	int workers = 0;
	GOptionEntry entries[] = {
		{ "option", 'o', 0, G_OPTION_ARG_STRING_ARRAY, &opts,
		  "Options (see below); repeatable", "OPT[,OPT...]" },
		{ "workers", 'j', 0, G_OPTION_ARG_INT, &workers,
		  "Parallel listings for build (default 4 per endpoint)", "N" },
		{ "quiet", 'q', 0, G_OPTION_ARG_NONE, &t->quiet,
		  "No progress or summary", NULL },
		{ "to", 0, 0, G_OPTION_ARG_STRING, &t->to,
		  "publish, unpublish: the object to write (default "
		  "s3://BUCKET/.bucketfs/index-v1/PREFIX/index)",
		  "s3://B/KEY" },
		{ "build", 0, 0, G_OPTION_ARG_NONE, &t->build,
		  "publish: list the bucket into a new index first", NULL },
		{ "abort", 0, 0, G_OPTION_ARG_NONE, &t->abort,
		  "uploads: abort the uploads listed", NULL },
		{ "version", 'V', 0, G_OPTION_ARG_NONE, &version,
		  "Print the version and exit", NULL },
		G_OPTION_ENTRY_NULL
	};
	g_autoptr(GOptionContext) ctx =
		g_option_context_new("build|info|verify|publish|unpublish|"
				     "uploads s3://BUCKET[/PREFIX]");
	guint i;

	g_option_context_set_summary(
		ctx, "build lists the bucket (in parallel, over every "
		     "endpoint) and writes the index atomically; info "
		     "describes it; verify checks every checksum and the "
		     "structure.  publish uploads the checked index (built "
		     "first if missing, or with --build) so that mounts on "
		     "other hosts use it with -o index_url=s3://B/KEY "
		     "instead of listing; unpublish deletes it.  uploads "
		     "lists the multipart uploads left under the prefix "
		     "(a writable mount that died mid-file) and with "
		     "--abort aborts them.  The index "
		     "is -o index=PATH, else the default location bucketfs "
		     "uses.  Exit status 0 on success, 1 on failure, 2 on "
		     "bad usage.");
	g_option_context_set_description(ctx, config_options_help());
	g_option_context_add_main_entries(ctx, entries, NULL);
	if (!g_option_context_parse(ctx, argc, argv, error))
		return FALSE;
	if (version) {
		printf("bucketfs-index %s (index format %d)\n",
		       BUCKETFS_VERSION, INDEX_FORMAT_VERSION);
		exit(0);
	}
	if (*argc != 3 || !is_command((*argv)[1])) {
		g_set_error(error, BFS_ERROR, EINVAL,
			    "expected build, info, verify, publish, "
			    "unpublish or uploads and one "
			    "s3://BUCKET[/PREFIX] (see "
			    "--help)");
		return FALSE;
	}
	if (workers < 0 || workers > 32) {
		g_set_error(error, BFS_ERROR, EINVAL,
			    "--workers: %d is not between 1 and 32 (0: the "
			    "default)",
			    workers);
		return FALSE;
	}
	t->workers = (guint)workers;
	if (!config_parse_url(&t->cfg, (*argv)[2], error))
		return FALSE;
	for (i = 0; opts && opts[i]; i++)
		if (!config_parse_options(&t->cfg, opts[i], NULL, error))
			return FALSE;
	if (!config_finish(&t->cfg, error))
		return FALSE;
	t->path = t->cfg.index_path
			  ? g_strdup(t->cfg.index_path)
			  : index_default_path(t->cfg.bucket, t->cfg.prefix);
	return TRUE;
}

int main(int argc, char **argv)
{
	struct tool t = { 0 };
	g_autoptr(GError) error = NULL;
	int rc;

	config_init(&t.cfg);
	if (!parse_args(&t, &argc, &argv, &error)) {
		fprintf(stderr, "bucketfs-index: %s\n", error->message);
		config_clear(&t.cfg);
		return 2;
	}
	log_init("bucketfs-index", TRUE, LOG_LEVEL_WARNING);
	if (!strcmp(argv[1], "build"))
		rc = cmd_build(&t);
	else if (!strcmp(argv[1], "publish"))
		rc = cmd_publish(&t);
	else if (!strcmp(argv[1], "unpublish"))
		rc = cmd_unpublish(&t);
	else if (!strcmp(argv[1], "uploads"))
		rc = cmd_uploads(&t);
	else
		rc = cmd_open(&t, !strcmp(argv[1], "verify"));
	log_shutdown();
	g_free(t.path);
	g_free(t.to);
	config_clear(&t.cfg);
	return rc;
}
