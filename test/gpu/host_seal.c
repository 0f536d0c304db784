/* SPDX-License-Identifier: MIT */
/*
 * The host backend: pools are memfds that are filled, sealed and mapped
 * read-only. After sealing, a write through a read-only mapping kills the
 * writer with SIGSEGV (checked in a forked child), mmap PROT_WRITE of the
 * memfd fails, ftruncate fails, and a read-write import is refused with a
 * message. The daemon's own writable mapping survives the seal
 * (F_SEAL_FUTURE_WRITE) and rewrites the bytes in place (an in-place
 * update session), seen through every read-only mapping; a pool lent
 * writable is sealed for good (F_SEAL_WRITE), refused while another
 * writable mapping exists, and cannot be rewritten. Also: the 2-D copy,
 * 1-D copies around page boundaries, the synchronous done callback, device
 * names.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gpu.h"
#include "t.h"

static char err[BASE_ERR_LEN];

static void done_cb(void *arg, int res)
{
	int *calls = arg;

	T_EQ_INT(res, 0);
	(*calls)++;
}

/* Forks a child that writes one byte at p; returns how the child ended. */
static int child_write(volatile uint8_t *p)
{
	pid_t pid = fork();
	int st;

	T_ASSERT(pid >= 0);
	if (pid == 0) {
		signal(SIGSEGV, SIG_DFL);
		p[0] = 0x77;
		_exit(0);   /* the write went through: a failure */
	}
	T_ASSERT(waitpid(pid, &st, 0) == pid);
	return st;
}

static void test_devices(void)
{
	struct gpu_dev dev;

	T_OK(gpu_dev_open(&dev, "host", err));
	T_EQ_STR(dev.name, "host");
	T_EQ_STR(dev.be->name, "host");
	T_EQ_INT(dev.ordinal, -1);
	T_EQ_INT(dev.export_kind, GPU_EXPORT_FD);
	gpu_dev_close(&dev);
	T_OK(gpu_dev_open(&dev, "host:r1", err));
	T_EQ_STR(dev.name, "host-r1");
	gpu_dev_close(&dev);
	T_EQ_INT(gpu_dev_open(&dev, "host:bad/name", err), -EINVAL);
	T_HAS(err, "letters, digits");
	T_EQ_INT(gpu_dev_open(&dev, "", err), -EINVAL);
	if (!gpu_cuda_backend()) {
		T_EQ_INT(gpu_dev_open(&dev, "0", err), -ENODEV);
		T_HAS(err, "no CUDA backend");
		T_HAS(err, "--device host");
	}
}

/* 1-D copies at offsets and of widths around page boundaries (the copy
 * is a pwrite into the memfd): the bytes land, and the bytes on either
 * side keep their value, as seen through the pool's mapping. */
static void test_copy_odd(struct gpu_dev *dev, struct gpu_pool *pool)
{
	static const uint64_t offs[] = { 0, 1, 4095, 4097, 8190 };
	static const uint64_t widths[] = { 1, 4095, 4096, 4097, 8191 };
	const struct gpu_backend *be = dev->be;
	uint8_t *src = malloc(8191), *pp = pool->host_ptr;
	int calls = 0;

	T_ASSERT(src);
	for (int i = 0; i < 8191; i++)
		src[i] = (uint8_t)(i * 7 + 3);
	for (size_t a = 0; a < sizeof(offs) / sizeof(offs[0]); a++)
		for (size_t b = 0; b < sizeof(widths) / sizeof(widths[0]); b++) {
			uint64_t o = offs[a], w = widths[b];
			struct gpu_copy c = { .dst_off = o, .src = src,
					      .width = w, .height = 1 };

			memset(pp, 0xa5, pool->alloc_size);
			T_OK(be->copy_to_pool(dev, pool, &c, 0, done_cb,
					      &calls));
			T_ASSERT(memcmp(pp + o, src, w) == 0);
			if (o)
				T_EQ_INT(pp[o - 1], 0xa5);
			T_EQ_INT(pp[o + w], 0xa5);
		}
	T_EQ_INT(calls, 25);
	free(src);
	memset(pp, 0xa5, pool->alloc_size);
}

