/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * EC2 instance metadata, IMDSv2 only: the session token, the role and its
 * credentials; the instance's region.
 */
#include <errno.h>
#include <string.h>

#include "cred_chain.h"
#include "cred_http.h"
#include "cred_parse.h"
#include "cred_provider.h"
#include "error.h"

/* A host without IMDS must not wait: the SDKs use 1 s too. */
#define IMDS_TIMEOUT_MS 1000
#define IMDS_TOKEN_TTL	"21600"
#define IMDS_DEFAULT	"http://169.254.169.254"
#define IMDS_DEFAULT_V6 "http://[fd00:ec2::254]"

static gboolean is_true(const char *v)
{
	return v && !g_ascii_strcasecmp(v, "true");
}

static char *imds_base(void)
{
	const char *ep =
		credentials_env_get("AWS_EC2_METADATA_SERVICE_ENDPOINT");
	const char *mode =
		credentials_env_get("AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE");
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
	const char *t = credentials_env_get("AWS_METADATA_SERVICE_TIMEOUT");
	const char *n =
		credentials_env_get("AWS_METADATA_SERVICE_NUM_ATTEMPTS");
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

enum outcome provider_imds(struct chain *c, struct credentials **out,
			   GError **error)
{
	g_autoptr(GError) err = NULL;
	gboolean reachable;

	if (is_true(credentials_env_get("AWS_EC2_METADATA_DISABLED"))) {
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

	if (is_true(credentials_env_get("AWS_EC2_METADATA_DISABLED"))) {
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
