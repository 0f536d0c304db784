/* SPDX-License-Identifier: MIT */
/*
 * tools/common/utf8: which byte sequences are well-formed UTF-8 (RFC 3629:
 * no overlong forms, no surrogates, nothing above U+10FFFF, nothing cut
 * short), and the sanitised copy that JSON output uses (each other byte
 * as U+FFFD).
 */
#include <stdlib.h>
#include <string.h>

#include "t.h"
#include "utf8.h"

static size_t len_of(const char *s)
{
	return utf8_seq_len((const unsigned char *)s, strlen(s));
}

static void expect_sanitized(const char *in, const char *want)
{
	char *got = utf8_sanitize(in);

	T_ASSERT(got);
	T_EQ_STR(got, want);
	free(got);
}

int main(void)
{
	static const struct { const char *s; size_t len; } seqs[] = {
		{ "a", 1 }, { "\x7f", 1 },
		{ "\xc3\xa9", 2 }, { "\xdf\xbf", 2 },
		{ "\xe0\xa0\x80", 3 }, { "\xef\xbf\xbd", 3 }, { "\xed\x9f\xbf", 3 },
		{ "\xf0\x90\x80\x80", 4 }, { "\xf4\x8f\xbf\xbf", 4 },
		{ "\x80", 0 }, { "\xbf", 0 },		/* continuation bytes */
		{ "\xc0\xaf", 0 }, { "\xc1\xbf", 0 },	/* overlong 2 */
		{ "\xe0\x9f\xbf", 0 },			/* overlong 3 */
		{ "\xf0\x8f\xbf\xbf", 0 },		/* overlong 4 */
		{ "\xed\xa0\x80", 0 }, { "\xed\xbf\xbf", 0 }, /* surrogates */
		{ "\xf4\x90\x80\x80", 0 }, { "\xf5\x80\x80\x80", 0 }, /* > 10FFFF */
		{ "\xff", 0 }, { "\xe9t", 0 },		/* Latin-1 */
		{ "\xc3", 0 }, { "\xe2\x82", 0 },	/* cut short */
		{ "\xe2\x28\xa1", 0 },			/* bad continuation */
	};

	for (size_t i = 0; i < sizeof(seqs) / sizeof(seqs[0]); i++)
		if (len_of(seqs[i].s) != seqs[i].len)
			T_FAIL("sequence %zu: %zu, want %zu", i, len_of(seqs[i].s),
			       seqs[i].len);
	/* n bounds the look: a sequence longer than n is cut short */
	T_EQ_INT(utf8_seq_len((const unsigned char *)"\xc3\xa9", 1), 0);
	expect_sanitized("", "");
	expect_sanitized("/models/llama", "/models/llama");
	expect_sanitized("/m/\xc3\xa9t\xc3\xa9", "/m/\xc3\xa9t\xc3\xa9");
	expect_sanitized("/m/\xe9t\xe9", "/m/\xef\xbf\xbdt\xef\xbf\xbd");
	expect_sanitized("\xc3", "\xef\xbf\xbd");
	expect_sanitized("\xed\xa0\x80x", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbdx");
	expect_sanitized("\xff\xff\xff", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");
	printf("utf8_text: ok\n");
	return 0;
}
