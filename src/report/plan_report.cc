// See plan_report.h.
#include "report/plan_report.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "core/format_units.h"
#include "core/throughput.h"
#include "plan/plan_names.h"
#include "report/html.h"
#include "report/svg_chart.h"

namespace motley::report {
namespace {

constexpr size_t kTimelinePipelines = 8;  // pipelines drawn on the timeline
constexpr size_t kStageTableRows = 400;

// Where a device sits in the plan.
struct Placement {
  int pipeline = -1;
  int stage = -1;
  int tp_rank = 0;
};

std::map<int, Placement> PlacementOf(const spec::Plan& plan) {
  std::map<int, Placement> where;
  for (size_t k = 0; k < plan.pipelines.size(); ++k) {
    const spec::PipelinePlan& p = plan.pipelines[k];
    for (size_t i = 0; i < p.stages.size(); ++i) {
      for (size_t t = 0; t < p.stages[i].devices.size(); ++t) {
        where[p.stages[i].devices[t]] = {static_cast<int>(k), static_cast<int>(i),
                                         static_cast<int>(t)};
      }
    }
  }
  return where;
}

// Colour by pipeline when there are few, else by stage position (pipelines would repeat colours).
struct Colouring {
  bool by_pipeline = true;
  std::string Of(const Placement& p) const { return Colour(by_pipeline ? p.pipeline : p.stage); }
  std::string Legend() const {
    return by_pipeline ? "colour: pipeline; number: stage; grey: not used by the plan"
                       : "colour: stage (0 = first; the palette repeats after 10); grey: not used "
                         "by the plan; hover a cell for its pipeline";
  }
};

std::string DeviceTip(const spec::ClusterSpec& cluster, const spec::Plan& plan, int d,
                      const std::map<int, Placement>& where) {
  const std::string who =
      fmt::format("device {} ({})", plan::DeviceLabel(cluster, d), cluster.device_type_of(d).name);
  const auto it = where.find(d);
  if (it == where.end()) return who + ": not used by this plan";
  const Placement& p = it->second;
  const spec::StagePlan& st =
      plan.pipelines[static_cast<size_t>(p.pipeline)].stages[static_cast<size_t>(p.stage)];
  return fmt::format("{}: pipeline {}, stage {}, blocks [{}, {}){}{}, tp rank {} of {}", who,
                     p.pipeline, p.stage, st.first_block, st.end_block(),
                     st.has_embedding ? " + embedding" : "", st.has_head ? " + head" : "",
                     p.tp_rank, st.tp_degree);
}

// Node indices per device type, in device_types order (types without nodes are skipped).
std::vector<std::pair<std::string, std::vector<int>>> NodesByType(
    const spec::ClusterSpec& cluster) {
  std::vector<std::pair<std::string, std::vector<int>>> groups;
  for (const spec::DeviceType& t : cluster.device_types) {
    std::vector<int> nodes;
    for (size_t n = 0; n < cluster.nodes.size(); ++n) {
      if (cluster.nodes[n].device_type == t.name) nodes.push_back(static_cast<int>(n));
    }
    if (!nodes.empty()) groups.emplace_back(t.name, std::move(nodes));
  }
  return groups;
}

std::string DeviceMap(const spec::ClusterSpec& cluster, const PlanView& v,
                      const Colouring& colouring) {
  const spec::Plan& plan = *v.plan;
  const std::map<int, Placement> where = PlacementOf(plan);
  const int n = cluster.num_devices();
  const bool list = n <= 64 && cluster.nodes.size() <= 32;  // one node per row, named
  const double cell = n <= 64 ? 22 : n <= 512 ? 12 : 7;
  constexpr double kWidth = 960, kNameWidth = 170, kHeading = 20, kGap = 6;
  // First node index of each device (devices are numbered node by node).
  std::vector<int> first(cluster.nodes.size(), 0);
  for (const spec::DeviceInfo& d : cluster.devices()) {
    if (d.local_index == 0) first[static_cast<size_t>(d.node)] = d.id;
  }
  std::string body;
  int marks = 0;
  double y = 4;
  for (const auto& [type, nodes] : NodesByType(cluster)) {
    int per_node = 1;
    for (int node : nodes) {
      per_node = std::max(per_node, cluster.nodes[static_cast<size_t>(node)].device_count);
    }
    body += fmt::format(
        "<text x=\"0\" y=\"{:.1f}\" font-weight=\"bold\">{}: {} node(s) x {} "
        "device(s)</text>",
        y + 13, Escape(type), nodes.size(), per_node);
    y += kHeading;
    const double block = per_node * cell + kGap;
    const int per_row = list ? 1 : std::max(1, static_cast<int>((kWidth - 4) / block));
    for (size_t j = 0; j < nodes.size(); ++j) {
      const int node = nodes[j];
      const spec::NodeSpec& ns = cluster.nodes[static_cast<size_t>(node)];
      const double x0 =
          list ? kNameWidth : static_cast<double>(static_cast<int>(j) % per_row) * block;
      const double y0 = y + static_cast<double>(static_cast<int>(j) / per_row) * (cell + 4);
      if (list) {
        body +=
            fmt::format("<text x=\"0\" y=\"{:.1f}\">{}</text>", y0 + cell * 0.7, Escape(ns.name));
      }
      for (int i = 0; i < ns.device_count; ++i) {
        const int d = first[static_cast<size_t>(node)] + i;
        const auto it = where.find(d);
        const double x = x0 + i * cell;
        body += fmt::format(
            "<rect class=\"mark\" data-device=\"{}\" x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" "
            "height=\"{:.1f}\" fill=\"{}\"><title>{}</title></rect>",
            d, x, y0, cell - 2, cell - 2, it == where.end() ? "#ddd" : colouring.Of(it->second),
            Escape(DeviceTip(cluster, plan, d, where)));
        ++marks;
        if (it != where.end() && cell >= 18 && colouring.by_pipeline) {
          body += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" fill=\"#fff\">{}</text>", x + 4,
                              y0 + cell * 0.65, it->second.stage);
        }
      }
    }
    const int rows = list ? static_cast<int>(nodes.size())
                          : (static_cast<int>(nodes.size()) + per_row - 1) / per_row;
    y += rows * (cell + 4) + 8;
  }
  double max_width = kWidth;
  if (list) {
    int per_node = 1;
    for (const spec::NodeSpec& ns : cluster.nodes) per_node = std::max(per_node, ns.device_count);
    max_width = kNameWidth + per_node * cell + 20;
  }
  return fmt::format(
      "<figure><figcaption>Device map{}</figcaption><p class=\"note\">{}; grouped by node type"
      "</p><svg class=\"chart\" data-chart=\"{}device-map\" data-marks=\"{}\" width=\"{:.0f}\" "
      "height=\"{:.0f}\" font-size=\"10\" xmlns=\"http://www.w3.org/2000/svg\">{}</svg>"
      "</figure>\n",
      v.title.empty() ? "" : ": " + Escape(v.title), Escape(colouring.Legend()), v.id_prefix, marks,
      max_width, y, body);
}

std::string Utilisation(const spec::ClusterSpec& cluster, const PlanView& v,
                        const Colouring& colouring) {
  const sim::SimResult& r = *v.simulation;
  const std::map<int, Placement> where = PlacementOf(*v.plan);
  ColumnChart c;
  c.id = v.id_prefix + "utilisation";
  c.title = "Per-device utilisation (simulated step)";
  c.y_label = "busy (% of the step)";
  c.y_max = 100;
  for (const auto& [type, nodes] : NodesByType(cluster)) {
    ColumnGroup g;
    g.label = type;
    for (const spec::DeviceInfo& d : cluster.devices()) {
      if (cluster.device_types[static_cast<size_t>(d.type)].name != type) continue;
      const auto it = where.find(d.id);
      if (it == where.end()) continue;
      const double busy = static_cast<size_t>(d.id) < r.device_busy_s.size()
                              ? r.device_busy_s[static_cast<size_t>(d.id)]
                              : 0.0;
      const double pct = r.iteration_s > 0 ? 100.0 * busy / r.iteration_s : 0.0;
      g.columns.push_back(
          {pct, colouring.Of(it->second),
           fmt::format("device {}: busy {:.1f}% ({} of {})", plan::DeviceLabel(cluster, d.id), pct,
                       FormatSeconds(busy), FormatSeconds(r.iteration_s))});
    }
    if (!g.columns.empty()) c.groups.push_back(std::move(g));
  }
  return RenderColumnChart(c);
}

std::string Timeline(const PlanView& v) {
  const sim::SimResult& r = *v.simulation;
  std::map<std::pair<int, int>, int> row_of;
  std::set<int> pipelines;
  for (const sim::TraceEvent& e : r.trace) {
    if (pipelines.count(e.pipeline) == 0 && pipelines.size() >= kTimelinePipelines) continue;
    pipelines.insert(e.pipeline);
    row_of.emplace(std::make_pair(e.pipeline, e.stage), 0);
  }
  int rows = 0;
  for (auto& [key, row] : row_of) row = rows++;
  constexpr double kLabel = 100, kPlot = 860, kRow = 16, kAxis = 34;
  const double scale = r.iteration_s > 0 ? kPlot / r.iteration_s : 0.0;
  std::string body;
  const double plot_bottom = rows * kRow + 4;
  for (double t : NiceTicks(0, r.iteration_s, 8)) {
    const double x = kLabel + t * scale;
    body += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"0\" x2=\"{0:.1f}\" y2=\"{1:.1f}\" stroke=\"#eee\"/>"
        "<text x=\"{0:.1f}\" y=\"{2:.1f}\" text-anchor=\"middle\">{3}</text>",
        x, plot_bottom, plot_bottom + 14, Escape(FormatSeconds(t)));
  }
  body += fmt::format(
      "<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">time in the step "
      "(simulated)</text>",
      kLabel + kPlot / 2, plot_bottom + 30);
  for (const auto& [key, row] : row_of) {
    body += fmt::format("<text x=\"0\" y=\"{:.1f}\">pipe {} stage {}</text>", row * kRow + 12,
                        key.first, key.second);
  }
  int marks = 0;
  for (const sim::TraceEvent& e : r.trace) {
    const auto it = row_of.find({e.pipeline, e.stage});
    if (it == row_of.end()) continue;
    std::string kind = e.category;
    std::string fill = "#f28e2b";
    if (e.category == "compute") {
      const bool forward = !e.name.empty() && e.name[0] == 'F';
      kind = forward ? "fwd" : "bwd";
      fill = forward ? "#4e79a7" : "#59a14f";
    } else if (e.category == "dp") {
      fill = "#e15759";
    } else if (e.category == "optimizer") {
      fill = "#999";
    }
    body += fmt::format(
        "<rect class=\"mark {}\" data-stage=\"{}-{}\" x=\"{:.2f}\" y=\"{:.1f}\" width=\"{:.2f}\" "
        "height=\"{:.1f}\" fill=\"{}\"><title>pipeline {} stage {}: {} at {} for {}</title></rect>",
        kind, e.pipeline, e.stage, kLabel + e.start_s * scale, it->second * kRow + 1.0,
        std::max(0.5, e.duration_s * scale), kRow - 2, fill, e.pipeline, e.stage, Escape(e.name),
        Escape(FormatSeconds(e.start_s)), Escape(FormatSeconds(e.duration_s)));
    ++marks;
  }
  return fmt::format(
      "<figure><figcaption>Pipeline timeline (simulated step{})</figcaption><p class=\"note\">"
      "blue forward, green backward, orange pipeline transfer, red data-parallel sync, grey "
      "optimizer step; one bar per action</p><svg class=\"chart\" data-chart=\"{}timeline\" "
      "data-marks=\"{}\" width=\"{:.0f}\" height=\"{:.0f}\" font-size=\"10\" "
      "xmlns=\"http://www.w3.org/2000/svg\">{}</svg></figure>\n",
      pipelines.size() < v.plan->pipelines.size()
          ? fmt::format(", {} of {} pipelines", pipelines.size(), v.plan->pipelines.size())
          : "",
      v.id_prefix, marks, kLabel + kPlot + 20, plot_bottom + kAxis + 4, body);
}

