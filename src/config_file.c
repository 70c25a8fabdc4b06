/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * config_file.c - the config file (bucketfs.conf(5), config.h): which
 * files, reading them with a trust check, checking their groups and keys,
 * choosing the groups for this mount, and applying their values through
 * the -o parser and the mount handler.
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "config_internal.h"
#include "error.h"
#include "log.h"

#define CONFIG_FILE_MAX (1024 * 1024)

/* A parsed file. */
struct conf_file {
	char *path;
	char *text;
	GKeyFile *kf;
};

/* What a key is set to, and where: "PATH:LINE: [GROUP]". */
struct conf_value {
	char *value;
	char *where;
};

/* A group that applies to the mount, for sorting by specificity. */
struct conf_group {
	gsize level; /* 0 [default], 1 + strlen(prefix) for [s3://...] */
	guint file;
	guint order;
	char *name;
};

static void conf_file_free(gpointer p)
{
	struct conf_file *f = p;

	g_free(f->path);
	g_free(f->text);
	if (f->kf)
		g_key_file_unref(f->kf);
	g_free(f);
}

static void conf_group_clear(gpointer p)
{
	struct conf_group *g = p;

	g_free(g->name);
}

static void conf_value_free(gpointer p)
{
	struct conf_value *v = p;

	g_free(v->value);
	g_free(v->where);
	g_free(v);
}

/* The line of "[@group]", or of @key in it if @key; the last one, as
 * GKeyFile keeps the last value of a key; 0 if not found. */
static guint conf_line(const char *text, const char *group, const char *key)
{
	g_auto(GStrv) lines = g_strsplit(text, "\n", -1);
	gboolean in_group = FALSE;
	gsize klen = key ? strlen(key) : 0;
	guint found = 0;
	guint i;

	for (i = 0; lines[i]; i++) {
		const char *l = lines[i];

		while (*l == ' ' || *l == '\t')
			l++;
		if (*l == '[') {
			const char *end = strrchr(l, ']');

			in_group = end &&
				   (gsize)(end - l - 1) == strlen(group) &&
				   strncmp(l + 1, group, end - l - 1) == 0;
			if (in_group && !key)
				found = i + 1;
			continue;
		}
		if (!in_group || !key || strncmp(l, key, klen) != 0)
			continue;
		l += klen;
		while (*l == ' ' || *l == '\t')
			l++;
		if (*l == '=')
			found = i + 1;
	}
	return found;
}

static char *conf_where(const struct conf_file *f, const char *group,
			const char *key)
{
	g_autofree char *p = log_escape(f->path, -1);
	g_autofree char *g = log_escape(group, -1);
	guint line = conf_line(f->text, group, key);

	if (!line)
		return g_strdup_printf("%s: [%s]", p, g);
	return g_strdup_printf("%s:%u: [%s]", p, line, g);
}

/*
 * Reads @path into @f->text.  FALSE with no error: it does not exist and
 * need not.  Trust as for ssh's files: root's or ours, written by nobody
 * else; checked on the descriptor that is read.
 */
static gboolean conf_read(struct conf_file *f, gboolean must_exist,
			  GError **error)
{
	g_autofree char *p = log_escape(f->path, -1);
	GString *text = NULL;
	struct stat st;
	char buf[8192];
	ssize_t n;
	int err = 0;
	int fd;

	fd = open(f->path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (fd < 0) {
		err = errno;
		if (err == ENOENT && !must_exist)
			return FALSE;
		g_set_error(error, BFS_ERROR, err, "config file '%s': %s", p,
			    g_strerror(err));
		return FALSE;
	}
	if (fstat(fd, &st) < 0) {
		err = errno;
		g_set_error(error, BFS_ERROR, err, "config file '%s': %s", p,
			    g_strerror(err));
	} else if (!S_ISREG(st.st_mode)) {
		g_set_error(error, BFS_ERROR, EINVAL,
			    "config file '%s': not a regular file", p);
	} else if (st.st_uid != 0 && st.st_uid != geteuid()) {
		g_set_error(error, BFS_ERROR, EACCES,
			    "config file '%s': owned by uid %u, neither root "
			    "nor the user running bucketfs: not trusted",
			    p, (unsigned)st.st_uid);
	} else if (st.st_mode & (S_IWGRP | S_IWOTH)) {
		g_set_error(error, BFS_ERROR, EACCES,
			    "config file '%s': others may write it (mode "
			    "%04o): not trusted; chmod go-w '%s'",
			    p, (unsigned)(st.st_mode & 07777), p);
	} else {
		text = g_string_new(NULL);
		while ((n = read(fd, buf, sizeof(buf))) != 0) {
			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0 || text->len + (gsize)n > CONFIG_FILE_MAX)
				break;
			g_string_append_len(text, buf, n);
		}
		if (n < 0) {
			err = errno;
			g_set_error(error, BFS_ERROR, err,
				    "config file '%s': %s", p, g_strerror(err));
		} else if (n > 0) {
			g_set_error(error, BFS_ERROR, EFBIG,
				    "config file '%s': larger than %d bytes", p,
				    CONFIG_FILE_MAX);
		}
	}
	close(fd);
	if (error && *error) {
		if (text)
			g_string_free(text, TRUE);
		return FALSE;
	}
	f->text = g_string_free(text, FALSE);
	return TRUE;
}

