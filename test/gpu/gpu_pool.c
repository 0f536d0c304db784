/* SPDX-License-Identifier: MIT */
/*
 * The CUDA backend in one process: open by index and by UUID (and the
 * errors for a missing index, an unknown UUID, a bad spec), VMM and legacy
 * pools rounded to the granularity, pinned staging, asynchronous copies on
 * every stream with one completion each, a 2-D copy whose destination gaps
 * stay untouched, bounds checks, seal, device memory accounting, and idle
 * (the context released, the pools alive through their fds).
 * Skips (77) where the build has no CUDA or no GPU is found.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <liburing.h>
#include <unistd.h>

#include "gpu.h"
#include "t.h"
#include "t_wait.h"

static struct t_count done_count;
static atomic_int done_bad;

static void on_done(void *arg, int res)
{
	if (res != 0 || arg != &done_count)
		atomic_fetch_add(&done_bad, 1);
	t_count_add(&done_count, 1);
}

/* Waits (10 s at most) until n completions have arrived. */
static void wait_done(int n)
{
	t_count_wait(&done_count, n, 10000);
	T_EQ_INT(t_count_get(&done_count), n);
	T_EQ_INT(atomic_load(&done_bad), 0);
}

static void check_specs(const struct gpu_backend *be, const struct gpu_dev *d0)
{
	char err[BASE_ERR_LEN], up[GPU_NAME_LEN];
	struct gpu_dev d;
	size_t i;

	T_EQ_INT(be->open(&d, "99", err), -ENODEV);
	T_HAS(err, "CUDA device 99 does not exist");
	T_EQ_INT(be->open(&d, "GPU-00000000-0000-0000-0000-000000000000", err), -ENODEV);
	T_HAS(err, "no CUDA device has UUID GPU-00000000");
	T_EQ_INT(be->open(&d, "zero", err), -EINVAL);
	T_HAS(err, "bad CUDA device \"zero\"");

	/* the UUID opens the same device, in either case */
	for (i = 0; i < sizeof(up) && d0->uuid[i]; i++)
		up[i] = (char)(d0->uuid[i] >= 'a' && d0->uuid[i] <= 'f' ?
			       d0->uuid[i] - 32 : d0->uuid[i]);
	up[i] = '\0';
	T_OK(be->open(&d, up, err));
	T_EQ_INT(d.ordinal, d0->ordinal);
	T_EQ_STR(d.name, d0->uuid);
	be->close(&d);
}

/* Contiguous copies of the whole staging buffer, split over 8 streams. */
static void check_copies(const struct gpu_backend *be, struct gpu_dev *dev,
			 struct gpu_pool *pool, unsigned char *stage, size_t len)
{
	unsigned char *back = malloc(len);
	size_t chunk = len / 8, off;
	struct gpu_copy c;
	int n = 0;

	T_ASSERT(back);
	t_fill(stage, len, 42);
	t_count_set(&done_count, 0);
	for (off = 0; off < len; off += chunk, n++) {
		memset(&c, 0, sizeof(c));
		c.dst_off = off;
		c.src = stage + off;
		c.width = off + chunk <= len ? chunk : len - off;
		c.height = 1;
		T_OK(be->copy_to_pool(dev, pool, &c, (unsigned)n, on_done, &done_count));
	}
	wait_done(n);
	T_OK(be->copy_from_pool(dev, pool, 0, back, len));
	T_ASSERT(memcmp(back, stage, len) == 0);

	/* out of bounds: rejected before anything is queued */
	c.dst_off = pool->alloc_size - 10;
	c.width = 11;
	c.height = 1;
	T_EQ_INT(be->copy_to_pool(dev, pool, &c, 0, on_done, &done_count), -EINVAL);
	T_EQ_INT(be->copy_from_pool(dev, pool, pool->alloc_size - 10, back, 11), -EINVAL);
	free(back);
}

/* A column split: 37 rows of 1000 bytes from a 4096-byte source pitch into
 * a 1536-byte destination pitch; the bytes between rows keep their value. */
static void check_2d(const struct gpu_backend *be, struct gpu_dev *dev,
		     struct gpu_pool *pool, unsigned char *stage)
{
	const size_t w = 1000, h = 37, sp = 4096, dp = 1536, base = 256 * 7;
	size_t span = (h - 1) * dp + w, r;
	unsigned char *before = malloc(span), *after = malloc(span);
	struct gpu_copy c;

	T_ASSERT(before && after);
	T_OK(be->copy_from_pool(dev, pool, base, before, span));
	t_fill(stage, h * sp, 7);
	c.dst_off = base;
	c.src = stage;
	c.width = w;
	c.height = h;
	c.src_pitch = sp;
	c.dst_pitch = dp;
	t_count_set(&done_count, 0);
	T_OK(be->copy_to_pool(dev, pool, &c, 3, on_done, &done_count));
	wait_done(1);
	T_OK(be->copy_from_pool(dev, pool, base, after, span));
	for (r = 0; r < h; r++) {
		T_ASSERT(memcmp(after + r * dp, stage + r * sp, w) == 0);
		if (r + 1 < h)
			T_ASSERT(memcmp(after + r * dp + w, before + r * dp + w,
					dp - w) == 0);
	}
	c.dst_pitch = w - 1;   /* rows would overlap */
	T_EQ_INT(be->copy_to_pool(dev, pool, &c, 0, on_done, &done_count), -EINVAL);
	free(before);
	free(after);
}

