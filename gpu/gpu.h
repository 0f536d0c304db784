/* SPDX-License-Identifier: MIT */
/*
 * Memory backends behind one interface: pools of device (or host) memory that
 * the daemon fills, seals and exports, and that engines import read-only.
 *
 *   host  memfd_create pools, filled by reads straight into the daemon's
 *         mapping, sealed against writes/growth/shrinking, exported as fds;
 *         engines mmap them PROT_READ. Always built: CI exercises it.
 *   cuda  cuMemCreate pools with POSIX-fd handles (default), or cudaMalloc +
 *         cudaIpcGetMemHandle (legacy). Built where a CUDA toolkit is found;
 *         nothing outside gpu/ includes a CUDA header.
 *
 * Functions return 0 or -errno and, where a user can meet the failure, write
 * one actionable sentence into err (char err[BASE_ERR_LEN], with base_errf: the
 * one error buffer and helper of every layer, proto/base/err.h). No printing, no
 * exit.
 */
#ifndef WC_GPU_H
#define WC_GPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"

#define GPU_NAME_LEN 64
#define GPU_IPC_HANDLE_LEN 64
#define GPU_POOLS_MAX 64         /* pools per model version */
#define GPU_POOL_ALIGN 256       /* tensor packing alignment inside a pool */
#define GPU_HASH_MIN_LEN 240     /* hash_step: longer tensors only (XXH3's long path) */

enum gpu_export {
	GPU_EXPORT_FD = 1,       /* memfd or VMM POSIX fd over SCM_RIGHTS */
	GPU_EXPORT_IPC_HANDLE,   /* legacy 64-byte cudaIpcMemHandle */
};

struct gpu_backend;

/* A device opened by the daemon or by a client. */
struct gpu_dev {
	const struct gpu_backend *be;
	char name[GPU_NAME_LEN];   /* file-name safe: "host", "host-2", "GPU-<uuid>" */
	char uuid[GPU_NAME_LEN];   /* "GPU-xxxxxxxx-...", or the host name */
	int ordinal;               /* CUDA ordinal, -1 for host */
	int cc_major, cc_minor;    /* compute capability, 0 for host */
	/* GPU_EXPORT_FD after open. The daemon selects legacy CUDA IPC
	 * (`--ipc legacy`) by setting GPU_EXPORT_IPC_HANDLE here after open
	 * and before the first pool_create (cuda backend only; pools remember
	 * the kind they were created with). */
	enum gpu_export export_kind;
	/* cuda: hash_batch may chain a batch's longest tensors on host cores
	 * (gpu/cuda_hash_host.c), pinning host memory for their sums at the
	 * first such batch (74 ms for llama-8b's 128 MiB on an H100 host),
	 * kept for the next hash until the device idles. The daemon sets it
	 * around an update's commit, where the hash bounds the reply and
	 * every later commit reuses that memory; loads, wakes and verifies
	 * leave it false, so their first batch never waits for a pin. */
	bool hash_host_chains;
	uint64_t granularity;      /* pool sizes are multiples of this */
	void *priv;
};

/* One large allocation; tensors are packed inside at GPU_POOL_ALIGN. */
struct gpu_pool {
	uint64_t size;             /* bytes asked for */
	uint64_t alloc_size;       /* size rounded up to the granularity */
	void *host_ptr;            /* daemon: writable CPU mapping (host backend
				      until sealed; NULL for cuda) */
	uint64_t dev_ptr;          /* cuda: device address; host: (uintptr_t)host_ptr */
	int fd;                    /* exportable fd, -1 when none */
	unsigned char ipc_handle[GPU_IPC_HANDLE_LEN];
	bool sealed;
	/* the daemon lent it writable to another process (an update
	 * session's pools): the host backend's seal then proves that process
	 * let go (gpu/host.c) */
	bool lent_writable;
	void *priv;
};

/* A pool as the engine sees it after import. */
struct gpu_mapping {
	uint64_t size;
	const void *ptr;           /* host: CPU pointer; cuda: device pointer */
	bool writable;
	bool in_reserve;           /* mapped into a reserve()d range */
	void *priv;
};

/* Called from a backend thread (a CUDA host function) when an async copy is
 * done; it must only hand off (e.g. rx_wake_post), never block. */
