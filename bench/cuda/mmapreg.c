/* SPDX-License-Identifier: MIT */
/*
 * An experiment kept for the record (bench/RESULTS.md, "DMA straight from
 * the page cache"): could a warm load skip the staging copy? mmap each
 * shard, pin CHUNK MiB at a time with cudaHostRegister(ReadOnly) -- page
 * cache pages, pinned in place --, copy them to the device on 4 streams,
 * unregister once copied; DEPTH chunks pinned at once; FLAGS 1 adds
 * MAP_POPULATE. Answer on the H200: it works, at 20-24 GB/s, half the
 * staged loader's rate: pinning and unpinning 16 GB take 0.3 s each.
 *
 * Not built by make (it calls the CUDA runtime directly, which only gpu/
 * may): gcc -O2 -I/usr/local/cuda/include -Itools/common -o mmapreg \
 *	bench/cuda/mmapreg.c tools/common/clock.c \
 *	-L/usr/local/cuda/lib64 -lcudart_static -lpthread -ldl -lrt
 * Usage: mmapreg CHUNK_MIB DEPTH FLAGS FILE...
 */
#include <cuda_runtime_api.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"

#define CK(x) do { cudaError_t e_ = (x); if (e_) { printf("%s: %s\n", #x, cudaGetErrorString(e_)); exit(1);} } while (0)

int main(int argc, char **argv)
{
	size_t chunk = (size_t)atoi(argv[1]) << 20;
	int depth = atoi(argv[2]), flags = atoi(argv[3]);
	int nf = argc - 4;
	char *dev;
	size_t total = 0, off = 0;
	double treg = 0, tunreg = 0, t0, t;
	cudaStream_t st[4];
	cudaEvent_t ev[256];
	char *ptr[256];
	int k = 0;

	CK(cudaFree(0));
	for (int i = 0; i < 4; i++) CK(cudaStreamCreateWithFlags(&st[i], cudaStreamNonBlocking));
	for (int i = 0; i < 256; i++) CK(cudaEventCreateWithFlags(&ev[i], cudaEventDisableTiming));
	for (int f = 0; f < nf; f++) { struct stat sb; stat(argv[4 + f], &sb); total += sb.st_size; }
	CK(cudaMalloc((void **)&dev, total + (64 << 20)));
	t0 = clock_secs();
	for (int f = 0; f < nf; f++) {
		int fd = open(argv[4 + f], O_RDONLY);
		struct stat sb; fstat(fd, &sb);
		char *m = mmap(NULL, sb.st_size, PROT_READ, MAP_SHARED | (flags & 1 ? MAP_POPULATE : 0), fd, 0);
		if (m == MAP_FAILED) { perror("mmap"); return 1; }
		for (size_t o = 0; o < (size_t)sb.st_size; o += chunk) {
			size_t n = sb.st_size - o < chunk ? sb.st_size - o : chunk;
			int s = k % depth;
			if (k >= depth) {
				double a = clock_secs();
				CK(cudaEventSynchronize(ev[s]));
				CK(cudaHostUnregister(ptr[s]));
				tunreg += clock_secs() - a;
			}
			double a = clock_secs();
			cudaError_t e = cudaHostRegister(m + o, (n + 4095) & ~4095ul, cudaHostRegisterReadOnly);
			if (e) { printf("cudaHostRegister of file pages: %s\n", cudaGetErrorString(e)); return 1; }
			treg += clock_secs() - a;
			ptr[s] = m + o;
			CK(cudaMemcpyAsync(dev + off, m + o, n, cudaMemcpyHostToDevice, st[k % 4]));
			CK(cudaEventRecord(ev[s], st[k % 4]));
			off += n; k++;
		}
	}
	for (int j = 0; j < depth && j < k; j++) {
		int s = (k - 1 - j) % depth;
		CK(cudaEventSynchronize(ev[s]));
		CK(cudaHostUnregister(ptr[s]));
	}
	t = clock_secs() - t0;
	printf("mmap+register: chunk %zu MiB depth %d populate %d: %zu bytes in %.3f s: %.2f GB/s (register %.3f s, wait+unregister %.3f s)\n",
	       chunk >> 20, depth, flags & 1, total, t, total / t / 1e9, treg, tunreg);
	return 0;
}
