// template/spec_lexer: the spec parser's lexical layer (not a public API; spec.cc is its one
// user): blanks and trimming, quote removal and `$` expansion over an instruction's argument
// text (Lexer), JSON-form arrays, heredoc detection and leading `--flag=value` words.
// Everything here is pure: no I/O, no state beyond one Lexer's own, thread-safe.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/common.h"

namespace space::tmpl::internal {

// kInvalidArgument "line N: msg".
tl::unexpected<Error> LineFail(int line, const std::string& msg);

bool IsBlank(char c);
bool IsSpace(char c);
std::string_view Trim(std::string_view s);
std::string Upper(std::string_view s);
bool IsVarName(std::string_view s);

// Quote removal and variable expansion over one instruction's argument text.
class Lexer {
 public:
  using Lookup = std::function<const std::string*(const std::string&)>;

  // raw: no quote or backslash processing, only `$` expansion (for JSON-form elements).
  Lexer(std::string_view text, Lookup lookup, int line, std::vector<std::string>* warnings,
        bool raw = false)
      : s_(text), lookup_(std::move(lookup)), line_(line), warnings_(warnings), raw_(raw) {}

  // Splits on unquoted whitespace. Expanded values are never split.
  Result<std::vector<std::string>> Words() {
    std::vector<std::string> words;
    SPACE_TRY(Process(nullptr, '\0', &words));
    return words;
  }
  // The whole text as one word (inner whitespace kept).
  Result<std::string> Whole() {
    std::string out;
    SPACE_TRY(Process(&out, '\0', nullptr));
    return out;
  }

 private:
  // Consumes characters until the end or an unquoted `stop`, appending to *out; in split
  // mode (words != null, out == null), unquoted whitespace ends a word.
  Status Process(std::string* out, char stop, std::vector<std::string>* words);
  Status SingleQuote(std::string* out);
  Status DoubleQuote(std::string* out);
  void Unset(const std::string& name);
  Status Dollar(std::string* out);

  std::string_view s_;
  size_t pos_ = 0;
  Lookup lookup_;
  int line_;
  std::vector<std::string>* warnings_;
  bool raw_;
  int depth_ = 0;
};

// Parses `["a", "b"]`; nullopt when the text is not a JSON array of strings.
std::optional<std::vector<std::string>> JsonStringArray(std::string_view text);

// BuildKit treats a shell word of the form [fd]<<[-]WORD as a heredoc; we refuse those
// rather than run a different command than the author wrote.
bool HasHeredoc(std::string_view text);

// Leading `--name=value` flags of RUN/COPY; stops at the first other word.
struct Flags {
  std::vector<std::pair<std::string, std::string>> items;  // name (without --), raw value
  std::string_view rest;
  bool missing_value = false;
  std::string bad;  // the flag without '='
};

Flags SplitFlags(std::string_view args);

}  // namespace space::tmpl::internal
