/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * h1.c - HTTP/1.1 response heads and chunked bodies (h1.h), after RFC
 * 9112: a line ends in CRLF or a bare LF; Transfer-Encoding overrides
 * Content-Length (and the connection is then not reused); two different
 * Content-Lengths, a folded header line or a malformed size are refused.
 */
#include <errno.h>
#include <string.h>

#include "error.h"
#include "h1.h"

#define CHUNK_DIGITS_MAX 15	    /* hex digits of a size: < 2^60 */
#define CHUNK_LINE_MAX	 (4u << 10) /* an extension or trailer line */

static gboolean is_tchar(char c)
{
	return g_ascii_isalnum(c) || (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* Whether the comma-separated @v (@n bytes) has the token @tok. */
static gboolean has_token(const char *v, gsize n, const char *tok)
{
	gsize t = strlen(tok), i = 0;

	while (i < n) {
		gsize s, e;

		while (i < n && (v[i] == ' ' || v[i] == '\t' || v[i] == ','))
			i++;
		s = i;
		while (i < n && v[i] != ',')
			i++;
		e = i;
		while (e > s && (v[e - 1] == ' ' || v[e - 1] == '\t'))
			e--;
		if (e - s == t && !g_ascii_strncasecmp(v + s, tok, t))
			return TRUE;
	}
	return FALSE;
}

/* The last coding of a Transfer-Encoding value is chunked. */
static gboolean ends_chunked(const char *v, gsize n)
{
	gsize e = n, s;

	while (e > 0 && (v[e - 1] == ' ' || v[e - 1] == '\t'))
		e--;
	s = e;
	while (s > 0 && v[s - 1] != ',')
		s--;
	while (s < e && (v[s] == ' ' || v[s] == '\t'))
		s++;
	return e - s == 7 && !g_ascii_strncasecmp(v + s, "chunked", 7);
}

static gboolean parse_status_line(const char *p, gsize n, struct h1_head *out,
				  gboolean *http10, GError **error)
{
	if (n < 12 || memcmp(p, "HTTP/1.", 7) != 0 || !g_ascii_isdigit(p[7]) ||
	    p[8] != ' ' || !g_ascii_isdigit(p[9]) || !g_ascii_isdigit(p[10]) ||
	    !g_ascii_isdigit(p[11]) || (n > 12 && p[12] != ' ')) {
		g_set_error(error, BFS_ERROR, EPROTO,
			    "malformed status line '%.*s'", (int)MIN(n, 80), p);
		return FALSE;
	}
	*http10 = p[7] == '0';
	out->status = (p[9] - '0') * 100 + (p[10] - '0') * 10 + (p[11] - '0');
	if (out->status < 100) {
		g_set_error(error, BFS_ERROR, EPROTO, "status %ld in '%.*s'",
			    out->status, (int)MIN(n, 80), p);
		return FALSE;
	}
	return TRUE;
}

static gboolean parse_length(const char *v, gsize n, guint64 *out,
			     GError **error)
{
	guint64 x = 0;
	gsize i;

	for (i = 0; i < n; i++) {
		if (!g_ascii_isdigit(v[i]) || x > (G_MAXUINT64 - 9) / 10) {
			g_set_error(error, BFS_ERROR, EPROTO,
				    "malformed Content-Length '%.*s'",
				    (int)MIN(n, 40), v);
			return FALSE;
		}
		x = x * 10 + (guint64)(v[i] - '0');
	}
	if (!n) {
		g_set_error_literal(error, BFS_ERROR, EPROTO,
				    "empty Content-Length");
		return FALSE;
	}
	*out = x;
	return TRUE;
}

gssize h1_parse_head(const char *buf, gsize len, gboolean head_request,
		     struct h1_head *out, h1_line_fn line, void *data,
		     GError **error)
{
	gboolean http10 = FALSE, has_length = FALSE, chunked = FALSE;
	gboolean te = FALSE, close = FALSE, keep = FALSE;
	const char *end = NULL, *p, *stop;
	gsize i;

	memset(out, 0, sizeof(*out));
	if (len >= 5 && memcmp(buf, "HTTP/", 5) != 0) {
		g_autofree char *raw = g_strndup(buf, MIN(len, 16));
		g_autofree char *esc = g_strescape(raw, NULL);

		g_set_error(error, BFS_ERROR, EPROTO,
			    "not an HTTP response: it starts with '%s'", esc);
		return -1;
	}
	/* The head ends at the first empty line. */
	for (i = 0; i < len; i++) {
		if (buf[i] != '\n')
			continue;
		if (i + 1 < len && buf[i + 1] == '\n') {
			end = buf + i + 2;
			break;
		}
		if (i + 2 < len && buf[i + 1] == '\r' && buf[i + 2] == '\n') {
			end = buf + i + 3;
			break;
		}
	}
	if (!end) {
		if (len < H1_HEAD_MAX)
			return 0;
		g_set_error(error, BFS_ERROR, EPROTO,
			    "response head longer than %u bytes", H1_HEAD_MAX);
		return -1;
	}
	if ((gsize)(end - buf) > H1_HEAD_MAX) {
		g_set_error(error, BFS_ERROR, EPROTO,
			    "response head longer than %u bytes", H1_HEAD_MAX);
		return -1;
	}
	for (p = buf; p < end; p = stop) {
		const char *nl = memchr(p, '\n', end - p);
		const char *e = nl, *colon, *v;

		stop = nl + 1;
		if (e > p && e[-1] == '\r')
			e--;
		if (p == buf) {
			if (!parse_status_line(p, e - p, out, &http10, error))
				return -1;
			continue;
		}
		if (e == p) /* the empty line */
			break;
		if (*p == ' ' || *p == '\t') {
			g_set_error_literal(error, BFS_ERROR, EPROTO,
					    "folded header line (obs-fold)");
			return -1;
		}
		colon = memchr(p, ':', e - p);
		for (v = p; colon && v < colon && is_tchar(*v); v++)
			;
		if (!colon || colon == p || v != colon) {
			g_set_error(error, BFS_ERROR, EPROTO,
				    "malformed header line '%.*s'",
				    (int)MIN(e - p, 80), p);
			return -1;
		}
		for (v = colon + 1; v < e && (*v == ' ' || *v == '\t'); v++)
			;
		while (e > v && (e[-1] == ' ' || e[-1] == '\t'))
			e--;
		if (colon - p == 14 &&
		    !g_ascii_strncasecmp(p, "Content-Length", 14)) {
			guint64 n;

			if (!parse_length(v, e - v, &n, error))
				return -1;
			if (has_length && n != out->length) {
				g_set_error(error, BFS_ERROR, EPROTO,
					    "two Content-Lengths: "
					    "%" G_GUINT64_FORMAT
					    " and %" G_GUINT64_FORMAT,
					    out->length, n);
				return -1;
			}
			has_length = TRUE;
			out->length = n;
		} else if (colon - p == 17 &&
			   !g_ascii_strncasecmp(p, "Transfer-Encoding", 17)) {
			te = TRUE;
			chunked = ends_chunked(v, e - v);
		} else if (colon - p == 10 &&
			   !g_ascii_strncasecmp(p, "Connection", 10)) {
			close |= has_token(v, e - v, "close");
			keep |= has_token(v, e - v, "keep-alive");
		}
	}
	out->keep_alive = !close && (!http10 || keep);
	if (line)
		for (p = buf; p < end; p = stop) {
			stop = (const char *)memchr(p, '\n', end - p) + 1;
			line(p, stop - p, data);
		}
	if (out->status == 101) {
		g_set_error_literal(error, BFS_ERROR, EPROTO,
				    "101 Switching Protocols to a request "
				    "that asked for no upgrade");
		return -1;
	}
	if (out->status < 200) {
		out->informational = TRUE;
		out->framing = H1_NONE;
	} else if (head_request || out->status == 204 || out->status == 304) {
		out->framing = H1_NONE;
	} else if (te) {
		/* A body that is not chunked last runs to the close. */
		out->framing = chunked ? H1_CHUNKED : H1_CLOSE;
		if (has_length || !chunked)
			out->keep_alive = FALSE;
	} else if (has_length) {
		out->framing = H1_LENGTH;
	} else {
		out->framing = H1_CLOSE;
		out->keep_alive = FALSE;
	}
	return end - buf;
}

enum {
	C_SIZE,
	C_EXT,
	C_DATA,
	C_DATA_END,
	C_TRAILER_START,
	C_TRAILER,
};

/* The size line ended: data follows, or the trailers. */
static gboolean size_done(struct h1_chunked *c, GError **error)
{
	if (!c->digits) {
		g_set_error_literal(error, BFS_ERROR, EPROTO,
				    "chunked body: a chunk without a size");
		return FALSE;
	}
	c->state = c->left ? C_DATA : C_TRAILER_START;
	return TRUE;
}

gssize h1_chunked_feed(struct h1_chunked *c, const char *in, gsize n,
		       h1_data_fn out, void *data, GError **error)
{
	gsize i = 0;

	while (i < n && !c->done) {
		char ch = in[i];

		switch (c->state) {
		case C_SIZE:
			if (g_ascii_isxdigit(ch)) {
				if (++c->digits > CHUNK_DIGITS_MAX) {
					g_set_error_literal(
						error, BFS_ERROR, EPROTO,
						"chunked body: a chunk size "
						"over 15 hex digits");
					return -1;
				}
				c->left = c->left * 16 +
					  (guint64)g_ascii_xdigit_value(ch);
			} else if (ch == ';' || ch == ' ' || ch == '\t' ||
				   ch == '\r') {
				c->state = C_EXT;
				c->line_len = 0;
			} else if (ch == '\n') {
				if (!size_done(c, error))
					return -1;
			} else {
				g_set_error(error, BFS_ERROR, EPROTO,
					    "chunked body: byte 0x%02x in a "
					    "chunk size",
					    (guint8)ch);
				return -1;
			}
			i++;
			break;
		case C_EXT:
			if (ch == '\n') {
				if (!size_done(c, error))
					return -1;
			} else if (++c->line_len > CHUNK_LINE_MAX) {
				g_set_error(error, BFS_ERROR, EPROTO,
					    "chunked body: a chunk extension "
					    "over %u bytes",
					    CHUNK_LINE_MAX);
				return -1;
			}
			i++;
			break;
		case C_DATA: {
			gsize take = (gsize)MIN((guint64)(n - i), c->left);

			out(in + i, take, data);
			c->left -= take;
			i += take;
			if (!c->left)
				c->state = C_DATA_END;
			break;
		}
		case C_DATA_END:
			if (ch == '\n') {
				c->state = C_SIZE;
				c->digits = 0;
				c->left = 0;
			} else if (ch != '\r') {
				g_set_error_literal(error, BFS_ERROR, EPROTO,
						    "chunked body: chunk data "
						    "not followed by CRLF");
				return -1;
			}
			i++;
			break;
		case C_TRAILER_START:
			if (ch == '\n')
				c->done = TRUE;
			else if (ch != '\r') {
				c->state = C_TRAILER;
				c->line_len = 1;
			}
			i++;
			break;
		default: /* C_TRAILER */
			if (ch == '\n')
				c->state = C_TRAILER_START;
			else if (++c->line_len > CHUNK_LINE_MAX) {
				g_set_error(error, BFS_ERROR, EPROTO,
					    "chunked body: a trailer line "
					    "over %u bytes",
					    CHUNK_LINE_MAX);
				return -1;
			}
			i++;
			break;
		}
	}
	return (gssize)i;
}
