/* SPDX-License-Identifier: MIT */
/*
 * Every safetensors rejection rule: a file that breaks it is written to a
 * temp directory, read back with st_read_fd, and the message must name the
 * file, the tensor (where there is one), what was wrong and the values.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "err.h"
#include "st.h"
#include "t.h"

#define NEEDLES 4

struct bad_case {
	const char *what;
	const char *hdr;        /* JSON text (NULL: raw bytes below) */
	long long hdr_len;      /* -1: strlen(hdr) */
	long long data_len;     /* bytes of data section */
	const char *raw;        /* whole file when hdr is NULL */
	size_t raw_len;
	const char *needles[NEEDLES];
};

static const struct bad_case cases[] = {
	{ "file shorter than 8 bytes", NULL, 0, 0, "abc", 3,
	  { "3 bytes, shorter than the 8-byte" } },
	{ "empty file", NULL, 0, 0, "", 0, { "0 bytes, shorter than" } },
	{ "header length 0", "{}", 0, 2, NULL, 0, { "header length is 0" } },
	{ "header length over 100 MB", "{}", 100000001, 0, NULL, 0,
	  { "header length 100000001 is over the 100000000-byte limit" } },
	{ "header length past EOF", "{}", 100, 10, NULL, 0,
	  { "header length 100 runs past the end of the 20-byte file" } },
	{ "header length 2^64-1", "{}", -2, 0, NULL, 0,
	  { "header length 18446744073709551615 is over" } },
	{ "not an object", "[1, 2]", -1, 0, NULL, 0,
	  { "header is an array, not a JSON object" } },
	{ "not JSON", "hello", -1, 0, NULL, 0, { "not valid strict JSON at byte" } },
	{ "trailing garbage", "{} x", -1, 0, NULL, 0,
	  { "end of file expected", "byte 4" } },
	{ "trailing NUL padding", "{}\0\0", 4, 0, NULL, 0,
	  { "not valid strict JSON" } },
	{ "invalid UTF-8", "{\"a\xff\":1}", -1, 0, NULL, 0,
	  { "not valid UTF-8 at byte 3", "0xff" } },
	{ "overlong UTF-8", "{\"a\xc0\xaf\":1}", -1, 0, NULL, 0,
	  { "not valid UTF-8 at byte 3", "0xc0" } },
	{ "UTF-8 surrogate", "{\"a\xed\xa0\x80\":1}", -1, 0, NULL, 0,
	  { "not valid UTF-8 at byte 3" } },
	{ "missing dtype", "{\"w\":{\"shape\":[1],\"data_offsets\":[0,1]}}", -1, 1,
	  NULL, 0, { "tensor 'w': missing dtype" } },
	{ "missing shape", "{\"w\":{\"dtype\":\"U8\",\"data_offsets\":[0,1]}}", -1, 1,
	  NULL, 0, { "tensor 'w': missing shape" } },
	{ "missing data_offsets", "{\"w\":{\"dtype\":\"U8\",\"shape\":[1]}}", -1, 1,
	  NULL, 0, { "tensor 'w': missing data_offsets" } },
	{ "entry not an object", "{\"w\":[1]}", -1, 0, NULL, 0,
	  { "tensor 'w': entry is an array, not an object" } },
	{ "dtype not a string", "{\"w\":{\"dtype\":5,\"shape\":[1],\"data_offsets\":[0,1]}}",
	  -1, 1, NULL, 0, { "tensor 'w': dtype is an integer, not a string" } },
	{ "shape not an array", "{\"w\":{\"dtype\":\"U8\",\"shape\":1,\"data_offsets\":[0,1]}}",
	  -1, 1, NULL, 0, { "tensor 'w': shape is an integer, not an array" } },
	{ "shape float", "{\"w\":{\"dtype\":\"U8\",\"shape\":[1.0],\"data_offsets\":[0,1]}}",
	  -1, 1, NULL, 0, { "tensor 'w': shape[0] is a float" } },
	{ "shape string", "{\"w\":{\"dtype\":\"U8\",\"shape\":[1,\"2\"],\"data_offsets\":[0,2]}}",
	  -1, 2, NULL, 0, { "tensor 'w': shape[1] is a string" } },
	{ "shape negative", "{\"w\":{\"dtype\":\"U8\",\"shape\":[-1],\"data_offsets\":[0,1]}}",
	  -1, 1, NULL, 0, { "tensor 'w': shape[0] is a negative number" } },
	{ "too many dims", "{\"w\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}",
	  -1, 1, NULL, 0, { "tensor 'w': shape has 9 dimensions, over the limit of 8" } },
	{ "one offset", "{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1]}}",
	  -1, 1, NULL, 0, { "tensor 'w': data_offsets is an array of fewer than 2", "not exactly two" } },
	{ "three offsets", "{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1,2]}}",
	  -1, 1, NULL, 0, { "tensor 'w': data_offsets is an array of more than 2" } },
	{ "offsets not an array", "{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":\"0,1\"}}",
	  -1, 1, NULL, 0, { "tensor 'w': data_offsets is a string" } },
	{ "offset negative", "{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[-1,0]}}",
	  -1, 1, NULL, 0, { "tensor 'w': a data offset is a negative number" } },
	{ "offset float", "{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1.0]}}",
	  -1, 1, NULL, 0, { "tensor 'w': a data offset is a float" } },
	{ "offset string", "{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[\"0\",1]}}",
	  -1, 1, NULL, 0, { "tensor 'w': a data offset is a string" } },
	{ "offset too big for JSON", "{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,99999999999999999999]}}",
	  -1, 1, NULL, 0, { "too big integer" } },
	{ "unknown dtype", "{\"w\":{\"dtype\":\"F128\",\"shape\":[1],\"data_offsets\":[0,16]}}",
	  -1, 16, NULL, 0, { "tensor 'w': unknown dtype 'F128'" } },
	{ "unknown key", "{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1],\"x\":1}}",
	  -1, 1, NULL, 0, { "tensor 'w': unknown key 'x'" } },
	{ "shape element count overflows",
	  "{\"w\":{\"dtype\":\"U8\",\"shape\":[4294967296,4294967296,2],\"data_offsets\":[0,1]}}",
	  -1, 1, NULL, 0, { "tensor 'w': element count of the shape overflows", "shape[1] = 4294967296" } },
	{ "size overflows", "{\"w\":{\"dtype\":\"F64\",\"shape\":[4611686018427387904],\"data_offsets\":[0,1]}}",
	  -1, 1, NULL, 0, { "tensor 'w': 4611686018427387904 elements of F64 overflow" } },
	{ "size differs", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}",
	  -1, 4, NULL, 0, { "tensor 'w': shape (2 elements of F32) is 8 bytes but data_offsets [0, 4] hold 4" } },
	{ "sub-byte partial byte", "{\"w\":{\"dtype\":\"F4\",\"shape\":[3],\"data_offsets\":[0,2]}}",
	  -1, 2, NULL, 0, { "tensor 'w': 3 elements of 4-bit F4 are not a whole number of bytes" } },
	{ "end before begin", "{\"w\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[8,4]}}",
	  -1, 8, NULL, 0, { "tensor 'w': data_offsets end 4 is before begin 8" } },
	{ "past data section", "{\"w\":{\"dtype\":\"U8\",\"shape\":[16],\"data_offsets\":[0,16]}}",
	  -1, 8, NULL, 0, { "tensor 'w': data_offsets [0, 16] run past the 8-byte data section" } },
	{ "overlap", "{\"a\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8]},"
		     "\"b\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[4,12]}}",
	  -1, 12, NULL, 0, { "tensor 'b': data_offsets [4, 12] overlap tensor 'a', which ends at 8" } },
	{ "same range twice", "{\"a\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8]},"
			      "\"b\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8]}}",
	  -1, 8, NULL, 0, { "tensor 'b': data_offsets [0, 8] overlap tensor 'a'" } },
	{ "hole", "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
		  "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[8,12]}}",
	  -1, 12, NULL, 0, { "tensor 'b': data_offsets [8, 12] leave a hole of 4 bytes after tensor 'a' (at 4)" } },
	{ "hole at start", "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[4,8]}}",
	  -1, 8, NULL, 0, { "tensor 'a': data_offsets [4, 8] leave a hole of 4 bytes after the start" } },
	{ "trailing bytes", "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}",
	  -1, 8, NULL, 0, { "4 trailing bytes after the last tensor 'a'", "tensors end at 4, the data section is 8 bytes" } },
	{ "data but no tensors", "{}", -1, 3, NULL, 0,
	  { "3 trailing bytes after the last tensor (tensors end at 0" } },
	{ "empty name", "{\"\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
	  -1, 1, NULL, 0, { "a tensor has an empty name" } },
	{ "name with NUL", "{\"a\\u0000b\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
	  -1, 1, NULL, 0, { "tensor name with a NUL byte", "a\\u0000b" } },
	{ "duplicate names", "{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
			     "\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}",
	  -1, 2, NULL, 0, { "duplicate key (a tensor name", "'\"w\"'" } },
	{ "metadata not an object", "{\"__metadata__\":[1]}", -1, 0, NULL, 0,
	  { "__metadata__ is an array, not an object of string to string" } },
	{ "metadata value not a string", "{\"__metadata__\":{\"format\":1}}", -1, 0, NULL, 0,
	  { "__metadata__ value for 'format' is an integer, not a string" } },
	{ "metadata duplicate key", "{\"__metadata__\":{\"k\":\"a\",\"k\":\"b\"}}", -1, 0,
	  NULL, 0, { "duplicate", "'\"k\"'" } },
};

