/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * s3-client - a test driver for src/s3: one verb per run, machine-readable
 * output, the error chain on stderr and the errno as the exit status.
 *
 *   s3-client [-o OPTS]... get s3://BUCKET/KEY [OFFSET [LENGTH [ETAG]]]
 *   s3-client [-o OPTS]... head s3://BUCKET/KEY
 *   s3-client [-o OPTS]... list s3://BUCKET[/PREFIX] [DELIM [MAXKEYS
 * [START_AFTER [TOKEN]]]] s3-client [-o OPTS]... listall s3://BUCKET[/PREFIX]
 * [DELIM [MAXKEYS]] s3-client [-o OPTS]... parallel-get s3://BUCKET N KEY... (N
 * in flight)
 *
 * get writes the bytes to stdout and "size=... etag=..." to stderr.  Keys in
 * list output are hex, so any byte survives:  "obj HEXKEY SIZE ETAG MTIME",
 * "prefix HEXKEY", "page TRUNCATED TOKEN".  Keys given on the command line
 * may use %XX escapes for bytes a shell can't pass.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "error.h"
#include "log.h"
#include "s3.h"

static char *unescape(const char *s)
{
	char *r = g_uri_unescape_string(s, NULL);

	if (!r) {
		fprintf(stderr, "s3-client: bad %%-escape in '%s'\n", s);
		exit(2);
	}
	return r;
}

static void print_hex(const char *tag, const char *s)
{
	printf("%s ", tag);
	if (!*s)
		printf("-");
	for (; *s; s++)
		printf("%02x", (unsigned char)*s);
}

static void print_page(const struct s3_list_page *page)
{
	guint i;

	for (i = 0; i < page->objects->len; i++) {
		const struct s3_object *o = g_ptr_array_index(page->objects, i);

		print_hex("obj", o->key);
		printf(" %" G_GUINT64_FORMAT " %s %" G_GINT64_FORMAT "\n",
		       o->size, o->etag ? o->etag : "-", o->mtime);
	}
	for (i = 0; i < page->common_prefixes->len; i++) {
		print_hex("prefix",
			  g_ptr_array_index(page->common_prefixes, i));
		printf("\n");
	}
	printf("page %d %s\n", page->is_truncated,
	       page->next_continuation_token ? page->next_continuation_token
					     : "-");
}

static gboolean on_page(struct s3_list_page *page, void *user, GError **error)
{
	(void)user;
	(void)error;
	print_page(page);
	return TRUE;
}

static int fail(const GError *error)
{
	fprintf(stderr, "s3-client: %s\n", error->message);
	return bfs_error_errno(error);
}

static const char *arg(int argc, char **argv, int i)
{
	return i < argc && strcmp(argv[i], "-") != 0 ? argv[i] : NULL;
}

static int do_get(struct s3 *s3, const char *key, int argc, char **argv)
{
	struct s3_get_args a = { .endpoint = -1 };
	struct s3_object_meta meta = { 0 };
	g_autoptr(GError) error = NULL;
	g_autoptr(GBytes) data = NULL;
	gsize len;
	const char *p;

	if (arg(argc, argv, 0))
		a.offset = g_ascii_strtoull(argv[0], NULL, 10);
	if (arg(argc, argv, 1))
		a.length = g_ascii_strtoull(argv[1], NULL, 10);
	a.if_match = arg(argc, argv, 2);
	data = s3_get(s3, key, &a, &meta, &error);
	if (!data) {
		s3_object_meta_clear(&meta);
		return fail(error);
	}
	p = g_bytes_get_data(data, &len);
	if (len)
		fwrite(p, 1, len, stdout);
	fprintf(stderr, "size=%" G_GUINT64_FORMAT " etag=%s request_id=%s\n",
		meta.size, meta.etag ? meta.etag : "-",
		meta.request_id ? meta.request_id : "-");
	s3_object_meta_clear(&meta);
	return 0;
}

struct par {
	GMutex lock;
	GCond cond;
	guint left;    /* protected by lock */
	guint failed;  /* protected by lock */
	guint64 bytes; /* protected by lock */
};

static void par_done(GBytes *data, const struct s3_object_meta *meta,
		     const GError *error, void *user)
{
	struct par *p = user;

	(void)meta;
	g_mutex_lock(&p->lock);
	if (error) {
		p->failed++;
		fprintf(stderr, "s3-client: %s\n", error->message);
	} else {
		p->bytes += g_bytes_get_size(data);
	}
	p->left--;
	g_cond_signal(&p->cond);
	g_mutex_unlock(&p->lock);
}

