/* SPDX-License-Identifier: MIT */
/*
 * proto/base/paths (runtime path templates, device names) and proto/wire/ready (the
 * ready file's format, parse and atomic write).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "err.h"
#include "paths.h"
#include "ready.h"
#include "t.h"

static char err[BASE_ERR_LEN];

static void test_template(void)
{
	char t[PATHS_MAX];

	T_OK(paths_template(t, sizeof(t), "/run/x", "/env/{device}", "/xdg",
			    1000, err));
	T_EQ_STR(t, "/run/x/{device}");
	T_OK(paths_template(t, sizeof(t), NULL, "/env/{device}-r", "/xdg",
			    1000, err));
	T_EQ_STR(t, "/env/{device}-r");
	T_OK(paths_template(t, sizeof(t), "", "", "/xdg", 1000, err));
	T_EQ_STR(t, "/xdg/wcache/{device}");
	T_OK(paths_template(t, sizeof(t), NULL, NULL, NULL, 1000, err));
	T_EQ_STR(t, "/tmp/wcache-1000/{device}");
	T_EQ_INT(paths_template(t, sizeof(t), NULL, "/env/nodevice", NULL,
				1000, err), -EINVAL);
	T_HAS(err, "WCACHE_SOCKET_TEMPLATE='/env/nodevice'");
	T_HAS(err, "{device}");
	T_EQ_INT(paths_template(t, sizeof(t), NULL, "/{device}/{device}",
				NULL, 1000, err), -EINVAL);
	T_EQ_INT(paths_template(t, 8, "/a/long/dir", NULL, NULL, 1, err),
		 -ENAMETOOLONG);
}

static void test_resolve(void)
{
	struct paths p;
	char longdir[200];

	T_OK(paths_resolve(&p, "/run/wc/{device}", "host-a", err));
	T_EQ_STR(p.dir, "/run/wc");
	T_EQ_STR(p.prefix, "/run/wc/host-a");
	T_EQ_STR(p.lock, "/run/wc/host-a.lock");
	T_EQ_STR(p.sock, "/run/wc/host-a.sock");
	T_EQ_STR(p.ready, "/run/wc/host-a.ready");
	T_EQ_STR(p.log, "/run/wc/host-a.log");
	T_OK(paths_resolve(&p, "/run/{device}/rank", "GPU-1234", err));
	T_EQ_STR(p.sock, "/run/GPU-1234/rank.sock");
	T_EQ_STR(p.dir, "/run/GPU-1234");
	T_EQ_INT(paths_resolve(&p, "/run/wc", "host", err), -EINVAL);
	T_EQ_INT(paths_resolve(&p, "/run/{device}", "a/b", err), -EINVAL);
	memset(longdir, 'd', sizeof(longdir));
	memcpy(longdir, "/", 1);
	strcpy(longdir + 120, "/{device}");
	T_EQ_INT(paths_resolve(&p, longdir, "host", err), -ENAMETOOLONG);
	T_HAS(err, "unix socket limit");
}

static void test_device(void)
{
	char n[PATHS_DEVICE_MAX + 1];

	T_OK(paths_device_name("host", n, sizeof(n), err));
	T_EQ_STR(n, "host");
	T_OK(paths_device_name("host:rank_1-b", n, sizeof(n), err));
	T_EQ_STR(n, "host-rank_1-b");
	/* the file name round-trips: what status prints is accepted back */
	T_OK(paths_device_name("host-rank_1-b", n, sizeof(n), err));
	T_EQ_STR(n, "host-rank_1-b");
	T_EQ_INT(paths_device_name("host-", n, sizeof(n), err), -EINVAL);
	T_ASSERT(paths_is_host_spec("host-0"));
	T_OK(paths_device_name("GPU-5a3f0c1e-aaaa-bbbb-cccc-0123456789ab",
			       n, sizeof(n), err));
	T_EQ_STR(n, "GPU-5a3f0c1e-aaaa-bbbb-cccc-0123456789ab");
	T_EQ_INT(paths_device_name("0", n, sizeof(n), err), -ENOENT);
	T_EQ_INT(paths_device_name("host:", n, sizeof(n), err), -EINVAL);
	T_EQ_INT(paths_device_name("host:a/b", n, sizeof(n), err), -EINVAL);
	T_HAS(err, "letters, digits");
	T_EQ_INT(paths_device_name("host:0123456789012345678901234567890123",
				   n, sizeof(n), err), -EINVAL);
	T_HAS(err, "1 to 32");
	T_EQ_INT(paths_device_name("tpu", n, sizeof(n), err), -EINVAL);
	T_HAS(err, "unknown device 'tpu'");
	T_ASSERT(paths_is_host_spec("host:x"));
	T_ASSERT(!paths_is_host_spec("hostx"));
}

