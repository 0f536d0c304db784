/* SPDX-License-Identifier: MIT */
/*
 * The XXH3-128 helpers against `xxhsum -H2` on files of awkward sizes (0, 1,
 * 3, 240, 241, 1025, 1 MiB + 13), one-shot and streaming in odd chunks, for
 * the AVX2 build (where the CPU has it) and the generic one.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hash.h"
#include "hash_impl.h"
#include "t.h"

static void xxhsum_of(const char *path, char out[BASE_HASH_HEX_LEN])
{
	char cmd[512], line[512];
	FILE *p;

	snprintf(cmd, sizeof(cmd), "xxhsum -H2 '%s'", path);
	p = popen(cmd, "r");
	T_ASSERT(p);
	T_ASSERT(fgets(line, sizeof(line), p));
	T_EQ_INT(pclose(p), 0);
	T_ASSERT(strlen(line) > 32 && line[32] == ' ');
	memcpy(out, line, 32);
	out[32] = '\0';
}

int main(void)
{
	static const size_t sizes[] = { 0, 1, 3, 240, 241, 1025, (1 << 20) + 13 };
	char path[] = "/tmp/wct_hash.XXXXXX";
	uint64_t x = 0x9e3779b97f4a7c15ull;
	unsigned char *buf;
	int fd;

	T_SKIP_IF(system("command -v xxhsum >/dev/null 2>&1") != 0,
		  "xxhsum not installed (Debian package xxhash)");
	buf = malloc(sizes[6]);
	T_ASSERT(buf);
	for (size_t i = 0; i < sizes[6]; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		buf[i] = (unsigned char)x;
	}
	fd = mkstemp(path);
	T_ASSERT(fd >= 0);
	for (size_t k = 0; k < 2 * sizeof(sizes) / sizeof(sizes[0]); k++) {
		size_t n = sizes[k % (sizeof(sizes) / sizeof(sizes[0]))];
		char want[BASE_HASH_HEX_LEN], got[BASE_HASH_HEX_LEN];
		uint8_t h[BASE_HASH_LEN], h2[BASE_HASH_LEN], back[BASE_HASH_LEN];
		struct base_hasher st;

		base__hash_force_generic(k >= sizeof(sizes) / sizeof(sizes[0]));
		T_EQ_INT(ftruncate(fd, 0), 0);
		T_EQ_INT(pwrite(fd, buf, n, 0), (long long)n);
		xxhsum_of(path, want);
		base_hash128(buf, n, h);
		base_hash_hex(h, got);
		T_EQ_STR(got, want);

		base_hasher_init(&st);
		for (size_t off = 0; off < n;) {
			size_t c = 1 + (off * 7 + 3) % 5000;

			if (c > n - off)
				c = n - off;
			base_hasher_update(&st, buf + off, c);
			off += c;
		}
		base_hasher_final(&st, h2);
		T_ASSERT(memcmp(h, h2, BASE_HASH_LEN) == 0);
		T_OK(base_hash_parse_hex(want, back));
		T_ASSERT(memcmp(h, back, BASE_HASH_LEN) == 0);
	}
	{
		uint8_t b[BASE_HASH_LEN];

		T_EQ_INT(base_hash_parse_hex("06b05ab6733a618578af5f94892f395", b), -EINVAL);
		T_EQ_INT(base_hash_parse_hex("06b05ab6733a618578af5f94892f3950x", b), -EINVAL);
	}
	close(fd);
	unlink(path);
	free(buf);
	return 0;
}
