/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * http_date.h - HTTP dates (Last-Modified, Date) as Unix seconds.
 *
 * S3 servers send IMF-fixdate (RFC 7231 section 7.1.1.1, "Sun, 06 Nov
 * 1994 08:49:37 GMT"), which is parsed by a fixed-format parser here:
 * curl_getdate() spent ~44 k instructions per date (sscanf) in the event
 * thread, two dates per GET.  A string of that shape whose fields are out
 * of range (a 31 February, hour 24, a letter for a digit) is no date.  The
 * obsolete formats a recipient must still accept (RFC 850, asctime) and
 * anything else of another shape go to curl_getdate().
 */
#ifndef BUCKETFS_HTTP_DATE_H
#define BUCKETFS_HTTP_DATE_H

#include <glib.h>

/*
 * The Unix time of the HTTP date @s (NUL-terminated), or -1 if it is no
 * date curl_getdate() understands either.  No I/O, no locale, any thread.
 */
gint64 http_date_parse(const char *s);

#endif
