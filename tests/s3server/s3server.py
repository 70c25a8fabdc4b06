#!/usr/bin/env python3
"""bucketfs test S3 server: a small S3-compatible server for tests and benchmarks.

Standard library only.  It serves three kinds of bucket, all with an in-memory
overlay that takes PUT and DELETE:

  --bucket NAME=DIR              objects are the regular files under DIR
                                 (recursively; key = relative path).  The key
                                 set is read at start-up (and on
                                 POST /_bucketfs/rescan); sizes, mtimes and
                                 contents are read from disk per request.
  --synthetic NAME:N[:SIZE[:PREFIX]]
                                 N keys "{PREFIX}img_{i:0{w}d}_of_{N}.jpeg",
                                 w = len(str(N)), never materialised, so
                                 N = 50,000,000 costs nothing.
  (PUT to a new bucket name)     creates an empty in-memory bucket.

It speaks enough S3 for bucketfs, curl --aws-sigv4, botocore, s3fs and rclone:
ListObjectsV2 and V1, GetObject (Range, If-Match, If-None-Match, If-(Un)Modified-
Since), HeadObject, PutObject, DeleteObject, HeadBucket, GetBucketLocation,
CreateBucket and ListBuckets, with path-style and virtual-hosted addressing,
SigV4 header and query (presigned) authentication, AWS-shaped error XML, and
keys of arbitrary bytes, ordered by their bytes as S3 orders them.

Content and ETags:
  * file-backed objects serve the file's bytes; ETag = MD5 of the served bytes,
    or with --etag-style nginx the ETag nginx gives the same file,
    "<hex mtime seconds>-<hex size>", so that nginx serving DIR can answer the
    GETs (with If-Match) of clients that listed through this server.
  * overlay (PUT) objects serve what was PUT; ETag = MD5 of the served bytes.
  * synthetic objects serve bytes that are a deterministic function of
    (bucket, key, generation, offset): 64 KiB blocks copied from a fixed
    pseudo-random pool at offsets chosen by hashing.  Their ETag is a
    deterministic 32-hex-digit hash of (bucket, key, size, generation), NOT the
    MD5 of the content.  LastModified is fixed at 2020-01-01T00:00:00Z.
  * POST /_bucketfs/mutate bumps an object's generation.  For file-backed and
    overlay objects the served bytes change in their first 8 bytes (byte 0 is
    XORed with 0xff, bytes 1..7 with the generation number, little-endian); the
    files on disk are never modified.  Empty objects cannot change.

A plain-HTTP control API under /_bucketfs/ (not authenticated, JSON) exposes
statistics, fault injection, mutation, rescans and a clock offset; see
README.md next to this file or GET /_bucketfs/.
"""

import argparse
import base64
import bisect
import binascii
import calendar
import email.utils
import functools
import hashlib
import hmac
import http
import itertools
import json
import os
import random
import re
import signal
import socket
import socketserver
import ssl
import stat
import struct
import sys
import threading
import time
import traceback
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import quote, quote_plus, unquote_to_bytes
from xml.etree import ElementTree as ET

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "credfakes"))
import credfakes  # noqa: E402  (the session credentials the fakes issue)

S3_NS = "http://s3.amazonaws.com/doc/2006-03-01/"
DEFAULT_ACCESS_KEY = "bucketfs-test"
DEFAULT_SECRET_KEY = "bucketfs-test-secret"
SYNTHETIC_SIZE = 322624
SYNTHETIC_PREFIX = "train/"
SYNTHETIC_MTIME = 1577836800.0          # 2020-01-01T00:00:00Z
MAX_SKEW_SECONDS = 15 * 60
MAX_KEYS = 1000
OPS = ("LIST", "GET", "HEAD", "PUT", "DELETE", "OTHER",
       "UPLOADPART", "COMPLETE")  # multipart: faults on these two
STATS_OPS = OPS[:6]             # always in the stats; the others once seen
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
UNSIGNED_PAYLOAD = "UNSIGNED-PAYLOAD"
CONTROL_PREFIX = "/_bucketfs/"
SEND_BATCH = 1 << 20                    # bytes handed to the kernel per call
FILE_CHUNK = 1 << 20

BUCKET_SUBRESOURCES = frozenset((
    "accelerate", "acl", "analytics", "cors", "delete", "encryption",
    "intelligent-tiering", "inventory", "lifecycle", "logging", "metrics",
    "notification", "object-lock", "ownershipControls", "policy",
    "policyStatus", "publicAccessBlock", "replication", "requestPayment",
    "tagging", "uploads", "versioning", "versions", "website"))
OBJECT_SUBRESOURCES = frozenset((
    "acl", "attributes", "legal-hold", "partNumber", "restore", "retention",
    "select", "tagging", "torrent", "uploadId", "uploads"))
RESPONSE_OVERRIDES = {
    "response-cache-control": "Cache-Control",
    "response-content-disposition": "Content-Disposition",
    "response-content-encoding": "Content-Encoding",
    "response-content-language": "Content-Language",
    "response-content-type": "Content-Type",
    "response-expires": "Expires",
}

# --------------------------------------------------------------------------
# Errors


ERRORS = {
    # code: (HTTP status, default message)
    "AccessDenied": (403, "Access Denied"),
    "AuthorizationHeaderMalformed": (400, "The authorization header is malformed."),
    "AuthorizationQueryParametersError": (400, "Error parsing the X-Amz-Credential parameter."),
    "BadDigest": (400, "The Content-MD5 you specified did not match what we received."),
    "ExpiredToken": (400, "The provided token has expired."),
    "IncompleteBody": (400, "You did not provide the number of bytes specified by the "
                            "Content-Length HTTP header."),
    "InternalError": (500, "We encountered an internal error. Please try again."),
    "InvalidAccessKeyId": (403, "The AWS Access Key Id you provided does not exist in "
                                "our records."),
    "InvalidArgument": (400, "Invalid Argument"),
    "InvalidBucketName": (400, "The specified bucket is not valid."),
    "InvalidDigest": (400, "The Content-MD5 you specified is not valid."),
    "InvalidRange": (416, "The requested range is not satisfiable"),
    "InvalidRequest": (400, "Invalid Request"),
    "InvalidToken": (403, "The provided token is malformed or otherwise invalid."),
    "MethodNotAllowed": (405, "The specified method is not allowed against this resource."),
    "MissingContentLength": (411, "You must provide the Content-Length HTTP header."),
    "NoSuchBucket": (404, "The specified bucket does not exist"),
    "NoSuchKey": (404, "The specified key does not exist."),
    "NotImplemented": (501, "A header you provided implies functionality that is not "
                            "implemented"),
    "PreconditionFailed": (412, "At least one of the pre-conditions you specified did not hold"),
    "RequestTimeTooSkewed": (403, "The difference between the request time and the "
                                  "current time is too large."),
    "RequestTimeout": (400, "Your socket connection to the server was not read from or "
                            "written to within the timeout period. Idle connections will "
                            "be closed."),
    "ServiceUnavailable": (503, "Please reduce your request rate."),
    "SignatureDoesNotMatch": (403, "The request signature we calculated does not match the "
                                   "signature you provided. Check your key and signing "
                                   "method."),
    "SlowDown": (503, "Please reduce your request rate."),
    # multipart upload
    "EntityTooSmall": (400, "Your proposed upload is smaller than the minimum allowed "
                            "object size."),
    "InvalidPart": (400, "One or more of the specified parts could not be found."),
    "InvalidPartOrder": (400, "The list of parts was not in ascending order."),
    "MalformedXML": (400, "The XML you provided was not well-formed or did not validate "
                          "against our published schema."),
    "NoSuchUpload": (404, "The specified upload does not exist."),
    "XAmzContentSHA256Mismatch": (400, "The provided 'x-amz-content-sha256' header does "
                                       "not match what was computed."),
}
STATUS_DEFAULT_CODE = {
    400: "InvalidRequest", 403: "AccessDenied", 404: "NoSuchKey",
    405: "MethodNotAllowed", 412: "PreconditionFailed", 416: "InvalidRange",
    500: "InternalError", 501: "NotImplemented", 503: "SlowDown",
}


class S3Error(Exception):
    """An S3 error response: code, HTTP status, message and extra elements."""

    def __init__(self, code, message=None, status=None, extra=(), headers=()):
        default_status, default_message = ERRORS.get(code, (500, code))
        super().__init__(message or default_message)
        self.code = code
        self.status = status or default_status
        self.message = message or default_message
        self.extra = list(extra)       # [(element, text)] before <Resource>
        self.headers = list(headers)   # extra response headers


# --------------------------------------------------------------------------
# Small helpers

_XML_ESCAPES = {ord("&"): "&amp;", ord("<"): "&lt;", ord(">"): "&gt;",
                ord('"'): "&quot;", ord("'"): "&apos;"}
# XML 1.0 cannot carry most control characters; like S3 we emit character
# references anyway (clients that care ask for encoding-type=url).  \r is
# escaped so that parsers do not normalise it to \n.
for _c in itertools.chain(range(0x20), (0xFFFE, 0xFFFF)):
    if _c not in (0x09, 0x0A):
        _XML_ESCAPES[_c] = "&#x%X;" % _c


def xml_escape(text):
    return text.translate(_XML_ESCAPES)


def key_text(key, url_encode):
    """A key (bytes) as it appears in listing XML, escaped."""
    if url_encode:
        return quote_plus(key, safe=b"/")
    return xml_escape(key.decode("utf-8", "replace"))


def aws_uri_encode(data, safe):
    """AWS SigV4 URI encoding: keep A-Za-z0-9-._~ (and safe), %XX the rest."""
    return quote(data, safe=safe)


@functools.lru_cache(maxsize=4096)
def iso8601(t):
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + ".%03dZ" % (int(t * 1000) % 1000)


def iso_seconds(t):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def http_date(t):
    return email.utils.formatdate(t, usegmt=True)


def parse_http_date(value):
    try:
        return email.utils.parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError, IndexError, OverflowError):
        return None


def prefix_successor(prefix):
    """Smallest byte string greater than every string starting with prefix."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes((stripped[-1] + 1,))


def encode_token(start, unique=False):
    """Continuation token: base64 of a version byte and the next start key.

    unique: version 2, with 8 random bytes before the key, so that a page
    that does not advance (empty_truncated) still hands out a new token,
    as real S3's opaque tokens do."""
    if unique:
        return base64.b64encode(b"2" + os.urandom(8) + start).decode("ascii")
    return base64.b64encode(b"1" + start).decode("ascii")


def decode_token(token):
    try:
        raw = base64.b64decode(token, validate=True)
    except (binascii.Error, ValueError):
        raw = b""
    if raw.startswith(b"2") and len(raw) >= 9:
        return raw[9:]
    if not raw.startswith(b"1"):
        raise S3Error("InvalidArgument", "The continuation token provided is incorrect",
                      extra=[("ArgumentName", "continuation-token"),
                             ("ArgumentValue", token.decode("utf-8", "replace"))])
    return raw[1:]


def generation_mask(gen):
    """XOR mask applied to the first bytes of a mutated object."""
    return b"\xff" + (gen & ((1 << 56) - 1)).to_bytes(7, "little") if gen else b""