typedef void (*gpu_done_fn)(void *arg, int res);

struct gpu_copy {
	uint64_t dst_off;          /* byte offset in the pool */
	const void *src;           /* host source (staging memory) */
	size_t width;              /* bytes per row */
	size_t height;             /* rows; 1 for a contiguous copy */
	size_t src_pitch;          /* bytes between source rows */
	size_t dst_pitch;          /* bytes between destination rows */
};

/* When a CUDA device's context is created (a first one costs 0.1 to 0.5 s):
 * in open (GPU_CTX_NOW: what engines get), on a thread started by open,
 * while the caller goes on (GPU_CTX_ASYNC: wcd parses and plans meanwhile;
 * the first call that needs it waits for it), or by the first call that
 * needs it (GPU_CTX_LAZY: wcd --takeover, which adopts parked pools and
 * needs none unless it re-hashes). */
enum gpu_ctx { GPU_CTX_NOW, GPU_CTX_ASYNC, GPU_CTX_LAZY };

/* One whole tensor for hash_batch: len bytes at off in pool (off
 * 16-aligned, len > GPU_HASH_MIN_LEN), tensor i of the hash_begin. */
struct gpu_hash_job {
	struct gpu_pool *pool;
	uint64_t off, len;
	uint32_t i;
};

struct gpu_backend {
	const char *name;
	/* daemon and client: open a device by name ("host", "host:x", "0", "GPU-...") */
	int (*open)(struct gpu_dev *dev, const char *spec, char *err);
	void (*close)(struct gpu_dev *dev);
	int (*mem_info)(struct gpu_dev *dev, uint64_t *free_b, uint64_t *total_b);

	/* daemon side */
	int (*pool_create)(struct gpu_dev *dev, struct gpu_pool *pool, uint64_t size, char *err);
	/* Page-locked staging memory usable for io_uring fixed buffers and
	 * async copies; host backend: plain anonymous memory. */
	int (*staging_alloc)(struct gpu_dev *dev, size_t size, void **ptr, char *err);
	void (*staging_free)(struct gpu_dev *dev, void *ptr, size_t size);
	/* staging_alloc in two steps, so that the slow one (faulting fresh
	 * memory in) runs on another thread while the device copies (a
	 * level-1 sleep's host copy, issue 17): host_map maps and first-
	 * touches size bytes and makes no device call (any thread);
	 * staging_pin pins what host_map gave (cuda: cudaHostRegister);
	 * staging_free frees a pinned buffer, host_unmap one never pinned. */
	int (*host_map)(struct gpu_dev *dev, size_t size, void **ptr, char *err);
	int (*staging_pin)(struct gpu_dev *dev, void *ptr, size_t size, char *err);
	void (*host_unmap)(struct gpu_dev *dev, void *ptr, size_t size);
	/* Asynchronous host-to-pool copy on stream `stream`; done(arg, res) runs
	 * on a backend thread once the copy is complete. */
	int (*copy_to_pool)(struct gpu_dev *dev, struct gpu_pool *pool,
			    const struct gpu_copy *c, unsigned stream,
			    gpu_done_fn done, void *arg);
	/* Synchronous pool-to-host copy (verification). */
	int (*copy_from_pool)(struct gpu_dev *dev, struct gpu_pool *pool,
			      uint64_t off, void *dst, size_t len);
	/* Pool-to-host copy into pinned staging that returns once queued, in
	 * order on one stream (host: done when it returns); copy_wait waits
	 * for every queued one and says whether one failed: a level-1 sleep
	 * queues pool i's copy and pins pool i+1's buffer meanwhile. */
	int (*copy_from_pool_async)(struct gpu_dev *dev, struct gpu_pool *pool,
				    uint64_t off, void *dst, size_t len);
	int (*copy_wait)(struct gpu_dev *dev, char *err);
	/* Optional (NULL when absent): sets len bytes at off to byte before
	 * the pool is sealed, synchronously: zero for the padding rows of
	 * padded tensors. cuda only: host pools are fresh memfds, already
	 * zero. */
	int (*pool_fill)(struct gpu_dev *dev, struct gpu_pool *pool,
			 uint64_t off, uint64_t len, uint8_t byte, char *err);
	/* Optional (NULL: partial update sessions are refused): len bytes
	 * from src's off_src to dst's off_dst on the device,
	 * synchronously (a partial update's kept tensors, from
	 * version N's pools into N+1's before the seal). */
	int (*pool_copy)(struct gpu_dev *dev, struct gpu_pool *dst,
			 uint64_t off_dst, struct gpu_pool *src,
			 uint64_t off_src, uint64_t len, char *err);
	int (*pool_seal)(struct gpu_dev *dev, struct gpu_pool *pool, char *err);
	void (*pool_release)(struct gpu_dev *dev, struct gpu_pool *pool);
	/* Optional (NULL: handover refused). Hot handover (issue 17): makes
	 * pool a daemon pool around an fd another daemon exported (taken
	 * over: pool_release closes it; on an error the caller still owns
	 * fd). Checks what the fd can tell: host: a memfd of at least
	 * alloc_size bytes, with every seal when sealed (mapped PROT_READ);
	 * cuda: a VMM fd, left parked (mapped on the next use, as after
	 * idle). */
	int (*pool_adopt)(struct gpu_dev *dev, struct gpu_pool *pool, int fd,
			  uint64_t size, uint64_t alloc_size, bool sealed,
			  char *err);