/* Keeps @depth GETs in flight over the keys, to exercise the engine. */
static int do_parallel(struct s3 *s3, int argc, char **argv)
{
	struct par p = { 0 };
	struct s3_get_args a = { .endpoint = -1 };
	guint depth, i, next = 0, n;
	gint64 t0 = g_get_monotonic_time();

	if (argc < 2)
		return 2;
	depth = (guint)atoi(argv[0]);
	n = (guint)argc - 1;
	g_mutex_init(&p.lock);
	g_cond_init(&p.cond);
	g_mutex_lock(&p.lock);
	while (next < n || p.left) {
		while (next < n && p.left < depth) {
			g_autofree char *k = unescape(argv[1 + next++]);

			p.left++;
			g_mutex_unlock(&p.lock);
			s3_get_async(s3, k, &a, par_done, &p);
			g_mutex_lock(&p.lock);
		}
		if (p.left)
			g_cond_wait(&p.cond, &p.lock);
	}
	g_mutex_unlock(&p.lock);
	i = p.failed;
	printf("gets=%u failed=%u bytes=%" G_GUINT64_FORMAT " seconds=%.3f\n",
	       n, i, p.bytes, (g_get_monotonic_time() - t0) / 1e6);
	return i ? EIO : 0;
}

static int run(struct s3 *s3, const char *verb, const char *key, int argc,
	       char **argv)
{
	g_autoptr(GError) error = NULL;
	struct s3_list_args la = { .endpoint = -1 };

	if (!strcmp(verb, "get"))
		return do_get(s3, key, argc, argv);
	if (!strcmp(verb, "head")) {
		struct s3_object_meta meta = { 0 };

		if (!s3_head(s3, key, -1, &meta, &error))
			return fail(error);
		printf("size=%" G_GUINT64_FORMAT
		       " etag=%s mtime=%" G_GINT64_FORMAT "\n",
		       meta.size, meta.etag ? meta.etag : "-", meta.mtime);
		s3_object_meta_clear(&meta);
		return 0;
	}
	la.prefix = *key ? key : NULL;
	la.delimiter = arg(argc, argv, 0);
	if (arg(argc, argv, 1))
		la.max_keys = (guint)atoi(argv[1]);
	if (!strcmp(verb, "list")) {
		struct s3_list_page *page;

		la.start_after = arg(argc, argv, 2);
		la.continuation_token = arg(argc, argv, 3);
		page = s3_list(s3, &la, NULL, &error);
		if (!page)
			return fail(error);
		print_page(page);
		s3_list_page_free(page);
		return 0;
	}
	if (!strcmp(verb, "listall"))
		return s3_list_all(s3, &la, on_page, NULL, &error)
			       ? 0
			       : fail(error);
	fprintf(stderr, "s3-client: unknown verb '%s'\n", verb);
	return 2;
}

int main(int argc, char **argv)
{
	struct config cfg;
	g_autoptr(GError) error = NULL;
	g_autofree char *key = NULL;
	struct s3 *s3;
	const char *url;
	int i = 1, rc;

	config_init(&cfg);
	log_init("s3-client", TRUE,
		 g_getenv("S3_CLIENT_DEBUG") ? LOG_LEVEL_DEBUG
					     : LOG_LEVEL_WARNING);
	while (i + 1 < argc && !strcmp(argv[i], "-o")) {
		if (!config_parse_options(&cfg, argv[i + 1], NULL, &error))
			return fail(error);
		i += 2;
	}
	if (argc - i < 2) {
		fprintf(stderr, "usage: s3-client [-o OPTS]... VERB s3://BUCKET"
				"[/KEY] [ARGS...]\n");
		return 2;
	}
	url = argv[i + 1];
	if (!strcmp(argv[i], "parallel-get")) {
		if (!config_parse_url(&cfg, url, &error) ||
		    !config_finish(&cfg, &error))
			return fail(error);
		key = g_strdup("");
	} else {
		/* The part after the bucket is a key, not a prefix: keep its
		 * bytes exactly, trailing slash or not. */
		const char *slash = strchr(url + strlen("s3://"), '/');
		g_autofree char *bucket_url =
			slash ? g_strndup(url, slash - url) : g_strdup(url);

		if (!g_str_has_prefix(url, "s3://")) {
			fprintf(stderr, "s3-client: expected s3://\n");
			return 2;
		}
		if (!config_parse_url(&cfg, bucket_url, &error) ||
		    !config_finish(&cfg, &error))
			return fail(error);
		key = unescape(slash ? slash + 1 : "");
	}
	s3 = s3_new(&cfg, &error);
	if (!s3)
		return fail(error);
	if (!strcmp(argv[i], "parallel-get"))
		rc = do_parallel(s3, argc - i - 2, argv + i + 2);
	else
		rc = run(s3, argv[i], key, argc - i - 2, argv + i + 2);
	s3_free(s3);
	config_clear(&cfg);
	log_shutdown();
	return rc;
}
