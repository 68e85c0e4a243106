# Warnings on every hvd target (not global flags).
#
# GCC 12 at -O3 (Release; CI's RelWithDebInfo builds at -O2, where it stays quiet) reports a
# bogus -Wrestrict inside libstdc++ for `"literal" + std::string&&`: the inlined insert's memcpy
# "may overlap up to 9223372036854775811 bytes". A fresh Release build (what scripts/bench makes)
# printed 17 of them, every one from that operator+, none a real overlap. Only GCC 12 (Debian 12's,
# where they were seen) drops the warning; other compilers keep it, and a real overlap is still
# caught by ASan (memcpy-param-overlap) in scripts/test --sanitize.
function(hvd_set_warnings target)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra>)
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_GREATER_EQUAL 12
     AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wno-restrict>)
  endif()
endfunction()
