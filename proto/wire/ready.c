/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "err.h"
#include "ready.h"

int ready_format(const struct ready_info *r, char *buf, size_t len,
		 char *err)
{
	int n = snprintf(buf, len,
			 "pid=%d\nsocket=%s\ndevice=%s\nidentity=%s\n"
			 "version=%" PRIu64 "\ntensors=%" PRIu64
			 "\nbytes=%" PRIu64 "\nload_seconds=%.3f\nmodel=%s\n"
			 "tp_size=%d\ntp_rank=%d\npp_size=%d\npp_rank=%d\n"
			 "state=%s\n",
			 r->pid, r->socket, r->device, r->identity,
			 r->version, r->tensors, r->bytes, r->load_seconds,
			 r->model, r->tp_size, r->tp_rank, r->pp_size,
			 r->pp_rank, r->state);

	if (n < 0 || (size_t)n >= len)
		return base_errf(err, E2BIG, "ready file text over %zu bytes",
			       len);
	if (r->metrics_listen[0])
		n += snprintf(buf + n, len - (size_t)n, "metrics_listen=%s\n",
			      r->metrics_listen);
	if ((size_t)n < len && r->log_format[0])
		n += snprintf(buf + n, len - (size_t)n, "log_format=%s\n",
			      r->log_format);
	if ((size_t)n < len && r->log_file[0])
		n += snprintf(buf + n, len - (size_t)n, "log_file=%s\n",
			      r->log_file);
	if ((size_t)n < len && r->serve_args[0])
		n += snprintf(buf + n, len - (size_t)n, "serve_args=%s\n",
			      r->serve_args);
	if ((size_t)n < len && r->reloaded[0])
		n += snprintf(buf + n, len - (size_t)n, "reloaded=%s\n",
			      r->reloaded);
	if ((size_t)n >= len)
		return base_errf(err, E2BIG, "ready file text over %zu bytes",
			       len);
	return n;
}

static bool plain_byte(unsigned char c)
{
	return c > ' ' && c != '%' && c != 0x7f;
}

