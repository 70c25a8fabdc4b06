/* SPDX-License-Identifier: GPL-2.0-or-later */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cred_chain.h"
#include "cred_http.h"
#include "cred_parse.h"
#include "error.h"
#include "log.h"
#include "sigv4.h"

#define STS_VERSION	     "2011-06-15"
#define STS_TIMEOUT_MS	     10000
#define CONTAINER_TIMEOUT_MS 5000
/* A host without IMDS must not wait: the SDKs use 1 s too. */
#define IMDS_TIMEOUT_MS 1000
#define IMDS_TOKEN_TTL	"21600"
#define IMDS_DEFAULT	"http://169.254.169.254"
#define IMDS_DEFAULT_V6 "http://[fd00:ec2::254]"
#define CONTAINER_HOST	"http://169.254.170.2"
/* Token files and process output are small; this is plenty. */
#define SMALL_FILE_MAX (64 * 1024)
/* A credential_process that has said nothing by then is killed. */
#define PROCESS_TIMEOUT_MS 60000
/* A role chain longer than this is a loop. */
#define CHAIN_DEPTH_MAX 5

#define NO_CREDENTIALS_HELP                                                    \
	"set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY; or "                 \
	"AWS_WEB_IDENTITY_TOKEN_FILE and AWS_ROLE_ARN; or a profile "          \
	"(-o profile=NAME or AWS_PROFILE, else 'default') with static keys, "  \
	"role_arn or credential_process in %s or %s; or run where a "          \
	"container credentials endpoint or EC2 instance metadata answers; "    \
	"or use -o anonymous for a public bucket"

/* What one provider did. */
enum outcome {
	NOT_CONFIGURED, /* skip to the next one; a trace line says why */
	ANSWERED,
	FAILED, /* ends the chain */
};

struct chain {
	const struct cred_chain_options *o;
	GPtrArray *trace; /* may be NULL */
};

static const char *env_get(const char *name)
{
	const char *v = g_getenv(name);

	return v && *v ? v : NULL;
}

static void trace_add(struct chain *c, const char *fmt, ...)
	G_GNUC_PRINTF(2, 3);

static void trace_add(struct chain *c, const char *fmt, ...)
{
	va_list ap;

	if (!c->trace)
		return;
	va_start(ap, fmt);
	g_ptr_array_add(c->trace, g_strdup_vprintf(fmt, ap));
	va_end(ap);
}

/* "expires in 3599 s" or "do not expire", for the trace. */
static char *expiry_text(const struct credentials *creds)
{
	if (!creds->expiration)
		return g_strdup("do not expire");
	return g_strdup_printf("expire in %" G_GINT64_FORMAT " s",
			       creds->expiration -
				       g_get_real_time() / G_USEC_PER_SEC);
}

static void trace_answer(struct chain *c, const char *provider,
			 const struct credentials *creds)
{
	g_autofree char *exp = expiry_text(creds);

	trace_add(c, "%s: answered: %s%s%s; they %s", provider, creds->source,
		  creds->role ? ", role " : "", creds->role ? creds->role : "",
		  exp);
}

/* Wipes and frees a buffer of read_secret_file(). */
static void secret_buffer_free(GString *s)
{
	explicit_bzero(s->str, s->allocated_len);
	g_string_free(s, TRUE);
}

/* Reads a small file that holds a secret (a token); wipe the result. */
static char *read_secret_file(const char *path, const char *what,
			      GError **error)
{
	char buf[4096];
	/* Sized once, never grown: a realloc would leave a copy behind. */
	GString *s = g_string_sized_new(SMALL_FILE_MAX + sizeof(buf) + 1);
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	char *token;

	if (fd < 0) {
		int err = errno;

		g_set_error(error, BFS_ERROR, err, "%s %s: %s", what, path,
			    g_strerror(err));
		g_string_free(s, TRUE);
		return NULL;
	}
	for (;;) {
		ssize_t n = read(fd, buf, sizeof(buf));

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 || s->len + (gsize)n > SMALL_FILE_MAX) {
			int err = n < 0 ? errno : EFBIG;

			g_set_error(error, BFS_ERROR, err, "%s %s: %s", what,
				    path,
				    n < 0 ? g_strerror(err)
					  : "larger than 64 KiB, not a token");
			close(fd);
			explicit_bzero(buf, sizeof(buf));
			secret_buffer_free(s);
			return NULL;
		}
		if (n == 0)
			break;
		g_string_append_len(s, buf, n);
	}
	close(fd);
	explicit_bzero(buf, sizeof(buf));
	/* Stripping moves bytes past the NUL: the whole buffer is wiped. */
	token = g_strdup(g_strstrip(s->str));
	secret_buffer_free(s);
	if (!*token || strpbrk(token, "\r\n")) {
		g_set_error(error, BFS_ERROR, EINVAL, "%s %s: %s", what, path,
			    *token ? "holds more than one line" : "is empty");
		credentials_secret_free(token);
		return NULL;
	}
	return token;
}

static gboolean is_true(const char *v)
{
	return v && !g_ascii_strcasecmp(v, "true");
}

/* -- STS ---------------------------------------------------------------- */

static char *sts_endpoint(const struct chain *c)
{
	const char *override = env_get("AWS_ENDPOINT_URL_STS");
	const char *region = c->o->region ? c->o->region : "us-east-1";

	if (override)
		return g_strdup(override);
	return g_strdup_printf("https://sts.%s.%s", region,
			       g_str_has_prefix(region, "cn-")
				       ? "amazonaws.com.cn"
				       : "amazonaws.com");
}