static void write_case(const char *path, const struct bad_case *c)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	unsigned char prefix[8];
	size_t text_len;
	unsigned long long n;
	char *zeros;

	T_ASSERT(fd >= 0);
	if (!c->hdr) {
		T_EQ_INT(write(fd, c->raw, c->raw_len), (long long)c->raw_len);
		close(fd);
		return;
	}
	/* hdr_len 0..8 writes that many bytes of hdr (it may hold NULs);
	 * otherwise the text is written whole under a lying length. */
	text_len = c->hdr_len >= 0 && c->hdr_len <= 8 ? (size_t)c->hdr_len :
						       strlen(c->hdr);
	n = c->hdr_len == -1 ? strlen(c->hdr) :
	    c->hdr_len == -2 ? ~0ull : (unsigned long long)c->hdr_len;
	for (int i = 0; i < 8; i++)
		prefix[i] = (unsigned char)(n >> (8 * i));
	T_EQ_INT(write(fd, prefix, 8), 8);
	T_EQ_INT(write(fd, c->hdr, text_len), (long long)text_len);
	zeros = calloc(1, (size_t)c->data_len + 1);
	T_EQ_INT(write(fd, zeros, (size_t)c->data_len), c->data_len);
	free(zeros);
	close(fd);
}

int main(void)
{
	char dir[] = "/tmp/wct_st.XXXXXX";
	size_t ncases = sizeof(cases) / sizeof(cases[0]);

	T_ASSERT(mkdtemp(dir));
	for (size_t i = 0; i < ncases; i++) {
		const struct bad_case *c = &cases[i];
		char path[256], err[BASE_ERR_LEN] = "";
		struct st_file f;
		int fd, rc;

		snprintf(path, sizeof(path), "%s/case%02zu.safetensors", dir, i);
		write_case(path, c);
		fd = open(path, O_RDONLY);
		T_ASSERT(fd >= 0);
		rc = st_read_fd(&f, fd, path, err);
		close(fd);
		unlink(path);
		if (rc == 0)
			T_FAIL("case '%s' was accepted", c->what);
		printf("%-32s %s\n", c->what, err);
		if (rc != -EINVAL && rc != -EOVERFLOW)
			T_FAIL("case '%s': rc %d", c->what, rc);
		T_HAS(err, path);
		for (int k = 0; k < NEEDLES && c->needles[k]; k++)
			T_HAS(err, c->needles[k]);
	}
	rmdir(dir);
	printf("%zu rejection cases\n", ncases);
	return 0;
}