int ready_args_put(char *buf, size_t cap, const char *w)
{
	size_t n = strlen(buf), need = n ? 1 : 0;

	if (!*w)
		return -EINVAL;   /* no empty word: give "--opt=" instead */
	for (const unsigned char *p = (const unsigned char *)w; *p; p++)
		need += plain_byte(*p) ? 1 : 3;
	if (n + need >= cap)
		return -E2BIG;
	if (n)
		buf[n++] = ' ';
	for (const unsigned char *p = (const unsigned char *)w; *p; p++) {
		if (plain_byte(*p))
			buf[n++] = (char)*p;
		else
			n += (size_t)snprintf(buf + n, cap - n, "%%%02X", *p);
	}
	buf[n] = '\0';
	return 0;
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

int ready_args_split(const char *s, char *store, size_t cap, char **words,
		     unsigned max)
{
	size_t o = 0;
	unsigned n = 0;

	while (*s) {
		if (*s == ' ') {
			s++;
			continue;
		}
		if (n == max)
			return -E2BIG;
		words[n++] = store + o;
		for (; *s && *s != ' '; s++) {
			int hi, lo, c = (unsigned char)*s;

			if (*s == '%') {
				hi = hexval(s[1]);
				lo = hi < 0 ? -1 : hexval(s[2]);
				if (lo < 0 || (hi | lo) == 0)
					return -EINVAL;
				c = hi * 16 + lo;
				s += 2;
			}
			if (o + 2 > cap)
				return -E2BIG;
			store[o++] = (char)c;
		}
		store[o++] = '\0';
	}
	return (int)n;
}

enum kind { K_INT, K_U64, K_DOUBLE, K_STR };

struct key {
	const char *name;
	enum kind kind;
	size_t off;
	size_t size;        /* K_STR: buffer size */
};

#define F(field) offsetof(struct ready_info, field)
static const struct key keys[] = {
	{ "pid", K_INT, F(pid), 0 },
	{ "socket", K_STR, F(socket), READY_PATH_MAX },
	{ "device", K_STR, F(device), 64 },
	{ "identity", K_STR, F(identity), 33 },
	{ "version", K_U64, F(version), 0 },
	{ "tensors", K_U64, F(tensors), 0 },
	{ "bytes", K_U64, F(bytes), 0 },
	{ "load_seconds", K_DOUBLE, F(load_seconds), 0 },
	{ "model", K_STR, F(model), READY_PATH_MAX },
	{ "tp_size", K_INT, F(tp_size), 0 },
	{ "tp_rank", K_INT, F(tp_rank), 0 },
	{ "pp_size", K_INT, F(pp_size), 0 },
	{ "pp_rank", K_INT, F(pp_rank), 0 },
	{ "state", K_STR, F(state), READY_STATE_MAX + 1 },
	{ "metrics_listen", K_STR, F(metrics_listen), 256 },
	{ "log_format", K_STR, F(log_format), 8 },
	{ "log_file", K_STR, F(log_file), READY_PATH_MAX },
	{ "serve_args", K_STR, F(serve_args), READY_ARGS_MAX },
	{ "reloaded", K_STR, F(reloaded), READY_REASON_MAX },
};
#undef F
#define NKEYS (sizeof(keys) / sizeof(keys[0]))

/* Stores value v (NUL-terminated) into the field of key k. */
static int set_value(struct ready_info *r, const struct key *k, const char *v)
{
	char *base = (char *)r + k->off;
	char *end;
	long long ll;
	unsigned long long ull;
	double d;

	errno = 0;
	switch (k->kind) {
	case K_INT:
		ll = strtoll(v, &end, 10);
		if (!*v || *end || errno || ll < -1 || ll > INT32_MAX)
			return -EINVAL;
		*(int *)(void *)base = (int)ll;
		return 0;
	case K_U64:
		if (*v == '-')
			return -EINVAL;
		ull = strtoull(v, &end, 10);
		if (!*v || *end || errno)
			return -EINVAL;
		*(uint64_t *)(void *)base = ull;
		return 0;
	case K_DOUBLE:
		d = strtod(v, &end);
		if (!*v || *end || errno || !(d >= 0))
			return -EINVAL;
		*(double *)(void *)base = d;
		return 0;
	case K_STR:
		if (strlen(v) >= k->size)
			return -EINVAL;
		memcpy(base, v, strlen(v) + 1);
		return 0;
	}
	return -EINVAL;
}

int ready_parse(struct ready_info *r, const char *buf, size_t len,
		const char *name, char *err)
{
	bool seen[NKEYS] = { 0 };
	char line[READY_ARGS_MAX + 64];
	size_t pos = 0, lineno = 0;

	memset(r, 0, sizeof(*r));
	r->pid = -1;
	if (len > READY_FILE_MAX)
		return base_errf(err, EINVAL,
			       "ready file %s is %zu bytes, over %d", name,
			       len, READY_FILE_MAX);
	while (pos < len) {
		const char *nl = memchr(buf + pos, '\n', len - pos);
		size_t n = nl ? (size_t)(nl - (buf + pos)) : len - pos;
		char *eq;
		size_t i;

		lineno++;
		if (n >= sizeof(line))
			return base_errf(err, EINVAL,
				       "ready file %s: line %zu is too long",
				       name, lineno);
		memcpy(line, buf + pos, n);
		line[n] = '\0';
		pos += n + 1;
		if (n == 0)
			continue;
		if (memchr(line, '\0', n))
			return base_errf(err, EINVAL,
				       "ready file %s: line %zu has a NUL byte",
				       name, lineno);
		eq = strchr(line, '=');
		if (!eq)
			return base_errf(err, EINVAL,
				       "ready file %s: line %zu '%s' is not key=value",
				       name, lineno, line);
		*eq = '\0';
		for (i = 0; i < NKEYS; i++)
			if (!strcmp(keys[i].name, line))
				break;
		if (i == NKEYS)
			continue;   /* a newer daemon's key */
		if (seen[i])
			return base_errf(err, EINVAL,
				       "ready file %s: key '%s' appears twice",
				       name, line);
		seen[i] = true;
		if (set_value(r, &keys[i], eq + 1))
			return base_errf(err, EINVAL,
				       "ready file %s: bad value '%s' for %s",
				       name, eq + 1, line);
	}
	if (!seen[0] || !seen[1] || !seen[2])
		return base_errf(err, EINVAL,
			       "ready file %s lacks pid, socket or device: it was not written by wcd, or is damaged; remove it (wcctl clean)",
			       name);
	if (r->pid <= 0)
		return base_errf(err, EINVAL, "ready file %s: pid %d is not valid",
			       name, r->pid);
	return 0;
}

int ready_read_file(struct ready_info *r, const char *path, char *err)
{
	char buf[READY_FILE_MAX + 1];
	ssize_t n;
	size_t got = 0;
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);

	if (fd < 0)
		return base_errf(err, errno, "cannot open ready file %s: %s",
			       path, strerror(errno));
	while (got < sizeof(buf)) {
		n = read(fd, buf + got, sizeof(buf) - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			int e = errno;

			close(fd);
			return base_errf(err, e, "cannot read %s: %s", path,
				       strerror(e));
		}
		if (n == 0)
			break;
		got += (size_t)n;
	}
	close(fd);
	return ready_parse(r, buf, got, path, err);
}

int ready_write_file(const struct ready_info *r, const char *path, char *err)
{
	char buf[READY_FILE_MAX];
	char tmp[READY_PATH_MAX + 32];
	int n, fd, e;
	ssize_t w;

	n = ready_format(r, buf, sizeof(buf), err);
	if (n < 0)
		return n;
	if ((size_t)snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path,
			     (int)getpid()) >= sizeof(tmp))
		return base_errf(err, ENAMETOOLONG, "ready path too long: %s",
			       path);
	/* A fresh file, never a link or a file someone left under the name:
	 * a leftover of an earlier daemon with our pid is removed once. */
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
		  0600);
	if (fd < 0 && errno == EEXIST && unlink(tmp) == 0)
		fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW |
			  O_CLOEXEC, 0600);
	if (fd < 0)
		return base_errf(err, errno, "cannot create %s: %s", tmp,
			       strerror(errno));
	/* no fsync: the rename alone keeps a reader from ever seeing a part
	 * of the file, and a ready file is no record that must survive the
	 * machine (after a crash the daemon it names is gone, and wcctl
	 * clean reads it as left over); an fsync on a runtime directory on
	 * disk took 1.4 ms on the H200's host, in every update's commit
	 * before its reply */
	w = write(fd, buf, (size_t)n);
	e = w < 0 ? errno : (w != n ? EIO : 0);
	close(fd);
	if (!e && rename(tmp, path))
		e = errno;
	if (e) {
		unlink(tmp);
		return base_errf(err, e, "cannot write ready file %s: %s", path,
			       strerror(e));
	}
	return 0;
}
