/* SPDX-License-Identifier: MIT */
/*
 * A reference point for wcd's request loop: the smallest io_uring server
 * that answers wcache PING frames (header only: it flips WIRE_F_REPLY and
 * echoes), with the ring and socket choices as switches, so that the cost
 * of each choice can be measured beside wcd with the same client:
 *
 *   uring_pingd SOCKET [-m MODE]     (runs until killed)
 *
 * MODE is a sum of:
 *   1  IORING_SETUP_DEFER_TASKRUN | SINGLE_ISSUER (else COOP_TASKRUN |
 *      TASKRUN_FLAG | SUBMIT_ALL, as libwcreactor sets up its ring)
 *   2  IORING_RECVSEND_POLL_FIRST on each recv (skip the inline attempt
 *      that fails with -EAGAIN when the socket is empty)
 *   4  one multishot recv per connection into a provided-buffer ring
 *   8  recvmsg/sendmsg (as libwcreactor, for SCM_RIGHTS) instead of
 *      recv/send
 *  16  spin on the completion queue for up to PD_SPIN_NS before sleeping in
 *      io_uring_enter (busy polling: spends CPU to skip the wake-up)
 *  32  no io_uring at all: epoll_wait + read + write (how redis and most
 *      event loops serve), to tell io_uring's costs from an event loop's
 * Not a product: no bounds beyond fixed arrays (BUFS, PD_FDS_MAX), errors
 * end the connection.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <liburing.h>

#include "wire.h"

#define PD_FDS_MAX 4096
#define PD_BUF (64u << 10)
#define BUFS 1024
#define BSZ 4096
#define PD_SPIN_NS 50000ull

enum { T_ACC = 1, T_RECV, T_SEND };

struct pd_conn {
	int fd;
	bool busy;
	size_t inlen, outlen;
	struct msghdr rm, sm;
	struct iovec riov, siov;
	uint8_t in[PD_BUF], out[PD_BUF], snd[PD_BUF];
};

static struct io_uring ring;
static unsigned mode;
static struct io_uring_buf_ring *br;
static uint8_t *bufmem;
static struct pd_conn *conns[PD_FDS_MAX];

static struct io_uring_sqe *get_sqe(void)
{
	struct io_uring_sqe *s = io_uring_get_sqe(&ring);

	if (!s) {
		io_uring_submit(&ring);
		s = io_uring_get_sqe(&ring);
	}
	return s;
}

static void arm_recv(struct pd_conn *c)
{
	struct io_uring_sqe *s = get_sqe();

	if (mode & 4) {
		io_uring_prep_recv_multishot(s, c->fd, NULL, 0, 0);
		s->flags |= IOSQE_BUFFER_SELECT;
		s->buf_group = 0;
	} else if (mode & 8) {
		c->riov.iov_base = c->in + c->inlen;
		c->riov.iov_len = PD_BUF - c->inlen;
		c->rm.msg_iov = &c->riov;
		c->rm.msg_iovlen = 1;
		io_uring_prep_recvmsg(s, c->fd, &c->rm, 0);
	} else {
		io_uring_prep_recv(s, c->fd, c->in + c->inlen,
				   PD_BUF - c->inlen, 0);
	}
	if (mode & 2)
		s->ioprio |= IORING_RECVSEND_POLL_FIRST;
	io_uring_sqe_set_data64(s, ((uint64_t)c->fd << 8) | T_RECV);
}

static void kick_send(struct pd_conn *c)
{
	struct io_uring_sqe *s;

	if (c->busy || !c->outlen)
		return;
	memcpy(c->snd, c->out, c->outlen);
	s = get_sqe();
	if (mode & 8) {
		c->siov.iov_base = c->snd;
		c->siov.iov_len = c->outlen;
		c->sm.msg_iov = &c->siov;
		c->sm.msg_iovlen = 1;
		io_uring_prep_sendmsg(s, c->fd, &c->sm, MSG_NOSIGNAL);
	} else {
		io_uring_prep_send(s, c->fd, c->snd, c->outlen, MSG_NOSIGNAL);
	}
	io_uring_sqe_set_data64(s, ((uint64_t)c->fd << 8) | T_SEND);
	c->outlen = 0;
	c->busy = true;
}

/* Appends n received bytes (copied from p unless they are in c->in
 * already) and answers every whole frame. */