	/* The client side's calls (import through stream_sync below,
	 * staging, and open's context where GPU_CTX_NOW) leave the calling
	 * thread's current device as they found it, none included: an
	 * engine or a trainer may drive several GPUs (cuda: the current
	 * context, which torch's current device is). The daemon side's
	 * make the device current and leave it so.
	 *
	 * client side: fd (GPU_EXPORT_FD) or handle (GPU_EXPORT_IPC_HANDLE).
	 * cuda: pass fd -1 with a handle for legacy pools, else the fd and a
	 * NULL handle; the backend does not keep fd (the caller closes it).
	 * Legacy CUDA IPC cannot map read-only: m->writable comes back true
	 * there, whatever was asked. at: NULL (the backend picks the
	 * address), or where in a range from reserve() the mapping goes
	 * (fd imports only; a multiple of the granularity): unimport then
	 * leaves the address space to unreserve. */
	int (*import)(struct gpu_dev *dev, int fd, const unsigned char *handle,
		      uint64_t size, bool writable, void *at,
		      struct gpu_mapping *m, char *err);
	/* Optional (NULL: none; both or neither). Client side: size bytes
	 * (a multiple of the granularity) of address space that imports
	 * map into at chosen places, so that one lease's pools lie back to
	 * back; unreserve gives it back after every import in it was
	 * unimported. */
	int (*reserve)(struct gpu_dev *dev, uint64_t size, void **at, char *err);
	void (*unreserve)(struct gpu_dev *dev, void *at, uint64_t size);
	/* copies mapped bytes to host memory (client-side verify) */
	int (*read_mapping)(struct gpu_dev *dev, const struct gpu_mapping *m,
			    uint64_t off, void *dst, size_t len);
	void (*unimport)(struct gpu_dev *dev, struct gpu_mapping *m);
	/* Optional (NULL when absent): copies host bytes into a mapping.
	 * For tests of read-only enforcement: on a read-only import the
	 * device (not this function) must refuse the write. cuda only. */
	int (*write_mapping)(struct gpu_dev *dev, const struct gpu_mapping *m,
			     uint64_t off, const void *src, size_t len);
	/* Optional (NULL when absent; cuda only): an update session's write
	 * (issue 29): height rows of width bytes, src_pitch apart at src,
	 * into m->ptr + off back to back, queued on the caller's stream
	 * (a cudaStream_t) and returning once queued. src is device memory
	 * of GPU src_dev (a CUDA ordinal of this process; another than
	 * m's: a peer copy) or host memory (src_dev -1; pageable: staged by
	 * the driver before it returns; pinned: the caller keeps it until
	 * stream_sync). A NULL stream is the legacy default stream of
	 * src_dev (of m's device for host memory), so that the copy follows
	 * what the caller queued there. stream_sync waits for every copy
	 * queued on stream (NULL: src_dev's default stream) and reports a
	 * failed one in err. Both leave the thread's current device as
	 * they found it. */
	int (*copy_to_mapping)(struct gpu_dev *dev, const struct gpu_mapping *m,
			       uint64_t off, const void *src, int src_dev,
			       size_t width, size_t height, size_t src_pitch,
			       void *stream);
	int (*stream_sync)(struct gpu_dev *dev, void *stream, int src_dev,
			   char *err);

