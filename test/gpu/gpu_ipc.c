/* SPDX-License-Identifier: MIT */
/*
 * Export and import across processes, for VMM fds and legacy IPC handles:
 * an exporter process fills a pool and sends its fd (SCM_RIGHTS) or handle;
 * an importer process (exec'ed: CUDA does not survive fork) maps it, reads
 * every byte back, and still reads the right bytes after the exporter is
 * SIGKILLed. A write through a read-only VMM mapping must fail. The driver
 * process only passes messages; it closes its copy of the fd so nothing but
 * the importer's mapping keeps the memory alive. The importer's calls
 * (import, reads, the write, unimport) leave its thread with no current
 * CUDA context, as they found it (a process driving several GPUs keeps
 * its current device; test/gpu/cuda_cur.c: every case, no GPU).
 * Skips (77) where the build has no CUDA or no GPU is found.
 *
 *   gpu_ipc                         the driver (what the test runner runs)
 *   gpu_ipc export vmm|legacy FD    an exporter on socket FD
 *   gpu_ipc import vmm|legacy FD    an importer on socket FD
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gpu.h"
#include "t.h"
#include "t_wait.h"

extern char **environ;

struct msg {
	char tag[16];
	uint64_t size;
	uint64_t seed;
	int32_t rc;
	int32_t rc2;             /* write: read+compare after the write */
	unsigned char handle[GPU_IPC_HANDLE_LEN];
	char text[256];
};

static void msg_send(int sock, struct msg *m, int fd)
{
	char cbuf[CMSG_SPACE(sizeof(int))];
	struct iovec iov = { m, sizeof(*m) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	struct cmsghdr *c;

	if (fd >= 0) {
		memset(cbuf, 0, sizeof(cbuf));
		mh.msg_control = cbuf;
		mh.msg_controllen = sizeof(cbuf);
		c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &fd, sizeof(int));
	}
	T_EQ_INT(sendmsg(sock, &mh, MSG_NOSIGNAL), sizeof(*m));
}

/* Receives one message (and an fd, when one came) or fails the test. */
static void msg_recv(int sock, struct msg *m, int *fd)
{
	char cbuf[CMSG_SPACE(sizeof(int))];
	struct iovec iov = { m, sizeof(*m) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1,
			     .msg_control = cbuf, .msg_controllen = sizeof(cbuf) };
	struct cmsghdr *c;
	ssize_t n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);

	if (n != (ssize_t)sizeof(*m))
		T_FAIL("recvmsg: %zd (%s): the peer died or timed out", n,
		       n < 0 ? strerror(errno) : "short");
	m->text[sizeof(m->text) - 1] = '\0';
	if (fd) {
		*fd = -1;
		c = CMSG_FIRSTHDR(&mh);
		if (c && c->cmsg_type == SCM_RIGHTS)
			memcpy(fd, CMSG_DATA(c), sizeof(int));
	}
}

static void vreply(int sock, const char *tag, int rc, int rc2,
		   const char *fmt, va_list ap)
{
	struct msg m;

	memset(&m, 0, sizeof(m));
	snprintf(m.tag, sizeof(m.tag), "%s", tag);
	m.rc = rc;
	m.rc2 = rc2;
	vsnprintf(m.text, sizeof(m.text), fmt, ap);
	msg_send(sock, &m, -1);
}

static void reply(int sock, const char *tag, int rc, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static void reply2(int sock, const char *tag, int rc, int rc2, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));

static void reply(int sock, const char *tag, int rc, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vreply(sock, tag, rc, 0, fmt, ap);
	va_end(ap);
}

/* rc2: a second result (the read after a refused write) */
static void reply2(int sock, const char *tag, int rc, int rc2, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vreply(sock, tag, rc, rc2, fmt, ap);
	va_end(ap);
}

static void open_dev(const struct gpu_backend *be, struct gpu_dev *dev)
{
	char err[BASE_ERR_LEN];

	if (be->open(dev, "0", err))
		T_FAIL("open: %s", err);
}

/* A copy's completion: its result, then the count the exporter waits on. */
struct copy_done {
	struct t_count n;
	atomic_int res;
};

static void on_done(void *arg, int res)
{
	struct copy_done *d = arg;

	atomic_store(&d->res, res);
	t_count_add(&d->n, 1);
}

