/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The documents of multipart upload: the answers of Create, Complete and
 * ListMultipartUploads, and Complete's request body.
 */
#include <errno.h>
#include <string.h>

#include "error.h"
#include "s3_xml_internal.h"

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
