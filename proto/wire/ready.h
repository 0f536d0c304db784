/* SPDX-License-Identifier: MIT */
/*
 * The ready file (prefix ready_): written by wcd atomically (temp file +
 * rename) once its socket listens, read by wcctl and libwcache. One
 * key=value per line, no spaces around '=', values to the end of the line:
 *
 *   pid=1234
 *   socket=/run/user/1000/wcache/host.sock
 *   device=host
 *   identity=<32 hex digits>
 *   version=1
 *   tensors=291
 *   bytes=16060522496
 *   load_seconds=0.412
 *   model=/models/llama-8b
 *   tp_size=1 tp_rank=0 pp_size=1 pp_rank=0   (one per line)
 *   state=ready
 *   metrics_listen=127.0.0.1:9400   (only when set, as the next two)
 *   log_format=json
 *   log_file=/var/log/wcache/host.log
 *
 *   serve_args=--rules /etc/wcache/r.layout --allow-uid 1001 ...
 *   reloaded=<why>   (only from a wcd --takeover that loaded from disk)
 *
 * metrics_listen, log_format and log_file are the daemon's own options
 * that a hot handover's new daemon (wcctl restart) must be given again;
 * serve_args has them and every other option of wcd's that shapes what is
 * served or who may attach (tools/wcd/serve_args.c makes the list), as
 * wcd's argv words: separated by one space, each byte that is not
 * printable ASCII other than a space or '%' written as %XX (a path keeps
 * its exact bytes). wcctl restart gives the new daemon exactly those
 * words, so that a reload after a failed handover serves what the old
 * daemon served, to whom it served it.
 * Unknown keys are ignored (newer daemons may add some); a known key with a
 * bad value, a duplicate key, a line without '=' or a missing pid, socket or
 * device is an error. Pure except ready_read_file / ready_write_file.
 */
#ifndef WC_READY_H
#define WC_READY_H

#include <stddef.h>
#include <stdint.h>

#define READY_FILE_MAX 16384       /* bytes of a ready file */
#define READY_PATH_MAX 4096
#define READY_STATE_MAX 31
#define READY_ARGS_MAX 8192        /* serve_args, encoded */
#define READY_ARGS_WORDS_MAX 128   /* argv words in serve_args */
#define READY_REASON_MAX 512

struct ready_info {
	int pid;
	char socket[READY_PATH_MAX];
	char device[64];
	char identity[33];             /* hex digest, "" if absent */
	uint64_t version;
	uint64_t tensors;
	uint64_t bytes;
	double load_seconds;
	char model[READY_PATH_MAX];
	int tp_size, tp_rank, pp_size, pp_rank;
	char state[READY_STATE_MAX + 1];
	char metrics_listen[256];      /* "" when not set */
	char log_format[8];
	char log_file[READY_PATH_MAX];
	char serve_args[READY_ARGS_MAX];   /* encoded words, "" if absent */
	char reloaded[READY_REASON_MAX];   /* "" unless a reload */
};

/* Writes the file text into buf; returns its length or -E2BIG. */
int ready_format(const struct ready_info *r, char *buf, size_t len,
		 char *err);
/* Parses buf[0..len) (name for messages) into r. */
int ready_parse(struct ready_info *r, const char *buf, size_t len,
		const char *name, char *err);

/* serve_args: appends argv word w (encoded) to the list in buf (cap
 * bytes, NUL-terminated); -E2BIG when it does not fit, -EINVAL for an
 * empty word (an option's empty value goes as one word, "--opt="). */
int ready_args_put(char *buf, size_t cap, const char *w);
/* Decodes the list s into store (cap bytes) and points words[0..n) at its
 * words; returns n, or -E2BIG (more than max words, or store too small),
 * -EINVAL (a bad %XX or a NUL byte). */
int ready_args_split(const char *s, char *store, size_t cap, char **words,
		     unsigned max);

/* Blocking helpers: read and parse a file (-ENOENT when absent); write
 * atomically through path.tmp.PID + rename, mode 0600 (atomic for
 * readers; no fsync: nothing needs the file after a machine's crash). */
int ready_read_file(struct ready_info *r, const char *path, char *err);
int ready_write_file(const struct ready_info *r, const char *path, char *err);

#endif
