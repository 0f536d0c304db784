/* SPDX-License-Identifier: MIT */
/*
 * libwcache: HELLO -- the engine's identity (through identcache.c; built
 * by ident.c) sent to the daemon, and the daemon's answer: OK with what it
 * serves, or the list of differing fields.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "client.h"
#include "err.h"
#include "hash.h"
#include "identity.h"

/* Fills c->info from the HELLO reply and the daemon's identity. */
static int info_fill(struct wc_conn *c, const struct wire_hello_reply *r,
		     struct wc_error *err)
{
	struct wc_info *in = &c->info;
	struct ident *id;
	char e[BASE_ERR_LEN];
	int ret;

	id = malloc(sizeof(*id));
	if (!id)
		return wc__fail(err, ENOMEM, "out of memory for an identity");
	ret = ident_decode(id, r->identity, r->identity_len, e);
	if (ret) {
		free(id);
		return wc__fail(err, -ret, "the daemon at %s sent an identity this library cannot read: %s",
				c->sock, e);
	}
	memset(in, 0, sizeof(*in));
	in->pid = (pid_t)r->daemon_pid;
	/* SO_PEERCRED names whoever called listen(): after a hot handover,
	 * a daemon that exited; the reply names the one that answers */
	if (in->pid > 0 && in->pid != c->pid)
		wc__follow_daemon(c, in->pid);
	base_hash_hex(r->digest, in->identity);
	in->version = r->version;
	in->tensors = r->tensors;
	in->bytes = r->bytes;
	wc__strlcpy(in->device, id->device_uuid, sizeof(in->device));
	wc__strlcpy(in->model, id->model_path, sizeof(in->model));
	in->tp_size = (int)id->tp_size;
	in->tp_rank = (int)id->tp_rank;
	in->pp_size = (int)id->pp_size;
	in->pp_rank = (int)id->pp_rank;
	in->protocol = WIRE_VERSION;
	in->mem = strncmp(id->device_uuid, "GPU-", 4) ? WC_MEM_HOST :
							 WC_MEM_CUDA;
	free(id);
	return 0;
}

/* Builds the ESTALE message: the field names first (so they survive
 * truncation), then each field with both values. */
static int mismatch_fail(struct wc_conn *c, struct wire_hello_reply *r,
			 const char *mine, struct wc_error *err)
{
	struct wire_mismatch *mm;
	char e[BASE_ERR_LEN], names[512] = "", vals[WC_ERR_MSG_LEN - 640] = "";
	size_t nl = 0, vl = 0;
	int ret = 0;

	mm = malloc(sizeof(*mm));
	if (!mm)
		return wc__fail(err, ENOMEM, "out of memory for a mismatch");
	for (uint32_t i = 0; i < r->nmismatch && !ret; i++) {
		ret = wire_hello_reply_next(r, mm, e);
		if (ret)
			break;
		if (nl < sizeof(names))
			nl += (size_t)snprintf(names + nl, sizeof(names) - nl,
					       "%s%s", i ? ", " : "", mm->field);
		if (vl < sizeof(vals))
			vl += (size_t)snprintf(vals + vl, sizeof(vals) - vl,
					       "%s%s: daemon=%s engine=%s",
					       i ? "; " : "", mm->field,
					       mm->daemon, mm->client);
	}
	free(mm);
	if (ret)
		return wc__fail(err, -ret, "the daemon at %s sent a bad HELLO reply: %s", c->sock, e);
	return wc__fail(err, ESTALE, "identity mismatch: the daemon for %s (pid %d) serves a different cache than this engine expects; %u field(s) differ (%s): %s. Start a daemon with the engine's model and parallel settings, or point the engine at the matching daemon (it serves %s%s%s)",
			c->info.device[0] ? c->info.device : c->sock,
			(int)r->daemon_pid, r->nmismatch, names, vals,
			c->info.model, mine ? ", this engine expects " : "",
			mine ? mine : "");
}

int wc_hello(struct wc_conn *c, const struct wc_expect *expect,
	     struct wc_info *info, struct wc_error *err)
{
	struct wire_hello h = { .proto_version = WIRE_VERSION };
	struct wire_hello_reply r;
	struct ident *id = NULL;
	char *mine = NULL;      /* our model path (shown; compared if asked) */
	uint8_t enc[IDENT_ENC_MAX];
	size_t enc_len = 0;
	struct wc_frame f;
	char e[BASE_ERR_LEN];
	uint64_t id_req, t0 = wc__now_ns(), dev0 = c->times.device_ns;
	int ret;

	c->hello_ok = false;
	if (expect) {
		if (!c->dev_open) {
			if (!c->device[0])
				return wc__fail(err, EINVAL, "wc_hello with an expected identity needs the device: set wc_connect_opts.device along with the socket");
			ret = wc__dev_open(c, c->device, e);
			if (ret)
				return wc__fail(err, -ret, "cannot open device '%s': %s", c->device, e);
		}
		id = malloc(sizeof(*id));
		if (!id)
			return wc__fail(err, ENOMEM, "out of memory for an identity");
		ret = wc__ident_get(id, expect, &c->dev, err);
		if (!ret && ident_encode(id, enc, sizeof(enc), &enc_len) < 0)
			ret = wc__fail(err, EINVAL, "the engine's identity cannot be encoded (a field is too long)");
		if (!ret && !(mine = strdup(id->model_path)))
			ret = wc__fail(err, ENOMEM, "out of memory for a path");
		free(id);
		if (ret)
			return ret;
		h.identity = enc;
		h.identity_len = enc_len;
	} else {
		h.flags = WIRE_HELLO_NO_IDENTITY;
	}
	wc__strlcpy(h.label, c->label, sizeof(h.label));
	id_req = c->next_id++;
	wire_frame_begin(&c->w, WIRE_HELLO, 0, id_req);
	wire_hello_put(&c->w, &h);
	ret = wc__call(c, &c->w, id_req, WIRE_HELLO, &f, err);
	if (ret)
		goto out_free;
	wc__frame_release(&f);
	ret = wire_hello_reply_get(f.payload, f.h.len, &r, e);
	if (ret) {
		ret = wc__fail(err, -ret, "the daemon at %s sent a bad HELLO reply: %s", c->sock, e);
		goto out_free;
	}
	ret = info_fill(c, &r, err);
	if (ret)
		goto out_free;
	if (r.status == WIRE_HELLO_MISMATCH || r.nmismatch) {
		ret = mismatch_fail(c, &r, mine, err);
		goto out_free;
	}
	if (r.status != WIRE_HELLO_OK) {
		ret = wc__fail(err, EBADMSG, "the daemon at %s answered HELLO with unknown status %u: upgrade libwcache",
			       c->sock, r.status);
		goto out_free;
	}
	/* The path is shown, not compared (the same checkpoint through a
	 * bind mount or a copy is the same cache), unless the engine asks. */
	if (mine && expect->same_path && strcmp(mine, c->info.model)) {
		ret = wc__fail(err, ESTALE, "the daemon at %s serves the same checkpoint from another path: model_path: daemon=%s engine=%s (wc_expect.same_path asked for the same path; clear it to accept an equal checkpoint anywhere)",
			       c->sock, c->info.model, mine);
		goto out_free;
	}
	free(mine);
	c->hello_ok = true;
	c->times.hello_ns = wc__now_ns() - t0 - (c->times.device_ns - dev0);
	if (info)
		*info = c->info;
	wc__ok(err);
	return 0;
out_free:
	free(mine);
	return ret;
}
