/* SPDX-License-Identifier: GPL-2.0-or-later */
#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <string.h>

#include <libxml/globals.h>
#include <libxml/parser.h>
#include <libxml/tree.h>
#include <libxml/xmlerror.h>

#include "error.h"
#include "s3_xml.h"

#define LIST_WHAT  "ListObjectsV2 response"
#define ERROR_WHAT "S3 error response"

/* Bytes of a document value quoted in a message, before "...". */
#define QUOTE_MAX 200

/*
 * No DTD loading, no entity substitution (no XML_PARSE_NOENT), no network:
 * XXE-safe.  A DOCTYPE is refused after parsing anyway.
 */
#define PARSE_OPTIONS                                                          \
	(XML_PARSE_NONET | XML_PARSE_NOCDATA | XML_PARSE_NOWARNING |           \
	 XML_PARSE_BIG_LINES)

enum num_result { NUM_OK, NUM_JUNK, NUM_RANGE };

/* The first error libxml2 reported while parsing one document. */
struct xml_errors {
	char *first; /* "line 3: Opening and ending tag mismatch: ..." */
};

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
static xmlDocPtr parse_doc(const char *buf, gsize len, const char *what,
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
static xmlNodePtr doc_root(xmlDocPtr doc, const char *what, GError **error)
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

static gboolean is_elem(const xmlNode *node, const char *name)
{
	return node->type == XML_ELEMENT_NODE &&
	       strcmp((const char *)node->name, name) == 0;
}

/*
 * The text of @node: its text and CDATA children.  Entity references are
 * never followed (there can be none without a DOCTYPE anyway).
 */
static char *node_text(const xmlNode *node)
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

/*
 * @s (@len bytes) made safe for a one-line message: C escapes for control
 * bytes, valid UTF-8 kept as is (other high bytes escaped), and cut after
 * QUOTE_MAX bytes with "...".
 */
static char *quote_len(const char *s, gsize len)
{
	char high[129];
	gboolean cut = len > QUOTE_MAX;
	g_autofree char *head = NULL;
	g_autofree char *escaped = NULL;
	const char *keep;

	if (cut) {
		len = QUOTE_MAX;
		while (len > 0 && ((guchar)s[len] & 0xc0) == 0x80)
			len--;
	}
	for (int i = 0; i < 128; i++)
		high[i] = (char)(0x80 + i);
	high[128] = '\0';
	head = g_strndup(s, len);
	keep = g_utf8_validate(head, -1, NULL) ? high : NULL;
	escaped = g_strescape(head, keep);
	return g_strconcat(escaped, cut ? "..." : "", NULL);
}

static char *quote(const char *s)
{
	return quote_len(s, strlen(s));
}

/* Plain unsigned decimal: one or more digits and nothing else. */
static enum num_result parse_unsigned(const char *s, guint64 max, guint64 *out)
{
	guint64 v = 0;

	if (!*s)
		return NUM_JUNK;
	for (const char *p = s; *p; p++) {
		if (!g_ascii_isdigit(*p))
			return NUM_JUNK;
	}
	for (const char *p = s; *p; p++) {
		guint d = (guint)(*p - '0');

		if (v > (max - d) / 10)
			return NUM_RANGE;
		v = v * 10 + d;
	}
	*out = v;
	return NUM_OK;
}

static void set_escape_error(const char *s, gsize at, const char *elem,
			     const char *owner, GError **error)
{
	g_autofree char *q = quote(s);
	g_autofree char *escape = quote_len(s + at, strnlen(s + at, 3));
	gboolean nul = g_str_has_prefix(s + at, "%00");

	g_set_error(error, BFS_ERROR, EPROTO,
		    "%s: <%s> '%s' of %s has %s '%s' at byte %" G_GSIZE_FORMAT
		    " (encoding-type url)",
		    LIST_WHAT, elem, q, owner,
		    nul ? "a NUL escape" : "an invalid escape", escape, at);
}

/*
 * Decodes S3's encoding-type=url text: %XX is a byte and '+' a space (AWS
 * sends a space as '+' and a literal '+' as %2B).  A bad escape or a NUL
 * byte fails, naming the element, its owner and the offending bytes.
 */
static char *url_decode(const char *s, const char *elem, const char *owner,
			GError **error)
{
	GString *out = g_string_sized_new(strlen(s));

	for (gsize i = 0; s[i]; i++) {
		int hi, lo;

		if (s[i] != '%') {
			g_string_append_c(out, s[i] == '+' ? ' ' : s[i]);
			continue;
		}
		hi = s[i + 1] ? g_ascii_xdigit_value(s[i + 1]) : -1;
		lo = hi >= 0 && s[i + 2] ? g_ascii_xdigit_value(s[i + 2]) : -1;
		if (hi < 0 || lo < 0 || (hi == 0 && lo == 0)) {
			set_escape_error(s, i, elem, owner, error);
			g_string_free(out, TRUE);
			return NULL;
		}
		g_string_append_c(out, (char)(hi << 4 | lo));
		i += 2;
	}
	return g_string_free(out, FALSE);
}

static char *decode_text(const xmlNode *node, gboolean url_encoded,
			 const char *owner, GError **error)
{
	g_autofree char *text = node_text(node);

	if (!url_encoded)
		return g_steal_pointer(&text);
	return url_decode(text, (const char *)node->name, owner, error);
}

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
static void fill_error_info(const xmlNode *root, struct s3_error_info *out)
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

/* A ListObjects call answered with an <Error> document (even with 200). */
static void set_error_root_error(const xmlNode *root, GError **error)
{
	g_auto(s3_error_info) info = { 0 };
	g_autofree char *code = NULL;
	g_autofree char *msg = NULL;
	g_autofree char *id = NULL;

	fill_error_info(root, &info);
	code = quote(info.code ? info.code : "(no code)");
	msg = quote(info.message ? info.message : "(no message)");
	id = quote(info.request_id ? info.request_id : "none");
	g_set_error(error, BFS_ERROR, EPROTO,
		    "%s: S3 error %s: %s (request id %s)", LIST_WHAT, code, msg,
		    id);
}

void s3_object_free(struct s3_object *obj)
{
	if (!obj)
		return;
	g_free(obj->key);
	g_free(obj->etag);
	g_free(obj);
}

void s3_list_page_free(struct s3_list_page *page)
{
	if (!page)
		return;
	g_ptr_array_unref(page->objects);
	g_ptr_array_unref(page->common_prefixes);
	g_free(page->next_continuation_token);
	g_free(page->continuation_token);
	g_free(page);
}

/* The single child element @name of @parent: NULL if none, error if two. */
static gboolean find_child(const xmlNode *parent, const char *name,
			   const char *owner, const xmlNode **out,
			   GError **error)
{
	*out = NULL;
	for (const xmlNode *c = parent->children; c; c = c->next) {
		if (!is_elem(c, name))
			continue;
		if (*out) {
			g_set_error(error, BFS_ERROR, EPROTO,
				    "%s: %s has more than one <%s>", LIST_WHAT,
				    owner, name);
			return FALSE;
		}
		*out = c;
	}
	return TRUE;
}

static gboolean parse_size(const xmlNode *node, struct s3_object *obj,
			   GError **error)
{
	g_autofree char *text = node_text(node);
	g_autofree char *qtext = NULL;
	g_autofree char *qkey = NULL;
	enum num_result r = parse_unsigned(text, G_MAXUINT64, &obj->size);

	if (r == NUM_OK)
		return TRUE;
	qtext = quote(text);
	qkey = quote(obj->key);
	g_set_error(error, BFS_ERROR, EPROTO,
		    "%s: <Size> '%s' of key '%s' is %s", LIST_WHAT, qtext, qkey,
		    r == NUM_RANGE ? "out of range" : "not a number");
	return FALSE;
}

static gboolean parse_mtime(const xmlNode *node, struct s3_object *obj,
			    GError **error)
{
	g_autofree char *text = node_text(node);
	g_autofree char *qtext = NULL;
	g_autofree char *qkey = NULL;

	if (s3_xml_parse_time(text, &obj->mtime))
		return TRUE;
	qtext = quote(text);
	qkey = quote(obj->key);
	g_set_error(error, BFS_ERROR, EPROTO,
		    "%s: <LastModified> '%s' of key '%s' is not a time like "
		    "2009-10-12T17:50:30.000Z",
		    LIST_WHAT, qtext, qkey);
	return FALSE;
}

/* <ETag>"abc"</ETag> gives abc; a lone or missing quote is kept. */
static char *strip_quotes(char *etag)
{
	gsize len = strlen(etag);

	if (len >= 2 && etag[0] == '"' && etag[len - 1] == '"') {
		memmove(etag, etag + 1, len - 2);
		etag[len - 2] = '\0';
	}
	return etag;
}

static gboolean parse_key(const xmlNode *contents, const char *owner,
			  gboolean url_encoded, struct s3_object *obj,
			  GError **error)
{
	const xmlNode *key;

	if (!find_child(contents, "Key", owner, &key, error))
		return FALSE;
	if (!key) {
		g_set_error(error, BFS_ERROR, EPROTO, "%s: %s has no <Key>",
			    LIST_WHAT, owner);
		return FALSE;
	}
	obj->key = decode_text(key, url_encoded, owner, error);
	if (!obj->key)
		return FALSE;
	if (!obj->key[0]) {
		g_set_error(error, BFS_ERROR, EPROTO,
			    "%s: %s has an empty <Key>", LIST_WHAT, owner);
		return FALSE;
	}
	return TRUE;
}

static struct s3_object *parse_contents(const xmlNode *contents, guint index,
					gboolean url_encoded, GError **error)
{
	g_autoptr(s3_object) obj = g_new0(struct s3_object, 1);
	g_autofree char *owner = g_strdup_printf("<Contents> #%u", index);
	const xmlNode *size, *mtime, *etag;

	if (!parse_key(contents, owner, url_encoded, obj, error))
		return NULL;
	/* From here on the key names the object better than its index. */
	g_free(owner);
	{
		g_autofree char *qkey = quote(obj->key);

		owner = g_strdup_printf("<Contents> #%u (key '%s')", index,
					qkey);
	}
	if (!find_child(contents, "Size", owner, &size, error) ||
	    !find_child(contents, "LastModified", owner, &mtime, error) ||
	    !find_child(contents, "ETag", owner, &etag, error))
		return NULL;
	if (!size) {
		g_set_error(error, BFS_ERROR, EPROTO, "%s: %s has no <Size>",
			    LIST_WHAT, owner);
		return NULL;
	}
	if (!parse_size(size, obj, error))
		return NULL;
	if (mtime && !parse_mtime(mtime, obj, error))
		return NULL;
	if (etag)
		obj->etag = strip_quotes(node_text(etag));
	return g_steal_pointer(&obj);
}

static char *parse_common_prefix(const xmlNode *cp, guint index,
				 gboolean url_encoded, GError **error)
{
	g_autofree char *owner = g_strdup_printf("<CommonPrefixes> #%u", index);
	const xmlNode *prefix;
	char *text;

	if (!find_child(cp, "Prefix", owner, &prefix, error))
		return NULL;
	if (!prefix) {
		g_set_error(error, BFS_ERROR, EPROTO, "%s: %s has no <Prefix>",
			    LIST_WHAT, owner);
		return NULL;
	}
	text = decode_text(prefix, url_encoded, owner, error);
	if (text && !text[0]) {
		g_set_error(error, BFS_ERROR, EPROTO,
			    "%s: %s has an empty <Prefix>", LIST_WHAT, owner);
		g_clear_pointer(&text, g_free);
	}
	return text;
}

static gboolean parse_is_truncated(const xmlNode *node,
				   struct s3_list_page *page, GError **error)
{
	g_autofree char *text = node_text(node);
	g_autofree char *q = NULL;

	if (strcmp(text, "true") == 0 || strcmp(text, "false") == 0) {
		page->is_truncated = text[0] == 't';
		return TRUE;
	}
	q = quote(text);
	g_set_error(error, BFS_ERROR, EPROTO,
		    "%s: <IsTruncated> '%s' is neither true nor false",
		    LIST_WHAT, q);
	return FALSE;
}

static gboolean parse_key_count(const xmlNode *node, struct s3_list_page *page,
				GError **error)
{
	g_autofree char *text = node_text(node);
	g_autofree char *q = NULL;
	guint64 v = 0;
	enum num_result r = parse_unsigned(text, G_MAXUINT, &v);

	if (r == NUM_OK) {
		page->key_count = (guint)v;
		return TRUE;
	}
	q = quote(text);
	g_set_error(error, BFS_ERROR, EPROTO, "%s: <KeyCount> '%s' is %s",
		    LIST_WHAT, q,
		    r == NUM_RANGE ? "out of range" : "not a number");
	return FALSE;
}

/* Whether keys are url-encoded; <EncodingType> may come after them. */
static gboolean find_encoding(const xmlNode *root, gboolean *url_encoded,
			      GError **error)
{
	*url_encoded = FALSE;
	for (const xmlNode *c = root->children; c; c = c->next) {
		g_autofree char *text = NULL;
		g_autofree char *q = NULL;

		if (!is_elem(c, "EncodingType"))
			continue;
		text = node_text(c);
		if (strcmp(text, "url") == 0) {
			*url_encoded = TRUE;
			continue;
		}
		q = quote(text);
		g_set_error(error, BFS_ERROR, EPROTO,
			    "%s: unsupported <EncodingType> '%s'", LIST_WHAT,
			    q);
		return FALSE;
	}
	return TRUE;
}

static void replace_text(char **field, const xmlNode *node)
{
	g_free(*field);
	*field = node_text(node);
}

/* One child of <ListBucketResult>; unknown ones are ignored. */
static gboolean parse_list_child(const xmlNode *c, gboolean url_encoded,
				 struct s3_list_page *page, GError **error)
{
	if (is_elem(c, "Contents")) {
		struct s3_object *obj = parse_contents(
			c, page->objects->len + 1, url_encoded, error);

		if (!obj)
			return FALSE;
		g_ptr_array_add(page->objects, obj);
	} else if (is_elem(c, "CommonPrefixes")) {
		char *prefix = parse_common_prefix(
			c, page->common_prefixes->len + 1, url_encoded, error);

		if (!prefix)
			return FALSE;
		g_ptr_array_add(page->common_prefixes, prefix);
	} else if (is_elem(c, "IsTruncated")) {
		return parse_is_truncated(c, page, error);
	} else if (is_elem(c, "KeyCount")) {
		return parse_key_count(c, page, error);
	} else if (is_elem(c, "NextContinuationToken")) {
		replace_text(&page->next_continuation_token, c);
	} else if (is_elem(c, "ContinuationToken")) {
		replace_text(&page->continuation_token, c);
	}
	return TRUE;
}

static struct s3_list_page *parse_list_root(xmlNodePtr root, GError **error)
{
	g_autoptr(s3_list_page) page = NULL;
	gboolean url_encoded;

	if (is_elem(root, "Error")) {
		set_error_root_error(root, error);
		return NULL;
	}
	if (!is_elem(root, "ListBucketResult")) {
		g_set_error(error, BFS_ERROR, EPROTO,
			    "%s: root element is <%s>, not <ListBucketResult>",
			    LIST_WHAT, (const char *)root->name);
		return NULL;
	}
	if (!find_encoding(root, &url_encoded, error))
		return NULL;
	page = g_new0(struct s3_list_page, 1);
	page->objects =
		g_ptr_array_new_with_free_func((GDestroyNotify)s3_object_free);
	page->common_prefixes = g_ptr_array_new_with_free_func(g_free);
	for (const xmlNode *c = root->children; c; c = c->next) {
		if (!parse_list_child(c, url_encoded, page, error))
			return NULL;
	}
	return g_steal_pointer(&page);
}

struct s3_list_page *s3_xml_parse_list(const char *buf, gsize len,
				       GError **error)
{
	struct s3_list_page *page = NULL;
	xmlDocPtr doc;
	xmlNodePtr root;

	g_return_val_if_fail(buf != NULL || len == 0, NULL);
	g_return_val_if_fail(error == NULL || *error == NULL, NULL);

	doc = parse_doc(buf, len, LIST_WHAT, error);
	if (!doc)
		return NULL;
	root = doc_root(doc, LIST_WHAT, error);
	if (root)
		page = parse_list_root(root, error);
	xmlFreeDoc(doc);
	return page;
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

/* -- multipart upload ------------------------------------------------- */

#define MPU_WHAT "multipart upload response"

/* The root of a document of @what named @name, or NULL with EPROTO (the
 * S3 code and message for an <Error> root). */
static xmlNodePtr mpu_root(xmlDocPtr doc, const char *name, GError **error)
{
	xmlNodePtr root = doc_root(doc, MPU_WHAT, error);
	g_auto(s3_error_info) info = { 0 };

	if (!root || is_elem(root, name))
		return root;
	if (is_elem(root, "Error")) {
		fill_error_info(root, &info);
		g_set_error(error, BFS_ERROR, EPROTO, "%s: S3 error %s: %s",
			    MPU_WHAT, info.code ? info.code : "(no code)",
			    info.message ? info.message : "(no message)");
		return NULL;
	}
	g_set_error(error, BFS_ERROR, EPROTO,
		    "%s: root element is <%s>, not <%s>", MPU_WHAT,
		    (const char *)root->name, name);
	return NULL;
}

/* The text of the first child @name of @parent, or NULL. */
static char *child_text(const xmlNode *parent, const char *name)
{
	for (const xmlNode *c = parent->children; c; c = c->next)
		if (is_elem(c, name))
			return node_text(c);
	return NULL;
}

char *s3_xml_parse_initiate(const char *buf, gsize len, GError **error)
{
	xmlDocPtr doc = parse_doc(buf, len, MPU_WHAT, error);
	xmlNodePtr root;
	char *id = NULL;

	if (!doc)
		return NULL;
	root = mpu_root(doc, "InitiateMultipartUploadResult", error);
	if (root)
		id = child_text(root, "UploadId");
	if (root && (!id || !*id)) {
		g_set_error(error, BFS_ERROR, EPROTO,
			    "%s: no <UploadId> in "
			    "<InitiateMultipartUploadResult>",
			    MPU_WHAT);
		g_clear_pointer(&id, g_free);
	}
	xmlFreeDoc(doc);
	return id;
}

gboolean s3_xml_parse_complete(const char *buf, gsize len, char **etag,
			       struct s3_error_info *info, GError **error)
{
	xmlDocPtr doc = parse_doc(buf, len, MPU_WHAT, error);
	xmlNodePtr root;
	gboolean ok = FALSE;

	*etag = NULL;
	if (!doc)
		return FALSE;
	root = doc_root(doc, MPU_WHAT, error);
	if (root && is_elem(root, "Error")) {
		fill_error_info(root, info);
	} else if (root && is_elem(root, "CompleteMultipartUploadResult")) {
		*etag = child_text(root, "ETag");
		if (*etag)
			*etag = strip_quotes(*etag);
		ok = TRUE;
	} else if (root) {
		g_set_error(error, BFS_ERROR, EPROTO,
			    "%s: root element is <%s>, not "
			    "<CompleteMultipartUploadResult>",
			    MPU_WHAT, (const char *)root->name);
	}
	xmlFreeDoc(doc);
	return ok;
}

char *s3_xml_complete_body(const char *const *etags, guint n)
{
	GString *s = g_string_new("<CompleteMultipartUpload>");

	for (guint i = 0; i < n; i++) {
		g_autofree char *e = g_markup_escape_text(etags[i], -1);

		g_string_append_printf(s,
				       "<Part><PartNumber>%u</PartNumber>"
				       "<ETag>%s</ETag></Part>",
				       i + 1, e);
	}
	g_string_append(s, "</CompleteMultipartUpload>");
	return g_string_free(s, FALSE);
}

static void upload_free(void *p)
{
	struct s3_upload *u = p;

	g_free(u->key);
	g_free(u->upload_id);
	g_free(u);
}

void s3_uploads_page_free(struct s3_uploads_page *page)
{
	if (!page)
		return;
	g_ptr_array_unref(page->uploads);
	g_free(page->next_key_marker);
	g_free(page->next_upload_id_marker);
	g_free(page);
}

static struct s3_upload *parse_upload(const xmlNode *node, guint index,
				      GError **error)
{
	struct s3_upload *u = g_new0(struct s3_upload, 1);
	g_autofree char *when = child_text(node, "Initiated");

	u->key = child_text(node, "Key");
	u->upload_id = child_text(node, "UploadId");
	if (!u->key || !*u->key || !u->upload_id || !*u->upload_id) {
		g_set_error(error, BFS_ERROR, EPROTO,
			    "%s: <Upload> %u has no %s", MPU_WHAT, index,
			    !u->key || !*u->key ? "<Key>" : "<UploadId>");
		upload_free(u);
		return NULL;
	}
	if (when && !s3_xml_parse_time(when, &u->initiated))
		u->initiated = 0;
	return u;
}

static gboolean parse_uploads_root(const xmlNode *root,
				   struct s3_uploads_page *page, GError **error)
{
	guint index = 0;

	for (const xmlNode *c = root->children; c; c = c->next) {
		g_autofree char *t = NULL;

		if (is_elem(c, "Upload")) {
			struct s3_upload *u = parse_upload(c, ++index, error);

			if (!u)
				return FALSE;
			g_ptr_array_add(page->uploads, u);
		} else if (is_elem(c, "IsTruncated")) {
			t = node_text(c);
			page->is_truncated = !strcmp(t, "true");
		} else if (is_elem(c, "NextKeyMarker")) {
			replace_text(&page->next_key_marker, c);
		} else if (is_elem(c, "NextUploadIdMarker")) {
			replace_text(&page->next_upload_id_marker, c);
		}
	}
	return TRUE;
}

struct s3_uploads_page *s3_xml_parse_uploads(const char *buf, gsize len,
					     GError **error)
{
	xmlDocPtr doc = parse_doc(buf, len, MPU_WHAT, error);
	struct s3_uploads_page *page;
	xmlNodePtr root;

	if (!doc)
		return NULL;
	root = mpu_root(doc, "ListMultipartUploadsResult", error);
	page = g_new0(struct s3_uploads_page, 1);
	page->uploads = g_ptr_array_new_with_free_func(upload_free);
	if (!root || !parse_uploads_root(root, page, error))
		g_clear_pointer(&page, s3_uploads_page_free);
	xmlFreeDoc(doc);
	return page;
}