static int run_exporter(bool legacy, int sock)
{
	const struct gpu_backend *be = gpu_cuda_backend();
	uint64_t size = (48u << 20) + 777;
	char err[BASE_ERR_LEN];
	struct copy_done done = { .res = 0 };
	struct gpu_pool pool;
	struct gpu_dev dev;
	struct gpu_copy c = { 0 };
	unsigned char *stage, *back;
	struct msg m;

	t_count_init(&done.n);
	open_dev(be, &dev);
	if (legacy)
		dev.export_kind = GPU_EXPORT_IPC_HANDLE;
	if (be->pool_create(&dev, &pool, size, err))
		T_FAIL("pool_create: %s", err);
	T_OK(be->staging_alloc(&dev, size, (void **)&stage, err));
	t_fill(stage, size, 1234);
	c.src = stage;
	c.width = size;
	c.height = 1;
	T_OK(be->copy_to_pool(&dev, &pool, &c, 1, on_done, &done));
	T_OK(t_count_wait(&done.n, 1, 10000));
	T_EQ_INT(atomic_load(&done.res), 0);
	T_OK(be->pool_seal(&dev, &pool, err));
	back = malloc(size);
	T_ASSERT(back);
	T_OK(be->copy_from_pool(&dev, &pool, 0, back, size));
	T_ASSERT(memcmp(back, stage, size) == 0);

	memset(&m, 0, sizeof(m));
	snprintf(m.tag, sizeof(m.tag), "pool");
	m.size = pool.alloc_size;
	m.seed = 1234;
	memcpy(m.handle, pool.ipc_handle, sizeof(m.handle));
	snprintf(m.text, sizeof(m.text), "%llu", (unsigned long long)size);
	msg_send(sock, &m, legacy ? -1 : pool.fd);
	/* stay alive until killed (or the driver goes away) */
	msg_recv(sock, &m, NULL);
	return 0;
}

/* Fails where the thread has a current CUDA context (libcuda's
 * cuCtxGetCurrent) after `what`: the importer's thread had none. */
static void no_context_after(const char *what)
{
	static int (*get)(void **);
	void *c = NULL;

	if (!get) {
		void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);

		T_ASSERT(h != NULL);
		*(void **)&get = dlsym(h, "cuCtxGetCurrent");
		T_ASSERT(get != NULL);
	}
	T_EQ_INT(get(&c), 0);
	if (c)
		T_FAIL("%s left a CUDA context current on a thread that had none", what);
}

/* Compares the mapping with the pattern; returns 0 or a message. */
static int verify(const struct gpu_backend *be, struct gpu_dev *dev,
		  struct gpu_mapping *map, uint64_t size, char *why, size_t len)
{
	unsigned char *want = malloc(size), *got = malloc(size);
	int ret;

	T_ASSERT(want && got);
	t_fill(want, size, 1234);
	memset(got, 0, size);
	ret = be->read_mapping(dev, map, 0, got, size);
	if (ret)
		snprintf(why, len, "read_mapping: %d", ret);
	else if (memcmp(want, got, size) != 0) {
		snprintf(why, len, "bytes differ from the exporter's");
		ret = -EIO;
	}
	free(want);
	free(got);
	return ret;
}

static int run_importer(bool legacy, int sock)
{
	const struct gpu_backend *be = gpu_cuda_backend();
	unsigned char junk[4096];
	char err[BASE_ERR_LEN] = "", why[128] = "";
	struct gpu_mapping map;
	struct gpu_dev dev;
	uint64_t size;
	struct msg m;
	int fd, ret, wret;

	msg_recv(sock, &m, &fd);
	size = strtoull(m.text, NULL, 10);
	open_dev(be, &dev);
	ret = be->import(&dev, fd, legacy ? m.handle : NULL, m.size, false, NULL, &map, err);
	if (fd >= 0)
		close(fd);
	if (ret) {
		reply(sock, "read1", ret, "import: %s", err);
		return 1;
	}
	no_context_after("an import");
	T_EQ_INT(map.writable, legacy);
	ret = verify(be, &dev, &map, size, why, sizeof(why));
	no_context_after("a read of a mapping");
	reply(sock, "read1", ret, "%s (writable=%d)", why, map.writable);

	msg_recv(sock, &m, NULL);      /* the exporter is dead now */
	ret = verify(be, &dev, &map, size, why, sizeof(why));
	reply(sock, "read2", ret, "%s", why);

	msg_recv(sock, &m, NULL);
	if (legacy) {
		reply(sock, "write", 0, "legacy: writable=%d", map.writable);
	} else {
		memset(junk, 0xee, sizeof(junk));
		wret = be->write_mapping(&dev, &map, 0, junk, sizeof(junk));
		no_context_after("a write to a mapping");
		ret = verify(be, &dev, &map, size, why, sizeof(why));
		reply2(sock, "write", wret, ret,
		       "write through read-only mapping returned %d; afterwards read+compare returned %d %s",
		       wret, ret, why);
	}
	msg_recv(sock, &m, NULL);
	be->unimport(&dev, &map);
	no_context_after("an unimport");
	be->close(&dev);
	return 0;
}

