// The web console's sessions and the small parsers its login uses.
#include "api/console_sessions.h"

#include <gtest/gtest.h>

namespace space::api {
namespace {

TEST(ConsoleSessionsTest, CreateFindRemove) {
  ConsoleSessions s(/*idle_s=*/100, /*max_age_s=*/1000);
  ConsoleSession a = s.Create("sk-a", "admin", 10).value();
  EXPECT_EQ(a.id.size(), 64u);
  EXPECT_EQ(a.csrf.size(), 64u);
  EXPECT_NE(a.id, a.csrf);
  ConsoleSession b = s.Create("sk-b", "other", 10).value();
  EXPECT_NE(a.id, b.id);
  auto found = s.Find(a.id, 50);
  ASSERT_TRUE(found);
  EXPECT_EQ(found->key_hash, "sk-a");
  EXPECT_EQ(found->key_name, "admin");
  EXPECT_EQ(found->csrf, a.csrf);
  EXPECT_FALSE(s.Find("nope", 50));
  EXPECT_FALSE(s.Find(a.id.substr(1), 50));
  s.Remove(a.id);
  EXPECT_FALSE(s.Find(a.id, 50));
  EXPECT_TRUE(s.Find(b.id, 50));
}

TEST(ConsoleSessionsTest, IdleAndMaxAgeEndSessions) {
  ConsoleSessions s(/*idle_s=*/100, /*max_age_s=*/250);
  ConsoleSession a = s.Create("sk-a", "admin", 0).value();
  // Each use keeps it alive for another idle period...
  EXPECT_TRUE(s.Find(a.id, 90));
  EXPECT_TRUE(s.Find(a.id, 180));
  // ...but never past its maximum age.
  EXPECT_FALSE(s.Find(a.id, 250));
  ConsoleSession b = s.Create("sk-b", "admin", 0).value();
  EXPECT_FALSE(s.Find(b.id, 100));  // idle for the whole period
}

TEST(ConsoleSessionsTest, BoundedDropsLeastRecentlyUsed) {
  ConsoleSessions s(1000, 10000, /*max_sessions=*/2);
  ConsoleSession a = s.Create("k", "n", 1).value();
  ConsoleSession b = s.Create("k", "n", 2).value();
  EXPECT_TRUE(s.Find(a.id, 3));  // a is now the more recent
  ConsoleSession c = s.Create("k", "n", 4).value();
  EXPECT_EQ(s.size(), 2u);
  EXPECT_TRUE(s.Find(a.id, 5));
  EXPECT_FALSE(s.Find(b.id, 5));
  EXPECT_TRUE(s.Find(c.id, 5));
}

TEST(ConsoleSessionsTest, Cookies) {
  EXPECT_EQ(CookieValue("space_session=abc", "space_session"), "abc");
  EXPECT_EQ(CookieValue("a=1; space_session=abc; b=2", "space_session"), "abc");
  EXPECT_EQ(CookieValue("a=1;space_session=\"abc\"", "space_session"), "abc");
  EXPECT_FALSE(CookieValue("xspace_session=abc", "space_session"));
  EXPECT_FALSE(CookieValue("", "space_session"));
  EXPECT_EQ(CookieValue("space_session=", "space_session"), "");
}

TEST(ConsoleSessionsTest, FormValues) {
  EXPECT_EQ(FormValue("api-key=sk-123", "api-key"), "sk-123");
  EXPECT_EQ(FormValue("x=1&api-key=a%2Bb+c&y=2", "api-key"), "a+b c");
  EXPECT_EQ(FormValue("api-key=", "api-key"), "");
  EXPECT_EQ(FormValue("api-key=%zz%4", "api-key"), "%zz%4");  // bad escapes stay as they are
  EXPECT_FALSE(FormValue("apikey=1", "api-key"));
  EXPECT_FALSE(FormValue("", "api-key"));
}

TEST(ConsoleSessionsTest, SameOrigin) {
  EXPECT_TRUE(SameOrigin("http://127.0.0.1:7070", "127.0.0.1:7070"));
  EXPECT_TRUE(SameOrigin("https://Console.Example:443", "console.example:443"));
  EXPECT_FALSE(SameOrigin("http://127.0.0.1:7071", "127.0.0.1:7070"));
  EXPECT_FALSE(SameOrigin("http://evil.test", "127.0.0.1:7070"));
  EXPECT_FALSE(SameOrigin("", "127.0.0.1:7070"));
  EXPECT_FALSE(SameOrigin("null", "127.0.0.1:7070"));
  EXPECT_FALSE(SameOrigin("http://127.0.0.1:7070", ""));
}

}  // namespace
}  // namespace space::api
