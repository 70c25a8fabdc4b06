/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * mount_opts.c - the mount's options, from one table (mount_opts.h).
 */
#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stddef.h>
#include <string.h>

#include "error.h"
#include "log.h"
#include "mount_opts.h"
#include "s3.h"
#include "upload.h"

/* -o negative_timeout=: the longest a missing name is believed. */
#define NEGATIVE_TIMEOUT_MAX 3600.0

/* The index of @v among the @n @choices of option @name, or -1 with
 * @error set. */
static int parse_choice(const char *name, const char *v,
			const char *const *choices, guint n, GError **error)
{
	g_autoptr(GString) list = g_string_new(NULL);
	g_autofree char *e = NULL;
	guint i;

	for (i = 0; i < n; i++)
		if (!strcmp(v, choices[i]))
			return (int)i;
	for (i = 0; i < n; i++)
		g_string_append_printf(list, "%s'%s'",
				       !i	    ? ""
				       : i + 1 == n ? " or "
						    : ", ",
				       choices[i]);
	e = log_escape(v, -1);
	g_set_error(error, BFS_ERROR, EINVAL, "option '%s': '%s' is not %s",
		    name, e, list->str);
	return -1;
}

static gboolean parse_number(const char *name, const char *v, double max,
			     double *out, GError **error)
{
	char *end;
	double d = g_ascii_strtod(v, &end);

	if (!*v || *end || !(d >= 0 && d <= max)) { /* NaN too */
		g_set_error(error, BFS_ERROR, EINVAL,
			    "option '%s': '%s' is not a number between 0 and "
			    "%.0f",
			    name, v, max);
		return FALSE;
	}
	*out = d;
	return TRUE;
}

/* uid= and gid=: a number, or a name this host knows. */
static gboolean parse_owner(const char *name, const char *v, guint32 *out,
			    GError **error)
{
	guint64 n;
	char buf[4096];
	struct passwd pw, *pwp = NULL;
	struct group gr, *grp = NULL;
	gboolean is_uid = !strcmp(name, "uid");
	g_autofree char *e = NULL;

	if (*v && strspn(v, "0123456789") == strlen(v)) {
		if (g_ascii_string_to_unsigned(v, 10, 0, G_MAXUINT32 - 1, &n,
					       NULL)) {
			*out = (guint32)n;
			return TRUE;
		}
	} else if (*v && is_uid) {
		if (getpwnam_r(v, &pw, buf, sizeof(buf), &pwp) == 0 && pwp) {
			*out = pwp->pw_uid;
			return TRUE;
		}
	} else if (*v) {
		if (getgrnam_r(v, &gr, buf, sizeof(buf), &grp) == 0 && grp) {
			*out = grp->gr_gid;
			return TRUE;
		}
	}
	e = log_escape(v, -1);
	g_set_error(error, BFS_ERROR, EINVAL,
		    "option '%s': '%s' is not a %s id (0 to 4294967294) nor "
		    "the name of a %s on this host",
		    name, e, is_uid ? "user" : "group",
		    is_uid ? "user" : "group");
	return FALSE;
}

/* file_mode= and dir_mode=: permission bits, in octal. */
static gboolean parse_mode(const char *name, const char *v, guint32 *out,
			   GError **error)
{
	guint64 n;
	g_autofree char *e = NULL;

	if (*v && strlen(v) <= 6 && strspn(v, "01234567") == strlen(v) &&
	    g_ascii_string_to_unsigned(v, 8, 0, 0777, &n, NULL)) {
		*out = (guint32)n;
		return TRUE;
	}
	e = log_escape(v, -1);
	g_set_error(error, BFS_ERROR, EINVAL,
		    "option '%s': '%s' is not an octal mode from 0 to 0777",
		    name, e);
	return FALSE;
}

/*
 * -o readahead=: "all", "none", or the sources on joined by '+' ("hints",
 * "streams", "lookups"); *@off gets the sources turned off.
 */
static gboolean parse_sources(const char *name, const char *v, guint *off,
			      GError **error)
{
	static const struct {
		const char *name;
		guint source;
	} srcs[] = { { "hints", RA_HINTS },
		     { "streams", RA_STREAMS },
		     { "lookups", RA_LOOKUPS } };
	g_auto(GStrv) parts = NULL;
	guint on = 0, i, j;

	if (!strcmp(v, "all") || !strcmp(v, "none")) {
		*off = strcmp(v, "all") ? RA_SOURCES : 0;
		return TRUE;
	}
	parts = g_strsplit(v, "+", -1);
	for (i = 0; parts[i]; i++) {
		for (j = 0; j < G_N_ELEMENTS(srcs); j++)
			if (!strcmp(parts[i], srcs[j].name))
				break;
		if (j == G_N_ELEMENTS(srcs))
			break;
		on |= srcs[j].source;
	}
	/* "" splits into no part at all, so names no source either. */
	if (parts[i] || !on) {
		g_set_error(error, BFS_ERROR, EINVAL,
			    "option '%s': '%s' is not all, none, or sources "
			    "joined by '+' (hints, streams, lookups)",
			    name, v);
		return FALSE;
	}
	*off = RA_SOURCES & ~on;
	return TRUE;
}