std::string StageTable(const spec::ClusterSpec& cluster, const PlanView& v) {
  const spec::Plan& plan = *v.plan;
  std::vector<std::vector<std::string>> rows;
  size_t total = 0;
  for (size_t k = 0; k < plan.pipelines.size(); ++k) {
    const spec::PipelinePlan& pipe = plan.pipelines[k];
    for (size_t i = 0; i < pipe.stages.size(); ++i, ++total) {
      if (rows.size() >= kStageTableRows) continue;
      const spec::StagePlan& st = pipe.stages[i];
      const perf::StagePrediction* sp =
          k < v.prediction.stages.size() && i < v.prediction.stages[k].size()
              ? &v.prediction.stages[k][i]
              : nullptr;
      // Runs of consecutive ids as "a-b" (a TP group of 8 reads "0-7").
      std::string devices;
      for (size_t j = 0; j < st.devices.size();) {
        size_t e = j;
        while (e + 1 < st.devices.size() && st.devices[e + 1] == st.devices[e] + 1) ++e;
        devices += fmt::format("{}{}", devices.empty() ? "" : " ", st.devices[j]);
        if (e > j) devices += fmt::format("-{}", st.devices[e]);
        j = e + 1;
      }
      rows.push_back(
          {fmt::format("{}", k), fmt::format("{}", i), devices,
           Escape(cluster.device_type_of(st.devices.front()).name), fmt::format("{}", st.tp_degree),
           fmt::format("[{}, {}){}{}", st.first_block, st.end_block(),
                       st.has_embedding ? " +emb" : "", st.has_head ? " +head" : ""),
           fmt::format("{} x {}", pipe.micro_batches, pipe.micro_batch_size),
           sp ? FormatSeconds(sp->cost.forward_s + sp->cost.backward_s) : "-",
           sp ? FormatBytes(sp->memory.total()) + " / " + FormatBytes(sp->capacity) : "-"});
    }
  }
  std::string h = Table({"pipeline", "stage", "devices", "type", "tp", "blocks",
                         "micro-batches x size", "fwd+bwd per micro-batch", "memory per device"},
                        rows);
  if (total > rows.size()) {
    h += fmt::format("<p class=\"note\">first {} of {} stages</p>", rows.size(), total);
  }
  return h;
}

