/* SPDX-License-Identifier: MIT */
/*
 * The host backend: pools are memfds, so the whole daemon/client protocol
 * runs (and is tested) on a machine without a GPU.
 *
 * Life of a pool:
 *   pool_create  memfd_create(MFD_CLOEXEC | MFD_ALLOW_SEALING), ftruncate,
 *                mmap MAP_SHARED read-write: host_ptr, the loader's target.
 *   fill         io_uring reads straight into host_ptr (the direct path), or
 *                copy_to_pool from staging memory (the staged path).
 *   pool_seal    a pool only the daemon ever mapped writable (a load's):
 *                F_SEAL_FUTURE_WRITE | F_SEAL_GROW | F_SEAL_SHRINK |
 *                F_SEAL_SEAL with the daemon's writable mapping kept (in
 *                priv) for an in-place update session (gpu_host_pool_
 *                rewrite); nobody can map the memfd writable or write(2)
 *                it any more, and a read-only mapping cannot be mprotect()ed
 *                writable (the kernel clears VM_MAYWRITE). A pool lent
 *                writable to another process (lent_writable: an update
 *                session's): munmap the writable mapping and seal with
 *                F_SEAL_WRITE, which fails while any process still maps it
 *                writable (the proof that the trainer let go) and which no
 *                mapping survives: such a pool can never be rewritten.
 *                Either way host_ptr then points at a read-only mapping
 *                that the daemon keeps for hashing and verification.
 *   export       the memfd itself, over SCM_RIGHTS.
 *   import       (client) mmap PROT_READ; a read-write import of a sealed
 *                memfd is refused with an error (the kernel would refuse
 *                PROT_WRITE anyway: EPERM).
 *
 * copy_to_pool is a pwrite into the memfd (one per row for dim-1 splits)
 * that calls done(arg, 0) synchronously, on the caller's thread, before it
 * returns: the staged loader must accept a completion from inside its own
 * submit call. pwrite, not a memcpy into host_ptr: shmem's write path does
 * not zero a page it fills whole, where the page fault of a store through
 * the mapping zeroes every page first (issue 17: the largest single cost
 * of a cold host load), and a write that cannot get memory comes back as
 * an error instead of a SIGBUS.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gpu.h"
#include "paths.h"

/* every sealed pool has these, and F_SEAL_WRITE or F_SEAL_FUTURE_WRITE */
#define HOST_SEALS_SIZE (F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL)
#define HOST_SEALS_WRITE (F_SEAL_WRITE | F_SEAL_FUTURE_WRITE)

static bool seals_ok(int seals)
{
	return (seals & HOST_SEALS_SIZE) == HOST_SEALS_SIZE &&
	       (seals & HOST_SEALS_WRITE);
}

static int host_open(struct gpu_dev *dev, const char *spec, char *err)
{
	char perr[BASE_ERR_LEN];
	char name[PATHS_DEVICE_MAX + 1];
	int ret;

	memset(dev, 0, sizeof(*dev));
	if (!paths_is_host_spec(spec))
		return base_errf(err, EINVAL,
			    "device '%s' is not a host device (host or host:NAME)",
			    spec);
	ret = paths_device_name(spec, name, sizeof(name), perr);
	if (ret)
		return base_errf(err, -ret, "%s", perr);
	dev->be = &gpu_host_backend;
	snprintf(dev->name, sizeof(dev->name), "%s", name);
	snprintf(dev->uuid, sizeof(dev->uuid), "%s", name);
	dev->ordinal = -1;
	dev->export_kind = GPU_EXPORT_FD;
	dev->granularity = (uint64_t)sysconf(_SC_PAGESIZE);
	return 0;
}

static void host_close(struct gpu_dev *dev)
{
	dev->be = NULL;
}

static int host_mem_info(struct gpu_dev *dev, uint64_t *free_b,
			 uint64_t *total_b)
{
	long page = sysconf(_SC_PAGESIZE);
	long avail = sysconf(_SC_AVPHYS_PAGES);
	long total = sysconf(_SC_PHYS_PAGES);

	if (page <= 0 || avail < 0 || total <= 0)
		return -EIO;
	*free_b = (uint64_t)avail * (uint64_t)page;
	*total_b = (uint64_t)total * (uint64_t)page;
	return 0;
}

