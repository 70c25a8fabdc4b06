/* SPDX-License-Identifier: GPL-2.0-or-later */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "cred_chain.h"
#include "credentials.h"
#include "error.h"
#include "index.h"
#include "log.h"

#define DEFAULT_REGION	    "us-east-1"
#define PREFIX_MAX	    1024
#define REGION_MAX	    64
#define SECONDS_MAX	    3600.0
#define REQUEST_SECONDS_MAX 86400.0

/* A -o option: @value is NULL when none was given. */
typedef gboolean (*option_fn)(struct config *cfg, const char *name,
			      const char *value, GError **error);

struct option_def {
	const char *name;
	const char *metavar; /* NULL for a flag */
	option_fn apply;
};

static const char *env_get(const char *name)
{
	const char *value = g_getenv(name);

	return value && *value ? value : NULL;
}

static gboolean bad_value(GError **error, const char *name, const char *value,
			  const char *problem)
{
	g_autofree char *v = log_escape(value, -1);

	g_set_error(error, BFS_ERROR, EINVAL, "option '%s': '%s' %s", name, v,
		    problem);
	return FALSE;
}

/* --- numbers ----------------------------------------------------------- */

static gboolean parse_uint(const char *s, guint64 min, guint64 max,
			   guint64 *out)
{
	const char *p;

	if (!*s || strlen(s) > 20)
		return FALSE;
	for (p = s; *p; p++) {
		if (!g_ascii_isdigit(*p))
			return FALSE;
	}
	return g_ascii_string_to_unsigned(s, 10, min, max, out, NULL);
}

/* Decimal seconds: digits with at most one '.', no sign or exponent. */
static gboolean parse_seconds(const char *s, double min, gboolean min_open,
			      double max, double *out)
{
	gboolean dot = FALSE;
	gboolean digit = FALSE;
	const char *p;
	double d;

	if (strlen(s) > 32)
		return FALSE;
	for (p = s; *p; p++) {
		if (*p == '.' && !dot)
			dot = TRUE;
		else if (g_ascii_isdigit(*p))
			digit = TRUE;
		else
			return FALSE;
	}
	if (!digit)
		return FALSE;
	d = g_ascii_strtod(s, NULL);
	if (d < min || (min_open && d == min) || d > max)
		return FALSE;
	*out = d;
	return TRUE;
}

/* --- names and URLs ---------------------------------------------------- */

static gboolean region_valid(const char *region)
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
static gboolean bucket_dns_compatible(const char *bucket, gboolean allow_dots)
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

static gboolean host_char_valid(char c)
{
	return g_ascii_isalnum(c) || c == '-' || c == '.' || c == '_';
}

static gboolean ipv6_char_valid(char c)
{
	return g_ascii_isxdigit(c) || c == ':' || c == '.';
}

static gboolean url_error(GError **error, const char *shown,
			  const char *problem)
{
	g_autofree char *v = log_escape(shown, -1);

	g_set_error(error, BFS_ERROR, EINVAL, "'%s': %s", v, problem);
	return FALSE;
}

/* Splits "host[:port]" and validates both; @host gets the host. */
static gboolean endpoint_parse_authority(const char *url, const char *auth,
					 gsize len, char **host, guint *port,
					 GError **error)
{
	const char *colon = NULL;
	gsize hlen = len;
	guint64 n;
	gsize i;

	if (len > 0 && auth[0] == '[') {
		const char *close = memchr(auth, ']', len);

		if (!close || close == auth + 1)
			return url_error(error, url, "invalid IPv6 address");
		for (i = 1; auth + i < close; i++) {
			if (!ipv6_char_valid(auth[i]))
				return url_error(error, url,
						 "invalid IPv6 address");
		}
		hlen = (gsize)(close - auth) + 1;
		if (hlen < len && auth[hlen] != ':')
			return url_error(error, url, "invalid IPv6 address");
		if (hlen < len)
			colon = auth + hlen;
	} else {
		colon = memchr(auth, ':', len);
		if (colon)
			hlen = (gsize)(colon - auth);
		for (i = 0; i < hlen; i++) {
			if (!host_char_valid(auth[i]))
				return url_error(error, url,
						 "invalid character in the "
						 "host name");
		}
	}
	if (hlen == 0)
		return url_error(error, url, "no host");

	*port = 0;
	if (colon) {
		g_autofree char *digits =
			g_strndup(colon + 1, len - (gsize)(colon + 1 - auth));

		if (!parse_uint(digits, 1, 65535, &n))
			return url_error(error, url,
					 "the port must be a number between "
					 "1 and 65535");
		*port = (guint)n;
	}
	*host = g_ascii_strdown(auth, (gssize)hlen);
	return TRUE;
}

/*
 * What an error may quote of @url: all of it, unless it has an '@', which
 * may end a user:password part (itself possibly holding '/', '#' or '@'):
 * then only the scheme and what follows the last '@'.
 */
static char *endpoint_shown(const char *url, const char *sep)
{
	const char *at = strrchr(url, '@');

	if (!at)
		return g_strdup(url);
	if (!sep || sep > at)
		return g_strdup_printf("...@%s", at + 1);
	return g_strdup_printf("%.*s://...@%s", (int)(sep - url), url, at + 1);
}

/* Normalizes an endpoint URL into *@out. */
static gboolean endpoint_parse(const char *url, char **out, GError **error)
{
	const char *sep = strstr(url, "://");
	g_autofree char *shown = endpoint_shown(url, sep);
	g_autofree char *scheme = NULL;
	g_autofree char *host = NULL;
	const char *auth;
	const char *rest;
	guint port;

	if (!sep)
		return url_error(error, shown,
				 "expected http://HOST[:PORT] or "
				 "https://HOST[:PORT]");
	scheme = g_ascii_strdown(url, sep - url);
	if (strcmp(scheme, "http") != 0 && strcmp(scheme, "https") != 0)
		return url_error(error, shown,
				 "the scheme must be http or https");
	if (strchr(url, '@'))
		return url_error(error, shown,
				 "a user name or password in the URL is not "
				 "supported (credentials come from the "
				 "environment or a profile)");
	auth = sep + 3;
	rest = auth + strcspn(auth, "/?#");
	if (strpbrk(rest, "?#"))
		return url_error(error, url, "a query is not supported");
	if (*rest && strcmp(rest, "/") != 0)
		return url_error(error, url,
				 "a path is not supported (give a prefix as "
				 "s3://BUCKET/PREFIX)");
	if (!endpoint_parse_authority(url, auth, (gsize)(rest - auth), &host,
				      &port, error))
		return FALSE;

	if (port == 0 || (port == 80 && strcmp(scheme, "http") == 0) ||
	    (port == 443 && strcmp(scheme, "https") == 0))
		*out = g_strdup_printf("%s://%s", scheme, host);
	else
		*out = g_strdup_printf("%s://%s:%u", scheme, host, port);
	return TRUE;
}

static void endpoints_add(GPtrArray *endpoints, char *url)
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

static gboolean endpoint_is_aws(const char *url)
{
	return g_str_has_suffix(url, ".amazonaws.com") ||
	       g_str_has_suffix(url, ".amazonaws.com.cn");
}

/* --- the -o options ---------------------------------------------------- */

static gboolean opt_endpoint(struct config *cfg, const char *name,
			     const char *value, GError **error)
{
	char *url;

	if (!endpoint_parse(value, &url, error)) {
		g_prefix_error(error, "option '%s': ", name);
		return FALSE;
	}
	endpoints_add(cfg->endpoints, url);
	cfg->endpoints_from_options = TRUE;
	return TRUE;
}