def apply_mask(buf, offset, mask):
    """buf holds object bytes starting at offset; XOR the mask over it."""
    if offset >= len(mask) or not buf:
        return buf
    n = min(len(mask) - offset, len(buf))
    head = bytes(a ^ b for a, b in zip(bytes(buf[:n]), mask[offset:offset + n]))
    return head + bytes(buf[n:])


def key_str(key):
    """A key as a str for fault matching and messages (lossless)."""
    return key.decode("utf-8", "surrogateescape")


def key_display(key):
    return key.decode("utf-8", "replace")


# --------------------------------------------------------------------------
# Synthetic content

POOL_SIZE = 1 << 24
BLOCK_SIZE = 1 << 16
_M64 = (1 << 64) - 1
_pool = None
_pool_lock = threading.Lock()


def _content_pool():
    global _pool
    if _pool is None:
        with _pool_lock:
            if _pool is None:
                rng = random.Random(0xB0C4E7F5)
                _pool = memoryview(rng.randbytes(POOL_SIZE + BLOCK_SIZE))
    return _pool


def synthetic_seed(bucket, key, gen):
    material = b"%s\0%s\0%d" % (bucket.encode(), key, gen)
    return int.from_bytes(hashlib.blake2b(material, digest_size=8).digest(), "little")


def _block_offset(seed, block):
    z = (seed + (block + 1) * 0x9E3779B97F4A7C15) & _M64   # splitmix64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return (z ^ (z >> 31)) % POOL_SIZE


def synthetic_chunks(seed, start, end):
    """Yield memoryviews covering object bytes [start, end)."""
    pool = _content_pool()
    pos = start
    while pos < end:
        block, within = divmod(pos, BLOCK_SIZE)
        n = min(end - pos, BLOCK_SIZE - within)
        off = _block_offset(seed, block) + within
        yield pool[off:off + n]
        pos += n


def synthetic_bytes(bucket, key, size, gen=0, start=0, end=None):
    """The bytes [start, end) of a synthetic object (for tests)."""
    if isinstance(key, str):
        key = key.encode()
    end = size if end is None else min(end, size)
    return b"".join(synthetic_chunks(synthetic_seed(bucket, key, gen), start, end))


def synthetic_etag(bucket, key, size, gen):
    material = b"bucketfs-synthetic\0%s\0%s\0%d\0%d" % (bucket.encode(), key, size, gen)
    return hashlib.md5(material).hexdigest()


# --------------------------------------------------------------------------
# Objects


class StoredObject:
    """One object as served.  Subclasses say where the bytes come from."""

    __slots__ = ("key", "size", "mtime", "content_type", "meta")

    def __init__(self, key, size, mtime, content_type="binary/octet-stream", meta=()):
        self.key = key
        self.size = size
        self.mtime = mtime
        self.content_type = content_type
        self.meta = tuple(meta)

    def etag(self):
        raise NotImplementedError

    def chunks(self, start, end):
        """Iterate buffers holding the bytes [start, end)."""
        raise NotImplementedError


class MemObject(StoredObject):
    """An object PUT into the overlay."""

    __slots__ = ("original", "gen", "data", "_etag")

    def __init__(self, key, data, mtime, content_type, meta, gen=0):
        super().__init__(key, len(data), mtime, content_type, meta)
        self.original = data
        self.gen = gen
        self.data = apply_mask(data, 0, generation_mask(gen))
        self._etag = hashlib.md5(self.data).hexdigest()

    def etag(self):
        return self._etag

    def chunks(self, start, end):
        yield memoryview(self.data)[start:end]

    def mutated(self):
        return MemObject(self.key, self.original, self.mtime, self.content_type,
                         self.meta, self.gen + 1)


class MultipartObject(MemObject):
    """An object made by CompleteMultipartUpload: S3's "-N" ETag."""

    __slots__ = ("_mpu_etag",)

    def __init__(self, key, data, mtime, content_type, meta, etag):
        super().__init__(key, data, mtime, content_type, meta)
        self._mpu_etag = etag

    def etag(self):
        return self._mpu_etag


MIN_PART = 5 << 20                      # S3's smallest part but the last


class Upload:
    """A multipart upload in progress: its parts, number -> (bytes, md5)."""

    def __init__(self, bucket, key, initiated, content_type):
        self.id = base64.urlsafe_b64encode(os.urandom(24)).decode()
        self.bucket, self.key, self.initiated = bucket, key, initiated
        self.content_type = content_type
        self.parts = {}


class SyntheticObject(StoredObject):
    __slots__ = ("bucket", "gen", "_etag")

    def __init__(self, bucket, key, size, gen):
        super().__init__(key, size, SYNTHETIC_MTIME, "application/octet-stream")
        self.bucket = bucket
        self.gen = gen
        self._etag = synthetic_etag(bucket, key, size, gen)

    def etag(self):
        return self._etag

    def chunks(self, start, end):
        seed = synthetic_seed(self.bucket, self.key, self.gen)
        return synthetic_chunks(seed, start, end)


_md5_cache = {}   # (path, size, mtime_ns, ino, gen) -> hex


class FileObject(StoredObject):
    __slots__ = ("path", "gen", "_cache_key", "etag_style")

    def __init__(self, key, path, st, gen, etag_style="md5"):
        super().__init__(key, st.st_size, st.st_mtime, "application/octet-stream")
        self.path = path
        self.gen = gen
        self.etag_style = etag_style
        self._cache_key = (path, st.st_size, st.st_mtime_ns, st.st_ino, gen)

    def etag(self):
        if self.etag_style == "nginx":
            # nginx's ETag for a static file; a mutated object must differ.
            etag = "%x-%x" % (int(self.mtime), self.size)
            return etag if not self.gen else "%s-g%d" % (etag, self.gen)
        etag = _md5_cache.get(self._cache_key)
        if etag is None:
            digest = hashlib.md5()
            for chunk in self.chunks(0, self.size):
                digest.update(chunk)
            etag = _md5_cache[self._cache_key] = digest.hexdigest()
        return etag

    def chunks(self, start, end):
        mask = generation_mask(self.gen)
        with open(self.path, "rb") as f:
            f.seek(start)
            pos = start
            while pos < end:
                data = f.read(min(FILE_CHUNK, end - pos))
                if not data:
                    # The file shrank under us; pad so the length holds.
                    data = bytes(end - pos)
                if pos < len(mask):
                    data = apply_mask(data, pos, mask)
                yield data
                pos += len(data)


# --------------------------------------------------------------------------
# Buckets

_CP = object()   # marks a CommonPrefixes entry in a listing page


class Bucket:
    """A bucket: an immutable sorted base key set plus an in-memory overlay.

    Subclasses provide the base through _base_view() (a sorted sequence of
    keys supporting len, indexing and bisect), _base_has() and _base_object().
    The overlay (PUT objects), tombstones (DELETEd base keys) and generations
    are protected by self.lock.
    """

    kind = "memory"

    def __init__(self, name):
        self.name = name
        self.created = time.time()
        self.lock = threading.Lock()
        self._overlay = {}          # key -> MemObject       /* protected by lock */
        self._overlay_keys = []     # sorted keys of _overlay /* protected by lock */
        self._deleted = set()       # tombstoned base keys    /* protected by lock */
        self._gens = {}             # base key -> generation  /* protected by lock */

    # Base hooks -----------------------------------------------------------

    def _base_view(self):
        return ()

    def _base_has(self, key):
        return False

    def _base_object(self, key, gen):
        return None

    def _listed_meta(self, key, gen):
        """(mtime, etag, size) of a key known to be in _base_view(), or None."""
        obj = self._base_object(key, gen)
        return None if obj is None else (obj.mtime, obj.etag(), obj.size)

    def describe(self):
        return {"name": self.name, "kind": self.kind}

    # Operations -------------------------------------------------------------

    def lookup(self, key):
        """The object at key, or None."""
        with self.lock:
            obj = self._overlay.get(key)
            if obj is not None:
                return obj
            if key in self._deleted:
                return None
            gen = self._gens.get(key, 0)
        return self._base_object(key, gen)

    def put(self, obj):
        with self.lock:
            if obj.key not in self._overlay:
                bisect.insort(self._overlay_keys, obj.key)
            self._overlay[obj.key] = obj
            self._deleted.discard(obj.key)

    def delete(self, key):
        with self.lock:
            if self._overlay.pop(key, None) is not None:
                i = bisect.bisect_left(self._overlay_keys, key)
                del self._overlay_keys[i]
            if self._base_has(key):
                self._deleted.add(key)

    def mutate(self, key):
        """Bump key's generation; False if there is no such object."""
        with self.lock:
            obj = self._overlay.get(key)
            if obj is not None:
                self._overlay[key] = obj.mutated()
                return True
            if key in self._deleted or not self._base_has(key):
                return False
            self._gens[key] = self._gens.get(key, 0) + 1
            return True

    def list_page(self, prefix, start, delimiter, limit):
        """One page of a listing.

        Returns (entries, truncated, next_start): entries are
        (key, (mtime, etag, size)) pairs, or (common_prefix, _CP); next_start
        is the inclusive lower bound at which the following page starts.
        """
        if start < prefix:
            start = prefix
        raw, truncated = self._collect(prefix, start, delimiter, limit)
        entries = []
        for key, what in raw:
            if isinstance(what, int):
                what = self._listed_meta(key, what)
                if what is None:        # the file vanished from disk
                    continue
            elif what is not _CP:
                what = (what.mtime, what.etag(), what.size)
            entries.append((key, what))
        if raw:
            last_key, last = raw[-1]
            if last is _CP:
                next_start = prefix_successor(last_key) or last_key + b"\xff"
            else:
                next_start = last_key + b"\0"
        else:
            next_start = start
        return entries, truncated, next_start

    def _collect(self, prefix, start, delimiter, limit):
        # Merge the base and the overlay in byte order, skipping tombstones
        # and jumping over each common prefix.  Base objects are resolved by
        # the caller, outside the lock (they may stat and hash files).
        items = []
        plen, dlen = len(prefix), len(delimiter)
        with self.lock:
            base, over = self._base_view(), self._overlay_keys
            overlay, deleted, gens = self._overlay, self._deleted, self._gens
            bn, on = len(base), len(over)
            bi, oi = bisect.bisect_left(base, start), bisect.bisect_left(over, start)
            bk = base[bi] if bi < bn else None
            ok = over[oi] if oi < on else None
            while bk is not None or ok is not None:
                if ok is not None and (bk is None or ok <= bk):
                    key, what = ok, overlay[ok]
                    if bk == ok:
                        bi += 1
                        bk = base[bi] if bi < bn else None
                    oi += 1
                    ok = over[oi] if oi < on else None
                else:
                    key = bk
                    bi += 1
                    bk = base[bi] if bi < bn else None
                    if key in deleted:
                        continue
                    what = gens.get(key, 0)
                if not key.startswith(prefix):
                    break
                cut = key.find(delimiter, plen) if dlen else -1
                if len(items) >= limit:
                    return items, True
                if cut < 0:
                    items.append((key, what))
                    continue
                common = key[:cut + dlen]
                items.append((common, _CP))
                after = prefix_successor(common)
                if after is None:
                    break
                if bk is not None and bk < after:
                    bi = bisect.bisect_left(base, after, bi)
                    bk = base[bi] if bi < bn else None
                if ok is not None and ok < after:
                    oi = bisect.bisect_left(over, after, oi)
                    ok = over[oi] if oi < on else None
        return items, False