/* serve_args: argv words with any bytes (a space, '%', a newline, a byte
 * that is not UTF-8) go through the ready file and come back exact; a
 * line longer than a path is read; the bounds are errors. */
static void test_serve_args(void)
{
	static struct ready_info r, d;
	static char buf[READY_FILE_MAX], store[READY_ARGS_MAX], big[5000];
	const char *in[] = { "--rules", "/a b/%x\n\xe9.rules", "--allow-uid",
			     "65534", "--no-hash" };
	char *w[8], small[16] = "";
	int n;

	for (unsigned i = 0; i < 5; i++)
		T_OK(ready_args_put(r.serve_args, sizeof(r.serve_args), in[i]));
	T_EQ_STR(r.serve_args,
		 "--rules /a%20b/%25x%0A\xe9.rules --allow-uid 65534 --no-hash");
	strcpy(r.socket, "/s");
	strcpy(r.device, "host");
	r.pid = 7;
	memset(big, 'p', sizeof(big) - 1);
	big[0] = '/';
	T_OK(ready_args_put(r.serve_args, sizeof(r.serve_args), "--layout"));
	T_OK(ready_args_put(r.serve_args, sizeof(r.serve_args), big));
	strcpy(r.reloaded, "the old daemon died");
	n = ready_format(&r, buf, sizeof(buf), err);
	T_CMP_INT(n, >, 0);
	T_OK(ready_parse(&d, buf, (size_t)n, "t", err));
	T_EQ_STR(d.serve_args, r.serve_args);
	T_EQ_STR(d.reloaded, "the old daemon died");
	n = ready_args_split(d.serve_args, store, sizeof(store), w, 8);
	T_EQ_INT(n, 7);
	for (unsigned i = 0; i < 5; i++)
		T_EQ_STR(w[i], in[i]);
	T_EQ_STR(w[6], big);
	/* the bounds */
	T_EQ_INT(ready_args_put(small, sizeof(small), "--a-long-option"), 0);
	T_EQ_INT(ready_args_put(small, sizeof(small), "x"), -E2BIG);
	T_EQ_STR(small, "--a-long-option");
	T_EQ_INT(ready_args_put(small, sizeof(small), ""), -EINVAL);
	T_EQ_INT(ready_args_split("a b c", store, sizeof(store), w, 2), -E2BIG);
	T_EQ_INT(ready_args_split("a%zz", store, sizeof(store), w, 2), -EINVAL);
	T_EQ_INT(ready_args_split("a%00", store, sizeof(store), w, 2), -EINVAL);
	T_EQ_INT(ready_args_split("a%4", store, sizeof(store), w, 2), -EINVAL);
	T_EQ_INT(ready_args_split("abcdef", store, 4, w, 2), -E2BIG);
	T_EQ_INT(ready_args_split("", store, sizeof(store), w, 2), 0);
}

