/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * test_h1 - HTTP/1.1 response heads and chunked bodies (src/h1.h): the
 * framing each head gives, heads split anywhere, 1xx heads, the
 * connection's reuse, and malformed input refused with a reason.
 */
#include <errno.h>
#include <string.h>

#include "error.h"
#include "h1.h"

static void count_line(const char *line, gsize len, void *data)
{
	GString *s = data;

	g_assert_true(len > 0 && line[len - 1] == '\n');
	g_string_append_len(s, line, len);
}

static gssize parse(const char *text, gboolean head_request, struct h1_head *h,
		    GError **error)
{
	return h1_parse_head(text, strlen(text), head_request, h, NULL, NULL,
			     error);
}

static void test_length(void)
{
	const char *t = "HTTP/1.1 200 OK\r\nContent-Length: 12\r\n"
			"ETag: \"x\"\r\n\r\nhello";
	g_autoptr(GString) lines = g_string_new(NULL);
	struct h1_head h;
	gssize n =
		h1_parse_head(t, strlen(t), FALSE, &h, count_line, lines, NULL);

	g_assert_cmpint(n, ==, (gssize)(strlen(t) - 5));
	g_assert_cmpint(h.status, ==, 200);
	g_assert_cmpint(h.framing, ==, H1_LENGTH);
	g_assert_cmpuint(h.length, ==, 12);
	g_assert_true(h.keep_alive);
	g_assert_false(h.informational);
	/* Every line, the status line and the empty one included. */
	g_assert_cmpstr(lines->str, ==,
			"HTTP/1.1 200 OK\r\nContent-Length: 12\r\n"
			"ETag: \"x\"\r\n\r\n");
}

static void test_split_anywhere(void)
{
	const char *t =
		"HTTP/1.1 206 Partial Content\r\ncontent-length:  7 \r\n"
		"Connection: keep-alive\r\n\r\n";
	gsize i;

	for (i = 0; i < strlen(t); i++) {
		struct h1_head h;
		GError *error = NULL;

		g_assert_cmpint(
			h1_parse_head(t, i, FALSE, &h, NULL, NULL, &error), ==,
			0);
		g_assert_no_error(error);
	}
	{
		struct h1_head h;

		g_assert_cmpint(parse(t, FALSE, &h, NULL), ==,
				(gssize)strlen(t));
		g_assert_cmpint(h.status, ==, 206);
		g_assert_cmpuint(h.length, ==, 7);
	}
}

static void test_framings(void)
{
	static const struct {
		const char *head;
		gboolean head_request;
		long status;
		enum h1_framing framing;
		gboolean keep_alive;
	} cases[] = {
		{ "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
		  FALSE, 200, H1_CHUNKED, TRUE },
		{ "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, Chunked\r\n\r\n",
		  FALSE, 200, H1_CHUNKED, TRUE },
		/* Transfer-Encoding wins over Content-Length; no reuse. */
		{ "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n"
		  "Transfer-Encoding: chunked\r\n\r\n",
		  FALSE, 200, H1_CHUNKED, FALSE },
		{ "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", FALSE,
		  200, H1_CLOSE, FALSE },
		{ "HTTP/1.1 200 OK\r\n\r\n", FALSE, 200, H1_CLOSE, FALSE },
		{ "HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n", TRUE, 200,
		  H1_NONE, TRUE },
		{ "HTTP/1.1 204 No Content\r\n\r\n", FALSE, 204, H1_NONE,
		  TRUE },
		{ "HTTP/1.1 304 Not Modified\r\nContent-Length: 9\r\n\r\n",
		  FALSE, 304, H1_NONE, TRUE },
		{ "HTTP/1.1 100 Continue\r\n\r\n", FALSE, 100, H1_NONE, TRUE },
		{ "HTTP/1.1 503 Slow Down\r\nContent-Length: 5\r\n"
		  "Connection: close\r\n\r\n",
		  FALSE, 503, H1_LENGTH, FALSE },
		{ "HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\n", FALSE, 200,
		  H1_LENGTH, FALSE },
		{ "HTTP/1.0 200 OK\r\nContent-Length: 1\r\n"
		  "Connection: Keep-Alive\r\n\r\n",
		  FALSE, 200, H1_LENGTH, TRUE },
		/* Bare LFs, and a status line without a reason. */
		{ "HTTP/1.1 404\nContent-Length: 0\n\n", FALSE, 404, H1_LENGTH,
		  TRUE },
		/* The same length twice is one length. */
		{ "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n"
		  "Content-Length: 4\r\n\r\n",
		  FALSE, 200, H1_LENGTH, TRUE },
	};
	gsize i;

	for (i = 0; i < G_N_ELEMENTS(cases); i++) {
		struct h1_head h;
		GError *error = NULL;

		g_test_message("case %" G_GSIZE_FORMAT ": %s", i,
			       cases[i].head);
		g_assert_cmpint(
			parse(cases[i].head, cases[i].head_request, &h, &error),
			==, (gssize)strlen(cases[i].head));
		g_assert_no_error(error);
		g_assert_cmpint(h.status, ==, cases[i].status);
		g_assert_cmpint(h.framing, ==, cases[i].framing);
		g_assert_cmpint(h.keep_alive, ==, cases[i].keep_alive);
		g_assert_cmpint(h.informational, ==, cases[i].status < 200);
	}
}