class DirBucket(Bucket):
    """A bucket backed by the regular files under a directory."""

    kind = "directory"

    def __init__(self, name, root, etag_style="md5"):
        super().__init__(name)
        self.etag_style = etag_style     # "md5" or "nginx" (see FileObject.etag)
        self.root = os.fsencode(os.path.abspath(root))
        if not os.path.isdir(self.root):
            raise ValueError("not a directory: %s" % root)
        self._keys = []
        self._paths = {}
        self.rescan()

    def rescan(self):
        """Re-read the key set from disk."""
        paths = {}
        for dirpath, _dirs, files in os.walk(self.root):
            for name in files:
                full = os.path.join(dirpath, name)
                try:
                    if not stat.S_ISREG(os.stat(full).st_mode):
                        continue
                except OSError:
                    continue
                paths[os.path.relpath(full, self.root)] = full
        keys = sorted(paths)
        with self.lock:
            self._keys, self._paths = keys, paths
        return len(keys)

    def _base_view(self):
        return self._keys

    def _base_has(self, key):
        return key in self._paths

    def _base_object(self, key, gen):
        path = self._paths.get(key)
        if path is None:
            return None
        try:
            st = os.stat(path)
        except OSError:
            return None
        if not stat.S_ISREG(st.st_mode):
            return None
        return FileObject(key, path, st, gen, self.etag_style)

    def describe(self):
        return {"name": self.name, "kind": self.kind,
                "root": os.fsdecode(self.root), "keys": len(self._keys),
                "etag_style": self.etag_style}


class SyntheticKeys:
    """The sorted key sequence of a synthetic bucket, computed on demand.

    Zero padding to a fixed width makes byte order equal numeric order, so
    bisect works directly on this sequence.
    """

    def __init__(self, prefix, n):
        self.n = n
        self.width = len(str(n))
        self.head = prefix + b"img_"
        self.tail = b"_of_%d.jpeg" % n
        self.keylen = len(self.head) + self.width + len(self.tail)
        self._fmt = (self.head.replace(b"%", b"%%") + b"%%0%dd" % self.width
                     + self.tail.replace(b"%", b"%%"))

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if i < 0:
            i += self.n
        if not 0 <= i < self.n:
            raise IndexError(i)
        return self._fmt % i

    def index(self, key):
        """The index of key, or -1 if it is not a key of this sequence."""
        if (len(key) != self.keylen or not key.startswith(self.head)
                or not key.endswith(self.tail)):
            return -1
        digits = key[len(self.head):len(self.head) + self.width]
        if not digits.isdigit():
            return -1
        i = int(digits)
        return i if i < self.n else -1


class SyntheticBucket(Bucket):
    kind = "synthetic"

    def __init__(self, name, n, size=SYNTHETIC_SIZE, prefix=SYNTHETIC_PREFIX):
        super().__init__(name)
        self.size = size
        self.prefix = prefix
        self.keys = SyntheticKeys(prefix.encode(), n)

    def _base_view(self):
        return self.keys

    def _base_has(self, key):
        return self.keys.index(key) >= 0

    def _base_object(self, key, gen):
        if self.keys.index(key) < 0:
            return None
        return SyntheticObject(self.name, key, self.size, gen)

    def _listed_meta(self, key, gen):
        return SYNTHETIC_MTIME, synthetic_etag(self.name, key, self.size, gen), self.size

    def describe(self):
        return {"name": self.name, "kind": self.kind, "keys": self.keys.n,
                "size": self.size, "prefix": self.prefix}


BUCKET_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")


# --------------------------------------------------------------------------
# SigV4


class Authenticator:
    """Verifies AWS SigV4 (header and presigned-query) authentication."""

    def __init__(self, keys, region, verify, anonymous_ok, clock):
        self.keys = keys                # access key -> (secret, token or None)
        self.expired = frozenset()      # access keys whose token has expired
        self.session_key = None         # --session-key: tests/credfakes' sessions
        self.region = region
        self.verify = verify
        self.anonymous_ok = anonymous_ok
        self.clock = clock
        self._signing_keys = {}

    def check(self, req):
        """Authenticate req; return the payload hash to check the body against
        (or None).  Raises S3Error."""
        if not self.verify:
            return None
        auth = req.headers.get("authorization")
        if auth is None:
            if "X-Amz-Algorithm" in req.query:
                return self._check_presigned(req)
            if "X-Amz-Signature" in req.query or "Signature" in req.query:
                raise S3Error("AuthorizationQueryParametersError",
                              "Query-string authentication version 4 requires the "
                              "X-Amz-Algorithm, X-Amz-Credential, X-Amz-Signature, "
                              "X-Amz-Date, X-Amz-SignedHeaders, and X-Amz-Expires parameters.")
            if self.anonymous_ok:
                return None
            raise S3Error("AccessDenied")
        return self._check_header(req, auth)

    def _check_header(self, req, auth):
        scheme, _, rest = auth.strip().partition(" ")
        if scheme != "AWS4-HMAC-SHA256":
            if scheme == "AWS":
                raise S3Error("InvalidRequest", "The authorization mechanism you have provided "
                              "is not supported. Please use AWS4-HMAC-SHA256.")
            raise S3Error("InvalidArgument", "Unsupported Authorization Type",
                          extra=[("ArgumentName", "Authorization"), ("ArgumentValue", auth)])
        fields = {}
        for part in rest.split(","):
            name, eq, value = part.strip().partition("=")
            if eq:
                fields[name] = value
        for name in ("Credential", "SignedHeaders", "Signature"):
            if name not in fields:
                raise S3Error("AuthorizationHeaderMalformed",
                              "The authorization header is malformed; missing %s." % name)
        amz_date = req.headers.get("x-amz-date")
        payload = req.headers.get("x-amz-content-sha256")
        if payload is None:
            raise S3Error("InvalidRequest",
                          "Missing required header for this request: x-amz-content-sha256")
        return self._check_signature(req, fields["Credential"], amz_date,
                                     fields["SignedHeaders"], fields["Signature"],
                                     payload, req.headers.get("x-amz-security-token"),
                                     "AuthorizationHeaderMalformed", None)

    def _check_presigned(self, req):
        q = req.query
        get = lambda name: q.get(name, b"").decode("utf-8", "replace")
        if get("X-Amz-Algorithm") != "AWS4-HMAC-SHA256":
            raise S3Error("AuthorizationQueryParametersError",
                          "X-Amz-Algorithm only supports \"AWS4-HMAC-SHA256\"")
        for name in ("X-Amz-Credential", "X-Amz-Date", "X-Amz-Expires",
                     "X-Amz-SignedHeaders", "X-Amz-Signature"):
            if name not in q:
                raise S3Error("AuthorizationQueryParametersError",
                              "Query-string authentication version 4 requires the %s "
                              "parameter." % name)
        try:
            expires = int(get("X-Amz-Expires"))
        except ValueError:
            expires = -1
        if not 0 <= expires <= 604800:
            raise S3Error("AuthorizationQueryParametersError",
                          "X-Amz-Expires must be non-negative and at most 604800 seconds")
        token = q["X-Amz-Security-Token"].decode("latin-1") if "X-Amz-Security-Token" in q else None
        payload = req.headers.get("x-amz-content-sha256", UNSIGNED_PAYLOAD)
        return self._check_signature(req, get("X-Amz-Credential"), get("X-Amz-Date"),
                                     get("X-Amz-SignedHeaders"), get("X-Amz-Signature"),
                                     payload, token, "AuthorizationQueryParametersError",
                                     expires)

    def _check_signature(self, req, credential, amz_date, signed_headers, signature,
                         payload, token, malformed, expires):
        request_time = self._parse_amz_date(amz_date)
        parts = credential.split("/")
        if len(parts) != 5:
            raise S3Error(malformed, "The authorization header is malformed; the Credential "
                          "is mal-formed; expecting "
                          "\"<YOUR-AKID>/YYYYMMDD/REGION/SERVICE/aws4_request\".")
        access_key, date, region, service, terminal = parts
        if region != self.region:
            raise S3Error(malformed, "The authorization header is malformed; the region '%s' "
                          "is wrong; expecting '%s'" % (region, self.region),
                          extra=[("Region", self.region)])
        if service != "s3":
            raise S3Error(malformed, "The authorization header is malformed; incorrect service "
                          "\"%s\". This endpoint belongs to \"s3\"." % service)
        if terminal != "aws4_request":
            raise S3Error(malformed, "The authorization header is malformed; incorrect terminal "
                          "\"%s\". This endpoint uses \"aws4_request\"." % terminal)
        if date != amz_date[:8]:
            raise S3Error(malformed, "The authorization header is malformed; Invalid credential "
                          "date. Date is not the same as X-Amz-Date.")
        keys = self.keys                # one snapshot: POST keys may swap it
        if self.session_key and access_key.startswith("ASIA") and access_key not in keys:
            keys = self._session_keys(access_key, token)
        if access_key in self.expired:
            # Like STS credentials past their expiry: S3 answers 400
            # ExpiredToken before looking at the signature.
            raise S3Error("ExpiredToken")
        if access_key not in keys:
            raise S3Error("InvalidAccessKeyId", extra=[("AWSAccessKeyId", access_key)])
        signed = signed_headers.split(";")
        if "host" not in signed:
            raise S3Error(malformed, "The authorization header is malformed; 'host' must be a "
                          "signed header.")
        now = self.clock()
        if expires is None or request_time > now:
            if abs(now - request_time) > MAX_SKEW_SECONDS:
                raise S3Error("RequestTimeTooSkewed", extra=[
                    ("RequestTime", amz_date),
                    ("ServerTime", iso_seconds(now)),
                    ("MaxAllowedSkewMilliseconds", "900000")])
        if expires is not None and now > request_time + expires:
            raise S3Error("AccessDenied", "Request has expired", extra=[
                ("X-Amz-Expires", str(expires)),
                ("Expires", iso_seconds(request_time + expires)),
                ("ServerTime", iso_seconds(now))])
        unsigned = sorted(h for h in req.headers
                          if h.startswith("x-amz-") and h not in signed)
        if unsigned:
            raise S3Error("AccessDenied", "There were headers present in the request which "
                          "were not signed", extra=[("HeadersNotSigned", ", ".join(unsigned))])
        secret, expected_token = keys[access_key]
        if token != expected_token:
            raise S3Error("InvalidToken")
        canonical = self.canonical_request(req, signed_headers, payload, expires is not None)
        scope = "%s/%s/s3/aws4_request" % (date, region)
        string_to_sign = "AWS4-HMAC-SHA256\n%s\n%s\n%s" % (
            amz_date, scope, hashlib.sha256(canonical).hexdigest())
        key = self._signing_key(secret, date, region)
        expected = hmac.new(key, string_to_sign.encode(), hashlib.sha256).hexdigest()
        if not hmac.compare_digest(expected, signature.strip().lower()):
            raise S3Error("SignatureDoesNotMatch", extra=[
                ("AWSAccessKeyId", access_key),
                ("StringToSign", string_to_sign),
                ("SignatureProvided", signature),
                ("StringToSignBytes", string_to_sign.encode().hex(" ")),
                ("CanonicalRequest", canonical.decode("utf-8", "replace")),
                ("CanonicalRequestBytes", canonical.hex(" "))])
        if payload == UNSIGNED_PAYLOAD or payload.startswith("STREAMING-"):
            if payload.startswith("STREAMING-"):
                raise S3Error("NotImplemented", "aws-chunked payloads are not supported")
            return None
        if re.fullmatch(r"[0-9a-f]{64}", payload) is None:
            raise S3Error("InvalidArgument", "x-amz-content-sha256 must be UNSIGNED-PAYLOAD, "
                          "STREAMING-AWS4-HMAC-SHA256-PAYLOAD, or a valid sha256 value.",
                          extra=[("ArgumentName", "x-amz-content-sha256"),
                                 ("ArgumentValue", payload)])
        return payload

    def _session_keys(self, access_key, token):
        """A session the credential fakes issued: its secret derives from
        the key id, its token carries its expiry (tests/credfakes)."""
        secret, code = credfakes.check_session(self.session_key, access_key, token,
                                               self.clock())
        if code:
            raise S3Error(code)
        return {access_key: (secret, token)}

    def _parse_amz_date(self, amz_date):
        try:
            return calendar.timegm(time.strptime(amz_date or "", "%Y%m%dT%H%M%SZ"))
        except ValueError:
            raise S3Error("AccessDenied", "AWS authentication requires a valid Date or "
                          "x-amz-date header") from None

    def _signing_key(self, secret, date, region):
        cache_key = (secret, date, region)
        key = self._signing_keys.get(cache_key)
        if key is None:
            key = ("AWS4" + secret).encode()
            for part in (date, region, "s3", "aws4_request"):
                key = hmac.new(key, part.encode(), hashlib.sha256).digest()
            self._signing_keys[cache_key] = key
        return key

    @staticmethod
    def canonical_request(req, signed_headers, payload, presigned):
        """The SigV4 canonical request for req, as bytes."""
        uri = aws_uri_encode(unquote_to_bytes(req.raw_path), "/")
        pairs = sorted((aws_uri_encode(n, ""), aws_uri_encode(v, ""))
                       for n, v in req.query_pairs
                       if not (presigned and n == b"X-Amz-Signature"))
        query = "&".join("%s=%s" % p for p in pairs)
        headers = "".join("%s:%s\n" % (h, " ".join(req.headers.get(h, "").split()))
                          for h in signed_headers.split(";"))
        text = "%s\n%s\n%s\n%s\n%s\n%s" % (req.command, uri, query, headers,
                                           signed_headers, payload)
        return text.encode("latin-1", "replace")