/* The Host header curl sends for @uri. */
static char *uri_hostport(GUri *uri)
{
	const char *host = g_uri_get_host(uri);
	gboolean v6 = strchr(host, ':') != NULL;

	if (g_uri_get_port(uri) < 0)
		return v6 ? g_strdup_printf("[%s]", host) : g_strdup(host);
	return g_strdup_printf(v6 ? "[%s]:%d" : "%s:%d", host,
			       g_uri_get_port(uri));
}

/* "name=value&..." of @params (name, value pairs; values may be secret). */
static char *form_body(const char *const *params)
{
	gsize size = 256;
	GString *body;
	guint i;

	/* Sized once, never grown: a realloc would leave a token behind. */
	for (i = 0; params[i]; i += 2) {
		const char *v = params[i + 1];

		size += strlen(params[i]) + 2 + (v ? 3 * strlen(v) : 0);
	}
	body = g_string_sized_new(size);

	for (i = 0; params[i]; i += 2) {
		g_autofree char *v = NULL;

		if (!params[i + 1])
			continue;
		v = sigv4_uri_encode(params[i + 1], -1, FALSE);
		g_string_append_printf(body, "%s%s=%s", body->len ? "&" : "",
				       params[i], v);
		explicit_bzero(v, strlen(v));
	}
	return g_string_free(body, FALSE);
}

static int sts_errno(long status, const char *code)
{
	if (status >= 500)
		return EIO;
	if (status == 403 || status == 401 || (code && strstr(code, "Token")) ||
	    (code && !strcmp(code, "AccessDenied")))
		return EACCES;
	return EINVAL;
}

static void sts_set_error(GError **error, const char *action, const char *url,
			  long status, const GString *body)
{
	g_autofree char *code = NULL;
	g_autofree char *message = NULL;

	cred_parse_sts_error(body->str, body->len, &code, &message);
	g_set_error(error, BFS_ERROR, sts_errno(status, code),
		    "STS %s via %s: HTTP %ld%s%s%s%s", action, url, status,
		    code ? " " : "", code ? code : "", message ? ": " : "",
		    message ? message : "");
}

/* SigV4 headers for an STS POST of @body, signed by @signer. */
static char **sts_sign(const struct chain *c, const struct credentials *signer,
		       GUri *uri, const char *body, const char *content_type)
{
	g_autofree char *hash =
		g_compute_checksum_for_string(G_CHECKSUM_SHA256, body, -1);
	g_autofree char *host = uri_hostport(uri);
	const char *path = *g_uri_get_path(uri) ? g_uri_get_path(uri) : "/";
	const char *headers[] = { content_type, NULL };
	struct sigv4_credentials sc = {
		.access_key_id = signer->access_key_id,
		.secret_access_key = signer->secret_access_key,
		.session_token = signer->session_token,
	};
	struct sigv4_request r = {
		.method = "POST",
		.host = host,
		.path = path,
		.payload_sha256 = hash,
		.headers = headers,
		.region = c->o->region ? c->o->region : "us-east-1",
		.service = "sts",
		.unix_time = g_get_real_time() / G_USEC_PER_SEC,
	};

	return sigv4_sign(&sc, &r);
}

static void strv_wipe_free(char **v)
{
	guint i;

	for (i = 0; v && v[i]; i++)
		explicit_bzero(v[i], strlen(v[i]));
	g_strfreev(v);
}

/*
 * POSTs @action with @params to STS, signed with @signer (NULL: unsigned,
 * as AssumeRoleWithWebIdentity is).
 */
static struct credentials *sts_call(const struct chain *c, const char *action,
				    const char *const *params,
				    const struct credentials *signer,
				    GError **error)
{
	static const char content_type[] =
		"Content-Type: application/x-www-form-urlencoded; "
		"charset=utf-8";
	g_autofree char *url = sts_endpoint(c);
	g_autoptr(GUri) uri = g_uri_parse(url, G_URI_FLAGS_NONE, NULL);
	g_autoptr(GPtrArray) headers = g_ptr_array_new();
	char *body = NULL;
	char **auth = NULL;
	GString *resp = NULL;
	struct credentials *creds = NULL;
	long status;
	guint i;

	if (!uri || !g_uri_get_host(uri) || !*g_uri_get_host(uri)) {
		g_set_error(error, BFS_ERROR, EINVAL,
			    "STS %s: endpoint '%s' is not a URL (set "
			    "AWS_ENDPOINT_URL_STS to http(s)://host[:port])",
			    action, url);
		return NULL;
	}
	body = form_body(params);
	g_ptr_array_add(headers, (gpointer)content_type);
	g_ptr_array_add(headers, (gpointer) "Accept: text/xml");
	if (signer && !signer->anonymous) {
		auth = sts_sign(c, signer, uri, body, content_type);
		for (i = 0; auth[i]; i++)
			g_ptr_array_add(headers, auth[i]);
	}
	g_ptr_array_add(headers, NULL);
	{
		struct cred_http_request req = {
			.method = "POST",
			.url = url,
			.headers = (const char *const *)headers->pdata,
			.body = body,
			.body_len = strlen(body),
			.connect_timeout_ms = 3000,
			.timeout_ms = STS_TIMEOUT_MS,
			.use_proxy = TRUE,
			.ca_file = c->o->ca_file,
		};

		if (!cred_http_exchange(&req, &status, &resp, error)) {
			g_prefix_error(error, "STS %s: ", action);
			goto out;
		}
	}
	if (status != 200) {
		sts_set_error(error, action, url, status, resp);
		goto out;
	}
	creds = cred_parse_sts(resp->str, resp->len, action, error);
	if (creds)
		creds->source = g_strdup_printf("STS %s via %s", action, url);
out:
	strv_wipe_free(auth);
	credentials_secret_free(body);
	cred_http_body_free(resp);
	return creds;
}

