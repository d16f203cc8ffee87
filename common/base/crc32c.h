/*
 * crc32c.h: CRC-32C (Castagnoli), bit-compatible with PostgreSQL's pg_crc32c.
 *
 * For: WAL record CRCs (xl_crc), our control files and on-disk formats.  The
 * streaming form mirrors Postgres's INIT_CRC32C / COMP_CRC32C / FIN_CRC32C:
 *
 *     uint32_t c = crc32c_init();
 *     c = crc32c_update(c, a, alen);
 *     c = crc32c_update(c, b, blen);
 *     c = crc32c_final(c);          // == crc32c(a||b)
 *
 * Not for: anything cryptographic.  Pure functions, libc only, no state, no
 * allocation; safe from any thread and inside Postgres.  On x86 the SSE4.2
 * crc32 instruction is used when the CPU has it (checked at run time), else a
 * slicing-by-8 table; both give identical results.
 */
#ifndef STRATA_COMMON_CRC32C_H
#define STRATA_COMMON_CRC32C_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The starting value of a running CRC (0xFFFFFFFF). */
static inline uint32_t crc32c_init(void)
{
    return 0xFFFFFFFFu;
}

/* Folds len bytes of data into a running CRC; data may be NULL if len is 0. */
uint32_t crc32c_update(uint32_t crc, const void *data, size_t len);

/* The finished CRC of a running value (final xor). */
static inline uint32_t crc32c_final(uint32_t crc)
{
    return crc ^ 0xFFFFFFFFu;
}

/* One-shot CRC-32C of a buffer: crc32c("123456789") == 0xE3069283. */
uint32_t crc32c(const void *data, size_t len);

/* The table implementation, always available (exposed for tests). */
uint32_t crc32c_update_sw(uint32_t crc, const void *data, size_t len);

/* True when crc32c_update_hw may be called on this CPU. */
bool crc32c_hw_available(void);

/* The SSE4.2 implementation; only call it when crc32c_hw_available(). On
 * builds for other architectures it forwards to crc32c_update_sw. */
uint32_t crc32c_update_hw(uint32_t crc, const void *data, size_t len);

#endif