# --------------------------------------------------------------------------
# Faults

FAULT_KINDS = frozenset(("status", "delay", "stall", "drip", "reset", "truncate", "bad_length",
                         "bad_range", "ignore_range", "drop", "malformed_xml", "empty_truncated",
                         "repeat_token", "error_200"))
LIST_ONLY_KINDS = frozenset(("malformed_xml", "empty_truncated", "repeat_token"))
COMPLETE_ONLY_KINDS = frozenset(("error_200",))
FAULT_FIELDS = {
    "op": str, "bucket": str, "key_prefix": str, "key_regex": str, "query_regex": str,
    "probability": (int, float),
    "count": int, "skip": int, "kind": str, "status": int, "code": str, "message": str,
    "seconds": (int, float), "after_bytes": int, "delta": int, "body": str,
}


class FaultRule:
    """One fault-injection rule (see README.md)."""

    def __init__(self, spec):
        if not isinstance(spec, dict):
            raise ValueError("a fault rule must be a JSON object")
        for name, value in spec.items():
            want = FAULT_FIELDS.get(name)
            if want is None:
                raise ValueError("unknown fault rule field %r" % name)
            if not isinstance(value, want) or isinstance(value, bool):
                raise ValueError("fault rule field %r has the wrong type" % name)
        self.spec = dict(spec)
        self.kind = spec.get("kind")
        if self.kind not in FAULT_KINDS:
            raise ValueError("fault rule kind must be one of %s" % ", ".join(sorted(FAULT_KINDS)))
        self.op = spec.get("op", "ANY").upper()
        if self.op != "ANY" and self.op not in OPS:
            raise ValueError("fault rule op must be ANY or one of %s" % ", ".join(OPS))
        self.bucket = spec.get("bucket")
        self.key_prefix = spec.get("key_prefix")
        self.key_regex = re.compile(spec["key_regex"]) if "key_regex" in spec else None
        self.query_regex = re.compile(spec["query_regex"]) if "query_regex" in spec else None
        self.probability = float(spec.get("probability", 1))
        if not 0 <= self.probability <= 1:
            raise ValueError("probability must be within [0, 1]")
        self.count = spec.get("count")
        self.skip = spec.get("skip", 0)
        self.seconds = float(spec.get("seconds", 3600 if self.kind == "stall" else 0))
        self.after_bytes = spec.get("after_bytes", 0)
        self.delta = spec.get("delta", 1)
        for name in ("count", "skip", "after_bytes"):
            if (getattr(self, name) or 0) < 0:
                raise ValueError("%s must not be negative" % name)
        if self.seconds < 0:
            raise ValueError("seconds must not be negative")
        self.status, self.code = spec.get("status"), spec.get("code")
        if self.kind == "error_200" and self.code is None:
            self.code = "InternalError"
        if self.kind == "status":
            if self.status is None:
                self.status = ERRORS.get(self.code, (500,))[0] if self.code else 503
            if not 300 <= self.status <= 599:
                raise ValueError("status must be within 300..599")
            if self.code is None:
                self.code = STATUS_DEFAULT_CODE.get(
                    self.status, "InternalError" if self.status >= 500 else "InvalidRequest")
        self.message = spec.get("message")
        self.body = spec.get("body")
        if self.body is not None and self.kind not in ("status", "error_200"):
            raise ValueError("body goes with kind status or error_200 only")
        self.matched = 0
        self.hits = 0

    def applies(self, op, bucket, key, ranged, query=""):
        if self.op != "ANY" and self.op != op:
            return False
        if self.kind in LIST_ONLY_KINDS and op != "LIST":
            return False
        if self.kind in COMPLETE_ONLY_KINDS and op != "COMPLETE":
            return False
        if self.kind in ("bad_range", "ignore_range") and not (op == "GET" and ranged):
            return False
        if self.bucket is not None and self.bucket != bucket:
            return False
        if self.key_prefix is not None and not key.startswith(self.key_prefix):
            return False
        if self.key_regex is not None and not self.key_regex.search(key):
            return False
        if self.query_regex is not None and not self.query_regex.search(query):
            return False
        return True

    def to_json(self):
        return dict(self.spec, matched=self.matched, hits=self.hits)


class FaultTable:
    """The current fault rules, a seeded RNG and the hit counters."""

    def __init__(self):
        self.lock = threading.Lock()
        self.rules = []             # /* protected by lock */
        self.seed = 0
        self.rng = random.Random(0)

    def replace(self, specs, seed=0):
        rules = [FaultRule(s) for s in specs]
        with self.lock:
            self.rules, self.seed, self.rng = rules, seed, random.Random(seed)

    def to_json(self):
        with self.lock:
            return {"seed": self.seed, "rules": [r.to_json() for r in self.rules]}

    def pick(self, op, bucket, key, ranged, query=""):
        """The rule that fires for this request, or None."""
        if not self.rules:
            return None
        with self.lock:
            for rule in self.rules:
                if rule.count is not None and rule.hits >= rule.count:
                    continue
                if not rule.applies(op, bucket, key, ranged, query):
                    continue
                rule.matched += 1
                if rule.matched <= rule.skip:
                    continue
                if rule.probability < 1 and self.rng.random() >= rule.probability:
                    continue
                rule.hits += 1
                return rule
        return None


# --------------------------------------------------------------------------
# Statistics


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.reset()

    def reset(self):
        with self.lock:
            self.requests = dict.fromkeys(STATS_OPS, 0)
            self.status = {}
            self.faults_injected = 0
            self.bytes_sent = 0

    def count_request(self, op):
        with self.lock:
            self.requests[op] = self.requests.get(op, 0) + 1

    def count_response(self, status):
        # Counted before the response's first byte goes out: a client that
        # has read a response and then asks for the statistics finds it
        # there, with no race against the handler's thread.
        with self.lock:
            key = str(status)
            self.status[key] = self.status.get(key, 0) + 1

    def count_sent(self, body_bytes):
        with self.lock:
            self.bytes_sent += body_bytes

    def count_fault(self):
        with self.lock:
            self.faults_injected += 1

    def to_json(self):
        with self.lock:
            return {"requests": dict(self.requests), "status": dict(self.status),
                    "faults_injected": self.faults_injected, "bytes_sent": self.bytes_sent}


# --------------------------------------------------------------------------
# Responses


class Response:
    """A response to send: status, headers, and an optional streamed body.

    length is the Content-Length to declare (None: no header); chunks is an
    iterable of buffers holding exactly length bytes, or None for no body
    (HEAD, 304, 204).
    """

    __slots__ = ("status", "headers", "length", "chunks")

    def __init__(self, status, headers=(), length=None, chunks=None):
        self.status = status
        self.headers = list(headers)
        self.length = length
        self.chunks = chunks


def bytes_response(status, body, content_type, headers=()):
    return Response(status, [("Content-Type", content_type), *headers], len(body), (body,))


def xml_response(body, status=200):
    return bytes_response(status, body.encode("utf-8"), "application/xml")


def json_response(obj, status=200):
    body = (json.dumps(obj, indent=1, sort_keys=True) + "\n").encode()
    return bytes_response(status, body, "application/json")


# --------------------------------------------------------------------------
# The S3 application


class S3Context:
    """Where a request goes: op, bucket, key and resource path."""

    __slots__ = ("op", "bucket", "key", "resource")

    def __init__(self, op, bucket, key, resource):
        self.op, self.bucket, self.key, self.resource = op, bucket, key, resource


class ListingParams:
    """The parameters of a ListObjects(V2) request, validated.

    start is the inclusive lower bound where the page begins, derived from
    continuation-token, start-after or marker.
    """

    def __init__(self, q):
        self.v2 = q.get("list-type") == b"2"
        encoding = q.get("encoding-type", b"").decode("utf-8", "replace")
        if encoding not in ("", "url"):
            raise S3Error("InvalidArgument", "Invalid Encoding Method specified in Request",
                          extra=[("ArgumentName", "encoding-type"), ("ArgumentValue", encoding)])
        self.url = encoding == "url"
        raw = q.get("max-keys", b"1000")
        try:
            self.max_keys = min(int(raw), MAX_KEYS)
        except ValueError:
            self.max_keys = -1
        if self.max_keys < 0:
            raise S3Error("InvalidArgument",
                          "Provided max-keys not an integer or within integer range",
                          extra=[("ArgumentName", "max-keys"),
                                 ("ArgumentValue", raw.decode("utf-8", "replace"))])
        self.prefix = q.get("prefix", b"")
        self.delimiter = q.get("delimiter", b"")
        self.token = q.get("continuation-token") if self.v2 else None
        self.start_after = q.get("start-after", b"") if self.v2 else b""
        self.marker = b"" if self.v2 else q.get("marker", b"")
        if self.token is not None:
            self.start = decode_token(self.token)
        elif self.start_after or self.marker:
            self.start = (self.start_after or self.marker) + b"\0"
            if self.marker and self.delimiter and self._marker_is_common_prefix():
                # A V1 NextMarker may be a common prefix: resume after all of it.
                self.start = prefix_successor(self.marker) or self.start
        else:
            self.start = b""

    def _marker_is_common_prefix(self):
        m, d = self.marker, self.delimiter
        return m.startswith(self.prefix) and m.find(d, len(self.prefix)) == len(m) - len(d)