static gboolean opt_region(struct config *cfg, const char *name,
			   const char *value, GError **error)
{
	if (!region_valid(value))
		return bad_value(error, name, value,
				 "is not a region name (letters, digits, "
				 "'-', '_', '.')");
	g_free(cfg->region);
	cfg->region = g_strdup(value);
	g_free(cfg->region_source);
	cfg->region_source = g_strdup("-o region");
	return TRUE;
}

static gboolean opt_addressing(struct config *cfg, const char *name,
			       const char *value, GError **error)
{
	if (strcmp(value, "path") == 0)
		cfg->addressing = ADDRESSING_PATH;
	else if (strcmp(value, "virtual") == 0)
		cfg->addressing = ADDRESSING_VIRTUAL;
	else if (strcmp(value, "auto") == 0)
		cfg->addressing = ADDRESSING_AUTO;
	else
		return bad_value(error, name, value,
				 "is not one of path, virtual or auto");
	return TRUE;
}

static gboolean opt_http_receive(struct config *cfg, const char *name,
				 const char *value, GError **error)
{
	if (strcmp(value, "direct") == 0)
		cfg->receive_curl = FALSE;
	else if (strcmp(value, "curl") == 0)
		cfg->receive_curl = TRUE;
	else
		return bad_value(error, name, value,
				 "is not one of direct or curl");
	return TRUE;
}

static gboolean opt_ca_file(struct config *cfg, const char *name,
			    const char *value, GError **error)
{
	(void)name;
	(void)error;
	g_free(cfg->ca_file);
	cfg->ca_file = g_strdup(value);
	return TRUE;
}

static gboolean opt_index(struct config *cfg, const char *name,
			  const char *value, GError **error)
{
	(void)name;
	(void)error;
	g_free(cfg->index_path);
	cfg->index_path = g_strdup(value);
	return TRUE;
}

static gboolean opt_profile(struct config *cfg, const char *name,
			    const char *value, GError **error)
{
	const char *p;

	for (p = value; *p; p++) {
		if ((guchar)*p < 0x20 || *p == 0x7f || *p == '[' || *p == ']')
			return bad_value(error, name, value,
					 "is not a profile name");
	}
	g_free(cfg->profile);
	cfg->profile = g_strdup(value);
	return TRUE;
}

static gboolean opt_anonymous(struct config *cfg, const char *name,
			      const char *value, GError **error)
{
	(void)name;
	(void)value;
	(void)error;
	cfg->anonymous = TRUE;
	return TRUE;
}

static gboolean opt_timeout(struct config *cfg, const char *name,
			    const char *value, GError **error)
{
	double *field = strcmp(name, "connect_timeout") == 0
				? &cfg->connect_timeout
				: &cfg->stall_timeout;

	if (!parse_seconds(value, 0, TRUE, SECONDS_MAX, field))
		return bad_value(error, name, value,
				 "is not a number of seconds greater than 0 "
				 "and at most 3600");
	return TRUE;
}

static gboolean opt_request_timeout(struct config *cfg, const char *name,
				    const char *value, GError **error)
{
	if (!parse_seconds(value, 0, FALSE, REQUEST_SECONDS_MAX,
			   &cfg->request_timeout))
		return bad_value(error, name, value,
				 "is not a number of seconds between 0 "
				 "(none) and 86400");
	return TRUE;
}

static gboolean opt_retry_deadline(struct config *cfg, const char *name,
				   const char *value, GError **error)
{
	if (!parse_seconds(value, 0, FALSE, REQUEST_SECONDS_MAX,
			   &cfg->retry_deadline))
		return bad_value(error, name, value,
				 "is not a number of seconds between 0 "
				 "(none) and 86400");
	return TRUE;
}

static gboolean opt_max_attempts(struct config *cfg, const char *name,
				 const char *value, GError **error)
{
	guint64 n;

	if (!parse_uint(value, 1, 100, &n))
		return bad_value(error, name, value,
				 "is not an integer between 1 and 100");
	cfg->max_attempts = (guint)n;
	return TRUE;
}

static gboolean opt_max_connections(struct config *cfg, const char *name,
				    const char *value, GError **error)
{
	guint64 n;

	if (!parse_uint(value, 1, 1000000, &n))
		return bad_value(error, name, value,
				 "is not an integer between 1 and 1000000");
	cfg->max_connections = (guint)n;
	return TRUE;
}

static gboolean opt_event_threads(struct config *cfg, const char *name,
				  const char *value, GError **error)
{
	guint64 n;

	if (!parse_uint(value, 1, 64, &n))
		return bad_value(error, name, value,
				 "is not an integer between 1 and 64");
	cfg->event_threads = (guint)n;
	return TRUE;
}

static gboolean opt_ro(struct config *cfg, const char *name, const char *value,
		       GError **error)
{
	(void)name;
	(void)value;
	(void)error;
	cfg->read_only = TRUE;
	return TRUE;
}

/* mount(8) hands "rw" to every helper unless told "ro": the default,
 * where names the index lacks may be written (fs.h). */
static gboolean opt_rw(struct config *cfg, const char *name, const char *value,
		       GError **error)
{
	(void)name;
	(void)value;
	(void)error;
	cfg->rw_ignored = TRUE;
	return TRUE;
}

/*
 * One path of empty_dirs=: relative to the mount's root, one trailing '/'
 * allowed, every component one the index could show (index.h).  Returns
 * the path without the '/', or NULL with @error naming @value and why.
 */
static char *empty_dir_check(const char *name, const char *value,
			     const char *path, gsize len, GError **error)
{
	g_autofree char *shown = g_strndup(path, len);
	const char *p = path, *end;
	guint depth = 0;

	if (len > 1 && path[len - 1] == '/')
		len--;
	end = path + len;
	if (len == 0) {
		bad_value(error, name, value, "has an empty path");
		return NULL;
	}
	if (path[0] == '/') {
		bad_value(error, name, shown,
			  "is absolute: paths are relative to the mount's "
			  "root");
		return NULL;
	}
	for (; p <= end; depth++) {
		const char *slash = memchr(p, '/', end - p);
		gsize n = slash ? (gsize)(slash - p) : (gsize)(end - p);
		const char *why = NULL;

		switch (index_component_check(p, n)) {
		case INDEX_COMPONENT_EMPTY:
			why = "has an empty component ('a//b')";
			break;
		case INDEX_COMPONENT_DOT:
			why = "has a '.' or '..' component";
			break;
		case INDEX_COMPONENT_LONG:
			why = "has a component over 255 bytes";
			break;
		default:
			break;
		}
		if (why) {
			bad_value(error, name, shown, why);
			return NULL;
		}
		p += n + 1;
	}
	if (depth > INDEX_DEPTH_MAX || len >= PREFIX_MAX) {
		bad_value(error, name, shown, "is too long for an S3 key");
		return NULL;
	}
	return g_strndup(path, len);
}

