/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * endpoint_url.c - endpoint URLs split by GUri (endpoint_url.h), with the
 * checks GUri leaves to us: the scheme, no user information, the host's
 * characters, the port's range.
 */
#include <errno.h>
#include <string.h>

#include "endpoint_url.h"
#include "error.h"
#include "log.h"

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

char *endpoint_url_shown(const char *url)
{
	const char *sep = strstr(url, "://");
	const char *at = strrchr(url, '@');

	if (!at)
		return g_strdup(url);
	if (!sep || sep > at)
		return g_strdup_printf("...@%s", at + 1);
	return g_strdup_printf("%.*s://...@%s", (int)(sep - url), url, at + 1);
}

/*
 * The host as GUri gave it must be the text of the URL: GUri decodes
 * percent-encoding and accepts characters no endpoint's name has.
 * @auth is the authority in @url; @ipv6 whether it is in brackets.
 */
static gboolean host_check(const char *url, const char *auth, const char *host,
			   gboolean ipv6, GError **error)
{
	const char *p;

	if (!*host)
		return url_error(error, url, "no host");
	for (p = host; *p; p++) {
		if (ipv6 ? !ipv6_char_valid(*p) : !host_char_valid(*p))
			return url_error(error, url,
					 ipv6 ? "invalid IPv6 address"
					      : "invalid character in the "
						"host name");
	}
	if (g_ascii_strncasecmp(auth + ipv6, host, strlen(host)) != 0)
		return url_error(error, url,
				 ipv6 ? "invalid IPv6 address"
				      : "invalid character in the host name");
	return TRUE;
}

/* GUri's failure, said as the old parser did. */
static gboolean split_error(const char *url, const char *auth, const GError *e,
			    GError **error)
{
	if (e->code == G_URI_ERROR_BAD_PORT)
		return url_error(error, url,
				 "the port must be a number between 1 and "
				 "65535");
	if (auth[0] == '[')
		return url_error(error, url, "invalid IPv6 address");
	return url_error(error, url, "invalid character in the host name");
}

gboolean endpoint_url_parse(const char *url, struct endpoint_url *out,
			    GError **error)
{
	const char *sep = strstr(url, "://");
	g_autofree char *shown = endpoint_url_shown(url);
	g_autofree char *scheme = NULL, *host = NULL, *path = NULL;
	g_autofree char *query = NULL, *fragment = NULL;
	g_autoptr(GError) e = NULL;
	const char *auth;
	gsize hlen;
	int port;

	g_return_val_if_fail(url != NULL && out != NULL, FALSE);

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
	g_clear_pointer(&scheme, g_free);
	if (!g_uri_split(url, G_URI_FLAGS_ENCODED | G_URI_FLAGS_NON_DNS,
			 &scheme, NULL, &host, &port, &path, &query, &fragment,
			 &e))
		return split_error(url, auth, e, error);
	if (query || fragment)
		return url_error(error, url, "a query is not supported");
	if (!host_check(url, auth, host ? host : "", auth[0] == '[', error))
		return FALSE;
	/* "host:" has no port for GUri, and a bad one for us. */
	hlen = strlen(host) + (auth[0] == '[' ? 2 : 0);
	if (port == 0 || (port < 0 && auth[hlen] == ':'))
		return url_error(error, url,
				 "the port must be a number between 1 and "
				 "65535");

	out->scheme = g_ascii_strdown(scheme, -1);
	out->host = g_ascii_strdown(host, -1);
	out->port_given = port > 0;
	out->port = port > 0				? (guint)port
		    : strcmp(out->scheme, "https") == 0 ? 443
							: 80;
	out->path = g_steal_pointer(&path);
	return TRUE;
}

void endpoint_url_clear(struct endpoint_url *u)
{
	g_free(u->scheme);
	g_free(u->host);
	g_free(u->path);
	memset(u, 0, sizeof(*u));
}
