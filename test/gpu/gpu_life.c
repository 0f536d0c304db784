/* SPDX-License-Identifier: MIT */
/*
 * Sleep and wake on the GPU: wcd on device 0 with a wcgen model
 * (tiny, or WC_GPU_LIFE_PRESET, e.g. llama-1b); for sleep levels 1 and 2:
 *   - SLEEP frees the device memory: the device's free bytes (the CUDA
 *     backend's mem_info, i.e. cudaMemGetInfo, read in this process) grow
 *     by at least the daemon's resident pool bytes, and WAKE takes them
 *     again (wcd --keep-context: the context stays, so the difference is
 *     the pools alone);
 *   - by default wcd releases its context while serving: level 2 still
 *     frees the pools' bytes, and after WAKE the daemon goes back to no
 *     context (the free bytes return to what they were before SLEEP);
 *   - after WAKE every manifest hash equals the one before SLEEP and the
 *     hash of the file's bytes, and an engine's wc_verify (device bytes
 *     copied back and hashed) passes.
 * A wake whose host copy changed (WCD_TEST_WAKE_CORRUPT) is refused by
 * its device hashes, and the next wake succeeds.
 * Prints the wake's copy rate (measured against the pinned host-to-device
 * ceiling by bench/gpu/gpu_life, not here). Skips (77) without CUDA or a GPU.
 */
#include "client_util.h"

#include "gpu.h"

static struct e2e x;
static struct gpu_dev dev;

static uint64_t dev_free(void)
{
	uint64_t f = 0, t = 0;

	T_OK(dev.be->mem_info(&dev, &f, &t));
	return f;
}

static json_int_t resident(void)
{
	json_t *j = e2e_status(&x);
	json_int_t r = json_integer_value(json_object_get(j, "resident_bytes"));

	json_decref(j);
	return r;
}

/* Manifest hashes (in order) into h; checks each against the file bytes. */
static void hashes(uint8_t (*h)[BASE_HASH_LEN], bool verify_engine)
{
	struct wc_expect ex = { .model_dir = x.model };
	struct wc_conn *c = e2e_connect(&x);
	struct wc_model *m;
	struct wc_error e;
	uint64_t bad = 1;

	if (wc_hello(c, &ex, NULL, &e))
		T_FAIL("hello: %s", e.msg);
	if (verify_engine ? wc_attach(c, 0, &m, NULL, &e) :
			    wc_manifest(c, &m, &e))
		T_FAIL("attach/manifest: %s", e.msg);
	T_EQ_U64(e2e_stored_count(m), x.m.ntensors);
	T_CMP_INT(wc_tensor_count(m), <=, 2 * x.m.ntensors);
	for (uint64_t i = 0; i < wc_tensor_count(m); i++) {
		const struct wc_tensor *t = wc_tensor_at(m, i);
		uint8_t fh[BASE_HASH_LEN];
		uint64_t len;
		uint8_t *b;

		memcpy(h[i], t->hash, BASE_HASH_LEN);
		if (t->flags & WC_TENSOR_VIEW)
			continue;   /* a fused view: its hash is compared below */
		b = e2e_file_bytes(&x, t->name, &len);
		base_hash128(b, len, fh);
		free(b);
		if (memcmp(fh, t->hash, BASE_HASH_LEN))
			T_FAIL("tensor %s: manifest hash differs from the file's", t->name);
	}
	if (verify_engine) {
		if (wc_verify(m, &bad, &e))
			T_FAIL("wc_verify on the device bytes: %s", e.msg);
		T_EQ_U64(bad, 0);
	}
	wc_detach(m, NULL);
	wc_close(c);
}

/* Waits (up to 3 s) until the device has at least want free bytes:
 * the daemon releases its context just after it answers. */
static uint64_t dev_free_at_least(uint64_t want)
{
	uint64_t f = dev_free();

	for (int i = 0; i < 300 && f < want; i++) {
		usleep(10000);
		f = dev_free();
	}
	return f;
}

