/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * ListObjectsV2 pages: their <Contents> and <CommonPrefixes>, keys
 * decoded under encoding-type url, numbers checked, and every value a
 * message quotes made safe for one line.
 */
#include <errno.h>
#include <string.h>

#include "error.h"
#include "s3_xml_internal.h"

#define LIST_WHAT "ListObjectsV2 response"

/* Bytes of a document value quoted in a message, before "...". */
#define QUOTE_MAX 200

enum num_result { NUM_OK, NUM_JUNK, NUM_RANGE };

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
