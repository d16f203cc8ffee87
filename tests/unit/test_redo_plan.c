/*
 * test_redo_plan.c: unit tests of the page-rebuild planner
 * (pageserver/redo/redo_plan.h): where a rebuild starts (image, zero page,
 * will-init record, incomplete list), how runs of WAL records and of
 * synthetic deltas are grouped, oldest first, and refusal of values that
 * are not part of a page.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "pageserver/redo/redo_plan.h"

#define MAXV 16

/* A version list from a string, newest first: I image, Z zero page,
 * W WAL record, w will-init WAL record, C CLOG set, V VM clear,
 * O multixact offset, M members, S size, T tombstone, B blob,
 * X the smgr truncate record ingest stores on a VM page. */
typedef struct fixture {
    version_list vl;
    lsn_t lsn[MAXV];
    value_ref value[MAXV];
} fixture;

/* The header of an smgr truncate record (RM_SMGR_ID, XLOG_SMGR_TRUNCATE). */
static uint8_t truncate_rec[46] = {46, 0, 0, 0, [16] = 0x21, [17] = 2};

static void make(fixture *f, const char *spec, bool complete)
{
    memset(f, 0, sizeof *f);
    int n = (int)strlen(spec);
    assert_true(n <= MAXV);
    for (int i = 0; i < n; i++) {
        value_ref *v = &f->value[i];
        switch (spec[i]) {
        case 'I':
            v->kind = VAL_IMAGE;
            break;
        case 'Z':
            v->kind = VAL_ZERO_PAGE;
            break;
        case 'W':
            v->kind = VAL_WAL_RECORD;
            break;
        case 'w':
            v->kind = VAL_WAL_RECORD;
            v->flags = VALUE_WILL_INIT;
            break;
        case 'X':
            v->kind = VAL_WAL_RECORD;
            v->payload = truncate_rec;
            v->len = sizeof truncate_rec;
            break;
        case 'C':
            v->kind = VAL_CLOG_SET;
            break;
        case 'V':
            v->kind = VAL_VM_CLEAR;
            break;
        case 'O':
            v->kind = VAL_MXACT_OFFSET;
            break;
        case 'M':
            v->kind = VAL_MXACT_MEMBERS;
            break;
        case 'S':
            v->kind = VAL_SIZE;
            break;
        case 'T':
            v->kind = VAL_TOMBSTONE;
            break;
        case 'B':
            v->kind = VAL_BLOB;
            break;
        default:
            fail();
        }
        f->lsn[i] = (lsn_t)(1000 - i);
    }
    f->vl.n = n;
    f->vl.lsn = f->lsn;
    f->vl.value = f->value;
    f->vl.complete = complete;
}

static void plan(fixture *f, redo_plan *p, redo_step *steps)
{
    const char *why = NULL;
    assert_int_equal(redo_plan_make(&f->vl, steps, MAXV, p, &why), 0);
    assert_null(why);
}

static void expect_step(const redo_plan *p, int i, redo_step_kind kind, int first, int count)
{
    assert_true(i < p->nsteps);
    assert_int_equal(p->steps[i].kind, kind);
    assert_int_equal(p->steps[i].first, first);
    assert_int_equal(p->steps[i].count, count);
}

static void test_image_then_records(void **state)
{
    (void)state;
    fixture f;
    redo_plan p;
    redo_step steps[MAXV];
    make(&f, "WWWI", true);
    plan(&f, &p, steps);
    assert_int_equal(p.base, REDO_BASE_IMAGE);
    assert_int_equal(p.base_index, 3);
    assert_int_equal(p.nsteps, 1);
    expect_step(&p, 0, REDO_STEP_HELPER, 2, 3);
    assert_int_equal(p.records, 3);
    assert_int_equal(p.synthetic, 0);
}

static void test_image_alone_and_empty(void **state)
{
    (void)state;
    fixture f;
    redo_plan p;
    redo_step steps[MAXV];
    make(&f, "I", true);
    plan(&f, &p, steps);
    assert_int_equal(p.base, REDO_BASE_IMAGE);
    assert_int_equal(p.nsteps, 0);

    make(&f, "", false);
    plan(&f, &p, steps);
    assert_int_equal(p.base, REDO_BASE_ZERO);
    assert_int_equal(p.base_index, -1);
    assert_int_equal(p.nsteps, 0);
}

static void test_will_init_record_is_the_first_step(void **state)
{
    (void)state;
    fixture f;
    redo_plan p;
    redo_step steps[MAXV];
    make(&f, "WWw", true);
    plan(&f, &p, steps);
    assert_int_equal(p.base, REDO_BASE_WILL_INIT);
    assert_int_equal(p.base_index, 2);
    assert_int_equal(p.nsteps, 1);
    /* The will-init record itself is applied, in the same helper request. */
    expect_step(&p, 0, REDO_STEP_HELPER, 2, 3);
}

