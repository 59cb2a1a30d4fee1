// The page frame of motley's HTML reports: escaping, the palette, tables, and one self-contained
// page (inline CSS, inline SVG; no scripts and no external resources, so a report opens from disk
// with no network). Pure functions; thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace motley::report {

// Escapes &, <, >, " and ' for text and attribute values.
std::string Escape(std::string_view s);
// The k-th colour of the report palette (Tableau 10; cycles).
std::string Colour(int k);
// A table; cells are HTML (escape text first). The first column is left-aligned.
std::string Table(const std::vector<std::string>& header,
                  const std::vector<std::vector<std::string>>& rows);
// <!DOCTYPE html> ... with `title` in <title> and <h1>, then `body` (HTML).
std::string Page(std::string_view title, std::string_view body);

}  // namespace motley::report
