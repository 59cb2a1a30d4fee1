// See report_html.h.
#include "plan/report_html.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>

namespace motley::plan {
namespace {

std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string Colour(int k) {
  static const char* kPalette[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                                   "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};
  return kPalette[k % 10];
}

}  // namespace

std::string ReportHtml(const perf::Predictor& predictor, const PlanReport& report,
                       const sim::SimResult& trace) {
  const spec::ClusterSpec& cluster = predictor.cluster();
  const spec::Plan& plan = report.best.plan;
  const perf::Prediction& pred = report.best.prediction;
  std::string h;
  h += "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>motley plan</title><style>"
       "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
       "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}th{background:#eee}"
       "</style></head><body>";
  h += fmt::format("<h1>motley plan: {} on {}</h1><p>{}</p>", Escape(predictor.model().name),
                   Escape(cluster.name), Escape(plan.comment));
  h += "<h2>Summary</h2><table><tr><th>metric</th><th>value</th></tr>";
  h += fmt::format("<tr><td>tokens/s</td><td>{:.1f}</td></tr>", pred.tokens_per_s);
  h += fmt::format("<tr><td>MFU</td><td>{:.1f}%</td></tr>", 100 * pred.mfu);
  h += fmt::format("<tr><td>iteration (predicted)</td><td>{:.4f} s</td></tr>", pred.iteration_s);
  h += fmt::format("<tr><td>iteration (simulated)</td><td>{:.4f} s</td></tr>", trace.iteration_s);
  for (size_t t = 0; t < cluster.device_types.size(); ++t) {
    if (pred.peak_memory_per_type[t] <= 0) continue;
    h += fmt::format("<tr><td>memory per {} device</td><td>{:.2f} / {:.2f} GiB</td></tr>",
                     Escape(cluster.device_types[t].name), pred.peak_memory_per_type[t] / kGiB,
                     cluster.device_types[t].memory_bytes / kGiB);
  }
  const double tps = report.best.TokensPerSecond(report.tokens_per_step);
  if (report.compute_bound_tokens_per_s > 0) {
    h += fmt::format("<tr><td>ratio to the compute bound</td><td>{:.4f}</td></tr>",
                     tps / report.compute_bound_tokens_per_s);
  }
  if (report.hethub_sum_tokens_per_s > 0) {
    h += fmt::format("<tr><td>HETHUB ratio</td><td>{:.4f}</td></tr>", tps / report.hethub_sum_tokens_per_s);
  }
  if (report.exhaustive_tokens_per_s > 0) {
    h += fmt::format("<tr><td>ratio to the exhaustive optimum (predicted)</td><td>{:.4f}</td></tr>",
                     report.ranked.front().prediction.tokens_per_s / report.exhaustive_tokens_per_s);
  }
  for (const Baseline& b : report.baselines) {
    h += b.found ? fmt::format("<tr><td>speedup over {}</td><td>{:.3f}x</td></tr>", Escape(b.name),
                               tps / b.candidate.TokensPerSecond(report.tokens_per_step))
                 : fmt::format("<tr><td>{}</td><td>none</td></tr>", Escape(b.name));
  }
  h += "</table>";
  // Device map: one square per device, nodes as rows.
  std::map<int, std::pair<int, int>> where;  // device -> (pipeline, stage)
  for (size_t k = 0; k < plan.pipelines.size(); ++k) {
    for (size_t i = 0; i < plan.pipelines[k].stages.size(); ++i) {
      for (int d : plan.pipelines[k].stages[i].devices) where[d] = {static_cast<int>(k), static_cast<int>(i)};
    }
  }
  const int cell = 22;
  int max_per_node = 1;
  for (const spec::NodeSpec& n : cluster.nodes) max_per_node = std::max(max_per_node, n.device_count);
  const size_t rows = std::min<size_t>(cluster.nodes.size(), 128);
  h += fmt::format("<h2>Device map</h2><p>colour: pipeline; label: stage; grey: unused{}</p>",
                   rows < cluster.nodes.size() ? fmt::format(" (first {} nodes)", rows) : "");
  h += fmt::format("<svg width=\"{}\" height=\"{}\" font-size=\"9\">", 160 + max_per_node * cell,
                   static_cast<int>(rows) * cell + 4);
  for (size_t n = 0; n < rows; ++n) {
    h += fmt::format("<text x=\"0\" y=\"{}\">{}</text>", static_cast<int>(n) * cell + 15,
                     Escape(cluster.nodes[n].name + " (" + cluster.nodes[n].device_type + ")"));
  }
  for (const spec::DeviceInfo& d : cluster.devices()) {
    if (static_cast<size_t>(d.node) >= rows) continue;
    const auto it = where.find(d.id);
    const int x = 160 + d.local_index * cell;
    const int y = d.node * cell;
    h += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"/>", x, y,
                     cell - 2, cell - 2, it == where.end() ? "#ddd" : Colour(it->second.first));
    if (it != where.end()) {
      h += fmt::format("<text x=\"{}\" y=\"{}\" fill=\"#fff\">{}</text>", x + 3, y + 14, it->second.second);
    }
  }
  h += "</svg>";
  // Stage layout.
  h += "<h2>Stage layout</h2><table><tr><th>pipeline</th><th>stage</th><th>devices</th>"
       "<th>type</th><th>tp</th><th>blocks</th><th>micro-batches x size</th><th>fwd+bwd s</th>"
       "<th>memory GiB</th></tr>";
  const size_t max_rows = 400;
  size_t shown = 0;
  for (size_t k = 0; k < plan.pipelines.size() && shown < max_rows; ++k) {
    const spec::PipelinePlan& pipe = plan.pipelines[k];
    for (size_t i = 0; i < pipe.stages.size() && shown < max_rows; ++i, ++shown) {
      const spec::StagePlan& st = pipe.stages[i];
      const perf::StagePrediction& sp = pred.stages[k][i];
      h += fmt::format(
          "<tr><td>{}</td><td>{}</td><td>{}..{}</td><td>{}</td><td>{}</td><td>[{}, {}){}{}</td>"
          "<td>{} x {}</td><td>{:.4f}</td><td>{:.2f}</td></tr>",
          k, i, st.devices.front(), st.devices.back(),
          Escape(cluster.device_type_of(st.devices.front()).name), st.tp_degree, st.first_block,
          st.end_block(), st.has_embedding ? " +emb" : "", st.has_head ? " +head" : "",
          pipe.micro_batches, pipe.micro_batch_size, sp.cost.forward_s + sp.cost.backward_s,
          sp.memory.total() / kGiB);
    }
  }
  h += "</table>";
  // Timeline: one row per (pipeline, stage) of the first pipelines.
  const int width = 1000;
  const double scale = trace.iteration_s > 0 ? width / trace.iteration_s : 0;
  std::map<std::pair<int, int>, int> row_of;
  for (const sim::TraceEvent& e : trace.trace) {
    if (e.pipeline < 8 && !row_of.count({e.pipeline, e.stage})) row_of[{e.pipeline, e.stage}] = 0;
  }
  int r = 0;
  for (auto& [key, row] : row_of) row = r++;
  h += fmt::format("<h2>Pipeline timeline (simulated, first pipelines)</h2><p>blue forward, green "
                   "backward, orange p2p wait, red DP sync, grey optimizer; {:.4f} s wide</p>",
                   trace.iteration_s);
  h += fmt::format("<svg width=\"{}\" height=\"{}\" font-size=\"9\">", width + 90, r * 16 + 4);
  for (const auto& [key, row] : row_of) {
    h += fmt::format("<text x=\"0\" y=\"{}\">p{} s{}</text>", row * 16 + 12, key.first, key.second);
  }
  for (const sim::TraceEvent& e : trace.trace) {
    const auto it = row_of.find({e.pipeline, e.stage});
    if (it == row_of.end()) continue;
    const char* fill = e.category == "p2p"   ? "#f28e2b"
                       : e.category == "dp"  ? "#e15759"
                       : e.category == "optimizer" ? "#999"
                       : e.name[0] == 'F'    ? "#4e79a7"
                                             : "#59a14f";
    h += fmt::format("<rect x=\"{:.2f}\" y=\"{}\" width=\"{:.2f}\" height=\"14\" fill=\"{}\"><title>{}</title></rect>",
                     90 + e.start_s * scale, it->second * 16, std::max(0.5, e.duration_s * scale),
                     fill, Escape(e.name));
  }
  h += "</svg></body></html>\n";
  return h;
}

}  // namespace motley::plan
