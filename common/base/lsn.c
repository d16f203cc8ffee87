/*
 * lsn.c: formatting and parsing of LSNs and ids.  See lsn.h.
 */
#include "base/lsn.h"

#include <stdio.h>
#include <string.h>
#include <sys/random.h>

#include "base/hex.h"

char *lsn_format(lsn_t lsn, char *buf)
{
    snprintf(buf, LSN_FMT_LEN, "%X/%X", (unsigned)(lsn >> 32), (unsigned)lsn);
    return buf;
}

static int hex_value(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Parses 1..8 hex digits ending at a terminator; returns chars consumed or 0. */
static size_t parse_hex32(const char *s, char terminator, uint32_t *out)
{
    uint32_t v = 0;
    size_t n = 0;
    while (s[n] != terminator) {
        int d = hex_value(s[n]);
        if (d < 0 || n == 8)
            return 0;
        v = (v << 4) | (uint32_t)d;
        n++;
    }
    *out = v;
    return n;
}

bool lsn_parse(const char *s, lsn_t *out)
{
    uint32_t hi, lo;
    size_t n = parse_hex32(s, '/', &hi);
    if (n == 0)
        return false;
    if (parse_hex32(s + n + 1, '\0', &lo) == 0)
        return false;
    *out = ((lsn_t)hi << 32) | lo;
    return true;
}

char *strata_id_format(const strata_id *id, char *buf)
{
    hex_encode(id->b, STRATA_ID_LEN, buf);
    return buf;
}

bool strata_id_parse(const char *s, strata_id *out)
{
    strata_id id;
    for (int i = 0; i < STRATA_ID_LEN; i++) {
        int hi = hex_value(s[2 * i]);
        if (hi < 0)
            return false;
        int lo = hex_value(s[2 * i + 1]);
        if (lo < 0)
            return false;
        id.b[i] = (uint8_t)(hi << 4 | lo);
    }
    if (s[2 * STRATA_ID_LEN] != '\0')
        return false;
    *out = id;
    return true;
}

bool strata_id_equal(const strata_id *a, const strata_id *b)
{
    return memcmp(a->b, b->b, STRATA_ID_LEN) == 0;
}

bool strata_id_is_zero(const strata_id *id)
{
    static const strata_id zero;
    return strata_id_equal(id, &zero);
}

bool strata_id_generate(strata_id *id)
{
    size_t got = 0;
    while (got < STRATA_ID_LEN) {
        ssize_t n = getrandom(id->b + got, STRATA_ID_LEN - got, 0);
        if (n < 0)
            return false;
        got += (size_t)n;
    }
    return true;
}
