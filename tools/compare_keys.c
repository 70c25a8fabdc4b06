/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * compare_keys.c - the key rules of docs/INDEX-FORMAT.md, per key.  The
 * rule for one component is the index's own (index_component_check());
 * the walk over the components mirrors key_place() in src/index.c.
 */
#include <string.h>

#include "compare_keys.h"
#include "index.h"

static enum compare_key_kind component_kind(const char *s, gsize len)
{
	switch (index_component_check(s, len)) {
	case INDEX_COMPONENT_EMPTY:
		return COMPARE_KEY_EMPTY;
	case INDEX_COMPONENT_DOT:
		return COMPARE_KEY_DOT;
	case INDEX_COMPONENT_LONG:
		return COMPARE_KEY_LONG;
	default:
		return COMPARE_KEY_FILE;
	}
}

enum compare_key_kind compare_key_classify(const char *rel, gsize len,
					   gsize *dir_len)
{
	gboolean marker = len > 0 && rel[len - 1] == '/';
	const char *p = rel;
	const char *end = rel + (marker ? len - 1 : len);
	guint depth = 0;

	*dir_len = 0;
	if (len == 0)
		return COMPARE_KEY_ROOT;
	for (;;) {
		const char *slash = memchr(p, '/', end - p);
		const char *stop = slash ? slash : end;
		enum compare_key_kind k = component_kind(p, stop - p);

		if (k == COMPARE_KEY_FILE && depth + 1 > INDEX_DEPTH_MAX)
			k = COMPARE_KEY_DEEP;
		if (k != COMPARE_KEY_FILE)
			return k;
		if (!slash && !marker)
			return COMPARE_KEY_FILE;
		/* This component is a directory that exists. */
		*dir_len = stop - rel;
		depth++;
		if (!slash)
			return COMPARE_KEY_MARKER;
		p = slash + 1;
	}
}

const char *compare_key_reason(enum compare_key_kind kind)
{
	switch (kind) {
	case COMPARE_KEY_EMPTY:
		return "an empty component ('a//b', '/a')";
	case COMPARE_KEY_DOT:
		return "a '.' or '..' component";
	case COMPARE_KEY_LONG:
		return "a component over 255 bytes";
	case COMPARE_KEY_DEEP:
		return "over 1024 components";
	default:
		return NULL;
	}
}

const char *compare_key_reason_id(enum compare_key_kind kind)
{
	switch (kind) {
	case COMPARE_KEY_EMPTY:
		return "empty_component";
	case COMPARE_KEY_DOT:
		return "dot_component";
	case COMPARE_KEY_LONG:
		return "name_too_long";
	case COMPARE_KEY_DEEP:
		return "too_deep";
	default:
		return NULL;
	}
}
