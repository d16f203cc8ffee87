# compute/walproposer/CMakeLists.local.cmake: strata-sync-safekeepers, the
# proposer run with no Postgres behind it (docs/design.md §4.7).  Included by
# compute/walproposer/CMakeLists.txt.  pqstream.c, walbuf.c and wp_edge.c are
# the libc+libpq edge helpers it shares with strata.so (which compiles them
# in directly); here they form a small static library.
add_library(strata_proposer_edge STATIC
            ${CMAKE_CURRENT_SOURCE_DIR}/pqstream.c
            ${CMAKE_CURRENT_SOURCE_DIR}/walbuf.c
            ${CMAKE_CURRENT_SOURCE_DIR}/wp_edge.c)
target_link_libraries(strata_proposer_edge PUBLIC strata_proto strata_common PkgConfig::LIBPQ)

if(TARGET strata_proposer)
  add_executable(strata-sync-safekeepers ${CMAKE_CURRENT_SOURCE_DIR}/sync_safekeepers.c)
  target_link_libraries(strata-sync-safekeepers PRIVATE strata_proposer_edge strata_proposer
                        strata_proto strata_common PkgConfig::LIBPQ)
endif()

# Unit tests of the edge helpers (cmocka, ctest label "unit").
add_executable(test_walproposer_edge ${CMAKE_CURRENT_SOURCE_DIR}/tests/test_walproposer_edge.c)
target_link_libraries(test_walproposer_edge PRIVATE strata_proposer_edge PkgConfig::CMOCKA)
add_test(NAME unit.test_walproposer_edge COMMAND test_walproposer_edge)
set_tests_properties(unit.test_walproposer_edge PROPERTIES LABELS "unit;fast" TIMEOUT 120)