static void round_trip(unsigned level, bool idle)
{
	/* the checkpoint's tensors and the fused views over them */
	size_t n = 2 * x.m.ntensors * BASE_HASH_LEN;
	uint8_t (*before)[BASE_HASH_LEN] = calloc(1, n), (*after)[BASE_HASH_LEN] = calloc(1, n);
	struct wc_life_result r;
	struct wc_conn *c;
	struct wc_error e;
	uint64_t f0, f1, f2;
	json_int_t res = resident();

	T_ASSERT(before && after);
	T_CMP_INT(res, >=, (json_int_t)x.m.total_bytes);
	hashes(before, false);
	f0 = dev_free();
	c = e2e_connect(&x);
	if (wc_sleep(c, level, &r, &e))
		T_FAIL("sleep %u: %s", level, e.msg);
	f1 = dev_free();
	T_EQ_INT(resident(), 0);
	printf("sleep %u%s: device free %llu -> %llu bytes (%+lld; the pools held %lld): %s\n",
	       level, idle ? " (context released while serving)" : "",
	       (unsigned long long)f0, (unsigned long long)f1,
	       (long long)(f1 - f0), (long long)res, r.msg);
	/* level 1 with idle: the copy out needed a context, kept for WAKE */
	if (!idle || level == 2)
		T_CMP_INT((long long)(f1 - f0), >=, (long long)res);
	if (wc_wake(c, &r, &e))
		T_FAIL("wake from %u: %s", level, e.msg);
	f2 = idle ? dev_free_at_least(f0 - (8u << 20)) : dev_free();
	printf("wake %u: device free %llu bytes; %llu bytes in %.3f s (%.2f GB/s), verify %.3f s: %s\n",
	       level, (unsigned long long)f2, (unsigned long long)r.bytes,
	       r.seconds, r.seconds > 0 ? r.bytes / r.seconds / 1e9 : 0.0,
	       r.verify_seconds, r.msg);
	if (idle)
		T_CMP_INT((long long)f2, >=, (long long)(f0 - (8u << 20)));
	else
		T_CMP_INT((long long)(f1 - f2), >=, (long long)res);
	T_EQ_INT(resident(), res);
	wc_close(c);
	hashes(after, true);
	if (memcmp(before, after, n))
		T_FAIL("a tensor hash changed across sleep %u / wake", level);
	free(before);
	free(after);
}

/* The wake's device hashes (queued with its copies) catch a host copy
 * that changed: WCD_TEST_WAKE_CORRUPT flips a byte of the largest tensor's
 * for one wake, which fails and leaves the daemon asleep; the next wake
 * succeeds with every hash as before. */
static void corrupt_wake(void)
{
	size_t n = 2 * x.m.ntensors * BASE_HASH_LEN;
	uint8_t (*before)[BASE_HASH_LEN] = calloc(1, n), (*after)[BASE_HASH_LEN] = calloc(1, n);
	struct wc_life_result r;
	struct wc_conn *c;
	struct wc_error e;

	T_ASSERT(before && after);
	T_OK(kill(x.wcd, SIGTERM));
	T_EQ_INT(waitpid(x.wcd, NULL, 0), x.wcd);
	x.wcd = 0;
	setenv("WCD_TEST_WAKE_CORRUPT", "1", 1);
	e2e_start_wcd(&x, NULL);
	unsetenv("WCD_TEST_WAKE_CORRUPT");
	hashes(before, false);
	c = e2e_connect(&x);
	if (wc_sleep(c, 1, &r, &e))
		T_FAIL("sleep 1: %s", e.msg);
	T_EQ_INT(wc_wake(c, &r, &e), -EIO);
	T_HAS(e.msg, "wake failed: 1 of ");
	T_HAS(e.msg, "do not match their manifest hash after the restore from host memory");
	printf("wake with a flipped byte refused: %.200s\n", e.msg);
	if (wc_wake(c, &r, &e))
		T_FAIL("wake after the refused one: %s", e.msg);
	printf("wake after it: %s\n", r.msg);
	wc_close(c);
	hashes(after, true);
	if (memcmp(before, after, n))
		T_FAIL("a tensor hash changed across the refused wake and the next");
	free(before);
	free(after);
}

int main(void)
{
	const char *preset = getenv("WC_GPU_LIFE_PRESET");
	char wcgen[600], err[BASE_ERR_LEN];
	char *gen[] = { wcgen, (char *)(preset ? preset : "tiny"), "--force",
			"--out", x.model, NULL };

	T_SKIP_IF(!gpu_cuda_backend(), "built without CUDA");
	T_SKIP_IF(gpu_dev_open(&dev, "0", err), "no GPU: %s", err);
	e2e_init(&x, "gpu_life");
	if (preset) {
		model_close(&x.m);
		x.m_open = false;
		snprintf(wcgen, sizeof(wcgen), "%s/wcgen", x.bin);
		T_EQ_INT(e2e_run(x.log, gen), 0);
		if (model_open(&x.m, x.model, err))
			T_FAIL("model_open: %s", err);
		x.m_open = true;
	}
	snprintf(x.device, sizeof(x.device), "0");
	snprintf(x.sock, sizeof(x.sock), "%s/%s.sock", x.rundir, dev.name);
	snprintf(x.ready, sizeof(x.ready), "%s/%s.ready", x.rundir, dev.name);
	static const char *const keep[] = { "--keep-context", NULL };

	e2e_start_wcd(&x, keep);
	round_trip(1, false);
	round_trip(2, false);
	round_trip(1, false);
	T_OK(kill(x.wcd, SIGTERM));
	T_EQ_INT(waitpid(x.wcd, NULL, 0), x.wcd);
	x.wcd = 0;
	e2e_start_wcd(&x, NULL);
	round_trip(1, true);
	round_trip(2, true);
	round_trip(1, true);
	corrupt_wake();
	gpu_dev_close(&dev);
	printf("gpu_life: ok\n");
	return 0;
}