/* Names a secret: never in the file (see config.h). */
static gboolean conf_key_secret(const struct conf_file *f, const char *group,
				const char *key, GError **error)
{
	g_autofree char *where = conf_where(f, group, key);
	g_autofree char *k = log_escape(key, -1);

	g_set_error(
		error, BFS_ERROR, EINVAL,
		"%s: key '%s': secrets are not accepted in the config file; "
		"use AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY or a "
		"profile (profile=NAME) in the AWS credentials file",
		where, k);
	return FALSE;
}

/* The keys of a file: those of config_option_defs but rw and config, and the
 * mount options. */
static gboolean conf_key_known(const char *key)
{
	const struct option_def *def = config_option_find(key);
	gboolean flag;

	if (def)
		return strcmp(key, "rw") != 0 && strcmp(key, "config") != 0;
	return config_mount_key_find(key, &flag);
}

/*
 * Which mounts @group applies to: *@level 0 for [default], else 1 plus the
 * length of its prefix if it is [s3://BUCKET[/PREFIX]] for @cfg's bucket
 * and a prefix of its prefix; -1 if it is for another mount.  FALSE: the
 * group name is not valid.
 */
static gboolean conf_group_level(const struct config *cfg, const char *group,
				 gssize *level)
{
	struct config scratch;
	gboolean ok;

	if (strcmp(group, "default") == 0) {
		*level = 0;
		return TRUE;
	}
	if (g_ascii_strncasecmp(group, "s3://", 5) != 0)
		return FALSE;
	config_init(&scratch);
	ok = config_parse_url(&scratch, group, NULL);
	*level = -1;
	if (ok && strcmp(scratch.bucket, cfg->bucket) == 0 &&
	    g_str_has_prefix(cfg->prefix, scratch.prefix))
		*level = 1 + (gssize)strlen(scratch.prefix);
	config_clear(&scratch);
	return ok;
}

/* Checks every group and key of @f; adds the groups for this mount. */
static gboolean conf_check(const struct config *cfg, struct conf_file *f,
			   guint file, GArray *groups, GError **error)
{
	g_auto(GStrv) names = g_key_file_get_groups(f->kf, NULL);
	guint i, j;

	for (i = 0; names[i]; i++) {
		g_auto(GStrv) keys =
			g_key_file_get_keys(f->kf, names[i], NULL, NULL);
		struct conf_group g = { .file = file };
		gssize level;

		if (!conf_group_level(cfg, names[i], &level)) {
			g_autofree char *where = conf_where(f, names[i], NULL);

			g_set_error(error, BFS_ERROR, EINVAL,
				    "%s: unknown group: expected [default] or "
				    "[s3://BUCKET[/PREFIX]]",
				    where);
			return FALSE;
		}
		for (j = 0; keys && keys[j]; j++) {
			g_autofree char *where = NULL;
			g_autofree char *k = NULL;

			if (config_option_looks_secret(keys[j]))
				return conf_key_secret(f, names[i], keys[j],
						       error);
			if (conf_key_known(keys[j]))
				continue;
			where = conf_where(f, names[i], keys[j]);
			k = log_escape(keys[j], -1);
			g_set_error(error, BFS_ERROR, EINVAL,
				    "%s: unknown key '%s' (the keys are the "
				    "-o options; see bucketfs.conf(5))",
				    where, k);
			return FALSE;
		}
		if (level < 0)
			continue;
		g.level = (gsize)level;
		g.order = groups->len;
		g.name = g_strdup(names[i]);
		g_array_append_val(groups, g);
	}
	return TRUE;
}

static gint conf_group_cmp(gconstpointer a, gconstpointer b)
{
	const struct conf_group *x = a;
	const struct conf_group *y = b;

	if (x->level != y->level)
		return x->level < y->level ? -1 : 1;
	if (x->file != y->file)
		return x->file < y->file ? -1 : 1;
	return x->order < y->order ? -1 : x->order > y->order;
}

/* The files to read, in increasing precedence; *@must_exist for a named
 * one. */
