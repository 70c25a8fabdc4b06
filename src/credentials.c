/* SPDX-License-Identifier: GPL-2.0-or-later */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "credentials.h"
#include "error.h"

/* The AWS files are a few KiB; anything this big is not one. */
#define AWS_FILE_MAX (1024 * 1024)

#define NO_CREDENTIALS_HELP                                                    \
	"set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or put "             \
	"aws_access_key_id and aws_secret_access_key in a profile in %s "      \
	"(chosen with -o profile=NAME or AWS_PROFILE, else 'default'), or "    \
	"use -o anonymous for a public bucket"

enum ini_key {
	INI_ACCESS_KEY_ID,
	INI_SECRET_ACCESS_KEY,
	INI_SESSION_TOKEN,
	INI_REGION,
	INI_ROLE_ARN,
	INI_SOURCE_PROFILE,
	INI_CREDENTIAL_SOURCE,
	INI_CREDENTIAL_PROCESS,
	INI_WEB_IDENTITY_TOKEN_FILE,
	INI_ROLE_SESSION_NAME,
	INI_EXTERNAL_ID,
	INI_DURATION_SECONDS,
	INI_SSO_START_URL,
	INI_SSO_SESSION,
	INI_N_KEYS,
};

static const char *const ini_key_names[INI_N_KEYS] = {
	[INI_ACCESS_KEY_ID] = "aws_access_key_id",
	[INI_SECRET_ACCESS_KEY] = "aws_secret_access_key",
	[INI_SESSION_TOKEN] = "aws_session_token",
	[INI_REGION] = "region",
	[INI_ROLE_ARN] = "role_arn",
	[INI_SOURCE_PROFILE] = "source_profile",
	[INI_CREDENTIAL_SOURCE] = "credential_source",
	[INI_CREDENTIAL_PROCESS] = "credential_process",
	[INI_WEB_IDENTITY_TOKEN_FILE] = "web_identity_token_file",
	[INI_ROLE_SESSION_NAME] = "role_session_name",
	[INI_EXTERNAL_ID] = "external_id",
	[INI_DURATION_SECONDS] = "duration_seconds",
	[INI_SSO_START_URL] = "sso_start_url",
	[INI_SSO_SESSION] = "sso_session",
};

/* What one file says about one profile. */
struct ini_profile {
	gboolean found;		  /* the section exists */
	char *values[INI_N_KEYS]; /* NULL if absent */
	guint lines[INI_N_KEYS];  /* where each value was set */
};

struct ini_parser {
	const char *path;
	const char *profile;
	gboolean config_style; /* [profile NAME] rather than [NAME] */
	struct ini_profile *out;
	guint lineno;
	gboolean in_section;
	gboolean in_target;
	gboolean key_open; /* deeper-indented lines continue a key */
	gsize key_indent;
};

void credentials_secret_free(char *s)
{
	if (!s)
		return;
	explicit_bzero(s, strlen(s));
	g_free(s);
}

static void ini_profile_clear(struct ini_profile *p)
{
	int i;

	for (i = 0; i < INI_N_KEYS; i++)
		g_clear_pointer(&p->values[i], credentials_secret_free);
	p->found = FALSE;
}

const char *credentials_env_get(const char *name)
{
	const char *value = g_getenv(name);

	return value && *value ? value : NULL;
}

static gboolean is_blank(char c)
{
	return c == ' ' || c == '\t';
}

static char *aws_file_path(const char *env_name, const char *leaf)
{
	const char *path = credentials_env_get(env_name);
	const char *home = credentials_env_get("HOME");

	/* g_get_home_dir() caches; the AWS CLI reads $HOME every time. */
	if (!home)
		home = g_get_home_dir();
	if (!path)
		return g_build_filename(home, ".aws", leaf, NULL);
	if (path[0] == '~' && (path[1] == '/' || path[1] == '\0'))
		return g_build_filename(home, path + 1, NULL);
	return g_strdup(path);
}

