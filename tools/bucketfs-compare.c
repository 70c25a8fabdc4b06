/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * bucketfs-compare - the POSIX path against the S3 path.
 *
 *   bucketfs-compare MOUNTPOINT s3://BUCKET[/PREFIX] [-o OPT...]
 *	[--content [--sample N | --all]] [--bench [--procs N] [--files N]]
 *	[--json]
 *
 * Namespace (always): ListObjectsV2 of the prefix against a walk of
 * MOUNTPOINT; every key the key rules show (compare_keys.h) must be a
 * file of the same size, every directory the keys make must be there,
 * and nothing else.  Keys the rules hide are reported apart, as such.
 * --content: SHA-256 of a sample of the files, GET through our S3 client
 * against read() through the mount.  --bench: the same files through
 * both paths with the same concurrency, side by side.
 *
 * Exit status: 0 the two sides matched, 1 differences, 2 bad usage or an
 * operational failure (the cause chain on stderr).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <json-glib/json-glib.h>

#include "compare.h"
#include "config.h"
#include "error.h"
#include "log.h"
#include "version.h"

#define STATS_XATTR "user.bucketfs.stats"
#define URI_XATTR   "user.s3.uri"

/* -- options -------------------------------------------------------------- */

static gboolean env_set(const char *name)
{
	const char *v = g_getenv(name);

	return v && *v;
}

/* The root of the filesystem holding @path: up while st_dev stays. */
static char *mount_root(const char *path)
{
	char *cur = realpath(path, NULL);
	struct stat st, up;

	if (!cur || stat(cur, &st) < 0)
		return cur ? cur : g_strdup(path);
	while (strcmp(cur, "/") != 0) {
		char *parent = g_path_get_dirname(cur);

		if (stat(parent, &up) < 0 || up.st_dev != st.st_dev) {
			g_free(parent);
			break;
		}
		free(cur);
		cur = strdup(parent);
		g_free(parent);
	}
	return cur;
}

/*
 * With no endpoint given (-o endpoint, S3_ENDPOINT_URIS, AWS_ENDPOINT_URL*),
 * the mount's own endpoints, from the root's user.bucketfs.stats.
 */
static gboolean endpoints_from_mount(struct compare *t, GError **error)
{
	char buf[65536];
	ssize_t n;
	g_autoptr(JsonParser) parser = json_parser_new();
	JsonNode *root_node, *eps_node;
	JsonArray *eps;
	guint found = 0, i;
	g_autofree char *root = NULL;

	if (t->cfg.endpoints->len || env_set("S3_ENDPOINT_URIS") ||
	    env_set("AWS_ENDPOINT_URL_S3") || env_set("AWS_ENDPOINT_URL"))
		return TRUE;
	root = mount_root(t->mount);
	n = getxattr(root, STATS_XATTR, buf, sizeof(buf) - 1);
	if (n <= 0 || !json_parser_load_from_data(parser, buf, n, NULL))
		return TRUE;
	root_node = json_parser_get_root(parser);
	if (!root_node || !JSON_NODE_HOLDS_OBJECT(root_node))
		return TRUE;
	eps_node = json_object_get_member(json_node_get_object(root_node),
					  "endpoints");
	if (!eps_node || !JSON_NODE_HOLDS_ARRAY(eps_node))
		return TRUE;
	eps = json_node_get_array(eps_node);
	for (i = 0; i < json_array_get_length(eps); i++) {
		JsonNode *ep = json_array_get_element(eps, i);
		const char *url =
			JSON_NODE_HOLDS_OBJECT(ep)
				? json_object_get_string_member_with_default(
					  json_node_get_object(ep), "url", NULL)
				: NULL;
		g_autofree char *opt = NULL;
		g_auto(GStrv) parts = NULL;
		g_autofree char *esc = NULL;

		if (!url)
			continue;
		parts = g_strsplit(url, ",", -1);
		esc = g_strjoinv("\\,", parts);
		opt = g_strconcat("endpoint=", esc, NULL);
		if (!config_parse_options(&t->cfg, opt, NULL, error)) {
			g_prefix_error(error, "%s of '%s': ", STATS_XATTR,
				       t->mount);
			return FALSE;
		}
		found++;
	}
	if (found)
		t->endpoint_note =
			g_strdup_printf("the mount's %s", STATS_XATTR);
	return TRUE;
}

static void check_mount_uri(struct compare *t)
{
	char buf[4096];
	g_autofree char *want =
		g_strdup_printf("s3://%s/%s", t->cfg.bucket, t->cfg.prefix);
	ssize_t n = getxattr(t->mount, URI_XATTR, buf, sizeof(buf) - 1);

	if (n <= 0)
		return;
	buf[n] = '\0';
	if (strcmp(buf, want) != 0) {
		g_autofree char *b = log_escape(buf, -1);

		fprintf(stderr,
			PROG ": warning: '%s' shows %s, compared with %s\n",
			t->mount, b, want);
	}
}

