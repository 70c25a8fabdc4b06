/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * s3_xml.h - parsing the XML bodies S3 sends: ListObjectsV2 pages,
 * <Error> documents and the answers of multipart upload.
 *
 * Pure functions: no I/O, no clock, no logging.  Input is a byte buffer
 * that need not be NUL-terminated and may be anything at all (it is fuzzed):
 * malformed input gives a GError, never a crash, a leak or a message on
 * stderr.
 *
 * Parsing is XXE-safe: libxml2 runs with XML_PARSE_NONET, without entity
 * substitution or DTD loading, and a document with a DOCTYPE is refused
 * outright (S3 never sends one), so no entity can expand.
 *
 * Element names are matched on their local name, in any namespace or none:
 * AWS uses http://s3.amazonaws.com/doc/2006-03-01/, s3rver
 * http://doc.s3.amazonaws.com/2006-03-01/, others none.  Unknown elements
 * are ignored, known ones may come in any order.
 *
 * Errors are in BFS_ERROR:
 *   EPROTO  the body is not well-formed XML, or not the document expected
 *           (wrong root, a missing or malformed field, a bad encoding);
 *           the message says which element, which <Contents> (1-based) and
 *           which key, with libxml2's own text and line for XML errors;
 *   EINVAL  the buffer is larger than libxml2 can take (over 2 GiB);
 *   ENOMEM  libxml2 could not allocate a parser.
 *
 * Threads: any thread may parse, concurrently, after s3_xml_init() has run
 * once.  Results are plain data owned by the caller.
 */
#ifndef BUCKETFS_S3_XML_H
#define BUCKETFS_S3_XML_H

#include <glib.h>

/*
 * Initializes libxml2.  Call once from the main thread before any thread
 * parses (libxml2 2.9 requires it for thread safety); calling it again is
 * harmless.  Does not touch libxml2's global error handlers.
 */
void s3_xml_init(void);

/* One <Contents> of a listing. */
struct s3_object {
	/*
	 * The key as bytes, percent-decoded under <EncodingType>url; never
	 * empty, never holds a NUL byte, not necessarily valid UTF-8.
	 */
	char *key;
	guint64 size; /* <Size> */
	/* <LastModified>, seconds since the epoch; 0 when absent */
	gint64 mtime;
	/* <ETag> without surrounding quotes; NULL when absent */
	char *etag;
};

/* Frees @obj and its strings.  NULL is allowed. */
void s3_object_free(struct s3_object *obj);

/*
 * One ListObjectsV2 response page.  A V1 page parses too, but its
 * <NextMarker> is not kept.
 */
struct s3_list_page {
	/* of struct s3_object *, owned, in document order; never NULL */
	GPtrArray *objects;
	/* of char *, decoded like keys, owned; never NULL */
	GPtrArray *common_prefixes;
	/* <IsTruncated>; FALSE when absent */
	gboolean is_truncated;
	/*
	 * <NextContinuationToken>, verbatim (never decoded, even under
	 * <EncodingType>url): pass it back as continuation-token.  NULL if
	 * absent.  A truncated page without one is a protocol error that the
	 * caller must detect (V1 pages continue with a marker instead).
	 */
	char *next_continuation_token;
	/* the echoed <ContinuationToken>; NULL if absent */
	char *continuation_token;
	/* <KeyCount> as sent; 0 if absent */
	guint key_count;
};

/*
 * Parses a ListObjectsV2 response body (root <ListBucketResult>).
 *
 * Under <EncodingType>url</EncodingType> every <Key> and every
 * <CommonPrefixes><Prefix> is percent-decoded, and '+' decodes to a space:
 * AWS encodes a space as '+' and a literal '+' as %2B (botocore decodes
 * with unquote_plus for the same reason); servers that send %20 decode
 * the same.  A '%' not followed by two hex digits, or a %00, is an error.
 * Without <EncodingType> the text is taken as is; any other encoding type
 * is an error.
 *
 * Required in each <Contents>: one non-empty <Key> and one <Size> (plain
 * unsigned decimal that fits 64 bits: no sign, space or junk).  Optional:
 * <LastModified> (see s3_xml_parse_time(); malformed is an error) and
 * <ETag>.  <IsTruncated> must be "true" or "false", <KeyCount> an unsigned
 * 32-bit decimal.  A body whose root is <Error> fails with the S3 code and
 * message in the GError.
 *
 * Returns a new page (free with s3_list_page_free()), or NULL with @error
 * set (EPROTO, EINVAL, ENOMEM; see above).  @buf need not be
 * NUL-terminated.  Any thread, after s3_xml_init().
 */
struct s3_list_page *s3_xml_parse_list(const char *buf, gsize len,
				       GError **error);

/* Frees @page, its objects and prefixes.  NULL is allowed. */
void s3_list_page_free(struct s3_list_page *page);

