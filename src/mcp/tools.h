// mcp/tools: the sandbox tools and the checker of their arguments (mcp/ only).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cli/client.h"
#include "common/common.h"
#include "common/json.h"

namespace space::mcp::internal {

struct Tool {
  std::string name;
  std::string title;
  std::string description;
  Json input_schema;  // JSON Schema (the subset CheckArguments knows)
  // Runs the tool with checked arguments; the Json is what the result's text carries.
  std::function<Result<Json>(const Json& args, client::Client& api)> run;
};

const std::vector<Tool>& Tools();
const Tool* FindTool(std::string_view name);

// Why `value` does not fit `schema` ("timeout: must be an integer"), or nullopt when it does.
// Knows type (string, integer, number, boolean, object, array, or a list of them), enum,
// minimum, maximum, minLength, properties, required, additionalProperties (false or a
// schema) and items.
std::optional<std::string> CheckArguments(const Json& schema, const Json& value,
                                          const std::string& where = "");

}  // namespace space::mcp::internal
