/* SPDX-License-Identifier: MIT */
/* Test library (libwctest): synthetic checkpoints for the layout tests (synth_model.h). */
#include "synth_model.h"

void synth_wcgen(const char *preset, const char *dir, const char *args)
{
	const char *top = getenv("WC_TOP"), *build = getenv("BUILD");
	char bin[1024], cmd[4096];

	snprintf(bin, sizeof(bin), "%s/%s/bin/wcgen", top ? top : ".",
		 build ? build : "build");
	T_SKIP_IF(access(bin, X_OK), "%s not built", bin);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s' && '%s' %s --out '%s' %s >/dev/null",
		 dir, bin, preset, dir, args ? args : "");
	T_EQ_INT(system(cmd), 0);
}

void synth_wcgen_headers(const char *preset, const char *dir)
{
	synth_wcgen(preset, dir, "--headers-only");
}

void synth_add(struct synth *s, const char *dtype, unsigned esize,
	       uint32_t ndim, uint64_t d0, uint64_t d1, uint64_t d2,
	       const char *fmt, ...)
{
	struct synth_t *t = &s->t[s->n++];
	va_list ap;

	T_ASSERT(s->n <= 4096);
	va_start(ap, fmt);
	vsnprintf(t->name, sizeof(t->name), fmt, ap);
	va_end(ap);
	t->dtype = dtype;
	t->esize = esize;
	t->ndim = ndim;
	t->shape[0] = d0;
	t->shape[1] = d1;
	t->shape[2] = d2;
}

void synth_write_as(const struct synth *s, const char *dir,
		    const char *config, bool sparse)
{
	char path[512], *hdr;
	size_t cap = 1u << 20, n = 0;
	uint64_t off = 0, hl;
	FILE *f;

	mkdir(dir, 0700);
	snprintf(path, sizeof(path), "%s/config.json", dir);
	f = fopen(path, "w");
	T_ASSERT(f);
	fputs(config, f);
	fclose(f);
	hdr = malloc(cap);
	T_ASSERT(hdr);
	n += (size_t)snprintf(hdr + n, cap - n, "{");
	for (unsigned i = 0; i < s->n; i++) {
		const struct synth_t *t = &s->t[i];
		uint64_t bytes = t->esize;

		n += (size_t)snprintf(hdr + n, cap - n, "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[",
				      i ? "," : "", t->name, t->dtype);
		for (uint32_t d = 0; d < t->ndim; d++) {
			bytes *= t->shape[d];
			n += (size_t)snprintf(hdr + n, cap - n, "%s%llu", d ? "," : "",
					      (unsigned long long)t->shape[d]);
		}
		n += (size_t)snprintf(hdr + n, cap - n, "],\"data_offsets\":[%llu,%llu]}",
				      (unsigned long long)off,
				      (unsigned long long)(off + bytes));
		off += bytes;
		T_ASSERT(n < cap - 1024);
	}
	n += (size_t)snprintf(hdr + n, cap - n, "}");
	while (n % 8)
		hdr[n++] = ' ';
	snprintf(path, sizeof(path), "%s/model.safetensors", dir);
	f = fopen(path, "w");
	T_ASSERT(f);
	hl = n;
	fwrite(&hl, 8, 1, f);     /* little-endian hosts only */
	fwrite(hdr, 1, n, f);
	if (sparse)
		T_ASSERT(ftruncate(fileno(f), (off_t)(8 + n + off)) == 0);
	for (uint64_t i = 0; !sparse && i < off; i++)
		fputc((int)((i * 131 + (i >> 8) * 7 + 1) & 0xff), f);
	fclose(f);
	free(hdr);
}

void synth_write(const struct synth *s, const char *dir,
		 const char *config)
{
	synth_write_as(s, dir, config, false);
}
