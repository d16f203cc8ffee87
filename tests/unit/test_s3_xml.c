/*
 * Unit tests for common/net/s3_xml.c: the S3 response decoders accept what S3
 * and radosgw send (bodies as captured from radosgw) and reject malformed
 * or hostile bodies with -EPROTO and a reason.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "net/s3_xml.h"

#define PROLOG "<?xml version=\"1.0\" encoding=\"UTF-8\"?>"

static int list(const char *body, s3xml_list_page *page, char *err)
{
    return s3xml_parse_list(body, strlen(body), page, err);
}

static void test_list_accepts_a_real_page(void **state)
{
    (void)state;
    const char *body = PROLOG
        "<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
        "<Name>b</Name><Prefix>p/</Prefix><KeyCount>2</KeyCount>"
        "<IsTruncated>true</IsTruncated>"
        "<NextContinuationToken>1ue/Gc+x=</NextContinuationToken>\n"
        "  <Contents><Key>p/a b&amp;c&lt;&gt;&quot;&apos;</Key>"
        "<ETag>&quot;x&quot;</ETag><Size>100000</Size></Contents>\n"
        "  <Contents>\n<Key>p/&#xE9;t&#233; \xe2\x82\xac</Key><Size>18446744073709551615</Size>"
        "<Owner><ID>u</ID></Owner></Contents>"
        "</ListBucketResult>\n";
    s3xml_list_page page;
    char err[S3XML_MAX_ERR] = "";
    assert_int_equal(list(body, &page, err), 0);
    assert_int_equal(page.n, 2);
    assert_string_equal(page.entries[0].key, "p/a b&c<>\"'");
    assert_int_equal(page.entries[0].size, 100000);
    assert_string_equal(page.entries[1].key, "p/\xc3\xa9t\xc3\xa9 \xe2\x82\xac");
    assert_true(page.entries[1].size == UINT64_MAX);
    assert_true(page.truncated);
    assert_string_equal(page.next_token, "1ue/Gc+x=");
    s3xml_list_page_free(&page);

    const char *last = PROLOG "<ListBucketResult><IsTruncated>false</IsTruncated>"
                              "<!-- a comment --></ListBucketResult>";
    assert_int_equal(list(last, &page, err), 0);
    assert_int_equal(page.n, 0);
    assert_false(page.truncated);
    assert_null(page.next_token);
    s3xml_list_page_free(&page);
}

static void expect_list_rejected(const char *body, const char *reason)
{
    s3xml_list_page page;
    char err[S3XML_MAX_ERR] = "";
    int rc = list(body, &page, err);
    if (rc != -EPROTO || strstr(err, reason) == NULL)
        fail_msg("body %s: rc %d err '%s', want -EPROTO and '%s'", body, rc, err, reason);
    assert_int_equal(page.n, 0);
    assert_null(page.entries);
}

static void test_list_rejects_bad_bodies(void **state)
{
    (void)state;
#define LBR(x) "<ListBucketResult>" x "</ListBucketResult>"
#define ENTRY(k, s) "<Contents><Key>" k "</Key><Size>" s "</Size></Contents>"
#define NOT_TRUNC "<IsTruncated>false</IsTruncated>"
    expect_list_rejected("", "empty body");
    expect_list_rejected("   ", "no root element");
    expect_list_rejected("<Error><Code>X</Code></Error>", "expected <ListBucketResult>");
    expect_list_rejected(LBR(ENTRY("a", "1")), "<IsTruncated> missing");
    expect_list_rejected(LBR("<IsTruncated>yes</IsTruncated>"), "neither true nor false");
    expect_list_rejected(LBR(NOT_TRUNC NOT_TRUNC), "<IsTruncated> repeated");
    expect_list_rejected(LBR("<IsTruncated>true</IsTruncated>" ENTRY("a", "1")),
                         "without <NextContinuationToken>");
    expect_list_rejected(LBR("<IsTruncated>true</IsTruncated><NextContinuationToken>t"
                             "</NextContinuationToken>"),
                         "no entries");
    expect_list_rejected(LBR(NOT_TRUNC ENTRY("a", "-1")), "not a decimal");
    expect_list_rejected(LBR(NOT_TRUNC ENTRY("a", "")), "not a decimal");
    expect_list_rejected(LBR(NOT_TRUNC ENTRY("a", "18446744073709551616")), "not a decimal");
    expect_list_rejected(LBR(NOT_TRUNC ENTRY("", "1")), "empty <Key>");
    expect_list_rejected(LBR(NOT_TRUNC "<Contents><Key>a</Key><Key>b</Key><Size>1</Size>"
                                       "</Contents>"),
                         "<Key> repeated");
    expect_list_rejected(LBR(NOT_TRUNC "<Contents><Size>1</Size></Contents>"), "<Key> missing");
    expect_list_rejected(LBR(NOT_TRUNC "<Contents><Key><b>x</b></Key><Size>1</Size></Contents>"),
                         "has child elements");
    expect_list_rejected("<ListBucketResult>" NOT_TRUNC, "document ends inside");
    expect_list_rejected("<ListBucketResult>" NOT_TRUNC "</ListBucket>", "closes");
    expect_list_rejected(LBR(NOT_TRUNC) "<x/>", "after the root");
    expect_list_rejected(LBR(NOT_TRUNC) "junk", "after the root");
    expect_list_rejected("<!DOCTYPE x [<!ENTITY a \"b\">]>" LBR(NOT_TRUNC), "DOCTYPE");
    expect_list_rejected(LBR(NOT_TRUNC ENTRY("<![CDATA[a]]>", "1")), "CDATA");
    expect_list_rejected(LBR("text" NOT_TRUNC), "text beside child");
    expect_list_rejected(LBR(NOT_TRUNC "text"), "text beside child");
    expect_list_rejected(LBR(NOT_TRUNC ENTRY("&foo;", "1")), "unknown entity");
    expect_list_rejected(LBR(NOT_TRUNC ENTRY("&amp", "1")), "unknown entity");
    expect_list_rejected(LBR(NOT_TRUNC ENTRY("&#0;", "1")), "not allowed");
    expect_list_rejected(LBR(NOT_TRUNC ENTRY("&#xD800;", "1")), "not allowed");
    expect_list_rejected(LBR(NOT_TRUNC ENTRY("&#x110000;", "1")), "not allowed");
    expect_list_rejected(LBR(NOT_TRUNC ENTRY("&#x;", "1")), "unterminated");
    expect_list_rejected(LBR(NOT_TRUNC ENTRY("&#12a;", "1")), "bad character reference");
    expect_list_rejected(LBR(NOT_TRUNC ENTRY("a]]>b", "1")), "']]>'");
    expect_list_rejected(LBR(NOT_TRUNC ENTRY("\xff", "1")), "not UTF-8");
    expect_list_rejected(LBR(NOT_TRUNC ENTRY("\xc0\xaf", "1")), "not UTF-8");     /* overlong '/' */
    expect_list_rejected(LBR(NOT_TRUNC ENTRY("\xed\xa0\x80", "1")), "not UTF-8"); /* surrogate */
    expect_list_rejected(LBR(NOT_TRUNC ENTRY("a\x01", "1")), "not UTF-8");
    expect_list_rejected(LBR(NOT_TRUNC ENTRY("\xe2\x82", "1")), "not UTF-8"); /* truncated */
    expect_list_rejected("<ListBucketResult a=1>" NOT_TRUNC "</ListBucketResult>", "unquoted");
    expect_list_rejected("<ListBucketResult a=\"<\">" NOT_TRUNC "</ListBucketResult>", "'<'");
    expect_list_rejected("<ListBucketResult a=\"x\"b=\"y\">" NOT_TRUNC "</ListBucketResult>",
                         "bad attribute");
    expect_list_rejected("<ListBucketResult a>" NOT_TRUNC "</ListBucketResult>", "without value");
    expect_list_rejected("<1x/>", "bad element name");
    expect_list_rejected("<!-- open", "unterminated comment");
    expect_list_rejected("<?xml", "unterminated processing");

    /* A NUL byte anywhere. */
    static const char with_nul[] = "<ListBucketResult>\0<IsTruncated>false</IsTruncated>"
                                   "</ListBucketResult>";
    s3xml_list_page page;
    char err[S3XML_MAX_ERR];
    assert_int_equal(s3xml_parse_list(with_nul, sizeof with_nul - 1, &page, err), -EPROTO);

    /* Nesting beyond S3XML_MAX_DEPTH. */
    char deep[1024] = "<ListBucketResult>";
    for (int i = 0; i < S3XML_MAX_DEPTH; i++)
        strcat(deep, "<a>");
    expect_list_rejected(deep, "nested deeper");

    /* Longer than S3XML_MAX_BODY. */
    size_t big = (size_t)S3XML_MAX_BODY + 1;
    char *huge = malloc(big);
    assert_non_null(huge);
    memset(huge, ' ', big);
    assert_int_equal(s3xml_parse_list(huge, big, &page, err), -EPROTO);
    assert_non_null(strstr(err, "more than"));
    free(huge);
}