std::string Summary(const perf::Predictor& predictor, const PlanView& v) {
  const spec::ClusterSpec& cluster = predictor.cluster();
  const perf::Prediction& p = v.prediction;
  const int64_t tokens = predictor.train().global_batch * predictor.train().seq_len;
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"step time (predicted)", FormatSeconds(p.iteration_s)});
  if (v.simulation != nullptr) {
    rows.push_back({"step time (simulated)", FormatSeconds(v.simulation->iteration_s)});
    rows.push_back({"tokens/s (simulated)",
                    fmt::format("{:.1f}", TokensPerSecond(tokens, v.simulation->iteration_s))});
  }
  rows.push_back({"tokens/s (predicted)", fmt::format("{:.1f}", p.tokens_per_s)});
  rows.push_back({"MFU (predicted)", fmt::format("{:.1f}%", 100 * p.mfu)});
  rows.push_back({"pipelines", fmt::format("{}", v.plan->pipelines.size())});
  for (size_t t = 0; t < cluster.device_types.size() && t < p.peak_memory_per_type.size(); ++t) {
    if (p.peak_memory_per_type[t] <= 0) continue;
    rows.push_back({"memory per " + Escape(cluster.device_types[t].name) + " device",
                    FormatBytes(p.peak_memory_per_type[t]) + " of " +
                        FormatBytes(cluster.device_types[t].memory_bytes)});
  }
  rows.push_back({"devices", Escape(plan::DescribeLeftOut(*v.plan, cluster))});
  if (!p.fits_memory) rows.push_back({"DOES NOT FIT", Escape(p.memory_violation)});
  if (!v.plan->comment.empty()) rows.push_back({"comment", Escape(v.plan->comment)});
  return Table({"", "value"}, rows);
}

}  // namespace

