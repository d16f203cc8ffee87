/*
 * must_check.h: STRATA_MUST_CHECK, for functions whose result a caller may
 * not drop (a durability or commit step that can fail).
 *
 * The compiler then refuses (-Werror) a call whose result is ignored; a
 * (void) cast does not silence GCC, so a caller that really has nothing to
 * do on failure says so with an if and a comment (typically: log it).
 */
#ifndef STRATA_COMMON_MUST_CHECK_H
#define STRATA_COMMON_MUST_CHECK_H

#define STRATA_MUST_CHECK __attribute__((warn_unused_result))

#endif