static void test_malformed(void)
{
	static const struct {
		const char *head;
		const char *says;
	} cases[] = {
		{ "SSH-2.0-OpenSSH\r\n\r\n", "not an HTTP response" },
		{ "HTTP/2 200\r\n\r\n", "malformed status line" },
		{ "HTTP/1.1 20 OK\r\n\r\n", "malformed status line" },
		{ "HTTP/1.1 200OK\r\n\r\n", "malformed status line" },
		{ "HTTP/1.1 099 Odd\r\n\r\n", "status 99" },
		{ "HTTP/1.1 200 OK\r\nContent-Length: 1x\r\n\r\n",
		  "malformed Content-Length '1x'" },
		{ "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
		  "malformed Content-Length" },
		{ "HTTP/1.1 200 OK\r\nContent-Length:\r\n\r\n",
		  "empty Content-Length" },
		{ "HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999\r\n"
		  "\r\n",
		  "malformed Content-Length" },
		{ "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n"
		  "Content-Length: 2\r\n\r\n",
		  "two Content-Lengths: 1 and 2" },
		{ "HTTP/1.1 200 OK\r\nX-A: 1\r\n folded\r\n\r\n", "obs-fold" },
		{ "HTTP/1.1 200 OK\r\nno colon here\r\n\r\n",
		  "malformed header line 'no colon here'" },
		{ "HTTP/1.1 200 OK\r\nBad Name: 1\r\n\r\n",
		  "malformed header line" },
		{ "HTTP/1.1 101 Switching Protocols\r\n\r\n",
		  "101 Switching Protocols" },
	};
	gsize i;

	for (i = 0; i < G_N_ELEMENTS(cases); i++) {
		struct h1_head h;
		GError *error = NULL;

		g_test_message("case %" G_GSIZE_FORMAT ": %s", i,
			       cases[i].head);
		g_assert_cmpint(parse(cases[i].head, FALSE, &h, &error), ==,
				-1);
		g_assert_error(error, BFS_ERROR, EPROTO);
		g_assert_nonnull(strstr(error->message, cases[i].says));
		g_error_free(error);
	}
}

static void test_too_long(void)
{
	g_autoptr(GString) s = g_string_new("HTTP/1.1 200 OK\r\n");
	struct h1_head h;
	GError *error = NULL;

	while (s->len < H1_HEAD_MAX + 10)
		g_string_append(s,
				"X-Pad: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n");
	g_assert_cmpint(
		h1_parse_head(s->str, s->len, FALSE, &h, NULL, NULL, &error),
		==, -1);
	g_assert_error(error, BFS_ERROR, EPROTO);
	g_assert_nonnull(strstr(error->message, "longer than"));
	g_error_free(error);
}

static void collect(const char *p, gsize n, void *data)
{
	g_string_append_len(data, p, n);
}

/* Feeds @body in pieces of @step bytes; returns what was decoded, and the
 * bytes taken in all in @took. */
static GString *dechunk(const char *body, gsize len, gsize step, gsize *took,
			GError **error)
{
	struct h1_chunked c = { 0 };
	GString *out = g_string_new(NULL);
	gsize off = 0;

	*took = 0;
	while (off < len && !c.done) {
		gsize n = MIN(step, len - off);
		gssize r =
			h1_chunked_feed(&c, body + off, n, collect, out, error);

		if (r < 0) {
			g_string_free(out, TRUE);
			return NULL;
		}
		*took += r;
		off += n;
	}
	g_assert_true(c.done);
	return out;
}

static void test_chunked(void)
{
	const char *body =
		"5;ext=1\r\nhello\r\n1A\r\nabcdefghijklmnopqrstuvwxyz"
		"\r\n0\r\nX-Trailer: 1\r\n\r\nNEXT";
	gsize len = strlen(body), step;

	for (step = 1; step <= len; step++) {
		gsize took;
		GError *error = NULL;
		g_autoptr(GString) out =
			dechunk(body, len, step, &took, &error);

		g_assert_no_error(error);
		g_assert_cmpstr(out->str, ==,
				"helloabcdefghijklmnopqrstuvwxyz");
		/* "NEXT" is not the body's. */
		g_assert_cmpuint(took, ==, len - 4);
	}
}

static void test_chunked_malformed(void)
{
	static const struct {
		const char *body;
		const char *says;
	} cases[] = {
		{ "zz\r\n", "byte 0x7a in a chunk size" },
		{ "\r\n", "a chunk without a size" },
		{ "3\r\nabcX\r\n", "not followed by CRLF" },
		{ "1000000000000000\r\n", "over 15 hex digits" },
	};
	gsize i;

	for (i = 0; i < G_N_ELEMENTS(cases); i++) {
		struct h1_chunked c = { 0 };
		g_autoptr(GString) out = g_string_new(NULL);
		GError *error = NULL;

		g_assert_cmpint(h1_chunked_feed(&c, cases[i].body,
						strlen(cases[i].body), collect,
						out, &error),
				==, -1);
		g_assert_error(error, BFS_ERROR, EPROTO);
		g_assert_nonnull(strstr(error->message, cases[i].says));
		g_error_free(error);
	}
}

int main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);
	g_test_add_func("/h1/length", test_length);
	g_test_add_func("/h1/split_anywhere", test_split_anywhere);
	g_test_add_func("/h1/framings", test_framings);
	g_test_add_func("/h1/malformed", test_malformed);
	g_test_add_func("/h1/too_long", test_too_long);
	g_test_add_func("/h1/chunked", test_chunked);
	g_test_add_func("/h1/chunked_malformed", test_chunked_malformed);
	return g_test_run();
}
