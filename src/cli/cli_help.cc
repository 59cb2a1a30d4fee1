// See cli_help.h.
#include "cli/cli_help.h"

#include <cstdlib>
#include <sstream>

#include <fmt/core.h>

namespace motley::cli {
namespace {

// Help lines: "--steps N" rather than "--steps INT:POSITIVE". The type name set by the command
// (type_name("N")) is kept; what the parser appends after ':' (validator names) is dropped.
class MotleyFormatter : public CLI::Formatter {
 public:
  std::string make_option_opts(const CLI::Option* opt) const override {
    std::stringstream out;
    if (opt->get_type_size() != 0) {
      std::string type = opt->get_type_name();
      const size_t colon = type.find(':');
      if (colon != std::string::npos) type.resize(colon);
      if (!type.empty()) out << " " << type;
      if (!opt->get_default_str().empty()) out << " (default " << opt->get_default_str() << ")";
      if (opt->get_required()) out << " (required)";
    }
    return out.str();
  }
};

}  // namespace

std::shared_ptr<CLI::Formatter> MakeFormatter() {
  auto f = std::make_shared<MotleyFormatter>();
  f->column_width(30);
  return f;
}

std::string FailureMessage(const CLI::App* app, const CLI::Error& error) {
  std::string command = "motley";
  for (const CLI::App* sub = app; sub != nullptr;) {
    const auto chosen = sub->get_subcommands();
    if (chosen.empty()) break;
    sub = chosen.front();
    command += " " + sub->get_name();
  }
  return fmt::format("{}: {}\nRun '{} --help' for its options and an example.\n", command,
                     error.what(), command);
}

void SetExamples(CLI::App* cmd, const std::vector<std::string>& examples) {
  std::string text = "\nExamples:";
  for (const std::string& e : examples) text += "\n  " + e;
  cmd->footer(text);
}

CLI::Validator OneOf(std::vector<std::string> names) {
  return CLI::Validator(
      [names](std::string& text) -> std::string {
        for (const std::string& n : names) {
          if (text == n) return "";
        }
        std::string list;
        for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
        return fmt::format("'{}' is not one of {}", text, list);
      },
      "");
}

}  // namespace motley::cli
