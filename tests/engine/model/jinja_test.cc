// The Jinja renderer against jinja2 itself: tests/fixtures/golden/jinja/cases.json
// holds small templates over every construct, rendered by transformers' chat
// template environment (tests/fixtures/make_chat_template_goldens.py). Also
// the refusals at parse time and the marking of untrusted text.
#include <fstream>
#include <string>

#include "engine/model/jinja/template.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/paths.h"

namespace vismoe::jinja {
namespace {

using ::testing::HasSubstr;

Value FromJson(const nlohmann::ordered_json& j) {
  if (j.is_null()) return Value::None();
  if (j.is_boolean()) return Value::Bool(j.get<bool>());
  if (j.is_number_integer()) return Value::Int(j.get<int64_t>());
  if (j.is_number()) return Value::Float(j.get<double>());
  if (j.is_string()) return Value::String(j.get<std::string>());
  if (j.is_array()) {
    List items;
    for (const auto& x : j) items.push_back(FromJson(x));
    return Value::MakeList(std::move(items));
  }
  Dict d;
  for (auto it = j.begin(); it != j.end(); ++it) d.emplace_back(it.key(), FromJson(it.value()));
  return Value::MakeDict(std::move(d));
}

TEST(JinjaTest, RendersAsJinja2Does) {
  // Ordered: dict order is visible in the output, as in Python.
  std::ifstream in(testing::FixturesDir() + "/golden/jinja/cases.json");
  const auto cases = nlohmann::ordered_json::parse(in, nullptr, false);
  ASSERT_TRUE(cases.is_array());
  ASSERT_GE(cases.size(), 30u);
  int errors = 0;
  for (const auto& c : cases) {
    SCOPED_TRACE(c["name"].get<std::string>());
    auto t = Template::Parse(c["template"].get<std::string>());
    ASSERT_TRUE(t.ok()) << t.status();
    auto out = t->Render(FromJson(c["context"]));
    if (c.contains("error")) {
      ++errors;
      EXPECT_FALSE(out.ok()) << "rendered " << out->text;
      continue;
    }
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(out->text, c["output"].get<std::string>());
  }
  EXPECT_GE(errors, 3);  // raise_exception, undefined.attr, str + int
}

TEST(JinjaTest, RaiseExceptionCarriesTheTemplatesMessage) {
  auto t = Template::Parse("line one\n{{ raise_exception('roles must alternate') }}");
  ASSERT_TRUE(t.ok()) << t.status();
  auto out = t->Render(Value::MakeDict());
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(std::string(out.status().message()), HasSubstr("line 2"));
  EXPECT_THAT(std::string(out.status().message()), HasSubstr("roles must alternate"));
}

TEST(JinjaTest, UnsupportedConstructsFailAtParseNamingThem) {
  const std::pair<const char*, const char*> bad[] = {
      {"{% include 'other.jinja' %}", "unsupported tag 'include'"},
      {"{% raw %}x{% endraw %}", "unsupported tag 'raw'"},
      {"{{ x | frobnicate }}", "unsupported filter 'frobnicate'"},
      {"{% if x is frob %}{% endif %}", "unsupported test 'frob'"},
      {"{% for x in xs recursive %}{% endfor %}", "recursive"},
      {"{% if x %}never closed", "missing {% endif %}"},
      {"{{ 'unterminated }}", "unterminated"},
      {"{{ x ", "unterminated tag"},
      {"{# open comment", "unterminated comment"},
      {"{{ 1 < 2 < 3 }}", "chained comparisons"},
      {"{{ a ? b }}", "unexpected character '?'"},
  };
  for (const auto& [source, why] : bad) {
    SCOPED_TRACE(source);
    auto t = Template::Parse(source);
    ASSERT_FALSE(t.ok());
    EXPECT_THAT(std::string(t.status().message()), HasSubstr(why));
    EXPECT_THAT(std::string(t.status().message()), HasSubstr("chat template line 1"));
  }
}

TEST(JinjaTest, UntrustedTextStaysMarkedThroughConcatenationAndOutput) {
  auto t = Template::Parse("<a>{{ '[' + m + ']' }}{{ m | upper }}{% for c in m %}{% endfor %}<b>");
  ASSERT_TRUE(t.ok()) << t.status();
  auto out = t->Render(Value::MakeDict({{"m", Value::String(Str::Untrusted("xy"))}}));
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->text, "<a>[xy]XY<b>");
  // "<a>[" and "]" are the template's; "xy" and its upper-cased copy are not.
  const std::vector<std::pair<size_t, size_t>> want = {{4, 6}, {7, 9}};
  EXPECT_EQ(out->untrusted, want);
}

TEST(JinjaTest, RunawayTemplatesAreBounded) {
  auto deep = Template::Parse("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
  ASSERT_TRUE(deep.ok());
  auto out = deep->Render(Value::MakeDict());
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(std::string(out.status().message()), HasSubstr("nest too deep"));
  auto huge = Template::Parse("{{ 'x' * 100000000 }}{{ range(100000000) | length }}");
  ASSERT_TRUE(huge.ok());
  EXPECT_FALSE(huge->Render(Value::MakeDict()).ok());
  auto loops = Template::Parse(
      "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}");
  ASSERT_TRUE(loops.ok());
  out = loops->Render(Value::MakeDict());
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(std::string(out.status().message()), HasSubstr("runs too long"));
  // Nesting that would exhaust the stack is refused at parse time.
  EXPECT_THAT(std::string(Template::Parse("{{ " + std::string(5000, '(') + "1" +
                                          std::string(5000, ')') + " }}")
                              .status()
                              .message()),
              HasSubstr("nest too deep"));
  EXPECT_FALSE(Template::Parse("{{ " + std::string(5000, '-') + "1 }}").ok());
  std::string blocks;
  for (int i = 0; i < 500; ++i) blocks += "{% if x %}";
  EXPECT_THAT(std::string(Template::Parse(blocks).status().message()), HasSubstr("nest too deep"));
}

TEST(JinjaTest, FloatsPrintAsPython) {
  const std::pair<double, const char*> cases[] = {
      {1.0, "1.0"},     {0.1, "0.1"},    {1e16, "1e+16"}, {1e15, "1000000000000000.0"},
      {1e-4, "0.0001"}, {1e-5, "1e-05"}, {-2.5, "-2.5"},  {123456.789, "123456.789"}};
  for (const auto& [f, want] : cases) EXPECT_EQ(FloatRepr(f), want) << f;
}

}  // namespace
}  // namespace vismoe::jinja
