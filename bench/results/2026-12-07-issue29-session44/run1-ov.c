/* scratch experiment: does a commit's device hash overlap the trainer's D2D copies? */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cuda_runtime.h>
#include "gpu.h"
#include "cuda_priv.h"

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}
#define OK(x) do { if (x) { fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, err); exit(1);} } while (0)
#define CK(x) do { cudaError_t e_ = (x); if (e_) { fprintf(stderr, "%d %s: %s\n", __LINE__, #x, cudaGetErrorString(e_)); exit(1);} } while (0)

enum { L = 32, NJ = 2 + 9 * L };
static struct gpu_hash_job j[NJ];
static uint8_t out[NJ][16];

int main(int argc, char **argv)
{
	const struct gpu_backend *be = gpu_cuda_backend();
	const uint64_t MiB = 1u << 20;
	struct gpu_dev dev;
	struct gpu_pool big;
	char err[BASE_ERR_LEN];
	uint64_t off = 0, cap = 2 * 1024 * MiB + L * 416 * MiB;
	unsigned n = 0, nch = argc > 1 ? atoi(argv[1]) : 8;
	int emb_last = argc > 2 && atoi(argv[2]);
	void *src;
	cudaStream_t S;
	cudaEvent_t E;

	OK(be->open(&dev, "0", err));
	OK(be->pool_create(&dev, &big, cap, err));
	OK(gpu_cuda_streams_init(&dev) != 0);
	struct cuda_dev *cd = cuda_dev_of(&dev);
	CK(cudaMalloc(&src, cap));
	CK(cudaMemset(src, 0x5a, cap));
	CK(cudaStreamCreateWithFlags(&S, cudaStreamNonBlocking));
	CK(cudaEventCreateWithFlags(&E, cudaEventDisableTiming));
	if (!emb_last)
		for (unsigned k = 0; k < 2; k++, off += 1024 * MiB)
			j[n++] = (struct gpu_hash_job){ .pool = &big, .off = off, .len = 1024 * MiB };
	for (unsigned l = 0; l < L; l++) {
		static const uint64_t part[] = { 32, 8, 8, 32, 112, 112, 112 };
		uint64_t at[7];
		for (unsigned p = 0; p < 7; p++) {
			at[p] = off;
			j[n++] = (struct gpu_hash_job){ .pool = &big, .off = off, .len = part[p] * MiB };
			off += part[p] * MiB;
		}
		j[n++] = (struct gpu_hash_job){ .pool = &big, .off = at[0], .len = 48 * MiB };
		j[n++] = (struct gpu_hash_job){ .pool = &big, .off = at[4], .len = 224 * MiB };
	}
	if (emb_last)
		for (unsigned k = 0; k < 2; k++, off += 1024 * MiB)
			j[n++] = (struct gpu_hash_job){ .pool = &big, .off = off, .len = 1024 * MiB };
	for (unsigned k = 0; k < NJ; k++)
		j[k].i = k;
	uint64_t ch = (cap / nch + 2 * MiB - 1) / (2 * MiB) * (2 * MiB);
	dev.hash_host_chains = true;
	printf("cap %.2f GB, %u chunks of %.1f MiB, 1 GiB tensors %s\n", cap / 1e9, nch, ch / (double)MiB, emb_last ? "last" : "first");
	for (int round = 0; round < 4; round++) {
		double t0, t1, t2;
		/* copy alone */
		t0 = now_s();
		for (uint64_t o = 0; o < cap; o += ch)
			CK(cudaMemcpyAsync((char *)big.dev_ptr + o, (char *)src + o, o + ch > cap ? cap - o : ch, cudaMemcpyDeviceToDevice, S));
		CK(cudaStreamSynchronize(S));
		printf("copy alone: %.3f ms\n", (now_s() - t0) * 1e3);
		/* hash alone */
		OK(be->hash_begin(&dev, NJ, err));
		t0 = now_s();
		OK(be->hash_batch(&dev, j, NJ, 0, err));
		OK(be->hash_end(&dev, out, err));
		printf("hash alone: %.3f ms\n", (now_s() - t0) * 1e3);
		/* serial */
		t0 = now_s();
		for (uint64_t o = 0; o < cap; o += ch)
			CK(cudaMemcpyAsync((char *)big.dev_ptr + o, (char *)src + o, o + ch > cap ? cap - o : ch, cudaMemcpyDeviceToDevice, S));
		CK(cudaStreamSynchronize(S));
		t1 = now_s();
		OK(be->hash_begin(&dev, NJ, err));
		OK(be->hash_batch(&dev, j, NJ, 0, err));
		OK(be->hash_end(&dev, out, err));
		printf("serial: %.3f ms (copy %.3f)\n", (now_s() - t0) * 1e3, (t1 - t0) * 1e3);
		/* overlapped: each chunk's tensors hashed after its copy */
		static bool done[NJ];
		memset(done, 0, sizeof(done));
		t0 = now_s();
		OK(be->hash_begin(&dev, NJ, err));
		double q = 0;
		for (uint64_t o = 0; o < cap; o += ch) {
			uint64_t end = o + ch > cap ? cap : o + ch;
			struct gpu_hash_job b[NJ];
			unsigned nb = 0;
			CK(cudaMemcpyAsync((char *)big.dev_ptr + o, (char *)src + o, end - o, cudaMemcpyDeviceToDevice, S));
			CK(cudaEventRecord(E, S));
			CK(cudaStreamWaitEvent(cd->st[0].s, E, 0));
			for (unsigned k = 0; k < NJ; k++)
				if (!done[k] && j[k].off + j[k].len <= end) {
					done[k] = true;
					b[nb++] = j[k];
				}
			double a = now_s();
			OK(be->hash_batch(&dev, b, nb, 0, err));
			q += now_s() - a;
		}
		CK(cudaStreamSynchronize(S));
		t1 = now_s();
		OK(be->hash_end(&dev, out, err));
		t2 = now_s();
		printf("overlapped: %.3f ms (copies done at %.3f, batches queued in %.3f)\n", (t2 - t0) * 1e3, (t1 - t0) * 1e3, q * 1e3);
	}
	return 0;
}