/* empty_dirs=PATH[:PATH...]: adds to those given before; all or none. */
static gboolean opt_empty_dirs(struct config *cfg, const char *name,
			       const char *value, GError **error)
{
	g_autoptr(GPtrArray) add = g_ptr_array_new_with_free_func(g_free);
	const char *p = value;
	guint i;

	for (;;) {
		const char *colon = strchr(p, ':');
		gsize len = colon ? (gsize)(colon - p) : strlen(p);
		char *path = empty_dir_check(name, value, p, len, error);

		if (!path)
			return FALSE;
		g_ptr_array_add(add, path);
		if (!colon)
			break;
		p = colon + 1;
	}
	for (i = 0; i < add->len; i++) {
		const char *path = g_ptr_array_index(add, i);

		if (!g_ptr_array_find_with_equal_func(cfg->empty_dirs, path,
						      g_str_equal, NULL))
			g_ptr_array_add(cfg->empty_dirs, g_strdup(path));
	}
	return TRUE;
}

static gboolean opt_config(struct config *cfg, const char *name,
			   const char *value, GError **error)
{
	(void)name;
	(void)error;
	g_free(cfg->config_file);
	cfg->config_file = g_strdup(value);
	return TRUE;
}

static const struct option_def option_defs[] = {
	{ "endpoint", "URL", opt_endpoint },
	{ "region", "NAME", opt_region },
	{ "addressing", "path|virtual|auto", opt_addressing },
	{ "ca_file", "PATH", opt_ca_file },
	{ "index", "PATH", opt_index },
	{ "profile", "NAME", opt_profile },
	{ "anonymous", NULL, opt_anonymous },
	{ "connect_timeout", "SECONDS", opt_timeout },
	{ "stall_timeout", "SECONDS", opt_timeout },
	{ "request_timeout", "SECONDS", opt_request_timeout },
	{ "max_attempts", "N", opt_max_attempts },
	{ "retry_deadline", "SECONDS", opt_retry_deadline },
	{ "max_connections", "N", opt_max_connections },
	{ "event_threads", "N", opt_event_threads },
	{ "http_receive", "direct|curl", opt_http_receive },
	{ "ro", NULL, opt_ro },
	{ "rw", NULL, opt_rw },
	{ "config", "PATH", opt_config },
	{ "empty_dirs", "PATH[:PATH...]", opt_empty_dirs },
};

static const struct option_def *option_find(const char *name)
{
	gsize i;

	for (i = 0; i < G_N_ELEMENTS(option_defs); i++) {
		if (strcmp(option_defs[i].name, name) == 0)
			return &option_defs[i];
	}
	return NULL;
}

/* Names that could only carry a secret: refused even as pass-through. */
static gboolean option_looks_secret(const char *name)
{
	static const char *const words[] = {
		"secret",     "password",  "passwd",	 "token",
		"access_key", "accesskey", "credential",
	};
	g_autofree char *lower = g_ascii_strdown(name, -1);
	gsize i;

	for (i = 0; i < G_N_ELEMENTS(words); i++) {
		if (strstr(lower, words[i]))
			return TRUE;
	}
	return FALSE;
}

/*
 * The next item of an -o argument, unescaped, or NULL at the end.  Empty
 * items are skipped.
 */
static char *option_next(const char **p)
{
	GString *item;

	while (**p == ',')
		(*p)++;
	if (!**p)
		return NULL;
	item = g_string_new(NULL);
	for (; **p && **p != ','; (*p)++) {
		if (**p == '\\' && ((*p)[1] == ',' || (*p)[1] == '\\'))
			(*p)++;
		g_string_append_c(item, **p);
	}
	return g_string_free(item, FALSE);
}

/*
 * Applies "name[=value]".  @from_options: it came from -o, so the config
 * file must not override it.
 */
static gboolean option_apply(struct config *cfg, const char *item,
			     GPtrArray *passthrough, gboolean from_options,
			     GError **error)
{
	const struct option_def *def;
	g_autofree char *name = NULL;
	char *eq = strchr(item, '=');
	const char *value = eq ? eq + 1 : NULL;
	g_autofree char *shown = NULL;

	name = eq ? g_strndup(item, (gsize)(eq - item)) : g_strdup(item);
	shown = log_escape(name, -1);
	if (option_looks_secret(name)) {
		g_set_error(error, BFS_ERROR, EINVAL,
			    "option '%s': secrets are not accepted as options "
			    "(they would show in ps and /proc/mounts); use "
			    "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY or a "
			    "profile (-o profile=NAME)",
			    shown);
		return FALSE;
	}
	def = option_find(name);
	if (from_options)
		g_hash_table_add(cfg->given, g_strdup(name));
	if (!def && passthrough) {
		g_ptr_array_add(passthrough, g_strdup(item));
		return TRUE;
	}
	if (!def) {
		g_set_error(error, BFS_ERROR, EINVAL, "unknown option '%s'",
			    shown);
		return FALSE;
	}
	if (!def->metavar && value) {
		g_set_error(error, BFS_ERROR, EINVAL,
			    "option '%s' takes no value", shown);
		return FALSE;
	}
	if (def->metavar && (!value || !*value)) {
		g_set_error(error, BFS_ERROR, EINVAL,
			    "option '%s' needs a value: %s=%s", shown, shown,
			    def->metavar);
		return FALSE;
	}
	return def->apply(cfg, def->name, value, error);
}

gboolean config_parse_options(struct config *cfg, const char *opts,
			      GPtrArray *passthrough, GError **error)
{
	const char *p = opts;
	char *item;

	g_return_val_if_fail(cfg != NULL && opts != NULL, FALSE);
	g_return_val_if_fail(error == NULL || *error == NULL, FALSE);

	while ((item = option_next(&p))) {
		gboolean ok = option_apply(cfg, item, passthrough, TRUE, error);

		g_free(item);
		if (!ok)
			return FALSE;
	}
	return TRUE;
}

/* --- the URL ----------------------------------------------------------- */

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

/* --- the config file --------------------------------------------------- */

#define CONFIG_FILE_MAX (1024 * 1024)

/*
 * bucketfs's mount options (take_mount_option() in fs/main.c) that the file
 * may hold; '?' marks a flag.  Keep in step with "Mount options" of
 * bucketfs --help: tests/integration/test_config_file.py compares them.
 */
static const char *const mount_keys[] = {
	"entry_timeout",
	"negative_timeout",
	"free_space",
	"list_workers",
	"index_max_age",
	"index_url",
	"index_url_fallback",
	"whole_max",
	"window_max",
	"memory_max",
	"prefetch_depth",
	"sched_slice",
	"readahead",
	"direct_io",
	"passthrough",
	"readdirplus",
	"write_max",
	"part_size",
	"write_parts",
	"writable?",
	"allow_other?",
	"uid",
	"gid",
	"file_mode",
	"dir_mode",
	"kernel_readahead",
	NULL,
};

const char *const *config_mount_keys(void)
{
	return mount_keys;
}

void config_set_mount_handler(struct config *cfg, config_mount_fn fn,
			      void *user)
{
	cfg->mount_fn = fn;
	cfg->mount_user = user;
}

/* A parsed file. */
struct conf_file {
	char *path;
	char *text;
	GKeyFile *kf;
};

/* What a key is set to, and where: "PATH:LINE: [GROUP]". */
struct conf_value {
	char *value;
	char *where;
};

/* A group that applies to the mount, for sorting by specificity. */
struct conf_group {
	gsize level; /* 0 [default], 1 + strlen(prefix) for [s3://...] */
	guint file;
	guint order;
	char *name;
};

static void conf_file_free(gpointer p)
{
	struct conf_file *f = p;

	g_free(f->path);
	g_free(f->text);
	if (f->kf)
		g_key_file_unref(f->kf);
	g_free(f);
}

static void conf_group_clear(gpointer p)
{
	struct conf_group *g = p;

	g_free(g->name);
}

