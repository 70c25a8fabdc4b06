/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * s3_xml.c - what every S3 document needs: libxml2 set up, a body parsed
 * safely into a document, its elements and their text; the <Error>
 * document; S3's timestamps.
 *
 * The other parsers: s3_xml_list.c (ListObjectsV2 pages) and
 * s3_xml_mpu.c (the answers of multipart upload).  What they share is
 * s3_xml_internal.h.
 */
#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <string.h>

#include <libxml/globals.h>
#include <libxml/parser.h>
#include <libxml/tree.h>
#include <libxml/xmlerror.h>

#include "error.h"
#include "s3_xml_internal.h"

#define ERROR_WHAT "S3 error response"

/*
 * No DTD loading, no entity substitution (no XML_PARSE_NOENT), no network:
 * XXE-safe.  A DOCTYPE is refused after parsing anyway.
 */
#define PARSE_OPTIONS                                                          \
	(XML_PARSE_NONET | XML_PARSE_NOCDATA | XML_PARSE_NOWARNING |           \
	 XML_PARSE_BIG_LINES)

/* The first error libxml2 reported while parsing one document. */
struct xml_errors {
	char *first; /* "line 3: Opening and ending tag mismatch: ..." */
};

/* -- documents ---------------------------------------------------------- */

void s3_xml_init(void)
{
	xmlInitParser();
}

static void record_xml_error(struct xml_errors *errs, const xmlError *err)
{
	g_autofree char *msg = NULL;

	if (!err || err->level < XML_ERR_ERROR || errs->first)
		return;
	msg = g_strdup(err->message ? err->message : "unknown XML error");
	g_strstrip(msg);
	if (err->line > 0)
		errs->first = g_strdup_printf("line %d: %s", err->line, msg);
	else
		errs->first = g_steal_pointer(&msg);
}

/* The parser context's channel: @data is ctxt->userData, the context. */
static void on_ctxt_error(void *data, xmlErrorPtr err)
{
	xmlParserCtxtPtr ctxt = data;

	record_xml_error(ctxt->_private, err);
}

/* The thread's channel, for errors raised without a context (iconv). */
static void on_thread_error(void *data, xmlErrorPtr err)
{
	record_xml_error(data, err);
}

/*
 * Parses @buf into a document, or sets @error with libxml2's first error.
 * libxml2 must never write to stderr: the context gets our structured
 * handler, and so does this thread for the duration (errors raised without
 * a context, such as encoding conversion failures, go there); the thread's
 * previous handler is restored before returning.
 */
xmlDocPtr parse_doc(const char *buf, gsize len, const char *what,
		    GError **error)
{
	xmlStructuredErrorFunc old_handler = xmlStructuredError;
	void *old_data = xmlStructuredErrorContext;
	struct xml_errors errs = { 0 };
	xmlParserCtxtPtr ctxt;
	xmlDocPtr doc;

	if (len > INT_MAX) {
		g_set_error(error, BFS_ERROR, EINVAL,
			    "%s: %" G_GSIZE_FORMAT " bytes is too large to "
			    "parse",
			    what, len);
		return NULL;
	}
	ctxt = xmlNewParserCtxt();
	if (!ctxt) {
		g_set_error(error, BFS_ERROR, ENOMEM,
			    "%s: cannot allocate an XML parser", what);
		return NULL;
	}
	ctxt->_private = &errs;
	ctxt->sax->serror = on_ctxt_error;
	xmlSetStructuredErrorFunc(&errs, on_thread_error);
	doc = xmlCtxtReadMemory(ctxt, buf ? buf : "", (int)len, NULL, NULL,
				PARSE_OPTIONS);
	xmlSetStructuredErrorFunc(old_data, old_handler);
	if (doc && !ctxt->wellFormed) {
		xmlFreeDoc(doc);
		doc = NULL;
	}
	xmlFreeParserCtxt(ctxt);
	if (!doc)
		g_set_error(error, BFS_ERROR, EPROTO, "malformed %s: %s", what,
			    errs.first ? errs.first : "not well-formed XML");
	g_free(errs.first);
	return doc;
}

/* The root element of a parsed document, refusing DOCTYPEs. */
xmlNodePtr doc_root(xmlDocPtr doc, const char *what, GError **error)
{
	xmlNodePtr root = xmlDocGetRootElement(doc);

	if (doc->intSubset || doc->extSubset) {
		g_set_error(error, BFS_ERROR, EPROTO,
			    "%s: has a DOCTYPE, which S3 never sends", what);
		return NULL;
	}
	if (!root) {
		g_set_error(error, BFS_ERROR, EPROTO, "%s: no root element",
			    what);
		return NULL;
	}
	return root;
}

gboolean is_elem(const xmlNode *node, const char *name)
{
	return node->type == XML_ELEMENT_NODE &&
	       strcmp((const char *)node->name, name) == 0;
}

/*
 * The text of @node: its text and CDATA children.  Entity references are
 * never followed (there can be none without a DOCTYPE anyway).
 */
char *node_text(const xmlNode *node)
{
	GString *s = g_string_new(NULL);

	for (const xmlNode *c = node->children; c; c = c->next) {
		if ((c->type == XML_TEXT_NODE ||
		     c->type == XML_CDATA_SECTION_NODE) &&
		    c->content)
			g_string_append(s, (const char *)c->content);
	}
	return g_string_free(s, FALSE);
}

/* <ETag>"abc"</ETag> gives abc; a lone or missing quote is kept. */
char *strip_quotes(char *etag)
{
	gsize len = strlen(etag);

	if (len >= 2 && etag[0] == '"' && etag[len - 1] == '"') {
		memmove(etag, etag + 1, len - 2);
		etag[len - 2] = '\0';
	}
	return etag;
}