static void consume(struct pd_conn *c, const uint8_t *p, size_t n)
{
	size_t off = 0;

	if (n > PD_BUF - c->inlen)
		n = PD_BUF - c->inlen;
	if (p)
		memcpy(c->in + c->inlen, p, n);
	c->inlen += n;
	while (c->inlen - off >= WIRE_HDR_LEN) {
		struct wire_hdr h;
		size_t flen;

		if (wire_hdr_decode(c->in + off, c->inlen - off, &h, NULL) < 0)
			break;
		flen = WIRE_HDR_LEN + h.len;
		if (c->inlen - off < flen || c->outlen + flen > PD_BUF)
			break;
		h.flags |= WIRE_F_REPLY;
		wire_hdr_encode(&h, c->out + c->outlen);
		memcpy(c->out + c->outlen + WIRE_HDR_LEN,
		       c->in + off + WIRE_HDR_LEN, h.len);
		c->outlen += flen;
		off += flen;
	}
	memmove(c->in, c->in + off, c->inlen - off);
	c->inlen -= off;
}

static void setup_buf_ring(void)
{
	struct io_uring_buf_reg reg = { .ring_entries = BUFS, .bgid = 0 };
	int ret;

	br = mmap(NULL, BUFS * sizeof(struct io_uring_buf),
		  PROT_READ | PROT_WRITE, MAP_ANONYMOUS | MAP_PRIVATE, -1, 0);
	bufmem = malloc((size_t)BUFS * BSZ);
	if (br == MAP_FAILED || !bufmem) {
		fprintf(stderr, "uring_pingd: no memory for buffers\n");
		exit(1);
	}
	io_uring_buf_ring_init(br);
	reg.ring_addr = (unsigned long)br;
	ret = io_uring_register_buf_ring(&ring, &reg, 0);
	if (ret) {
		fprintf(stderr, "uring_pingd: buffer ring: %s\n",
			strerror(-ret));
		exit(1);
	}
	for (int i = 0; i < BUFS; i++)
		io_uring_buf_ring_add(br, bufmem + (size_t)i * BSZ, BSZ, i,
				      io_uring_buf_ring_mask(BUFS), i);
	io_uring_buf_ring_advance(br, BUFS);
}

static void on_cqe(struct io_uring_cqe *cqe)
{
	uint64_t ud = cqe->user_data;
	int fd = (int)(ud >> 8);
	struct pd_conn *c;

	if ((ud & 0xff) == T_ACC) {
		if (cqe->res < 0 || cqe->res >= PD_FDS_MAX)
			return;
		c = calloc(1, sizeof(*c));
		if (!c) {
			close(cqe->res);
			return;
		}
		c->fd = cqe->res;
		conns[c->fd] = c;
		arm_recv(c);
		return;
	}
	c = fd < PD_FDS_MAX ? conns[fd] : NULL;
	if (!c)
		return;
	if ((ud & 0xff) == T_SEND) {
		c->busy = false;
		kick_send(c);
		return;
	}
	if (cqe->res == -ENOBUFS) {
		arm_recv(c);
		return;
	}
	if (cqe->res <= 0) {
		close(c->fd);
		conns[fd] = NULL;
		free(c);
		return;
	}
	if (mode & 4) {
		int bid = (int)(cqe->flags >> IORING_CQE_BUFFER_SHIFT);
		uint8_t *b = bufmem + (size_t)bid * BSZ;

		consume(c, b, (size_t)cqe->res);
		io_uring_buf_ring_add(br, b, BSZ, bid,
				      io_uring_buf_ring_mask(BUFS), 0);
		io_uring_buf_ring_advance(br, 1);
		if (!(cqe->flags & IORING_CQE_F_MORE))
			arm_recv(c);
	} else {
		consume(c, NULL, (size_t)cqe->res);
		arm_recv(c);
	}
	kick_send(c);
}