static int host_pool_create(struct gpu_dev *dev, struct gpu_pool *pool,
			    uint64_t size, char *err)
{
	uint64_t alloc = gpu_align_up(size ? size : 1, dev->granularity);
	void *p;
	int fd, e;

	memset(pool, 0, sizeof(*pool));
	pool->fd = -1;
	fd = memfd_create("wcache-pool", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return base_errf(err, errno, "memfd_create failed: %s",
			    strerror(errno));
	if (ftruncate(fd, (off_t)alloc)) {
		e = errno;
		close(fd);
		return base_errf(err, e,
			    "cannot size a %llu-byte host pool: %s (is /dev/shm or memory short?)",
			    (unsigned long long)alloc, strerror(e));
	}
	p = mmap(NULL, alloc, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		e = errno;
		close(fd);
		return base_errf(err, e, "cannot map a %llu-byte host pool: %s",
			    (unsigned long long)alloc, strerror(e));
	}
	pool->size = size;
	pool->alloc_size = alloc;
	pool->host_ptr = p;
	pool->dev_ptr = (uintptr_t)p;
	pool->fd = fd;
	return 0;
}

static int host_staging_alloc(struct gpu_dev *dev, size_t size, void **ptr,
			      char *err)
{
	void *p = mmap(NULL, size, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);

	if (p == MAP_FAILED)
		return base_errf(err, errno, "cannot map %zu bytes of staging: %s",
			    size, strerror(errno));
	*ptr = p;
	return 0;
}

static void host_staging_free(struct gpu_dev *dev, void *ptr, size_t size)
{
	if (ptr)
		munmap(ptr, size);
}

/* Host staging is never pinned: host_map is staging_alloc, pinning is
 * nothing. */
static int host_staging_pin(struct gpu_dev *dev, void *ptr, size_t size,
			    char *err)
{
	return 0;
}

/* Synchronous: copies, then calls done(arg, 0) before returning. */
static int host_copy_to_pool(struct gpu_dev *dev, struct gpu_pool *pool,
			     const struct gpu_copy *c, unsigned stream,
			     gpu_done_fn done, void *arg)
{
	uint64_t last;
	const uint8_t *src = c->src;

	if (pool->sealed || !pool->host_ptr || pool->fd < 0)
		return -EPERM;
	if (c->height == 0 || c->width == 0) {
		if (done)
			done(arg, 0);
		return 0;
	}
	if (c->height > 1 && (c->dst_pitch < c->width || c->src_pitch < c->width))
		return -EINVAL;
	last = c->dst_off + (uint64_t)(c->height - 1) * c->dst_pitch + c->width;
	if (last > pool->alloc_size || last < c->dst_off)
		return -ERANGE;
	for (size_t r = 0; r < c->height; r++) {
		const uint8_t *p = src + r * c->src_pitch;
		uint64_t off = c->dst_off + r * c->dst_pitch;

		for (uint64_t n = 0; n < c->width;) {
			ssize_t k = pwrite(pool->fd, p + n, c->width - n,
					   (off_t)(off + n));

			if (k < 0 && errno == EINTR)
				continue;
			if (k <= 0)
				return k < 0 ? -errno : -EIO;
			n += (uint64_t)k;
		}
	}
	if (done)
		done(arg, 0);
	return 0;
}

static int host_copy_from_pool(struct gpu_dev *dev, struct gpu_pool *pool,
			       uint64_t off, void *dst, size_t len)
{
	if (!pool->host_ptr)
		return -EINVAL;
	if (off > pool->alloc_size || len > pool->alloc_size - off)
		return -ERANGE;
	memcpy(dst, (const uint8_t *)pool->host_ptr + off, len);
	return 0;
}

/* gpu.h's pool_copy: a memcpy between the two mappings (a partial
 * update's kept tensors; dst not sealed yet). */
static int host_pool_copy(struct gpu_dev *dev, struct gpu_pool *dst,
			  uint64_t off_dst, struct gpu_pool *src,
			  uint64_t off_src, uint64_t len, char *err)
{
	(void)dev;
	if (!dst->host_ptr || !src->host_ptr || dst->sealed ||
	    off_dst > dst->alloc_size || len > dst->alloc_size - off_dst ||
	    off_src > src->alloc_size || len > src->alloc_size - off_src)
		return base_errf(err, EINVAL, "copying %llu bytes between host pools (at %llu to %llu) is past a pool's end or into a sealed pool",
				 (unsigned long long)len,
				 (unsigned long long)off_src,
				 (unsigned long long)off_dst);
	memcpy((uint8_t *)dst->host_ptr + off_dst,
	       (const uint8_t *)src->host_ptr + off_src, len);
	return 0;
}

static int host_copy_wait(struct gpu_dev *dev, char *err)
{
	return 0;
}

static int host_pool_seal(struct gpu_dev *dev, struct gpu_pool *pool,
			  char *err)
{
	bool keep = !pool->lent_writable && pool->host_ptr;
	int seals = HOST_SEALS_SIZE |
		    (keep ? F_SEAL_FUTURE_WRITE : F_SEAL_WRITE);
	void *p;

	if (pool->sealed)
		return 0;
	if (keep)
		pool->priv = pool->host_ptr;
	else if (pool->host_ptr && munmap(pool->host_ptr, pool->alloc_size))
		return base_errf(err, errno, "munmap of a pool failed: %s",
			    strerror(errno));
	pool->host_ptr = NULL;
	pool->dev_ptr = 0;
	if (fcntl(pool->fd, F_ADD_SEALS, seals))
		return base_errf(err, errno,
			    "cannot seal a host pool (F_ADD_SEALS): %s",
			    strerror(errno));
	pool->sealed = true;
	p = mmap(NULL, pool->alloc_size, PROT_READ, MAP_SHARED, pool->fd, 0);
	if (p == MAP_FAILED)
		return base_errf(err, errno,
			    "cannot map a sealed pool read-only: %s",
			    strerror(errno));
	pool->host_ptr = p;
	pool->dev_ptr = (uintptr_t)p;
	return 0;
}

bool gpu_host_pool_rewritable(const struct gpu_pool *pool)
{
	return pool->sealed && pool->priv;
}

int gpu_host_pool_rewrite(struct gpu_pool *pool, uint64_t off,
			  const void *src, uint64_t len, char *err)
{
	if (!gpu_host_pool_rewritable(pool))
		return base_errf(err, EPERM,
			    "this pool was sealed for good (F_SEAL_WRITE: it was lent writable to a trainer, or came through a handover), so it cannot be rewritten in place");
	if (off > pool->alloc_size || len > pool->alloc_size - off)
		return base_errf(err, ERANGE,
			    "a rewrite of %llu bytes at %llu runs past the pool's %llu",
			    (unsigned long long)len, (unsigned long long)off,
			    (unsigned long long)pool->alloc_size);
	memcpy((uint8_t *)pool->priv + off, src, len);
	return 0;
}

static void host_pool_release(struct gpu_dev *dev, struct gpu_pool *pool)
{
	if (pool->host_ptr)
		munmap(pool->host_ptr, pool->alloc_size);
	if (pool->priv)
		munmap(pool->priv, pool->alloc_size);
	pool->priv = NULL;
	if (pool->fd >= 0)
		close(pool->fd);
	pool->host_ptr = NULL;
	pool->dev_ptr = 0;
	pool->fd = -1;
}

static int host_pool_adopt(struct gpu_dev *dev, struct gpu_pool *pool, int fd,
			   uint64_t size, uint64_t alloc_size, bool sealed,
			   char *err)
{
	struct stat st;
	int seals;
	void *p;

	memset(pool, 0, sizeof(*pool));
	pool->fd = -1;
	if (fstat(fd, &st))
		return base_errf(err, errno, "fstat of a handed-over pool failed: %s",
				strerror(errno));
	if ((uint64_t)st.st_size != alloc_size || size > alloc_size ||
	    alloc_size % dev->granularity)
		return base_errf(err, EINVAL,
				"a handed-over pool holds %lld bytes where %llu (for %llu) were announced: the old daemon's state is not what it says",
				(long long)st.st_size,
				(unsigned long long)alloc_size,
				(unsigned long long)size);
	seals = fcntl(fd, F_GET_SEALS);
	if (seals < 0)
		return base_errf(err, errno,
				"a handed-over pool is not a memfd (F_GET_SEALS: %s)",
				strerror(errno));
	if (sealed && !seals_ok(seals))
		return base_errf(err, EPERM,
				"a handed-over pool announced as sealed has seals 0x%x, not 0x%x and a write seal: refusing to serve bytes an engine could change",
				seals, HOST_SEALS_SIZE);
	p = mmap(NULL, alloc_size, sealed ? PROT_READ : PROT_READ | PROT_WRITE,
		 MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		return base_errf(err, errno,
				"cannot map a handed-over %llu-byte pool: %s",
				(unsigned long long)alloc_size, strerror(errno));
	pool->size = size;
	pool->alloc_size = alloc_size;
	pool->host_ptr = p;
	pool->dev_ptr = (uintptr_t)p;
	pool->fd = fd;
	pool->sealed = sealed;
	return 0;
}

static int host_import(struct gpu_dev *dev, int fd, const unsigned char *handle,
		       uint64_t size, bool writable, void *at,
		       struct gpu_mapping *m, char *err)
{
	struct stat st;
	int seals;
	void *p;

	memset(m, 0, sizeof(*m));
	if (fd < 0)
		return base_errf(err, EINVAL,
			    "the host backend imports pools by file descriptor, and none was given");
	if (fstat(fd, &st))
		return base_errf(err, errno, "fstat of a pool fd failed: %s",
			    strerror(errno));
	if ((uint64_t)st.st_size < size)
		return base_errf(err, EINVAL,
			    "pool fd holds %lld bytes, fewer than the %llu announced",
			    (long long)st.st_size, (unsigned long long)size);
	seals = fcntl(fd, F_GET_SEALS);
	if (writable && seals >= 0 && (seals & HOST_SEALS_WRITE))
		return base_errf(err, EPERM,
			    "a read-write import of a sealed pool is refused: the daemon seals its pools so that no engine can change a shared byte; attach read-only");
	if (size == 0)
		size = 1;
	p = mmap(at, size, writable ? PROT_READ | PROT_WRITE : PROT_READ,
		 MAP_SHARED | (at ? MAP_FIXED : 0), fd, 0);
	if (p == MAP_FAILED)
		return base_errf(err, errno, "cannot map a %llu-byte pool: %s",
			    (unsigned long long)size, strerror(errno));
	m->size = size;
	m->ptr = p;
	m->writable = writable;
	m->in_reserve = at != NULL;
	return 0;
}

static int host_read_mapping(struct gpu_dev *dev, const struct gpu_mapping *m,
			     uint64_t off, void *dst, size_t len)
{
	if (off > m->size || len > m->size - off)
		return -ERANGE;
	memcpy(dst, (const uint8_t *)m->ptr + off, len);
	return 0;
}

/* In a reserved range the pool's pages go back to PROT_NONE (unmapped, the
 * range still the reserver's), else away. */
static void host_unimport(struct gpu_dev *dev, struct gpu_mapping *m)
{
	if (m->ptr && m->in_reserve)
		mmap((void *)m->ptr, m->size, PROT_NONE,
		     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
	else if (m->ptr)
		munmap((void *)m->ptr, m->size);
	m->ptr = NULL;
}

/* Address space for imports (gpu.h): PROT_NONE anonymous memory that the
 * imports replace with MAP_FIXED and give back to PROT_NONE. */
static int host_reserve(struct gpu_dev *dev, uint64_t size, void **at, char *err)
{
	void *p = mmap(NULL, size, PROT_NONE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);

	if (p == MAP_FAILED)
		return base_errf(err, errno, "cannot reserve %llu bytes of address space: %s",
			       (unsigned long long)size, strerror(errno));
	*at = p;
	return 0;
}

static void host_unreserve(struct gpu_dev *dev, void *at, uint64_t size)
{
	if (at)
		munmap(at, size);
}

const struct gpu_backend gpu_host_backend = {
	.name = "host",
	.open = host_open,
	.close = host_close,
	.mem_info = host_mem_info,
	.pool_create = host_pool_create,
	.staging_alloc = host_staging_alloc,
	.staging_free = host_staging_free,
	.host_map = host_staging_alloc,
	.staging_pin = host_staging_pin,
	.host_unmap = host_staging_free,
	.copy_to_pool = host_copy_to_pool,
	.copy_from_pool = host_copy_from_pool,
	.copy_from_pool_async = host_copy_from_pool,
	.copy_wait = host_copy_wait,
	.pool_copy = host_pool_copy,
	.pool_seal = host_pool_seal,
	.pool_release = host_pool_release,
	.pool_adopt = host_pool_adopt,
	.import = host_import,
	.reserve = host_reserve,
	.unreserve = host_unreserve,
	.read_mapping = host_read_mapping,
	.unimport = host_unimport,
	.write_mapping = NULL,
};