	/* Optional (NULL when absent; cuda only): the XXH3-128 of tensors
	 * computed on the device from their bytes in the pools, so that the
	 * host reads staging once (for the copy), not twice.
	 *   hash_begin  for tensors 0..n-1 of one load; -ENOTSUP when the
	 *               build has no kernel the device can run.
	 *   hash_step   tensor i (len bytes at off in pool, off 16-aligned,
	 *               len > GPU_HASH_MIN_LEN: shorter ones are the
	 *               caller's) now has
	 *               its first `landed` bytes queued for copying, the last
	 *               of them on copy stream copy_stream just now: the hash
	 *               advances over them after that copy, on chain `chain`.
	 *               One tensor's steps: one chain, in order, landed
	 *               growing; landed == len finishes it.
	 *   hash_end    waits; every finished tensor's canonical hash into
	 *               out[i] (others untouched); out NULL abandons. */
	int (*hash_begin)(struct gpu_dev *dev, uint32_t n, char *err);
	int (*hash_step)(struct gpu_dev *dev, struct gpu_pool *pool,
			 uint64_t off, uint64_t len, uint32_t i, uint64_t landed,
			 unsigned copy_stream, unsigned chain, char *err);
	int (*hash_end)(struct gpu_dev *dev, uint8_t (*out)[16], char *err);
	/* Optional (NULL: hash_step each with landed == len, one chain
	 * each): n whole tensors not stepped before, after what copy stream
	 * copy_stream has queued so far, side by side in one launch (the
	 * device runs up to n chains at once, longest first; a re-hash of
	 * 16 GB is bounded by its longest tensor instead of by the chains).
	 * Their hashes come out of hash_end as hash_step's do. */
	int (*hash_batch)(struct gpu_dev *dev, const struct gpu_hash_job *jobs,
			  uint32_t n, unsigned copy_stream, char *err);

	/* Optional (cuda, VMM pools only): the daemon is done with the device
	 * for now. Each of the n pools gives up its handle and mapping and
	 * keeps its memory through its exported fd alone; then the process's
	 * CUDA context (hundreds of MiB of device memory, tens of MiB of host
	 * memory) is destroyed. Any later call that needs a pool maps it again
	 * in a fresh context. The caller must pass every pool it has, hold no
	 * staging memory, and run no copy or hash. -ENOTSUP (nothing done)
	 * when a pool is legacy: its memory would die with the context. */
	int (*idle)(struct gpu_dev *dev, struct gpu_pool *const *pools,
		    unsigned n, char *err);
	/* Optional (NULL: no context to make). When the device's context is
	 * created (gpu_dev_open_ctx's how); open itself creates none. */
	int (*context)(struct gpu_dev *dev, enum gpu_ctx how, char *err);
};

extern const struct gpu_backend gpu_host_backend;
/* Host pools sealed with the daemon's writable mapping kept (gpu/host.c:
 * not lent writable, not handed over): an in-place update session copies
 * into them. rewrite: -EPERM (sealed for good) or -ERANGE, err set. */
bool gpu_host_pool_rewritable(const struct gpu_pool *pool);
int gpu_host_pool_rewrite(struct gpu_pool *pool, uint64_t off,
			  const void *src, uint64_t len, char *err);
/* NULL when built without CUDA. */
const struct gpu_backend *gpu_cuda_backend(void);

/* Picks the backend for a device spec ("host", "host:NAME" -> host; an index
 * or a GPU UUID -> cuda) and opens it. */
int gpu_dev_open(struct gpu_dev *dev, const char *spec, char *err);
/* gpu_dev_open with the context made as how says (enum gpu_ctx). */
int gpu_dev_open_ctx(struct gpu_dev *dev, const char *spec, enum gpu_ctx how,
		     char *err);
void gpu_dev_close(struct gpu_dev *dev);

static inline uint64_t gpu_align_up(uint64_t v, uint64_t a)
{
	return (v + a - 1) / a * a;
}

#endif
