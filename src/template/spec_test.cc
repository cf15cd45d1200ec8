#include <gtest/gtest.h>

#include <random>

#include "template/template.h"

namespace space::tmpl {
namespace {

using namespace std::literals;

Spec MustParse(std::string_view text, const ParseOptions& opts = {}) {
  auto r = ParseSpec(text, opts);
  EXPECT_TRUE(r) << (r ? "" : r.error().message) << "\nfor:\n" << text;
  return r ? *r : Spec{};
}

// Expects a parse error whose message starts with `prefix` and contains `needle`.
void ExpectError(std::string_view text, const std::string& prefix, const std::string& needle = "",
                 Errc code = Errc::kInvalidArgument) {
  auto r = ParseSpec(text);
  ASSERT_FALSE(r) << "parsed but should not:\n" << text;
  EXPECT_EQ(r.error().code, code) << r.error().message;
  EXPECT_EQ(r.error().message.rfind(prefix, 0), 0u) << r.error().message;
  EXPECT_NE(r.error().message.find(needle), std::string::npos) << r.error().message;
}

bool HasWarning(const Spec& s, const std::string& needle) {
  for (const auto& w : s.warnings) {
    if (w.find(needle) != std::string::npos) return true;
  }
  return false;
}

TEST(SpecFromTest, Forms) {
  Spec s = MustParse("FROM base");
  EXPECT_EQ(s.from.kind, FromRef::Kind::kNameTag);
  EXPECT_EQ(s.from.name, "base");
  EXPECT_EQ(s.from.tag, "latest");
  EXPECT_EQ(s.from.ToString(), "base:latest");
  s = MustParse("from py-3.11:v2\n");
  EXPECT_EQ(s.from.name, "py-3.11");
  EXPECT_EQ(s.from.tag, "v2");
  s = MustParse("FROM scratch");
  EXPECT_EQ(s.from.kind, FromRef::Kind::kScratch);
  EXPECT_EQ(s.from.ToString(), "scratch");
  std::string d = "sha256:" + std::string(64, 'a');
  s = MustParse("FROM " + d);
  EXPECT_EQ(s.from.kind, FromRef::Kind::kDigest);
  EXPECT_EQ(s.from.digest, d);
  s = MustParse("FROM base AS builder");
  EXPECT_TRUE(HasWarning(s, "line 1: stage name \"builder\" ignored")) << s.warnings.size();
}

TEST(SpecFromTest, Errors) {
  ExpectError("FROM a/b", "line 1: ", "no registry");
  ExpectError("FROM a@sha256:" + std::string(64, 'a'), "line 1: ", "FROM sha256:");
  ExpectError("FROM sha256:abc", "line 1: ", "bad digest");
  ExpectError("FROM sha256:" + std::string(64, 'A'), "line 1: ", "bad digest");
  ExpectError("FROM --platform=linux/amd64 base", "line 1: ", "--platform");
  ExpectError("FROM", "line 1: ", "FROM needs");
  ExpectError("FROM a b", "line 1: ", "one template reference");
  ExpectError("FROM .hidden", "line 1: ", "bad template reference");
  ExpectError("FROM a:b:c", "line 1: ", "bad template reference");
  ExpectError("# only a comment\n\n", "spec has no FROM");
  ExpectError("", "spec has no FROM");
  ExpectError("FROM a\nRUN x\nFROM b", "line 3: ", "multi-stage");
  ExpectError("\nRUN echo\nFROM a", "line 2: ", "before FROM");
  ExpectError("CMD x\nFROM a", "line 1: ", "before FROM");
}

TEST(SpecRunTest, ShellAndExecForms) {
  Spec s = MustParse(
      "FROM base\n"
      "RUN echo hi && ls\n"
      "run [\"/bin/ls\", \"-l\", \"a b\"]\n"
      "RUN [ -f /etc/passwd ] && echo yes\n"
      "RUN [\"sh\", 1]\n");
  ASSERT_EQ(s.steps.size(), 4u);
  EXPECT_EQ(s.steps[0].kind, StepKind::kRun);
  EXPECT_FALSE(s.steps[0].exec_form);
  EXPECT_EQ(s.steps[0].args, std::vector<std::string>{"echo hi && ls"});
  EXPECT_EQ(RunArgv(s.steps[0]), (std::vector<std::string>{"/bin/sh", "-c", "echo hi && ls"}));
  EXPECT_EQ(s.steps[0].line, 2);
  EXPECT_TRUE(s.steps[1].exec_form);
  EXPECT_EQ(s.steps[1].args, (std::vector<std::string>{"/bin/ls", "-l", "a b"}));
  EXPECT_EQ(RunArgv(s.steps[1]), s.steps[1].args);
  // Not a JSON array of strings: a shell command, as Docker does.
  EXPECT_FALSE(s.steps[2].exec_form);
  EXPECT_EQ(s.steps[2].args[0], "[ -f /etc/passwd ] && echo yes");
  EXPECT_FALSE(s.steps[3].exec_form);
  // RUN is not expanded at parse time: the shell sees $HOME.
  s = MustParse("FROM a\nENV X=1\nRUN echo $X ${HOME}");
  EXPECT_EQ(s.steps[1].args[0], "echo $X ${HOME}");
  EXPECT_TRUE(s.warnings.empty());
}

TEST(SpecRunTest, Errors) {
  ExpectError("FROM a\nRUN", "line 2: ", "RUN needs");
  ExpectError("FROM a\nRUN []", "line 2: ", "exec form needs a program");
  ExpectError("FROM a\n\nRUN --mount=type=cache,target=/x make", "line 3: ", "RUN --mount");
  ExpectError("FROM a\nRUN --network=none true", "line 2: ", "not supported");
  ExpectError("FROM a\nRUN cat <<EOF\nhello\nEOF", "line 2: ", "heredoc");
  ExpectError("FROM a\nRUN <<-'EOT' sh\nx\nEOT", "line 2: ", "heredoc");
  ExpectError("FROM a\nCOPY <<EOF /x\nhi\nEOF", "line 2: ", "heredoc");
  // Shift operators and here-strings are not heredocs.
  MustParse("FROM a\nRUN echo $((1<<2)) && cat <<<\"s\"");
}

TEST(SpecLinesTest, ContinuationsCommentsBlankLinesAndCrlf) {
  Spec s = MustParse(
      "# syntax=docker/dockerfile:1\n"  // 1: directive
      "# a comment\n"                   // 2
      "\n"                              // 3
      "FROM base\r\n"                   // 4
      "RUN apt-get update && \\\n"      // 5
      "    apt-get install -y \\  \n"   // 6: blanks after the backslash
      "# comment inside\n"              // 7
      "    curl\n"                      // 8
      "   \t\n"                         // 9
      "  ENV A=1 \\\n"                  // 10
      "\n"                              // 11: empty continuation line (warned)
      "      B=2\n"                     // 12
      "WORKDIR /x\\\n");                // 13: trailing backslash at EOF
  ASSERT_EQ(s.steps.size(), 3u);
  EXPECT_EQ(s.steps[0].line, 5);
  EXPECT_EQ(s.steps[0].args[0], "apt-get update &&     apt-get install -y     curl");
  EXPECT_EQ(s.steps[0].text, "RUN " + s.steps[0].args[0]);
  EXPECT_EQ(s.steps[1].line, 10);
  EXPECT_EQ(s.steps[1].args, (std::vector<std::string>{"A=1", "B=2"}));
  EXPECT_EQ(s.steps[2].line, 13);
  EXPECT_EQ(s.steps[2].args[0], "/x");
  EXPECT_TRUE(HasWarning(s, "line 1: syntax directive ignored"));
  EXPECT_TRUE(HasWarning(s, "line 11: empty continuation line"));
}

TEST(SpecLinesTest, ErrorsNameTheRightLine) {
  ExpectError("FROM a\nRUN x \\\n  y\nBOGUS z", "line 4: ", "unknown instruction \"BOGUS\"");
  ExpectError("FROM a\n# c\n\nADD x /y", "line 4: ", "ADD is not supported");
  ExpectError("FROM a\nONBUILD RUN x", "line 2: ", "ONBUILD");
  ExpectError("FROM a\nSHELL [\"bash\"]", "line 2: ", "SHELL");
  ExpectError("FROM a\nENV A=\"unterminated", "line 2: ", "unterminated double quote");
  ExpectError("FROM a\nUSER 'x", "line 2: ", "unterminated single quote");
  ExpectError("FROM a\nRUN x\n\nRUN a\0b"sv, "line 4: ", "NUL");
  ExpectError("# escape=`\nFROM a", "line 1: ", "escape character");
  MustParse("# escape=\\\nFROM a");
  // A directive after the first comment is just a comment.
  MustParse("# hi\n# escape=`\nFROM a");
}

TEST(SpecIgnoredTest, WarnsWithLineNumbers) {
  Spec s = MustParse(
      "FROM a\n"
      "CMD [\"sh\"]\n"
      "ENTRYPOINT /x\n"
      "EXPOSE 80\n"
      "LABEL a=b\n"
      "RUN true\n");
  ASSERT_EQ(s.steps.size(), 1u);
  EXPECT_FALSE(HasWarning(s, "line 2: CMD"));
  EXPECT_EQ(s.start_cmd, (std::vector<std::string>{"sh"}));
  EXPECT_TRUE(HasWarning(s, "line 3: ENTRYPOINT is ignored"));
  EXPECT_TRUE(HasWarning(s, "line 4: EXPOSE is ignored"));
  EXPECT_TRUE(HasWarning(s, "line 5: LABEL a is ignored"));
  EXPECT_FALSE(s.allow_setuid.has_value());
}

TEST(SpecLabelTest, AllowSetuidIsSpacesOwnLabel) {
  Spec on = MustParse("FROM a\nLABEL maintainer=\"x y\" space.allow-setuid=true\n");
  ASSERT_TRUE(on.allow_setuid.has_value());
  EXPECT_TRUE(*on.allow_setuid);
  EXPECT_TRUE(HasWarning(on, "line 2: LABEL maintainer is ignored"));
  Spec off = MustParse("FROM a\nLABEL space.allow-setuid=true\nLABEL space.allow-setuid=false\n");
  ASSERT_TRUE(off.allow_setuid.has_value());
  EXPECT_FALSE(*off.allow_setuid);  // the last one wins
  ExpectError("FROM a\nLABEL space.allow-setuid=yes\n", "line 2: ", "must be true or false");
  ExpectError("FROM a\nLABEL space.allow-setuid\n", "line 2: ", "want key=value");
  ExpectError("FROM a\nLABEL =x\n", "line 2: ", "want key=value");
  ExpectError("FROM a\nLABEL space.privileged=true\n", "line 2: ", "unknown SPACE label");
  ExpectError("FROM a\nLABEL\n", "line 2: ", "needs an argument");
  ExpectError("LABEL space.allow-setuid=true\nFROM a\n", "line 1: ", "before FROM");
}

TEST(SpecStartTest, CmdAndHealthcheck) {
  Spec s = MustParse(
      "FROM a\n"
      "CMD first\n"
      "CMD server --port 1\n"
      "HEALTHCHECK --interval=1s --retries=3 CMD [\"ping\", \"-q\"]\n");
  EXPECT_EQ(s.start_cmd, (std::vector<std::string>{"/bin/sh", "-c", "server --port 1"}));
  EXPECT_EQ(s.ready_cmd, (std::vector<std::string>{"ping", "-q"}));
  EXPECT_TRUE(HasWarning(s, "line 4: HEALTHCHECK option --interval=1s ignored"));
  EXPECT_TRUE(s.steps.empty());
  Spec none = MustParse("FROM a\nHEALTHCHECK CMD x\nHEALTHCHECK none\n");
  EXPECT_TRUE(none.ready_cmd.empty());
  EXPECT_TRUE(none.start_cmd.empty());
  ExpectError("FROM a\nHEALTHCHECK --interval=1s", "line 2: ", "HEALTHCHECK wants CMD");
  ExpectError("FROM a\nHEALTHCHECK RUN x", "line 2: ", "HEALTHCHECK wants CMD");
  ExpectError("CMD x\nFROM a", "line 1: ", "before FROM");
}

TEST(SpecEnvTest, BothFormsQuotesAndOrder) {
  Spec s = MustParse(
      "FROM a\n"
      "ENV A=1 B=\"two words\" C='$A' D=$A E=a\\ b\n"
      "ENV MY_VAR my value  here\n"
      "ENV X=$A Y=${A}x A=2 Z=$A\n"
      "ENV Q \"quoted $A\"\n");
  ASSERT_EQ(s.steps.size(), 4u);
  EXPECT_EQ(s.steps[0].kind, StepKind::kEnv);
  // D sees the environment from before its line: A is not set yet.
  EXPECT_EQ(s.steps[0].args,
            (std::vector<std::string>{"A=1", "B=two words", "C=$A", "D=", "E=a b"}));
  EXPECT_TRUE(HasWarning(s, "line 2: variable A is not set"));
  EXPECT_EQ(s.steps[1].args, std::vector<std::string>{"MY_VAR=my value  here"});
  EXPECT_EQ(s.steps[2].args, (std::vector<std::string>{"X=1", "Y=1x", "A=2", "Z=1"}));
  EXPECT_EQ(s.steps[3].args, std::vector<std::string>{"Q=quoted 2"});
}

TEST(SpecEnvTest, BaseEnvAndErrors) {
  ParseOptions o;
  o.base_env = {{"PATH", "/usr/bin:/bin"}};
  Spec s = MustParse("FROM a\nENV PATH=$PATH:/opt/bin", o);
  EXPECT_EQ(s.steps[0].args[0], "PATH=/usr/bin:/bin:/opt/bin");
  EXPECT_TRUE(s.warnings.empty());
  ExpectError("FROM a\nENV A", "line 2: ", "needs a value");
  ExpectError("FROM a\nENV 1A=2", "line 2: ", "bad ENV name");
  ExpectError("FROM a\nENV A=1 B", "line 2: ", "has no '='");
  ExpectError("FROM a\nENV =x", "line 2: ", "bad ENV name");
}

TEST(SpecExpandTest, Forms) {
  Spec s = MustParse(
      "FROM a\n"
      "ENV S=set E=\n"
      "ENV A=${S:-d} B=${U:-d} C=${E:-d} D=${E-d} F=${S:+alt} G=${U:+alt} H=\\$S I=\"\\$S\" "
      "J=${U:-${S}y} K=$ L=$5\n");
  ASSERT_EQ(s.steps.size(), 2u);
  EXPECT_EQ(s.steps[1].args, (std::vector<std::string>{"A=set", "B=d", "C=d", "D=", "F=alt", "G=",
                                                       "H=$S", "I=$S", "J=sety", "K=$", "L=$5"}));
  ExpectError("FROM a\nENV A=${U:?must be set}", "line 2: ", "variable U is not set: must be set");
  ExpectError("FROM a\nENV A=${U#x}", "line 2: ", "unsupported variable expansion");
  ExpectError("FROM a\nENV A=${U", "line 2: ", "missing");
  ExpectError("FROM a\nENV A=${}", "line 2: ", "bad variable name");
}

TEST(SpecWorkdirUserTest, Resolution) {
  Spec s = MustParse(
      "FROM a\nWORKDIR /app\nWORKDIR sub\nWORKDIR ../x/./y//\nENV D=/data\nWORKDIR $D/z\n"
      "USER 1000:1000\nUSER app\n");
  ASSERT_EQ(s.steps.size(), 7u);
  EXPECT_EQ(s.steps[0].args[0], "/app");
  EXPECT_EQ(s.steps[1].args[0], "/app/sub");
  EXPECT_EQ(s.steps[2].args[0], "/app/x/y");
  EXPECT_EQ(s.steps[4].args[0], "/data/z");
  EXPECT_EQ(s.steps[5].kind, StepKind::kUser);
  EXPECT_EQ(s.steps[5].args[0], "1000:1000");
  EXPECT_EQ(s.steps[6].args[0], "app");
  ParseOptions o;
  o.base_workdir = "/srv";
  s = MustParse("FROM a\nWORKDIR w\nCOPY f .", o);
  EXPECT_EQ(s.steps[0].args[0], "/srv/w");
  EXPECT_EQ(s.steps[1].args, (std::vector<std::string>{"f", "/srv/w/"}));
  ExpectError("FROM a\nUSER a b", "line 2: ", "USER wants");
  ExpectError("FROM a\nUSER a:", "line 2: ", "USER wants");
  ExpectError("FROM a\nWORKDIR \"\"", "line 2: ", "empty path");
}

TEST(SpecCopyTest, Forms) {
  Spec s = MustParse(
      "FROM a\n"
      "COPY a.txt /dst/\n"
      "WORKDIR /app\n"
      "COPY --chown=1000:1000 --chmod=0755 src dir/\n"
      "COPY [\"a b\", \"./c/\", \"/x/\"]\n"
      "COPY /abs/path rel\n"
      "COPY . .\n"
      "COPY \"q r\" 's t' /m/\n");
  ASSERT_EQ(s.steps.size(), 7u);
  EXPECT_EQ(s.steps[0].kind, StepKind::kCopy);
  EXPECT_EQ(s.steps[0].args, (std::vector<std::string>{"a.txt", "/dst/"}));
  EXPECT_EQ(s.steps[2].args, (std::vector<std::string>{"src", "/app/dir/"}));
  EXPECT_EQ(s.steps[2].chown, "1000:1000");
  EXPECT_EQ(s.steps[2].chmod, "0755");
  EXPECT_EQ(s.steps[3].args, (std::vector<std::string>{"a b", "c", "/x/"}));
  EXPECT_EQ(s.steps[4].args, (std::vector<std::string>{"abs/path", "/app/rel"}));
  EXPECT_EQ(s.steps[5].args, (std::vector<std::string>{".", "/app/"}));
  EXPECT_EQ(s.steps[6].args, (std::vector<std::string>{"q r", "s t", "/m/"}));
}

TEST(SpecCopyTest, Errors) {
  ExpectError("FROM a\nCOPY a b /x", "line 2: ", "ending in '/'");
  ExpectError("FROM a\nCOPY ../etc/passwd /x", "line 2: ", "leaves the build context");
  ExpectError("FROM a\nCOPY a/../../b /x", "line 2: ", "leaves the build context");
  ExpectError("FROM a\nCOPY ../*.py /x/", "line 2: ", "leaves the build context");
  ExpectError("FROM a\nCOPY src/*/../../x /x/", "line 2: ", "leaves the build context");
  ExpectError("FROM a\nCOPY [a-z.py /x/", "line 2: ", "'[' without a closing ']'");
  ExpectError("FROM a\nCOPY \"a[b/c]\" /x/", "line 2: ", "bad wildcard");
  ExpectError("FROM a\nCOPY [\"a*\\\\\", \"/x/\"]", "line 2: ", "trailing");
  ExpectError("FROM a\nCOPY --chmod=9 *.py /x/", "line 2: ", "--chmod wants");
  ExpectError("FROM a\nCOPY --from=builder /a /b", "line 2: ", "COPY --from");
  ExpectError("FROM a\nCOPY --link a /b", "line 2: ", "needs =value");
  ExpectError("FROM a\nCOPY --chown=\"a b\" x /y", "line 2: ", "--chown wants");
  ExpectError("FROM a\nCOPY --chmod=u+x x /y", "line 2: ", "--chmod wants");
  ExpectError("FROM a\nCOPY a", "line 2: ", "source and a destination");
  ExpectError("FROM a\nCOPY --chown=1:1", "line 2: ", "source and a destination");
  ExpectError("FROM a\nCOPY \"\" /x", "line 2: ", "source is empty");
}

// Wildcard sources parse into patterns (normalized like any source), expanded at build time.
TEST(SpecCopyTest, WildcardSources) {
  Spec s = MustParse(
      "FROM a\n"
      "WORKDIR /app\n"
      "COPY folder/* folder\n"  // one source: a destination without '/' is allowed here
      "COPY --chmod=0755 ./bin/?? /usr/local/bin/\n"
      "COPY [\"/src/[a-c]*.py\", \"lib/[!_]*\", \"py/\"]\n"
      "ARG EXT=txt\n"
      "COPY *.${EXT} docs/\n");
  ASSERT_EQ(s.steps.size(), 5u);
  EXPECT_EQ(s.steps[1].args, (std::vector<std::string>{"folder/*", "/app/folder"}));
  EXPECT_EQ(s.steps[2].args, (std::vector<std::string>{"bin/??", "/usr/local/bin/"}));
  EXPECT_EQ(s.steps[2].chmod, "0755");
  EXPECT_EQ(s.steps[3].args, (std::vector<std::string>{"src/[a-c]*.py", "lib/[!_]*", "/app/py/"}));
  EXPECT_EQ(s.steps[4].args, (std::vector<std::string>{"*.txt", "/app/docs/"}));
  // Several sources, wildcards or not, still need a directory.
  ExpectError("FROM a\nCOPY *.py *.txt /x", "line 2: ", "ending in '/'");
}

// The pattern keys the cache like any argument: another pattern is another step.
TEST(SpecCopyTest, WildcardIsPartOfTheCacheKey) {
  Spec s = MustParse("FROM a\nCOPY dir/* /d/\nCOPY dir/? /d/\n");
  ASSERT_EQ(s.steps.size(), 2u);
  EXPECT_NE(StepCacheKey("sha256:b", s.steps[0], "sha256:c"),
            StepCacheKey("sha256:b", s.steps[1], "sha256:c"));
}

TEST(CopyPatternTest, MatchesPerSegmentInWalkOrder) {
  const std::map<std::string, std::string> ctx = {
      {"folder/a.txt", "a"},     {"folder/b.py", "b"},       {"folder/.hidden", "h"},
      {"folder/sub/x", "x"},     {"folder/sub/deep/y", "y"}, {"folder.b/z", "z"},
      {"other/a.txt", "o"},      {"top.txt", "t"},           {"[lit]", "l"}};
  using V = std::vector<std::string>;
  EXPECT_TRUE(IsCopyPattern("a*"));
  EXPECT_TRUE(IsCopyPattern("a?"));
  EXPECT_TRUE(IsCopyPattern("[ab]"));
  EXPECT_FALSE(IsCopyPattern("folder/a.txt"));
  // '*' matches dotfiles and directories (here sub), never across '/'.
  EXPECT_EQ(MatchCopyPattern("folder/*", ctx), (V{"folder/.hidden", "folder/a.txt",
                                                   "folder/b.py", "folder/sub"}));
  EXPECT_EQ(MatchCopyPattern("*", ctx), (V{"[lit]", "folder", "folder.b", "other", "top.txt"}));
  // Directory by directory: "folder/..." before "folder.b/...".
  EXPECT_EQ(MatchCopyPattern("*/a.txt", ctx), (V{"folder/a.txt", "other/a.txt"}));
  EXPECT_EQ(MatchCopyPattern("folder*/*", ctx).front(), "folder/.hidden");
  EXPECT_EQ(MatchCopyPattern("folder*/*", ctx).back(), "folder.b/z");
  EXPECT_EQ(MatchCopyPattern("folder/?.*", ctx), (V{"folder/a.txt", "folder/b.py"}));
  EXPECT_EQ(MatchCopyPattern("folder/[!a]*", ctx), (V{"folder/.hidden", "folder/b.py",
                                                       "folder/sub"}));
  EXPECT_EQ(MatchCopyPattern("folder/*/*", ctx), (V{"folder/sub/deep", "folder/sub/x"}));
  EXPECT_EQ(MatchCopyPattern("./folder//sub/*/y", ctx), (V{"folder/sub/deep/y"}));
  EXPECT_EQ(MatchCopyPattern("\\[lit]", ctx), (V{"[lit]"}));  // escaped: a literal '['
  EXPECT_TRUE(MatchCopyPattern("*.none", ctx).empty());
  EXPECT_TRUE(MatchCopyPattern("folder/sub/deep/y/*", ctx).empty());  // below a file
  EXPECT_TRUE(MatchCopyPattern("fold?r/a.txt/*", ctx).empty());
}

TEST(SpecArgTest, SubstitutionScopesAndBuildArgs) {
  Spec s = MustParse(
      "ARG V=3.11\n"
      "FROM py:${V}\n"
      "WORKDIR /$V\n"  // the pre-FROM ARG is out of scope after FROM
      "ARG V\n"        // re-declared: inherits 3.11
      "ARG DIR=/opt/app MODE\n"
      "WORKDIR $DIR/$V\n"
      "RUN make\n"
      "COPY --chown=${USERNAME:-root} x $DIR/\n");
  EXPECT_EQ(s.from.tag, "3.11");
  ASSERT_EQ(s.steps.size(), 4u);
  EXPECT_EQ(s.steps[0].args[0], "/");
  EXPECT_TRUE(HasWarning(s, "line 3: variable V is not set"));
  EXPECT_EQ(s.steps[1].args[0], "/opt/app/3.11");
  EXPECT_EQ(s.steps[2].run_env, (std::vector<std::string>{"DIR=/opt/app", "V=3.11"}));
  EXPECT_EQ(s.steps[3].chown, "root");
  EXPECT_EQ(s.steps[3].args.back(), "/opt/app/");

  ParseOptions o;
  o.build_args = {{"V", "3.12"}, {"DIR", "/srv"}, {"UNUSED", "x"}};
  s = MustParse("ARG V=3.11\nFROM py:$V\nARG DIR=/opt\nRUN x\n", o);
  EXPECT_EQ(s.from.tag, "3.12");
  EXPECT_EQ(s.steps[0].run_env, std::vector<std::string>{"DIR=/srv"});
  EXPECT_TRUE(HasWarning(s, "build argument UNUSED is not declared"));
  // ENV wins over ARG of the same name.
  s = MustParse("FROM a\nARG X=arg\nENV X=env\nWORKDIR /$X");
  EXPECT_EQ(s.steps[1].args[0], "/env");
  ExpectError("FROM a\nARG", "line 2: ", "ARG needs");
  ExpectError("FROM a\nARG 9x=1", "line 2: ", "bad ARG name");
}

TEST(SpecLimitsTest, SizeAndInstructionCount) {
  std::string big = "FROM a\n# " + std::string(kMaxSpecBytes, 'x');
  ExpectError(big, "spec is ", "limit", Errc::kTooLarge);
  std::string ok = "FROM a\n";
  for (int i = 1; i < kMaxInstructions; ++i) ok += "RUN true\n";
  Spec s = MustParse(ok);
  EXPECT_EQ(s.steps.size(), static_cast<size_t>(kMaxInstructions - 1));
  ExpectError(ok + "RUN one-too-many\n", "line 1001: ", "more than 1000 instructions",
              Errc::kTooLarge);
}

TEST(StepCacheKeyTest, StableAndSensitiveToWhatMatters) {
  Spec s = MustParse(
      "FROM a\nARG V=1\nRUN make\nCOPY src /app/\nENV A=1\nWORKDIR /w\nUSER u\n"
      "RUN [\"make\"]\n");
  ASSERT_EQ(s.steps.size(), 6u);
  const std::string base = "sha256:" + std::string(64, '0');
  const Step& run = s.steps[0];
  std::string k = StepCacheKey(base, run, "");
  // Pinned (cross-checked with an independent Python implementation of the encoding):
  // layers stored by one release must be found by the next.
  EXPECT_EQ(k, "sha256:fd2d70c10e4626577810d1b0aec303210562e1f80dd0903927f650e161d20e13");
  EXPECT_EQ(k, StepCacheKey(base, run, "sha256:ignored-for-run"));
  Step moved = run;
  moved.line = 99;
  moved.text = "run   make";
  EXPECT_EQ(k, StepCacheKey(base, moved, ""));
  EXPECT_NE(k, StepCacheKey("sha256:other", run, ""));
  Step env_changed = run;
  env_changed.run_env = {"V=2"};
  EXPECT_NE(k, StepCacheKey(base, env_changed, ""));
  // Exec and shell form of the same words differ.
  Step exec = s.steps[5];
  Step shell = exec;
  shell.exec_form = false;
  EXPECT_NE(StepCacheKey(base, exec, ""), StepCacheKey(base, shell, ""));
  // COPY depends on the content digest and on --chown.
  const Step& copy = s.steps[1];
  EXPECT_NE(StepCacheKey(base, copy, "sha256:1"), StepCacheKey(base, copy, "sha256:2"));
  Step chowned = copy;
  chowned.chown = "1:1";
  EXPECT_NE(StepCacheKey(base, copy, "sha256:1"), StepCacheKey(base, chowned, "sha256:1"));
  // Config steps are keyed too, and chain: every later key changes with them.
  std::string chain1 = base, chain2 = base;
  for (size_t i = 2; i < s.steps.size(); ++i) chain1 = StepCacheKey(chain1, s.steps[i], "");
  Spec s2 = MustParse(
      "FROM a\nARG V=1\nRUN make\nCOPY src /app/\nENV A=2\nWORKDIR /w\nUSER u\n"
      "RUN [\"make\"]\n");
  for (size_t i = 2; i < s2.steps.size(); ++i) chain2 = StepCacheKey(chain2, s2.steps[i], "");
  EXPECT_NE(chain1, chain2);
  // Length-prefixed fields: moving a boundary between args changes the key.
  Step a = run, b = run;
  a.args = {"ab", "c"};
  b.args = {"a", "bc"};
  EXPECT_NE(StepCacheKey(base, a, ""), StepCacheKey(base, b, ""));
}

// Replays every spec in this file's tests plus seeded random mutations through the fuzz entry
// point, which aborts on any broken parser invariant.
TEST(SpecFuzzTest, EntryPointHoldsInvariants) {
  std::vector<std::string> corpus = {
      "FROM base\nRUN echo hi\n",
      "ARG V=1\nFROM py:$V\nARG V\nENV A=1 B=\"x y\"\nWORKDIR /a\nUSER 1:1\n"
      "COPY --chown=1:1 [\"a\", \"/b/\"]\nRUN [\"ls\"]\nCMD x\n",
      "FROM a\nRUN a \\\n  b \\\n# c\n\n  d\nENV X ${Y:-z}\nCOPY . .\n",
      "FROM scratch\nLABEL a=b\nEXPOSE 1\nWORKDIR ../..\n",
      "FROM a\nENV A=${B:+${C:-'q'}}\"\\$\"\n",
  };
  for (const auto& c : corpus) {
    FuzzParseSpec(reinterpret_cast<const uint8_t*>(c.data()), c.size());
  }
  std::mt19937 rng(12345);
  const std::string alphabet = "FROMRUNCOPYENVWORKDIRUSERARG \t\n\\\"'$[]{}:-+?=/.#<>*a1\r";
  for (int i = 0; i < 20000; ++i) {
    std::string s = corpus[rng() % corpus.size()];
    int edits = 1 + static_cast<int>(rng() % 8);
    for (int e = 0; e < edits && !s.empty(); ++e) {
      size_t pos = rng() % s.size();
      switch (rng() % 3) {
        case 0:
          s[pos] = alphabet[rng() % alphabet.size()];
          break;
        case 1:
          s.insert(pos, 1, alphabet[rng() % alphabet.size()]);
          break;
        default:
          s.erase(pos, 1);
          break;
      }
    }
    FuzzParseSpec(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  }
}

}  // namespace
}  // namespace space::tmpl