/* -- the options that need more than a number --------------------------- */

static gboolean opt_sched_slice(struct mount *m, const char *name,
				const char *v, GError **error)
{
	double d;

	if (!parse_number(name, v, SCHED_SLICE_MAX_US, &d, error) ||
	    (d != 0 && d < SCHED_SLICE_MIN_US) || d != (guint)d) {
		g_clear_error(error);
		g_set_error(error, BFS_ERROR, EINVAL,
			    "option 'sched_slice': '%s' is not a whole "
			    "number of microseconds between %d and %d, "
			    "or 0",
			    v, SCHED_SLICE_MIN_US, SCHED_SLICE_MAX_US);
		return FALSE;
	}
	m->sched_slice_us = (guint)d;
	return TRUE;
}

static gboolean opt_readahead(struct mount *m, const char *name, const char *v,
			      GError **error)
{
	return parse_sources(name, v, &m->fs.readahead.sources_off, error);
}

static gboolean opt_passthrough(struct mount *m, const char *name,
				const char *v, GError **error)
{
	static const char *const modes[] = { "auto", "always", "off" };
	int i = parse_choice(name, v, modes, G_N_ELEMENTS(modes), error);

	if (i < 0)
		return FALSE;
	m->fs.passthrough_on = i < 2;
	m->fs.passthrough_always = i == 1;
	m->fs.passthrough_asked = TRUE;
	return TRUE;
}

static gboolean opt_index_url(struct mount *m, const char *name, const char *v,
			      GError **error)
{
	(void)name;
	g_clear_pointer(&m->pub_bucket, g_free);
	g_clear_pointer(&m->pub_key, g_free);
	g_free(m->index_url);
	m->index_url = g_strdup(v);
	if (s3_parse_object_url(v, &m->pub_bucket, &m->pub_key, error))
		return TRUE;
	g_prefix_error(error, "option 'index_url': ");
	return FALSE;
}

static gboolean opt_index_url_fallback(struct mount *m, const char *name,
				       const char *v, GError **error)
{
	static const char *const modes[] = { "list", "fail" };
	int i = parse_choice(name, v, modes, G_N_ELEMENTS(modes), error);

	if (i < 0)
		return FALSE;
	m->fallback_fail = i == 1;
	return TRUE;
}

/* -- the table ---------------------------------------------------------- */

enum opt_kind {
	OPT_SECONDS, /* double, 0 to max */
	OPT_BYTES,   /* guint64, min to max */
	OPT_COUNT,   /* guint, min to max */
	OPT_FLAG,    /* gboolean set TRUE; no value */
	OPT_OWNER,   /* guint32: a number or a name (parse_owner) */
	OPT_MODE,    /* guint32: octal permission bits */
	OPT_CHOICE,  /* int: the index among @choices */
	OPT_CUSTOM,  /* @parse */
};

struct mount_opt {
	const char *name;
	enum opt_kind kind;
	gsize offset; /* of the field in struct mount */
	double min, max;
	gboolean whole; /* integers only */
	/* What the value must be, for the message ("a size between ...");
	 * NULL: parse_number()'s "a number between 0 and MAX". */
	const char *must;
	const char *const *choices;
	gboolean (*parse)(struct mount *m, const char *name, const char *v,
			  GError **error);
};

#define AT(field) offsetof(struct mount, field)

static const char *const direct_io_modes[] = { "auto", "none", "small", "all",
					       NULL };
/* In the order of enum fs_readdirplus. */
static const char *const readdirplus_modes[] = { "auto", "always", "lookups",
						 NULL };

#define SECONDS(n, f, hi)                                                      \
	{                                                                      \
		.name = n, .kind = OPT_SECONDS, .offset = AT(f), .max = hi     \
	}
#define BYTES(n, f, lo, hi, text)                                              \
	{                                                                      \
		.name = n, .kind = OPT_BYTES, .offset = AT(f), .min = lo,      \
		.max = hi, .must = text                                        \
	}
#define COUNT(n, f, lo, hi, integer, text)                                     \
	{                                                                      \
		.name = n, .kind = OPT_COUNT, .offset = AT(f), .min = lo,      \
		.max = hi, .whole = integer, .must = text                      \
	}
#define FIELD(n, k, f)                                                         \
	{                                                                      \
		.name = n, .kind = k, .offset = AT(f)                          \
	}
#define CHOICE(n, f, list)                                                     \
	{                                                                      \
		.name = n, .kind = OPT_CHOICE, .offset = AT(f),                \
		.choices = list                                                \
	}
#define CUSTOM(n, fn)                                                          \
	{                                                                      \
		.name = n, .kind = OPT_CUSTOM, .parse = fn                     \
	}

/* OPT_CHOICE stores an int. */
G_STATIC_ASSERT(sizeof(enum fs_direct_io) == sizeof(int));