void replace_text(char **field, const xmlNode *node)
{
	g_free(*field);
	*field = node_text(node);
}

/* -- <Error> ------------------------------------------------------------ */

static const struct {
	const char *name;
	size_t offset;
} error_fields[] = {
	{ "Code", offsetof(struct s3_error_info, code) },
	{ "Message", offsetof(struct s3_error_info, message) },
	{ "RequestId", offsetof(struct s3_error_info, request_id) },
	{ "HostId", offsetof(struct s3_error_info, host_id) },
	{ "Resource", offsetof(struct s3_error_info, resource) },
	{ "Region", offsetof(struct s3_error_info, region) },
	{ "Endpoint", offsetof(struct s3_error_info, endpoint) },
	{ "ServerTime", offsetof(struct s3_error_info, server_time) },
	{ "RequestTime", offsetof(struct s3_error_info, request_time) },
	{ "StringToSign", offsetof(struct s3_error_info, string_to_sign) },
	{ "CanonicalRequest",
	  offsetof(struct s3_error_info, canonical_request) },
};

static char **error_field(struct s3_error_info *info, gsize i)
{
	return (char **)(void *)((char *)info + error_fields[i].offset);
}

/* The first of each known child of <Error> wins. */
void fill_error_info(const xmlNode *root, struct s3_error_info *out)
{
	for (const xmlNode *c = root->children; c; c = c->next) {
		if (c->type != XML_ELEMENT_NODE)
			continue;
		for (gsize i = 0; i < G_N_ELEMENTS(error_fields); i++) {
			char **field = error_field(out, i);

			if (!*field && is_elem(c, error_fields[i].name))
				*field = node_text(c);
		}
	}
}

static gboolean parse_error_root(const xmlNode *root, struct s3_error_info *out,
				 GError **error)
{
	if (!is_elem(root, "Error")) {
		g_set_error(error, BFS_ERROR, EPROTO,
			    "%s: root element is <%s>, not <Error>", ERROR_WHAT,
			    (const char *)root->name);
		return FALSE;
	}
	fill_error_info(root, out);
	if (!out->code || !out->code[0]) {
		g_set_error(error, BFS_ERROR, EPROTO,
			    "%s: <Error> has %s <Code>", ERROR_WHAT,
			    out->code ? "an empty" : "no");
		s3_error_info_clear(out);
		return FALSE;
	}
	return TRUE;
}

gboolean s3_xml_parse_error(const char *buf, gsize len,
			    struct s3_error_info *out, GError **error)
{
	gboolean ok = FALSE;
	xmlDocPtr doc;
	xmlNodePtr root;

	g_return_val_if_fail(buf != NULL || len == 0, FALSE);
	g_return_val_if_fail(out != NULL, FALSE);
	g_return_val_if_fail(error == NULL || *error == NULL, FALSE);

	doc = parse_doc(buf, len, ERROR_WHAT, error);
	if (!doc)
		return FALSE;
	root = doc_root(doc, ERROR_WHAT, error);
	if (root)
		ok = parse_error_root(root, out, error);
	xmlFreeDoc(doc);
	return ok;
}

void s3_error_info_clear(struct s3_error_info *info)
{
	if (!info)
		return;
	for (gsize i = 0; i < G_N_ELEMENTS(error_fields); i++)
		g_free(*error_field(info, i));
	memset(info, 0, sizeof(*info));
}

/* -- times -------------------------------------------------------------- */

/* Exactly @n ASCII digits at *@p, advancing it. */
static gboolean take_digits(const char **p, int n, int *out)
{
	int v = 0;

	for (int i = 0; i < n; i++) {
		if (!g_ascii_isdigit((*p)[i]))
			return FALSE;
		v = v * 10 + ((*p)[i] - '0');
	}
	*p += n;
	*out = v;
	return TRUE;
}

static gboolean take_char(const char **p, char c)
{
	if (**p != c)
		return FALSE;
	(*p)++;
	return TRUE;
}

/* Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant). */
static gint64 days_from_civil(int y, int m, int d)
{
	gint64 era, yoe, doy, doe;

	y -= m <= 2;
	era = (y >= 0 ? y : y - 399) / 400;
	yoe = y - era * 400;
	doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
	doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
	return era * 146097 + doe - 719468;
}

static int days_in_month(int y, int m)
{
	static const int days[] = { 31, 28, 31, 30, 31, 30,
				    31, 31, 30, 31, 30, 31 };
	gboolean leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;

	return m == 2 && leap ? 29 : days[m - 1];
}

gboolean s3_xml_parse_time(const char *s, gint64 *out)
{
	int y, mo, d, h, mi, sec;
	const char *p = s;

	g_return_val_if_fail(out != NULL, FALSE);

	if (!p || !take_digits(&p, 4, &y) || !take_char(&p, '-') ||
	    !take_digits(&p, 2, &mo) || !take_char(&p, '-') ||
	    !take_digits(&p, 2, &d) || !take_char(&p, 'T') ||
	    !take_digits(&p, 2, &h) || !take_char(&p, ':') ||
	    !take_digits(&p, 2, &mi) || !take_char(&p, ':') ||
	    !take_digits(&p, 2, &sec))
		return FALSE;
	if (take_char(&p, '.')) {
		if (!g_ascii_isdigit(*p))
			return FALSE;
		while (g_ascii_isdigit(*p))
			p++;
	}
	if (!take_char(&p, 'Z') || *p)
		return FALSE;
	if (mo < 1 || mo > 12 || d < 1 || d > days_in_month(y, mo) || h > 23 ||
	    mi > 59 || sec > 59)
		return FALSE;
	*out = days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + sec;
	return TRUE;
}