class S3App:
    """Routes requests, enforces auth and faults, and implements the API."""

    def __init__(self, buckets, keys, region="us-east-1", domain="localhost",
                 verify=True, anonymous_ok=False, quiet=False, timeout=60.0):
        self.buckets = {b.name: b for b in buckets}
        self.buckets_lock = threading.Lock()
        self.region = region
        self.domain = domain.lower().rstrip(".")
        self.quiet = quiet
        self.timeout = timeout
        self.clock_offset = 0.0
        self.auth = Authenticator(keys, region, verify, anonymous_ok, self.now)
        self.faults = FaultTable()
        self.stats = Stats()
        self.stopping = threading.Event()
        self.host_id = base64.b64encode(os.urandom(48)).decode()
        self._rid_prefix = "%08X" % random.getrandbits(32)
        self._rid_counter = itertools.count(1)
        self.tls_context = None
        self._log_lock = threading.Lock()
        self.uploads = {}           # upload id -> Upload  /* protected by uploads_lock */
        self.uploads_lock = threading.Lock()

    def now(self):
        return time.time() + self.clock_offset

    def new_request_id(self):
        return "%s%08X" % (self._rid_prefix, next(self._rid_counter) & 0xFFFFFFFF)

    def log(self, line):
        with self._log_lock:
            sys.stderr.write(line + "\n")
            sys.stderr.flush()

    # Routing ------------------------------------------------------------------

    def virtual_bucket(self, req):
        """The bucket named by the Host header, or None for path-style."""
        host = req.headers.get("host", "").strip().lower()
        if host.startswith("["):
            return None
        host = host.rsplit(":", 1)[0] if ":" in host else host
        host = host.rstrip(".")
        suffix = "." + self.domain
        if host.endswith(suffix) and len(host) > len(suffix):
            return host[:-len(suffix)]
        return None

    def route(self, req):
        vbucket = self.virtual_bucket(req)
        path = req.raw_path
        if vbucket is not None:
            bucket, key = vbucket, unquote_to_bytes(path[1:]) if path.startswith("/") else b""
        else:
            first, slash, rest = path[1:].partition("/")
            bucket = unquote_to_bytes(first).decode("utf-8", "replace") or None
            key = unquote_to_bytes(rest) if slash else b""
        resource = "/" + (bucket or "")
        if key:
            resource += "/" + key_display(key)
        q = req.query
        method = req.command
        if bucket is None:
            op = "OTHER"
        elif key:
            plain = method in ("GET", "HEAD", "PUT", "DELETE")
            op = method if plain and not any(n in OBJECT_SUBRESOURCES for n in q) else "OTHER"
            if "uploadId" in q and method == "PUT" and "partNumber" in q:
                op = "UPLOADPART"
            elif "uploadId" in q and method == "POST":
                op = "COMPLETE"
        elif method == "GET" and not any(n in BUCKET_SUBRESOURCES or n == "location" for n in q):
            op = "LIST"
        else:
            op = "OTHER"
        return S3Context(op, bucket, key if key else None, resource), vbucket is not None

    # Entry point --------------------------------------------------------------

    def handle(self, req):
        ctx, virtual = self.route(req)
        if not virtual and (req.raw_path + "/").startswith(CONTROL_PREFIX):
            req.send(self.control(req), counted=False)
            return
        self.stats.count_request(ctx.op)
        fault = None
        try:
            if not req.expect_continue:
                req.read_body()
            payload_hash = self.auth.check(req)
            fault_key = ctx.key
            if ctx.op == "LIST":
                fault_key = req.query.get("prefix", b"")
            fault = self.faults.pick(ctx.op, ctx.bucket, key_str(fault_key or b""),
                                     "range" in req.headers, req.raw_query)
            if fault is not None:
                self.stats.count_fault()
                req.fault_label = fault.kind
                if fault.kind == "drop":
                    req.drop()
                    return
                if fault.kind == "delay":
                    self.stopping.wait(fault.seconds)
                elif fault.kind == "status" and fault.body is not None:
                    # What a proxy or load balancer in front of S3 sends:
                    # its own page, not S3's error XML.
                    raw = b"" if req.command == "HEAD" else fault.body.encode()
                    req.send(Response(fault.status, [("Content-Type", "text/html")],
                                      len(raw), (raw,)), fault)
                    return
                elif fault.kind == "status":
                    raise S3Error(fault.code, fault.message, fault.status)
                elif fault.kind == "error_200":
                    # AWS: Complete may fail after its 200 went out; the
                    # error is then in the body, and nothing completed.
                    if fault.body is not None:
                        resp = xml_response(fault.body)
                    else:
                        resp = self.error_response(S3Error(fault.code, fault.message), ctx, req)
                        resp.status = 200
                    req.send(resp, fault)
                    return
            body = req.read_body()
            if payload_hash is not None and hashlib.sha256(body).hexdigest() != payload_hash:
                raise S3Error("XAmzContentSHA256Mismatch", extra=[
                    ("ClientComputedContentSHA256", payload_hash),
                    ("S3ComputedContentSHA256", hashlib.sha256(body).hexdigest())])
            resp = self.dispatch(req, ctx, fault)
        except S3Error as err:
            resp = self.error_response(err, ctx, req)
        except Exception:  # a bug: answer like S3 would, and show it
            self.log("internal error handling %s %s:\n%s" % (
                req.command, req.raw_path, traceback.format_exc()))
            resp = self.error_response(S3Error("InternalError"), ctx, req)
        req.send(resp, fault)

    def error_response(self, err, ctx, req):
        if req.command == "HEAD":
            return Response(err.status, err.headers)
        parts = ['<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>', xml_escape(err.code),
                 "</Code><Message>", xml_escape(err.message), "</Message>"]
        for name, text in err.extra:
            parts.append("<%s>%s</%s>" % (name, xml_escape(text), name))
        parts.append("<Resource>%s</Resource><RequestId>%s</RequestId><HostId>%s</HostId></Error>"
                     % (xml_escape(ctx.resource), req.request_id, self.host_id))
        resp = xml_response("".join(parts), err.status)
        resp.headers.extend(err.headers)
        return resp

    def bucket_or_raise(self, name):
        bucket = self.buckets.get(name)
        if bucket is None:
            raise S3Error("NoSuchBucket", extra=[("BucketName", name)])
        return bucket

    def dispatch(self, req, ctx, fault):
        method = req.command
        if ctx.bucket is None:
            if method == "GET":
                return self.list_buckets()
            raise S3Error("MethodNotAllowed")
        if ctx.key is None:
            if method == "PUT" and not req.query:
                return self.create_bucket(ctx.bucket)
            bucket = self.bucket_or_raise(ctx.bucket)
            if ctx.op == "LIST":
                return self.list_objects(req, bucket, fault)
            if method == "HEAD" and not req.query:
                return Response(200, [("x-amz-bucket-region", self.region)], 0)
            if method == "GET" and "uploads" in req.query:
                return self.list_uploads(req, bucket)
            if method == "GET" and "location" in req.query:
                region = "" if self.region == "us-east-1" else xml_escape(self.region)
                return xml_response('<?xml version="1.0" encoding="UTF-8"?>\n'
                                    '<LocationConstraint xmlns="%s">%s</LocationConstraint>'
                                    % (S3_NS, region))
            raise S3Error("NotImplemented")
        bucket = self.bucket_or_raise(ctx.bucket)
        if "uploads" in req.query or "uploadId" in req.query:
            return self.multipart(req, bucket, ctx.key)
        if ctx.op in ("GET", "HEAD"):
            return self.get_object(req, bucket, ctx.key, fault)
        if ctx.op == "PUT":
            if "x-amz-copy-source" in req.headers:
                raise S3Error("NotImplemented", "CopyObject is not implemented")
            return self.put_object(req, bucket, ctx.key)
        if ctx.op == "DELETE":
            bucket.delete(ctx.key)
            return Response(204)
        raise S3Error("NotImplemented")

    # Buckets ------------------------------------------------------------------

    def list_buckets(self):
        parts = ['<?xml version="1.0" encoding="UTF-8"?>\n<ListAllMyBucketsResult xmlns="%s">'
                 "<Owner><ID>bucketfs</ID><DisplayName>bucketfs</DisplayName></Owner><Buckets>"
                 % S3_NS]
        for name in sorted(self.buckets):
            parts.append("<Bucket><Name>%s</Name><CreationDate>%s</CreationDate></Bucket>"
                         % (xml_escape(name), iso8601(self.buckets[name].created)))
        parts.append("</Buckets></ListAllMyBucketsResult>")
        return xml_response("".join(parts))

    def create_bucket(self, name):
        if not BUCKET_NAME_RE.match(name):
            raise S3Error("InvalidBucketName", extra=[("BucketName", name)])
        with self.buckets_lock:
            if name not in self.buckets:
                self.buckets[name] = Bucket(name)
        return Response(200, [("Location", "/" + name)], 0)

    # Listing ------------------------------------------------------------------

    def list_objects(self, req, bucket, fault):
        """ListObjectsV2 (list-type=2) or ListObjects (V1)."""
        p = ListingParams(req.query)
        kind = fault.kind if fault is not None else None
        if p.max_keys == 0 or kind == "empty_truncated":
            entries, truncated, next_start = [], kind == "empty_truncated", max(p.start, p.prefix)
        else:
            entries, truncated, next_start = bucket.list_page(p.prefix, p.start, p.delimiter,
                                                              p.max_keys)
        next_token = encode_token(next_start, kind == "empty_truncated") \
            if truncated else None
        if kind == "repeat_token":
            truncated = True
            next_token = p.token.decode("ascii", "replace") if p.token is not None \
                else encode_token(next_start)
        if p.v2:
            head = self._listing_head_v2(bucket, p, len(entries), truncated, next_token)
        else:
            next_marker = None
            if truncated and p.delimiter:
                keep = kind in ("empty_truncated", "repeat_token") or not entries
                next_marker = p.marker if keep else entries[-1][0]
            head = self._listing_head_v1(bucket, p, truncated, next_marker)
        out = [head]
        prefixes = []
        for key, meta in entries:
            if meta is _CP:
                prefixes.append("<CommonPrefixes><Prefix>%s</Prefix></CommonPrefixes>"
                                % key_text(key, p.url))
                continue
            mtime, etag, size = meta
            out.append("<Contents><Key>%s</Key><LastModified>%s</LastModified>"
                       "<ETag>&quot;%s&quot;</ETag><Size>%d</Size>"
                       "<StorageClass>STANDARD</StorageClass></Contents>"
                       % (key_text(key, p.url), iso8601(mtime), etag, size))
        out.extend(prefixes)
        out.append("</ListBucketResult>")
        body = "".join(out).encode("utf-8")
        if kind == "malformed_xml":
            body = body[:len(body) // 2]
        return bytes_response(200, body, "application/xml")

    @staticmethod
    def _listing_head_v2(bucket, p, count, truncated, next_token):
        out = ['<?xml version="1.0" encoding="UTF-8"?>\n<ListBucketResult xmlns="%s">' % S3_NS,
               "<Name>%s</Name><Prefix>%s</Prefix>"
               % (xml_escape(bucket.name), key_text(p.prefix, p.url))]
        if p.delimiter:
            out.append("<Delimiter>%s</Delimiter>" % key_text(p.delimiter, p.url))
        out.append("<MaxKeys>%d</MaxKeys>" % p.max_keys)
        if p.url:
            out.append("<EncodingType>url</EncodingType>")
        out.append("<KeyCount>%d</KeyCount><IsTruncated>%s</IsTruncated>"
                   % (count, "true" if truncated else "false"))
        if p.token is not None:
            out.append("<ContinuationToken>%s</ContinuationToken>"
                       % xml_escape(p.token.decode("utf-8", "replace")))
        if next_token is not None:
            out.append("<NextContinuationToken>%s</NextContinuationToken>" % next_token)
        if p.start_after:
            out.append("<StartAfter>%s</StartAfter>" % key_text(p.start_after, p.url))
        return "".join(out)

    @staticmethod
    def _listing_head_v1(bucket, p, truncated, next_marker):
        out = ['<?xml version="1.0" encoding="UTF-8"?>\n<ListBucketResult xmlns="%s">' % S3_NS,
               "<Name>%s</Name><Prefix>%s</Prefix><Marker>%s</Marker>"
               % (xml_escape(bucket.name), key_text(p.prefix, p.url),
                  key_text(p.marker, p.url))]
        if next_marker is not None:
            out.append("<NextMarker>%s</NextMarker>" % key_text(next_marker, p.url))
        out.append("<MaxKeys>%d</MaxKeys>" % p.max_keys)
        if p.delimiter:
            out.append("<Delimiter>%s</Delimiter>" % key_text(p.delimiter, p.url))
        out.append("<IsTruncated>%s</IsTruncated>" % ("true" if truncated else "false"))
        if p.url:
            out.append("<EncodingType>url</EncodingType>")
        return "".join(out)

    # Objects ------------------------------------------------------------------

    def get_object(self, req, bucket, key, fault):
        obj = bucket.lookup(key)
        if obj is None:
            raise S3Error("NoSuchKey", extra=[("Key", key_display(key))])
        etag = obj.etag()
        headers = [("ETag", '"%s"' % etag), ("Last-Modified", http_date(obj.mtime))]
        not_modified = self.check_conditions(req, etag, obj.mtime)
        if not_modified:
            return Response(304, headers)
        headers.append(("Accept-Ranges", "bytes"))
        headers.append(("Content-Type", obj.content_type))
        headers.extend(obj.meta)
        for param, header in RESPONSE_OVERRIDES.items():
            if param in req.query:
                headers = [h for h in headers if h[0] != header]
                headers.append((header, req.query[param].decode("latin-1")))
        size = obj.size
        rng = parse_range(req.headers.get("range"), size)
        if fault is not None and fault.kind == "ignore_range":
            rng = None  # RFC 9110 allows it: 200 with the whole object
        status = 200
        start, end = 0, size
        if rng is not None:
            start, end = rng[0], rng[1] + 1
            if fault is not None and fault.kind == "bad_range":
                shift = max(-start, min(fault.delta, size - end))
                start, end = start + shift, end + shift
            status = 206
            headers.append(("Content-Range", "bytes %d-%d/%d" % (start, end - 1, size)))
        chunks = None if req.command == "HEAD" else obj.chunks(start, end)
        return Response(status, headers, end - start, chunks)

    def check_conditions(self, req, etag, mtime):
        """Raise PreconditionFailed, or return True for 304 Not Modified."""
        h = req.headers
        if "if-match" in h:
            if not etag_matches(h["if-match"], etag):
                raise S3Error("PreconditionFailed", extra=[("Condition", "If-Match")])
        elif "if-unmodified-since" in h:
            since = parse_http_date(h["if-unmodified-since"])
            if since is not None and int(mtime) > since:
                raise S3Error("PreconditionFailed", extra=[("Condition", "If-Unmodified-Since")])
        if "if-none-match" in h:
            return etag_matches(h["if-none-match"], etag)
        if "if-modified-since" in h:
            since = parse_http_date(h["if-modified-since"])
            return since is not None and int(mtime) <= since
        return False

    def put_object(self, req, bucket, key):
        body = req.body
        if "content-length" not in req.headers and not req.chunked:
            raise S3Error("MissingContentLength")
        md5 = hashlib.md5(body)
        if "content-md5" in req.headers:
            try:
                want = base64.b64decode(req.headers["content-md5"], validate=True)
            except (binascii.Error, ValueError):
                want = b""
            if len(want) != 16:
                raise S3Error("InvalidDigest")
            if want != md5.digest():
                raise S3Error("BadDigest")
        if "if-match" in req.headers or "if-none-match" in req.headers:
            self.check_put_conditions(req, bucket, key)
        meta = [(name, value) for name, value in req.headers.items()
                if name.startswith("x-amz-meta-")]
        content_type = req.headers.get("content-type", "binary/octet-stream")
        obj = MemObject(key, body, self.now(), content_type, meta)
        bucket.put(obj)
        return Response(200, [("ETag", '"%s"' % obj.etag())], 0)

    @staticmethod
    def check_put_conditions(req, bucket, key):
        """Conditional writes: If-None-Match: * and If-Match, as S3 has them."""
        current = bucket.lookup(key)
        if req.headers.get("if-none-match", "").strip() == "*" and current is not None:
            raise S3Error("PreconditionFailed", extra=[("Condition", "If-None-Match")])
        if "if-match" in req.headers:
            if current is None:
                raise S3Error("NoSuchKey", extra=[("Key", key_display(key))])
            if not etag_matches(req.headers["if-match"], current.etag()):
                raise S3Error("PreconditionFailed", extra=[("Condition", "If-Match")])

    # Multipart upload ----------------------------------------------------------
    # Create, UploadPart, Complete, Abort and ListMultipartUploads, as S3 has
    # them: parts 1..10000, every part but the last at least 5 MiB, the
    # object visible only once completed, ETag md5-of-part-md5s "-N".

    def multipart(self, req, bucket, key):
        q, method = req.query, req.command
        if method == "POST" and "uploads" in q:
            upload = Upload(bucket.name, key, self.now(),
                            req.headers.get("content-type", "binary/octet-stream"))
            with self.uploads_lock:
                self.uploads[upload.id] = upload
            return xml_response(
                '<?xml version="1.0" encoding="UTF-8"?>\n<InitiateMultipartUploadResult '
                'xmlns="%s"><Bucket>%s</Bucket><Key>%s</Key><UploadId>%s</UploadId>'
                '</InitiateMultipartUploadResult>'
                % (S3_NS, xml_escape(bucket.name), xml_escape(key_display(key)), upload.id))
        upload_id = q.get("uploadId", b"").decode("utf-8", "replace")
        with self.uploads_lock:
            upload = self.uploads.get(upload_id)
        if upload is None or upload.bucket != bucket.name or upload.key != key:
            raise S3Error("NoSuchUpload", extra=[("UploadId", upload_id)])
        if method == "PUT" and "partNumber" in q:
            try:
                number = int(q["partNumber"])
            except ValueError:
                number = 0
            if not 1 <= number <= 10000:
                raise S3Error("InvalidArgument",
                              "Part number must be an integer between 1 and 10000")
            etag = hashlib.md5(req.body).hexdigest()
            with self.uploads_lock:
                upload.parts[number] = (bytes(req.body), etag)
            return Response(200, [("ETag", '"%s"' % etag)], 0)
        if method == "DELETE":
            with self.uploads_lock:
                self.uploads.pop(upload_id, None)
            return Response(204)
        if method == "POST":
            return self.complete_upload(req, bucket, upload)
        raise S3Error("NotImplemented")

    def complete_upload(self, req, bucket, upload):
        try:
            root = ET.fromstring(req.body)
        except ET.ParseError:
            raise S3Error("MalformedXML") from None
        wanted = []
        for part in root.iter():
            if part.tag.rpartition("}")[2] != "Part":
                continue
            fields = {c.tag.rpartition("}")[2]: (c.text or "").strip() for c in part}
            try:
                wanted.append((int(fields.get("PartNumber", "")),
                               fields.get("ETag", "").strip('"')))
            except ValueError:
                raise S3Error("MalformedXML") from None
        if not wanted:
            raise S3Error("MalformedXML")
        numbers = [n for n, _ in wanted]
        if numbers != sorted(set(numbers)):
            raise S3Error("InvalidPartOrder")
        with self.uploads_lock:
            parts = dict(upload.parts)
        chunks, md5s = [], b""
        for i, (number, etag) in enumerate(wanted):
            have = parts.get(number)
            if have is None or have[1] != etag:
                raise S3Error("InvalidPart", extra=[("PartNumber", str(number))])
            if i < len(wanted) - 1 and len(have[0]) < MIN_PART:
                raise S3Error("EntityTooSmall", extra=[("PartNumber", str(number))])
            chunks.append(have[0])
            md5s += bytes.fromhex(etag)
        etag = "%s-%d" % (hashlib.md5(md5s).hexdigest(), len(wanted))
        obj = MultipartObject(upload.key, b"".join(chunks), self.now(),
                              upload.content_type, (), etag)
        with self.uploads_lock:
            if self.uploads.pop(upload.id, None) is None:
                raise S3Error("NoSuchUpload", extra=[("UploadId", upload.id)])
            bucket.put(obj)
        return xml_response(
            '<?xml version="1.0" encoding="UTF-8"?>\n<CompleteMultipartUploadResult '
            'xmlns="%s"><Bucket>%s</Bucket><Key>%s</Key><ETag>&quot;%s&quot;</ETag>'
            '</CompleteMultipartUploadResult>'
            % (S3_NS, xml_escape(bucket.name), xml_escape(key_display(upload.key)), etag))

    def list_uploads(self, req, bucket):
        prefix = req.query.get("prefix", b"")
        with self.uploads_lock:
            mine = sorted((u for u in self.uploads.values()
                           if u.bucket == bucket.name and u.key.startswith(prefix)),
                          key=lambda u: (u.key, u.initiated, u.id))
        parts = ['<?xml version="1.0" encoding="UTF-8"?>\n<ListMultipartUploadsResult '
                 'xmlns="%s"><Bucket>%s</Bucket><Prefix>%s</Prefix>'
                 '<IsTruncated>false</IsTruncated>'
                 % (S3_NS, xml_escape(bucket.name), xml_escape(key_display(prefix)))]
        for u in mine:
            parts.append("<Upload><Key>%s</Key><UploadId>%s</UploadId>"
                         "<Initiated>%s</Initiated></Upload>"
                         % (xml_escape(key_display(u.key)), u.id, iso8601(u.initiated)))
        parts.append("</ListMultipartUploadsResult>")
        return xml_response("".join(parts))

    # Control API ---------------------------------------------------------------

    def control(self, req):
        route = req.raw_path[len(CONTROL_PREFIX):].rstrip("/")
        method = req.command
        try:
            body = req.read_body()
            data = json.loads(body) if body.strip() else None
            if route == "" and method == "GET":
                return json_response({
                    "endpoints": ["GET stats", "POST stats/reset", "GET faults",
                                  "POST faults[?seed=N]", "DELETE faults", "POST mutate",
                                  "POST rescan", "GET clock", "POST clock", "GET buckets",
                                  "GET keys", "POST keys"]})
            if route == "stats" and method == "GET":
                return json_response(self.stats.to_json())
            if route == "stats/reset" and method == "POST":
                self.stats.reset()
                return json_response(self.stats.to_json())
            if route == "faults":
                return self.control_faults(req, method, data)
            if route == "mutate" and method == "POST":
                return self.control_mutate(data)
            if route == "rescan" and method == "POST":
                name = (data or {}).get("bucket")
                counts = {b.name: b.rescan() for b in list(self.buckets.values())
                          if isinstance(b, DirBucket) and name in (None, b.name)}
                return json_response({"rescanned": counts})
            if route == "clock" and method in ("GET", "POST"):
                if method == "POST":
                    self.clock_offset = float((data or {}).get("offset_seconds", 0))
                return json_response({"offset_seconds": self.clock_offset, "now": self.now()})
            if route == "keys" and method in ("GET", "POST"):
                return self.control_keys(method, data)
            if route == "buckets" and method == "GET":
                return json_response([b.describe() for b in list(self.buckets.values())])
            return json_response({"error": "no such control endpoint: %s %s"
                                  % (method, req.raw_path)}, 404)
        except (ValueError, TypeError, AttributeError, re.error) as exc:
            return json_response({"error": str(exc)}, 400)
        except S3Error as exc:
            return json_response({"error": exc.message}, exc.status)

    def control_keys(self, method, data):
        """Replace the accepted credentials and/or the expired access keys.

        Body: {"keys": {AK: [SK, TOKEN or null]}, "expired": [AK, ...]};
        either may be left out to keep it.  The answer names the access
        key ids only."""
        auth = self.auth
        if method == "POST":
            if not isinstance(data, dict) or set(data) - {"keys", "expired"}:
                raise ValueError('expected {"keys": {AK: [SK, TOKEN]}, "expired": [AK]}')
            keys = data.get("keys")
            if keys is not None:
                parsed = {}
                for ak, value in keys.items():
                    if (not ak or not isinstance(value, list) or len(value) != 2
                            or not isinstance(value[0], str) or not value[0]
                            or not isinstance(value[1], (str, type(None)))):
                        raise ValueError("keys: expected AK: [SK, TOKEN or null]")
                    parsed[ak] = (value[0], value[1])
                if not parsed:
                    raise ValueError("keys: at least one key")
                auth.keys = parsed
            expired = data.get("expired")
            if expired is not None:
                if not isinstance(expired, list) or not all(isinstance(x, str) for x in expired):
                    raise ValueError("expired: expected a list of access key ids")
                auth.expired = frozenset(expired)
        return json_response({"keys": sorted(auth.keys), "expired": sorted(auth.expired)})

    def control_faults(self, req, method, data):
        if method == "GET":
            return json_response(self.faults.to_json())
        if method == "DELETE":
            self.faults.replace([])
            return json_response(self.faults.to_json())
        if method != "POST":
            raise ValueError("faults takes GET, POST or DELETE")
        seed = data.get("seed", 0) if isinstance(data, dict) else 0
        if "seed" in req.query:
            seed = int(req.query["seed"])
        rules = data.get("rules", []) if isinstance(data, dict) else data
        if not isinstance(rules, list):
            raise ValueError("POST /_bucketfs/faults takes a JSON list of rules")
        self.faults.replace(rules, int(seed))
        return json_response(self.faults.to_json())

    def control_mutate(self, data):
        if not isinstance(data, dict) or "bucket" not in data or "key" not in data:
            raise ValueError('mutate takes {"bucket": B, "key": K}')
        bucket = self.buckets.get(data["bucket"])
        key = data["key"].encode("utf-8", "surrogateescape")
        if bucket is None or not bucket.mutate(key):
            return json_response({"error": "no such object"}, 404)
        obj = bucket.lookup(key)
        return json_response({"bucket": bucket.name, "key": data["key"], "etag": obj.etag()})


def etag_matches(header, etag):
    for candidate in header.split(","):
        candidate = candidate.strip()
        if candidate.startswith("W/"):
            candidate = candidate[2:]
        if candidate == "*" or candidate.strip('"') == etag:
            return True
    return False


def parse_range(value, size):
    """Parse a Range header: None (serve all), or (first, last) inclusive.

    Raises InvalidRange when unsatisfiable.  Like S3, multiple ranges and
    malformed specs are ignored.
    """
    if not value:
        return None
    unit, eq, spec = value.strip().partition("=")
    if not eq or unit.strip().lower() != "bytes" or "," in spec:
        return None
    first, dash, last = (s.strip() for s in spec.partition("-"))
    if not dash:
        return None

    def unsatisfiable():
        return S3Error("InvalidRange", extra=[("RangeRequested", value.strip()),
                                              ("ActualObjectSize", str(size))],
                       headers=[("Content-Range", "bytes */%d" % size)])

    if not first:
        if not last.isdigit():
            return None
        n = int(last)
        if n == 0 or size == 0:
            raise unsatisfiable()
        return max(0, size - n), size - 1
    if not first.isdigit() or (last and not last.isdigit()):
        return None
    a = int(first)
    b = int(last) if last else size - 1
    if last and b < a:
        return None
    if a >= size:
        raise unsatisfiable()
    return a, min(b, size - 1)


# --------------------------------------------------------------------------
# HTTP


def _sendmsg_all(sock, buffers):
    bufs = [memoryview(b).cast("B") for b in buffers if len(b)]
    while bufs:
        sent = sock.sendmsg(bufs[:512])
        while sent:
            n = len(bufs[0])
            if sent >= n:
                sent -= n
                bufs.pop(0)
            else:
                bufs[0] = bufs[0][sent:]
                sent = 0


def _limit_chunks(chunks, limit):
    if limit <= 0:
        return
    for chunk in chunks:
        if len(chunk) >= limit:
            yield chunk[:limit]
            return
        limit -= len(chunk)
        yield chunk


class S3Handler(BaseHTTPRequestHandler):
    """One client connection: parses requests and writes responses.

    Request attributes (valid while a request is handled): command,
    raw_path, raw_query, query (name str -> first value bytes), query_pairs
    [(name bytes, value bytes)], headers (lower-case name -> str, repeated
    headers joined with ','), body (bytes once read), request_id.
    """

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def setup(self):
        app = self.server.app
        self.timeout = app.timeout
        self.plain = app.tls_context is None
        if not self.plain:
            self.request.settimeout(app.timeout)
            self.request = app.tls_context.wrap_socket(self.request, server_side=True)
        super().setup()

    def finish(self):
        super().finish()
        if not self.plain:      # socketserver only closes the unwrapped socket
            try:
                self.connection.close()
            except OSError:
                pass

    def log_message(self, format, *args):   # noqa: A002 (BaseHTTPRequestHandler API)
        if not self.server.app.quiet:
            self.server.app.log("%s %s" % (self.client_address[0], format % args))

    # Request parsing ------------------------------------------------------------

    def handle_one_request(self):
        try:
            if not self._read_head():
                self.close_connection = True
                return
            self.server.app.handle(self)
        except OSError:     # the client went away, timed out or broke TLS
            self.close_connection = True

    def _read_head(self):
        """Read and parse one request line and its headers; False to close."""
        self.started = time.monotonic()
        self.body = None
        self.sent_continue = False
        self.fault_label = None
        self.responded = False
        self.headers = {}
        self.chunked = self.expect_continue = False
        line = self.rfile.readline(65537)
        while line in (b"\r\n", b"\n"):
            line = self.rfile.readline(65537)
        if not line:
            return False
        self.raw_requestline = line
        self.requestline = line.decode("latin-1").rstrip("\r\n")
        self.request_id = self.server.app.new_request_id()
        self.command, self.raw_path, self.request_version = "", "/", "HTTP/1.1"
        parts = self.requestline.split()
        if len(line) > 65536 or len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            self._bare_error(400, "Bad request line")
            return False
        self.command, target, self.request_version = parts
        if not self._read_headers():
            return False
        self._parse_target(target)
        conn = self.headers.get("connection", "").lower()
        self.close_connection = ("close" in conn if self.request_version == "HTTP/1.1"
                                 else "keep-alive" not in conn)
        self.expect_continue = (self.headers.get("expect", "").lower() == "100-continue"
                                and self.request_version == "HTTP/1.1")
        self.chunked = "chunked" in self.headers.get("transfer-encoding", "").lower()
        return True

    def _read_headers(self):
        last = None
        for _ in range(201):
            line = self.rfile.readline(65537)
            if line in (b"\r\n", b"\n", b""):
                return True
            if len(line) > 65536:
                self._bare_error(431, "Header line too long")
                return False
            text = line.decode("latin-1").rstrip("\r\n")
            if text[:1] in (" ", "\t") and last is not None:    # obsolete line folding
                self.headers[last] += " " + text.strip()
                continue
            name, colon, value = text.partition(":")
            if not colon:
                self._bare_error(400, "Bad header line")
                return False
            last, value = name.strip().lower(), value.strip()
            old = self.headers.get(last)
            self.headers[last] = value if old is None else old + "," + value
        self._bare_error(431, "Too many headers")
        return False

    def _parse_target(self, target):
        if target.startswith(("http://", "https://")):      # absolute-form
            slash = target.find("/", target.find("//") + 2)
            target = target[slash:] if slash >= 0 else "/"
        path, _, self.raw_query = target.partition("?")
        self.raw_path = path or "/"
        self.query_pairs = []
        self.query = {}
        for item in self.raw_query.split("&") if self.raw_query else ():
            if item:
                name, _, value = item.partition("=")
                pair = (unquote_to_bytes(name), unquote_to_bytes(value))
                self.query_pairs.append(pair)
                self.query.setdefault(pair[0].decode("utf-8", "replace"), pair[1])

    def _bare_error(self, status, reason):
        body = ("%d %s\n" % (status, reason)).encode()
        self.close_connection = True
        self.body = b""                 # do not try to read a broken request's body
        self.send(Response(status, [("Content-Type", "text/plain")], len(body), (body,)),
                  counted=False)

    @property
    def body_pending(self):
        if self.body is not None:
            return False
        return self.chunked or self.headers.get("content-length", "0").strip() not in ("", "0")

    def read_body(self):
        """Read (once) and return the request body; raises S3Error."""
        if self.body is not None:
            return self.body
        if not self.body_pending:
            self.body = b""
            return self.body
        if self.expect_continue and not self.sent_continue:
            self.sent_continue = True
            self.connection.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
        try:
            self.body = self._read_chunked() if self.chunked else self._read_exact()
        except TimeoutError:
            self.close_connection = True
            self.body = b""
            raise S3Error("RequestTimeout") from None
        return self.body

    def _read_exact(self):
        try:
            n = int(self.headers["content-length"])
        except ValueError:
            n = -1
        if n < 0:
            self.close_connection = True
            self.body = b""
            raise S3Error("InvalidArgument", "Invalid Content-Length")
        data = self.rfile.read(n)
        if len(data) != n:
            self.close_connection = True
            self.body = b""
            raise S3Error("IncompleteBody")
        return data

    def _read_chunked(self):
        parts = []
        while True:
            line = self.rfile.readline(65537)
            try:
                size = int(line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                self.close_connection = True
                self.body = b""
                raise S3Error("IncompleteBody", "Malformed chunked encoding") from None
            if size == 0:
                while self.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                    pass
                return b"".join(parts)
            parts.append(self.rfile.read(size))
            self.rfile.readline(65537)

    # Response writing -------------------------------------------------------------

    def drop(self):
        """Close the connection without a response."""
        self._finish_body()
        self.close_connection = True
        self.responded = True
        self._log(0, 0)

    def _finish_body(self):
        # Reading the unread body keeps the connection usable and avoids an
        # RST from closing with unread data; if the client is waiting for
        # 100-continue it will not send the body, so close instead.
        if self.body_pending:
            if self.expect_continue and not self.sent_continue:
                self.close_connection = True
            else:
                try:
                    self.read_body()
                except S3Error:
                    self.close_connection = True

    def send(self, resp, fault=None, counted=True):
        """Write resp, applying a body-level fault (stall, reset, truncate,
        bad_length) if one fired.  counted: include it in the statistics."""
        if self.responded:
            return
        self.responded = True
        self._finish_body()
        app = self.server.app
        kind = fault.kind if fault is not None else None
        length = resp.length
        if kind == "bad_length" and length is not None:
            length = max(0, length + fault.delta)
        head = self._response_head(resp, length)
        body_len = resp.length if resp.chunks is not None else 0
        limit, pad = body_len, 0
        rest = b""
        if kind == "drip" and resp.chunks is not None:
            body = b"".join(resp.chunks)
            resp.chunks = [body]
            rest = body[fault.after_bytes:]
        if kind in ("stall", "drip", "reset", "truncate"):
            # The headers look normal: the failure shows only in the body.
            self.close_connection = True
            limit = min(fault.after_bytes, body_len)
        elif kind == "bad_length" and resp.chunks is not None:
            limit, pad = min(length, body_len), max(0, length - body_len)
        sent = 0
        if counted:
            app.stats.count_response(resp.status)
        try:
            batch, batch_len = [head], len(head)
            for chunk in _limit_chunks(resp.chunks or (), limit):
                batch.append(chunk)
                batch_len += len(chunk)
                sent += len(chunk)
                if batch_len >= SEND_BATCH:
                    self._write(batch)
                    batch, batch_len = [], 0
            if pad:
                batch.append(bytes(pad))
                sent += pad
            self._write(batch)
        finally:
            close = getattr(resp.chunks, "close", None)
            if close is not None:
                close()
            if counted:
                app.stats.count_sent(sent)
            self._log(resp.status, sent)
        if kind == "stall":
            app.stopping.wait(fault.seconds)
        elif kind == "drip":
            self._drip(rest, fault.seconds)
        elif kind == "reset":
            self._abort()

    def _drip(self, rest, seconds):
        """The rest of a body, one byte every seconds, until the client
        goes or the server stops."""
        for i in range(len(rest)):
            if self.server.app.stopping.wait(seconds):
                return
            try:
                self._write([rest[i:i + 1]])
            except OSError:
                return

    def _response_head(self, resp, length):
        try:
            reason = http.HTTPStatus(resp.status).phrase
        except ValueError:
            reason = "Status"
        app = self.server.app
        lines = ["HTTP/1.1 %d %s\r\n" % (resp.status, reason)]
        lines.extend("%s: %s\r\n" % h for h in resp.headers)
        if length is not None:
            lines.append("Content-Length: %d\r\n" % length)
        lines.append("x-amz-request-id: %s\r\nx-amz-id-2: %s\r\nDate: %s\r\nServer: AmazonS3\r\n"
                     % (self.request_id, app.host_id, http_date(app.now())))
        if self.close_connection:
            lines.append("Connection: close\r\n")
        elif self.request_version == "HTTP/1.0":
            lines.append("Connection: keep-alive\r\n")
        lines.append("\r\n")
        return "".join(lines).encode("latin-1", "replace")

    def _write(self, buffers):
        if self.plain:
            _sendmsg_all(self.connection, buffers)
        else:
            self.connection.sendall(b"".join(buffers))

    def _abort(self):
        """Abortive close: SO_LINGER 0 makes close() send an RST."""
        self.close_connection = True
        try:
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                       struct.pack("ii", 1, 0))
            self.rfile.close()
            self.connection.close()
        except OSError:
            pass

    def _log(self, status, sent):
        app = self.server.app
        if app.quiet:
            return
        extra = " fault=%s" % self.fault_label if self.fault_label else ""
        app.log('%s "%s" %d %d %.1fms%s' % (self.client_address[0], self.requestline, status,
                                             sent, (time.monotonic() - self.started) * 1000, extra))


class S3Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False      # never wait for connection threads at exit
    request_queue_size = 1024

    def __init__(self, address, app, backlog=1024):
        self.app = app
        self.request_queue_size = backlog
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, S3Handler)

    def server_bind(self):
        # HTTPServer.server_bind calls getfqdn(), which can block on DNS.
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = self.server_address[:2]

    def handle_error(self, request, client_address):
        if isinstance(sys.exc_info()[1], OSError):    # clients vanishing, TLS failures
            return
        super().handle_error(request, client_address)


