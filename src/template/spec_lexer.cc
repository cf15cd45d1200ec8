// The spec parser's lexical layer: see spec_lexer.h.
#include "template/spec_lexer.h"

#include <algorithm>
#include <cctype>

#include "common/json.h"

namespace space::tmpl::internal {

tl::unexpected<Error> LineFail(int line, const std::string& msg) {
  return Fail(Errc::kInvalidArgument, "line " + std::to_string(line) + ": " + msg);
}

bool IsBlank(char c) { return c == ' ' || c == '\t'; }
bool IsSpace(char c) { return IsBlank(c) || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

std::string_view Trim(std::string_view s) {
  while (!s.empty() && IsSpace(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsSpace(s.back())) s.remove_suffix(1);
  return s;
}

std::string Upper(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

bool IsVarName(std::string_view s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  for (char c : s) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  }
  return true;
}

Status Lexer::Process(std::string* out, char stop, std::vector<std::string>* words) {
  std::string cur;
  bool in_word = false;
  std::string* dst = out ? out : &cur;
  while (pos_ < s_.size()) {
    char c = s_[pos_];
    if (stop && c == stop) return Ok();
    if (words && IsSpace(c)) {
      if (in_word) words->push_back(std::move(cur));
      cur.clear();
      in_word = false;
      ++pos_;
      continue;
    }
    in_word = true;
    if (raw_) {
      if (c == '$') {
        SPACE_TRY(Dollar(dst));
      } else {
        *dst += c;
        ++pos_;
      }
      continue;
    }
    if (c == '\'') {
      SPACE_TRY(SingleQuote(dst));
    } else if (c == '"') {
      SPACE_TRY(DoubleQuote(dst));
    } else if (c == '\\') {
      ++pos_;
      if (pos_ < s_.size()) *dst += s_[pos_++];
    } else if (c == '$') {
      SPACE_TRY(Dollar(dst));
    } else {
      *dst += c;
      ++pos_;
    }
  }
  if (stop) return LineFail(line_, std::string("missing '") + stop + "' in variable expansion");
  if (words && in_word) words->push_back(std::move(cur));
  return Ok();
}

Status Lexer::SingleQuote(std::string* out) {
  size_t end = s_.find('\'', pos_ + 1);
  if (end == std::string_view::npos) return LineFail(line_, "unterminated single quote");
  out->append(s_.substr(pos_ + 1, end - pos_ - 1));
  pos_ = end + 1;
  return Ok();
}

Status Lexer::DoubleQuote(std::string* out) {
  ++pos_;
  while (pos_ < s_.size()) {
    char c = s_[pos_];
    if (c == '"') {
      ++pos_;
      return Ok();
    }
    if (c == '\\' && pos_ + 1 < s_.size() &&
        (s_[pos_ + 1] == '"' || s_[pos_ + 1] == '\\' || s_[pos_ + 1] == '$')) {
      *out += s_[pos_ + 1];
      pos_ += 2;
    } else if (c == '$') {
      SPACE_TRY(Dollar(out));
    } else {
      *out += c;
      ++pos_;
    }
  }
  return LineFail(line_, "unterminated double quote");
}

void Lexer::Unset(const std::string& name) {
  std::string w = "line " + std::to_string(line_) + ": variable " + name +
                  " is not set; it expands to an empty string";
  if (warnings_ && std::find(warnings_->begin(), warnings_->end(), w) == warnings_->end())
    warnings_->push_back(std::move(w));
}

Status Lexer::Dollar(std::string* out) {
  ++pos_;  // '$'
  if (pos_ >= s_.size()) {
    *out += '$';
    return Ok();
  }
  if (s_[pos_] != '{') {
    size_t start = pos_;
    if (!(std::isalpha(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '_')) {
      *out += '$';  // "$5", "$ " and "$(" stay literal
      return Ok();
    }
    while (pos_ < s_.size() &&
           (std::isalnum(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '_'))
      ++pos_;
    std::string name(s_.substr(start, pos_ - start));
    if (const std::string* v = lookup_(name)) {
      *out += *v;
    } else {
      Unset(name);
    }
    return Ok();
  }
  if (++depth_ > 16) return LineFail(line_, "variable expansions nested too deeply");
  ++pos_;  // '{'
  size_t start = pos_;
  while (pos_ < s_.size() &&
         (std::isalnum(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '_'))
    ++pos_;
  std::string name(s_.substr(start, pos_ - start));
  if (!IsVarName(name)) return LineFail(line_, "bad variable name in ${...}");
  if (pos_ >= s_.size()) return LineFail(line_, "missing '}' in variable expansion");
  const std::string* v = lookup_(name);
  char c = s_[pos_];
  if (c == '}') {
    ++pos_;
    if (v) {
      *out += *v;
    } else {
      Unset(name);
    }
    --depth_;
    return Ok();
  }
  // ${V:-w} ${V-w} ${V:+w} ${V+w} ${V:?msg} ${V?msg}
  bool colon = false;
  if (c == ':') {
    colon = true;
    ++pos_;
    if (pos_ >= s_.size()) return LineFail(line_, "missing '}' in variable expansion");
    c = s_[pos_];
  }
  if (c != '-' && c != '+' && c != '?') {
    return LineFail(line_, "unsupported variable expansion ${" + name + (colon ? ":" : "") +
                               std::string(1, c) +
                               "...} (supported: ${V}, ${V:-w}, ${V:+w}, "
                               "${V:?msg})");
  }
  ++pos_;
  std::string word;
  SPACE_TRY(Process(&word, '}', nullptr));
  ++pos_;  // '}'
  --depth_;
  bool set = v && (!colon || !v->empty());
  if (c == '-') {
    *out += set ? *v : word;
  } else if (c == '+') {
    if (set) *out += word;
  } else {  // '?'
    if (!set) {
      return LineFail(line_, "variable " + name + " is " + (v ? "empty" : "not set") +
                                 (word.empty() ? "" : ": " + word));
    }
    *out += *v;
  }
  return Ok();
}

std::optional<std::vector<std::string>> JsonStringArray(std::string_view text) {
  auto j = ParseJson(text);
  if (!j || !j->is_array()) return std::nullopt;
  std::vector<std::string> out;
  for (const auto& e : *j) {
    if (!e.is_string()) return std::nullopt;
    out.push_back(e.get<std::string>());
  }
  return out;
}

bool HasHeredoc(std::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && IsSpace(text[i])) ++i;
    size_t start = i;
    while (i < text.size() && !IsSpace(text[i])) ++i;
    std::string_view w = text.substr(start, i - start);
    size_t d = 0;
    while (d < w.size() && std::isdigit(static_cast<unsigned char>(w[d]))) ++d;
    w.remove_prefix(d);
    if (w.size() > 2 && w[0] == '<' && w[1] == '<' && w[2] != '<') {
      std::string_view rest = w.substr(2);
      if (!rest.empty() && rest[0] == '-') rest.remove_prefix(1);
      if (!rest.empty() && (rest[0] == '\'' || rest[0] == '"')) rest.remove_prefix(1);
      if (!rest.empty() && (std::isalpha(static_cast<unsigned char>(rest[0])) || rest[0] == '_'))
        return true;
    }
  }
  return false;
}

Flags SplitFlags(std::string_view args) {
  Flags f;
  std::string_view s = Trim(args);
  while (s.size() > 2 && s[0] == '-' && s[1] == '-' &&
         std::isalpha(static_cast<unsigned char>(s[2]))) {
    // The flag ends at unquoted whitespace: `--chown="a b"` is one flag (then refused by
    // its validation, but with the right message).
    size_t end = 0;
    char quote = 0;
    while (end < s.size() && (quote || !IsSpace(s[end]))) {
      if (quote) {
        if (s[end] == quote)
          quote = 0;
        else if (s[end] == '\\' && quote == '"' && end + 1 < s.size())
          ++end;
      } else if (s[end] == '"' || s[end] == '\'') {
        quote = s[end];
      } else if (s[end] == '\\' && end + 1 < s.size()) {
        ++end;
      }
      ++end;
    }
    std::string_view flag = s.substr(2, end - 2);
    size_t eq = flag.find('=');
    if (eq == std::string_view::npos) {
      f.missing_value = true;
      f.bad = std::string(flag);
      return f;
    }
    f.items.emplace_back(std::string(flag.substr(0, eq)), std::string(flag.substr(eq + 1)));
    s = Trim(s.substr(end));
  }
  f.rest = s;
  return f;
}

}  // namespace space::tmpl::internal