/* A sealed pool: the kernel refuses every way to change its bytes, the
 * daemon's and a client's read-only mappings fault on a write, and the
 * daemon's kept mapping rewrites it in place. */
static void test_sealed(struct gpu_dev *dev, struct gpu_pool *pool,
			size_t size)
{
	const struct gpu_backend *be = dev->be;
	struct gpu_mapping m;
	uint8_t back[64];
	void *p;
	int st;

	/* the kernel refuses every way to change the bytes */
	errno = 0;
	p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, pool->fd, 0);
	T_ASSERT(p == MAP_FAILED);
	T_EQ_INT(errno, EPERM);
	T_EQ_INT(ftruncate(pool->fd, 1 << 20), -1);
	T_EQ_INT(errno, EPERM);
	T_EQ_INT(ftruncate(pool->fd, 0), -1);
	T_EQ_INT(pwrite(pool->fd, "x", 1, 0), -1);
	T_EQ_INT(errno, EPERM);
	T_EQ_INT(fcntl(pool->fd, F_ADD_SEALS, F_SEAL_FUTURE_WRITE), -1);

	/* the daemon's own read-only mapping faults on a write */
	st = child_write(pool->host_ptr);
	T_ASSERT(WIFSIGNALED(st));
	T_EQ_INT(WTERMSIG(st), SIGSEGV);

	/* client import: read-only maps the same bytes; writes fault */
	T_OK(be->import(dev, pool->fd, NULL, pool->size, false, NULL, &m, err));
	T_ASSERT(!m.writable);
	T_OK(be->read_mapping(dev, &m, 1000, back, 32));
	T_EQ_INT(back[9], 17);
	T_EQ_INT(((const uint8_t *)m.ptr)[size - 1], 0xa5);
	st = child_write((volatile uint8_t *)m.ptr + 5);
	T_ASSERT(WIFSIGNALED(st));
	T_EQ_INT(WTERMSIG(st), SIGSEGV);
	/* mprotect cannot upgrade it either */
	T_EQ_INT(mprotect((void *)m.ptr, 4096, PROT_READ | PROT_WRITE), -1);
	/* the daemon's kept mapping rewrites in place: the same mapping of
	 * the engine sees the new bytes */
	{
		uint8_t nb[3] = { 7, 8, 9 };

		T_OK(gpu_host_pool_rewrite(pool, 5, nb, 3, err));
		T_EQ_INT(((const uint8_t *)m.ptr)[6], 8);
		T_EQ_INT(((const uint8_t *)pool->host_ptr)[7], 9);
		T_EQ_INT(gpu_host_pool_rewrite(pool, pool->alloc_size - 1, nb,
					       3, err), -ERANGE);
	}
	be->unimport(dev, &m);

}

/* A pool lent writable (an update session's): while another mapping is
 * writable the seal fails; then F_SEAL_WRITE, for good. */
static void test_lent_writable(struct gpu_dev *dev)
{
	const struct gpu_backend *be = dev->be;
	struct gpu_pool pool;
	void *p;

	T_OK(be->pool_create(dev, &pool, 4096, err));
	pool.lent_writable = true;
	p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, pool.fd, 0);
	T_ASSERT(p != MAP_FAILED);
	T_ASSERT(be->pool_seal(dev, &pool, err) != 0);
	T_ASSERT(!pool.sealed);
	munmap(p, 4096);
	T_OK(be->pool_seal(dev, &pool, err));
	T_EQ_INT(fcntl(pool.fd, F_GET_SEALS),
		 F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL);
	T_ASSERT(!gpu_host_pool_rewritable(&pool));
	T_EQ_INT(gpu_host_pool_rewrite(&pool, 0, "x", 1, err), -EPERM);
	T_HAS(err, "sealed for good");
	be->pool_release(dev, &pool);

}

