/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The container credentials endpoint (ECS, EKS Pod Identity): its URL,
 * the hosts plain http may go to, its Authorization token.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <string.h>

#include "cred_http.h"
#include "cred_parse.h"
#include "cred_provider.h"
#include "error.h"
#include "log.h"

#define CONTAINER_TIMEOUT_MS 5000
#define CONTAINER_HOST	     "http://169.254.170.2"

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
	const char *rel =
		credentials_env_get("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI");
	const char *full =
		credentials_env_get("AWS_CONTAINER_CREDENTIALS_FULL_URI");
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
	const char *file =
		credentials_env_get("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE");
	const char *value =
		credentials_env_get("AWS_CONTAINER_AUTHORIZATION_TOKEN");
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

enum outcome provider_container(struct chain *c, struct credentials **out,
				GError **error)
{
	if (!credentials_env_get("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI") &&
	    !credentials_env_get("AWS_CONTAINER_CREDENTIALS_FULL_URI")) {
		trace_add(c,
			  "container: AWS_CONTAINER_CREDENTIALS_RELATIVE_URI "
			  "and _FULL_URI not set");
		return NOT_CONFIGURED;
	}
	*out = container_fetch(c, error);
	return *out ? ANSWERED : FAILED;
}
