/*
 * s3_xml.h: decoders of the XML bodies an S3 server sends (ListObjectsV2,
 * InitiateMultipartUpload, CompleteMultipartUpload, DeleteObjects, Error).
 *
 * The bodies are untrusted input: each decoder accepts only a well-formed
 * document of the small XML subset S3 uses (elements, attributes, character
 * data, the five predefined entities and character references, comments and
 * processing instructions) with the expected root element and fields, and
 * rejects everything else (DOCTYPE, CDATA, mixed content, bad UTF-8 in
 * character references, more than S3XML_MAX_DEPTH levels, more than
 * S3XML_MAX_BODY bytes) with -EPROTO and a one-line reason in err.
 *
 * Pure C over libc, no IO: fuzzed by tests/fuzz/fuzz_s3_xml.c.
 * Not for: building requests (remote_s3.c writes its two request bodies).
 */
#ifndef STRATA_COMMON_S3_XML_H
#define STRATA_COMMON_S3_XML_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/must_check.h"

#define S3XML_MAX_BODY (16u << 20)
#define S3XML_MAX_DEPTH 16
#define S3XML_MAX_ERR 256

/* One page of ListObjectsV2 (ListBucketResult). */
typedef struct s3xml_list_entry {
    char *key; /* malloc'd, the full key as the server names it */
    uint64_t size;
} s3xml_list_entry;

typedef struct s3xml_list_page {
    s3xml_list_entry *entries; /* malloc'd array of n */
    size_t n;
    bool truncated;   /* IsTruncated: another page follows */
    char *next_token; /* NextContinuationToken, malloc'd; set iff truncated */
} s3xml_list_page;

/* An S3 <Error> document's fields (empty strings when absent). */
typedef struct s3xml_error {
    char code[64];
    char message[192];
} s3xml_error;

/* The outcome of a DeleteObjects request (DeleteResult). */
typedef struct s3xml_delete_result {
    size_t deleted;            /* <Deleted> entries */
    size_t errors;             /* <Error> entries */
    char first_error_key[256]; /* the first failed key (truncated) */
    s3xml_error first_error;   /* and its code and message */
} s3xml_delete_result;

/* Decodes a ListBucketResult; on success the caller frees *out with
 * s3xml_list_page_free.  On failure *out is empty. */
STRATA_MUST_CHECK int s3xml_parse_list(const char *body, size_t len, s3xml_list_page *out,
                                       char err[S3XML_MAX_ERR]);
void s3xml_list_page_free(s3xml_list_page *page);

/* Decodes InitiateMultipartUploadResult: copies the UploadId (non-empty,
 * printable ASCII) into upload_id. */
STRATA_MUST_CHECK int s3xml_parse_initiate(const char *body, size_t len, char *upload_id,
                                           size_t cap, char err[S3XML_MAX_ERR]);

/* Decodes the body of a CompleteMultipartUpload answered 200: 0 for a
 * CompleteMultipartUploadResult, 1 for an <Error> document (S3 may report a
 * failure with status 200; *e is filled), -EPROTO for anything else. */
STRATA_MUST_CHECK int s3xml_parse_complete(const char *body, size_t len, s3xml_error *e,
                                           char err[S3XML_MAX_ERR]);

/* Decodes a DeleteResult. */
STRATA_MUST_CHECK int s3xml_parse_delete(const char *body, size_t len, s3xml_delete_result *out,
                                         char err[S3XML_MAX_ERR]);

/* Decodes an <Error> document (the body of a 4xx/5xx answer). */
STRATA_MUST_CHECK int s3xml_parse_error(const char *body, size_t len, s3xml_error *e,
                                        char err[S3XML_MAX_ERR]);

#endif