static void test_newest_complete_value_wins(void **state)
{
    (void)state;
    fixture f;
    redo_plan p;
    redo_step steps[MAXV];
    /* Versions below the newest image are never needed. */
    make(&f, "WIWWI", true);
    plan(&f, &p, steps);
    assert_int_equal(p.base, REDO_BASE_IMAGE);
    assert_int_equal(p.base_index, 1);
    assert_int_equal(p.nsteps, 1);
    expect_step(&p, 0, REDO_STEP_HELPER, 0, 1);

    make(&f, "WwWI", true);
    plan(&f, &p, steps);
    assert_int_equal(p.base, REDO_BASE_WILL_INIT);
    expect_step(&p, 0, REDO_STEP_HELPER, 1, 2);
}

static void test_zero_page_and_incomplete_list(void **state)
{
    (void)state;
    fixture f;
    redo_plan p;
    redo_step steps[MAXV];
    make(&f, "CCZ", true);
    plan(&f, &p, steps);
    assert_int_equal(p.base, REDO_BASE_ZERO);
    assert_int_equal(p.base_index, 2);
    expect_step(&p, 0, REDO_STEP_SYNTHETIC, 1, 2);

    /* No complete value: start from zeros and apply everything. */
    make(&f, "WWC", false);
    plan(&f, &p, steps);
    assert_int_equal(p.base, REDO_BASE_ZERO);
    assert_int_equal(p.base_index, -1);
    assert_int_equal(p.nsteps, 2);
    expect_step(&p, 0, REDO_STEP_SYNTHETIC, 2, 1);
    expect_step(&p, 1, REDO_STEP_HELPER, 1, 2);
}

static void test_runs_alternate(void **state)
{
    (void)state;
    fixture f;
    redo_plan p;
    redo_step steps[MAXV];
    /* Oldest first: image, 2 records, VM clear, record, 2 VM clears, record. */
    make(&f, "WVVWVWWI", true);
    plan(&f, &p, steps);
    assert_int_equal(p.base, REDO_BASE_IMAGE);
    assert_int_equal(p.nsteps, 5);
    expect_step(&p, 0, REDO_STEP_HELPER, 6, 2);
    expect_step(&p, 1, REDO_STEP_SYNTHETIC, 4, 1);
    expect_step(&p, 2, REDO_STEP_HELPER, 3, 1);
    expect_step(&p, 3, REDO_STEP_SYNTHETIC, 2, 2);
    expect_step(&p, 4, REDO_STEP_HELPER, 0, 1);
    assert_int_equal(p.records, 4);
    assert_int_equal(p.synthetic, 3);

    /* Every synthetic kind groups together. */
    make(&f, "MOCVZ", true);
    plan(&f, &p, steps);
    assert_int_equal(p.nsteps, 1);
    expect_step(&p, 0, REDO_STEP_SYNTHETIC, 3, 4);
}

static void test_refuses_non_page_values(void **state)
{
    (void)state;
    fixture f;
    redo_plan p;
    redo_step steps[MAXV];
    const char *bad[] = {"WS", "TI", "WBI"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        make(&f, bad[i], true);
        const char *why = NULL;
        assert_int_equal(redo_plan_make(&f.vl, steps, MAXV, &p, &why), -1);
        assert_non_null(why);
    }
    /* Unknown kind. */
    make(&f, "WI", true);
    f.value[0].kind = 77;
    const char *why = NULL;
    assert_int_equal(redo_plan_make(&f.vl, steps, MAXV, &p, &why), -1);

    /* Too small a step array. */
    make(&f, "WCWI", true);
    why = NULL;
    assert_int_equal(redo_plan_make(&f.vl, steps, 2, &p, &why), -1);
    assert_non_null(why);
    assert_int_equal(redo_plan_make(&f.vl, steps, 3, &p, &why), 0);
}

/* The smgr truncate record on a VM page is applied in C: it splits the run
 * of records around it into helper, synthetic, helper steps. */
static void test_vm_truncate_record_is_synthetic(void **state)
{
    (void)state;
    fixture f;
    redo_plan p;
    redo_step steps[MAXV];
    make(&f, "WWXVWI", true);
    plan(&f, &p, steps);
    assert_int_equal(p.base, REDO_BASE_IMAGE);
    assert_int_equal(p.nsteps, 3);
    expect_step(&p, 0, REDO_STEP_HELPER, 4, 1);
    expect_step(&p, 1, REDO_STEP_SYNTHETIC, 3, 2);
    expect_step(&p, 2, REDO_STEP_HELPER, 1, 2);
    assert_int_equal(p.records, 3);
    assert_int_equal(p.synthetic, 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_image_then_records),
        cmocka_unit_test(test_image_alone_and_empty),
        cmocka_unit_test(test_will_init_record_is_the_first_step),
        cmocka_unit_test(test_newest_complete_value_wins),
        cmocka_unit_test(test_zero_page_and_incomplete_list),
        cmocka_unit_test(test_runs_alternate),
        cmocka_unit_test(test_refuses_non_page_values),
        cmocka_unit_test(test_vm_truncate_record_is_synthetic),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