/* Mode 32: the classic event loop, level-triggered epoll. */
static int epoll_serve(int ls)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.fd = ls };
	struct epoll_event evs[256];
	int ep = epoll_create1(EPOLL_CLOEXEC);

	if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, ls, &ev) < 0) {
		perror("uring_pingd: epoll");
		return 1;
	}
	for (;;) {
		int n = epoll_wait(ep, evs, 256, -1);

		for (int i = 0; i < n; i++) {
			int fd = evs[i].data.fd;
			struct pd_conn *c;
			ssize_t r;

			if (fd == ls) {
				fd = accept4(ls, NULL, NULL, SOCK_CLOEXEC);
				if (fd < 0 || fd >= PD_FDS_MAX ||
				    !(c = calloc(1, sizeof(*c)))) {
					if (fd >= 0)
						close(fd);
					continue;
				}
				c->fd = fd;
				conns[fd] = c;
				ev.data.fd = fd;
				epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
				continue;
			}
			c = conns[fd];
			r = read(fd, c->in + c->inlen, PD_BUF - c->inlen);
			if (r <= 0) {
				close(fd);
				conns[fd] = NULL;
				free(c);
				continue;
			}
			consume(c, NULL, (size_t)r);
			if (c->outlen && write(fd, c->out, c->outlen) < 0)
				perror("uring_pingd: write");
			c->outlen = 0;
		}
	}
}

int main(int argc, char **argv)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct io_uring_params p = { 0 };
	struct io_uring_sqe *s;
	int ls, ret;

	if (argc == 4 && !strcmp(argv[2], "-m"))
		mode = (unsigned)atoi(argv[3]);
	else if (argc != 2 || strlen(argv[1]) >= sizeof(sa.sun_path)) {
		fprintf(stderr, "usage: uring_pingd SOCKET [-m MODE]\n");
		return 2;
	}
	strcpy(sa.sun_path, argv[1]);
	unlink(argv[1]);
	ls = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (ls < 0 || bind(ls, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    listen(ls, 512) < 0) {
		perror("uring_pingd: listen");
		return 1;
	}
	if (mode & 32)
		return epoll_serve(ls);
	p.flags = (mode & 1) ? IORING_SETUP_DEFER_TASKRUN |
			       IORING_SETUP_SINGLE_ISSUER :
			       IORING_SETUP_COOP_TASKRUN |
			       IORING_SETUP_TASKRUN_FLAG |
			       IORING_SETUP_SUBMIT_ALL;
	ret = io_uring_queue_init_params(1024, &ring, &p);
	if (ret < 0) {
		fprintf(stderr, "uring_pingd: io_uring: %s\n", strerror(-ret));
		return 1;
	}
	if (mode & 4)
		setup_buf_ring();
	s = get_sqe();
	io_uring_prep_multishot_accept(s, ls, NULL, NULL, SOCK_CLOEXEC);
	io_uring_sqe_set_data64(s, T_ACC);
	for (;;) {
		struct io_uring_cqe *cqe;
		unsigned head, n = 0;

		if (mode & 16) {
			struct timespec t0, t;

			io_uring_submit(&ring);
			clock_gettime(CLOCK_MONOTONIC, &t0);
			do {
				if (io_uring_peek_cqe(&ring, &cqe) == 0)
					break;
				clock_gettime(CLOCK_MONOTONIC, &t);
			} while ((uint64_t)(t.tv_sec - t0.tv_sec) * 1000000000ull +
				 (uint64_t)(t.tv_nsec - t0.tv_nsec) < PD_SPIN_NS);
		}
		ret = io_uring_submit_and_wait(&ring, 1);
		if (ret < 0 && ret != -EINTR)
			break;
		io_uring_for_each_cqe(&ring, head, cqe) {
			on_cqe(cqe);
			n++;
		}
		io_uring_cq_advance(&ring, n);
	}
	fprintf(stderr, "uring_pingd: %s\n", strerror(-ret));
	return 1;
}
