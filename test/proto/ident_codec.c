/* SPDX-License-Identifier: MIT */
/*
 * Identity: canonical encoding round trip, strict decoding (every truncation
 * point, trailing bytes, bad magic/version, oversized or NUL strings), a
 * digest that follows every field, the comparison listing each differing
 * field with both values (as text and as HELLO's mismatch entries), and
 * ident_set_model on a wcgen checkpoint.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "err.h"
#include "identity.h"
#include "model.h"
#include "plan.h"
#include "t.h"
#include "wire.h"

static void sample(struct ident *id)
{
	ident_init(id);
	strcpy(id->model_path, "/models/llama");
	strcpy(id->arch, "LlamaForCausalLM");
	strcpy(id->dtype, "bfloat16");
	id->tp_size = 8;
	id->tp_rank = 3;
	id->pp_size = 2;
	id->pp_rank = 1;
	memset(id->rules_hash, 0xab, BASE_HASH_LEN);
	memset(id->ckpt_digest, 0x11, BASE_HASH_LEN);
	strcpy(id->device_uuid, "GPU-12345678-abcd");
	id->cc_major = 9;
	id->cc_minor = 0;
}

static void check_roundtrip(void)
{
	unsigned char buf[IDENT_ENC_MAX], big[IDENT_ENC_MAX + 8];
	char err[BASE_ERR_LEN], diff[1024];
	struct ident a, b;
	size_t len, len2;

	sample(&a);
	T_OK(ident_encode(&a, buf, sizeof(buf), &len));
	T_OK(ident_decode(&b, buf, len, err));
	T_EQ_INT(ident_compare(&a, "daemon", &b, "engine", diff, sizeof(diff)), 0);
	T_EQ_STR(diff, "");
	T_OK(ident_encode(&b, big, sizeof(big), &len2));
	T_EQ_U64(len2, len);
	T_ASSERT(!memcmp(buf, big, len));
	/* Every shorter prefix is rejected, and so is a longer buffer. */
	for (size_t n = 0; n < len; n++)
		T_ASSERT(ident_decode(&b, buf, n, err) == -EPROTO);
	T_EQ_INT(ident_decode(&b, buf, 50, err), -EPROTO);
	T_HAS(err, "identity ends inside field");
	memcpy(big, buf, len);
	big[len] = 0;
	T_EQ_INT(ident_decode(&b, big, len + 1, err), -EPROTO);
	T_HAS(err, "1 trailing bytes");
	/* too small a buffer to encode into */
	T_EQ_INT(ident_encode(&a, buf, len - 1, &len2), -ENOSPC);
	/* the largest identity fits IDENT_ENC_MAX */
	memset(a.model_path, 'p', IDENT_PATH_MAX - 1);
	memset(a.arch, 'a', IDENT_STR_MAX - 1);
	memset(a.dtype, 'd', IDENT_STR_MAX - 1);
	memset(a.quant_method, 'q', IDENT_STR_MAX - 1);
	memset(a.device_uuid, 'u', IDENT_STR_MAX - 1);
	T_OK(ident_encode(&a, buf, sizeof(buf), &len));
	T_OK(ident_decode(&b, buf, len, err));
	T_EQ_STR(b.model_path, a.model_path);
	/* an unterminated field cannot be encoded */
	a.arch[IDENT_STR_MAX - 1] = 'x';
	T_EQ_INT(ident_encode(&a, buf, sizeof(buf), &len), -EINVAL);
}