static gboolean check_args(struct compare *t, GError **error)
{
	if (t->all && t->sample) {
		g_set_error(error, BFS_ERROR, EINVAL,
			    "--sample and --all exclude each other");
		return FALSE;
	}
	/* Either one says --content. */
	if (t->all || t->sample)
		t->content = TRUE;
	if (!t->sample)
		t->sample = 100;
	if (t->max_diffs < 0 || t->sample < 1 || t->procs < 1 ||
	    t->procs > 1024 || t->files < 1 || t->runs < 1 || t->runs > 100) {
		g_set_error(error, BFS_ERROR, EINVAL,
			    "--max-diffs must be >= 0, --sample and --files "
			    ">= 1, --procs 1 to 1024 and --runs 1 to 100");
		return FALSE;
	}
	if (strcmp(t->order, "alternate") && strcmp(t->order, "mount-first") &&
	    strcmp(t->order, "s3-first")) {
		g_set_error(error, BFS_ERROR, EINVAL,
			    "--order: '%s' is not alternate, mount-first or "
			    "s3-first",
			    t->order);
		return FALSE;
	}
	return TRUE;
}

static gboolean parse_args(struct compare *t, int argc, char **argv,
			   GError **error)
{
	g_auto(GStrv) opts = NULL;
	gboolean version = FALSE;
	gint64 seed = -1;
	GOptionEntry entries[] = {
		{ "option", 'o', 0, G_OPTION_ARG_STRING_ARRAY, &opts,
		  "S3 options, as for the mount (see below); repeatable",
		  "OPT[,OPT...]" },
		{ "max-diffs", 0, 0, G_OPTION_ARG_INT, &t->max_diffs,
		  "Differences shown per section (default 20)", "N" },
		{ "content", 'c', 0, G_OPTION_ARG_NONE, &t->content,
		  "Also compare the bytes (SHA-256) of a sample", NULL },
		{ "sample", 0, 0, G_OPTION_ARG_INT, &t->sample,
		  "Files in the --content sample (default 100)", "N" },
		{ "all", 0, 0, G_OPTION_ARG_NONE, &t->all,
		  "--content of every file", NULL },
		{ "seed", 0, 0, G_OPTION_ARG_INT64, &seed,
		  "Seed of the random samples (default: the time; printed)",
		  "S" },
		{ "bench", 'b', 0, G_OPTION_ARG_NONE, &t->bench,
		  "Also read the same files through both paths and compare "
		  "throughput and latency",
		  NULL },
		{ "procs", 'j', 0, G_OPTION_ARG_INT, &t->procs,
		  "Concurrent reads per side (default 8)", "N" },
		{ "files", 0, 0, G_OPTION_ARG_INT, &t->files,
		  "Files read by --bench (default 200)", "N" },
		{ "runs", 0, 0, G_OPTION_ARG_INT, &t->runs,
		  "--bench runs per side; medians are shown (default 3)", "R" },
		{ "order", 0, 0, G_OPTION_ARG_STRING, &t->order,
		  "alternate (default), mount-first or s3-first", "ORDER" },
		{ "json", 0, 0, G_OPTION_ARG_NONE, &t->json,
		  "Print one JSON object", NULL },
		{ "quiet", 'q', 0, G_OPTION_ARG_NONE, &t->quiet,
		  "No progress on stderr", NULL },
		{ "verbose", 'v', 0, G_OPTION_ARG_NONE, &t->verbose,
		  "Log retries and requests to stderr", NULL },
		{ "version", 'V', 0, G_OPTION_ARG_NONE, &version,
		  "Print the version and exit", NULL },
		G_OPTION_ENTRY_NULL
	};
	g_autoptr(GOptionContext) ctx =
		g_option_context_new("MOUNTPOINT s3://BUCKET[/PREFIX]");
	struct stat st;
	guint i;

	g_option_context_set_summary(
		ctx, "Compares a bucketfs mount with the bucket itself: "
		     "names and sizes (always), bytes (--content) and "
		     "throughput (--bench).  MOUNTPOINT may be a directory "
		     "inside a mount, compared with the matching prefix.  "
		     "Without an endpoint option or variable, the mount's "
		     "own endpoints (its user.bucketfs.stats) are used.  "
		     "Exit status 0 when the two sides match, 1 when they "
		     "differ, 2 on bad usage or failure.");
	g_option_context_set_description(ctx, config_options_help());
	g_option_context_add_main_entries(ctx, entries, NULL);
	if (!g_option_context_parse(ctx, &argc, &argv, error))
		return FALSE;
	if (version) {
		printf(PROG " %s\n", BUCKETFS_VERSION);
		exit(0);
	}
	if (argc != 3) {
		g_set_error(error, BFS_ERROR, EINVAL,
			    "expected MOUNTPOINT and s3://BUCKET[/PREFIX] "
			    "(see --help)");
		return FALSE;
	}
	if (!t->order)
		t->order = g_strdup("alternate");
	if (!check_args(t, error))
		return FALSE;
	t->seed = seed >= 0 ? seed : g_get_real_time() % 1000000;
	t->mount = g_strdup(argv[1]);
	if (stat(t->mount, &st) < 0) {
		int err = errno;

		g_set_error(error, BFS_ERROR, err, "'%s': %s", t->mount,
			    g_strerror(err));
		return FALSE;
	}
	if (!S_ISDIR(st.st_mode)) {
		g_set_error(error, BFS_ERROR, ENOTDIR, "'%s': not a directory",
			    t->mount);
		return FALSE;
	}
	if (!config_parse_url(&t->cfg, argv[2], error))
		return FALSE;
	for (i = 0; opts && opts[i]; i++)
		if (!config_parse_options(&t->cfg, opts[i], NULL, error))
			return FALSE;
	if (!endpoints_from_mount(t, error))
		return FALSE;
	if (!t->cfg.max_connections)
		t->cfg.max_connections =
			MAX((guint)t->procs, CONFIG_DEFAULT_MAX_CONNECTIONS);
	if (!config_finish(&t->cfg, error))
		return FALSE;
	if (!t->endpoint_note)
		t->endpoint_note = g_strdup(t->cfg.endpoint_source);
	return TRUE;
}

