/* SPDX-License-Identifier: MIT */
/*
 * libwcache: DLPack hand-off of served tensors (issue 13), for the Python
 * package (tools/libwcache/python, ctypes) and any other FFI user.
 *
 * wc_dl_tensor builds a DLManagedTensor (dlpack.h, version 0.6: what
 * torch >= 1.10 and numpy >= 1.22 import) over memory of an attached model.
 * Lifetime is a reference count, struct wc_dl_owner: the caller holds the
 * first reference, every tensor built on the owner holds one more, and the
 * tensor's deleter (run by the framework when its last view dies, from any
 * thread) drops it. When the count reaches 0 the owner's release callback
 * runs once, on the thread that dropped it: the Python package detaches
 * there, so a mapping goes away exactly when nothing points into it.
 * After wc_dl_shutdown (an interpreter that is exiting) release is no
 * longer called: the process is ending and its mappings with it.
 *
 * The PyCapsule destructor is here too, in C, so that a capsule freed
 * during interpreter shutdown calls no Python code; the two capsule calls
 * it needs are handed in by wc_dl_python (no libpython is linked).
 *
 * Cost: one malloc per tensor (the shape and strides live in the same
 * block); no lock (the count is atomic).
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include <dlpack/dlpack.h>

#include "client.h"

struct wc_dl_owner {
	atomic_long refs;
	void (*release)(void *arg);
	void *arg;
};

/* A DLManagedTensor and its shape and strides, in one allocation. */
struct dl_block {
	DLManagedTensor mt;
	int64_t shape[WC_DIMS_MAX];
	int64_t strides[WC_DIMS_MAX];
};

static atomic_bool dl_shutdown;
static atomic_long dl_live;                  /* tensors not yet deleted */
static int (*py_capsule_is_valid)(void *capsule, const char *name);
static void *(*py_capsule_get_pointer)(void *capsule, const char *name);

struct wc_dl_owner *wc_dl_owner_new(void (*release)(void *arg), void *arg)
{
	struct wc_dl_owner *o = malloc(sizeof(*o));

	if (!o)
		return NULL;
	atomic_init(&o->refs, 1);
	o->release = release;
	o->arg = arg;
	return o;
}

void wc_dl_owner_put(struct wc_dl_owner *o)
{
	long before;

	if (!o)
		return;
	before = atomic_fetch_sub(&o->refs, 1);
	if (before > 1)
		return;
	if (o->release && !atomic_load(&dl_shutdown))
		o->release(o->arg);
	free(o);
}

long wc_dl_owner_refs(const struct wc_dl_owner *o)
{
	return atomic_load(&((struct wc_dl_owner *)o)->refs);
}

static void dl_deleter(DLManagedTensor *mt)
{
	struct wc_dl_owner *o = mt->manager_ctx;

	free(mt);
	atomic_fetch_sub(&dl_live, 1);
	wc_dl_owner_put(o);
}

int wc_dl_tensor(struct wc_dl_owner *o, const void *data, int device_type,
		 int device_id, unsigned code, unsigned bits, uint32_t ndim,
		 const int64_t *shape, void **out, struct wc_error *err)
{
	struct dl_block *b;
	int64_t stride = 1;

	*out = NULL;
	if (!o)
		return wc__fail(err, EINVAL, "wc_dl_tensor: no owner");
	if (ndim > WC_DIMS_MAX)
		return wc__fail(err, E2BIG, "wc_dl_tensor: %u dimensions, more than %u",
				ndim, WC_DIMS_MAX);
	if (device_type != kDLCPU && device_type != kDLCUDA)
		return wc__fail(err, EINVAL, "wc_dl_tensor: device type %d is neither CPU (%d) nor CUDA (%d)",
				device_type, kDLCPU, kDLCUDA);
	if (!bits || bits % 8 || code > kDLComplex)
		return wc__fail(err, EINVAL, "wc_dl_tensor: dtype code %u with %u bits is not a whole-byte DLPack type",
				code, bits);
	b = calloc(1, sizeof(*b));
	if (!b)
		return wc__fail(err, ENOMEM, "out of memory for a DLPack tensor");
	for (uint32_t i = ndim; i-- > 0;) {
		if (shape[i] < 0) {
			free(b);
			return wc__fail(err, EINVAL, "wc_dl_tensor: dimension %u is negative (%lld)",
					i, (long long)shape[i]);
		}
		b->shape[i] = shape[i];
		b->strides[i] = stride;
		stride *= shape[i] ? shape[i] : 1;
	}
	/* data is the tensor itself, byte_offset 0: torch before 2.1 ignores
	 * byte_offset on import. */
	b->mt.dl_tensor.data = (void *)data;
	b->mt.dl_tensor.device.device_type = (DLDeviceType)device_type;
	b->mt.dl_tensor.device.device_id = device_id;
	b->mt.dl_tensor.ndim = (int)ndim;
	b->mt.dl_tensor.dtype.code = (uint8_t)code;
	b->mt.dl_tensor.dtype.bits = (uint8_t)bits;
	b->mt.dl_tensor.dtype.lanes = 1;
	b->mt.dl_tensor.shape = b->shape;
	b->mt.dl_tensor.strides = b->strides;
	b->mt.dl_tensor.byte_offset = 0;
	b->mt.manager_ctx = o;
	b->mt.deleter = dl_deleter;
	atomic_fetch_add(&o->refs, 1);
	atomic_fetch_add(&dl_live, 1);
	*out = &b->mt;
	wc__ok(err);
	return 0;
}

void wc_dl_drop(void *managed)
{
	DLManagedTensor *mt = managed;

	if (mt && mt->deleter)
		mt->deleter(mt);
}

long wc_dl_live(void)
{
	return atomic_load(&dl_live);
}

void wc_dl_python(int (*is_valid)(void *capsule, const char *name),
		  void *(*get_pointer)(void *capsule, const char *name))
{
	py_capsule_is_valid = is_valid;
	py_capsule_get_pointer = get_pointer;
}

/* A PyCapsule destructor: a capsule still named "dltensor" was never
 * consumed (the consumer renames it "used_dltensor"), so its tensor is
 * ours to delete. Runs with the GIL held, as every capsule destructor. */
void wc_dl_capsule_destructor(void *capsule)
{
	if (!py_capsule_is_valid || !py_capsule_is_valid(capsule, "dltensor"))
		return;
	wc_dl_drop(py_capsule_get_pointer(capsule, "dltensor"));
}

void wc_dl_shutdown(void)
{
	atomic_store(&dl_shutdown, true);
}

size_t wc_tensor_size(void)
{
	return sizeof(struct wc_tensor);
}

int wc_model_device(const struct wc_model *m)
{
	return m->info.mem == WC_MEM_CUDA ? m->conn->dev.ordinal : -1;
}
