/* SPDX-License-Identifier: MIT */
/* CUDA device discovery through nvidia-smi (gpus.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "gpus.h"
#include "paths.h"

struct gpu_row {
	int index;
	char uuid[GPU_UUID_LEN];
};

/* One popen of nvidia-smi (tens of milliseconds); the command is fixed. */
static int gpus_query(struct gpu_row *rows, int max, char *err)
{
	char line[256];
	FILE *f;
	int n = 0, st;

	f = popen("nvidia-smi --query-gpu=index,uuid --format=csv,noheader 2>/dev/null",
		  "re");
	if (!f)
		return base_errf(err, errno, "cannot run nvidia-smi: %s",
			       strerror(errno));
	while (fgets(line, sizeof(line), f)) {
		char uuid[GPU_UUID_LEN];
		int idx;

		if (sscanf(line, "%d, %63s", &idx, uuid) != 2 ||
		    strncmp(uuid, "GPU-", 4))
			continue;
		if (n == max)
			break;
		rows[n].index = idx;
		snprintf(rows[n].uuid, sizeof(rows[n].uuid), "%s", uuid);
		n++;
	}
	st = pclose(f);
	if (st != 0 || n == 0)
		return base_errf(err, ENODEV,
			       "no GPU found (nvidia-smi failed or listed none); pass --backend host to use host memory, or --num-gpus N with GPU UUIDs visible");
	return n;
}

int gpus_list(char (*uuids)[GPU_UUID_LEN], int max, char *err)
{
	const char *vis = getenv("CUDA_VISIBLE_DEVICES");
	struct gpu_row rows[GPUS_MAX];
	char buf[1024], *tok, *save;
	int n, out = 0;

	n = gpus_query(rows, GPUS_MAX, err);
	if (n < 0)
		return n;
	if (!vis) {
		for (int i = 0; i < n && i < max; i++)
			snprintf(uuids[out++], GPU_UUID_LEN, "%s",
				 rows[i].uuid);
		return out;
	}
	snprintf(buf, sizeof(buf), "%s", vis);
	for (tok = strtok_r(buf, ",", &save); tok && out < max;
	     tok = strtok_r(NULL, ",", &save)) {
		char *end;
		long idx = strtol(tok, &end, 10);
		int found = -1;

		for (int i = 0; i < n && found < 0; i++) {
			if (*tok && !*end && rows[i].index == idx)
				found = i;
			else if (!strncmp(tok, "GPU-", 4) &&
				 !strncmp(rows[i].uuid, tok, strlen(tok)))
				found = i;
		}
		if (found < 0)
			break; /* CUDA stops at the first invalid entry too */
		snprintf(uuids[out++], GPU_UUID_LEN, "%s", rows[found].uuid);
	}
	if (!out)
		return base_errf(err, ENODEV,
			       "CUDA_VISIBLE_DEVICES='%s' selects none of the %d GPUs nvidia-smi lists; fix it or unset it",
			       vis, n);
	return out;
}

int gpus_device_name(const char *spec, char *out, size_t len, char *err)
{
	char uuids[GPUS_MAX][GPU_UUID_LEN];
	char *end;
	long idx;
	int n, ret;

	ret = paths_device_name(spec, out, len, err);
	if (ret != -ENOENT)
		return ret;
	idx = strtol(spec, &end, 10);
	if (*end || idx < 0)
		return base_errf(err, EINVAL,
			       "device '%s' is not host, host:NAME, host-NAME (as wcctl status prints it), GPU-<uuid> or a CUDA ordinal",
			       spec);
	n = gpus_list(uuids, GPUS_MAX, err);
	if (n < 0)
		return n;
	if (idx >= n)
		return base_errf(err, ENODEV,
			       "CUDA device %ld does not exist (%d visible); use 0..%d or a GPU-<uuid>",
			       idx, n, n - 1);
	snprintf(out, len, "%s", uuids[idx]);
	return 0;
}
