/* SPDX-License-Identifier: MIT */
#include <stdlib.h>
#include <string.h>

#include "utf8.h"

size_t utf8_seq_len(const unsigned char *s, size_t n)
{
	unsigned char c = s[0], lo = 0x80, hi = 0xbf;
	size_t len;

	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf)
		len = 2;
	else if (c >= 0xe0 && c <= 0xef)
		len = 3;
	else if (c >= 0xf0 && c <= 0xf4)
		len = 4;
	else
		return 0;	/* a continuation byte, C0/C1 (overlong), F5.. */
	if (c == 0xe0)
		lo = 0xa0;	/* overlong */
	else if (c == 0xed)
		hi = 0x9f;	/* surrogates */
	else if (c == 0xf0)
		lo = 0x90;	/* overlong */
	else if (c == 0xf4)
		hi = 0x8f;	/* above U+10FFFF */
	if (n < len || s[1] < lo || s[1] > hi)
		return 0;
	for (size_t i = 2; i < len; i++)
		if ((s[i] & 0xc0) != 0x80)
			return 0;
	return len;
}

char *utf8_sanitize(const char *s)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t n = strlen(s), o = 0;
	char *out = malloc(3 * n + 1);	/* each byte at most U+FFFD's 3 */

	if (!out)
		return NULL;
	while (n) {
		size_t k = utf8_seq_len(p, n);

		if (k) {
			memcpy(out + o, p, k);
			o += k;
		} else {
			memcpy(out + o, "\xef\xbf\xbd", 3);
			o += 3;
			k = 1;
		}
		p += k;
		n -= k;
	}
	out[o] = '\0';
	return out;
}

json_t *json_text(const char *s)
{
	char *t;
	json_t *j;

	if (!s)
		return json_null();
	j = json_string(s);
	if (j)
		return j;
	t = utf8_sanitize(s);
	j = t ? json_string(t) : NULL;
	free(t);
	return j;
}