# --------------------------------------------------------------------------
# Command line


def parse_bucket(spec):
    name, eq, path = spec.partition("=")
    if not eq or not BUCKET_NAME_RE.match(name):
        raise argparse.ArgumentTypeError("expected NAME=DIR with a valid bucket name: %r" % spec)
    try:
        return DirBucket(name, path)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def parse_synthetic(spec):
    parts = spec.split(":", 3)
    try:
        name, n = parts[0], int(parts[1])
        size = int(parts[2]) if len(parts) > 2 and parts[2] != "" else SYNTHETIC_SIZE
        prefix = parts[3] if len(parts) > 3 else SYNTHETIC_PREFIX
    except (IndexError, ValueError):
        raise argparse.ArgumentTypeError("expected NAME:N[:SIZE[:PREFIX]]: %r" % spec) from None
    if not BUCKET_NAME_RE.match(name) or n < 0 or size < 0:
        raise argparse.ArgumentTypeError("bad synthetic bucket: %r" % spec)
    return SyntheticBucket(name, n, size, prefix)


def parse_access_key(spec):
    parts = spec.split(":", 2)
    if len(parts) < 2 or not parts[0] or not parts[1]:
        raise argparse.ArgumentTypeError("expected AK:SK[:TOKEN]")
    return parts[0], (parts[1], parts[2] if len(parts) > 2 else None)