static void check_pool(const struct gpu_backend *be, struct gpu_dev *dev,
		       bool legacy, unsigned char *stage, size_t stage_len)
{
	char err[BASE_ERR_LEN];
	struct gpu_pool pool;
	uint64_t size = 3 * dev->granularity + 12345;

	dev->export_kind = legacy ? GPU_EXPORT_IPC_HANDLE : GPU_EXPORT_FD;
	T_OK(be->pool_create(dev, &pool, size, err));
	T_EQ_U64(pool.size, size);
	T_EQ_U64(pool.alloc_size, 4 * dev->granularity);
	T_ASSERT(pool.dev_ptr != 0);
	if (legacy) {
		static const unsigned char zero[GPU_IPC_HANDLE_LEN];

		T_EQ_INT(pool.fd, -1);
		T_ASSERT(memcmp(pool.ipc_handle, zero, sizeof(zero)) != 0);
	} else {
		T_CMP_INT(pool.fd, >=, 0);
	}
	check_copies(be, dev, &pool, stage, stage_len < size ? stage_len : size);
	check_2d(be, dev, &pool, stage);
	T_OK(be->pool_seal(dev, &pool, err));
	T_ASSERT(pool.sealed);
	be->pool_release(dev, &pool);
	T_EQ_INT(pool.fd, -1);
	T_EQ_INT(be->pool_create(dev, &pool, 0, err), -EINVAL);
	dev->export_kind = GPU_EXPORT_FD;
}

/* A 1 GiB pool takes at least 1 GiB of device memory and gives it back. */
static void check_mem(const struct gpu_backend *be, struct gpu_dev *dev)
{
	uint64_t f0, f1, f2, t;
	char err[BASE_ERR_LEN];
	struct gpu_pool pool;

	T_OK(be->mem_info(dev, &f0, &t));
	T_OK(be->pool_create(dev, &pool, 1ull << 30, err));
	T_OK(be->mem_info(dev, &f1, &t));
	T_CMP_INT(f0 - f1, >=, 1ll << 30);
	be->pool_release(dev, &pool);
	T_OK(be->mem_info(dev, &f2, &t));
	T_CMP_INT(f2, >=, f1 + (1ull << 30));
	printf("1 GiB pool: device free %llu -> %llu -> %llu MiB of %llu\n",
	       (unsigned long long)(f0 >> 20), (unsigned long long)(f1 >> 20),
	       (unsigned long long)(f2 >> 20), (unsigned long long)(t >> 20));
}

/* The loader's premise: staging memory registers with io_uring as a fixed
 * buffer (cudaHostAlloc memory would fail with EFAULT), a fixed read lands
 * in it, and from there it copies into a pool. */
static void check_uring(const struct gpu_backend *be, struct gpu_dev *dev,
			unsigned char *stage, size_t len)
{
	char path[] = "/tmp/wct_gpu.XXXXXX", err[BASE_ERR_LEN];
	const size_t n = 1 << 20;
	unsigned char *want = malloc(n), *back = malloc(n);
	struct io_uring_cqe *cqe;
	struct gpu_copy c = { .height = 1, .width = n };
	struct io_uring ring;
	struct gpu_pool pool;
	struct iovec iov = { stage, len };
	int fd, ret;

	T_ASSERT(want && back);
	ret = io_uring_queue_init(4, &ring, 0);
	if (ret < 0) {
		printf("io_uring unavailable (%d): staging registration not checked\n", ret);
		free(want);
		free(back);
		return;
	}
	T_OK(io_uring_register_buffers(&ring, &iov, 1));
	fd = mkstemp(path);
	T_CMP_INT(fd, >=, 0);
	unlink(path);
	t_fill(want, n, 99);
	T_EQ_INT(write(fd, want, n), n);
	io_uring_prep_read_fixed(io_uring_get_sqe(&ring), fd, stage, n, 0, 0);
	T_EQ_INT(io_uring_submit(&ring), 1);
	T_OK(io_uring_wait_cqe(&ring, &cqe));
	T_EQ_INT(cqe->res, n);
	io_uring_cqe_seen(&ring, cqe);
	close(fd);

	T_OK(be->pool_create(dev, &pool, n, err));
	c.src = stage;
	t_count_set(&done_count, 0);
	T_OK(be->copy_to_pool(dev, &pool, &c, 0, on_done, &done_count));
	wait_done(1);
	T_OK(be->copy_from_pool(dev, &pool, 0, back, n));
	T_ASSERT(memcmp(back, want, n) == 0);
	be->pool_release(dev, &pool);
	io_uring_unregister_buffers(&ring);
	io_uring_queue_exit(&ring);
	free(want);
	free(back);
}

