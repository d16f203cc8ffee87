/*
 * Unit tests for common/net/remote_storage.c and the local-directory backend
 * (common/net/remote_local.c): configuration from URLs and the environment,
 * key rules, and every call against real files in a fresh temporary
 * directory, including readers racing writers.  The S3 backend is tested
 * against a real radosgw by tests/integration/test_remote_storage.py.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "net/remote_storage.h"

static char tmpdir[256];
static char root[300];

static int setup(void **state)
{
    (void)state;
    strcpy(tmpdir, "/tmp/strata-remote-XXXXXX");
    if (mkdtemp(tmpdir) == NULL)
        return -1;
    snprintf(root, sizeof root, "%s/store/nested", tmpdir);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    return system(cmd);
}

/* A local store under root, created. */
static remote_storage *open_local(void)
{
    char url[400];
    remote_config cfg;
    remote_err err = {{0}};
    remote_storage *rs;
    snprintf(url, sizeof url, "file://%s/", root);
    assert_int_equal(remote_config_from_url(url, &cfg, &err), 0);
    assert_int_equal(cfg.kind, REMOTE_LOCAL);
    assert_string_equal(cfg.root, root);
    assert_int_equal(remote_open(&cfg, &rs, &err), 0);
    assert_int_equal(remote_init(rs, &err), 0);
    return rs;
}

static void put(remote_storage *rs, const char *key, const char *data)
{
    remote_err err = {{0}};
    if (remote_put_buf(rs, key, data, strlen(data), &err) != 0)
        fail_msg("put %s: %s", key, err.msg);
}

/* The object's content as a string (caller frees), NULL if missing. */
static char *get(remote_storage *rs, const char *key)
{
    remote_err err = {{0}};
    void *buf;
    size_t len;
    int rc = remote_get_buf(rs, key, 1 << 20, &buf, &len, &err);
    if (rc == -ENOENT)
        return NULL;
    if (rc != 0)
        fail_msg("get %s: %s", key, err.msg);
    char *s = malloc(len + 1);
    memcpy(s, buf, len);
    s[len] = '\0';
    free(buf);
    return s;
}

static void test_config_from_urls(void **state)
{
    (void)state;
    remote_config cfg;
    remote_err err = {{0}};
    unsetenv("STRATA_S3_ENDPOINT");
    unsetenv("STRATA_S3_REGION");
    unsetenv("STRATA_S3_ACCESS_KEY");
    unsetenv("STRATA_S3_SECRET_KEY");
    setenv("AWS_ACCESS_KEY_ID", "awskey", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "awssecret", 1);
    setenv("AWS_REGION", "eu-west-3", 1);
    assert_int_equal(remote_config_from_url("s3://my-bucket/a/b//", &cfg, &err), 0);
    assert_int_equal(cfg.kind, REMOTE_S3);
    assert_string_equal(cfg.bucket, "my-bucket");
    assert_string_equal(cfg.prefix, "a/b/");
    assert_string_equal(cfg.access_key, "awskey");
    assert_string_equal(cfg.region, "eu-west-3");
    /* The STRATA_ variables win over AWS_ ones. */
    setenv("STRATA_S3_ACCESS_KEY", "strkey", 1);
    setenv("STRATA_S3_REGION", "us-east-1", 1);
    assert_int_equal(remote_config_from_url("s3://my-bucket", &cfg, &err), 0);
    assert_string_equal(cfg.prefix, "");
    assert_string_equal(cfg.access_key, "strkey");
    assert_string_equal(cfg.secret_key, "awssecret");
    assert_string_equal(cfg.region, "us-east-1");
    /* No endpoint: remote_open says which variable to set. */
    remote_storage *rs;
    assert_int_equal(remote_open(&cfg, &rs, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "STRATA_S3_ENDPOINT"));
    strcpy(cfg.endpoint, "http://127.0.0.1:9/");
    cfg.part_size = 1 << 20;
    assert_int_equal(remote_open(&cfg, &rs, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "part size"));
    cfg.part_size = 5 << 20;
    assert_int_equal(remote_open(&cfg, &rs, &err), 0);
    assert_string_equal(remote_describe(rs), "s3://my-bucket/");
    remote_close(rs);
    strcpy(cfg.endpoint, "http://h:1/path");
    assert_int_equal(remote_open(&cfg, &rs, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "has a path"));

    static const char *const bad[] = {"s3://",
                                      "s3://ab",
                                      "s3://Upper",
                                      "s3://b_u",
                                      "s3://bucket/a/../b",
                                      "s3://bucket/.strata-tmp-x",
                                      "file://relative",
                                      "http://x/y",
                                      "/plain/path",
                                      ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err.msg[0] = '\0';
        if (remote_config_from_url(bad[i], &cfg, &err) != -EINVAL)
            fail_msg("URL '%s' accepted", bad[i]);
        assert_true(err.msg[0] != '\0');
    }
    unsetenv("STRATA_S3_ACCESS_KEY");
    unsetenv("STRATA_S3_REGION");
    unsetenv("AWS_ACCESS_KEY_ID");
    unsetenv("AWS_SECRET_ACCESS_KEY");
    unsetenv("AWS_REGION");
}

