/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * h1.h - the HTTP/1.1 response framing of the engine's direct receive
 * path (http.c): a response head parsed, and a chunked body decoded.
 *
 * The direct path reads a GET's response from its own socket, so that a
 * body framed by Content-Length is received straight into the body's
 * buffer; curl's would take every byte through its own buffer first (a
 * memmove per byte, docs/PERFORMANCE.md, "The direct receive path").  What curl
 * still does is everything else: HTTPS, proxies, uploads, every other
 * method, and the first connection to an endpoint (the direct path uses
 * the address curl connected to).
 *
 * Pure functions: no I/O, no clock, no logging.  Input may be anything
 * (it is fuzzed): malformed input gives a GError in BFS_ERROR (EPROTO),
 * never a crash.
 */
#ifndef BUCKETFS_H1_H
#define BUCKETFS_H1_H

#include <glib.h>

/* How the body after a head is delimited. */
enum h1_framing {
	H1_NONE,    /* no body: HEAD, 1xx, 204, 304 */
	H1_LENGTH,  /* Content-Length bytes */
	H1_CHUNKED, /* Transfer-Encoding: chunked */
	H1_CLOSE,   /* until the server closes the connection */
};

/* A response head, once parsed. */
struct h1_head {
	long status;
	enum h1_framing framing;
	guint64 length;		/* H1_LENGTH's */
	gboolean keep_alive;	/* the connection may carry another request */
	gboolean informational; /* 1xx: another head follows */
};

/* Each line of a head, status line first, as curl's header callback has
 * it: the bytes of the line with its line end. */
typedef void (*h1_line_fn)(const char *line, gsize len, void *data);

/* Longest head taken (status line and headers). */
#define H1_HEAD_MAX (64u << 10)

/*
 * Parses the head at the start of @buf (@len bytes).  Returns the bytes it
 * took once the head is whole (through its empty line), 0 when more bytes
 * are needed, -1 with @error when it is malformed or longer than
 * H1_HEAD_MAX.  @line is called for each line of a whole head only.
 * @head_request: the request was a HEAD (no body, whatever the headers).
 */
gssize h1_parse_head(const char *buf, gsize len, gboolean head_request,
		     struct h1_head *out, h1_line_fn line, void *data,
		     GError **error);

/* The state of a chunked body's decoding. */
struct h1_chunked {
	int state;
	guint64 left;	/* data bytes left in the current chunk */
	guint digits;	/* of the size line so far */
	guint line_len; /* of a trailer or extension line, so far */
	gboolean done;	/* the last chunk and its trailers are in */
};

/* Data decoded from a chunked body: @n bytes at @p. */
typedef void (*h1_data_fn)(const char *p, gsize n, void *data);

/*
 * Decodes @n bytes of a chunked body, calling @out for its data.  Returns
 * the bytes it took (fewer than @n only once the body is done: the rest
 * is not the body's), or -1 with @error on malformed framing.
 */
gssize h1_chunked_feed(struct h1_chunked *c, const char *in, gsize n,
		       h1_data_fn out, void *data, GError **error);

#endif