static void put32(unsigned char *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static void check_strict(void)
{
	unsigned char buf[IDENT_ENC_MAX];
	char err[BASE_ERR_LEN];
	struct ident a, b;
	size_t len;

	sample(&a);
	T_OK(ident_encode(&a, buf, sizeof(buf), &len));
	buf[0] = 'X';
	T_EQ_INT(ident_decode(&b, buf, len, err), -EPROTO);
	T_HAS(err, "without the WCID magic");
	buf[0] = 'W';
	put32(buf + 4, 3);
	T_EQ_INT(ident_decode(&b, buf, len, err), -EPROTO);
	printf("%s\n", err);
	T_HAS(err, "identity format version 3, this side speaks 2");
	put32(buf + 4, 2);
	/* model_path length: oversized, then a NUL inside */
	put32(buf + 8, IDENT_PATH_MAX);
	T_EQ_INT(ident_decode(&b, buf, len, err), -EPROTO);
	T_HAS(err, "identity field model_path is 4096 bytes, over the limit of 4095");
	put32(buf + 8, 13);
	buf[12 + 3] = '\0';
	T_EQ_INT(ident_decode(&b, buf, len, err), -EPROTO);
	T_HAS(err, "identity field model_path holds a NUL byte");
}

static void check_compare(void)
{
	uint8_t d1[BASE_HASH_LEN], d2[BASE_HASH_LEN];
	char out[2048], small[40];
	struct ident a, b;

	sample(&a);
	sample(&b);
	T_OK(ident_digest(&a, d1));
	T_OK(ident_digest(&b, d2));
	T_ASSERT(!memcmp(d1, d2, BASE_HASH_LEN));
	b.tp_rank = 4;
	strcpy(b.dtype, "float16");
	b.rules_hash[0] = 0;
	b.cc_minor = 2;
	T_OK(ident_digest(&b, d2));
	T_ASSERT(memcmp(d1, d2, BASE_HASH_LEN));
	T_EQ_INT(ident_compare(&a, "daemon", &b, "engine", out, sizeof(out)), 4);
	printf("%s\n", out);
	T_EQ_STR(out, "dtype: daemon='bfloat16' engine='float16'; "
		      "tp_rank: daemon=3 engine=4; "
		      "rules_hash: daemon=abababababababababababababababab engine=00ababababababababababababababab"
		      "; cc_minor: daemon=0 engine=2");
	/* truncated output still counts every field */
	T_EQ_INT(ident_compare(&a, "daemon", &b, "engine", small, sizeof(small)), 4);
	T_EQ_INT(strlen(small), sizeof(small) - 1);
	T_HAS(small, "...");
	b.format_version = 7;
	T_EQ_INT(ident_compare(&a, "d", &b, "e", out, sizeof(out)), 5);
	T_HAS(out, "format_version: d=2 e=7");
}

/* HELLO's MISMATCH reply: the same fields as ident_compare, in the table's
 * order, values unquoted; reserved fields are encoded (the digest changes)
 * but never compared; at most max entries. */
static void check_mismatch(void)
{
	struct wire_mismatch mm[WIRE_MISMATCH_MAX];
	char out[1024];
	struct ident a, b;

	sample(&a);
	sample(&b);
	T_EQ_INT(ident_mismatch(&a, &b, mm, WIRE_MISMATCH_MAX), 0);
	b.tp_size = 2;
	strcpy(b.model_path, "/models/other");
	memset(b.ckpt_digest, 0x22, BASE_HASH_LEN);
	b.reserved1 = 9;
	/* the path is shown, never compared (issue 15, item 7) */
	T_EQ_INT(ident_mismatch(&a, &b, mm, WIRE_MISMATCH_MAX), 2);
	T_EQ_STR(mm[0].field, "tp_size");
	T_EQ_STR(mm[0].daemon, "8");
	T_EQ_STR(mm[0].client, "2");
	T_EQ_STR(mm[1].field, "ckpt_digest");
	T_EQ_STR(mm[1].daemon, "11111111111111111111111111111111");
	T_EQ_STR(mm[1].client, "22222222222222222222222222222222");
	T_EQ_INT(ident_compare(&a, "d", &b, "e", out, sizeof(out)), 2);
	/* bounded by max */
	T_EQ_INT(ident_mismatch(&a, &b, mm, 1), 1);
	T_EQ_STR(mm[0].field, "tp_size");
	/* format_version first */
	b.format_version = IDENT_FORMAT_VERSION + 1;
	T_EQ_INT(ident_mismatch(&a, &b, mm, WIRE_MISMATCH_MAX), 3);
	T_EQ_STR(mm[0].field, "format_version");
	T_EQ_STR(mm[0].client, "3");
	/* only the path differs: interchangeable */
	b = a;
	memset(b.model_path, 'x', IDENT_PATH_MAX - 1);
	b.model_path[IDENT_PATH_MAX - 1] = '\0';
	T_EQ_INT(ident_mismatch(&a, &b, mm, WIRE_MISMATCH_MAX), 0);
	T_EQ_INT(ident_compare(&a, "d", &b, "e", out, sizeof(out)), 0);
}

static void check_model(void)
{
	const char *wc = getenv("WC_TOP"), *build = getenv("BUILD");
	char bin[1024], cmd[2048], dir[] = "/tmp/wct_ident.XXXXXX", err[BASE_ERR_LEN];
	struct plan_rules r;
	struct model m;
	struct ident id;

	snprintf(bin, sizeof(bin), "%s/%s/bin/wcgen", wc ? wc : ".", build ? build : "build");
	if (access(bin, X_OK)) {
		printf("skipping ident_set_model: %s not built\n", bin);
		return;
	}
	T_ASSERT(mkdtemp(dir));
	snprintf(cmd, sizeof(cmd), "'%s' tiny --out '%s' --headers-only --quant fp8:128 --force >/dev/null",
		 bin, dir);
	T_EQ_INT(system(cmd), 0);
	T_OK(model_open(&m, dir, err));
	T_OK(plan_rules_preset(&r, m.cfg.arch, err));
	ident_init(&id);
	T_OK(ident_set_model(&id, &m, &r, err));
	T_EQ_STR(id.model_path, m.path);
	T_EQ_STR(id.arch, "LlamaForCausalLM");
	T_EQ_STR(id.quant_method, "fp8");
	T_ASSERT(!memcmp(id.quant_hash, m.cfg.quant_hash, BASE_HASH_LEN));
	T_ASSERT(!memcmp(id.ckpt_digest, m.digest, BASE_HASH_LEN));
	T_ASSERT(!memcmp(id.rules_hash, r.hash, BASE_HASH_LEN));
	plan_rules_free(&r);
	model_close(&m);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	T_EQ_INT(system(cmd), 0);
}

int main(void)
{
	check_roundtrip();
	check_strict();
	check_compare();
	check_mismatch();
	check_model();
	return 0;
}