static void conf_value_free(gpointer p)
{
	struct conf_value *v = p;

	g_free(v->value);
	g_free(v->where);
	g_free(v);
}

/* The line of "[@group]", or of @key in it if @key; the last one, as
 * GKeyFile keeps the last value of a key; 0 if not found. */
static guint conf_line(const char *text, const char *group, const char *key)
{
	g_auto(GStrv) lines = g_strsplit(text, "\n", -1);
	gboolean in_group = FALSE;
	gsize klen = key ? strlen(key) : 0;
	guint found = 0;
	guint i;

	for (i = 0; lines[i]; i++) {
		const char *l = lines[i];

		while (*l == ' ' || *l == '\t')
			l++;
		if (*l == '[') {
			const char *end = strrchr(l, ']');

			in_group = end &&
				   (gsize)(end - l - 1) == strlen(group) &&
				   strncmp(l + 1, group, end - l - 1) == 0;
			if (in_group && !key)
				found = i + 1;
			continue;
		}
		if (!in_group || !key || strncmp(l, key, klen) != 0)
			continue;
		l += klen;
		while (*l == ' ' || *l == '\t')
			l++;
		if (*l == '=')
			found = i + 1;
	}
	return found;
}

static char *conf_where(const struct conf_file *f, const char *group,
			const char *key)
{
	g_autofree char *p = log_escape(f->path, -1);
	g_autofree char *g = log_escape(group, -1);
	guint line = conf_line(f->text, group, key);

	if (!line)
		return g_strdup_printf("%s: [%s]", p, g);
	return g_strdup_printf("%s:%u: [%s]", p, line, g);
}

/*
 * Reads @path into @f->text.  FALSE with no error: it does not exist and
 * need not.  Trust as for ssh's files: root's or ours, written by nobody
 * else; checked on the descriptor that is read.
 */
static gboolean conf_read(struct conf_file *f, gboolean must_exist,
			  GError **error)
{
	g_autofree char *p = log_escape(f->path, -1);
	GString *text = NULL;
	struct stat st;
	char buf[8192];
	ssize_t n;
	int err = 0;
	int fd;

	fd = open(f->path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (fd < 0) {
		err = errno;
		if (err == ENOENT && !must_exist)
			return FALSE;
		g_set_error(error, BFS_ERROR, err, "config file '%s': %s", p,
			    g_strerror(err));
		return FALSE;
	}
	if (fstat(fd, &st) < 0) {
		err = errno;
		g_set_error(error, BFS_ERROR, err, "config file '%s': %s", p,
			    g_strerror(err));
	} else if (!S_ISREG(st.st_mode)) {
		g_set_error(error, BFS_ERROR, EINVAL,
			    "config file '%s': not a regular file", p);
	} else if (st.st_uid != 0 && st.st_uid != geteuid()) {
		g_set_error(error, BFS_ERROR, EACCES,
			    "config file '%s': owned by uid %u, neither root "
			    "nor the user running bucketfs: not trusted",
			    p, (unsigned)st.st_uid);
	} else if (st.st_mode & (S_IWGRP | S_IWOTH)) {
		g_set_error(error, BFS_ERROR, EACCES,
			    "config file '%s': others may write it (mode "
			    "%04o): not trusted; chmod go-w '%s'",
			    p, (unsigned)(st.st_mode & 07777), p);
	} else {
		text = g_string_new(NULL);
		while ((n = read(fd, buf, sizeof(buf))) != 0) {
			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0 || text->len + (gsize)n > CONFIG_FILE_MAX)
				break;
			g_string_append_len(text, buf, n);
		}
		if (n < 0) {
			err = errno;
			g_set_error(error, BFS_ERROR, err,
				    "config file '%s': %s", p, g_strerror(err));
		} else if (n > 0) {
			g_set_error(error, BFS_ERROR, EFBIG,
				    "config file '%s': larger than %d bytes", p,
				    CONFIG_FILE_MAX);
		}
	}
	close(fd);
	if (error && *error) {
		if (text)
			g_string_free(text, TRUE);
		return FALSE;
	}
	f->text = g_string_free(text, FALSE);
	return TRUE;
}

/* Names a secret: never in the file (see config.h). */
static gboolean conf_key_secret(const struct conf_file *f, const char *group,
				const char *key, GError **error)
{
	g_autofree char *where = conf_where(f, group, key);
	g_autofree char *k = log_escape(key, -1);

	g_set_error(
		error, BFS_ERROR, EINVAL,
		"%s: key '%s': secrets are not accepted in the config file; "
		"use AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY or a "
		"profile (profile=NAME) in the AWS credentials file",
		where, k);
	return FALSE;
}

static gboolean mount_key_find(const char *key, gboolean *flag)
{
	gsize len = strlen(key);
	guint i;

	for (i = 0; mount_keys[i]; i++) {
		const char *m = mount_keys[i];

		if (strncmp(m, key, len) == 0 &&
		    (m[len] == '\0' || (m[len] == '?' && m[len + 1] == '\0'))) {
			*flag = m[len] == '?';
			return TRUE;
		}
	}
	return FALSE;
}

/* The keys of a file: those of option_defs but rw and config, and the
 * mount options. */
static gboolean conf_key_known(const char *key)
{
	const struct option_def *def = option_find(key);
	gboolean flag;

	if (def)
		return strcmp(key, "rw") != 0 && strcmp(key, "config") != 0;
	return mount_key_find(key, &flag);
}

/*
 * Which mounts @group applies to: *@level 0 for [default], else 1 plus the
 * length of its prefix if it is [s3://BUCKET[/PREFIX]] for @cfg's bucket
 * and a prefix of its prefix; -1 if it is for another mount.  FALSE: the
 * group name is not valid.
 */
static gboolean conf_group_level(const struct config *cfg, const char *group,
				 gssize *level)
{
	struct config scratch;
	gboolean ok;

	if (strcmp(group, "default") == 0) {
		*level = 0;
		return TRUE;
	}
	if (g_ascii_strncasecmp(group, "s3://", 5) != 0)
		return FALSE;
	config_init(&scratch);
	ok = config_parse_url(&scratch, group, NULL);
	*level = -1;
	if (ok && strcmp(scratch.bucket, cfg->bucket) == 0 &&
	    g_str_has_prefix(cfg->prefix, scratch.prefix))
		*level = 1 + (gssize)strlen(scratch.prefix);
	config_clear(&scratch);
	return ok;
}

/* Checks every group and key of @f; adds the groups for this mount. */
static gboolean conf_check(const struct config *cfg, struct conf_file *f,
			   guint file, GArray *groups, GError **error)
{
	g_auto(GStrv) names = g_key_file_get_groups(f->kf, NULL);
	guint i, j;

	for (i = 0; names[i]; i++) {
		g_auto(GStrv) keys =
			g_key_file_get_keys(f->kf, names[i], NULL, NULL);
		struct conf_group g = { .file = file };
		gssize level;

		if (!conf_group_level(cfg, names[i], &level)) {
			g_autofree char *where = conf_where(f, names[i], NULL);

			g_set_error(error, BFS_ERROR, EINVAL,
				    "%s: unknown group: expected [default] or "
				    "[s3://BUCKET[/PREFIX]]",
				    where);
			return FALSE;
		}
		for (j = 0; keys && keys[j]; j++) {
			g_autofree char *where = NULL;
			g_autofree char *k = NULL;

			if (option_looks_secret(keys[j]))
				return conf_key_secret(f, names[i], keys[j],
						       error);
			if (conf_key_known(keys[j]))
				continue;
			where = conf_where(f, names[i], keys[j]);
			k = log_escape(keys[j], -1);
			g_set_error(error, BFS_ERROR, EINVAL,
				    "%s: unknown key '%s' (the keys are the "
				    "-o options; see bucketfs.conf(5))",
				    where, k);
			return FALSE;
		}
		if (level < 0)
			continue;
		g.level = (gsize)level;
		g.order = groups->len;
		g.name = g_strdup(names[i]);
		g_array_append_val(groups, g);
	}
	return TRUE;
}

