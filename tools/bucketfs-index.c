/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * bucketfs-index - make, describe and check the persisted listing index.
 *
 *   bucketfs-index build  s3://BUCKET[/PREFIX] [-o OPT...]
 *   bucketfs-index info   s3://BUCKET[/PREFIX] [-o OPT...]
 *   bucketfs-index verify s3://BUCKET[/PREFIX] [-o OPT...]
 *   bucketfs-index publish s3://BUCKET[/PREFIX] [--to s3://B/KEY] [--build]
 *                  [--multipart-above=SIZE] [--part-size=SIZE]
 *   bucketfs-index unpublish s3://BUCKET[/PREFIX] [--to s3://B/KEY]
 *   bucketfs-index uploads s3://BUCKET[/PREFIX] [--abort]
 *
 * The index lives at -o index=PATH, else at the default location for the
 * bucket and prefix (the one bucketfs uses).  A mounted bucketfs switches
 * to a rebuilt index on SIGHUP.  publish uploads the (checked) local index
 * so that mounts elsewhere take it with -o index_url= instead of listing:
 * with one PUT, or above --multipart-above (1 GiB; S3 takes at most 5 GiB
 * in one PUT) as a multipart upload of the mapped file (upload.h).
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
#include "upload.h"
#include "version.h"

struct tool {
	struct config cfg;
	char *path;
	guint workers;
	gboolean quiet;
	gboolean build; /* publish: build first even if an index exists */
	char *to;	/* publish: s3://B/KEY, or NULL for the default */
	gboolean abort; /* uploads: abort what is listed */
	guint64 multipart_above; /* publish: larger indexes go in parts */
	guint64 part_size;	 /* publish: 0 = chosen by the size */
};

/* S3's limits: one PUT, and a part (all but the last at least the min). */
#define PUT_MAX		 ((guint64)5 << 30)
#define PUBLISH_PART_MIN ((guint64)5 << 20)
#define PUBLISH_PART_MAX ((guint64)5 << 30)
/* Above this, publish sends the index in parts (--multipart-above). */
#define PUBLISH_MULTIPART_DEFAULT ((guint64)1 << 30)

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

/*
 * The part size for @size bytes: --part-size, else 16 MiB, or more when
 * that would need more than S3's 10,000 parts (whole MiB).
 */
static guint64 part_size_for(const struct tool *t, guint64 size)
{
	guint64 ps = t->part_size ? t->part_size : UPLOAD_DEFAULT_PART;
	guint64 need = (size + UPLOAD_MAX_PARTS - 1) / UPLOAD_MAX_PARTS;

	if (!t->part_size && need > ps)
		ps = (need + (1 << 20) - 1) & ~(guint64)((1 << 20) - 1);
	return ps;
}

/*
 * @body as a multipart upload of @key: slices of the mapping (no copy),
 * a few in flight (upload.h), completed once every part is in.  Nothing
 * shows at @key before the completion; on any failure the upload is
 * aborted (upload.h logs it) and @key keeps what it had.
 */
static gboolean publish_parts(struct tool *t, struct s3 *s3, const char *key,
			      GBytes *body, guint *parts, char **etag,
			      GError **error)
{
	gsize size = g_bytes_get_size(body);
	guint64 ps = part_size_for(t, size);
	guint64 n = (size + ps - 1) / ps, off;
	struct uploader *up;
	struct upload *u;
	gboolean ok;

	if (n > UPLOAD_MAX_PARTS) {
		g_set_error(error, BFS_ERROR, EFBIG,
			    "%" G_GSIZE_FORMAT
			    " bytes in parts of %" G_GUINT64_FORMAT
			    " would make %" G_GUINT64_FORMAT
			    " parts, more than S3's %u: give a larger "
			    "--part-size",
			    size, ps, n, UPLOAD_MAX_PARTS);
		return FALSE;
	}
	up = uploader_new(s3, ps, 0);
	u = upload_start(up, key, error);
	if (!u) {
		g_prefix_error(error, "starting the multipart upload: ");
		uploader_free(up);
		return FALSE;
	}
	/* Every part but the last; upload_finish() sends that one. */
	for (off = 0; off + ps < size; off += ps) {
		g_autoptr(GBytes) part = g_bytes_new_from_bytes(body, off, ps);

		if (!upload_part(u, part, NULL, error)) {
			g_prefix_error(error, "part %" G_GUINT64_FORMAT ": ",
				       off / ps + 1);
			upload_abort(u, NULL);
			uploader_free(up);
			return FALSE;
		}
	}
	{
		g_autoptr(GBytes) last =
			g_bytes_new_from_bytes(body, off, size - off);

		ok = upload_finish(u, last, size, NULL, etag, error);
	}
	/* Quoted, as HEAD and a PUT give it. */
	if (ok && *etag && **etag != '"') {
		char *q = g_strdup_printf("\"%s\"", *etag);

		g_free(*etag);
		*etag = q;
	}
	if (!ok)
		g_prefix_error(error,
			       "the multipart upload (%" G_GUINT64_FORMAT
			       " parts of %" G_GUINT64_FORMAT
			       " bytes) failed: ",
			       n, ps);
	uploader_free(up);
	*parts = (guint)n;
	return ok;
}

