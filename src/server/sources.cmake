# SPDX-License-Identifier: Apache-2.0
# The Redis-protocol server (src/server/README.md): depends on the kv store.
add_library(pmtree_server
  src/server/resp.cc
  src/server/keyspace.cc
  src/server/commands.cc
  src/server/data_commands.cc
  src/server/server.cc
  src/server/rdb.cc
  src/server/replication.cc
  src/server/master_link.cc)
add_library(pmtree::server ALIAS pmtree_server)
target_include_directories(pmtree_server PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/src>)
target_link_libraries(pmtree_server PUBLIC pmtree_kv Threads::Threads)

pmtree_test(server_test
  src/server/resp_test.cc
  src/server/server_test.cc
  src/server/server_fuzz_test.cc
  src/server/server_threads_test.cc
  src/server/server_kill_test.cc
  LINK pmtree_server)
pmtree_test(replication_test src/server/replication_test.cc LINK pmtree_server)
# The kill test starts the CLI (`pmtree serve`) as a child process.
if(BUILD_TESTING AND PMTREE_BUILD_TOOLS)
  target_compile_definitions(server_test PRIVATE PMTREE_CLI="$<TARGET_FILE:pmtree>")
  add_dependencies(server_test pmtree)
endif()
# The server suite's report (scripts/lib/server_report.py): medians and
# per-round ratios over a fixed results file; needs only python3.
if(BUILD_TESTING)
  find_package(Python3 COMPONENTS Interpreter)
  if(Python3_Interpreter_FOUND)
    add_test(NAME server_report_test
      COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/python/tests/test_server_report.py)
  else()
    add_test(NAME server_report_test COMMAND sh -c "echo 'SKIPPED: python3 not found'; exit 77")
  endif()
  set_tests_properties(server_report_test PROPERTIES LABELS "unit" SKIP_RETURN_CODE 77 TIMEOUT 60)
endif()