/* For g_autoptr(s3_list_page) and g_autoptr(s3_object). */
typedef struct s3_list_page s3_list_page;
typedef struct s3_object s3_object;
G_DEFINE_AUTOPTR_CLEANUP_FUNC(s3_list_page, s3_list_page_free)
G_DEFINE_AUTOPTR_CLEANUP_FUNC(s3_object, s3_object_free)

/*
 * The fields of an S3 <Error> document.  Every field is a newly allocated
 * string as sent (surrounding whitespace kept), or NULL when the element is
 * absent.  After a successful s3_xml_parse_error() @code is never NULL.
 */
struct s3_error_info {
	char *code;	  /* <Code>: "NoSuchKey", "SlowDown", ... */
	char *message;	  /* <Message> */
	char *request_id; /* <RequestId> */
	char *host_id;	  /* <HostId> */
	char *resource;	  /* <Resource> */
	/* <Region>: AuthorizationHeaderMalformed and redirects */
	char *region;
	char *endpoint;	      /* <Endpoint>: PermanentRedirect */
	char *server_time;    /* <ServerTime>: RequestTimeTooSkewed */
	char *request_time;   /* <RequestTime>: RequestTimeTooSkewed */
	char *string_to_sign; /* <StringToSign>: SignatureDoesNotMatch */
	/* <CanonicalRequest>: SignatureDoesNotMatch; it may hold a
	 * session token: do not log it whole */
	char *canonical_request;
};

/*
 * Parses an S3 <Error> document into @out, which must be zeroed (or
 * cleared with s3_error_info_clear()); its previous contents are not freed.
 * <Code> is required.  On failure @out is left zeroed.
 *
 * Returns TRUE, or FALSE with @error set (EPROTO, EINVAL, ENOMEM).  @buf
 * need not be NUL-terminated.  Any thread, after s3_xml_init().
 */
gboolean s3_xml_parse_error(const char *buf, gsize len,
			    struct s3_error_info *out, GError **error);

/* Frees the fields of @info and zeroes it; it can be reused. */
void s3_error_info_clear(struct s3_error_info *info);

/* For g_auto(s3_error_info) info = { 0 }; */
typedef struct s3_error_info s3_error_info;
G_DEFINE_AUTO_CLEANUP_CLEAR_FUNC(s3_error_info, s3_error_info_clear)

/*
 * Parses an S3 timestamp, "2009-10-12T17:50:30.000Z": exactly
 * YYYY-MM-DDTHH:MM:SS, an optional '.' and one or more fraction digits
 * (dropped), and 'Z'.  Fields must be in range (seconds 00-59; the day
 * must exist in that month).  Stores seconds since the epoch in @out.
 *
 * Returns FALSE, leaving @out alone, for anything else.  No GError: the
 * caller names the element.  Any thread.
 */
gboolean s3_xml_parse_time(const char *s, gint64 *out);

/* -- multipart upload ------------------------------------------------- */

/*
 * CreateMultipartUpload's answer (<InitiateMultipartUploadResult>): its
 * non-empty <UploadId>, newly allocated; NULL with EPROTO (an <Error>
 * root gives its code and message).  Any thread, after s3_xml_init().
 */
char *s3_xml_parse_initiate(const char *buf, gsize len, GError **error);

/*
 * CompleteMultipartUpload's answer, which S3 may send with status 200
 * even when the upload failed.  <CompleteMultipartUploadResult>: TRUE,
 * and its <ETag> unquoted (newly allocated, NULL if absent) in *@etag.
 * <Error>: FALSE with @info filled (clear it) and @error NULL.  Anything
 * else: FALSE with @error EPROTO.  Any thread, after s3_xml_init().
 */
gboolean s3_xml_parse_complete(const char *buf, gsize len, char **etag,
			       struct s3_error_info *info, GError **error);

/*
 * The body of CompleteMultipartUpload for parts 1..@n whose ETags are
 * @etags (as the server gave them, quotes or not).  Newly allocated.
 */
char *s3_xml_complete_body(const char *const *etags, guint n);

/* One <Upload> of a ListMultipartUploads page.  Plain data. */
struct s3_upload {
	char *key;	  /* never empty */
	char *upload_id;  /* never empty */
	gint64 initiated; /* <Initiated>, seconds since the epoch, or 0 */
};

struct s3_uploads_page {
	GPtrArray *uploads; /* of struct s3_upload *, owned; never NULL */
	gboolean is_truncated;
	char *next_key_marker;	     /* NULL if absent */
	char *next_upload_id_marker; /* NULL if absent */
};

/*
 * Parses a ListMultipartUploads page (root <ListMultipartUploadsResult>;
 * keys taken as sent, no encoding-type).  NULL with EPROTO for anything
 * else, an <Error> root or an <Upload> without Key or UploadId.  Free
 * with s3_uploads_page_free().  Any thread, after s3_xml_init().
 */
struct s3_uploads_page *s3_xml_parse_uploads(const char *buf, gsize len,
					     GError **error);
void s3_uploads_page_free(struct s3_uploads_page *page);

#endif