static char *default_session_name(void)
{
	return g_strdup_printf("bucketfs-%" G_GINT64_FORMAT,
			       g_get_real_time() / G_USEC_PER_SEC);
}

/* AssumeRoleWithWebIdentity with the token in @token_file, read now. */
static struct credentials *web_identity(const struct chain *c,
					const char *role_arn,
					const char *token_file,
					const char *session_name,
					const char *duration, GError **error)
{
	g_autofree char *name =
		session_name ? g_strdup(session_name) : default_session_name();
	struct credentials *creds;
	char *token;

	token = read_secret_file(token_file, "web identity token file", error);
	if (!token)
		return NULL;
	{
		const char *params[] = { "Action",
					 "AssumeRoleWithWebIdentity",
					 "Version",
					 STS_VERSION,
					 "RoleArn",
					 role_arn,
					 "RoleSessionName",
					 name,
					 "DurationSeconds",
					 duration,
					 "WebIdentityToken",
					 token,
					 NULL };

		creds = sts_call(c, "AssumeRoleWithWebIdentity", params, NULL,
				 error);
	}
	credentials_secret_free(token);
	if (creds && !creds->role)
		creds->role = g_strdup(role_arn);
	return creds;
}

static enum outcome
provider_web_identity(struct chain *c, struct credentials **out, GError **error)
{
	const char *file = env_get("AWS_WEB_IDENTITY_TOKEN_FILE");
	const char *role = env_get("AWS_ROLE_ARN");

	if (!file) {
		trace_add(c, "web identity: AWS_WEB_IDENTITY_TOKEN_FILE not "
			     "set");
		return NOT_CONFIGURED;
	}
	if (!role) {
		g_set_error(error, BFS_ERROR, EINVAL,
			    "web identity: AWS_WEB_IDENTITY_TOKEN_FILE is set "
			    "but AWS_ROLE_ARN is not: set the role to assume");
		return FAILED;
	}
	*out = web_identity(c, role, file, env_get("AWS_ROLE_SESSION_NAME"),
			    NULL, error);
	if (!*out) {
		g_prefix_error(error,
			       "web identity (AWS_WEB_IDENTITY_TOKEN_"
			       "FILE %s): ",
			       file);
		return FAILED;
	}
	g_free((*out)->provider);
	(*out)->provider = g_strdup("web-identity");
	return ANSWERED;
}

/* -- the container endpoint --------------------------------------------- */

/* http to these only: the SDKs' rule, so no token leaves the host. */
static gboolean container_host_allowed(GUri *uri)
{
	const char *host = g_uri_get_host(uri);
	struct in6_addr a6;
	struct in_addr a4;

	if (!g_ascii_strcasecmp(g_uri_get_scheme(uri), "https"))
		return TRUE;
	if (!host)
		return FALSE;
	if (!g_ascii_strcasecmp(host, "localhost") ||
	    !strcmp(host, "169.254.170.2") || !strcmp(host, "169.254.170.23") ||
	    !g_ascii_strcasecmp(host, "fd00:ec2::23"))
		return TRUE;
	if (inet_pton(AF_INET, host, &a4) == 1)
		return (ntohl(a4.s_addr) >> 24) == 127;
	return inet_pton(AF_INET6, host, &a6) == 1 && IN6_IS_ADDR_LOOPBACK(&a6);
}

static char *container_url(GError **error)
{
	const char *rel = env_get("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI");
	const char *full = env_get("AWS_CONTAINER_CREDENTIALS_FULL_URI");
	g_autoptr(GUri) uri = NULL;

	if (rel)
		return g_strdup_printf("%s%s%s", CONTAINER_HOST,
				       rel[0] == '/' ? "" : "/", rel);
	uri = g_uri_parse(full, G_URI_FLAGS_NONE, NULL);
	if (!uri || !g_uri_get_host(uri) ||
	    (g_ascii_strcasecmp(g_uri_get_scheme(uri), "http") &&
	     g_ascii_strcasecmp(g_uri_get_scheme(uri), "https"))) {
		g_set_error(error, BFS_ERROR, EINVAL,
			    "container: AWS_CONTAINER_CREDENTIALS_FULL_URI is "
			    "not an http(s) URL");
		return NULL;
	}
	if (!container_host_allowed(uri)) {
		g_set_error(error, BFS_ERROR, EINVAL,
			    "container: AWS_CONTAINER_CREDENTIALS_FULL_URI "
			    "'%s': plain http only to a loopback address, "
			    "169.254.170.2 or 169.254.170.23 (use https)",
			    full);
		return NULL;
	}
	return g_strdup(full);
}

