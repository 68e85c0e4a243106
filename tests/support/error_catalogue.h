#pragma once

// docs/errors.md as data, for the tests that hold hvd's messages to it (tests/errors/
// test_error_catalogue.cc, tests/errors/test_validation.cc).
//
// Every table row of docs/errors.md whose first cell holds a `code` span is one catalogue row; that
// span is the message's template. In a template, `<word>` stands for a value (typed: `<rank>` is an
// integer, `<shape>` a bracketed list, `<op>` a collective's name, ...; an unknown word is any
// text), `...` for text left out, and every other character is literal. A template becomes an
// anchored regular expression; a message matches a row when the whole message matches it.
#include <cstdio>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

namespace hvdtest {

struct CatalogueRow {
  int line = 0;         // in docs/errors.md
  std::string section;  // the "## " heading above it
  std::string templ;    // the first `code` span of the row's first cell
  std::string pattern;  // templ as an ECMAScript regex
  std::regex re;
};

// The regex a placeholder stands for.
inline std::string placeholder_pattern(const std::string& word) {
  static const char* const kTyped[][2] = {
      {"op", "allreduce|allgather|broadcast|alltoall|reducescatter|grouped_allreduce"},
      {"rank", "-?[0-9]+"},
      {"rank0", "-?[0-9]+"},
      {"n", "-?[0-9]+"},
      {"i", "[0-9]+"},
      {"shape", "\\[[-0-9,]*\\]"},
      {"splits", "\\[[-0-9,]*\\]"},
      {"dtype", "[a-z0-9]+"},
      {"reduce_op", "average|sum|min|max|product|unknown"},
      {"device", "cpu|cuda:-?[0-9]+"},
      {"role", "the input|the output|the tensor|input [0-9]+|output [0-9]+"},
      {"verb", "gather|split|scatter"},
      {"function", "[A-Za-z_]+\\(\\)"},
      {"value", "\\S+"},
  };
  for (const auto& t : kTyped)
    if (word == t[0]) return t[1];
  return "[\\s\\S]+?";  // <name>, <group>, <note>, ...: any text
}

inline std::string template_to_pattern(const std::string& templ) {
  std::string out = "^";
  for (size_t i = 0; i < templ.size();) {
    if (templ[i] == '<') {
      const size_t end = templ.find('>', i);
      const std::string word = end == std::string::npos ? "" : templ.substr(i + 1, end - i - 1);
      bool is_word = !word.empty();
      for (char c : word)
        is_word = is_word && ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_');
      if (is_word) {
        out += "(?:" + placeholder_pattern(word) + ")";
        i = end + 1;
        continue;
      }
    }
    if (templ.compare(i, 3, "...") == 0) {
      out += "[\\s\\S]*";
      i += 3;
      continue;
    }
    const char c = templ[i++];
    if (std::string("\\^$.|?*+()[]{}").find(c) != std::string::npos) out += '\\';
    out += c;
  }
  return out + "$";
}

// Parses the catalogue; `error` says why it could not (an unreadable file, a bad template).
inline std::vector<CatalogueRow> load_catalogue(const std::string& path, std::string* error) {
  std::vector<CatalogueRow> rows;
  std::ifstream in(path);
  if (!in) {
    *error = "cannot read " + path;
    return rows;
  }
  std::string line, section;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.rfind("## ", 0) == 0) section = line.substr(3);
    if (line.rfind("| `", 0) != 0) continue;  // a table row whose first cell starts with code
    const size_t close = line.find('`', 3);
    if (close == std::string::npos) continue;
    CatalogueRow row;
    row.line = n;
    row.section = section;
    row.templ = line.substr(3, close - 3);
    row.pattern = template_to_pattern(row.templ);
    try {
      row.re = std::regex(row.pattern, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      *error = path + ":" + std::to_string(n) + ": template `" + row.templ +
               "` is not a valid pattern: " + e.what();
      return {};
    }
    rows.push_back(std::move(row));
  }
  if (rows.empty()) *error = path + " has no message rows";
  return rows;
}

// The rows whose template matches the whole message.
inline std::vector<const CatalogueRow*> matching_rows(const std::vector<CatalogueRow>& rows,
                                                      const std::string& message) {
  std::vector<const CatalogueRow*> out;
  for (const auto& r : rows)
    if (std::regex_match(message, r.re)) out.push_back(&r);
  return out;
}

// "" when `message` matches exactly one row, else what is wrong (for a test failure).
inline std::string catalogue_mismatch(const std::vector<CatalogueRow>& rows,
                                      const std::string& message) {
  const auto m = matching_rows(rows, message);
  if (m.size() == 1) return "";
  std::ostringstream s;
  if (m.empty()) {
    s << "no row of docs/errors.md matches the message\n  " << message;
  } else {
    s << m.size() << " rows of docs/errors.md match the message\n  " << message;
    for (const auto* r : m) s << "\n  line " << r->line << ": " << r->templ;
  }
  return s.str();
}

// A prefix that a message (or template) repeats: "<op> of '<name>' failed:" or "rank <r>:" twice.
// Returns the repeated prefix, or "".
inline std::string repeated_prefix(const std::string& text) {
  static const std::regex failed(
      "(allreduce|allgather|broadcast|alltoall|reducescatter|grouped_allreduce|<op>) of '[^']*' "
      "failed:");
  static const std::regex rank("\\brank (-?[0-9]+|<rank>|<rank0>):");
  for (const std::regex* re : {&failed, &rank}) {
    auto begin = std::sregex_iterator(text.begin(), text.end(), *re);
    const auto count = std::distance(begin, std::sregex_iterator());
    if (count > 1) return begin->str();
  }
  return "";
}

}  // namespace hvdtest
