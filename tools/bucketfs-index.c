/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * bucketfs-index - make, describe and check the persisted listing index.
 *
 *   bucketfs-index build  s3://BUCKET[/PREFIX] [-o OPT...]
 *   bucketfs-index info   s3://BUCKET[/PREFIX] [-o OPT...]
 *   bucketfs-index verify s3://BUCKET[/PREFIX] [-o OPT...]
 *
 * The index lives at -o index=PATH, else at the default location for the
 * bucket and prefix (the one bucketfs uses).  A mounted bucketfs switches
 * to a rebuilt index on SIGHUP.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
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
};

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
		{ "version", 'V', 0, G_OPTION_ARG_NONE, &version,
		  "Print the version and exit", NULL },
		{ NULL }
	};
	g_autoptr(GOptionContext) ctx =
		g_option_context_new("build|info|verify s3://BUCKET[/PREFIX]");
	guint i;

	g_option_context_set_summary(
		ctx, "build lists the bucket (in parallel, over every "
		     "endpoint) and writes the index atomically; info "
		     "describes it; verify checks every checksum and the "
		     "structure.  The index is -o index=PATH, else the "
		     "default location bucketfs uses.  Exit status 0 on "
		     "success, 1 on failure, 2 on bad usage.");
	g_option_context_set_description(ctx, config_options_help());
	g_option_context_add_main_entries(ctx, entries, NULL);
	if (!g_option_context_parse(ctx, argc, argv, error))
		return FALSE;
	if (version) {
		printf("bucketfs-index %s (index format %d)\n",
		       BUCKETFS_VERSION, INDEX_FORMAT_VERSION);
		exit(0);
	}
	if (*argc != 3 || (strcmp((*argv)[1], "build") != 0 &&
			   strcmp((*argv)[1], "info") != 0 &&
			   strcmp((*argv)[1], "verify") != 0)) {
		g_set_error(error, BFS_ERROR, EINVAL,
			    "expected build, info or verify and one "
			    "s3://BUCKET[/PREFIX] (see --help)");
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
	else
		rc = cmd_open(&t, !strcmp(argv[1], "verify"));
	log_shutdown();
	g_free(t.path);
	config_clear(&t.cfg);
	return rc;
}