static gint conf_group_cmp(gconstpointer a, gconstpointer b)
{
	const struct conf_group *x = a;
	const struct conf_group *y = b;

	if (x->level != y->level)
		return x->level < y->level ? -1 : 1;
	if (x->file != y->file)
		return x->file < y->file ? -1 : 1;
	return x->order < y->order ? -1 : x->order > y->order;
}

/* The files to read, in increasing precedence; *@must_exist for a named
 * one. */
static GPtrArray *conf_paths(const struct config *cfg, gboolean *must_exist)
{
	GPtrArray *paths = g_ptr_array_new_with_free_func(g_free);
	const char *named = cfg->config_file;
	g_autofree char *user = NULL;

	if (!named)
		named = env_get("BUCKETFS_CONFIG");
	*must_exist = named != NULL;
	if (named) {
		if (strcmp(named, "none") != 0)
			g_ptr_array_add(paths, g_strdup(named));
		return paths;
	}
	user = g_build_filename(g_get_user_config_dir(), "bucketfs",
				"bucketfs.conf", NULL);
	g_ptr_array_add(paths, g_strdup(CONFIG_SYSTEM_FILE));
	if (strcmp(user, CONFIG_SYSTEM_FILE) != 0)
		g_ptr_array_add(paths, g_steal_pointer(&user));
	return paths;
}

/*
 * Reads, parses and checks @f, adding its groups for this mount to
 * @groups.  *@found is FALSE (and the result TRUE) when it is missing and
 * need not exist.
 */
static gboolean conf_parse(struct config *cfg, struct conf_file *f,
			   gboolean must_exist, guint file, GArray *groups,
			   gboolean *found, GError **error)
{
	g_autoptr(GError) e = NULL;
	g_autofree char *p = NULL;

	*found = FALSE;
	if (!conf_read(f, must_exist, &e)) {
		if (!e)
			return TRUE;
		g_propagate_error(error, g_steal_pointer(&e));
		return FALSE;
	}
	*found = TRUE;
	f->kf = g_key_file_new();
	g_key_file_set_list_separator(f->kf, ';');
	if (!g_key_file_load_from_data(f->kf, f->text, (gsize)-1,
				       G_KEY_FILE_NONE, &e)) {
		p = log_escape(f->path, -1);
		g_set_error(error, BFS_ERROR, EINVAL, "config file '%s': %s", p,
			    e->message);
		return FALSE;
	}
	return conf_check(cfg, f, file, groups, error);
}

/* Overlays the keys of group @g of @f onto @values. */
static gboolean conf_collect(const struct conf_group *g,
			     const struct conf_file *f, GHashTable *values,
			     GError **error)
{
	g_auto(GStrv) keys = g_key_file_get_keys(f->kf, g->name, NULL, NULL);
	guint j;

	for (j = 0; keys && keys[j]; j++) {
		struct conf_value *v = g_new0(struct conf_value, 1);
		g_autoptr(GError) e = NULL;
		g_autofree char *k = NULL;

		v->value = g_key_file_get_string(f->kf, g->name, keys[j], &e);
		v->where = conf_where(f, g->name, keys[j]);
		if (!v->value) {
			k = log_escape(keys[j], -1);
			g_set_error(error, BFS_ERROR, EINVAL,
				    "%s: key '%s': %s", v->where, k,
				    e->message);
			conf_value_free(v);
			return FALSE;
		}
		g_hash_table_replace(values, g_strdup(keys[j]), v);
	}
	return TRUE;
}

/* Reads, parses and checks the files; the settings for this mount. */
static GHashTable *conf_load(struct config *cfg, GError **error)
{
	g_autoptr(GPtrArray) files =
		g_ptr_array_new_with_free_func(conf_file_free);
	g_autoptr(GArray) groups =
		g_array_new(FALSE, FALSE, sizeof(struct conf_group));
	g_autoptr(GHashTable) values = g_hash_table_new_full(
		g_str_hash, g_str_equal, g_free, conf_value_free);
	g_autoptr(GPtrArray) paths = NULL;
	gboolean must_exist;
	gboolean found;
	guint i;

	g_array_set_clear_func(groups, conf_group_clear);
	paths = conf_paths(cfg, &must_exist);
	for (i = 0; i < paths->len; i++) {
		struct conf_file *f = g_new0(struct conf_file, 1);

		f->path = g_strdup(g_ptr_array_index(paths, i));
		g_ptr_array_add(files, f);
		if (!conf_parse(cfg, f, must_exist, files->len - 1, groups,
				&found, error))
			return NULL;
		if (found)
			g_ptr_array_add(cfg->files_read, g_strdup(f->path));
		else
			g_ptr_array_remove_index(files, files->len - 1);
	}

	g_array_sort(groups, conf_group_cmp);
	for (i = 0; i < groups->len; i++) {
		const struct conf_group *g =
			&g_array_index(groups, struct conf_group, i);

		if (!conf_collect(g, g_ptr_array_index(files, g->file), values,
				  error))
			return NULL;
	}
	return g_steal_pointer(&values);
}

/* Whether the environment sets what @key would: it wins over the file. */
static gboolean conf_env_overrides(const char *key)
{
	if (strcmp(key, "endpoint") == 0)
		return env_get("S3_ENDPOINT_URIS") ||
		       env_get("AWS_ENDPOINT_URL_S3") ||
		       env_get("AWS_ENDPOINT_URL");
	if (strcmp(key, "region") == 0)
		return env_get("AWS_REGION") || env_get("AWS_DEFAULT_REGION");
	if (strcmp(key, "ca_file") == 0)
		return env_get("AWS_CA_BUNDLE") != NULL;
	if (strcmp(key, "profile") == 0)
		return env_get("AWS_PROFILE") || env_get("AWS_ACCESS_KEY_ID");
	return FALSE;
}

/* "key" for a true flag, NULL for a false one, else "key=value". */
static gboolean conf_item(const char *key, gboolean flag,
			  const struct conf_value *v, char **item,
			  GError **error)
{
	g_autofree char *s = g_strstrip(g_strdup(v->value));

	*item = NULL;
	if (!flag) {
		*item = g_strdup_printf("%s=%s", key, v->value);
		return TRUE;
	}
	if (strcmp(s, "true") == 0 || strcmp(s, "1") == 0) {
		*item = g_strdup(key);
		return TRUE;
	}
	if (strcmp(s, "false") == 0 || strcmp(s, "0") == 0)
		return TRUE;
	g_free(s);
	s = log_escape(v->value, -1);
	g_set_error(error, BFS_ERROR, EINVAL,
		    "%s: option '%s': '%s' is not true or false", v->where, key,
		    s);
	return FALSE;
}