static GPtrArray *conf_paths(const struct config *cfg, gboolean *must_exist)
{
	GPtrArray *paths = g_ptr_array_new_with_free_func(g_free);
	const char *named = cfg->config_file;
	g_autofree char *user = NULL;

	if (!named)
		named = config_env_get("BUCKETFS_CONFIG");
	*must_exist = named != NULL;
	if (named) {
		if (strcmp(named, "none") != 0)
			g_ptr_array_add(paths, g_strdup(named));
		return paths;
	}
	user = g_build_filename(g_get_user_config_dir(), "bucketfs",
				"bucketfs.conf", NULL);
	g_ptr_array_add(paths, g_strdup(CONFIG_SYSTEM_FILE));
	if (strcmp(user, CONFIG_SYSTEM_FILE) != 0)
		g_ptr_array_add(paths, g_steal_pointer(&user));
	return paths;
}

/*
 * Reads, parses and checks @f, adding its groups for this mount to
 * @groups.  *@found is FALSE (and the result TRUE) when it is missing and
 * need not exist.
 */
static gboolean conf_parse(struct config *cfg, struct conf_file *f,
			   gboolean must_exist, guint file, GArray *groups,
			   gboolean *found, GError **error)
{
	g_autoptr(GError) e = NULL;
	g_autofree char *p = NULL;

	*found = FALSE;
	if (!conf_read(f, must_exist, &e)) {
		if (!e)
			return TRUE;
		g_propagate_error(error, g_steal_pointer(&e));
		return FALSE;
	}
	*found = TRUE;
	f->kf = g_key_file_new();
	g_key_file_set_list_separator(f->kf, ';');
	if (!g_key_file_load_from_data(f->kf, f->text, (gsize)-1,
				       G_KEY_FILE_NONE, &e)) {
		p = log_escape(f->path, -1);
		g_set_error(error, BFS_ERROR, EINVAL, "config file '%s': %s", p,
			    e->message);
		return FALSE;
	}
	return conf_check(cfg, f, file, groups, error);
}

/* Overlays the keys of group @g of @f onto @values. */
static gboolean conf_collect(const struct conf_group *g,
			     const struct conf_file *f, GHashTable *values,
			     GError **error)
{
	g_auto(GStrv) keys = g_key_file_get_keys(f->kf, g->name, NULL, NULL);
	guint j;

	for (j = 0; keys && keys[j]; j++) {
		struct conf_value *v = g_new0(struct conf_value, 1);
		g_autoptr(GError) e = NULL;
		g_autofree char *k = NULL;

		v->value = g_key_file_get_string(f->kf, g->name, keys[j], &e);
		v->where = conf_where(f, g->name, keys[j]);
		if (!v->value) {
			k = log_escape(keys[j], -1);
			g_set_error(error, BFS_ERROR, EINVAL,
				    "%s: key '%s': %s", v->where, k,
				    e->message);
			conf_value_free(v);
			return FALSE;
		}
		g_hash_table_replace(values, g_strdup(keys[j]), v);
	}
	return TRUE;
}

/* Reads, parses and checks the files; the settings for this mount. */
static GHashTable *conf_load(struct config *cfg, GError **error)
{
	g_autoptr(GPtrArray) files =
		g_ptr_array_new_with_free_func(conf_file_free);
	g_autoptr(GArray) groups =
		g_array_new(FALSE, FALSE, sizeof(struct conf_group));
	g_autoptr(GHashTable) values = g_hash_table_new_full(
		g_str_hash, g_str_equal, g_free, conf_value_free);
	g_autoptr(GPtrArray) paths = NULL;
	gboolean must_exist;
	gboolean found;
	guint i;

	g_array_set_clear_func(groups, conf_group_clear);
	paths = conf_paths(cfg, &must_exist);
	for (i = 0; i < paths->len; i++) {
		struct conf_file *f = g_new0(struct conf_file, 1);

		f->path = g_strdup(g_ptr_array_index(paths, i));
		g_ptr_array_add(files, f);
		if (!conf_parse(cfg, f, must_exist, files->len - 1, groups,
				&found, error))
			return NULL;
		if (found)
			g_ptr_array_add(cfg->files_read, g_strdup(f->path));
		else
			g_ptr_array_remove_index(files, files->len - 1);
	}

	g_array_sort(groups, conf_group_cmp);
	for (i = 0; i < groups->len; i++) {
		const struct conf_group *g =
			&g_array_index(groups, struct conf_group, i);

		if (!conf_collect(g, g_ptr_array_index(files, g->file), values,
				  error))
			return NULL;
	}
	return g_steal_pointer(&values);
}

