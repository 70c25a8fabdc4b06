/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * config_url.c - names and URLs: region and bucket names, the endpoint
 * URLs (normalized, deduplicated), and the mount's s3://BUCKET[/PREFIX]
 * (config_parse_url()).
 */
#include <errno.h>
#include <string.h>

#include "config.h"
#include "config_internal.h"
#include "endpoint_url.h"
#include "error.h"
#include "log.h"

#define REGION_MAX 64

/* --- names ------------------------------------------------------------ */

gboolean config_region_valid(const char *region)
{
	const char *p;

	if (!*region || strlen(region) > REGION_MAX)
		return FALSE;
	for (p = region; *p; p++) {
		if (!g_ascii_isalnum(*p) && *p != '-' && *p != '_' && *p != '.')
			return FALSE;
	}
	return TRUE;
}

static gboolean bucket_char_valid(char c)
{
	return g_ascii_isalnum(c) || c == '.' || c == '-' || c == '_';
}

/* Whether @bucket can be the first label(s) of a virtual-hosted name. */
gboolean config_bucket_dns_compatible(const char *bucket, gboolean allow_dots)
{
	gsize len = strlen(bucket);
	const char *p;

	if (len < 3 || len > 63)
		return FALSE;
	if (!g_ascii_isalnum(bucket[0]) || !g_ascii_isalnum(bucket[len - 1]))
		return FALSE;
	for (p = bucket; *p; p++) {
		if (g_ascii_isupper(*p) || *p == '_')
			return FALSE;
		if (*p == '.' && (!allow_dots || p[1] == '.'))
			return FALSE;
	}
	return TRUE;
}

/* --- endpoint URLs ---------------------------------------------------- */

static gboolean url_error(GError **error, const char *shown,
			  const char *problem)
{
	g_autofree char *v = log_escape(shown, -1);

	g_set_error(error, BFS_ERROR, EINVAL, "'%s': %s", v, problem);
	return FALSE;
}

gboolean config_endpoint_parse(const char *url, char **out, GError **error)
{
	struct endpoint_url u;
	gboolean ipv6;

	if (!endpoint_url_parse(url, &u, error))
		return FALSE;
	if (*u.path && strcmp(u.path, "/") != 0) {
		endpoint_url_clear(&u);
		return url_error(error, url,
				 "a path is not supported (give a prefix as "
				 "s3://BUCKET/PREFIX)");
	}
	ipv6 = strchr(u.host, ':') != NULL;
	if (!u.port_given ||
	    u.port == (strcmp(u.scheme, "https") == 0 ? 443u : 80u))
		*out = g_strdup_printf("%s://%s%s%s", u.scheme, ipv6 ? "[" : "",
				       u.host, ipv6 ? "]" : "");
	else
		*out = g_strdup_printf("%s://%s%s%s:%u", u.scheme,
				       ipv6 ? "[" : "", u.host, ipv6 ? "]" : "",
				       u.port);
	endpoint_url_clear(&u);
	return TRUE;
}

void config_endpoints_add(GPtrArray *endpoints, char *url)
{
	guint i;

	for (i = 0; i < endpoints->len; i++) {
		if (strcmp(g_ptr_array_index(endpoints, i), url) == 0) {
			g_free(url);
			return;
		}
	}
	g_ptr_array_add(endpoints, url);
}

gboolean config_endpoint_is_aws(const char *url)
{
	return g_str_has_suffix(url, ".amazonaws.com") ||
	       g_str_has_suffix(url, ".amazonaws.com.cn");
}

/* --- s3://BUCKET[/PREFIX] --------------------------------------------- */

static gboolean bucket_check(const char *url, const char *bucket,
			     GError **error)
{
	g_autofree char *u = log_escape(url, -1);
	g_autofree char *b = log_escape(bucket, -1);
	gsize len = strlen(bucket);
	const char *p;

	if (len == 0) {
		g_set_error(error, BFS_ERROR, EINVAL,
			    "'%s': no bucket name; expected "
			    "s3://BUCKET[/PREFIX]",
			    u);
		return FALSE;
	}
	for (p = bucket; *p; p++) {
		if (!bucket_char_valid(*p)) {
			g_set_error(error, BFS_ERROR, EINVAL,
				    "'%s': bucket name '%s' may contain only "
				    "letters, digits, '.', '-' and '_'",
				    u, b);
			return FALSE;
		}
	}
	if (len < 3 || len > 63) {
		g_set_error(error, BFS_ERROR, EINVAL,
			    "'%s': bucket name '%s' is not 3 to 63 "
			    "characters long",
			    u, b);
		return FALSE;
	}
	return TRUE;
}

gboolean config_parse_url(struct config *cfg, const char *url, GError **error)
{
	g_autofree char *bucket = NULL;
	g_autofree char *u = NULL;
	const char *rest;
	const char *slash;
	const char *prefix;

	g_return_val_if_fail(cfg != NULL && url != NULL, FALSE);
	g_return_val_if_fail(error == NULL || *error == NULL, FALSE);

	u = log_escape(url, -1);
	if (g_ascii_strncasecmp(url, "s3://", 5) != 0) {
		g_set_error(error, BFS_ERROR, EINVAL,
			    "'%s': expected s3://BUCKET[/PREFIX]", u);
		return FALSE;
	}
	rest = url + 5;
	slash = strchr(rest, '/');
	bucket =
		slash ? g_strndup(rest, (gsize)(slash - rest)) : g_strdup(rest);
	if (!bucket_check(url, bucket, error))
		return FALSE;
	prefix = slash ? slash + 1 : "";
	if (!g_utf8_validate(prefix, -1, NULL)) {
		g_set_error(error, BFS_ERROR, EINVAL,
			    "'%s': the prefix is not valid UTF-8", u);
		return FALSE;
	}
	if (strlen(prefix) >= PREFIX_MAX) {
		g_set_error(error, BFS_ERROR, EINVAL,
			    "'%s': the prefix is longer than %d bytes", u,
			    PREFIX_MAX - 1);
		return FALSE;
	}

	g_free(cfg->bucket);
	cfg->bucket = g_steal_pointer(&bucket);
	g_free(cfg->prefix);
	if (*prefix && !g_str_has_suffix(prefix, "/"))
		cfg->prefix = g_strconcat(prefix, "/", NULL);
	else
		cfg->prefix = g_strdup(prefix);
	return TRUE;
}