int main(void)
{
	struct gpu_dev dev;
	struct gpu_pool pool;
	struct gpu_mapping m;
	const struct gpu_backend *be;
	uint8_t *stage, back[64];
	size_t size = 3 * 4096 + 100;
	int calls = 0;

	test_devices();
	T_OK(gpu_dev_open(&dev, "host", err));
	be = dev.be;
	T_OK(be->pool_create(&dev, &pool, size, err));
	T_EQ_U64(pool.size, size);
	T_EQ_U64(pool.alloc_size, 4 * 4096);
	T_ASSERT(pool.host_ptr && pool.fd >= 0 && !pool.sealed);

	test_copy_odd(&dev, &pool);
	/* fill: direct writes, then a 2-D copy from staging (4 rows of 8
	 * bytes taken from a 16-byte source pitch) */
	memset(pool.host_ptr, 0xa5, size);
	T_OK(be->staging_alloc(&dev, 4096, (void **)&stage, err));
	for (int i = 0; i < 64; i++)
		stage[i] = (uint8_t)i;
	{
		struct gpu_copy c = { .dst_off = 1000, .src = stage, .width = 8,
				      .height = 4, .src_pitch = 16,
				      .dst_pitch = 8 };

		T_OK(be->copy_to_pool(&dev, &pool, &c, 0, done_cb, &calls));
		T_EQ_INT(calls, 1);   /* synchronous */
		c.dst_off = pool.alloc_size - 8;
		T_EQ_INT(be->copy_to_pool(&dev, &pool, &c, 0, done_cb, &calls),
			 -ERANGE);
		T_EQ_INT(calls, 1);
	}
	T_OK(be->copy_from_pool(&dev, &pool, 1000, back, 32));
	for (int r = 0; r < 4; r++)
		for (int k = 0; k < 8; k++)
			T_EQ_INT(back[r * 8 + k], r * 16 + k);

	/* seal: the writable mapping goes, a read-only one replaces it */
	T_OK(be->pool_seal(&dev, &pool, err));
	T_ASSERT(pool.sealed);
	T_ASSERT(pool.host_ptr);
	T_EQ_INT(fcntl(pool.fd, F_GET_SEALS),
		 F_SEAL_FUTURE_WRITE | F_SEAL_GROW | F_SEAL_SHRINK |
		 F_SEAL_SEAL);
	T_ASSERT(gpu_host_pool_rewritable(&pool));
	T_OK(be->copy_from_pool(&dev, &pool, 1000, back, 32));
	T_EQ_INT(back[31], 3 * 16 + 7);
	T_EQ_INT(((uint8_t *)pool.host_ptr)[0], 0xa5);
	{
		struct gpu_copy c = { .dst_off = 0, .src = stage, .width = 8,
				      .height = 1 };

		T_EQ_INT(be->copy_to_pool(&dev, &pool, &c, 0, NULL, NULL),
			 -EPERM);
	}

	test_sealed(&dev, &pool, size);

	/* a read-write import of a sealed pool is refused with a reason */
	T_EQ_INT(be->import(&dev, pool.fd, NULL, pool.size, true, NULL, &m, err),
		 -EPERM);
	T_HAS(err, "sealed");
	T_HAS(err, "read-only");
	/* an fd smaller than announced */
	T_EQ_INT(be->import(&dev, pool.fd, NULL, pool.alloc_size + 1, false, NULL,
			    &m, err), -EINVAL);
	T_EQ_INT(be->import(&dev, -1, NULL, 10, false, NULL, &m, err), -EINVAL);

	be->pool_release(&dev, &pool);
	T_EQ_INT(pool.fd, -1);

	test_lent_writable(&dev);

	be->staging_free(&dev, stage, 4096);
	gpu_dev_close(&dev);
	printf("host backend: ok\n");
	return 0;
}