static void test_key_rules(void **state)
{
    (void)state;
    remote_err err = {{0}};
    static const char *const good[] = {
        "a",    "a/b/c",   "a b/c+d/\xc3\xa9t\xc3\xa9 \xe2\x82\xac", "x.strata-tmp", "..a",
        "a/.b", "%2F&?#=~"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
        if (remote_key_check(good[i], &err) != 0)
            fail_msg("key '%s' refused: %s", good[i], err.msg);
    static const char *const bad[] = {"",
                                      "/a",
                                      "a/",
                                      "a//b",
                                      "./a",
                                      "a/../b",
                                      "..",
                                      ".strata-tmp-1",
                                      "a/.strata-tmpX",
                                      "a\x01",
                                      "a\x7f",
                                      "\xff",
                                      "\xc3",
                                      "\xed\xa0\x80"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err.msg[0] = '\0';
        if (remote_key_check(bad[i], &err) != -EINVAL)
            fail_msg("key '%s' accepted", bad[i]);
        assert_true(err.msg[0] != '\0');
    }
    char longkey[REMOTE_MAX_KEY + 2];
    memset(longkey, 'k', sizeof longkey);
    longkey[REMOTE_MAX_KEY] = '\0';
    assert_int_equal(remote_key_check(longkey, &err), 0);
    longkey[REMOTE_MAX_KEY] = 'k';
    longkey[REMOTE_MAX_KEY + 1] = '\0';
    assert_int_equal(remote_key_check(longkey, &err), -EINVAL);
}

static void test_local_put_get_head_delete(void **state)
{
    (void)state;
    remote_storage *rs = open_local();
    remote_err err = {{0}};
    put(rs, "a b/c+d/\xc3\xa9t\xc3\xa9", "hello");
    char *s = get(rs, "a b/c+d/\xc3\xa9t\xc3\xa9");
    assert_string_equal(s, "hello");
    free(s);
    /* Replace, then a zero-length object. */
    put(rs, "a b/c+d/\xc3\xa9t\xc3\xa9", "world, longer");
    s = get(rs, "a b/c+d/\xc3\xa9t\xc3\xa9");
    assert_string_equal(s, "world, longer");
    free(s);
    put(rs, "empty", "");
    s = get(rs, "empty");
    assert_string_equal(s, "");
    free(s);

    bool exists;
    uint64_t size;
    assert_int_equal(remote_head(rs, "a b/c+d/\xc3\xa9t\xc3\xa9", &exists, &size, &err), 0);
    assert_true(exists);
    assert_int_equal(size, 13);
    assert_int_equal(remote_head(rs, "a b", &exists, &size, &err), 0);
    assert_false(exists); /* a directory is not an object */
    assert_int_equal(remote_head(rs, "nothing/here", &exists, &size, &err), 0);
    assert_false(exists);

    /* A missing key: -ENOENT, and the message names the backend and key. */
    void *buf;
    size_t len;
    assert_int_equal(remote_get_buf(rs, "nothing/here", 100, &buf, &len, &err), -ENOENT);
    assert_non_null(strstr(err.msg, "local GET nothing/here"));
    assert_null(buf);
    /* Larger than the caller accepts. */
    assert_int_equal(remote_get_buf(rs, "a b/c+d/\xc3\xa9t\xc3\xa9", 5, &buf, &len, &err), -EFBIG);
    /* Bad keys never reach the file system. */
    assert_int_equal(remote_put_buf(rs, "../escape", "x", 1, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "'..'"));
    char escaped[400];
    snprintf(escaped, sizeof escaped, "%s/store/escape", tmpdir);
    assert_int_equal(access(escaped, F_OK), -1);

    /* Delete, and the emptied directories go too; a missing key is fine. */
    assert_int_equal(remote_delete(rs, "a b/c+d/\xc3\xa9t\xc3\xa9", &err), 0);
    assert_null(get(rs, "a b/c+d/\xc3\xa9t\xc3\xa9"));
    char dir[400];
    snprintf(dir, sizeof dir, "%s/a b", root);
    assert_int_equal(access(dir, F_OK), -1);
    assert_int_equal(remote_delete(rs, "a b/c+d/\xc3\xa9t\xc3\xa9", &err), 0);
    assert_int_equal(remote_delete(rs, "never", &err), 0);

    /* An object cannot also be a directory here: a clear -EEXIST. */
    put(rs, "obj", "1");
    assert_int_equal(remote_put_buf(rs, "obj/child", "2", 1, &err), -EEXIST);
    assert_non_null(strstr(err.msg, "collide"));
    put(rs, "dir/child", "3");
    assert_int_equal(remote_put_buf(rs, "dir", "4", 1, &err), -EEXIST);
    remote_close(rs);
}

static void test_local_files_and_ranges(void **state)
{
    (void)state;
    remote_storage *rs = open_local();
    remote_err err = {{0}};
    char src[400], dst[400], dst_tmp[420];
    snprintf(src, sizeof src, "%s/src", tmpdir);
    snprintf(dst, sizeof dst, "%s/dst", tmpdir);
    snprintf(dst_tmp, sizeof dst_tmp, "%s.tmp", dst);
    size_t n = 3 * 1024 * 1024 + 17; /* more than one copy chunk */
    unsigned char *data = malloc(n);
    for (size_t i = 0; i < n; i++)
        data[i] = (unsigned char)(i * 131 + i / 7);
    FILE *f = fopen(src, "w");
    assert_int_equal(fwrite(data, 1, n, f), n);
    fclose(f);
    assert_int_equal(remote_put_file(rs, "layers/L1", src, &err), 0);
    assert_int_equal(remote_get_file(rs, "layers/L1", dst, &err), 0);
    void *back;
    size_t len;
    int fd = open(dst, O_RDONLY);
    back = malloc(n + 1);
    assert_int_equal(read(fd, back, n + 1), (ssize_t)n);
    close(fd);
    assert_memory_equal(back, data, n);
    free(back);
    assert_int_equal(access(dst_tmp, F_OK), -1);

    /* A failed get leaves the target as it was and no temporary file. */
    assert_int_equal(remote_get_file(rs, "layers/missing", dst, &err), -ENOENT);
    struct stat st;
    assert_int_equal(stat(dst, &st), 0);
    assert_int_equal((size_t)st.st_size, n);
    assert_int_equal(access(dst_tmp, F_OK), -1);

    /* Ranges: inside, across the end, at and past the end. */
    unsigned char buf[100];
    size_t got;
    assert_int_equal(remote_get_range(rs, "layers/L1", 1000000, 100, buf, &got, &err), 0);
    assert_int_equal(got, 100);
    assert_memory_equal(buf, data + 1000000, 100);
    assert_int_equal(remote_get_range(rs, "layers/L1", n - 10, 100, buf, &got, &err), 0);
    assert_int_equal(got, 10);
    assert_memory_equal(buf, data + n - 10, 10);
    assert_int_equal(remote_get_range(rs, "layers/L1", n, 100, buf, &got, &err), 0);
    assert_int_equal(got, 0);
    assert_int_equal(remote_get_range(rs, "layers/L1", n + 5000, 100, buf, &got, &err), 0);
    assert_int_equal(got, 0);
    assert_int_equal(remote_get_range(rs, "layers/none", 0, 100, buf, &got, &err), -ENOENT);

    /* Not a regular file: refused. */
    assert_int_equal(remote_put_file(rs, "x", tmpdir, &err), -EINVAL);
    assert_int_equal(remote_put_file(rs, "x", "/nonexistent/file", &err), -ENOENT);
    assert_non_null(strstr(err.msg, "/nonexistent/file"));
    assert_int_equal(remote_get_buf(rs, "layers/L1", n, &back, &len, &err), 0);
    assert_int_equal(len, n);
    free(back);
    free(data);
    remote_close(rs);
}

static void test_local_list(void **state)
{
    (void)state;
    remote_storage *rs = open_local();
    remote_err err = {{0}};
    static const char *const keys[] = {"t/b/2", "t/a", "t/bc/1", "t/b/1", "u/x", "t/b\xc3\xa9"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        put(rs, keys[i], keys[i]);
    /* A crashed put's temporary file is not an object. */
    char tmpfile[400];
    snprintf(tmpfile, sizeof tmpfile, "%s/t/b/.strata-tmp-dead", root);
    FILE *f = fopen(tmpfile, "w");
    fputs("partial", f);
    fclose(f);

    remote_listing l;
    assert_int_equal(remote_list(rs, "t/b", &l, &err), 0);
    assert_int_equal(l.n, 4);
    assert_string_equal(l.entries[0].key, "t/b/1");
    assert_string_equal(l.entries[1].key, "t/b/2");
    assert_string_equal(l.entries[2].key, "t/bc/1");
    assert_string_equal(l.entries[3].key, "t/b\xc3\xa9");
    assert_int_equal(l.entries[0].size, 5);
    remote_listing_free(&l);
    assert_int_equal(remote_list(rs, "t/b/", &l, &err), 0);
    assert_int_equal(l.n, 2);
    remote_listing_free(&l);
    assert_int_equal(remote_list(rs, "", &l, &err), 0);
    assert_int_equal(l.n, 6);
    assert_string_equal(l.entries[5].key, "u/x");
    remote_listing_free(&l);
    assert_int_equal(remote_list(rs, "nothing/", &l, &err), 0);
    assert_int_equal(l.n, 0);
    remote_listing_free(&l);
    assert_int_equal(remote_list(rs, "../", &l, &err), -EINVAL);

    /* Many keys: the listing grows past its first allocation. */
    char key[64];
    for (int i = 0; i < 300; i++) {
        snprintf(key, sizeof key, "many/%03d", i);
        put(rs, key, "x");
    }
    assert_int_equal(remote_list(rs, "many/", &l, &err), 0);
    assert_int_equal(l.n, 300);
    assert_string_equal(l.entries[299].key, "many/299");
    const char *del[300];
    for (size_t i = 0; i < l.n; i++)
        del[i] = l.entries[i].key;
    assert_int_equal(remote_delete_many(rs, del, l.n, &err), 0);
    remote_listing_free(&l);
    assert_int_equal(remote_list(rs, "many/", &l, &err), 0);
    assert_int_equal(l.n, 0);
    remote_listing_free(&l);
    remote_close(rs);

    /* A store whose root does not exist says so. */
    remote_config cfg;
    assert_int_equal(remote_config_from_url("file:///nonexistent/strata-root", &cfg, &err), 0);
    assert_int_equal(remote_open(&cfg, &rs, &err), 0);
    assert_int_equal(remote_list(rs, "", &l, &err), -ENOENT);
    assert_non_null(strstr(err.msg, "strata remote init"));
    assert_int_equal(remote_put_buf(rs, "k", "v", 1, &err), -ENOENT);
    remote_close(rs);
}

/* Readers racing a writer that replaces an object and a deleter that
 * removes its sibling's directory: readers see only whole objects. */
typedef struct race {
    remote_storage *rs;
    volatile int stop;
    int torn, errors;
} race;

#define RACE_A 200000
#define RACE_B 70000

static void *race_reader(void *arg)
{
    race *r = arg;
    remote_err err;
    while (!r->stop) {
        void *buf;
        size_t len;
        int rc = remote_get_buf(r->rs, "race/dir/obj", RACE_A, &buf, &len, &err);
        if (rc == -ENOENT)
            continue;
        if (rc != 0) {
            r->errors++;
            continue;
        }
        const unsigned char *p = buf;
        unsigned char want = len == RACE_A ? 'A' : 'B';
        if (len != RACE_A && len != RACE_B)
            r->torn++;
        for (size_t i = 0; i < len; i++)
            if (p[i] != want) {
                r->torn++;
                break;
            }
        free(buf);
    }
    return NULL;
}

static void *race_deleter(void *arg)
{
    race *r = arg;
    remote_err err;
    while (!r->stop) {
        if (remote_put_buf(r->rs, "race/other/x", "x", 1, &err) != 0 ||
            remote_delete(r->rs, "race/other/x", &err) != 0)
            r->errors++;
    }
    return NULL;
}

static void test_local_concurrent_readers(void **state)
{
    (void)state;
    race r = {.rs = open_local()};
    char *a = malloc(RACE_A), *b = malloc(RACE_B);
    memset(a, 'A', RACE_A);
    memset(b, 'B', RACE_B);
    pthread_t readers[2], deleter;
    for (int i = 0; i < 2; i++)
        pthread_create(&readers[i], NULL, race_reader, &r);
    pthread_create(&deleter, NULL, race_deleter, &r);
    remote_err err;
    for (int i = 0; i < 200; i++) {
        assert_int_equal(
            remote_put_buf(r.rs, "race/dir/obj", i % 2 ? a : b, i % 2 ? RACE_A : RACE_B, &err), 0);
        /* Also a put into a directory the deleter keeps removing. */
        assert_int_equal(remote_put_buf(r.rs, "race/other/y", "y", 1, &err), 0);
        assert_int_equal(remote_delete(r.rs, "race/other/y", &err), 0);
    }
    r.stop = 1;
    for (int i = 0; i < 2; i++)
        pthread_join(readers[i], NULL);
    pthread_join(deleter, NULL);
    assert_int_equal(r.torn, 0);
    assert_int_equal(r.errors, 0);
    free(a);
    free(b);
    remote_close(r.rs);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_from_urls),
        cmocka_unit_test(test_key_rules),
        cmocka_unit_test_setup_teardown(test_local_put_get_head_delete, setup, teardown),
        cmocka_unit_test_setup_teardown(test_local_files_and_ranges, setup, teardown),
        cmocka_unit_test_setup_teardown(test_local_list, setup, teardown),
        cmocka_unit_test_setup_teardown(test_local_concurrent_readers, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
