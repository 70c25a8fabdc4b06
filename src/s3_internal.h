/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * What the pieces of the S3 client share: the client, one call, and a
 * blocking caller's wait; the calls that build, judge and run requests.
 */
#ifndef BUCKETFS_S3_INTERNAL_H
#define BUCKETFS_S3_INTERNAL_H

#include "http.h"
#include "s3.h"

struct s3 {
	struct http *http;
	char *bucket;
	char *region;
	gboolean virtual_hosted;
	char **endpoints; /* NULL-terminated, immutable */
	/*
	 * Refreshed ahead of their expiry, and at once on ExpiredToken; a
	 * pointer it hands out stays valid until s3_free().
	 */
	struct cred_refresh *creds;
	gint range_quirk_logged; /* atomic: a server ignored a Range */
};

enum call_kind {
	CALL_GET,
	CALL_HEAD,
	CALL_LIST,
	CALL_PUT,
	CALL_DELETE,
	/* multipart upload (judge_mpu()) */
	CALL_MPU_CREATE,
	CALL_MPU_PART,
	CALL_MPU_COMPLETE,
	CALL_MPU_ABORT,
	CALL_MPU_LIST,
};

/*
 * One S3 call.  Built by the caller's thread, then owned by the HTTP
 * request (freed through its data_free): used on the event thread, then
 * by done() on a done thread (on the event thread for a quick_done GET
 * that succeeded).
 */
struct call {
	struct s3 *s3;
	enum call_kind kind;
	char *key;		 /* NULL for bucket-level calls */
	char *query;		 /* encoded, or NULL */
	GPtrArray *sign_headers; /* "Name: value", signed and sent */
	guint64 offset;
	guint64 length;
	gboolean ranged;
	guint range_ignored; /* 200s to the Range that could not serve it */
	char *if_match;
	char *payload_sha256; /* CALL_PUT: of the body, hex */
	struct s3_object_meta meta;
	struct s3_list_page *page; /* CALL_LIST result */
	gboolean probe;		   /* CALL_LIST: a malformed page is final */
	char *result; /* CALL_MPU_CREATE: UploadId; COMPLETE: ETag */
	struct s3_uploads_page *uploads; /* CALL_MPU_LIST result */
	s3_part_done_fn part_done;	 /* async CALL_MPU_PART */

	s3_get_done_fn get_done; /* async GET */
	void *user;
	struct sync *sync; /* blocking calls */
};

/* A blocking caller waits here for the engine. */
struct sync {
	GMutex lock;
	GCond cond;
	gboolean finished; /* protected by lock */
	GBytes *data;
	struct s3_object_meta meta;
	struct s3_list_page *page;
	char *result;
	struct s3_uploads_page *uploads;
	GError *error;
};

/* s3_request.c: building, signing and running calls. */
struct call *call_new(struct s3 *s3, enum call_kind kind, const char *key);
void append_query(GString *q, const char *name, const char *value);
void meta_move(struct s3_object_meta *to, struct s3_object_meta *from);
char *call_describe(struct s3 *s3, const char *verb, const char *key);
struct http_request *request_for(struct call *call, const char *what,
				 int endpoint);
gboolean run_sync(struct s3 *s3, struct call *call, struct http_request *req,
		  struct sync *sync, GError **error);

/* s3_judge.c: a response judged, on the HTTP event thread. */
enum http_verdict call_judge(const struct http_response *resp, void *data,
			     GError **error);

#endif
