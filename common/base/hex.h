/*
 * hex.h: bytes as lowercase hex digits.
 *
 * For: ids (lsn.c), digests (pgwire's MD5 password, S3 signatures) and
 * anything else Strata prints as hex.  Header only and libc only.
 * Not for: parsing hex (strata_id_parse, lsn_parse each check their own
 * format).
 */
#ifndef STRATA_COMMON_HEX_H
#define STRATA_COMMON_HEX_H

#include <stddef.h>
#include <stdint.h>

/* Writes the 2 * n hex digits of d[n] and a NUL into out. */
static inline void hex_encode(const void *d, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    const uint8_t *b = d;
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[b[i] >> 4];
        out[2 * i + 1] = digits[b[i] & 15];
    }
    out[2 * n] = '\0';
}

#endif