/* endpoint=URL;URL...: each through the -o parser. */
static gboolean conf_endpoints(struct config *cfg, const struct conf_value *v,
			       GError **error)
{
	g_auto(GStrv) urls = g_strsplit_set(v->value, ";,", -1);
	gboolean from_options = cfg->endpoints_from_options;
	guint i;

	for (i = 0; urls[i]; i++) {
		g_autofree char *item = NULL;

		g_strstrip(urls[i]);
		if (!*urls[i])
			continue;
		item = g_strdup_printf("endpoint=%s", urls[i]);
		if (!option_apply(cfg, item, NULL, FALSE, error)) {
			g_prefix_error(error, "%s: ", v->where);
			return FALSE;
		}
	}
	cfg->endpoints_from_options = from_options;
	if (cfg->endpoints->len > 0) {
		g_free(cfg->endpoint_source);
		cfg->endpoint_source = g_strdup(v->where);
	}
	return TRUE;
}

static gboolean conf_apply_option(struct config *cfg,
				  const struct option_def *def,
				  const struct conf_value *v, GError **error)
{
	g_autofree char *item = NULL;

	if (strcmp(def->name, "endpoint") == 0)
		return conf_endpoints(cfg, v, error);
	if (!conf_item(def->name, def->metavar == NULL, v, &item, error))
		return FALSE;
	if (!item)
		return TRUE;
	if (!option_apply(cfg, item, NULL, FALSE, error)) {
		g_prefix_error(error, "%s: ", v->where);
		return FALSE;
	}
	if (strcmp(def->name, "region") == 0) {
		g_free(cfg->region_source);
		cfg->region_source = g_strdup(v->where);
	}
	return TRUE;
}

static gboolean conf_apply_mount(struct config *cfg, const char *key,
				 gboolean flag, const struct conf_value *v,
				 GError **error)
{
	g_autofree char *item = NULL;

	if (!conf_item(key, flag, v, &item, error))
		return FALSE;
	if (!item || !cfg->mount_fn)
		return TRUE;
	if (!cfg->mount_fn(cfg->mount_user, item, error)) {
		g_prefix_error(error, "%s: ", v->where);
		return FALSE;
	}
	return TRUE;
}

/* The file's settings, in the order of option_defs then mount_keys. */
static gboolean conf_apply(struct config *cfg, GError **error)
{
	g_autoptr(GHashTable) values = conf_load(cfg, error);
	char name[64];
	gboolean flag;
	gsize i;

	if (!values)
		return FALSE;
	for (i = 0; i < G_N_ELEMENTS(option_defs); i++) {
		const char *key = option_defs[i].name;
		const struct conf_value *v = g_hash_table_lookup(values, key);

		if (!v || g_hash_table_contains(cfg->given, key) ||
		    conf_env_overrides(key))
			continue;
		if (!conf_apply_option(cfg, &option_defs[i], v, error))
			return FALSE;
	}
	for (i = 0; mount_keys[i]; i++) {
		const struct conf_value *v;

		g_strlcpy(name, mount_keys[i], sizeof(name));
		name[strcspn(name, "?")] = '\0';
		mount_key_find(name, &flag);
		v = g_hash_table_lookup(values, name);
		if (!v || g_hash_table_contains(cfg->given, name))
			continue;
		if (!conf_apply_mount(cfg, name, flag, v, error))
			return FALSE;
	}
	return TRUE;
}

/* --- config_finish ----------------------------------------------------- */

/*
 * No region given: the instance's, as the AWS SDKs take it, else the
 * default.  A host without IMDS costs at most its 1 s timeouts.
 */
static gboolean region_from_imds(struct config *cfg)
{
	g_autoptr(GError) ierr = NULL;
	g_autofree char *region = cred_chain_imds_region(&ierr);

	if (region && region_valid(region)) {
		cfg->region = g_steal_pointer(&region);
		cfg->region_source = g_strdup("EC2 instance metadata (IMDS)");
		return TRUE;
	}
	cfg->region = g_strdup(DEFAULT_REGION);
	if (!ierr || ierr->code == ENOENT)
		cfg->region_source = g_strdup("default");
	else
		cfg->region_source = g_strdup_printf(
			"default; no region from %s", ierr->message);
	return TRUE;
}

/*
 * Whether the instance metadata may know the region worth signing for:
 * unless every endpoint given (-o, the config file, the environment) is
 * another store than AWS's, or the metadata service was named.  An
 * on-premises mount must not wait on 169.254.169.254 at every start.
 */
static gboolean region_wants_imds(const struct config *cfg)
{
	guint i;

	if (env_get("AWS_EC2_METADATA_SERVICE_ENDPOINT") ||
	    cfg->endpoints->len == 0)
		return TRUE;
	for (i = 0; i < cfg->endpoints->len; i++)
		if (endpoint_is_aws(g_ptr_array_index(cfg->endpoints, i)))
			return TRUE;
	return FALSE;
}

static gboolean finish_region(struct config *cfg, GError **error)
{
	static const char *const vars[] = { "AWS_REGION",
					    "AWS_DEFAULT_REGION" };
	g_autofree char *from_profile = NULL;
	const char *value;
	gsize i;

	if (cfg->region)
		return TRUE;
	for (i = 0; i < G_N_ELEMENTS(vars); i++) {
		value = env_get(vars[i]);
		if (!value)
			continue;
		if (!region_valid(value)) {
			g_autofree char *v = log_escape(value, -1);

			g_set_error(error, BFS_ERROR, EINVAL,
				    "%s: '%s' is not a region name", vars[i],
				    v);
			return FALSE;
		}
		cfg->region = g_strdup(value);
		cfg->region_source = g_strdup(vars[i]);
		return TRUE;
	}

	from_profile = credentials_profile_region(cfg->profile, error);
	if (!from_profile && error && *error) {
		g_prefix_error(error, "the region of the AWS profile: ");
		return FALSE;
	}
	/* Not AWS: IMDS would only cost time (up to a second a step). */
	if (!from_profile && !region_wants_imds(cfg)) {
		cfg->region = g_strdup(DEFAULT_REGION);
		cfg->region_source = g_strdup("default");
		return TRUE;
	}
	if (!from_profile)
		return region_from_imds(cfg);
	value = cfg->profile ? cfg->profile : env_get("AWS_PROFILE");
	if (!region_valid(from_profile)) {
		g_autofree char *v = log_escape(from_profile, -1);

		g_set_error(error, BFS_ERROR, EINVAL,
			    "region of profile '%s' in the AWS config file: "
			    "'%s' is not a region name",
			    value ? value : "default", v);
		return FALSE;
	}
	cfg->region = g_steal_pointer(&from_profile);
	cfg->region_source =
		g_strdup_printf("profile '%s' in the AWS config file",
				value ? value : "default");
	return TRUE;
}

static gboolean endpoints_from_list(struct config *cfg, const char *var,
				    const char *list, GError **error)
{
	g_auto(GStrv) items = g_strsplit(list, ",", -1);
	guint i;

	for (i = 0; items[i]; i++) {
		char *url;

		g_strstrip(items[i]);
		if (!*items[i])
			continue;
		if (!endpoint_parse(items[i], &url, error)) {
			g_prefix_error(error, "%s: ", var);
			return FALSE;
		}
		endpoints_add(cfg->endpoints, url);
	}
	return TRUE;
}

/*
 * The endpoints given: -o endpoint, the config file, else the first of the
 * environment's variables that names any.  None given: the region's AWS
 * endpoint, once the region is known (finish_default_endpoint).
 */
