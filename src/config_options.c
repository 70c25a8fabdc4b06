/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * config_options.c - the -o options: the table of options (option_defs),
 * one parser per option, the splitting and unescaping of an -o argument,
 * config_parse_options(), and the --help text that describes them.
 */
#include <errno.h>
#include <string.h>

#include "config.h"
#include "config_internal.h"
#include "error.h"
#include "index.h"
#include "log.h"

#define SECONDS_MAX	    3600.0
#define REQUEST_SECONDS_MAX 86400.0

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

/* --- one parser per option --------------------------------------------- */

static gboolean opt_endpoint(struct config *cfg, const char *name,
			     const char *value, GError **error)
{
	char *url;

	if (!config_endpoint_parse(value, &url, error)) {
		g_prefix_error(error, "option '%s': ", name);
		return FALSE;
	}
	config_endpoints_add(cfg->endpoints, url);
	cfg->endpoints_from_options = TRUE;
	return TRUE;
}

static gboolean opt_region(struct config *cfg, const char *name,
			   const char *value, GError **error)
{
	if (!config_region_valid(value))
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

const struct option_def config_option_defs[] = {
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

const gsize config_n_option_defs = G_N_ELEMENTS(config_option_defs);

const struct option_def *config_option_find(const char *name)
{
	gsize i;

	for (i = 0; i < config_n_option_defs; i++) {
		if (strcmp(config_option_defs[i].name, name) == 0)
			return &config_option_defs[i];
	}
	return NULL;
}

/* Names that could only carry a secret: refused even as pass-through. */
gboolean config_option_looks_secret(const char *name)
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
gboolean config_option_apply(struct config *cfg, const char *item,
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
	if (config_option_looks_secret(name)) {
		g_set_error(error, BFS_ERROR, EINVAL,
			    "option '%s': secrets are not accepted as options "
			    "(they would show in ps and /proc/mounts); use "
			    "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY or a "
			    "profile (-o profile=NAME)",
			    shown);
		return FALSE;
	}
	def = config_option_find(name);
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
		gboolean ok = config_option_apply(cfg, item, passthrough, TRUE,
						  error);

		g_free(item);
		if (!ok)
			return FALSE;
	}
	return TRUE;
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
"    max_connections=N     connection limit, 1..1000000 (default: a\n"
"                          mount takes half its descriptor limit, at\n"
"                          most 1024; the tools 64)\n"
"    event_threads=N       HTTP event threads, each with its share of\n"
"                          max_connections, 1..64 (default: a quarter\n"
"                          of the cores, 2 to 16)\n"
"    http_receive=direct|curl  direct (default): GETs run on bucketfs's\n"
"                          own connections (http and https), bodies\n"
"                          received straight into their buffer;\n"
"                          curl: every request through libcurl (proxies\n"
"                          always are)\n"
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
