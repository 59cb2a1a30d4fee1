// See html.h.
#include "report/html.h"

#include <cctype>

#include <fmt/format.h>

namespace motley::report {

std::string Escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string Colour(int k) {
  static const char* kPalette[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                                   "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};
  return kPalette[((k % 10) + 10) % 10];
}

std::string Table(const std::vector<std::string>& header,
                  const std::vector<std::vector<std::string>>& rows) {
  std::string h = "<table><tr>";
  for (const std::string& c : header) h += "<th>" + c + "</th>";
  h += "</tr>";
  for (const auto& row : rows) {
    h += "<tr>";
    for (const std::string& c : row) {
      // Numbers (and "1.97x", "12.3 ms") align right, text left.
      const bool number = !c.empty() && (std::isdigit(static_cast<unsigned char>(c[0])) != 0 ||
                                         ((c[0] == '-' || c[0] == '+') && c.size() > 1 &&
                                          std::isdigit(static_cast<unsigned char>(c[1])) != 0));
      h += (number ? "<td class=\"n\">" : "<td>") + c + "</td>";
    }
    h += "</tr>";
  }
  return h + "</table>";
}

std::string Page(std::string_view title, std::string_view body) {
  std::string h =
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
      "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">";
  h += fmt::format("<title>{}</title><style>", Escape(title));
  h += "body{font-family:sans-serif;margin:1.5em 2em;color:#222;max-width:1100px}"
       "h1{font-size:1.5em}h2{font-size:1.2em;margin-top:1.6em;border-bottom:1px solid #ddd}"
       "h3{font-size:1em}table{border-collapse:collapse;margin:.5em 0}"
       "td,th{border:1px solid #ccc;padding:3px 8px;text-align:left;font-size:.9em}"
       "td.n{text-align:right}th{background:#eee}"
       "figure{margin:1em 0}figcaption{font-weight:bold;margin-bottom:.3em}"
       "svg.chart{font-family:sans-serif;font-size:11px;background:#fff}"
       ".note{color:#555;font-size:.9em}.legend span{margin-right:1.2em}"
       "</style></head><body>\n";
  h += fmt::format("<h1>{}</h1>\n", Escape(title));
  h += body;
  h += "\n<p class=\"note\">Written by motley. Self-contained: inline SVG, no scripts, no network."
       "</p></body></html>\n";
  return h;
}

}  // namespace motley::report
