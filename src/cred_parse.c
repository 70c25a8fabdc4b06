/* SPDX-License-Identifier: GPL-2.0-or-later */
#include <errno.h>
#include <string.h>

#include <json-glib/json-glib.h>
#include <libxml/parser.h>
#include <libxml/tree.h>

#include "cred_parse.h"
#include "error.h"
#include "log.h"

/* No network, no entities, no messages on stderr: XXE-safe and quiet. */
#define XML_OPTIONS                                                            \
	(XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING |           \
	 XML_PARSE_NOCDATA)

gboolean cred_parse_time(const char *s, gint64 *out)
{
	g_autoptr(GTimeZone) utc = g_time_zone_new_utc();
	g_autoptr(GDateTime) dt = NULL;

	if (!s || !*s)
		return FALSE;
	dt = g_date_time_new_from_iso8601(s, utc);
	if (!dt)
		return FALSE;
	*out = g_date_time_to_unix(dt);
	return TRUE;
}

static gboolean parse_fail(GError **error, const char *what,
			   const char *problem)
{
	g_set_error(error, BFS_ERROR, EPROTO, "%s: %s", what, problem);
	return FALSE;
}

/* Member @name of @obj as a string: NULL if absent, error if not one. */
static gboolean json_string(JsonObject *obj, const char *name,
			    gboolean required, const char *what,
			    const char **out, GError **error)
{
	JsonNode *node = json_object_get_member(obj, name);

	*out = NULL;
	if (!node || JSON_NODE_HOLDS_NULL(node)) {
		if (!required)
			return TRUE;
		g_set_error(error, BFS_ERROR, EPROTO, "%s: no %s", what, name);
		return FALSE;
	}
	if (!JSON_NODE_HOLDS_VALUE(node) ||
	    json_node_get_value_type(node) != G_TYPE_STRING) {
		g_set_error(error, BFS_ERROR, EPROTO, "%s: %s is not a string",
			    what, name);
		return FALSE;
	}
	*out = json_node_get_string(node);
	if (required && !**out) {
		g_set_error(error, BFS_ERROR, EPROTO, "%s: %s is empty", what,
			    name);
		return FALSE;
	}
	return TRUE;
}

static gboolean json_check_header(JsonObject *obj, enum cred_json_kind kind,
				  const char *what, GError **error)
{
	const char *code;
	JsonNode *version;

	if (kind == CRED_JSON_IMDS) {
		if (!json_string(obj, "Code", FALSE, what, &code, error))
			return FALSE;
		if (code && strcmp(code, "Success")) {
			g_autofree char *c = log_escape(code, -1);

			g_set_error(error, BFS_ERROR, EPROTO,
				    "%s: Code is '%s', not 'Success'", what, c);
			return FALSE;
		}
	}
	if (kind != CRED_JSON_PROCESS)
		return TRUE;
	version = json_object_get_member(obj, "Version");
	if (!version || !JSON_NODE_HOLDS_VALUE(version) ||
	    json_node_get_value_type(version) != G_TYPE_INT64 ||
	    json_node_get_int(version) != 1)
		return parse_fail(error, what,
				  "Version is not 1 (the only version of "
				  "credential_process output)");
	return TRUE;
}

static struct credentials *creds_from_object(JsonObject *obj,
					     enum cred_json_kind kind,
					     const char *what, GError **error)
{
	const char *token_name =
		kind == CRED_JSON_PROCESS ? "SessionToken" : "Token";
	const char *id, *secret, *token, *exp;
	struct credentials *creds;
	gint64 expiration = 0;

	if (!json_check_header(obj, kind, what, error) ||
	    !json_string(obj, "AccessKeyId", TRUE, what, &id, error) ||
	    !json_string(obj, "SecretAccessKey", TRUE, what, &secret, error) ||
	    !json_string(obj, token_name, kind != CRED_JSON_PROCESS, what,
			 &token, error) ||
	    !json_string(obj, "Expiration", kind != CRED_JSON_PROCESS, what,
			 &exp, error))
		return NULL;
	if (exp && !cred_parse_time(exp, &expiration)) {
		parse_fail(error, what, "Expiration is not an ISO 8601 time");
		return NULL;
	}
	creds = credentials_new(id, secret, token && *token ? token : NULL,
				NULL, NULL);
	creds->expiration = expiration;
	return creds;
}

struct credentials *cred_parse_json(const char *json, gsize len,
				    enum cred_json_kind kind, const char *what,
				    GError **error)
{
	g_autoptr(JsonParser) parser = json_parser_new_immutable();
	g_autoptr(GError) jerr = NULL;
	JsonNode *root;

	if (!json_parser_load_from_data(parser, json, (gssize)len, &jerr)) {
		/* json-glib's message may quote the text: only where. */
		g_set_error(error, BFS_ERROR, EPROTO,
			    "%s: not JSON (parse error at line %u, column %u)",
			    what, json_parser_get_current_line(parser),
			    json_parser_get_current_pos(parser));
		return NULL;
	}
	root = json_parser_get_root(parser);
	if (!root || !JSON_NODE_HOLDS_OBJECT(root)) {
		parse_fail(error, what, "not a JSON object");
		return NULL;
	}
	return creds_from_object(json_node_get_object(root), kind, what, error);
}

