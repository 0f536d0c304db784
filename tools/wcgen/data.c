/* SPDX-License-Identifier: MIT */
/*
 * wcgen data: a splitmix64 word per 8 bytes (about 1 ns each), generated into
 * an 8 MiB buffer and written with pwrite, so writing runs at disk speed on
 * one core. Verification regenerates and compares in the same chunks.
 */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "wcgen.h"

#define CHUNK (8u << 20)

static inline uint64_t mix(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static inline void put_le64(unsigned char *p, uint64_t v)
{
	v = htole64(v);         /* <endian.h>: a no-op on little-endian */
	memcpy(p, &v, 8);
}

void gen_fill(uint64_t seed, uint32_t index, uint64_t off, void *buf,
	      uint64_t n)
{
	uint64_t base = mix(seed ^ ((uint64_t)(index + 1) * 0x9e3779b97f4a7c15ull));
	unsigned char *out = buf, b[8];
	uint64_t w = off / 8, skip = off % 8, done = 0;

	if (skip) {
		/* a partial first word */
		put_le64(b, mix(base + w++ * 0x9e3779b97f4a7c15ull));
		for (uint64_t i = skip; i < 8 && done < n; i++)
			out[done++] = b[i];
	}
	for (; n - done >= 8; done += 8, w++)
		put_le64(out + done, mix(base + w * 0x9e3779b97f4a7c15ull));
	if (done < n) {
		put_le64(b, mix(base + w * 0x9e3779b97f4a7c15ull));
		memcpy(out + done, b, n - done);
	}
}

static void pwrite_all(int fd, const void *buf, size_t n, uint64_t off,
		       const char *path)
{
	size_t done = 0;

	while (done < n) {
		ssize_t r = pwrite(fd, (const char *)buf + done, n - done,
				   (off_t)(off + done));

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			die("%s: write at %" PRIu64 " failed: %s", path, off + done,
			    r < 0 ? strerror(errno) : "no progress");
		done += (size_t)r;
	}
}

/* Fills buf with the file's bytes [pos, pos + n): prefix, header, then the
 * tensors, which tile the data section in order. *cur is the first tensor
 * that may overlap (the file is produced front to back). */
static void fill_file(unsigned char *buf, uint64_t pos, uint64_t n,
		      const struct gen_shard *s, const struct gen_tensor *t,
		      uint64_t seed, uint32_t *cur)
{
	uint64_t data_off = 8 + s->header_len, end = pos + n;

	for (uint64_t p = pos; p < end && p < data_off; p++)
		buf[p - pos] = p < 8 ? (unsigned char)(s->header_len >> (8 * p)) :
				       (unsigned char)s->header[p - 8];
	for (; *cur < s->first + s->count; (*cur)++) {
		const struct gen_tensor *x = &t[*cur];
		uint64_t b = data_off + x->begin, e = b + x->nbytes;
		uint64_t lo = b > pos ? b : pos, hi = e < end ? e : end;

		if (lo < hi)
			gen_fill(seed, x->index, lo - b, buf + (lo - pos), hi - lo);
		if (e > end)
			break; /* continues in the next chunk */
	}
}

/* Writes the file front to back in CHUNK pieces. Whole chunks go through
 * O_DIRECT (no page-cache copy: generation is then the only CPU cost) where
 * the file system allows it; the tail goes through the page cache. */
uint64_t gen_write_shard(const char *dir, const struct gen_shard *s,
			 const struct gen_tensor *t, uint64_t seed,
			 bool headers_only)
{
	uint64_t total = 8 + s->header_len + s->data_bytes;
	unsigned char *buf;
	char path[4096];
	uint32_t cur = s->first;
	int fd, fdd;

	snprintf(path, sizeof(path), "%s/%s", dir, s->file);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		die("%s: cannot create: %s", path, strerror(errno));
	buf = aligned_alloc(4096, CHUNK);
	if (!buf)
		die("out of memory for an %u-byte buffer", CHUNK);
	if (headers_only) {
		uint64_t n = 8 + s->header_len;

		fill_file(buf, 0, n, s, t, seed, &(uint32_t){ s->first + s->count });
		pwrite_all(fd, buf, n, 0, path);
		if (ftruncate(fd, (off_t)total))
			die("%s: ftruncate to %" PRIu64 ": %s", path, total, strerror(errno));
		free(buf);
		close(fd);
		return n;
	}
	fdd = open(path, O_WRONLY | O_DIRECT | O_CLOEXEC);
	for (uint64_t pos = 0; pos < total; pos += CHUNK) {
		uint64_t n = total - pos < CHUNK ? total - pos : CHUNK;

		fill_file(buf, pos, n, s, t, seed, &cur);
		if (fdd >= 0 && n == CHUNK) {
			ssize_t r = pwrite(fdd, buf, n, (off_t)pos);

			if (r == (ssize_t)n)
				continue;
			close(fdd); /* e.g. EINVAL: no O_DIRECT here */
			fdd = -1;
		}
		pwrite_all(fd, buf, n, pos, path);
	}
	if (fdd >= 0)
		close(fdd);
	free(buf);
	if (close(fd))
		die("%s: close: %s", path, strerror(errno));
	return total;
}

uint32_t gen_verify_shard(const char *dir, const struct gen_shard *s,
			  const struct gen_tensor *t, uint64_t seed)
{
	uint64_t data_off = 8 + s->header_len;
	unsigned char *want, *got;
	uint32_t bad = 0;
	char path[4096];
	int fd;

	snprintf(path, sizeof(path), "%s/%s", dir, s->file);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		die("%s: cannot open: %s", path, strerror(errno));
	want = malloc(CHUNK);
	got = malloc(CHUNK);
	if (!want || !got)
		die("out of memory for verify buffers");
	for (uint32_t i = s->first; i < s->first + s->count; i++) {
		for (uint64_t off = 0; off < t[i].nbytes; off += CHUNK) {
			uint64_t n = t[i].nbytes - off < CHUNK ? t[i].nbytes - off : CHUNK;
			ssize_t r;

			gen_fill(seed, t[i].index, off, want, n);
			r = pread(fd, got, n, (off_t)(data_off + t[i].begin + off));
			if (r != (ssize_t)n || memcmp(want, got, n)) {
				uint64_t at = 0;

				while (r == (ssize_t)n && at < n && want[at] == got[at])
					at++;
				log_error("%s: tensor '%s': bytes differ from seed %" PRIu64 " at tensor byte %" PRIu64 "%s",
					  path, t[i].name, seed, off + at,
					  r != (ssize_t)n ? " (short read)" : "");
				bad++;
				break;
			}
		}
	}
	free(want);
	free(got);
	close(fd);
	return bad;
}