static void test_initiate(void **state)
{
    (void)state;
    char id[64], err[S3XML_MAX_ERR];
    const char *ok = PROLOG "<InitiateMultipartUploadResult xmlns=\"x\"><Bucket>b</Bucket>"
                            "<Key>k</Key><UploadId>2~Hc1eVZ.x_b0</UploadId>"
                            "</InitiateMultipartUploadResult>";
    assert_int_equal(s3xml_parse_initiate(ok, strlen(ok), id, sizeof id, err), 0);
    assert_string_equal(id, "2~Hc1eVZ.x_b0");
    static const char *const bad[] = {
        "<InitiateMultipartUploadResult><UploadId></UploadId></InitiateMultipartUploadResult>",
        "<InitiateMultipartUploadResult><UploadId>a b</UploadId></InitiateMultipartUploadResult>",
        "<InitiateMultipartUploadResult><UploadId>\xc3\xa9</UploadId>"
        "</InitiateMultipartUploadResult>",
        "<InitiateMultipartUploadResult></InitiateMultipartUploadResult>",
        "<InitiateMultipartUploadResult><UploadId>a</UploadId><UploadId>b</UploadId>"
        "</InitiateMultipartUploadResult>",
        "<InitiateMultipartUploadResult><UploadId>"
        "0123456789012345678901234567890123456789012345678901234567890123456789"
        "</UploadId></InitiateMultipartUploadResult>",
        "<Error><Code>AccessDenied</Code></Error>",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        assert_int_equal(s3xml_parse_initiate(bad[i], strlen(bad[i]), id, sizeof id, err), -EPROTO);
        assert_true(err[0] != '\0');
    }
}