static gboolean finish_endpoints(struct config *cfg, GError **error)
{
	static const char *const vars[] = {
		"S3_ENDPOINT_URIS",
		"AWS_ENDPOINT_URL_S3",
		"AWS_ENDPOINT_URL",
	};
	gsize i;

	if (cfg->endpoints->len > 0) {
		if (cfg->endpoint_source)
			return TRUE; /* from the config file */
		cfg->endpoints_from_options = TRUE;
		cfg->endpoint_source = g_strdup("-o endpoint");
		return TRUE;
	}
	for (i = 0; i < G_N_ELEMENTS(vars); i++) {
		const char *value = env_get(vars[i]);

		if (!value)
			continue;
		if (!endpoints_from_list(cfg, vars[i], value, error))
			return FALSE;
		if (cfg->endpoints->len == 0)
			continue;
		cfg->endpoint_source = g_strdup(vars[i]);
		return TRUE;
	}
	return TRUE;
}

static gboolean finish_default_endpoint(struct config *cfg)
{
	const char *domain;

	if (cfg->endpoints->len > 0)
		return TRUE;
	domain = g_str_has_prefix(cfg->region, "cn-") ? "amazonaws.com.cn"
						      : "amazonaws.com";
	g_ptr_array_add(cfg->endpoints, g_strdup_printf("https://s3.%s.%s",
							cfg->region, domain));
	cfg->endpoint_source =
		g_strdup_printf("default for region %s", cfg->region);
	return TRUE;
}

static gboolean finish_addressing(struct config *cfg, GError **error)
{
	g_autofree char *b = NULL;
	gboolean aws = TRUE;
	guint i;

	if (cfg->addressing == ADDRESSING_PATH)
		return TRUE;
	if (cfg->addressing == ADDRESSING_VIRTUAL) {
		if (bucket_dns_compatible(cfg->bucket, TRUE))
			return TRUE;
		b = log_escape(cfg->bucket, -1);
		g_set_error(error, BFS_ERROR, EINVAL,
			    "option 'addressing': 'virtual' needs a bucket "
			    "name that can be part of a host name, and '%s' "
			    "cannot (use addressing=path)",
			    b);
		return FALSE;
	}
	for (i = 0; i < cfg->endpoints->len; i++)
		aws = aws &&
		      endpoint_is_aws(g_ptr_array_index(cfg->endpoints, i));
	/* Dots break the TLS wildcard match of bucket.s3.amazonaws.com. */
	cfg->addressing = aws && bucket_dns_compatible(cfg->bucket, FALSE)
				  ? ADDRESSING_VIRTUAL
				  : ADDRESSING_PATH;
	return TRUE;
}

static gboolean any_https(const struct config *cfg)
{
	guint i;

	for (i = 0; i < cfg->endpoints->len; i++) {
		if (g_str_has_prefix(g_ptr_array_index(cfg->endpoints, i),
				     "https://"))
			return TRUE;
	}
	return FALSE;
}

static gboolean ca_file_check(const char *path, const char *what,
			      GError **error)
{
	g_autofree char *p = log_escape(path, -1);
	struct stat st;
	int err = 0;
	int fd;

	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (fd < 0)
		err = errno;
	else if (fstat(fd, &st) < 0)
		err = errno;
	else if (S_ISDIR(st.st_mode))
		err = EISDIR;
	if (fd >= 0)
		close(fd);
	if (!err)
		return TRUE;
	g_set_error(error, BFS_ERROR, err, "%s: '%s': %s", what, p,
		    g_strerror(err));
	return FALSE;
}

static gboolean finish_ca_file(struct config *cfg, GError **error)
{
	const char *env = env_get("AWS_CA_BUNDLE");

	if (cfg->ca_file)
		return ca_file_check(cfg->ca_file, "option 'ca_file'", error);
	if (!env || !any_https(cfg))
		return TRUE;
	if (!ca_file_check(env, "AWS_CA_BUNDLE", error))
		return FALSE;
	cfg->ca_file = g_strdup(env);
	return TRUE;
}

gboolean config_finish(struct config *cfg, GError **error)
{
	g_return_val_if_fail(cfg != NULL && cfg->endpoints != NULL, FALSE);
	g_return_val_if_fail(error == NULL || *error == NULL, FALSE);

	if (!cfg->bucket) {
		g_set_error(error, BFS_ERROR, EINVAL,
			    "no bucket given: expected s3://BUCKET[/PREFIX]");
		return FALSE;
	}
	/* Endpoints first: they say whether IMDS may know the region. */
	return conf_apply(cfg, error) && finish_endpoints(cfg, error) &&
	       finish_region(cfg, error) && finish_default_endpoint(cfg) &&
	       finish_addressing(cfg, error) && finish_ca_file(cfg, error);
}

/* --- init, clear, describe, help --------------------------------------- */

void config_init(struct config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->prefix = g_strdup("");
	cfg->endpoints = g_ptr_array_new_with_free_func(g_free);
	cfg->empty_dirs = g_ptr_array_new_with_free_func(g_free);
	cfg->addressing = ADDRESSING_AUTO;
	cfg->connect_timeout = 10;
	cfg->stall_timeout = 30;
	cfg->request_timeout = 0;
	cfg->max_attempts = 10;
	cfg->retry_deadline = CONFIG_DEFAULT_RETRY_DEADLINE;
	cfg->max_connections = 0;
	cfg->given =
		g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
	cfg->files_read = g_ptr_array_new_with_free_func(g_free);
}

void config_clear(struct config *cfg)
{
	g_free(cfg->bucket);
	g_free(cfg->prefix);
	if (cfg->endpoints)
		g_ptr_array_unref(cfg->endpoints);
	if (cfg->empty_dirs)
		g_ptr_array_unref(cfg->empty_dirs);
	g_free(cfg->region);
	g_free(cfg->ca_file);
	g_free(cfg->index_path);
	g_free(cfg->profile);
	g_free(cfg->endpoint_source);
	g_free(cfg->region_source);
	g_free(cfg->config_file);
	if (cfg->given)
		g_hash_table_unref(cfg->given);
	if (cfg->files_read)
		g_ptr_array_unref(cfg->files_read);
	memset(cfg, 0, sizeof(*cfg));
}

static const char *addressing_name(enum addressing a)
{
	switch (a) {
	case ADDRESSING_PATH:
		return "path";
	case ADDRESSING_VIRTUAL:
		return "virtual";
	case ADDRESSING_AUTO:
		break;
	}
	return "auto";
}

static void describe_seconds(GString *s, const char *label, double v)
{
	if (v == 0)
		g_string_append_printf(s, "%-17s none\n", label);
	else
		g_string_append_printf(s, "%-17s %g s\n", label, v);
}

static void describe_endpoints(GString *s, const struct config *cfg)
{
	guint i;

	if (cfg->endpoints->len == 0) {
		g_string_append_printf(s, "%-17s (not resolved yet)\n",
				       "endpoints:");
		return;
	}
	for (i = 0; i < cfg->endpoints->len; i++) {
		g_autofree char *e =
			log_escape(g_ptr_array_index(cfg->endpoints, i), -1);

		g_string_append_printf(s, "%-17s %s", i ? "" : "endpoints:", e);
		if (i == 0 && cfg->endpoint_source)
			g_string_append_printf(s, " (%s)",
					       cfg->endpoint_source);
		g_string_append_c(s, '\n');
	}
}