/* "Authorization: TOKEN", newly allocated, NULL with none configured. */
static gboolean container_auth(char **header, GError **error)
{
	const char *file = env_get("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE");
	const char *value = env_get("AWS_CONTAINER_AUTHORIZATION_TOKEN");
	char *token = NULL;

	*header = NULL;
	if (file) {
		token = read_secret_file(
			file, "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", error);
		if (!token)
			return FALSE;
	} else if (value) {
		if (strpbrk(value, "\r\n")) {
			g_set_error(error, BFS_ERROR, EINVAL,
				    "AWS_CONTAINER_AUTHORIZATION_TOKEN holds "
				    "a line break");
			return FALSE;
		}
		token = g_strdup(value);
	}
	if (token)
		*header = g_strdup_printf("Authorization: %s", token);
	credentials_secret_free(token);
	return TRUE;
}

/* An error body, quoted short and escaped (it holds no keys). */
static char *body_excerpt(const GString *body)
{
	g_autofree char *cut = g_strndup(body->str, MIN(body->len, 200));

	g_strstrip(cut);
	return log_escape(cut, -1);
}

static struct credentials *container_fetch(const struct chain *c,
					   GError **error)
{
	g_autofree char *url = container_url(error);
	char *auth = NULL;
	GString *body = NULL;
	struct credentials *creds = NULL;
	long status;

	if (!url || !container_auth(&auth, error))
		return NULL;
	{
		const char *headers[] = { "Accept: application/json", auth,
					  NULL };
		struct cred_http_request req = {
			.method = "GET",
			.url = url,
			.headers = headers,
			.connect_timeout_ms = 2000,
			.timeout_ms = CONTAINER_TIMEOUT_MS,
			.ca_file = c->o->ca_file,
		};

		if (!cred_http_exchange(&req, &status, &body, error)) {
			g_prefix_error(error, "container: ");
			goto out;
		}
	}
	if (status != 200) {
		g_autofree char *ex = body_excerpt(body);

		g_set_error(error, BFS_ERROR,
			    status == 401 || status == 403 ? EACCES : EIO,
			    "container: GET %s: HTTP %ld%s%s", url, status,
			    *ex ? ": " : "", ex);
		goto out;
	}
	creds = cred_parse_json(body->str, body->len, CRED_JSON_CONTAINER,
				"container credentials response", error);
	if (!creds) {
		g_prefix_error(error, "container: GET %s: ", url);
		goto out;
	}
	creds->provider = g_strdup("container");
	creds->source = g_strdup_printf("container credentials at %s", url);
out:
	credentials_secret_free(auth);
	cred_http_body_free(body);
	return creds;
}

static enum outcome provider_container(struct chain *c,
				       struct credentials **out, GError **error)
{
	if (!env_get("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI") &&
	    !env_get("AWS_CONTAINER_CREDENTIALS_FULL_URI")) {
		trace_add(c,
			  "container: AWS_CONTAINER_CREDENTIALS_RELATIVE_URI "
			  "and _FULL_URI not set");
		return NOT_CONFIGURED;
	}
	*out = container_fetch(c, error);
	return *out ? ANSWERED : FAILED;
}

/* -- EC2 instance metadata ---------------------------------------------- */

static char *imds_base(void)
{
	const char *ep = env_get("AWS_EC2_METADATA_SERVICE_ENDPOINT");
	const char *mode = env_get("AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE");
	char *base;
	gsize n;

	if (!ep)
		ep = mode && !g_ascii_strcasecmp(mode, "IPv6") ? IMDS_DEFAULT_V6
							       : IMDS_DEFAULT;
	base = g_strdup(ep);
	n = strlen(base);
	while (n > 0 && base[n - 1] == '/')
		base[--n] = '\0';
	return base;
}

/*
 * The SDKs' AWS_METADATA_SERVICE_TIMEOUT (seconds) and
 * AWS_METADATA_SERVICE_NUM_ATTEMPTS, for hosts whose IMDS is slow; a value
 * out of range is ignored.
 */
static void imds_limits(guint *timeout_ms, guint *attempts)
{
	const char *t = env_get("AWS_METADATA_SERVICE_TIMEOUT");
	const char *n = env_get("AWS_METADATA_SERVICE_NUM_ATTEMPTS");
	char *end = NULL;
	double v;

	*timeout_ms = IMDS_TIMEOUT_MS;
	*attempts = 1;
	if (t) {
		v = g_ascii_strtod(t, &end);
		if (end && !*end && v > 0 && v <= 60)
			*timeout_ms = (guint)(v * 1000);
	}
	if (n) {
		v = g_ascii_strtod(n, &end);
		if (end && !*end && v >= 1 && v <= 10)
			*attempts = (guint)v;
	}
}

/* One IMDS exchange; *@body on any status.  Transport failures retry. */
static gboolean imds_exchange(const char *method, const char *url,
			      const char *token, long *status, GString **body,
			      GError **error)
{
	g_autofree char *h = NULL;
	const char *headers[2] = { NULL, NULL };
	struct cred_http_request req = {
		.method = method,
		.url = url,
		.headers = headers,
	};
	guint attempts, i;
	gboolean ok = FALSE;

	if (token)
		h = g_strdup_printf("X-aws-ec2-metadata-token: %s", token);
	else
		h = g_strdup("X-aws-ec2-metadata-token-ttl-seconds:"
			     " " IMDS_TOKEN_TTL);
	headers[0] = h;
	imds_limits(&req.timeout_ms, &attempts);
	for (i = 0; i < attempts && !ok; i++) {
		if (i > 0)
			g_clear_error(error);
		ok = cred_http_exchange(&req, status, body, error);
	}
	explicit_bzero(h, strlen(h));
	return ok;
}

