/* SPDX-License-Identifier: GPL-2.0-or-later */
#include <string.h>

#include <xxhash.h>

#include "index_reseal.h"

/* The header's layout, as docs/INDEX-FORMAT.md gives it. */
#define MAGIC	     "BFSINDX\n"
#define H_HEADER_LEN 12
#define H_CHECKSUM   16
#define H_SECTIONS   144
#define SECTIONS     5
#define SECTION_DESC 24
#define HEADER_FIXED (H_SECTIONS + SECTIONS * SECTION_DESC)

static guint64 get64(const guint8 *p)
{
	guint64 v;

	memcpy(&v, p, sizeof(v));
	return GUINT64_FROM_LE(v);
}

static void put64(guint8 *p, guint64 v)
{
	v = GUINT64_TO_LE(v);
	memcpy(p, &v, sizeof(v));
}

void index_reseal(void *data, gsize len)
{
	guint8 *h = data;
	guint32 hlen;

	if (len < HEADER_FIXED || memcmp(h, MAGIC, 8) != 0)
		return;
	memcpy(&hlen, h + H_HEADER_LEN, sizeof(hlen));
	hlen = GUINT32_FROM_LE(hlen);
	if (hlen < HEADER_FIXED || hlen > len)
		return;
	for (int k = 0; k < SECTIONS; k++) {
		guint8 *d = h + H_SECTIONS + k * SECTION_DESC;
		guint64 off = get64(d), slen = get64(d + 8);

		if (off <= len && slen <= len - off)
			put64(d + 16, XXH64(h + off, slen, 0));
	}
	/* XXH64 of the header with its own checksum taken as zero. */
	put64(h + H_CHECKSUM, 0);
	put64(h + H_CHECKSUM, XXH64(h, hlen, 0));
}