def build_parser():
    p = argparse.ArgumentParser(
        description="bucketfs test S3 server (standard library only).",
        epilog="Control API: GET /_bucketfs/ lists the endpoints; see README.md.")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=0, help="port to bind (default 0: ephemeral)")
    p.add_argument("--port-file", help="write the bound port here (atomically)")
    p.add_argument("--bucket", action="append", type=parse_bucket, default=[],
                   metavar="NAME=DIR", help="a bucket holding the regular files under DIR")
    p.add_argument("--synthetic", action="append", type=parse_synthetic, default=[],
                   metavar="NAME:N[:SIZE[:PREFIX]]",
                   help="a synthetic bucket of N keys PREFIXimg_<i>_of_<N>.jpeg "
                        "(SIZE default %d, PREFIX default %s)" % (SYNTHETIC_SIZE, SYNTHETIC_PREFIX))
    p.add_argument("--access-key", action="append", type=parse_access_key, default=[],
                   metavar="AK:SK[:TOKEN]",
                   help="accepted credentials (default %s:%s); with TOKEN, requests must carry "
                        "x-amz-security-token" % (DEFAULT_ACCESS_KEY, DEFAULT_SECRET_KEY))
    p.add_argument("--anonymous-ok", action="store_true",
                   help="accept requests without an Authorization header")
    p.add_argument("--no-verify", action="store_true", help="skip all authentication")
    p.add_argument("--session-key", metavar="KEY",
                   help="also accept the session credentials tests/credfakes issues with "
                        "this key, and answer ExpiredToken once they expire")
    p.add_argument("--region", default="us-east-1", help="region expected in credential scopes")
    p.add_argument("--domain", default="localhost",
                   help="virtual-hosted style domain: Host: BUCKET.DOMAIN (default localhost)")
    p.add_argument("--tls-cert", metavar="PEM", help="serve HTTPS with this certificate chain")
    p.add_argument("--tls-key", metavar="PEM", help="private key for --tls-cert")
    p.add_argument("--timeout", type=float, default=60.0,
                   help="socket timeout in seconds for idle keep-alive, body reads and writes")
    p.add_argument("--backlog", type=int, default=1024, help="listen backlog (default 1024)")
    p.add_argument("--quiet", action="store_true", help="do not log each request to stderr")
    p.add_argument("--etag-style", choices=("md5", "nginx"), default="md5",
                   help="ETag of --bucket files: md5 of the bytes (default), or nginx's "
                        "\"<hex mtime>-<hex size>\" so nginx can serve the same directory")
    return p