/* The IMDSv2 session token, newly allocated (a secret). */
static char *imds_token(const char *base, GError **error)
{
	g_autofree char *url = g_strdup_printf("%s/latest/api/token", base);
	GString *body = NULL;
	long status;
	char *token;

	if (!imds_exchange("PUT", url, NULL, &status, &body, error))
		return NULL;
	if (status != 200 || body->len == 0) {
		g_set_error(error, BFS_ERROR, status == 403 ? EACCES : EIO,
			    "PUT %s (the IMDSv2 session token): HTTP %ld%s",
			    url, status,
			    status == 403 ? " (IMDS refuses tokens here: is "
					    "it disabled for this instance?)"
					  : "");
		cred_http_body_free(body);
		return NULL;
	}
	token = g_strdup(g_strstrip(body->str));
	cred_http_body_free(body);
	return token;
}

/* GET @path with the session token; the body on 200, else an error. */
static GString *imds_get(const char *base, const char *token, const char *path,
			 long *status, GError **error)
{
	g_autofree char *url = g_strdup_printf("%s%s", base, path);
	GString *body = NULL;

	if (!imds_exchange("GET", url, token, status, &body, error))
		return NULL;
	if (*status == 200)
		return body;
	g_set_error(error, BFS_ERROR, *status == 404 ? ENOENT : EIO,
		    "GET %s: HTTP %ld", url, *status);
	cred_http_body_free(body);
	return NULL;
}

#define IMDS_ROLE_PATH "/latest/meta-data/iam/security-credentials/"

static char *imds_role(const char *base, const char *token, GError **error)
{
	GString *body;
	long status;
	char *role;
	char *nl;

	body = imds_get(base, token, IMDS_ROLE_PATH, &status, error);
	if (!body && status == 404) {
		g_clear_error(error);
		g_set_error(error, BFS_ERROR, ENOENT,
			    "no role attached to this instance (GET %s%s: "
			    "HTTP 404): attach an instance profile",
			    base, IMDS_ROLE_PATH);
	}
	if (!body)
		return NULL;
	nl = strchr(body->str, '\n');
	if (nl)
		*nl = '\0';
	role = g_strdup(g_strstrip(body->str));
	cred_http_body_free(body);
	if (!*role || strpbrk(role, "/?#%")) {
		g_set_error(error, BFS_ERROR, EPROTO,
			    "GET %s%s: the role name is %s", base,
			    IMDS_ROLE_PATH, *role ? "not a name" : "empty");
		g_free(role);
		return NULL;
	}
	return role;
}

static struct credentials *imds_credentials(const char *base, const char *token,
					    const char *role, GError **error)
{
	g_autofree char *path = g_strdup_printf("%s%s", IMDS_ROLE_PATH, role);
	struct credentials *creds;
	GString *body;
	long status;

	body = imds_get(base, token, path, &status, error);
	if (!body)
		return NULL;
	creds = cred_parse_json(body->str, body->len, CRED_JSON_IMDS,
				"IMDS credentials response", error);
	cred_http_body_free(body);
	if (!creds) {
		g_prefix_error(error, "GET %s%s: ", base, path);
		return NULL;
	}
	creds->provider = g_strdup("imds");
	creds->role = g_strdup(role);
	creds->source =
		g_strdup_printf("EC2 instance metadata (IMDSv2) at %s", base);
	return creds;
}

/*
 * @reachable: FALSE when not even the token could be had through the
 * transport: then there is no IMDS here, which ends the chain quietly.
 */
static struct credentials *imds_fetch(gboolean *reachable, GError **error)
{
	g_autofree char *base = imds_base();
	g_autofree char *role = NULL;
	struct credentials *creds = NULL;
	g_autoptr(GError) terr = NULL;
	char *token;

	*reachable = TRUE;
	token = imds_token(base, &terr);
	if (!token) {
		/* A transport failure has the "PUT" prefix from cred_http;
		 * an HTTP one says so itself: both mean no usable IMDS. */
		*reachable = FALSE;
		g_propagate_prefixed_error(error, g_steal_pointer(&terr),
					   "IMDS: ");
		return NULL;
	}
	role = imds_role(base, token, error);
	if (role)
		creds = imds_credentials(base, token, role, error);
	credentials_secret_free(token);
	if (!creds)
		g_prefix_error(error, "IMDS: ");
	return creds;
}

static enum outcome provider_imds(struct chain *c, struct credentials **out,
				  GError **error)
{
	g_autoptr(GError) err = NULL;
	gboolean reachable;

	if (is_true(env_get("AWS_EC2_METADATA_DISABLED"))) {
		trace_add(c, "IMDS: disabled by AWS_EC2_METADATA_DISABLED");
		return NOT_CONFIGURED;
	}
	*out = imds_fetch(&reachable, &err);
	if (*out)
		return ANSWERED;
	trace_add(c, "%s", err->message);
	if (!reachable)
		return NOT_CONFIGURED;
	g_propagate_error(error, g_steal_pointer(&err));
	return FAILED;
}

char *cred_chain_imds_region(GError **error)
{
	g_autofree char *base = NULL;
	char *token;
	char *region;
	GString *body;
	long status;

	if (is_true(env_get("AWS_EC2_METADATA_DISABLED"))) {
		g_set_error(error, BFS_ERROR, ENOENT,
			    "IMDS: disabled by AWS_EC2_METADATA_DISABLED");
		return NULL;
	}
	base = imds_base();
	token = imds_token(base, error);
	if (!token) {
		g_prefix_error(error, "IMDS: ");
		return NULL;
	}
	body = imds_get(base, token, "/latest/meta-data/placement/region",
			&status, error);
	credentials_secret_free(token);
	if (!body) {
		g_prefix_error(error, "IMDS: ");
		return NULL;
	}
	region = g_strdup(g_strstrip(body->str));
	cred_http_body_free(body);
	return region;
}

