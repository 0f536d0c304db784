/* SPDX-License-Identifier: MIT */
/*
 * wcgen data: a splitmix64 word per 8 bytes (about 1 ns each), generated into
 * an 8 MiB buffer and written with pwrite, so writing runs at disk speed on
 * one core. Verification regenerates and compares in the same chunks.
 */
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

void gen_fill(uint64_t seed, uint32_t index, uint64_t off, void *buf,
	      uint64_t n)
{
	uint64_t base = mix(seed ^ ((uint64_t)(index + 1) * 0x9e3779b97f4a7c15ull));
	unsigned char *out = buf;
	uint64_t w = off / 8, skip = off % 8, done = 0;

	while (done < n) {
		uint64_t v = mix(base + w * 0x9e3779b97f4a7c15ull);
		unsigned char b[8];

		if (skip == 0 && n - done >= 8) {
			/* the common case: whole little-endian words */
			for (int i = 0; i < 8; i++)
				out[done + i] = (unsigned char)(v >> (8 * i));
			done += 8;
			w++;
			continue;
		}
		for (int i = 0; i < 8; i++)
			b[i] = (unsigned char)(v >> (8 * i));
		for (uint64_t i = skip; i < 8 && done < n; i++)
			out[done++] = b[i];
		skip = 0;
		w++;
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

uint64_t gen_write_shard(const char *dir, const struct gen_shard *s,
			 const struct gen_tensor *t, uint64_t seed,
			 bool headers_only)
{
	char path[4096];
	unsigned char prefix[8];
	uint64_t data_off = 8 + s->header_len, total;
	unsigned char *buf;
	int fd;

	snprintf(path, sizeof(path), "%s/%s", dir, s->file);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		die("%s: cannot create: %s", path, strerror(errno));
	for (int i = 0; i < 8; i++)
		prefix[i] = (unsigned char)(s->header_len >> (8 * i));
	pwrite_all(fd, prefix, 8, 0, path);
	pwrite_all(fd, s->header, s->header_len, 8, path);
	total = data_off + s->data_bytes;
	if (headers_only) {
		if (ftruncate(fd, (off_t)total))
			die("%s: ftruncate to %" PRIu64 ": %s", path, total, strerror(errno));
		close(fd);
		return data_off;
	}
	buf = malloc(CHUNK);
	if (!buf)
		die("out of memory for an %u-byte buffer", CHUNK);
	for (uint32_t i = s->first; i < s->first + s->count; i++) {
		for (uint64_t off = 0; off < t[i].nbytes; off += CHUNK) {
			uint64_t n = t[i].nbytes - off < CHUNK ? t[i].nbytes - off : CHUNK;

			gen_fill(seed, t[i].index, off, buf, n);
			pwrite_all(fd, buf, n, data_off + t[i].begin + off, path);
		}
	}
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
