// The spec parser: a Dockerfile subset, see template.h for the accepted language.
//
// Structure: the text is cut into logical lines (comments, blank lines and continuations
// handled here, with the first physical line of each instruction remembered for errors),
// then each instruction is dispatched by keyword. Variable expansion and quote removal share
// one small lexer (Lexer, spec_lexer.h) so `ENV A='$B'` and `COPY "a b" /x` behave as in Docker.
#include <algorithm>
#include <cctype>
#include <functional>
#include <optional>
#include <set>

#include "template/internal.h"
#include "template/spec_lexer.h"
#include "template/template.h"

namespace space::tmpl {

namespace {

using Vars = std::map<std::string, std::string>;

using internal::Flags;
using internal::HasHeredoc;
using internal::IsBlank;
using internal::IsSpace;
using internal::IsVarName;
using internal::JsonStringArray;
using internal::Lexer;
using internal::LineFail;
using internal::Quote;
using internal::SplitFlags;
using internal::Trim;
using internal::Upper;

// Same rule as core::ParseTemplateRef, so every name FROM accepts can be resolved.
bool ValidRefPart(std::string_view s) {
  if (s.empty() || s.size() > 128) return false;
  for (char c : s) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.'))
      return false;
  }
  return s[0] != '.';
}

bool IsLowerHex(std::string_view s) {
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

// Collapses "", "." and ".." components of an absolute path; ".." at the root stays at the
// root (these paths live inside the sandbox, where that is what the kernel does too).
std::string NormalizeAbs(std::string_view path) {
  std::vector<std::string_view> parts;
  size_t i = 0;
  while (i <= path.size()) {
    size_t j = path.find('/', i);
    if (j == std::string_view::npos) j = path.size();
    std::string_view c = path.substr(i, j - i);
    if (c == "..") {
      if (!parts.empty()) parts.pop_back();
    } else if (!c.empty() && c != ".") {
      parts.push_back(c);
    }
    i = j + 1;
  }
  std::string out;
  for (auto c : parts) {
    out += '/';
    out += c;
  }
  return out.empty() ? "/" : out;
}

std::string ResolveAgainst(const std::string& workdir, std::string_view path) {
  if (!path.empty() && path[0] == '/') return NormalizeAbs(path);
  return NormalizeAbs(workdir + "/" + std::string(path));
}

// "user", "user:group", "1000:1000": no whitespace, control characters or '/'.
bool ValidUserSpec(std::string_view s) {
  if (s.empty() || s.size() > 256) return false;
  size_t colon = s.find(':');
  if (colon != std::string_view::npos) {
    if (colon == 0 || colon + 1 == s.size() || s.find(':', colon + 1) != std::string_view::npos)
      return false;
  }
  for (unsigned char c : s) {
    if (c <= 0x20 || c == 0x7f || c == '/') return false;
  }
  return true;
}

// A logical line: an instruction with its continuations joined.
struct Logical {
  int line;
  std::string text;
};

class Parser {
 public:
  Parser(const ParseOptions& opts) : opts_(opts) {}

  Result<Spec> Run(std::string_view text) {
    if (text.size() > kMaxSpecBytes) {
      return Fail(Errc::kTooLarge, "spec is " + std::to_string(text.size()) +
                                       " bytes; the limit is " + std::to_string(kMaxSpecBytes));
    }
    if (opts_.base_workdir.empty() || opts_.base_workdir[0] != '/')
      return Fail(Errc::kInvalidArgument, "base working directory must be absolute");
    workdir_ = NormalizeAbs(opts_.base_workdir);
    env_ = opts_.base_env;
    auto lines = Split(text);
    if (!lines) return tl::unexpected(lines.error());
    int count = 0;
    for (const auto& l : *lines) {
      if (++count > kMaxInstructions) {
        return Fail(Errc::kTooLarge, "line " + std::to_string(l.line) + ": more than " +
                                         std::to_string(kMaxInstructions) + " instructions");
      }
      SPACE_TRY(Dispatch(l));
    }
    if (!seen_from_) {
      return Fail(Errc::kInvalidArgument,
                  "spec has no FROM instruction (use FROM scratch for an empty base)");
    }
    for (const auto& [name, value] : opts_.build_args) {
      if (!declared_args_.count(name))
        spec_.warnings.push_back("build argument " + name + " is not declared by any ARG");
    }
    return std::move(spec_);
  }

 private:
  // Cuts text into logical lines; handles parser directives, comments, blank lines, CRLF
  // and continuations.
  Result<std::vector<Logical>> Split(std::string_view text) {
    std::vector<Logical> out;
    std::vector<std::string_view> phys;
    size_t i = 0;
    while (i < text.size()) {
      size_t nl = text.find('\n', i);
      if (nl == std::string_view::npos) nl = text.size();
      std::string_view l = text.substr(i, nl - i);
      if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
      if (l.find('\0') != std::string_view::npos)
        return LineFail(static_cast<int>(phys.size() + 1), "NUL byte in the spec");
      phys.push_back(l);
      i = nl + 1;
    }
    bool directives = true;
    std::optional<Logical> cur;
    for (size_t n = 0; n < phys.size(); ++n) {
      int line = static_cast<int>(n + 1);
      std::string_view l = phys[n];
      std::string_view t = Trim(l);
      if (directives) {
        if (!t.empty() && t[0] == '#') {
          std::string_view body = Trim(t.substr(1));
          size_t eq = body.find('=');
          std::string key = eq == std::string_view::npos ? "" : Upper(Trim(body.substr(0, eq)));
          if (key == "ESCAPE") {
            if (Trim(body.substr(eq + 1)) != "\\")
              return LineFail(line, "only the default escape character \\ is supported");
            continue;
          }
          if (key == "SYNTAX") {
            spec_.warnings.push_back("line " + std::to_string(line) + ": syntax directive ignored");
            continue;
          }
        }
        directives = false;
      }
      if (cur) {
        // Inside a continuation: comment lines vanish, blank lines are skipped (Docker
        // warns about them too).
        if (!t.empty() && t[0] == '#') continue;
        if (t.empty()) {
          spec_.warnings.push_back("line " + std::to_string(line) + ": empty continuation line");
          continue;
        }
      } else {
        if (t.empty() || t[0] == '#') continue;
        cur = Logical{line, ""};
        l = t;  // leading whitespace before the keyword is insignificant
      }
      // Continuation: a backslash at the end, optionally followed by blanks.
      std::string_view body = l;
      while (!body.empty() && IsBlank(body.back())) body.remove_suffix(1);
      bool cont = !body.empty() && body.back() == '\\';
      if (cont) {
        body.remove_suffix(1);
        cur->text.append(body);
      } else {
        cur->text.append(l);
        out.push_back(std::move(*cur));
        cur.reset();
      }
    }
    if (cur) out.push_back(std::move(*cur));  // a trailing backslash ends the instruction
    return out;
  }

  const std::string* Lookup(const std::string& name, bool before_from) const {
    if (before_from) {
      auto it = meta_args_.find(name);
      return it == meta_args_.end() ? nullptr : &it->second;
    }
    if (auto it = env_.find(name); it != env_.end()) return &it->second;
    if (auto it = args_.find(name); it != args_.end()) return &it->second;
    return nullptr;
  }

  Lexer MakeLexer(std::string_view text, int line, bool raw = false) {
    bool before = !seen_from_;
    return Lexer(
        text, [this, before](const std::string& n) { return Lookup(n, before); }, line,
        &spec_.warnings, raw);
  }

  Status Dispatch(const Logical& l) {
    std::string_view t = Trim(l.text);
    size_t sp = 0;
    while (sp < t.size() && !IsSpace(t[sp])) ++sp;
    std::string_view kw = t.substr(0, sp);
    std::string_view args = Trim(t.substr(sp));
    std::string key = Upper(kw);
    int line = l.line;

    static const std::set<std::string> kIgnored = {"ENTRYPOINT", "EXPOSE", "MAINTAINER",
                                                   "VOLUME", "STOPSIGNAL"};
    static const std::set<std::string> kKnown = {"FROM", "RUN", "COPY", "ENV",        "WORKDIR",
                                                 "USER", "ARG", "CMD",  "HEALTHCHECK", "LABEL"};
    if (key == "ADD") return LineFail(line, "ADD is not supported; use COPY");
    if (key == "ONBUILD" || key == "SHELL") return LineFail(line, key + " is not supported");
    bool ignored = kIgnored.count(key) > 0;
    if (!ignored && !kKnown.count(key)) return LineFail(line, "unknown instruction " + Quote(kw));
    if (key == "ARG") return Arg(line, args);
    if (key == "FROM") return From(line, args);
    if (!seen_from_) return LineFail(line, key + " before FROM (only ARG may come first)");
    if (ignored) {
      spec_.warnings.push_back("line " + std::to_string(line) + ": " + key +
                               " is ignored (templates carry no " +
                               (key == "ENTRYPOINT" ? "entry point: CMD is the start command"
                                : key == "EXPOSE"                   ? "port list"
                                                                    : "image metadata") +
                               ")");
      return Ok();
    }
    if (args.empty()) return LineFail(line, key + " needs an argument");
    if (key == "LABEL") return Label(line, args);
    if (key == "CMD") return Cmd(line, args, &spec_.start_cmd);
    if (key == "HEALTHCHECK") return Healthcheck(line, args);
    Step step;
    step.line = line;
    step.text = std::string(t);
    if (key == "RUN") {
      SPACE_TRY(RunStep(line, args, &step));
    } else if (key == "COPY") {
      SPACE_TRY(CopyStep(line, args, &step));
    } else if (key == "ENV") {
      SPACE_TRY(EnvStep(line, args, &step));
    } else if (key == "WORKDIR") {
      step.kind = StepKind::kWorkdir;
      auto w = MakeLexer(args, line).Whole();
      if (!w) return tl::unexpected(w.error());
      std::string_view p = Trim(*w);
      if (p.empty()) return LineFail(line, "WORKDIR expands to an empty path");
      workdir_ = ResolveAgainst(workdir_, p);
      step.args = {workdir_};
    } else {  // USER
      step.kind = StepKind::kUser;
      auto w = MakeLexer(args, line).Whole();
      if (!w) return tl::unexpected(w.error());
      std::string u(Trim(*w));
      if (!ValidUserSpec(u))
        return LineFail(line, "USER wants user[:group] without spaces, got " + Quote(u));
      step.args = {u};
    }
    spec_.steps.push_back(std::move(step));
    return Ok();
  }

  // CMD: the template's start command, in RUN's two forms; a later CMD replaces it.
  Status Cmd(int line, std::string_view args, std::vector<std::string>* out) {
    Step step;
    SPACE_TRY(RunStep(line, args, &step));
    *out = RunArgv(step);
    return Ok();
  }

  // HEALTHCHECK [--option=value...] CMD command | HEALTHCHECK NONE: the start command's
  // readiness check. Options (interval, timeout, ...) are ignored with a warning.
  Status Healthcheck(int line, std::string_view args) {
    if (Upper(args) == "NONE") {
      spec_.ready_cmd.clear();
      return Ok();
    }
    while (args.starts_with("--")) {
      size_t sp = 0;
      while (sp < args.size() && !IsSpace(args[sp])) ++sp;
      spec_.warnings.push_back("line " + std::to_string(line) + ": HEALTHCHECK option " +
                               std::string(args.substr(0, sp)) + " ignored");
      args = Trim(args.substr(sp));
    }
    if (args.size() < 4 || Upper(args.substr(0, 3)) != "CMD" || !IsSpace(args[3]))
      return LineFail(line, "HEALTHCHECK wants CMD command or NONE");
    return Cmd(line, Trim(args.substr(4)), &spec_.ready_cmd);
  }

  Status Arg(int line, std::string_view args) {
    if (args.empty()) return LineFail(line, "ARG needs a name");
    auto words = MakeLexer(args, line).Words();
    if (!words) return tl::unexpected(words.error());
    for (const auto& w : *words) {
      size_t eq = w.find('=');
      std::string name = w.substr(0, eq);
      if (!IsVarName(name)) return LineFail(line, "bad ARG name " + Quote(name));
      declared_args_.insert(name);
      std::optional<std::string> value;
      if (auto b = opts_.build_args.find(name); b != opts_.build_args.end()) {
        value = b->second;
      } else if (eq != std::string::npos) {
        value = w.substr(eq + 1);
      } else if (seen_from_) {
        // Docker: a bare ARG inside the stage inherits the default declared before FROM.
        if (auto m = meta_args_.find(name); m != meta_args_.end()) value = m->second;
      }
      auto& scope = seen_from_ ? args_ : meta_args_;
      if (value) {
        scope[name] = *value;
      } else {
        scope.erase(name);  // declared without a value: expands to empty (with a warning)
      }
    }
    return Ok();
  }

  Status From(int line, std::string_view args) {
    if (seen_from_) {
      return LineFail(line, "a second FROM: multi-stage builds are not supported");
    }
    if (!spec_.steps.empty()) return LineFail(line, "FROM must be the first instruction");
    if (args.empty())
      return LineFail(line, "FROM needs a template (name[:tag], sha256:..., scratch)");
    Flags flags = SplitFlags(args);
    if (flags.missing_value || !flags.items.empty()) {
      std::string f = flags.missing_value ? flags.bad : flags.items[0].first;
      return LineFail(line, "FROM --" + f.substr(0, f.find('=')) + " is not supported");
    }
    auto words = MakeLexer(args, line).Words();
    if (!words) return tl::unexpected(words.error());
    const auto& w = *words;
    if (w.size() == 3 && Upper(w[1]) == "AS") {
      spec_.warnings.push_back("line " + std::to_string(line) + ": stage name " + Quote(w[2]) +
                               " ignored (single-stage builds only)");
    } else if (w.size() != 1) {
      return LineFail(line,
                      "FROM wants one template reference (name[:tag], sha256:<digest> or "
                      "scratch), optionally followed by AS <name>");
    }
    if (w.empty() || w[0].empty()) return LineFail(line, "FROM expands to an empty reference");
    const std::string& ref = w[0];
    FromRef& f = spec_.from;
    if (ref == "scratch") {
      f.kind = FromRef::Kind::kScratch;
    } else if (StartsWith(ref, "sha256:")) {
      std::string hex = ref.substr(7);
      if (hex.size() != 64 || !IsLowerHex(hex))
        return LineFail(line, "bad digest " + Quote(ref) + ": want sha256:<64 lowercase hex>");
      f.kind = FromRef::Kind::kDigest;
      f.digest = ref;
    } else {
      if (ref.find('@') != std::string::npos)
        return LineFail(line, "pin a template by digest as FROM sha256:<hex>, got " + Quote(ref));
      if (ref.find('/') != std::string::npos)
        return LineFail(line, "template names have no registry or '/': " + Quote(ref));
      std::string name = ref, tag = "latest";
      if (size_t c = ref.find(':'); c != std::string::npos) {
        name = ref.substr(0, c);
        tag = ref.substr(c + 1);
      }
      if (!ValidRefPart(name) || !ValidRefPart(tag)) {
        return LineFail(line, "bad template reference " + Quote(ref) +
                                  ": want name[:tag] of letters, digits, '.', '-', '_'");
      }
      f.kind = FromRef::Kind::kNameTag;
      f.name = name;
      f.tag = tag;
    }
    seen_from_ = true;
    return Ok();
  }

  Status RunStep(int line, std::string_view args, Step* step) {
    step->kind = StepKind::kRun;
    Flags flags = SplitFlags(args);
    if (flags.missing_value || !flags.items.empty()) {
      std::string f = flags.missing_value ? flags.bad : flags.items[0].first;
      return LineFail(line, "RUN --" + f + " is not supported");
    }
    if (args[0] == '[') {
      if (auto argv = JsonStringArray(args)) {
        if (argv->empty() || (*argv)[0].empty())
          return LineFail(line, "RUN exec form needs a program");
        step->exec_form = true;
        step->args = std::move(*argv);
      }
      // Not a JSON array of strings: Docker runs it as a shell command (`RUN [ -f x ]`).
    }
    if (!step->exec_form) {
      if (HasHeredoc(args)) return LineFail(line, "heredocs (<<WORD) are not supported");
      step->args = {std::string(args)};
    }
    for (const auto& [k, v] : args_) step->run_env.push_back(k + "=" + v);
    return Ok();
  }

  Status CopyStep(int line, std::string_view args, Step* step) {
    step->kind = StepKind::kCopy;
    Flags flags = SplitFlags(args);
    if (flags.missing_value) return LineFail(line, "COPY --" + flags.bad + " needs =value");
    for (const auto& [name, raw] : flags.items) {
      auto v = MakeLexer(raw, line).Whole();
      if (!v) return tl::unexpected(v.error());
      if (name == "chown") {
        if (!ValidUserSpec(*v))
          return LineFail(line, "COPY --chown wants user[:group], got " + Quote(*v));
        step->chown = *v;
      } else if (name == "chmod") {
        if (v->empty() || v->size() > 4 ||
            !std::all_of(v->begin(), v->end(), [](char c) { return c >= '0' && c <= '7'; }))
          return LineFail(line,
                          "COPY --chmod wants octal permissions (e.g. 0755), got " + Quote(*v));
        step->chmod = *v;
      } else {
        return LineFail(line, "COPY --" + name + " is not supported");
      }
    }
    std::string_view rest = flags.rest;
    if (rest.empty()) return LineFail(line, "COPY needs a source and a destination");
    if (HasHeredoc(rest)) return LineFail(line, "heredocs (<<WORD) are not supported");
    std::vector<std::string> words;
    std::optional<std::vector<std::string>> json;
    if (rest[0] == '[') json = JsonStringArray(rest);
    if (json) {
      for (const auto& e : *json) {
        auto w = MakeLexer(e, line, /*raw=*/true).Whole();
        if (!w) return tl::unexpected(w.error());
        words.push_back(std::move(*w));
      }
    } else {
      auto w = MakeLexer(rest, line).Words();
      if (!w) return tl::unexpected(w.error());
      words = std::move(*w);
    }
    if (words.size() < 2) return LineFail(line, "COPY needs a source and a destination");
    std::string dest = words.back();
    words.pop_back();
    for (const auto& src : words) {
      if (src.empty()) return LineFail(line, "COPY source is empty");
      if (IsCopyPattern(src)) {
        // Matched against the context when the step runs; its syntax is checked now.
        if (std::string why = internal::CopyPatternError(src); !why.empty())
          return LineFail(line, "COPY source " + Quote(src) + ": bad wildcard: " + why);
      }
      std::string norm = NormalizeAbs("/" + src);  // only to detect "..": see below
      // Reject rather than clamp "..": silently copying a different path than written hides
      // mistakes, and a source must name something inside the build context.
      size_t i = 0;
      while (i <= src.size()) {
        size_t j = src.find('/', i);
        if (j == std::string::npos) j = src.size();
        if (src.compare(i, j - i, "..") == 0)
          return LineFail(line, "COPY source " + Quote(src) + " leaves the build context");
        i = j + 1;
      }
      step->args.push_back(norm == "/" ? "." : norm.substr(1));
    }
    if (dest.empty()) return LineFail(line, "COPY destination is empty");
    bool dir = dest.back() == '/' || dest == "." || dest == ".." ||
               (dest.size() >= 2 && dest.compare(dest.size() - 2, 2, "/.") == 0);
    // Several sources written out need a directory now; a wildcard matching several paths is
    // refused when it is expanded (core's CopyDigest), as Docker does: one match alone is a
    // source like any other.
    if (words.size() > 1 && !dir) {
      return LineFail(line,
                      "COPY with several sources needs a destination directory ending "
                      "in '/'");
    }
    std::string abs = ResolveAgainst(workdir_, dest);
    if (dir && abs != "/") abs += '/';
    step->args.push_back(abs);
    return Ok();
  }

  // LABEL k=v ...: templates keep no image metadata, so labels are ignored with a warning,
  // but for SPACE's own: space.allow-setuid=true|false (Spec::allow_setuid).
  Status Label(int line, std::string_view args) {
    auto words = MakeLexer(args, line).Words();
    if (!words) return tl::unexpected(words.error());
    for (const auto& w : *words) {
      size_t eq = w.find('=');
      if (eq == std::string::npos || eq == 0)
        return LineFail(line, "LABEL " + Quote(w) + ": want key=value");
      const std::string key = w.substr(0, eq), value = w.substr(eq + 1);
      if (key == kLabelAllowSetuid) {
        if (value != "true" && value != "false")
          return LineFail(line, std::string(kLabelAllowSetuid) + " must be true or false, not " + Quote(value));
        spec_.allow_setuid = value == "true";
      } else if (StartsWith(key, "space.")) {
        return LineFail(line, "unknown SPACE label " + Quote(key) + " (known: " + kLabelAllowSetuid + ")");
      } else {
        spec_.warnings.push_back("line " + std::to_string(line) + ": LABEL " + key +
                                 " is ignored (templates carry no image metadata)");
      }
    }
    return Ok();
  }

  Status EnvStep(int line, std::string_view args, Step* step) {
    step->kind = StepKind::kEnv;
    // Every pair of one ENV line sees the environment from before the line, as in Docker.
    std::vector<std::pair<std::string, std::string>> pairs;
    size_t sp = 0;
    while (sp < args.size() && !IsSpace(args[sp]) && args[sp] != '=') ++sp;
    bool legacy = sp >= args.size() || args[sp] != '=';
    if (legacy) {
      std::string name(args.substr(0, sp));
      std::string_view rest = Trim(args.substr(sp));
      if (!IsVarName(name)) return LineFail(line, "bad ENV name " + Quote(name));
      if (rest.empty())
        return LineFail(line, "ENV " + name + " needs a value (ENV K=V or ENV K V)");
      auto v = MakeLexer(rest, line).Whole();
      if (!v) return tl::unexpected(v.error());
      pairs.emplace_back(std::move(name), std::move(*v));
    } else {
      auto words = MakeLexer(args, line).Words();
      if (!words) return tl::unexpected(words.error());
      // The name is taken from the lexed word: a quoted '=' cannot occur in a valid name,
      // so splitting at the first '=' is exact for every accepted name.
      for (const auto& w : *words) {
        size_t eq = w.find('=');
        if (eq == std::string::npos)
          return LineFail(line, "ENV " + Quote(w) + " has no '=' (mixing K=V and K V forms)");
        std::string name = w.substr(0, eq);
        if (!IsVarName(name)) return LineFail(line, "bad ENV name " + Quote(name));
        pairs.emplace_back(std::move(name), w.substr(eq + 1));
      }
    }
    for (auto& [k, v] : pairs) {
      env_[k] = v;
      step->args.push_back(k + "=" + v);
    }
    return Ok();
  }

  const ParseOptions& opts_;
  Spec spec_;
  bool seen_from_ = false;
  std::string workdir_;
  Vars env_;        // base env + ENV so far
  Vars args_;       // ARGs declared after FROM (with a value)
  Vars meta_args_;  // ARGs declared before FROM
  std::set<std::string> declared_args_;
};

void PutField(crypto_hash_sha256_state* st, std::string_view s) {
  uint64_t n = s.size();
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(n >> (8 * i));
  crypto_hash_sha256_update(st, len, sizeof len);
  crypto_hash_sha256_update(st, reinterpret_cast<const unsigned char*>(s.data()), s.size());
}

void PutList(crypto_hash_sha256_state* st, const std::vector<std::string>& v) {
  PutField(st, std::to_string(v.size()));
  for (const auto& s : v) PutField(st, s);
}

}  // namespace

std::string FromRef::ToString() const {
  switch (kind) {
    case Kind::kScratch:
      return "scratch";
    case Kind::kDigest:
      return digest;
    case Kind::kNameTag:
      return name + ":" + tag;
  }
  return "";
}

std::string_view StepKindName(StepKind k) {
  switch (k) {
    case StepKind::kRun:
      return "RUN";
    case StepKind::kCopy:
      return "COPY";
    case StepKind::kEnv:
      return "ENV";
    case StepKind::kWorkdir:
      return "WORKDIR";
    case StepKind::kUser:
      return "USER";
  }
  return "?";
}

Result<Spec> ParseSpec(std::string_view text, const ParseOptions& opts) {
  Parser p(opts);
  return p.Run(text);
}

std::vector<std::string> RunArgv(const Step& step) {
  if (step.exec_form) return step.args;
  return {"/bin/sh", "-c", step.args.empty() ? "" : step.args[0]};
}

std::string StepCacheKey(const std::string& parent_digest, const Step& step,
                         const std::string& copy_content_digest) {
  crypto_hash_sha256_state st;
  crypto_hash_sha256_init(&st);
  PutField(&st, "space-template-step-v1");
  PutField(&st, parent_digest);
  PutField(&st, StepKindName(step.kind));
  PutList(&st, step.args);
  PutField(&st, step.kind == StepKind::kRun && step.exec_form ? "exec" : "shell");
  PutField(&st, step.chown);
  PutField(&st, step.chmod);
  PutList(&st, step.kind == StepKind::kRun ? step.run_env : std::vector<std::string>{});
  PutField(&st, step.kind == StepKind::kCopy ? copy_content_digest : "");
  unsigned char out[crypto_hash_sha256_BYTES];
  crypto_hash_sha256_final(&st, out);
  return "sha256:" + HexEncode(std::string_view(reinterpret_cast<char*>(out), sizeof out));
}

}  // namespace space::tmpl