static void describe_credentials(GString *s, const struct config *cfg)
{
	const char *env = env_get("AWS_PROFILE");
	g_autofree char *p = NULL;

	if (cfg->anonymous) {
		g_string_append_printf(s, "%-17s anonymous (unsigned)\n",
				       "credentials:");
		return;
	}
	if (cfg->profile) {
		p = log_escape(cfg->profile, -1);
		g_string_append_printf(s, "%-17s profile '%s' (-o profile)\n",
				       "credentials:", p);
		return;
	}
	p = log_escape(env ? env : "default", -1);
	g_string_append_printf(s,
			       "%-17s the AWS chain: environment, web "
			       "identity, profile '%s'%s, container, IMDS\n",
			       "credentials:", p, env ? " (AWS_PROFILE)" : "");
}

/* Only when a file was read: tools' output stays as it was without. */
static void describe_files(GString *s, const struct config *cfg)
{
	guint i;

	for (i = 0; cfg->files_read && i < cfg->files_read->len; i++) {
		g_autofree char *p =
			log_escape(g_ptr_array_index(cfg->files_read, i), -1);

		g_string_append_printf(s, "%-17s %s\n",
				       i ? "" : "config file:", p);
	}
}

char *config_describe(const struct config *cfg)
{
	GString *s = g_string_new(NULL);
	g_autofree char *bucket =
		log_escape(cfg->bucket ? cfg->bucket : "?", -1);
	g_autofree char *prefix =
		log_escape(cfg->prefix ? cfg->prefix : "", -1);
	g_autofree char *ca =
		cfg->ca_file ? log_escape(cfg->ca_file, -1) : NULL;
	g_autofree char *index =
		cfg->index_path ? log_escape(cfg->index_path, -1) : NULL;

	g_string_append_printf(s, "%-17s s3://%s/%s\n", "bucket:", bucket,
			       prefix);
	describe_endpoints(s, cfg);
	if (cfg->region)
		g_string_append_printf(
			s, "%-17s %s (%s)\n", "region:", cfg->region,
			cfg->region_source ? cfg->region_source : "?");
	else
		g_string_append_printf(s, "%-17s (not resolved yet)\n",
				       "region:");
	g_string_append_printf(s, "%-17s %s\n",
			       "addressing:", addressing_name(cfg->addressing));
	describe_credentials(s, cfg);
	g_string_append_printf(s, "%-17s %s\n",
			       "ca_file:", ca ? ca : "system default");
	g_string_append_printf(s, "%-17s %s\n",
			       "index:", index ? index : "default location");
	describe_seconds(s, "connect_timeout:", cfg->connect_timeout);
	describe_seconds(s, "stall_timeout:", cfg->stall_timeout);
	describe_seconds(s, "request_timeout:", cfg->request_timeout);
	g_string_append_printf(s, "%-17s %u\n",
			       "max_attempts:", cfg->max_attempts);
	describe_seconds(s, "retry_deadline:", cfg->retry_deadline);
	if (cfg->max_connections)
		g_string_append_printf(s, "%-17s %u\n", "max_connections:",
				       cfg->max_connections);
	else
		g_string_append_printf(
			s, "%-17s %d (default)\n",
			"max_connections:", CONFIG_DEFAULT_MAX_CONNECTIONS);
	if (cfg->event_threads)
		g_string_append_printf(s, "%-17s %u\n",
				       "event_threads:", cfg->event_threads);
	if (cfg->receive_curl)
		g_string_append_printf(s, "%-17s curl\n", "http_receive:");
	g_string_append_printf(s, "%-17s %s\n", "writes:",
			       cfg->read_only
				       ? "none (-o ro)"
				       : "new names only; the index's objects "
					 "read-only");
	describe_files(s, cfg);
	return g_string_free(s, FALSE);
}

/* The text as it is shown; lines of at most 72 columns. */
/* clang-format off */
static const char config_help[] =
"S3 options (-o OPT[,OPT...]; write a comma in a value as \\,):\n"
"    endpoint=URL          S3 endpoint, http[s]://HOST[:PORT]; repeat it\n"
"                          for several endpoints (default:\n"
"                          $S3_ENDPOINT_URIS, a comma list, else\n"
"                          $AWS_ENDPOINT_URL_S3 or $AWS_ENDPOINT_URL,\n"
"                          else AWS)\n"
"    region=NAME           signing region (default: $AWS_REGION,\n"
"                          $AWS_DEFAULT_REGION, the profile's region,\n"
"                          else us-east-1)\n"
"    addressing=STYLE      path, virtual or auto (default auto: virtual\n"
"                          for AWS, else path)\n"
"    ca_file=PATH          CA certificates for https (default:\n"
"                          $AWS_CA_BUNDLE, else the system's)\n"
"    index=PATH            the listing index file (default: the\n"
"                          standard location)\n"
"    profile=NAME          AWS profile for keys and region (default:\n"
"                          $AWS_PROFILE, else default)\n"
"    anonymous             send unsigned requests (public buckets)\n"
"    connect_timeout=SECS  connect timeout, 0 < SECS <= 3600 (default 10)\n"
"    stall_timeout=SECS    give up a transfer after SECS without\n"
"                          progress, 0 < SECS <= 3600 (default 30)\n"
"    request_timeout=SECS  limit for one attempt, 0 = none, at most\n"
"                          86400 (default 0)\n"
"    max_attempts=N        attempts per request, 1..100 (default 10)\n"
"    retry_deadline=SECS   while a request is younger than SECS, attempts\n"
"                          that reach no endpoint (refused, connect\n"
"                          timeout, DNS), at most 1 s apart, and those\n"
"                          that stall (stall_timeout) are retried and not\n"
"                          counted in max_attempts: a store down or\n"
"                          silent that long is waited for; 0 = count\n"
"                          them, at most 86400 (default 60)\n"
"    max_connections=N     connection limit, 1..1000000 (default 64)\n"
"    event_threads=N       HTTP event threads, each with its share of\n"
"                          max_connections, 1..64 (default: a quarter\n"
"                          of the cores, 2 to 16)\n"
"    http_receive=direct|curl  direct (default): GETs to http://\n"
"                          endpoints run on bucketfs's own connections,\n"
"                          bodies received straight into their buffer;\n"
"                          curl: every request through libcurl (HTTPS\n"
"                          and proxies always are)\n"
"    ro                    no writes at all: every write gets EROFS\n"
"                          (by default names the index lacks may be\n"
"                          made, written and removed; rw, which\n"
"                          mount(8) passes, is that default)\n"
"    config=PATH           the config file with defaults for these\n"
"                          options, or none (default: $BUCKETFS_CONFIG,\n"
"                          else /etc/bucketfs/bucketfs.conf and\n"
"                          ~/.config/bucketfs/bucketfs.conf; see\n"
"                          bucketfs.conf(5))\n"
"    empty_dirs=PATH[:PATH...]\n"
"                          directories to show even where the bucket\n"
"                          has no key below them (S3 cannot hold an\n"
"                          empty directory), e.g. valid:test for DLIO;\n"
"                          relative to the root; repeatable\n"
"\n"
"Credentials come from $AWS_ACCESS_KEY_ID and $AWS_SECRET_ACCESS_KEY\n"
"(and $AWS_SESSION_TOKEN), else from the profile in ~/.aws/credentials\n"
"or ~/.aws/config (see $AWS_SHARED_CREDENTIALS_FILE, $AWS_CONFIG_FILE).\n"
"There is deliberately no option for a secret key: options are visible\n"
"in ps and /proc/mounts.\n";
/* clang-format on */

const char *config_options_help(void)
{
	return config_help;
}
