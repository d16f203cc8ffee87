/*
 * sqlstate.h: the SQLSTATE codes Strata's servers send and its clients
 * check, under PostgreSQL's names (ERRCODE_X there is SQLSTATE_X here; see
 * errcodes.txt in the PostgreSQL source).  Each is a 5-character string
 * literal, so it can initialise a char[6] or be compared with strcmp.
 *
 * Not for: the compute extension, which lives inside Postgres and uses
 * ERRCODE_* with ereport.  libc only (header only, no includes).  Add a code
 * here, with its PostgreSQL name, before using it anywhere.
 */
#ifndef STRATA_COMMON_SQLSTATE_H
#define STRATA_COMMON_SQLSTATE_H

/* Class 00: successful completion */
#define SQLSTATE_SUCCESSFUL_COMPLETION "00000"
/* Class 08: connection exception */
#define SQLSTATE_CONNECTION_FAILURE "08006"
#define SQLSTATE_PROTOCOL_VIOLATION "08P01"
/* Class 0A: feature not supported */
#define SQLSTATE_FEATURE_NOT_SUPPORTED "0A000"
/* Class 22: data exception */
#define SQLSTATE_INVALID_PARAMETER_VALUE "22023"
/* Class 28: invalid authorization specification */
#define SQLSTATE_INVALID_AUTHORIZATION_SPECIFICATION "28000"
#define SQLSTATE_INVALID_PASSWORD "28P01"
/* Class 3D: invalid catalog name */
#define SQLSTATE_INVALID_CATALOG_NAME "3D000"
/* Class 40: transaction rollback */
#define SQLSTATE_T_R_SERIALIZATION_FAILURE "40001"
/* Class 42: syntax error or access rule violation */
#define SQLSTATE_SYNTAX_ERROR "42601"
#define SQLSTATE_INSUFFICIENT_PRIVILEGE "42501"
#define SQLSTATE_UNDEFINED_OBJECT "42704"
/* Class 53: insufficient resources */
#define SQLSTATE_INSUFFICIENT_RESOURCES "53000"
#define SQLSTATE_DISK_FULL "53100"
#define SQLSTATE_OUT_OF_MEMORY "53200"
#define SQLSTATE_TOO_MANY_CONNECTIONS "53300"
/* Class 55: object not in prerequisite state */
#define SQLSTATE_OBJECT_NOT_IN_PREREQUISITE_STATE "55000"
#define SQLSTATE_OBJECT_IN_USE "55006"
/* Class 57: operator intervention */
#define SQLSTATE_QUERY_CANCELED "57014"
#define SQLSTATE_ADMIN_SHUTDOWN "57P01"
/* Class 58: system error (errors external to the server) */
#define SQLSTATE_IO_ERROR "58030"
#define SQLSTATE_UNDEFINED_FILE "58P01"
/* Class XX: internal error */
#define SQLSTATE_INTERNAL_ERROR "XX000"

#endif