/* Frees a buffer that may hold secrets. */
static void buffer_free(char *buf, gsize size)
{
	if (!buf)
		return;
	explicit_bzero(buf, size);
	g_free(buf);
}

static gboolean set_errno_error(GError **error, int err, const char *path)
{
	g_set_error(error, BFS_ERROR, err, "%s: %s", path, g_strerror(err));
	return FALSE;
}

/* Reads all of @fd into *@buf (NUL-terminated, @size bytes allocated). */
static gboolean fd_read_all(int fd, const char *path, char **buf, gsize *size,
			    gsize *len, GError **error)
{
	for (;;) {
		ssize_t n;

		if (*len + 1 >= *size) {
			char *bigger;

			if (*size > AWS_FILE_MAX) {
				g_set_error(error, BFS_ERROR, EFBIG,
					    "%s: larger than %d bytes, not an "
					    "AWS configuration file",
					    path, AWS_FILE_MAX);
				return FALSE;
			}
			/* Copy by hand: g_realloc() would leave secrets
			 * behind in freed memory. */
			bigger = g_malloc(*size * 2);
			memcpy(bigger, *buf, *len);
			buffer_free(*buf, *size);
			*buf = bigger;
			*size *= 2;
		}
		n = read(fd, *buf + *len, *size - *len - 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return set_errno_error(error, errno, path);
		if (n == 0)
			break;
		*len += (gsize)n;
	}
	(*buf)[*len] = '\0';
	return TRUE;
}

/*
 * Reads @path into a newly allocated buffer (free with buffer_free() and
 * *@size).  A missing file gives TRUE with *@buf NULL.
 */
static gboolean aws_file_read(const char *path, char **buf, gsize *size,
			      gsize *len, GError **error)
{
	struct stat st;
	gboolean ok;
	int fd;

	*buf = NULL;
	*size = 0;
	*len = 0;
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (fd < 0 && errno == ENOENT)
		return TRUE;
	if (fd < 0)
		return set_errno_error(error, errno, path);
	if (fstat(fd, &st) < 0) {
		set_errno_error(error, errno, path);
		close(fd);
		return FALSE;
	}
	*size = MAX((gsize)4096, (gsize)st.st_size + 2);
	*size = MIN(*size, (gsize)AWS_FILE_MAX + 2);
	*buf = g_malloc(*size);
	ok = fd_read_all(fd, path, buf, size, len, error);
	close(fd);
	if (!ok) {
		buffer_free(*buf, *size);
		*buf = NULL;
	}
	return ok;
}

static gboolean ini_error(struct ini_parser *ps, GError **error,
			  const char *problem)
{
	/* Never the line itself: it may hold a secret. */
	g_set_error(error, BFS_ERROR, EINVAL, "%s:%u: %s", ps->path, ps->lineno,
		    problem);
	return FALSE;
}

static gboolean ini_section_matches(const struct ini_parser *ps,
				    const char *name, gsize len)
{
	gsize plen = strlen(ps->profile);
	gsize i = strlen("profile");

	if (len == plen && memcmp(name, ps->profile, len) == 0)
		return !ps->config_style || strcmp(ps->profile, "default") == 0;
	if (!ps->config_style || len <= i || memcmp(name, "profile", i) != 0 ||
	    !is_blank(name[i]))
		return FALSE;
	while (i < len && is_blank(name[i]))
		i++;
	return len - i == plen && memcmp(name + i, ps->profile, plen) == 0;
}

static gboolean ini_parse_section(struct ini_parser *ps, const char *s, gsize n,
				  GError **error)
{
	const char *close = NULL;
	gsize i;

	/* Like configparser: the header ends at the last ']'. */
	for (i = n; i > 1; i--) {
		if (s[i - 1] == ']') {
			close = s + i - 1;
			break;
		}
	}
	if (!close)
		return ini_error(ps, error, "section header without ']'");
	s++;
	while (s < close && is_blank(*s))
		s++;
	while (close > s && is_blank(close[-1]))
		close--;
	if (close == s)
		return ini_error(ps, error, "empty section name");

	ps->in_section = TRUE;
	ps->key_open = FALSE;
	ps->in_target = ini_section_matches(ps, s, (gsize)(close - s));
	if (ps->in_target)
		ps->out->found = TRUE;
	return TRUE;
}

static void ini_store(struct ini_parser *ps, const char *key, gsize klen,
		      const char *value, gsize vlen)
{
	int i;

	for (i = 0; i < INI_N_KEYS; i++) {
		if (strlen(ini_key_names[i]) == klen &&
		    g_ascii_strncasecmp(key, ini_key_names[i], klen) == 0)
			break;
	}
	if (i == INI_N_KEYS)
		return;
	credentials_secret_free(ps->out->values[i]);
	ps->out->values[i] = g_strndup(value, vlen);
	ps->out->lines[i] = ps->lineno;
}

static gboolean ini_parse_setting(struct ini_parser *ps, const char *s, gsize n,
				  gsize indent, GError **error)
{
	const char *delim = NULL;
	gsize klen;
	gsize i;

	for (i = 0; i < n && !delim; i++) {
		if (s[i] == '=' || s[i] == ':')
			delim = s + i;
	}
	if (!delim)
		return ini_error(ps, error,
				 "expected 'key = value', '[section]' or a "
				 "comment");
	if (!ps->in_section)
		return ini_error(ps, error,
				 "setting before the first [section] header");
	klen = (gsize)(delim - s);
	while (klen > 0 && is_blank(s[klen - 1]))
		klen--;
	if (klen == 0)
		return ini_error(ps, error, "setting without a name");

	ps->key_open = TRUE;
	ps->key_indent = indent;
	if (!ps->in_target)
		return TRUE;
	delim++;
	n -= (gsize)(delim - s);
	while (n > 0 && is_blank(*delim)) {
		delim++;
		n--;
	}
	ini_store(ps, s, klen, delim, n);
	return TRUE;
}

static gboolean ini_parse_line(struct ini_parser *ps, const char *line,
			       gsize len, GError **error)
{
	const char *s;
	gsize indent = 0;
	gsize n;

	while (indent < len && is_blank(line[indent]))
		indent++;
	s = line + indent;
	n = len - indent;
	while (n > 0 && (is_blank(s[n - 1]) || s[n - 1] == '\r'))
		n--;
	if (n == 0)
		return TRUE;
	/* Nested settings ("s3 =" then indented lines): not ours. */
	if (ps->key_open && indent > ps->key_indent)
		return TRUE;
	if (s[0] == '#' || s[0] == ';')
		return TRUE;
	if (s[0] == '[')
		return ini_parse_section(ps, s, n, error);
	return ini_parse_setting(ps, s, n, indent, error);
}

static gboolean ini_parse(struct ini_parser *ps, const char *buf, gsize len,
			  GError **error)
{
	const char *p = buf;
	const char *end = buf + len;

	if (memchr(buf, '\0', len)) {
		g_set_error(error, BFS_ERROR, EINVAL,
			    "%s: contains a NUL byte, not a text file",
			    ps->path);
		return FALSE;
	}
	if (len >= 3 && memcmp(p, "\xef\xbb\xbf", 3) == 0)
		p += 3;
	while (p < end) {
		const char *nl = memchr(p, '\n', (gsize)(end - p));
		const char *eol = nl ? nl : end;

		ps->lineno++;
		if (!ini_parse_line(ps, p, (gsize)(eol - p), error))
			return FALSE;
		p = nl ? nl + 1 : end;
	}
	return TRUE;
}

/*
 * Collects the settings of @profile from @path into @out (cleared first).
 * A missing file leaves @out->found FALSE.
 */
static gboolean ini_load(const char *path, const char *profile,
			 gboolean config_style, struct ini_profile *out,
			 GError **error)
{
	struct ini_parser ps = {
		.path = path,
		.profile = profile,
		.config_style = config_style,
		.out = out,
	};
	char *buf;
	gsize size;
	gsize len;
	gboolean ok;

	ini_profile_clear(out);
	if (!aws_file_read(path, &buf, &size, &len, error))
		return FALSE;
	if (!buf)
		return TRUE;
	ok = ini_parse(&ps, buf, len, error);
	buffer_free(buf, size);
	if (!ok)
		ini_profile_clear(out);
	return ok;
}

static gboolean has_control_char(const char *s)
{
	for (; *s; s++) {
		if ((guchar)*s < 0x20 || *s == 0x7f)
			return TRUE;
	}
	return FALSE;
}

struct credentials *credentials_new(const char *access_key_id,
				    const char *secret_access_key,
				    const char *session_token,
				    const char *provider, char *source)
{
	struct credentials *creds = g_new0(struct credentials, 1);

	creds->access_key_id = g_strdup(access_key_id);
	creds->secret_access_key = g_strdup(secret_access_key);
	creds->session_token = g_strdup(session_token);
	creds->provider = g_strdup(provider);
	creds->source = source;
	return creds;
}

void credentials_free(struct credentials *creds)
{
	if (!creds)
		return;
	credentials_secret_free(creds->access_key_id);
	credentials_secret_free(creds->secret_access_key);
	credentials_secret_free(creds->session_token);
	g_free(creds->source);
	g_free(creds->provider);
	g_free(creds->role);
	g_free(creds);
}

static gboolean env_check(const char *name, const char *value, GError **error)
{
	if (!value || !has_control_char(value))
		return TRUE;
	g_set_error(error, BFS_ERROR, EINVAL, "%s contains a control character",
		    name);
	return FALSE;
}

/* TRUE with *@out NULL when the environment has no keys. */
gboolean credentials_from_environment(struct credentials **out, GError **error)
{
	const char *id = credentials_env_get("AWS_ACCESS_KEY_ID");
	const char *secret = credentials_env_get("AWS_SECRET_ACCESS_KEY");
	const char *token = credentials_env_get("AWS_SESSION_TOKEN");

	*out = NULL;
	if (!id && !secret)
		return TRUE;
	if (!secret) {
		g_set_error(error, BFS_ERROR, EINVAL,
			    "AWS_ACCESS_KEY_ID is set but "
			    "AWS_SECRET_ACCESS_KEY is not: set both, or unset "
			    "AWS_ACCESS_KEY_ID to use a profile");
		return FALSE;
	}
	if (!id) {
		g_set_error(error, BFS_ERROR, EINVAL,
			    "AWS_SECRET_ACCESS_KEY is set but "
			    "AWS_ACCESS_KEY_ID is not: set both, or unset "
			    "AWS_SECRET_ACCESS_KEY to use a profile");
		return FALSE;
	}
	if (!env_check("AWS_ACCESS_KEY_ID", id, error) ||
	    !env_check("AWS_SECRET_ACCESS_KEY", secret, error) ||
	    !env_check("AWS_SESSION_TOKEN", token, error))
		return FALSE;
	*out = credentials_new(id, secret, token, "environment",
			       g_strdup("environment (AWS_ACCESS_KEY_ID)"));
	return TRUE;
}

static gboolean ini_check(const char *name, const char *path,
			  const struct ini_profile *p, enum ini_key key,
			  gboolean required, GError **error)
{
	const char *value = p->values[key];
	const char *problem = NULL;

	if (!value && required) {
		g_set_error(error, BFS_ERROR, EINVAL,
			    "profile '%s' in %s: %s is missing", name, path,
			    ini_key_names[key]);
		return FALSE;
	}
	if (value && !*value && required)
		problem = "is empty";
	else if (value && has_control_char(value))
		problem = "contains a control character";
	if (!problem)
		return TRUE;
	g_set_error(error, BFS_ERROR, EINVAL, "profile '%s' in %s:%u: %s %s",
		    name, path, p->lines[key], ini_key_names[key], problem);
	return FALSE;
}

static struct credentials *credentials_from_ini(const char *name,
						const char *path,
						const struct ini_profile *p,
						GError **error)
{
	const char *token = p->values[INI_SESSION_TOKEN];

	if (!ini_check(name, path, p, INI_ACCESS_KEY_ID, TRUE, error) ||
	    !ini_check(name, path, p, INI_SECRET_ACCESS_KEY, TRUE, error) ||
	    !ini_check(name, path, p, INI_SESSION_TOKEN, FALSE, error))
		return NULL;
	return credentials_new(
		p->values[INI_ACCESS_KEY_ID], p->values[INI_SECRET_ACCESS_KEY],
		token && *token ? token : NULL, "profile",
		g_strdup_printf("profile '%s' in %s", name, path));
}

static gboolean ini_has_keys(const struct ini_profile *p)
{
	return p->values[INI_ACCESS_KEY_ID] || p->values[INI_SECRET_ACCESS_KEY];
}

/* Explains why neither file had keys for @name. */
static void credentials_missing(const char *name, gboolean named,
				const char *cred_path,
				const struct ini_profile *cred,
				const char *conf_path,
				const struct ini_profile *conf, GError **error)
{
	const char *where = cred->found ? cred_path : conf_path;

	if (!named && !cred->found && !conf->found) {
		g_set_error(error, BFS_ERROR, ENOENT,
			    "no credentials found: " NO_CREDENTIALS_HELP,
			    cred_path);
	} else if (!named) {
		g_set_error(error, BFS_ERROR, ENOENT,
			    "no credentials found (profile 'default' in %s "
			    "has no aws_access_key_id): " NO_CREDENTIALS_HELP,
			    where, cred_path);
	} else if (!cred->found && !conf->found) {
		g_set_error(error, BFS_ERROR, ENOENT,
			    "profile '%s' not found in %s or %s", name,
			    cred_path, conf_path);
	} else {
		g_set_error(error, BFS_ERROR, EINVAL,
			    "profile '%s' in %s: aws_access_key_id is missing "
			    "(static keys are needed here)",
			    name, where);
	}
}

static struct credentials *credentials_from_profile(const char *profile,
						    GError **error)
{
	const char *name =
		profile ? profile : credentials_env_get("AWS_PROFILE");
	gboolean named = name != NULL;
	g_autofree char *cred_path = NULL;
	g_autofree char *conf_path = NULL;
	struct ini_profile cred = { 0 };
	struct ini_profile conf = { 0 };
	struct credentials *creds = NULL;

	if (!name)
		name = "default";
	cred_path = aws_file_path("AWS_SHARED_CREDENTIALS_FILE", "credentials");
	conf_path = aws_file_path("AWS_CONFIG_FILE", "config");

	if (!ini_load(cred_path, name, FALSE, &cred, error))
		goto out;
	if (ini_has_keys(&cred)) {
		creds = credentials_from_ini(name, cred_path, &cred, error);
		goto out;
	}
	if (!ini_load(conf_path, name, TRUE, &conf, error))
		goto out;
	if (ini_has_keys(&conf))
		creds = credentials_from_ini(name, conf_path, &conf, error);
	else
		credentials_missing(name, named, cred_path, &cred, conf_path,
				    &conf, error);
out:
	ini_profile_clear(&cred);
	ini_profile_clear(&conf);
	return creds;
}

struct credentials *credentials_load(const char *profile, gboolean anonymous,
				     GError **error)
{
	struct credentials *creds = NULL;

	g_return_val_if_fail(error == NULL || *error == NULL, NULL);

	if (anonymous) {
		creds = credentials_new(NULL, NULL, NULL, "anonymous",
					g_strdup("anonymous"));
		creds->anonymous = TRUE;
		return creds;
	}
	if (!profile) {
		if (!credentials_from_environment(&creds, error))
			return NULL;
		if (creds)
			return creds;
	}
	return credentials_from_profile(profile, error);
}

gboolean credentials_equal(const struct credentials *a,
			   const struct credentials *b)
{
	g_return_val_if_fail(a != NULL && b != NULL, FALSE);

	if (a->anonymous || b->anonymous)
		return a->anonymous == b->anonymous;
	return g_strcmp0(a->access_key_id, b->access_key_id) == 0 &&
	       g_strcmp0(a->secret_access_key, b->secret_access_key) == 0 &&
	       g_strcmp0(a->session_token, b->session_token) == 0;
}

char *credentials_profile_region(const char *profile, GError **error)
{
	const char *name =
		profile ? profile : credentials_env_get("AWS_PROFILE");
	g_autofree char *conf_path = NULL;
	struct ini_profile conf = { 0 };
	const char *region;
	char *result = NULL;

	g_return_val_if_fail(error == NULL || *error == NULL, NULL);

	conf_path = aws_file_path("AWS_CONFIG_FILE", "config");
	if (!ini_load(conf_path, name ? name : "default", TRUE, &conf, error))
		return NULL;
	region = conf.values[INI_REGION];
	if (region && *region)
		result = g_strdup(region);
	ini_profile_clear(&conf);
	return result;
}

void aws_profile_clear(struct aws_profile *p)
{
	g_free(p->name);
	g_free(p->cred_path);
	g_free(p->conf_path);
	g_free(p->role_arn);
	g_free(p->source_profile);
	g_free(p->credential_source);
	g_free(p->credential_process);
	g_free(p->web_identity_token_file);
	g_free(p->role_session_name);
	g_free(p->external_id);
	g_free(p->duration_seconds);
	g_free(p->region);
	memset(p, 0, sizeof(*p));
}

/* The credentials file's value, else the config file's; NULL if empty. */
static char *profile_value(const struct ini_profile *cred,
			   const struct ini_profile *conf, enum ini_key key)
{
	const char *v = cred->values[key];

	if (!v || !*v)
		v = conf->values[key];
	return v && *v ? g_strdup(v) : NULL;
}

gboolean aws_profile_read(const char *name, struct aws_profile *out,
			  GError **error)
{
	struct ini_profile cred = { 0 };
	struct ini_profile conf = { 0 };
	gboolean ok = FALSE;

	g_return_val_if_fail(name != NULL, FALSE);
	memset(out, 0, sizeof(*out));
	out->name = g_strdup(name);
	out->cred_path =
		aws_file_path("AWS_SHARED_CREDENTIALS_FILE", "credentials");
	out->conf_path = aws_file_path("AWS_CONFIG_FILE", "config");
	if (!ini_load(out->cred_path, name, FALSE, &cred, error) ||
	    !ini_load(out->conf_path, name, TRUE, &conf, error))
		goto out;
	out->found = cred.found || conf.found;
	out->has_keys = ini_has_keys(&cred) || ini_has_keys(&conf);
	out->has_sso = cred.values[INI_SSO_START_URL] ||
		       conf.values[INI_SSO_START_URL] ||
		       cred.values[INI_SSO_SESSION] ||
		       conf.values[INI_SSO_SESSION];
	out->role_arn = profile_value(&cred, &conf, INI_ROLE_ARN);
	out->source_profile = profile_value(&cred, &conf, INI_SOURCE_PROFILE);
	out->credential_source =
		profile_value(&cred, &conf, INI_CREDENTIAL_SOURCE);
	out->credential_process =
		profile_value(&cred, &conf, INI_CREDENTIAL_PROCESS);
	out->web_identity_token_file =
		profile_value(&cred, &conf, INI_WEB_IDENTITY_TOKEN_FILE);
	out->role_session_name =
		profile_value(&cred, &conf, INI_ROLE_SESSION_NAME);
	out->external_id = profile_value(&cred, &conf, INI_EXTERNAL_ID);
	out->duration_seconds =
		profile_value(&cred, &conf, INI_DURATION_SECONDS);
	out->region = profile_value(&cred, &conf, INI_REGION);
	ok = TRUE;
out:
	ini_profile_clear(&cred);
	ini_profile_clear(&conf);
	if (!ok)
		aws_profile_clear(out);
	return ok;
}
