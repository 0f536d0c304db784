/* SPDX-License-Identifier: MIT */
/*
 * The client against damaged replies: a fake daemon (client_fakesrv.h)
 * damages one reply in four in one random way (bits flipped, a u32 blown
 * up, bytes cut or added), over many seeded connections. Each connect,
 * HELLO, attach, verify, detach must succeed or fail with an error code and
 * a message -- never crash, hang past its timeout, or leak a descriptor or
 * a mapping. Run under ASan/UBSan by `make test SANITIZE=address,undefined`.
 */
#include <dirent.h>

#include "client_fakesrv.h"

#define ROUNDS_DEFAULT 400     /* WC_MUTATE_ROUNDS overrides, for deeper runs */

static int count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *de;
	int n = 0;

	T_ASSERT(d);
	while ((de = readdir(d)))
		n += de->d_name[0] != '.';
	closedir(d);
	return n;
}

static int count_maps(void)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];
	int n = 0;

	T_ASSERT(f);
	while (fgets(line, sizeof(line), f))
		n += strstr(line, "fake-pool") != NULL;
	fclose(f);
	return n;
}

int main(void)
{
	const char *env = getenv("WC_MUTATE_ROUNDS");
	unsigned rounds = env ? (unsigned)strtoul(env, NULL, 10) : ROUNDS_DEFAULT;
	unsigned ok = 0, failed[3] = { 0 };
	int fds0;

	T_ASSERT(mkdtemp(strcpy(fake_dir, "/tmp/wct-mutate.XXXXXX")));
	atexit(fake_cleanup);
	signal(SIGPIPE, SIG_IGN);
	snprintf(fake_sock, sizeof(fake_sock), "%s/fake.sock", fake_dir);
	fake_srv_start();
	fds0 = count_fds();
	for (unsigned r = 1; r <= rounds; r++) {
		char label[32];
		struct wc_connect_opts o = { .socket = fake_sock, .label = label,
					     .timeout_ms = 300 };
		struct wc_conn *c;
		struct wc_model *m;
		struct wc_error e;
		uint64_t bad;

		snprintf(label, sizeof(label), "mutate:%u", r);
		if (wc_connect(&o, &c, &e))
			T_FAIL("round %u: connect: %s", r, e.msg);
		if (wc_hello(c, NULL, NULL, &e)) {
			failed[0]++;
		} else if (wc_attach(c, 0, &m, NULL, &e)) {
			failed[1]++;
		} else {
			/* whatever was attached stays inside its pools */
			for (uint64_t i = 0; i < wc_tensor_count(m); i++) {
				const struct wc_tensor *t = wc_tensor_at(m, i);
				volatile uint8_t sink = 0;

				for (uint64_t b = 0; b < t->bytes; b += 512)
					sink += ((const uint8_t *)t->ptr)[b];
				(void)sink;
			}
			if (wc_verify(m, &bad, &e))
				failed[2]++;
			else
				ok++;
			wc_detach(m, NULL);
		}
		if (e.code) {
			T_ASSERT(e.code > 0);
			T_ASSERT(e.msg[0]);
		}
		wc_close(c);
	}
	T_EQ_INT(count_fds(), fds0);
	T_EQ_INT(count_maps(), 0);
	printf("%u rounds of damaged replies: %u clean, %u failed at hello, %u at attach, %u at verify; no crash, no leak\n",
	       rounds, ok, failed[0], failed[1], failed[2]);
	/* the outcomes must vary, or the damage is not reaching the client */
	T_CMP_INT(failed[0], >, 0);
	T_CMP_INT(failed[1], >, 0);
	T_CMP_INT(ok, >, 0);
	return 0;
}
