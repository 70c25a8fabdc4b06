/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * fuzz_encoding - libFuzzer target for the encodings that put keys on the
 * wire and into logs, each checked against an independent decoder:
 *
 *   sigv4_uri_encode()   only unreserved bytes, '/' (when kept) and %XX
 *                        with uppercase hex come out, and decoding gives
 *                        back the input byte for byte;
 *   log_escape()         valid UTF-8 without control characters comes out,
 *                        and undoing \\ and \xNN gives back the input;
 *   the canonical query  (sigv4_canonical_request()) is sorted, fully
 *                        encoded, and canonicalizing it again changes
 *                        nothing; the path is signed verbatim;
 *   sigv4_sign()         is deterministic and never puts the secret key
 *                        into a header.
 *
 * The first input byte picks the mode (modulo 4) and, for the URI
 * encoding, whether '/' is kept; the rest is the text.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "log.h"
#include "sigv4.h"

static gboolean unreserved(guchar c)
{
	return g_ascii_isalnum(c) || c == '-' || c == '.' || c == '_' ||
	       c == '~';
}

static int upper_hex_value(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* Strict decoding of an encoded string: NULL if anything else is in it. */
static GByteArray *uri_decode_strict(const char *s, gboolean slash_ok)
{
	GByteArray *out = g_byte_array_new();

	for (gsize i = 0; s[i]; i++) {
		guchar c = (guchar)s[i];
		int hi, lo;

		if (unreserved(c) || (c == '/' && slash_ok)) {
			g_byte_array_append(out, &c, 1);
			continue;
		}
		hi = c == '%' ? upper_hex_value(s[i + 1]) : -1;
		lo = hi >= 0 ? upper_hex_value(s[i + 2]) : -1;
		if (lo < 0) {
			g_byte_array_unref(out);
			return NULL;
		}
		c = (guchar)(hi << 4 | lo);
		/* Whatever could go unencoded must not have been encoded. */
		if (unreserved(c) || (c == '/' && slash_ok)) {
			g_byte_array_unref(out);
			return NULL;
		}
		g_byte_array_append(out, &c, 1);
		i += 2;
	}
	return out;
}

static void fuzz_uri(const guint8 *data, gsize len, gboolean keep_slash)
{
	g_autofree char *enc =
		sigv4_uri_encode((const char *)data, (gssize)len, keep_slash);
	g_autoptr(GByteArray) dec = NULL;

	CHECK(enc);
	CHECK(strlen(enc) >= len && strlen(enc) <= 3 * len);
	dec = uri_decode_strict(enc, keep_slash);
	CHECK(dec);
	CHECK(dec->len == len && (!len || !memcmp(dec->data, data, len)));
}

static int lower_hex_value(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

static void fuzz_log_escape(const guint8 *data, gsize len)
{
	g_autofree char *esc = log_escape((const char *)data, (gssize)len);
	g_autoptr(GByteArray) back = g_byte_array_new();

	CHECK(esc && g_utf8_validate(esc, -1, NULL));
	for (const char *p = esc; *p; p++) {
		guchar c = (guchar)*p;
		int hi, lo;

		CHECK(c >= 0x20 && c != 0x7f);
		if (c != '\\') {
			g_byte_array_append(back, &c, 1);
			continue;
		}
		if (p[1] == '\\') {
			g_byte_array_append(back, &c, 1);
			p++;
			continue;
		}
		CHECK(p[1] == 'x');
		hi = lower_hex_value(p[2]);
		lo = hi >= 0 ? lower_hex_value(p[3]) : -1;
		CHECK(lo >= 0);
		c = (guchar)(hi << 4 | lo);
		g_byte_array_append(back, &c, 1);
		p += 3;
	}
	CHECK(back->len == len && (!len || !memcmp(back->data, data, len)));
}

/* The third line of the canonical request of GET /b/k?@query. */
static char *canonical_query_of(const char *query)
{
	struct sigv4_request req = {
		.method = "GET",
		.host = "example.com",
		.path = "/b/k%20~",
		.query = query,
		.region = "us-east-1",
		.service = "s3",
		.unix_time = 1369353600,
	};
	g_autofree char *canon = sigv4_canonical_request(&req, NULL, NULL);
	g_auto(GStrv) lines = NULL;

	CHECK(canon);
	lines = g_strsplit(canon, "\n", -1);
	CHECK(g_strv_length(lines) >= 4);
	CHECK(strcmp(lines[0], "GET") == 0);
	CHECK(strcmp(lines[1], "/b/k%20~") == 0);
	return g_strdup(lines[2]);
}

static void fuzz_query(const guint8 *data, gsize len)
{
	g_autofree char *query = g_strndup((const char *)data, len);
	g_autofree char *canon = canonical_query_of(query);
	g_autofree char *again = canonical_query_of(canon);
	g_auto(GStrv) params = g_strsplit(canon, "&", -1);
	const char *prev_name = NULL, *prev_value = NULL;

	CHECK(strcmp(canon, again) == 0);
	for (guint i = 0; *canon && params[i]; i++) {
		char *eq = strchr(params[i], '=');
		g_autoptr(GByteArray) name = NULL;
		g_autoptr(GByteArray) value = NULL;
		int c;

		CHECK(eq);
		*eq = '\0';
		name = uri_decode_strict(params[i], FALSE);
		value = uri_decode_strict(eq + 1, FALSE);
		CHECK(name && value);
		/* Sorted by encoded name, then encoded value. */
		c = prev_name ? strcmp(prev_name, params[i]) : -1;
		CHECK(c < 0 || (c == 0 && strcmp(prev_value, eq + 1) <= 0));
		prev_name = params[i];
		prev_value = eq + 1;
	}
}

static void fuzz_sign(const guint8 *data, gsize len)
{
	g_autofree char *tail = g_strndup((const char *)data, len);
	g_autofree char *secret = g_strconcat("S3CR3T", tail, NULL);
	struct sigv4_credentials creds = {
		.access_key_id = "AKIDEXAMPLE",
		.secret_access_key = secret,
		.session_token = len % 2 ? "TOKEN" : NULL,
	};
	struct sigv4_request req = {
		.method = "GET",
		.host = "example.com:9000",
		.path = "/b/k",
		.query = "list-type=2&prefix=a%2Fb",
		.region = "us-east-1",
		.service = "s3",
		.unix_time = 1369353600,
	};
	g_auto(GStrv) h1 = sigv4_sign(&creds, &req);
	g_auto(GStrv) h2 = sigv4_sign(&creds, &req);

	CHECK(h1 && h2 &&
	      g_strv_equal((const char *const *)h1, (const char *const *)h2));
	for (guint i = 0; h1[i]; i++)
		CHECK(!strstr(h1[i], "S3CR3T"));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size == 0)
		return 0;
	switch (data[0] % 4) {
	case 0:
		fuzz_uri(data + 1, size - 1, data[0] & 4);
		break;
	case 1:
		fuzz_log_escape(data + 1, size - 1);
		break;
	case 2:
		fuzz_query(data + 1, size - 1);
		break;
	case 3:
		fuzz_sign(data + 1, size - 1);
		break;
	}
	return 0;
}
