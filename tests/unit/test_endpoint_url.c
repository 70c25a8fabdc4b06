/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * test_endpoint_url - endpoint_url_parse(): what it splits out of good
 * URLs (IPv6 literals, default ports, paths) and the message it gives for
 * bad ones, which must say the URL and why.
 */
#include <errno.h>

#include "endpoint_url.h"
#include "error.h"

struct good {
	const char *url;
	const char *scheme;
	const char *host;
	guint port;
	gboolean port_given;
	const char *path;
};

static const struct good goods[] = {
	{ "http://127.0.0.1:9000", "http", "127.0.0.1", 9000, TRUE, "" },
	{ "http://[::1]:9000", "http", "::1", 9000, TRUE, "" },
	{ "http://[::1]", "http", "::1", 80, FALSE, "" },
	{ "https://[2001:DB8::7]:443/", "https", "2001:db8::7", 443, TRUE,
	  "/" },
	{ "http://[::ffff:10.0.0.7]:9000", "http", "::ffff:10.0.0.7", 9000,
	  TRUE, "" },
	{ "http://s3.local", "http", "s3.local", 80, FALSE, "" },
	{ "https://s3.us-east-1.amazonaws.com", "https",
	  "s3.us-east-1.amazonaws.com", 443, FALSE, "" },
	{ "HTTPS://S3.Example.COM:8443", "https", "s3.example.com", 8443, TRUE,
	  "" },
	{ "http://h:0080", "http", "h", 80, TRUE, "" },
	{ "http://h:65535", "http", "h", 65535, TRUE, "" },
	{ "http://store.lan/", "http", "store.lan", 80, FALSE, "/" },
	/* Path-style bucket prefixes are returned for the caller to judge. */
	{ "http://store.lan:9000/bucket", "http", "store.lan", 9000, TRUE,
	  "/bucket" },
	{ "http://store.lan/bucket/prefix/", "http", "store.lan", 80, FALSE,
	  "/bucket/prefix/" },
	{ "http://h/a%2Fb", "http", "h", 80, FALSE, "/a%2Fb" },
	{ "http://my_host.x", "http", "my_host.x", 80, FALSE, "" },
};

static void test_good(void)
{
	gsize i;

	for (i = 0; i < G_N_ELEMENTS(goods); i++) {
		const struct good *g = &goods[i];
		g_autoptr(GError) error = NULL;
		struct endpoint_url u;

		g_test_message("%s", g->url);
		g_assert_true(endpoint_url_parse(g->url, &u, &error));
		g_assert_no_error(error);
		g_assert_cmpstr(u.scheme, ==, g->scheme);
		g_assert_cmpstr(u.host, ==, g->host);
		g_assert_cmpuint(u.port, ==, g->port);
		g_assert_cmpint(u.port_given, ==, g->port_given);
		g_assert_cmpstr(u.path, ==, g->path);
		endpoint_url_clear(&u);
		g_assert_null(u.host);
		endpoint_url_clear(&u);
	}
}

struct bad {
	const char *url;
	const char *message;
};

static const struct bad bads[] = {
	{ "", "'': expected http://HOST[:PORT] or https://HOST[:PORT]" },
	{ "garbage", "'garbage': expected http://HOST[:PORT] or "
		     "https://HOST[:PORT]" },
	{ "http:/h", "'http:/h': expected http://HOST[:PORT] or "
		     "https://HOST[:PORT]" },
	{ "ftp://h", "'ftp://h': the scheme must be http or https" },
	{ "s3://bucket", "'s3://bucket': the scheme must be http or https" },
	{ "://h", "'://h': the scheme must be http or https" },
	{ "http://", "'http://': no host" },
	{ "http://:9000", "'http://:9000': no host" },
	{ "http:///", "'http:///': no host" },
	{ "http://[::1", "'http://[::1': invalid IPv6 address" },
	{ "http://[]", "'http://[]': invalid IPv6 address" },
	{ "http://[zz]:80", "'http://[zz]:80': invalid IPv6 address" },
	{ "http://[::1]x", "'http://[::1]x': invalid IPv6 address" },
	{ "http://[fe80::1%25eth0]",
	  "'http://[fe80::1%25eth0]': invalid IPv6 address" },
	{ "http://h:", "'http://h:': the port must be a number between 1 "
		       "and 65535" },
	{ "http://h:0", "'http://h:0': the port must be a number between 1 "
			"and 65535" },
	{ "http://h:65536", "'http://h:65536': the port must be a number "
			    "between 1 and 65535" },
	{ "http://h:+80", "'http://h:+80': the port must be a number "
			  "between 1 and 65535" },
	{ "http://h:80:90", "'http://h:80:90': the port must be a number "
			    "between 1 and 65535" },
	{ "http://[::1]:x", "'http://[::1]:x': the port must be a number "
			    "between 1 and 65535" },
	{ "http://a b", "'http://a b': invalid character in the host name" },
	{ "http://ex%41mple",
	  "'http://ex%41mple': invalid character in the host name" },
	{ "http://a!b", "'http://a!b': invalid character in the host name" },
	{ "http://h?x=1", "'http://h?x=1': a query is not supported" },
	{ "http://h/#f", "'http://h/#f': a query is not supported" },
	{ "http://h\x01", "'http://h\\x01': invalid character in the host "
			  "name" },
	/* Userinfo is refused, and never quoted. */
	{ "http://user:secret@h:9000",
	  "'http://...@h:9000': a user name or password in the URL is not "
	  "supported (credentials come from the environment or a profile)" },
	{ "https://k:s/e#c@r@host/",
	  "'https://...@host/': a user name or password in the URL is not "
	  "supported (credentials come from the environment or a profile)" },
	{ "user:secret@h", "'...@h': expected http://HOST[:PORT] or "
			   "https://HOST[:PORT]" },
};

static void test_bad(void)
{
	gsize i;

	for (i = 0; i < G_N_ELEMENTS(bads); i++) {
		g_autoptr(GError) error = NULL;
		struct endpoint_url u = { .port = 7 };

		g_test_message("%s", bads[i].url);
		g_assert_false(endpoint_url_parse(bads[i].url, &u, &error));
		g_assert_error(error, BFS_ERROR, EINVAL);
		g_assert_cmpstr(error->message, ==, bads[i].message);
		g_assert_null(strstr(error->message, "secret"));
		g_assert_null(u.host);
		g_assert_cmpuint(u.port, ==, 7);
	}
}

static void test_shown(void)
{
	g_autofree char *plain = endpoint_url_shown("http://h:9000/");
	g_autofree char *creds = endpoint_url_shown("http://u:p@h");
	g_autofree char *no_scheme = endpoint_url_shown("u:p@h");

	g_assert_cmpstr(plain, ==, "http://h:9000/");
	g_assert_cmpstr(creds, ==, "http://...@h");
	g_assert_cmpstr(no_scheme, ==, "...@h");
}

int main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);
	g_test_add_func("/endpoint_url/good", test_good);
	g_test_add_func("/endpoint_url/bad", test_bad);
	g_test_add_func("/endpoint_url/shown", test_shown);
	return g_test_run();
}
