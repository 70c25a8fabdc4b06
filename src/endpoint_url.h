/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * endpoint_url.h - the one parser of S3 endpoint URLs,
 * "http[s]://HOST[:PORT][/PATH]", on GLib's GUri.
 *
 *	struct endpoint_url u;
 *
 *	if (!endpoint_url_parse("https://[::1]:9000/", &u, &error))
 *		...;
 *	... u.scheme "https", u.host "::1", u.port 9000, u.path "/" ...
 *	endpoint_url_clear(&u);
 *
 * Threads: no state; any thread.
 */
#ifndef BUCKETFS_ENDPOINT_URL_H
#define BUCKETFS_ENDPOINT_URL_H

#include <glib.h>

/* Plain data, owned by the caller; endpoint_url_clear(). */
struct endpoint_url {
	char *scheme;	     /* "http" or "https" */
	char *host;	     /* lower case; IPv6 without its brackets */
	guint port;	     /* as given, else 80 (http) or 443 (https) */
	gboolean port_given; /* the URL had a port */
	char *path;	     /* as given (not decoded), "" if none */
};

/*
 * Splits @url into @out.  The scheme is http or https (any case); the
 * host is an IPv6 literal in brackets or a name of letters, digits, '-',
 * '.' and '_' (no percent-encoding); the port 1 to 65535.  A user name or
 * password, a query and a fragment are refused; any path is returned for
 * the caller to judge.  On error @out is untouched.
 *
 * Errors: BFS_ERROR/EINVAL "'URL': why", with the URL as
 * endpoint_url_shown() shows it and control characters escaped, e.g.
 * "'ftp://h': the scheme must be http or https".  Callers prefix the
 * option or variable it came from.
 */
gboolean endpoint_url_parse(const char *url, struct endpoint_url *out,
			    GError **error);

/* Frees what @u owns and zeroes it.  Safe to call twice. */
void endpoint_url_clear(struct endpoint_url *u);

/*
 * What an error may quote of @url, newly allocated: all of it, unless it
 * has an '@', which may end a user:password part (itself possibly holding
 * '/', '#' or '@'): then only the scheme and what follows the last '@'.
 * Not escaped.
 */
char *endpoint_url_shown(const char *url);

#endif
