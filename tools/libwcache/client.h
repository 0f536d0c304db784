/* SPDX-License-Identifier: MIT */
/*
 * libwcache internals shared by its .c files (not installed). Internal
 * non-static functions use the wc__ prefix. The files call only the ones
 * below them (test/make/lib_deps.sh checks):
 *   push.c       an update session: wc_push_* (a trainer's weights)
 *   connect.c    wc_connect, wc_close (which detaches what is attached)
 *   attach.c     wc_attach, wc_manifest, wc_detach (pools, import)
 *   life.c       SLEEP, WAKE, UPDATE
 *   hello.c      HELLO: the identity sent, the daemon's answer
 *   identcache.c the identity, once per process and model
 *   identdisk.c  its copy on disk
 *   ident.c      the identity built from the model directory
 *   conn.c       frames, notices, the small requests (PING, STATUS, ...)
 *   dlpack.c     DLPack capsules over the tensors
 *   table.c      the name index, lookup, verify; the helpers (wc__fail ...)
 */
#ifndef WC_CLIENT_H
#define WC_CLIENT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/syscall.h>

#include "gpu.h"
#include "wcache.h"
#include "wire.h"

#define WC_NOTICES_MAX 16            /* queued notices; older are dropped */
#define WC_TIMEOUT_MS_DEFAULT 30000
#define WC_QUIET_REOPEN_NS 1000000000ull /* 1 s without a first frame */
#define WC_VERIFY_CHUNK (8u << 20)   /* bounce buffer for device verify */
#define WC_VERIFY_THREADS_MAX 8
#define WC_VERIFY_PARALLEL_MIN (64ull << 20) /* bytes: below, one thread */

/* One received frame; payload points into the connection's buffer (valid
 * until the next receive); fds are owned until wc__frame_release. */
struct wc_frame {
	struct wire_hdr h;
	const uint8_t *payload;
	unsigned nfds;
	int fds[WIRE_FDS_PER_FRAME];
};

struct wc_conn {
	int fd;                      /* the socket, blocking, CLOEXEC */
	int pidfd;                   /* the daemon's pidfd, -1 if none */
	pid_t pid;                   /* SO_PEERCRED of the daemon */
	int timeout_ms;
	uint64_t next_id;            /* request ids */
	char device[WC_DEVICE_LEN];  /* spec given to wc_connect, "" if none */
	char sock[WC_PATH_LEN];
	char label[WIRE_LABEL_MAX + 1];
	uint8_t *rbuf;               /* receive buffer, <= WIRE_PAYLOAD_MAX */
	uint32_t rcap;
	struct wire_put w;           /* send buffer */
	bool hello_ok;
	bool eof;                    /* the daemon closed the connection */
	/* before its first frame the daemon drops a connection after its
	 * --frame-timeout (10 s): one that stayed quiet longer than
	 * WC_QUIET_REOPEN_NS, or whose peer hung up, is opened again before
	 * it speaks (wc__send) */
	bool spoke;
	uint64_t connected_ns;
	uid_t peer_uid;              /* SO_PEERCRED, trusted at wc_connect */
	struct wc_info info;         /* from the HELLO reply */
	struct gpu_dev dev;          /* opened at the first attach */
	bool dev_open;
	struct wc_attach_times times;
	struct wc_push_times push_times; /* the last update session's */
	struct wc_notice notices[WC_NOTICES_MAX];
	unsigned nq_head, nq_len;
	struct wc_model *models;     /* attached, newest first */
};

struct wc_model {
	struct wc_conn *conn;
	struct wc_model *next;
	struct wc_info info;
	uint64_t lease;              /* the daemon's lease id */
	unsigned flags;
	bool manifest_only;          /* wc_manifest: no lease, no pools */
	/* an in-place update rewrote its pools (WIRE_NOTICE_IN_PLACE):
	 * info.version is the new number, wc_resume fetches the hashes */
	bool hashes_stale;
	uint32_t npools;
	struct gpu_mapping maps[WC_POOLS_MAX];
	void *va;                    /* the pools' reserved range, or NULL */
	uint64_t va_size;
	uint64_t ntensors;
	struct wc_tensor *t;
	char *strings;               /* names and dtypes, one block */
	size_t strings_len;
	uint32_t nbuckets;           /* power of two, >= 2 * ntensors */
	uint32_t *buckets;           /* tensor index + 1, 0 = empty */
};