static void test_ready(void)
{
	struct ready_info r = {
		.pid = 4321, .version = 2, .tensors = 291,
		.bytes = 16060522496ull, .load_seconds = 0.4126,
		.tp_size = 2, .tp_rank = 1, .pp_size = 1, .pp_rank = 0,
	}, d;
	char buf[READY_FILE_MAX];
	char dir[] = "/tmp/wct.readyXXXXXX";
	char path[256];
	struct stat st;
	int n;

	strcpy(r.socket, "/tmp/wc/host.sock");
	strcpy(r.device, "host");
	strcpy(r.identity, "00112233445566778899aabbccddeeff");
	strcpy(r.model, "/models/m");
	strcpy(r.state, "ready");
	n = ready_format(&r, buf, sizeof(buf), err);
	T_CMP_INT(n, >, 0);
	T_HAS(buf, "pid=4321\n");
	T_HAS(buf, "load_seconds=0.413\n");
	T_OK(ready_parse(&d, buf, (size_t)n, "t", err));
	T_EQ_INT(d.pid, 4321);
	T_EQ_STR(d.socket, r.socket);
	T_EQ_STR(d.identity, r.identity);
	T_EQ_U64(d.bytes, r.bytes);
	T_EQ_INT(d.tp_rank, 1);
	T_EQ_STR(d.state, "ready");
	T_EQ_STR(d.metrics_listen, "");
	T_ASSERT(!strstr(buf, "metrics_listen="));  /* only when set */
	/* the options a handover's new daemon gets again */
	strcpy(r.metrics_listen, "127.0.0.1:9400");
	strcpy(r.log_format, "json");
	strcpy(r.log_file, "/var/log/wc.log");
	n = ready_format(&r, buf, sizeof(buf), err);
	T_CMP_INT(n, >, 0);
	T_OK(ready_parse(&d, buf, (size_t)n, "t", err));
	T_EQ_STR(d.metrics_listen, "127.0.0.1:9400");
	T_EQ_STR(d.log_format, "json");
	T_EQ_STR(d.log_file, "/var/log/wc.log");
	r.metrics_listen[0] = r.log_format[0] = r.log_file[0] = '\0';

	/* unknown keys are ignored; missing required keys are not */
	T_OK(ready_parse(&d, "pid=1\nsocket=/s\ndevice=host\nfuture=x\n", 37,
			 "t", err));
	T_EQ_INT(ready_parse(&d, "pid=1\nsocket=/s\n", 16, "t", err), -EINVAL);
	T_HAS(err, "lacks pid, socket or device");
	T_EQ_INT(ready_parse(&d, "pid=x\nsocket=/s\ndevice=host\n", 28, "t",
			     err), -EINVAL);
	T_HAS(err, "bad value 'x' for pid");
	T_EQ_INT(ready_parse(&d, "pid=1\npid=2\n", 12, "t", err), -EINVAL);
	T_HAS(err, "twice");
	T_EQ_INT(ready_parse(&d, "garbage\n", 8, "t", err), -EINVAL);
	T_HAS(err, "not key=value");
	T_EQ_INT(ready_parse(&d, "pid=0\nsocket=/s\ndevice=h\n", 25, "t",
			     err), -EINVAL);

	/* atomic write, mode 0600, no temp file left */
	T_ASSERT(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/host.ready", dir);
	T_OK(ready_write_file(&r, path, err));
	T_OK(stat(path, &st));
	T_EQ_INT(st.st_mode & 0777, 0600);
	T_OK(ready_read_file(&d, path, err));
	T_EQ_U64(d.tensors, 291);
	snprintf(buf, sizeof(buf), "%s/host.ready.tmp.%d", dir, (int)getpid());
	T_EQ_INT(access(buf, F_OK), -1);
	unlink(path);
	T_EQ_INT(ready_read_file(&d, path, err), -ENOENT);

	/* paths_mkdir: creates 0700, accepts a dir, refuses a file */
	snprintf(path, sizeof(path), "%s/rt", dir);
	T_OK(paths_mkdir(path, err));
	T_OK(stat(path, &st));
	T_EQ_INT(st.st_mode & 0777, 0700);
	T_OK(paths_mkdir(path, err));
	rmdir(path);
	T_OK(ready_write_file(&r, path, err));
	T_EQ_INT(paths_mkdir(path, err), -ENOTDIR);
	T_HAS(err, "not a directory");
	unlink(path);
	rmdir(dir);
}

int main(void)
{
	test_template();
	test_resolve();
	test_device();
	test_ready();
	test_serve_args();
	printf("paths and ready: ok\n");
	return 0;
}