static void tool_init(struct compare *t)
{
	config_init(&t->cfg);
	t->max_diffs = 20;
	t->sample = 0; /* not given: 100 */
	t->procs = 8;
	t->files = 200;
	t->runs = 3;
	t->objects =
		g_ptr_array_new_with_free_func((GDestroyNotify)s3_object_free);
	t->expected_files = g_hash_table_new(g_str_hash, g_str_equal);
	t->expected_dirs =
		g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
	t->mount_files =
		g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
	t->mount_dirs =
		g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
	t->hidden = g_ptr_array_new_with_free_func(
		(GDestroyNotify)compare_hidden_free);
	t->common = g_ptr_array_new();
	t->ns.all = g_ptr_array_new_with_free_func(
		(GDestroyNotify)compare_diff_free);
	t->ct.all = g_ptr_array_new_with_free_func(
		(GDestroyNotify)compare_diff_free);
	t->bn.all = g_ptr_array_new_with_free_func(
		(GDestroyNotify)compare_diff_free);
}

static void tool_clear(struct compare *t)
{
	s3_free(t->s3);
	g_ptr_array_free(t->common, TRUE);
	g_hash_table_destroy(t->expected_files);
	g_hash_table_destroy(t->expected_dirs);
	g_hash_table_destroy(t->mount_files);
	g_hash_table_destroy(t->mount_dirs);
	g_ptr_array_free(t->hidden, TRUE);
	g_ptr_array_free(t->objects, TRUE);
	g_ptr_array_free(t->ns.all, TRUE);
	g_ptr_array_free(t->ct.all, TRUE);
	g_ptr_array_free(t->bn.all, TRUE);
	g_free(t->bench_res.med[0].first_error);
	g_free(t->bench_res.med[1].first_error);
	g_free(t->mount);
	g_free(t->order);
	g_free(t->endpoint_note);
	config_clear(&t->cfg);
}

static int run(struct compare *t, GError **error)
{
	t->s3 = s3_new(&t->cfg, error);
	if (!t->s3)
		return 2;
	check_mount_uri(t);
	if (!compare_load_listing(t, error) || !compare_walk_mount(t, error))
		return 2;
	compare_namespace(t);
	if (t->content)
		compare_content(t);
	if (t->bench)
		compare_bench(t);
	if (t->json)
		compare_print_json(t);
	else
		compare_print_text(t);
	return compare_total_diffs(t) ? 1 : 0;
}

int main(int argc, char **argv)
{
	struct compare t = { 0 };
	g_autoptr(GError) error = NULL;
	int rc;

	tool_init(&t);
	if (!parse_args(&t, argc, argv, &error)) {
		fprintf(stderr, PROG ": %s\n", error->message);
		tool_clear(&t);
		return 2;
	}
	t.progress = !t.quiet && isatty(STDERR_FILENO);
	log_init(PROG, TRUE, t.verbose ? LOG_LEVEL_DEBUG : LOG_LEVEL_WARNING);
	rc = run(&t, &error);
	if (rc == 2)
		fprintf(stderr, PROG ": %s\n", error->message);
	fflush(stdout);
	log_shutdown();
	tool_clear(&t);
	return rc;
}