/* Whether the environment sets what @key would: it wins over the file. */
static gboolean conf_env_overrides(const char *key)
{
	if (strcmp(key, "endpoint") == 0)
		return config_env_get("S3_ENDPOINT_URIS") ||
		       config_env_get("AWS_ENDPOINT_URL_S3") ||
		       config_env_get("AWS_ENDPOINT_URL");
	if (strcmp(key, "region") == 0)
		return config_env_get("AWS_REGION") ||
		       config_env_get("AWS_DEFAULT_REGION");
	if (strcmp(key, "ca_file") == 0)
		return config_env_get("AWS_CA_BUNDLE") != NULL;
	if (strcmp(key, "profile") == 0)
		return config_env_get("AWS_PROFILE") ||
		       config_env_get("AWS_ACCESS_KEY_ID");
	return FALSE;
}

/* "key" for a true flag, NULL for a false one, else "key=value". */
static gboolean conf_item(const char *key, gboolean flag,
			  const struct conf_value *v, char **item,
			  GError **error)
{
	g_autofree char *s = g_strstrip(g_strdup(v->value));

	*item = NULL;
	if (!flag) {
		*item = g_strdup_printf("%s=%s", key, v->value);
		return TRUE;
	}
	if (strcmp(s, "true") == 0 || strcmp(s, "1") == 0) {
		*item = g_strdup(key);
		return TRUE;
	}
	if (strcmp(s, "false") == 0 || strcmp(s, "0") == 0)
		return TRUE;
	g_free(s);
	s = log_escape(v->value, -1);
	g_set_error(error, BFS_ERROR, EINVAL,
		    "%s: option '%s': '%s' is not true or false", v->where, key,
		    s);
	return FALSE;
}

/* endpoint=URL;URL...: each through the -o parser. */
static gboolean conf_endpoints(struct config *cfg, const struct conf_value *v,
			       GError **error)
{
	g_auto(GStrv) urls = g_strsplit_set(v->value, ";,", -1);
	gboolean from_options = cfg->endpoints_from_options;
	guint i;

	for (i = 0; urls[i]; i++) {
		g_autofree char *item = NULL;

		g_strstrip(urls[i]);
		if (!*urls[i])
			continue;
		item = g_strdup_printf("endpoint=%s", urls[i]);
		if (!config_option_apply(cfg, item, NULL, FALSE, error)) {
			g_prefix_error(error, "%s: ", v->where);
			return FALSE;
		}
	}
	cfg->endpoints_from_options = from_options;
	if (cfg->endpoints->len > 0) {
		g_free(cfg->endpoint_source);
		cfg->endpoint_source = g_strdup(v->where);
	}
	return TRUE;
}

static gboolean conf_apply_option(struct config *cfg,
				  const struct option_def *def,
				  const struct conf_value *v, GError **error)
{
	g_autofree char *item = NULL;

	if (strcmp(def->name, "endpoint") == 0)
		return conf_endpoints(cfg, v, error);
	if (!conf_item(def->name, def->metavar == NULL, v, &item, error))
		return FALSE;
	if (!item)
		return TRUE;
	if (!config_option_apply(cfg, item, NULL, FALSE, error)) {
		g_prefix_error(error, "%s: ", v->where);
		return FALSE;
	}
	if (strcmp(def->name, "region") == 0) {
		g_free(cfg->region_source);
		cfg->region_source = g_strdup(v->where);
	}
	return TRUE;
}

static gboolean conf_apply_mount(struct config *cfg, const char *key,
				 gboolean flag, const struct conf_value *v,
				 GError **error)
{
	g_autofree char *item = NULL;

	if (!conf_item(key, flag, v, &item, error))
		return FALSE;
	if (!item || !cfg->mount_fn)
		return TRUE;
	if (!cfg->mount_fn(cfg->mount_user, item, error)) {
		g_prefix_error(error, "%s: ", v->where);
		return FALSE;
	}
	return TRUE;
}

/* The file's settings, in the order of config_option_defs then mount_keys. */
gboolean config_file_apply(struct config *cfg, GError **error)
{
	g_autoptr(GHashTable) values = conf_load(cfg, error);
	char name[64];
	gboolean flag;
	gsize i;

	if (!values)
		return FALSE;
	for (i = 0; i < config_n_option_defs; i++) {
		const char *key = config_option_defs[i].name;
		const struct conf_value *v = g_hash_table_lookup(values, key);

		if (!v || g_hash_table_contains(cfg->given, key) ||
		    conf_env_overrides(key))
			continue;
		if (!conf_apply_option(cfg, &config_option_defs[i], v, error))
			return FALSE;
	}
	for (i = 0; config_mount_keys()[i]; i++) {
		const struct conf_value *v;

		g_strlcpy(name, config_mount_keys()[i], sizeof(name));
		name[strcspn(name, "?")] = '\0';
		config_mount_key_find(name, &flag);
		v = g_hash_table_lookup(values, name);
		if (!v || g_hash_table_contains(cfg->given, name))
			continue;
		if (!conf_apply_mount(cfg, name, flag, v, error))
			return FALSE;
	}
	return TRUE;
}
