/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * What the parsers of S3's XML (src/s3_xml*.c) share: a document parsed
 * safely, its elements and their text, and the fields of an <Error>.
 * Private to the parsers; nothing outside src/s3_xml*.c includes it.
 * Pure, like the parsers: no I/O, no clock, no logging; any thread.
 *
 * The files form layers: s3_xml_list.c (ListObjectsV2) and s3_xml_mpu.c
 * (multipart upload) each call s3_xml.c, never each other, and s3_xml.c
 * calls neither.
 */
#ifndef BUCKETFS_S3_XML_INTERNAL_H
#define BUCKETFS_S3_XML_INTERNAL_H

#include <glib.h>
#include <libxml/tree.h>

#include "s3_xml.h"

/* @buf parsed into a document (free it with xmlFreeDoc()), or NULL with
 * @error set: EPROTO with libxml2's first error, EINVAL, ENOMEM.  @what
 * names the document in the message.  libxml2 never writes to stderr. */
xmlDocPtr parse_doc(const char *buf, gsize len, const char *what,
		    GError **error);

/* The root element of @doc, or NULL with EPROTO: it has a DOCTYPE, or no
 * root. */
xmlNodePtr doc_root(xmlDocPtr doc, const char *what, GError **error);

/* Whether @node is an element whose local name is @name. */
gboolean is_elem(const xmlNode *node, const char *name);

/* The text of @node, newly allocated ("" when it has none). */
char *node_text(const xmlNode *node);

/* Replaces *@field (freed) with the text of @node. */
void replace_text(char **field, const xmlNode *node);

/* @etag (taken and returned) without its surrounding quotes. */
char *strip_quotes(char *etag);

/* The known children of the <Error> @root into @out (zeroed); the first of
 * each wins. */
void fill_error_info(const xmlNode *root, struct s3_error_info *out);

#endif /* BUCKETFS_S3_XML_INTERNAL_H */