/* -- STS XML ------------------------------------------------------------ */

static xmlNodePtr child(xmlNodePtr parent, const char *name)
{
	xmlNodePtr n;

	for (n = parent ? parent->children : NULL; n; n = n->next) {
		if (n->type == XML_ELEMENT_NODE &&
		    !strcmp((const char *)n->name, name))
			return n;
	}
	return NULL;
}

/* The text of @node, newly allocated (g_free, or wiped by the caller). */
static char *text_of(xmlNodePtr node)
{
	xmlChar *t;
	char *s;

	if (!node)
		return NULL;
	t = xmlNodeGetContent(node);
	s = g_strdup(t ? g_strstrip((char *)t) : NULL);
	if (t) {
		explicit_bzero(t, strlen((char *)t));
		xmlFree(t);
	}
	return s;
}

static xmlDocPtr read_doc(const char *xml, gsize len)
{
	if (len > G_MAXINT)
		return NULL;
	return xmlReadMemory(xml, (int)len, "sts.xml", NULL, XML_OPTIONS);
}

static struct credentials *sts_credentials(xmlNodePtr result,
					   const char *action, GError **error)
{
	xmlNodePtr c = child(result, "Credentials");
	static const char *const names[] = { "AccessKeyId", "SecretAccessKey",
					     "SessionToken", "Expiration" };
	char *v[G_N_ELEMENTS(names)] = { 0 };
	struct credentials *creds = NULL;
	gint64 expiration;
	guint i;

	for (i = 0; i < G_N_ELEMENTS(names); i++) {
		v[i] = text_of(child(c, names[i]));
		if (!v[i] || !*v[i]) {
			g_set_error(error, BFS_ERROR, EPROTO,
				    "STS %s response: no Credentials/%s",
				    action, names[i]);
			goto out;
		}
	}
	if (!cred_parse_time(v[3], &expiration)) {
		g_set_error(error, BFS_ERROR, EPROTO,
			    "STS %s response: Credentials/Expiration is not an "
			    "ISO 8601 time",
			    action);
		goto out;
	}
	creds = credentials_new(v[0], v[1], v[2], NULL, NULL);
	creds->expiration = expiration;
	creds->role = text_of(child(child(result, "AssumedRoleUser"), "Arn"));
out:
	for (i = 0; i < G_N_ELEMENTS(names); i++)
		credentials_secret_free(v[i]);
	return creds;
}

struct credentials *cred_parse_sts(const char *xml, gsize len,
				   const char *action, GError **error)
{
	g_autofree char *result_name = g_strdup_printf("%sResult", action);
	g_autofree char *response_name = g_strdup_printf("%sResponse", action);
	struct credentials *creds = NULL;
	xmlDocPtr doc = read_doc(xml, len);
	xmlNodePtr root = doc ? xmlDocGetRootElement(doc) : NULL;

	if (!root) {
		g_set_error(error, BFS_ERROR, EPROTO,
			    "STS %s response: not XML", action);
		goto out;
	}
	if (strcmp((const char *)root->name, response_name)) {
		g_set_error(error, BFS_ERROR, EPROTO,
			    "STS %s response: root element is not %s", action,
			    response_name);
		goto out;
	}
	creds = sts_credentials(child(root, result_name), action, error);
out:
	if (doc)
		xmlFreeDoc(doc);
	return creds;
}

static char *escaped_text(xmlNodePtr node)
{
	g_autofree char *t = text_of(node);

	/* Ceph RGW sends an empty Message: as good as none. */
	return t && *t ? log_escape(t, -1) : NULL;
}

gboolean cred_parse_sts_error(const char *xml, gsize len, char **code,
			      char **message)
{
	xmlDocPtr doc = read_doc(xml, len);
	xmlNodePtr root = doc ? xmlDocGetRootElement(doc) : NULL;
	xmlNodePtr err;
	gboolean ok = FALSE;

	*code = NULL;
	*message = NULL;
	if (!root)
		goto out;
	/* STS wraps it in ErrorResponse; some servers send a bare Error. */
	err = !strcmp((const char *)root->name, "Error") ? root
							 : child(root, "Error");
	if (!err)
		goto out;
	*code = escaped_text(child(err, "Code"));
	*message = escaped_text(child(err, "Message"));
	ok = *code || *message;
out:
	if (doc)
		xmlFreeDoc(doc);
	return ok;
}