std::string PlanSections(const perf::Predictor& predictor, const PlanView& v) {
  const spec::ClusterSpec& cluster = predictor.cluster();
  Colouring colouring;
  colouring.by_pipeline = v.plan->pipelines.size() <= 10;
  std::string h = fmt::format("<h2>Plan{}</h2>\n", v.title.empty() ? "" : ": " + Escape(v.title));
  h += fmt::format("<p>{} on cluster {} ({} devices)</p>\n", Escape(predictor.model().name),
                   Escape(cluster.name), cluster.num_devices());
  h += Summary(predictor, v);
  h += DeviceMap(cluster, v, colouring);
  if (v.simulation != nullptr) h += Utilisation(cluster, v, colouring);
  h += "<h3>Stage layout</h3>\n" + StageTable(cluster, v);
  if (v.simulation != nullptr && !v.simulation->trace.empty()) h += Timeline(v);
  return h;
}

std::string BaselineSections(const plan::PlanReport& report) {
  const double tps = report.best.TokensPerSecond(report.tokens_per_step);
  BarChart c;
  c.id = "baselines";
  c.title = "The chosen plan against the baselines and references (simulated tokens/s)";
  c.value_label = "tokens/s";
  c.bars.push_back(
      {"chosen plan", tps, Colour(0), report.best.description, fmt::format("{:.1f}", tps)});
  std::vector<std::vector<std::string>> rows;
  int k = 1;
  for (const plan::Baseline& b : report.baselines) {
    if (!b.found) {
      rows.push_back({Escape(b.name), "none", "-", Escape(b.why_not)});
      continue;
    }
    const double other = b.candidate.TokensPerSecond(report.tokens_per_step);
    c.bars.push_back({b.name, other, Colour(k++), b.candidate.description,
                      fmt::format("{:.1f} (chosen: {:.2f}x)", other, tps / other)});
    rows.push_back({Escape(b.name), fmt::format("{:.1f}", other),
                    fmt::format("{:.3f}x", tps / other), Escape(b.candidate.description)});
  }
  auto reference = [&](const std::string& name, double value, const std::string& what) {
    if (value <= 0) return;
    c.bars.push_back({name, value, "#bab0ac", what,
                      fmt::format("{:.1f} (chosen: {:.3f} of it)", value, tps / value)});
    rows.push_back({Escape(name), fmt::format("{:.1f}", value),
                    fmt::format("ratio {:.4f}", tps / value), Escape(what)});
  };
  reference("compute bound", report.compute_bound_tokens_per_s,
            "every device at its best block FLOP/s; no plan can exceed it");
  reference("homogeneous sum", report.homogeneous_sum_tokens_per_s,
            "sum over device types of the best plan of that type alone at its share of the "
            "global batch (HETHUB's bound; above 1.0 is H2's superlinear case)");
  if (report.exhaustive_tokens_per_s > 0 && !report.ranked.empty()) {
    reference("exhaustive optimum (predicted)", report.exhaustive_tokens_per_s,
              "the best plan of an exhaustive search, by prediction");
  }
  std::string h = "<h2>Baselines and references</h2>\n" + RenderBarChart(c);
  h += Table({"compared with", "tokens/s", "chosen plan", "what"}, rows);
  h += fmt::format(
      "<p class=\"note\">MFU of the chosen plan at {:.1f} tokens/s: {:.1f}% of the "
      "devices it uses, {:.1f}% of all devices.</p>\n",
      tps, 100 * report.mfu_used, 100 * report.mfu_all);
  if (!report.homogeneous_shares.empty()) {
    std::vector<std::vector<std::string>> terms;
    for (const plan::TypeShare& t : report.homogeneous_shares) {
      terms.push_back({Escape(t.type_name), fmt::format("{}", t.devices),
                       fmt::format("{}", t.global_batch),
                       t.tokens_per_s > 0 ? fmt::format("{:.1f}", t.tokens_per_s) : "none fits",
                       Escape(t.what)});
    }
    h += "<h3>Terms of the homogeneous sum</h3>\n";
    h +=
        Table({"device type", "devices", "batch share (sequences)", "tokens/s", "its plan"}, terms);
  }
  if (!report.left_out.empty()) {
    std::vector<std::vector<std::string>> left;
    for (const plan::LeftOutDevices& l : report.left_out) {
      left.push_back({Escape(l.type_name), fmt::format("{}", l.devices.size()), Escape(l.reason)});
    }
    h += "<h3>Devices the chosen plan leaves out</h3>\n";
    h += Table({"device type", "devices", "why"}, left);
  }
  return h;
}