/* -- credential_process ------------------------------------------------- */

/* The last non-empty line of a process's stderr, short and escaped. */
static char *last_line(const char *s)
{
	g_auto(GStrv) lines = g_strsplit(s ? s : "", "\n", -1);
	gint i;

	for (i = (gint)g_strv_length(lines) - 1; i >= 0; i--) {
		g_strstrip(lines[i]);
		if (*lines[i]) {
			g_autofree char *cut = g_strndup(lines[i], 200);

			return log_escape(cut, -1);
		}
	}
	return NULL;
}

/*
 * Reads @fd until EOF into @buf, at most SMALL_FILE_MAX bytes; FALSE once
 * it is done (EOF, error or full).
 */
static gboolean drain_fd(int fd, GString *buf)
{
	char chunk[4096];
	ssize_t n = read(fd, chunk, sizeof(chunk));

	if (n < 0 && (errno == EINTR || errno == EAGAIN))
		return TRUE;
	if (n <= 0)
		return FALSE;
	if (buf->len < SMALL_FILE_MAX)
		g_string_append_len(buf, chunk,
				    MIN((gsize)n, SMALL_FILE_MAX - buf->len));
	return TRUE;
}

/*
 * Runs @argv with no stdin and collects its stdout and stderr, for at
 * most PROCESS_TIMEOUT_MS: a process that hangs is killed, so that it
 * stalls neither the refresher nor an unmount.  FALSE with ENOENT if it
 * could not start, ETIMEDOUT if it was killed for the time.
 */
static gboolean spawn_bounded(char **argv, const char *what, GString *out,
			      GString *err_out, int *wait_status,
			      GError **error)
{
	g_autoptr(GError) err = NULL;
	gint64 deadline = g_get_monotonic_time() + PROCESS_TIMEOUT_MS * 1000;
	struct pollfd fds[2];
	GPid pid;
	int out_fd, err_fd;

	if (!g_spawn_async_with_pipes(
		    NULL, argv, NULL,
		    G_SPAWN_SEARCH_PATH | G_SPAWN_DO_NOT_REAP_CHILD |
			    G_SPAWN_CLOEXEC_PIPES | G_SPAWN_STDIN_FROM_DEV_NULL,
		    NULL, NULL, &pid, NULL, &out_fd, &err_fd, &err)) {
		g_set_error(error, BFS_ERROR, ENOENT, "%s: %s", what,
			    err->message);
		return FALSE;
	}
	fds[0] = (struct pollfd){ .fd = out_fd, .events = POLLIN };
	fds[1] = (struct pollfd){ .fd = err_fd, .events = POLLIN };
	while (fds[0].fd >= 0 || fds[1].fd >= 0) {
		gint64 left = (deadline - g_get_monotonic_time()) / 1000;
		int i;

		if (left <= 0)
			break;
		if (poll(fds, 2, (int)MIN(left, G_MAXINT)) < 0 &&
		    errno != EINTR)
			break;
		for (i = 0; i < 2; i++) {
			if (fds[i].fd < 0 || !fds[i].revents)
				continue;
			if (!drain_fd(fds[i].fd, i ? err_out : out)) {
				close(fds[i].fd);
				fds[i].fd = -1;
			}
		}
	}
	if (fds[0].fd >= 0 || fds[1].fd >= 0) {
		kill(pid, SIGKILL);
		if (fds[0].fd >= 0)
			close(fds[0].fd);
		if (fds[1].fd >= 0)
			close(fds[1].fd);
		(void)waitpid(pid, wait_status, 0);
		g_spawn_close_pid(pid);
		g_set_error(error, BFS_ERROR, ETIMEDOUT,
			    "%s: no answer within %d s: killed", what,
			    PROCESS_TIMEOUT_MS / 1000);
		return FALSE;
	}
	while (waitpid(pid, wait_status, 0) < 0 && errno == EINTR)
		;
	g_spawn_close_pid(pid);
	return TRUE;
}

static struct credentials *run_process(const char *profile, const char *cmd,
				       GError **error)
{
	g_auto(GStrv) argv = NULL;
	g_autoptr(GString) errout = g_string_new(NULL);
	g_autoptr(GString) outbuf = g_string_new(NULL);
	g_autofree char *prog = NULL;
	g_autofree char *what = NULL;
	char *out = NULL;
	struct credentials *creds = NULL;
	int wait_status = 0;

	/* GLib's message quotes the whole command line: not here, since
	 * its arguments might hold something private. */
	if (!g_shell_parse_argv(cmd, NULL, &argv, NULL)) {
		g_set_error(error, BFS_ERROR, EINVAL,
			    "credential_process of profile '%s' does not "
			    "parse as a command line (unbalanced quotes?)",
			    profile);
		return NULL;
	}
	/* Only the program: its arguments might hold something private. */
	prog = g_strdup(argv[0]);
	what = g_strdup_printf("credential_process '%s' of profile '%s'", prog,
			       profile);
	if (!spawn_bounded(argv, what, outbuf, errout, &wait_status, error)) {
		explicit_bzero(outbuf->str, outbuf->len);
		return NULL;
	}
	out = g_string_free(g_steal_pointer(&outbuf), FALSE);
	if (!WIFEXITED(wait_status) || WEXITSTATUS(wait_status) != 0) {
		g_autofree char *line = last_line(errout->str);

		g_set_error(error, BFS_ERROR, EACCES,
			    "credential_process '%s' of profile '%s' %s %d%s%s",
			    prog, profile,
			    WIFEXITED(wait_status) ? "exited with status"
						   : "was killed by signal",
			    WIFEXITED(wait_status) ? WEXITSTATUS(wait_status)
						   : WTERMSIG(wait_status),
			    line ? ": " : "", line ? line : "");
		goto out;
	}
	creds = cred_parse_json(out, strlen(out), CRED_JSON_PROCESS, "output",
				error);
	if (!creds) {
		g_prefix_error(error,
			       "credential_process '%s' of profile '%s': ",
			       prog, profile);
		goto out;
	}
	creds->provider = g_strdup("credential-process");
	creds->source = g_strdup_printf(
		"credential_process '%s' of profile '%s'", prog, profile);
out:
	credentials_secret_free(out);
	return creds;
}