/* idle: the context goes, two VMM pools live on through their fds alone:
 * an engine-style import of one reads the right bytes, a copy out of the
 * other maps it again in a fresh context; idle again with one pool
 * re-mapped and one parked; a legacy pool refuses idle (-ENOTSUP). */
static void check_idle(const struct gpu_backend *be, struct gpu_dev *dev)
{
	const size_t n = 5u << 20;
	unsigned char *want[2], *stage, *back = malloc(n);
	struct gpu_pool pools[2], legacy, *pp[2] = { &pools[0], &pools[1] };
	struct gpu_pool *lp[1] = { &legacy };
	struct gpu_mapping m;
	char err[BASE_ERR_LEN];

	T_ASSERT(back);
	T_OK(be->staging_alloc(dev, 2 * n, (void **)&stage, err));
	t_count_set(&done_count, 0);
	for (int i = 0; i < 2; i++) {
		struct gpu_copy c = { .src = stage + i * n, .width = n, .height = 1 };

		want[i] = malloc(n);
		T_ASSERT(want[i]);
		t_fill(want[i], n, 1000 + (uint64_t)i);
		memcpy(stage + i * n, want[i], n);
		T_OK(be->pool_create(dev, &pools[i], n, err));
		T_OK(be->copy_to_pool(dev, &pools[i], &c, (unsigned)i, on_done, &done_count));
	}
	wait_done(2);
	T_OK(be->pool_seal(dev, &pools[0], err));
	T_OK(be->pool_seal(dev, &pools[1], err));
	be->staging_free(dev, stage, 2 * n);

	T_OK(be->idle(dev, pp, 2, err));
	T_EQ_U64(pools[0].dev_ptr, 0);
	T_CMP_INT(pools[0].fd, >=, 0);
	/* an engine's import of the parked pool */
	T_OK(be->import(dev, pools[0].fd, NULL, n, false, NULL, &m, err));
	T_OK(be->read_mapping(dev, &m, 0, back, n));
	T_ASSERT(memcmp(back, want[0], n) == 0);
	be->unimport(dev, &m);
	/* the daemon's own use maps it again */
	T_OK(be->copy_from_pool(dev, &pools[1], 0, back, n));
	T_ASSERT(pools[1].dev_ptr != 0);
	T_ASSERT(memcmp(back, want[1], n) == 0);
	T_OK(be->idle(dev, pp, 2, err));
	T_OK(be->copy_from_pool(dev, &pools[0], 0, back, n));
	T_ASSERT(memcmp(back, want[0], n) == 0);
	be->pool_release(dev, &pools[0]);   /* re-mapped */
	be->pool_release(dev, &pools[1]);   /* parked */

	dev->export_kind = GPU_EXPORT_IPC_HANDLE;
	T_OK(be->pool_create(dev, &legacy, n, err));
	dev->export_kind = GPU_EXPORT_FD;
	T_EQ_INT(be->idle(dev, lp, 1, err), -ENOTSUP);
	T_HAS(err, "legacy IPC pools live in the context");
	T_OK(be->copy_from_pool(dev, &legacy, 0, back, 4096));
	be->pool_release(dev, &legacy);
	printf("idle: context released twice, pools read back from their fds\n");
	free(want[0]);
	free(want[1]);
	free(back);
}

int main(void)
{
	const struct gpu_backend *be = gpu_cuda_backend();
	size_t stage_len = (64u << 20) + 1;
	char err[BASE_ERR_LEN];
	unsigned char *stage;
	struct gpu_dev dev;
	int ret;

	t_count_init(&done_count);
	T_SKIP_IF(!be, "built without CUDA");
	ret = be->open(&dev, "0", err);
	if (ret == -ENODEV) {
		/* the error a user meets on a machine without a GPU */
		T_HAS(err, "no CUDA device found");
		T_HAS(err, "use --device host");
		T_SKIP_IF(1, "%s", err);
	}
	T_OK(ret);
	printf("device %s, cc %d.%d, granularity %llu\n", dev.name, dev.cc_major,
	       dev.cc_minor, (unsigned long long)dev.granularity);
	T_EQ_INT(strncmp(dev.name, "GPU-", 4), 0);
	T_EQ_INT(strlen(dev.name), 40);
	T_ASSERT(dev.granularity && !(dev.granularity & (dev.granularity - 1)));
	check_specs(be, &dev);

	T_OK(be->staging_alloc(&dev, stage_len, (void **)&stage, err));
	check_uring(be, &dev, stage, stage_len);
	check_pool(be, &dev, false, stage, stage_len);
	check_pool(be, &dev, true, stage, stage_len);
	check_mem(be, &dev);
	be->staging_free(&dev, stage, stage_len);
	check_idle(be, &dev);
	be->close(&dev);
	return 0;
}