static pid_t spawn_role(const char *role, const char *mode, int fd)
{
	char self[4096], fds[16];
	char *argv[] = { self, (char *)role, (char *)mode, fds, NULL };
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	pid_t pid;

	T_ASSERT(n > 0);
	self[n] = '\0';
	snprintf(fds, sizeof(fds), "%d", fd);
	T_EQ_INT(posix_spawn(&pid, self, NULL, NULL, argv, environ), 0);
	return pid;
}

static void sockpair(int sv[2])
{
	struct timeval tv = { .tv_sec = 60 };

	T_OK(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv));
	setsockopt(sv[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	/* the child's end survives exec */
	T_OK(fcntl(sv[1], F_SETFD, 0));
}

static void expect(int sock, const char *tag, bool want_ok, struct msg *out)
{
	struct msg m;

	msg_recv(sock, &m, NULL);
	if (out)
		*out = m;
	printf("  %s: rc=%d %s\n", tag, m.rc, m.text);
	T_EQ_STR(m.tag, tag);
	if (want_ok && m.rc != 0)
		T_FAIL("%s failed: rc=%d %s", tag, m.rc, m.text);
	if (!want_ok && m.rc == 0)
		T_FAIL("%s succeeded but must fail: %s", tag, m.text);
}

static void run_mode(const char *mode)
{
	bool legacy = !strcmp(mode, "legacy");
	int ex[2], im[2], fd, st;
	pid_t pex, pim;
	struct msg m;

	printf("mode %s\n", mode);
	sockpair(ex);
	sockpair(im);
	pex = spawn_role("export", mode, ex[1]);
	close(ex[1]);
	pim = spawn_role("import", mode, im[1]);
	close(im[1]);

	msg_recv(ex[0], &m, &fd);
	T_EQ_STR(m.tag, "pool");
	T_ASSERT(legacy ? fd < 0 : fd >= 0);
	msg_send(im[0], &m, fd);
	if (fd >= 0)
		close(fd);       /* only the importer's mapping holds it now */
	expect(im[0], "read1", true, NULL);

	T_OK(kill(pex, SIGKILL));
	T_EQ_INT(waitpid(pex, &st, 0), pex);
	T_ASSERT(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
	close(ex[0]);
	reply(im[0], "reread", 0, "exporter killed");
	expect(im[0], "read2", true, NULL);

	reply(im[0], "write", 0, "try a write");
	/* VMM read-only: the H200 refuses the copy (cudaErrorInvalidValue,
	 * -EINVAL) and the context stays usable, the bytes unchanged. Legacy
	 * IPC has no read-only mode (reported writable). */
	expect(im[0], "write", legacy, &m);
	if (!legacy)
		T_EQ_INT(m.rc2, 0);
	reply(im[0], "quit", 0, "bye");
	T_EQ_INT(waitpid(pim, &st, 0), pim);
	T_ASSERT(WIFEXITED(st));
	T_EQ_INT(WEXITSTATUS(st), 0);
	close(im[0]);
}

int main(int argc, char **argv)
{
	const struct gpu_backend *be = gpu_cuda_backend();
	char err[BASE_ERR_LEN];
	struct gpu_dev dev;
	int ret;

	if (argc == 4) {
		bool legacy = !strcmp(argv[2], "legacy");
		int sock = atoi(argv[3]);

		return !strcmp(argv[1], "export") ? run_exporter(legacy, sock) :
						    run_importer(legacy, sock);
	}
	T_SKIP_IF(!be, "built without CUDA");
	ret = be->open(&dev, "0", err);
	T_SKIP_IF(ret == -ENODEV, "%s", err);
	T_OK(ret);
	be->close(&dev);
	run_mode("vmm");
	run_mode("legacy");
	return 0;
}
