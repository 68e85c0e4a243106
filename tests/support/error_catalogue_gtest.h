#pragma once

// docs/errors.md's rows, loaded once per test binary; a file that cannot be read or parsed is a
// test failure. For gtest binaries compiled with HVD_ERRORS_MD (the path of docs/errors.md).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/support/error_catalogue.h"

namespace hvdtest {

inline const std::vector<CatalogueRow>& catalogue() {
  static const std::vector<CatalogueRow> rows = [] {
    std::string error;
    auto r = load_catalogue(HVD_ERRORS_MD, &error);
    if (!error.empty()) ADD_FAILURE() << error;
    return r;
  }();
  return rows;
}

}  // namespace hvdtest
