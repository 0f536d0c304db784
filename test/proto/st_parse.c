/* SPDX-License-Identifier: MIT */
/*
 * Valid safetensors files parse into the right tensors: every dtype the
 * format defines (sub-byte F4/F6 included), a scalar, an empty tensor,
 * metadata, header padding with spaces, tensors listed out of offset order,
 * and a file with no tensors at all.
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

static int write_file(const char *path, const char *hdr, size_t data_len)
{
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	unsigned char prefix[8];
	size_t n = strlen(hdr);

	T_ASSERT(fd >= 0);
	for (int i = 0; i < 8; i++)
		prefix[i] = (unsigned char)((unsigned long long)n >> (8 * i));
	T_EQ_INT(write(fd, prefix, 8), 8);
	T_EQ_INT(write(fd, hdr, n), (long long)n);
	T_EQ_INT(ftruncate(fd, (off_t)(8 + n + data_len)), 0);
	return fd;
}

static void check_dtypes(void)
{
	static const unsigned bits[ST_DTYPE_COUNT] = {
		8, 4, 6, 6, 8, 8, 8, 8, 8, 16, 16, 16, 16, 32, 32, 32, 64, 64, 64, 64
	};
	uint64_t b;

	for (int d = 0; d < ST_DTYPE_COUNT; d++) {
		enum st_dtype back;

		T_EQ_INT(st_dtype_bits((enum st_dtype)d), bits[d]);
		T_OK(st_dtype_parse(st_dtype_name((enum st_dtype)d), &back));
		T_EQ_INT(back, d);
	}
	T_EQ_INT(st_dtype_parse("bf16", &(enum st_dtype){ 0 }), -EINVAL);
	T_OK(st_dtype_bytes(ST_F4, 6, &b));
	T_EQ_U64(b, 3);
	T_OK(st_dtype_bytes(ST_F6_E2M3, 4, &b));
	T_EQ_U64(b, 3);
	T_EQ_INT(st_dtype_bytes(ST_F6_E3M2, 3, &b), -EINVAL);
	T_EQ_INT(st_dtype_bytes(ST_U64, 1ull << 62, &b), -EOVERFLOW);
}

int main(void)
{
	char path[] = "/tmp/wct_stp.XXXXXX";
	char err[BASE_ERR_LEN] = "";
	/* Out of offset order on purpose; every dtype once; padded. */
	char hdr[4096];
	size_t off = 0, len;
	struct st_file f;
	int fd;

	check_dtypes();
	len = (size_t)snprintf(hdr, sizeof(hdr),
			       "{\"__metadata__\":{\"format\":\"pt\",\"note\":\"h\\u00e9\"}");
	/* Every dtype as a [2, 4] tensor named after it, in reverse. */
	for (int d = ST_DTYPE_COUNT - 1; d >= 0; d--) {
		uint64_t b;

		T_OK(st_dtype_bytes((enum st_dtype)d, 8, &b));
		len += (size_t)snprintf(hdr + len, sizeof(hdr) - len,
					",\"t.%s\":{\"dtype\":\"%s\",\"shape\":[2,4],\"data_offsets\":[%zu,%zu]}",
					st_dtype_name((enum st_dtype)d),
					st_dtype_name((enum st_dtype)d),
					off, off + b);
		off += b;
	}
	len += (size_t)snprintf(hdr + len, sizeof(hdr) - len,
				",\"scalar\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[%zu,%zu]}"
				",\"empty\":{\"dtype\":\"BF16\",\"shape\":[0,5],\"data_offsets\":[%zu,%zu]}}    ",
				off, off + 4, off + 4, off + 4);
	off += 4;
	fd = mkstemp(path);
	T_ASSERT(fd >= 0);
	close(fd);
	fd = write_file(path, hdr, off);
	if (st_read_fd(&f, fd, "x.safetensors", err))
		T_FAIL("%s", err);
	T_EQ_INT(f.ntensors, ST_DTYPE_COUNT + 2);
	T_EQ_INT(f.nmeta, 2);
	T_EQ_STR(st_meta_get(&f, "format"), "pt");
	T_EQ_STR(st_meta_get(&f, "note"), "h\xc3\xa9");
	T_EQ_U64(f.header_len, len);
	T_EQ_U64(f.data_off, 8 + len);
	T_EQ_U64(f.file_size, 8 + len + off);
	/* Sorted by offset: U64 was written first, at offset 0. */
	T_EQ_STR(f.tensors[0].name, "t.U64");
	for (uint32_t i = 1; i < f.ntensors; i++)
		T_ASSERT(f.tensors[i].begin >= f.tensors[i - 1].end);
	{
		const struct st_tensor *t = st_find(&f, "t.F4");

		T_ASSERT(t);
		T_EQ_INT(t->dtype, ST_F4);
		T_EQ_U64(t->nbytes, 4);
		T_EQ_INT(t->ndim, 2);
		T_EQ_U64(t->shape[1], 4);
		T_EQ_U64(t->nelem, 8);
		T_EQ_U64(t->file_off, f.data_off + t->begin);
		t = st_find(&f, "t.F6_E3M2");
		T_EQ_U64(t->nbytes, 6);
		t = st_find(&f, "t.C64");
		T_EQ_U64(t->nbytes, 64);
		t = st_find(&f, "scalar");
		T_EQ_INT(t->ndim, 0);
		T_EQ_U64(t->nelem, 1);
		T_EQ_U64(t->nbytes, 4);
		t = st_find(&f, "empty");
		T_EQ_U64(t->nelem, 0);
		T_EQ_U64(t->nbytes, 0);
		T_ASSERT(!st_find(&f, "nope"));
	}
	st_file_free(&f);
	close(fd);

	/* No tensors at all: "{}" and an empty data section. */
	fd = write_file(path, "{}", 0);
	if (st_read_fd(&f, fd, "empty.safetensors", err))
		T_FAIL("%s", err);
	T_EQ_INT(f.ntensors, 0);
	st_file_free(&f);
	close(fd);
	unlink(path);
	return 0;
}
