/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * STS for the chain: signed and unsigned POST forms, their errors, and
 * AssumeRoleWithWebIdentity, the web identity provider.
 */
#include <errno.h>
#include <string.h>

#include "cred_http.h"
#include "cred_parse.h"
#include "cred_provider.h"
#include "error.h"
#include "sigv4.h"

#define STS_TIMEOUT_MS 10000

static char *sts_endpoint(const struct chain *c)
{
	const char *override = credentials_env_get("AWS_ENDPOINT_URL_STS");
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
struct credentials *sts_call(const struct chain *c, const char *action,
			     const char *const *params,
			     const struct credentials *signer, GError **error)
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

char *default_session_name(void)
{
	return g_strdup_printf("bucketfs-%" G_GINT64_FORMAT,
			       g_get_real_time() / G_USEC_PER_SEC);
}

/* AssumeRoleWithWebIdentity with the token in @token_file, read now. */
struct credentials *web_identity(const struct chain *c, const char *role_arn,
				 const char *token_file,
				 const char *session_name, const char *duration,
				 GError **error)
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

enum outcome provider_web_identity(struct chain *c, struct credentials **out,
				   GError **error)
{
	const char *file = credentials_env_get("AWS_WEB_IDENTITY_TOKEN_FILE");
	const char *role = credentials_env_get("AWS_ROLE_ARN");

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
	*out = web_identity(c, role, file,
			    credentials_env_get("AWS_ROLE_SESSION_NAME"), NULL,
			    error);
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
