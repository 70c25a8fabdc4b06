/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * config.c - the life of a struct config: config_init(), config_clear(),
 * the mount options a config file may hand to bucketfs (mount_keys, just
 * below), and the reading of the environment the other pieces share.
 *
 * The other pieces: config_options.c (-o), config_url.c (names and URLs),
 * config_file.c (the config file), config_finish.c (config_finish()),
 * config_describe.c; config_internal.h says what they share.
 */
#include <string.h>

#include "config.h"
#include "config_internal.h"

const char *config_env_get(const char *name)
{
	const char *value = g_getenv(name);

	return value && *value ? value : NULL;
}

/*
 * bucketfs's mount options (take_mount_option() in fs/main.c) that the file
 * may hold; '?' marks a flag.  Keep in step with "Mount options" of
 * bucketfs --help: tests/integration/test_config_file.py compares them.
 */
static const char *const mount_keys[] = {
	"entry_timeout",
	"negative_timeout",
	"free_space",
	"list_workers",
	"index_max_age",
	"index_url",
	"index_url_fallback",
	"whole_max",
	"window_max",
	"memory_max",
	"prefetch_depth",
	"sched_slice",
	"readahead",
	"direct_io",
	"passthrough",
	"readdirplus",
	"write_max",
	"part_size",
	"write_parts",
	"writable?",
	"allow_other?",
	"uid",
	"gid",
	"file_mode",
	"dir_mode",
	"kernel_readahead",
	NULL,
};

const char *const *config_mount_keys(void)
{
	return mount_keys;
}

void config_set_mount_handler(struct config *cfg, config_mount_fn fn,
			      void *user)
{
	cfg->mount_fn = fn;
	cfg->mount_user = user;
}

gboolean config_mount_key_find(const char *key, gboolean *flag)
{
	gsize len = strlen(key);
	guint i;

	for (i = 0; mount_keys[i]; i++) {
		const char *m = mount_keys[i];

		if (strncmp(m, key, len) == 0 &&
		    (m[len] == '\0' || (m[len] == '?' && m[len + 1] == '\0'))) {
			*flag = m[len] == '?';
			return TRUE;
		}
	}
	return FALSE;
}

/* --- init, clear ------------------------------------------------------- */

void config_init(struct config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->prefix = g_strdup("");
	cfg->endpoints = g_ptr_array_new_with_free_func(g_free);
	cfg->empty_dirs = g_ptr_array_new_with_free_func(g_free);
	cfg->addressing = ADDRESSING_AUTO;
	cfg->connect_timeout = 10;
	cfg->stall_timeout = 30;
	cfg->request_timeout = 0;
	cfg->max_attempts = 10;
	cfg->retry_deadline = CONFIG_DEFAULT_RETRY_DEADLINE;
	cfg->max_connections = 0;
	cfg->given =
		g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
	cfg->files_read = g_ptr_array_new_with_free_func(g_free);
}

void config_clear(struct config *cfg)
{
	g_free(cfg->bucket);
	g_free(cfg->prefix);
	if (cfg->endpoints)
		g_ptr_array_unref(cfg->endpoints);
	if (cfg->empty_dirs)
		g_ptr_array_unref(cfg->empty_dirs);
	g_free(cfg->region);
	g_free(cfg->ca_file);
	g_free(cfg->index_path);
	g_free(cfg->profile);
	g_free(cfg->endpoint_source);
	g_free(cfg->region_source);
	g_free(cfg->config_file);
	if (cfg->given)
		g_hash_table_unref(cfg->given);
	if (cfg->files_read)
		g_ptr_array_unref(cfg->files_read);
	memset(cfg, 0, sizeof(*cfg));
}

guint config_mount_connections(unsigned long long nofile)
{
	return (guint)CLAMP(nofile / 2, 8, CONFIG_MOUNT_MAX_CONNECTIONS);
}