/* Fills err (may be NULL) and returns -code. */
/* identcache.c: what an identity was computed from, to tell whether it
 * still holds. */
struct ident;
struct model;
struct wc__shard_seen {
	unsigned n;
	bool complete;               /* every shard noted (no allocation failed) */
	bool single_file;            /* the model is one .safetensors file */
	char **path;                 /* each shard, as read */
	uint64_t *size;
	int64_t *mtime_ns;
};
/* ident.c: computes the identity (shards: NULL, or filled as above by
 * wc__shards_note). */
int wc__ident_build(struct ident *id, const struct wc_expect *x,
		    const struct gpu_dev *dev, struct wc__shard_seen *shards,
		    struct wc_error *err);
/* identcache.c: wc__ident_build through the per-process cache. */
int wc__ident_get(struct ident *id, const struct wc_expect *x,
		  const struct gpu_dev *dev, struct wc_error *err);
/* ident.c */
void wc__shards_note(struct wc__shard_seen *s, const struct model *m);
/* For tests: identities computed and served from the cache so far. */
void wc__ident_cache_stats(uint64_t *built, uint64_t *hits);
/* For tests: the same and the disk's part (identdisk.c): entries read,
 * entries written, and why the last lookup did not use it ("" if it did). */
struct wc__idc_counts {
	uint64_t built, hits, disk_hits, disk_writes;
	char disk_why[320];         /* identcache.h WC_IDD_WHY_LEN */
};
void wc__ident_cache_counts(struct wc__idc_counts *c);
/* For tests: empties this process's cache (the disk's stays). */
void wc__ident_cache_drop(void);
/* For tests: how old every file must be for an entry to be written
 * (default 2 s; identdisk.c says why). */
void wc__ident_cache_settle_ns(int64_t ns);

int wc__fail(struct wc_error *err, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
void wc__ok(struct wc_error *err);
uint64_t wc__now_ns(void);
/* Copies src into dst (cap bytes), truncating; always NUL-terminated. */
void wc__strlcpy(char *dst, const char *src, size_t cap);

/* conn.c: frames. wc__call sends the frame in w (begun with id) and waits
 * for the reply of that id and type; notices met on the way are queued, an
 * ERROR reply becomes the error. */
int wc__frame_recv(struct wc_conn *c, struct wc_frame *f, struct wc_error *err);
void wc__frame_release(struct wc_frame *f);
int wc__send(struct wc_conn *c, struct wire_put *w, struct wc_error *err);
/* A new socket connected to c->sock (c->timeout_ms on both directions),
 * its peer's credentials in *cr. 0 and *out, or -errno (nothing open). */
int wc__sock_open(const struct wc_conn *c, int *out, struct ucred *cr);
/* Points the daemon fd (same number: dup3) and pid at another daemon: a
 * hot handover's new one. */
void wc__follow_daemon(struct wc_conn *c, pid_t pid);
int wc__reply(struct wc_conn *c, uint64_t id, unsigned type,
	      struct wc_frame *f, struct wc_error *err);
int wc__call(struct wc_conn *c, struct wire_put *w, uint64_t id,
	     unsigned type, struct wc_frame *f, struct wc_error *err);

/* pidfd_open(2) of pid, or -1 with errno (ENOSYS on a kernel before 5.3).
 * Its number where the C library's headers lack it: 434 on every
 * architecture (reactor/compat.h has the same; libwcache does not include
 * the reactor's liburing shims). */
#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
int wc__pidfd_open(pid_t pid);
/* Opens the backend for spec into c->dev (once), adding its time to
 * c->times.device_ns; err gets the backend's sentence. */
int wc__dev_open(struct wc_conn *c, const char *spec, char *err);

/* attach.c: opens the backend that imports the pools (once): the device
 * given to wc_connect, else the one the daemon's HELLO named. */
int wc__dev_ensure(struct wc_conn *c, struct wc_error *err);

/* table.c: the name index over m->t (m->ntensors set). */
int wc__index_build(struct wc_model *m, struct wc_error *err);
/* attach.c: the models an IN_PLACE notice marked (conn.c: hashes_stale)
 * fetch their new hashes (one MANIFEST); ESTALE when the layout is not
 * theirs. */
int wc__models_refresh(struct wc_conn *c, struct wc_error *err);
void wc__model_free(struct wc_model *m);

#endif
