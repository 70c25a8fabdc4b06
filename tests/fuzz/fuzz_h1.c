/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * fuzz_h1 - libFuzzer target for the HTTP/1.1 framing of the direct
 * receive path (src/h1.h), which reads whatever a server sends.
 *
 * The first input byte picks the mode (bit 0) and, for heads, whether the
 * request was a HEAD (bit 1), for chunked bodies the size of the pieces
 * (the byte's upper bits); the rest is the input:
 *   0  a response head: a failure is EPROTO with a message; "more" (0)
 *      only below H1_HEAD_MAX bytes; a head taken ends in a line end, is
 *      at most H1_HEAD_MAX bytes, has a status of 100 to 999, a framing
 *      the enum knows (none for 1xx and HEAD), and the lines handed out
 *      are exactly the head's bytes; every prefix of the input that ends
 *      before the head does asks for more;
 *   1  a chunked body: fed whole or in pieces, the decoded bytes, the
 *      bytes taken and the verdict are the same, and a failure is EPROTO
 *      with a message.
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "error.h"
#include "fuzz.h"
#include "h1.h"

static void collect(const char *p, gsize n, void *data)
{
	g_string_append_len(data, p, n);
}

static void line_out(const char *line, gsize len, void *data)
{
	CHECK(len > 0 && line[len - 1] == '\n');
	g_string_append_len(data, line, len);
}

static void check_error(const GError *error)
{
	CHECK(error && error->domain == BFS_ERROR && error->code == EPROTO);
	CHECK(error->message && error->message[0]);
}

static void fuzz_head(const char *p, gsize n, gboolean head_request)
{
	g_autoptr(GString) lines = g_string_new(NULL);
	GError *error = NULL;
	struct h1_head h;
	gssize took =
		h1_parse_head(p, n, head_request, &h, line_out, lines, &error);

	if (took < 0) {
		check_error(error);
		g_error_free(error);
		return;
	}
	CHECK(!error);
	if (!took) {
		CHECK(n < H1_HEAD_MAX);
		CHECK(lines->len == 0);
		return;
	}
	CHECK((gsize)took <= n && took <= (gssize)H1_HEAD_MAX);
	CHECK(p[took - 1] == '\n');
	CHECK(h.status >= 100 && h.status <= 999);
	CHECK(h.framing >= H1_NONE && h.framing <= H1_CLOSE);
	CHECK(h.informational == (h.status < 200));
	if (h.informational || head_request)
		CHECK(h.framing == H1_NONE);
	if (h.framing == H1_CLOSE)
		CHECK(!h.keep_alive);
	CHECK(lines->len == (gsize)took && !memcmp(lines->str, p, took));
	/* A prefix that ends before the head is not a head. */
	{
		struct h1_head h2;
		GError *e2 = NULL;
		gssize t2 = h1_parse_head(p, took - 1, head_request, &h2, NULL,
					  NULL, &e2);

		CHECK(t2 <= 0);
		if (t2 < 0)
			g_error_free(e2);
	}
}

static void fuzz_chunked(const char *p, gsize n, gsize step)
{
	struct h1_chunked whole = { 0 }, parts = { 0 };
	g_autoptr(GString) a = g_string_new(NULL);
	g_autoptr(GString) b = g_string_new(NULL);
	GError *ea = NULL, *eb = NULL;
	gssize ta = h1_chunked_feed(&whole, p, n, collect, a, &ea);
	gssize tb = 0;
	gsize off = 0;

	while (off < n && !parts.done) {
		gsize k = MIN(step, n - off);
		gssize r = h1_chunked_feed(&parts, p + off, k, collect, b, &eb);

		if (r < 0) {
			tb = -1;
			break;
		}
		CHECK((gsize)r <= k);
		tb += r;
		if ((gsize)r < k)
			CHECK(parts.done);
		off += k;
	}
	CHECK((ta < 0) == (tb < 0));
	if (ta < 0) {
		check_error(ea);
		check_error(eb);
		g_error_free(ea);
		g_error_free(eb);
		return;
	}
	CHECK(ta == tb && whole.done == parts.done);
	CHECK(a->len == b->len && !memcmp(a->str, b->str, a->len));
	CHECK((gsize)ta <= n && (whole.done || (gsize)ta == n));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	if (data[0] & 1)
		fuzz_chunked((const char *)data + 1, size - 1,
			     1 + (data[0] >> 2));
	else
		fuzz_head((const char *)data + 1, size - 1, (data[0] & 2) != 0);
	return 0;
}