static const struct mount_opt opts[] = {
	SECONDS("entry_timeout", fs.entry_timeout, 1e9),
	SECONDS("negative_timeout", fs.negative_timeout, NEGATIVE_TIMEOUT_MAX),
	BYTES("free_space", fs.free_space, 0, 1e19, NULL),
	BYTES("whole_max", fs.readahead.whole_max, 0, 1e15, NULL),
	BYTES("window_max", fs.readahead.window_max, 0, 1e15, NULL),
	BYTES("memory_max", fs.readahead.memory_max, 0, 1e15, NULL),
	/* read_ahead_kb is an unsigned long of KiB; INIT's field is 32 bits
	 * of bytes. */
	BYTES("kernel_readahead", fs.readahead.kernel_ra, 0, 1u << 30, NULL),
	COUNT("prefetch_depth", fs.readahead.prefetch_depth, 0, 65536, FALSE,
	      NULL),
	CUSTOM("sched_slice", opt_sched_slice),
	SECONDS("index_max_age", index_max_age, 1e9),
	FIELD("uid", OPT_OWNER, fs.uid),
	FIELD("gid", OPT_OWNER, fs.gid),
	FIELD("file_mode", OPT_MODE, fs.file_mode),
	FIELD("dir_mode", OPT_MODE, fs.dir_mode),
	FIELD("writable", OPT_FLAG, fs.writable),
	BYTES("write_max", fs.write_max, 1, 5e9,
	      "a size between 1 byte and 5 GB"),
	BYTES("part_size", fs.part_size, UPLOAD_PART_MIN, UPLOAD_PART_MAX,
	      "a size between 8 MiB (8388608) and 64 MiB (67108864)"),
	COUNT("write_parts", fs.write_parts, 1, 64, TRUE,
	      "a whole number between 1 and 64"),
	CUSTOM("readahead", opt_readahead),
	CHOICE("direct_io", fs.direct_io, direct_io_modes),
	CUSTOM("passthrough", opt_passthrough),
	CHOICE("readdirplus", fs.readdirplus, readdirplus_modes),
	CUSTOM("index_url", opt_index_url),
	CUSTOM("index_url_fallback", opt_index_url_fallback),
	COUNT("list_workers", list_workers, 1, 32, FALSE,
	      "an integer between 1 and 32"),
};

/* mount(8) and fstab bookkeeping that means nothing to us, and
 * default_permissions, which is always set. */
static const char *const ignored[] = {
	"defaults", "nofail", "_netdev",
	"auto",	    "noauto", "user",
	"users",    "nouser", "default_permissions"
};

/* A number for @o, within its limits, or FALSE with the message. */
static gboolean opt_number(const struct mount_opt *o, const char *v,
			   double *out, GError **error)
{
	if (parse_number(o->name, v, o->max, out, error) && *out >= o->min &&
	    (!o->whole || *out == (guint64)*out))
		return TRUE;
	if (o->must) {
		g_clear_error(error);
		g_set_error(error, BFS_ERROR, EINVAL,
			    "option '%s': '%s' is not %s", o->name, v, o->must);
	}
	return FALSE;
}

static gboolean opt_apply(const struct mount_opt *o, struct mount *m,
			  const char *v, GError **error)
{
	void *field = (char *)m + o->offset;
	double d;
	int i;

	switch (o->kind) {
	case OPT_SECONDS:
		return opt_number(o, v, field, error);
	case OPT_BYTES:
		if (!opt_number(o, v, &d, error))
			return FALSE;
		*(guint64 *)field = (guint64)d;
		return TRUE;
	case OPT_COUNT:
		if (!opt_number(o, v, &d, error))
			return FALSE;
		*(guint *)field = (guint)d;
		return TRUE;
	case OPT_FLAG:
		*(gboolean *)field = TRUE;
		return TRUE;
	case OPT_OWNER:
		return parse_owner(o->name, v, field, error);
	case OPT_MODE:
		return parse_mode(o->name, v, field, error);
	case OPT_CHOICE:
		i = parse_choice(o->name, v, o->choices,
				 g_strv_length((char **)o->choices), error);
		if (i < 0)
			return FALSE;
		*(int *)field = i;
		return TRUE;
	case OPT_CUSTOM:
		return o->parse(m, o->name, v, error);
	}
	g_assert_not_reached();
}

gboolean mount_option_take(struct mount *m, const char *opt, GError **error)
{
	const char *eq = strchr(opt, '=');
	g_autofree char *name = eq ? g_strndup(opt, eq - opt) : g_strdup(opt);
	gsize i;

	for (i = 0; i < G_N_ELEMENTS(opts); i++) {
		if (strcmp(name, opts[i].name) != 0)
			continue;
		if (opts[i].kind == OPT_FLAG && eq) {
			g_set_error(error, BFS_ERROR, EINVAL,
				    "option '%s' takes no value (given '%s')",
				    name, eq + 1);
			return FALSE;
		}
		return opt_apply(&opts[i], m, eq ? eq + 1 : "", error);
	}
	for (i = 0; i < G_N_ELEMENTS(ignored); i++)
		if (!strcmp(name, ignored[i]))
			return TRUE;
	if (g_str_has_prefix(name, "x-"))
		return TRUE;
	g_ptr_array_add(m->fuse_opts, g_strdup(opt));
	return TRUE;
}