static int cmd_publish(struct tool *t)
{
	g_autoptr(GError) error = NULL;
	g_autofree char *bucket = NULL, *key = NULL;
	g_autoptr(GMappedFile) map = NULL;
	g_autoptr(GBytes) body = NULL;
	g_autofree char *etag = NULL;
	struct s3_object_meta meta = { 0 };
	struct index *idx = NULL;
	struct s3 *s3;
	guint parts = 0;
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
	if (g_bytes_get_size(body) > t->multipart_above)
		ok = publish_parts(t, s3, key, body, &parts, &etag, &error);
	else if ((ok = s3_put(s3, key, body, NULL, &meta, &error)))
		etag = g_strdup(meta.etag);
	secs = (g_get_monotonic_time() - t0) / 1e6;
	s3_free(s3);
	s3_object_meta_clear(&meta);
	if (!ok) {
		fprintf(stderr,
			"bucketfs-index: publishing %s: %s (nothing was "
			"published: s3://%s/%s is as it was)\n",
			t->path, error->message, bucket, key);
		return 1;
	}
	if (!t->quiet) {
		printf("published:    s3://%s/%s\n", bucket, key);
		printf("size:         %" G_GSIZE_FORMAT " bytes in %.2f s",
		       g_bytes_get_size(body), secs);
		if (parts)
			printf(", %u parts of %" G_GUINT64_FORMAT " bytes\n",
			       parts, part_size_for(t, g_bytes_get_size(body)));
		else
			printf(", one PUT\n");
		printf("etag:         %s\n", etag ? etag : "(none)");
		printf("mount with:   -o index_url=s3://%s/%s\n", bucket, key);
	}
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

/*
 * A size for --@name: bytes, or a whole number with K, M or G (KiB, MiB,
 * GiB); between @min and @max.
 */
static gboolean parse_size(const char *name, const char *v, guint64 min,
			   guint64 max, guint64 *out, GError **error)
{
	char *end = NULL;
	guint64 n, unit = 1;

	errno = 0;
	n = g_ascii_strtoull(v, &end, 10);
	if (end && *end && !end[1]) {
		switch (g_ascii_toupper(*end)) {
		case 'K':
			unit = (guint64)1 << 10;
			end++;
			break;
		case 'M':
			unit = (guint64)1 << 20;
			end++;
			break;
		case 'G':
			unit = (guint64)1 << 30;
			end++;
			break;
		}
	}
	if (!g_ascii_isdigit(v[0]) || errno || !end || *end ||
	    n > G_MAXUINT64 / unit || n * unit < min || n * unit > max) {
		g_set_error(
			error, BFS_ERROR, EINVAL,
			"--%s: '%s' is not a size between %" G_GUINT64_FORMAT
			" and %" G_GUINT64_FORMAT
			" bytes (a number of bytes, or with K, M or G)",
			name, v, min, max);
		return FALSE;
	}
	*out = n * unit;
	return TRUE;
}

static gboolean parse_args(struct tool *t, int *argc, char ***argv,
			   GError **error)
{
	g_autofree char *multipart_above = NULL, *part_size = NULL;
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
		{ "multipart-above", 0, 0, G_OPTION_ARG_STRING,
		  &multipart_above,
		  "publish: an index larger than this goes as a multipart "
		  "upload (default 1G; at most 5G, S3's limit for one PUT)",
		  "SIZE" },
		{ "part-size", 0, 0, G_OPTION_ARG_STRING, &part_size,
		  "publish: the multipart upload's part size, 5M to 5G "
		  "(default 16M, more if the index needs more than 10,000 "
		  "parts)",
		  "SIZE" },
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
	t->multipart_above = PUBLISH_MULTIPART_DEFAULT;
	if (multipart_above &&
	    !parse_size("multipart-above", multipart_above, 0, PUT_MAX,
			&t->multipart_above, error))
		return FALSE;
	if (part_size && !parse_size("part-size", part_size, PUBLISH_PART_MIN,
				     PUBLISH_PART_MAX, &t->part_size, error))
		return FALSE;
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
		g_free(t.to);
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