/* -- the shared files --------------------------------------------------- */

static struct credentials *resolve_profile(struct chain *c, const char *name,
					   gboolean named, guint depth,
					   GError **error);

/* The credentials a role_arn profile assumes its role with. */
static struct credentials *role_source(struct chain *c,
				       const struct aws_profile *p, guint depth,
				       GError **error)
{
	const char *cs = p->credential_source;
	struct credentials *creds = NULL;
	enum outcome r = NOT_CONFIGURED;

	if (p->source_profile) {
		/* A profile may name itself: then its own static keys. */
		if (!strcmp(p->source_profile, p->name))
			return credentials_load(p->name, FALSE, error);
		return resolve_profile(c, p->source_profile, TRUE, depth + 1,
				       error);
	}
	if (!cs) {
		g_set_error(error, BFS_ERROR, EINVAL,
			    "profile '%s': role_arn needs source_profile, "
			    "credential_source or web_identity_token_file",
			    p->name);
		return NULL;
	}
	if (!strcmp(cs, "Environment")) {
		if (!credentials_from_environment(&creds, error))
			return NULL;
		if (!creds)
			g_set_error(error, BFS_ERROR, ENOENT,
				    "profile '%s': credential_source "
				    "Environment, but AWS_ACCESS_KEY_ID is not "
				    "set",
				    p->name);
		return creds;
	}
	if (!strcmp(cs, "Ec2InstanceMetadata"))
		r = provider_imds(c, &creds, error);
	else if (!strcmp(cs, "EcsContainer"))
		r = provider_container(c, &creds, error);
	else {
		g_autofree char *v = log_escape(cs, -1);

		g_set_error(error, BFS_ERROR, EINVAL,
			    "profile '%s': credential_source '%s' is not "
			    "Environment, Ec2InstanceMetadata or EcsContainer",
			    p->name, v);
		return NULL;
	}
	if (r == NOT_CONFIGURED && !(error && *error))
		g_set_error(error, BFS_ERROR, ENOENT,
			    "profile '%s': credential_source %s: not "
			    "available here",
			    p->name, cs);
	return creds;
}

static struct credentials *assume_role(struct chain *c,
				       const struct aws_profile *p, guint depth,
				       GError **error)
{
	struct credentials *source;
	g_autofree char *name = NULL;
	struct credentials *creds;

	if (p->web_identity_token_file)
		return web_identity(c, p->role_arn, p->web_identity_token_file,
				    p->role_session_name, p->duration_seconds,
				    error);
	source = role_source(c, p, depth, error);
	if (!source)
		return NULL;
	name = p->role_session_name ? g_strdup(p->role_session_name)
				    : default_session_name();
	{
		const char *params[] = { "Action",
					 "AssumeRole",
					 "Version",
					 STS_VERSION,
					 "RoleArn",
					 p->role_arn,
					 "RoleSessionName",
					 name,
					 "ExternalId",
					 p->external_id,
					 "DurationSeconds",
					 p->duration_seconds,
					 NULL };

		creds = sts_call(c, "AssumeRole", params, source, error);
	}
	if (!creds)
		g_prefix_error(error, "with the credentials from %s: ",
			       source->source);
	credentials_free(source);
	if (!creds)
		return NULL;
	if (!creds->role)
		creds->role = g_strdup(p->role_arn);
	return creds;
}

/* What a profile without any credential setting means. */
static void profile_empty(const struct aws_profile *p, gboolean named,
			  GError **error)
{
	if (!p->found)
		g_set_error(error, BFS_ERROR, ENOENT,
			    "profile '%s' not found in %s or %s", p->name,
			    p->cred_path, p->conf_path);
	else if (p->has_sso)
		g_set_error(error, BFS_ERROR, EINVAL,
			    "profile '%s': SSO (sso_start_url, sso_session) is "
			    "not supported yet: use 'aws configure "
			    "export-credentials --format process' as its "
			    "credential_process",
			    p->name);
	else
		g_set_error(error, BFS_ERROR, named ? EINVAL : ENOENT,
			    "profile '%s' in %s or %s has no credentials "
			    "(aws_access_key_id, role_arn, credential_process "
			    "or web_identity_token_file)",
			    p->name, p->cred_path, p->conf_path);
}