static void test_complete_and_error(void **state)
{
    (void)state;
    s3xml_error e;
    char err[S3XML_MAX_ERR];
    const char *done = PROLOG "<CompleteMultipartUploadResult><Location>l</Location>"
                              "<Bucket>b</Bucket><Key>k</Key><ETag></ETag>"
                              "</CompleteMultipartUploadResult>";
    assert_int_equal(s3xml_parse_complete(done, strlen(done), &e, err), 0);
    /* S3 may answer 200 and still fail the completion. */
    const char *failed = PROLOG "<Error><Code>InternalError</Code><Message>try again</Message>"
                                "<RequestId>r</RequestId></Error>";
    assert_int_equal(s3xml_parse_complete(failed, strlen(failed), &e, err), 1);
    assert_string_equal(e.code, "InternalError");
    assert_string_equal(e.message, "try again");
    const char *other = "<ListBucketResult/>";
    assert_int_equal(s3xml_parse_complete(other, strlen(other), &e, err), -EPROTO);
    assert_int_equal(s3xml_parse_complete("", 0, &e, err), -EPROTO);

    const char *real = PROLOG "<Error><Code>NoSuchKey</Code><Message></Message>"
                              "<RequestId>tx0</RequestId><HostId>h</HostId></Error>";
    assert_int_equal(s3xml_parse_error(real, strlen(real), &e, err), 0);
    assert_string_equal(e.code, "NoSuchKey");
    assert_string_equal(e.message, "");
    static const char *const bad[] = {"<Error><Message>m</Message></Error>",
                                      "<Error><Code></Code></Error>",
                                      "<Error><Code>a</Code><Code>b</Code></Error>",
                                      "<Err><Code>a</Code></Err>",
                                      "<Error><Code>a</Code>",
                                      "<html><body>502 Bad Gateway</body></html>"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(s3xml_parse_error(bad[i], strlen(bad[i]), &e, err), -EPROTO);

    /* Long codes and messages are cut, not overflowed. */
    char longmsg[1024];
    snprintf(longmsg, sizeof longmsg, "<Error><Code>%0200d</Code><Message>%0500d</Message></Error>",
             0, 0);
    assert_int_equal(s3xml_parse_error(longmsg, strlen(longmsg), &e, err), 0);
    assert_int_equal(strlen(e.code), sizeof e.code - 1);
    assert_int_equal(strlen(e.message), sizeof e.message - 1);
}

static void test_delete_result(void **state)
{
    (void)state;
    s3xml_delete_result d;
    char err[S3XML_MAX_ERR];
    const char *quiet = PROLOG "<DeleteResult xmlns=\"x\"></DeleteResult>";
    assert_int_equal(s3xml_parse_delete(quiet, strlen(quiet), &d, err), 0);
    assert_int_equal(d.deleted + d.errors, 0);
    const char *mixed = "<DeleteResult><Deleted><Key>a</Key></Deleted>"
                        "<Error><Key>b&amp;c</Key><Code>AccessDenied</Code><Message>no</Message>"
                        "</Error><Error><Key>d</Key><Code>InternalError</Code></Error>"
                        "</DeleteResult>";
    assert_int_equal(s3xml_parse_delete(mixed, strlen(mixed), &d, err), 0);
    assert_int_equal(d.deleted, 1);
    assert_int_equal(d.errors, 2);
    assert_string_equal(d.first_error_key, "b&c");
    assert_string_equal(d.first_error.code, "AccessDenied");
    assert_string_equal(d.first_error.message, "no");
    static const char *const bad[] = {
        "<DeleteResult><Deleted></Deleted></DeleteResult>",
        "<DeleteResult><Error><Key>a</Key></Error></DeleteResult>",
        "<DeleteResult><Surprise/></DeleteResult>",
        "<DeleteResult>x</DeleteResult>",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(s3xml_parse_delete(bad[i], strlen(bad[i]), &d, err), -EPROTO);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_list_accepts_a_real_page),
        cmocka_unit_test(test_list_rejects_bad_bodies),
        cmocka_unit_test(test_initiate),
        cmocka_unit_test(test_complete_and_error),
        cmocka_unit_test(test_delete_result),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