class _Stop(Exception):
    pass


def _raise_stop(signum, frame):
    # Exit right here: raising into the main thread could land inside a
    # lock or a thread start and hang the shutdown (seen under load).
    # Nothing needs saving: the overlay of PUT objects lives in memory.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def write_port_file(path, port):
    tmp = "%s.tmp.%d" % (path, os.getpid())
    with open(tmp, "w") as f:
        f.write("%d\n" % port)
    os.replace(tmp, path)


def main(argv=None):
    args = build_parser().parse_args(argv)
    if bool(args.tls_cert) != bool(args.tls_key):
        build_parser().error("--tls-cert and --tls-key go together")
    for b in args.bucket:
        b.etag_style = args.etag_style
    buckets = args.bucket + args.synthetic
    names = [b.name for b in buckets]
    if len(set(names)) != len(names):
        build_parser().error("duplicate bucket name")
    keys = dict(args.access_key) or {DEFAULT_ACCESS_KEY: (DEFAULT_SECRET_KEY, None)}
    app = S3App(buckets, keys, region=args.region, domain=args.domain,
                verify=not args.no_verify, anonymous_ok=args.anonymous_ok,
                quiet=args.quiet, timeout=args.timeout)
    app.auth.session_key = args.session_key
    scheme = "http"
    if args.tls_cert:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(args.tls_cert, args.tls_key)
        app.tls_context = ctx
        scheme = "https"
    if args.synthetic:
        _content_pool()
    threading.stack_size(512 * 1024)   # one thread per connection; keep them small
    server = S3Server((args.host, args.port), app, args.backlog)
    port = server.server_address[1]
    host = "[%s]" % args.host if ":" in args.host else args.host
    signal.signal(signal.SIGTERM, _raise_stop)
    signal.signal(signal.SIGINT, _raise_stop)
    try:
        if args.port_file:
            write_port_file(args.port_file, port)
        sys.stdout.write("listening on %s://%s:%d\n" % (scheme, host, port))
        sys.stdout.flush()
        server.serve_forever(poll_interval=0.5)
    except _Stop:
        pass
    finally:
        app.stopping.set()
        server.server_close()
    return 0


if __name__ == "__main__":
    rc = main()
    # Daemon threads (clients mid-request, stalled by a fault) can hang
    # interpreter finalization; nothing is left to clean up here.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc)
