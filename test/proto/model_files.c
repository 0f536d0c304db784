/* SPDX-License-Identifier: MIT */
/*
 * model_files_of / model_files_same: the files a model was read from, and
 * whether they are as they were. A model read again unchanged is the same;
 * each kind of change is seen and named: a shard touched, rewritten in
 * place, replaced by rename; config.json rewritten, made where there was
 * none, removed; the index rewritten; a shard added beside an index-less
 * directory's (its listing); a single-file model's file touched. A file
 * the index does not name may appear without the model changing.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "err.h"
#include "model.h"
#include "synth_model.h"
#include "t.h"

static char top[64];

/* Runs the shell line line with every @ replaced by path. */
static void sh(const char *line, const char *path)
{
	char cmd[4096];
	size_t o = 0, n = strlen(path);

	for (const char *c = line; *c; c++) {
		T_ASSERT(o + n + 2 < sizeof(cmd));
		if (*c == '@') {
			memcpy(cmd + o, path, n);
			o += n;
		} else {
			cmd[o++] = *c;
		}
	}
	cmd[o] = '\0';
	T_EQ_INT(system(cmd), 0);
}

/* Opens path, takes its files, runs change (a shell line, @ for path;
 * NULL: none), then expects model_files_same to say same, or to name want. */
static void expect(const char *path, const char *change, const char *want)
{
	char err[BASE_ERR_LEN], what[512] = "";
	struct model_files f;
	struct model m;
	bool same;

	if (model_open(&m, path, err))
		T_FAIL("%s", err);
	T_OK(model_files_of(&m, &f));
	model_close(&m);              /* the copy outlives the model */
	if (change) {
		/* a new second, so that a rewrite shows in the times even
		 * on a file system with coarse ones */
		usleep(10000);
		sh(change, path);
	}
	same = model_files_same(&f, what, sizeof(what));
	model_files_free(&f);
	if (!want) {
		if (!same)
			T_FAIL("%s after '%s': not the same: %s", path,
			       change ? change : "nothing", what);
		return;
	}
	if (same)
		T_FAIL("%s after '%s': the same, expected '%s'", path, change,
		       want);
	printf("%s\n", what);
	T_HAS(what, want);
}

int main(void)
{
	char dir[300], one[300], file[400];

	snprintf(top, sizeof(top), "/tmp/wct_files.XXXXXX");
	T_ASSERT(mkdtemp(top));
	snprintf(dir, sizeof(dir), "%s/m", top);
	snprintf(one, sizeof(one), "%s/one", top);

	/* sharded, with an index */
	synth_wcgen("tiny", dir, "--shard-size 4MB");
	expect(dir, NULL, NULL);
	expect(dir, "cp '@/model-00003-of-00003.safetensors' '@/consolidated.safetensors'",
	       NULL);
	expect(dir, "touch '@/model-00002-of-00003.safetensors'",
	       "model-00002-of-00003.safetensors changed (its times)");
	expect(dir, "f='@/model-00001-of-00003.safetensors'; printf x | dd of=\"$f\" bs=1 seek=$(($(stat -c %s \"$f\") - 10)) conv=notrunc 2>/dev/null",
	       "model-00001-of-00003.safetensors changed (its times)");
	expect(dir, "cp '@/model-00003-of-00003.safetensors' '@/t' && mv '@/t' '@/model-00003-of-00003.safetensors'",
	       "model-00003-of-00003.safetensors changed (another file)");
	expect(dir, "echo ' ' >>'@/config.json'", "config.json changed (its size)");
	expect(dir, "touch '@/model.safetensors.index.json'",
	       "model.safetensors.index.json changed (its times)");
	expect(dir, "rm '@/config.json'", "config.json is gone");
	expect(dir, "echo '{}' >'@/config.json'", "config.json is new");

	/* one file, no index: the listing counts */
	synth_wcgen("tiny", one, "");
	expect(one, NULL, NULL);
	expect(one, "cp '@/model.safetensors' '@/more.safetensors'", "one changed (its");
	snprintf(file, sizeof(file), "%s/model.safetensors", one);
	expect(file, NULL, NULL);
	expect(file, "touch '@'", "model.safetensors changed (its times)");

	sh("rm -rf '@'", top);
	return 0;
}