static struct credentials *profile_answer(struct chain *c,
					  const struct aws_profile *p,
					  guint depth, GError **error)
{
	struct credentials *creds;

	if (p->role_arn) {
		creds = assume_role(c, p, depth, error);
		if (creds) {
			g_free(creds->provider);
			creds->provider = g_strdup(p->web_identity_token_file
							   ? "web-identity"
							   : "assume-role");
		}
		return creds;
	}
	if (p->web_identity_token_file) {
		g_set_error(error, BFS_ERROR, EINVAL,
			    "profile '%s': web_identity_token_file needs "
			    "role_arn",
			    p->name);
		return NULL;
	}
	if (p->has_keys)
		return credentials_load(p->name, FALSE, error);
	return run_process(p->name, p->credential_process, error);
}

static struct credentials *resolve_profile(struct chain *c, const char *name,
					   gboolean named, guint depth,
					   GError **error)
{
	struct aws_profile p;
	struct credentials *creds = NULL;

	if (depth > CHAIN_DEPTH_MAX) {
		g_set_error(error, BFS_ERROR, ELOOP,
			    "profile '%s': more than %d source_profile links "
			    "(a loop?)",
			    name, CHAIN_DEPTH_MAX);
		return NULL;
	}
	if (!aws_profile_read(name, &p, error))
		return NULL;
	if (!p.role_arn && !p.has_keys && !p.credential_process &&
	    !p.web_identity_token_file) {
		profile_empty(&p, named, error);
		goto out;
	}
	creds = profile_answer(c, &p, depth, error);
	if (!creds && depth > 0)
		g_prefix_error(error, "source_profile '%s': ", name);
out:
	aws_profile_clear(&p);
	return creds;
}

static enum outcome provider_profile(struct chain *c, struct credentials **out,
				     GError **error)
{
	const char *name =
		c->o->profile ? c->o->profile : env_get("AWS_PROFILE");
	gboolean named = name != NULL;
	g_autoptr(GError) err = NULL;

	*out = resolve_profile(c, named ? name : "default", named, 0, &err);
	if (*out)
		return ANSWERED;
	/* The default profile may simply not exist: ask the next one. */
	if (!named && err->code == ENOENT &&
	    g_str_has_prefix(err->message, "profile 'default' ")) {
		trace_add(c, "shared files: %s", err->message);
		return NOT_CONFIGURED;
	}
	g_propagate_prefixed_error(error, g_steal_pointer(&err),
				   "shared files: ");
	return FAILED;
}

static enum outcome
provider_environment(struct chain *c, struct credentials **out, GError **error)
{
	if (!credentials_from_environment(out, error))
		return FAILED;
	if (*out)
		return ANSWERED;
	trace_add(c, "environment: AWS_ACCESS_KEY_ID and "
		     "AWS_SECRET_ACCESS_KEY not set");
	return NOT_CONFIGURED;
}

typedef enum outcome (*provider_fn)(struct chain *c, struct credentials **out,
				    GError **error);

static const struct {
	const char *name;
	provider_fn fn;
} providers[] = {
	{ "environment", provider_environment },
	{ "web identity", provider_web_identity },
	{ "shared files", provider_profile },
	{ "container", provider_container },
	{ "IMDS", provider_imds },
};

static void no_credentials(struct chain *c, const struct cred_chain_options *o,
			   GError **error)
{
	g_autofree char *cred = NULL;
	g_autofree char *conf = NULL;
	struct aws_profile p;
	g_autoptr(GString) why = g_string_new(NULL);
	guint i;

	(void)o;
	if (aws_profile_read("default", &p, NULL)) {
		cred = g_strdup(p.cred_path);
		conf = g_strdup(p.conf_path);
		aws_profile_clear(&p);
	}
	for (i = 0; c->trace && i < c->trace->len; i++)
		g_string_append_printf(why, "; %s",
				       (char *)g_ptr_array_index(c->trace, i));
	g_set_error(error, BFS_ERROR, ENOENT,
		    "no credentials found: " NO_CREDENTIALS_HELP " [%s]",
		    cred ? cred : "~/.aws/credentials",
		    conf ? conf : "~/.aws/config",
		    why->len ? why->str + 2 : "");
}

struct credentials *cred_chain_resolve(const struct cred_chain_options *o,
				       GPtrArray *trace, GError **error)
{
	g_autoptr(GPtrArray) own = NULL;
	struct chain c = { .o = o, .trace = trace };
	struct credentials *creds = NULL;
	guint i;

	g_return_val_if_fail(error == NULL || *error == NULL, NULL);
	if (o->anonymous || o->profile) {
		creds = o->anonymous ? credentials_load(NULL, TRUE, error)
				     : resolve_profile(&c, o->profile, TRUE, 0,
						       error);
		if (creds)
			trace_answer(&c, o->anonymous ? "anonymous" : "profile",
				     creds);
		else if (!o->anonymous)
			g_prefix_error(error, "shared files (-o profile=%s): ",
				       o->profile);
		return creds;
	}
	/* The final error lists what each provider said. */
	if (!trace)
		c.trace = own = g_ptr_array_new_with_free_func(g_free);
	for (i = 0; i < G_N_ELEMENTS(providers); i++) {
		g_autoptr(GError) err = NULL;

		switch (providers[i].fn(&c, &creds, &err)) {
		case ANSWERED:
			trace_answer(&c, providers[i].name, creds);
			return creds;
		case FAILED:
			trace_add(&c, "%s", err->message);
			g_propagate_error(error, g_steal_pointer(&err));
			return NULL;
		case NOT_CONFIGURED:
			break;
		}
	}
	no_credentials(&c, o, error);
	return NULL;
}