std::string PlanReportHtml(const perf::Predictor& predictor, const plan::PlanReport& report,
                           const sim::SimResult& simulation) {
  PlanView v;
  v.title = "chosen plan";
  v.plan = &report.best.plan;
  v.prediction = report.best.prediction;
  v.simulation = &simulation;
  std::string body = fmt::format(
      "<p class=\"note\">Layout: {}. {} layouts considered, {} "
      "evaluations ({} cut by the lower bound without a prediction).</p>\n",
      Escape(report.best.description), report.layouts_considered, report.evaluations,
      report.evaluations_pruned);
  body += BaselineSections(report);
  body += PlanSections(predictor, v);
  body +=
      "<h2>Names in layout descriptions</h2><pre>" + Escape(plan::LayoutLegend("")) + "</pre>\n";
  return Page(
      fmt::format("motley plan: {} on {}", predictor.model().name, predictor.cluster().name), body);
}

std::string SimulationReportHtml(const perf::Predictor& predictor, const PlanView& view) {
  std::string body;
  if (view.simulation != nullptr) {
    body += fmt::format(
        "<p>Simulated step {} against the closed form's {} ({:+.2f}%), {} events.</p>\n",
        FormatSeconds(view.simulation->iteration_s), FormatSeconds(view.prediction.iteration_s),
        view.simulation->iteration_s > 0
            ? 100 * (view.prediction.iteration_s / view.simulation->iteration_s - 1)
            : 0.0,
        view.simulation->events);
  }
  body += PlanSections(predictor, view);
  return Page(
      fmt::format("motley simulate: {} on {}", predictor.model().name, predictor.cluster().name),
      body);
}

}  // namespace motley::report
