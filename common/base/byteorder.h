/*
 * byteorder.h: fixed-width integers to and from bytes in a stated byte
 * order, whatever the host's.
 *
 * Big-endian: the Postgres protocol, Strata's own wire protocols, and the
 * pageserver's keys and files (memcmp then orders keys as numbers).
 * Little-endian: what PostgreSQL writes (WAL, pg_control, pages) on every
 * platform we build for, and the safekeeper's control file.
 *
 * p need not be aligned; p must hold the 2, 4 or 8 bytes.  Header only and
 * libc only: the compute extension, the pure cores and the tests include it.
 */
#ifndef STRATA_COMMON_BYTEORDER_H
#define STRATA_COMMON_BYTEORDER_H

#include <stdint.h>

static inline uint16_t get_be16(const void *p)
{
    const uint8_t *b = p;
    return (uint16_t)(b[0] << 8 | b[1]);
}

static inline uint32_t get_be32(const void *p)
{
    const uint8_t *b = p;
    return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
}

static inline uint64_t get_be64(const void *p)
{
    const uint8_t *b = p;
    return (uint64_t)get_be32(b) << 32 | get_be32(b + 4);
}

static inline void put_be16(void *p, uint16_t v)
{
    uint8_t *b = p;
    b[0] = (uint8_t)(v >> 8);
    b[1] = (uint8_t)v;
}

static inline void put_be32(void *p, uint32_t v)
{
    uint8_t *b = p;
    b[0] = (uint8_t)(v >> 24);
    b[1] = (uint8_t)(v >> 16);
    b[2] = (uint8_t)(v >> 8);
    b[3] = (uint8_t)v;
}

static inline void put_be64(void *p, uint64_t v)
{
    uint8_t *b = p;
    put_be32(b, (uint32_t)(v >> 32));
    put_be32(b + 4, (uint32_t)v);
}

static inline uint16_t get_le16(const void *p)
{
    const uint8_t *b = p;
    return (uint16_t)(b[0] | b[1] << 8);
}

static inline uint32_t get_le32(const void *p)
{
    const uint8_t *b = p;
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

static inline uint64_t get_le64(const void *p)
{
    const uint8_t *b = p;
    return (uint64_t)get_le32(b) | (uint64_t)get_le32(b + 4) << 32;
}

static inline void put_le16(void *p, uint16_t v)
{
    uint8_t *b = p;
    b[0] = (uint8_t)v;
    b[1] = (uint8_t)(v >> 8);
}

static inline void put_le32(void *p, uint32_t v)
{
    uint8_t *b = p;
    b[0] = (uint8_t)v;
    b[1] = (uint8_t)(v >> 8);
    b[2] = (uint8_t)(v >> 16);
    b[3] = (uint8_t)(v >> 24);
}

static inline void put_le64(void *p, uint64_t v)
{
    uint8_t *b = p;
    put_le32(b, (uint32_t)v);
    put_le32(b + 4, (uint32_t)(v >> 32));
}

#endif
