/* The graph page's Trends view: mentions per day of the entities mentioned most (a Chart.js
 * line chart, vendored like cytoscape, see vendor/README.md), and the supersede report as a
 * timeline, newest decision first.
 *
 * Data: `GET /v1/trends?days=N` (its `days` and `mentions` series) and
 * `GET /v1/reports/supersedes` (decisions grouped per entity; a decision filed under two
 * entities is shown once, naming both). Text goes into the page with textContent only.
 *
 * Over more than 60 days the daily counts are summed per week (each labelled by its Monday),
 * over more than 180 per month: a year of daily spikes reads as noise. The project switcher's
 * choice scopes the chart (`scope=`).
 *
 * Deep link: `#trends=1` (and `&days=N`). For tests, the chart is `window.memorydTrendsChart`,
 * and `#trends[data-loaded]` says how many series and decisions the last load drew.
 */
(function () {
  "use strict";

  const page = window.memorydPage;
  const $ = (id) => document.getElementById(id);
  const COLOURS = ["#2f6fde", "#d97706", "#0d9488", "#7c3aed", "#db2777", "#475467", "#65a30d"];
  let chart = null;
  let latest = 0; // drop answers that arrive out of order

  async function openTrends() {
    $("trends").hidden = false;
    page.remember("trends", "1");
    const days = $("trends-days").value;
    page.remember("days", days);
    const seq = ++latest;
    page.clearError();
    const params = new URLSearchParams({ days });
    if (page.project && page.project()) params.set("scope", page.project());
    const [trends, report] = await Promise.all([
      page.api("/v1/trends?" + params),
      page.api("/v1/reports/supersedes"),
    ]);
    if (seq !== latest) return;
    drawChart(trends);
    const decisions = drawTimeline(report);
    $("trends").dataset.loaded = trends.mentions.length + " series, " + decisions + " decisions";
    page.setStatus("trends of the last " + trends.window_days + " days");
  }

  function closeTrends() {
    latest++;
    $("trends").hidden = true;
    delete $("trends").dataset.loaded;
    page.remember("trends", null);
    page.remember("days", null);
  }

  // -- the chart ----------------------------------------------------------------------------
  /** The ISO date of the Monday of `day`'s week (UTC). */
  function monday(day) {
    const t = new Date(day + "T00:00:00Z");
    t.setUTCDate(t.getUTCDate() - ((t.getUTCDay() + 6) % 7));
    return t.toISOString().slice(0, 10);
  }

  /** Daily counts as they are (≤ 60 days), or summed per week (≤ 180) or per month. */
  function buckets(trends) {
    const days = trends.days;
    const unit = days.length <= 60 ? "day" : days.length <= 180 ? "week" : "month";
    if (unit === "day") return { unit, labels: days, series: trends.mentions };
    const key = unit === "week" ? monday : (day) => day.slice(0, 7);
    const labels = [];
    const slot = days.map((day) => {
      const k = key(day);
      if (labels[labels.length - 1] !== k) labels.push(k);
      return labels.length - 1;
    });
    const series = trends.mentions.map((s) => {
      const counts = labels.map(() => 0);
      s.counts.forEach((n, i) => (counts[slot[i]] += n));
      return { name: s.name, counts };
    });
    return { unit, labels, series };
  }

  function drawChart(trends) {
    const empty = !trends.mentions.length;
    $("trends-empty").hidden = !empty;
    $("trends-empty").textContent = empty
      ? "No memory mentioned an entity in the last " + trends.window_days + " days."
      : "";
    const { unit, labels, series } = buckets(trends);
    $("trends-heading").textContent = "Mentions per " + unit + " of the entities mentioned most";
    $("trends").dataset.unit = unit;
    const muted = getComputedStyle(document.documentElement).getPropertyValue("--muted").trim();
    Chart.defaults.color = muted || Chart.defaults.color;
    const data = {
      labels,
      datasets: series.map((s, i) => ({
        label: s.name,
        data: s.counts,
        borderColor: COLOURS[i % COLOURS.length],
        backgroundColor: COLOURS[i % COLOURS.length],
        tension: 0.2,
        pointRadius: labels.length > 60 ? 0 : 3,
      })),
    };
    if (chart) {
      chart.data = data;
      chart.update();
      return;
    }
    chart = new Chart($("trends-chart"), {
      type: "line",
      data,
      options: {
        animation: false,
        maintainAspectRatio: false,
        interaction: { mode: "index", intersect: false },
        scales: {
          y: { beginAtZero: true, ticks: { precision: 0 }, title: { display: true, text: "mentions" } },
        },
        plugins: { legend: { position: "bottom" } },
      },
    });
    window.memorydTrendsChart = chart;
  }

  // -- the timeline -------------------------------------------------------------------------
  /** One entry per decision (newest first), naming every entity it was filed under. */
  function drawTimeline(report) {
    const byPair = new Map();
    for (const chain of report.chains) {
      for (const d of chain.decisions) {
        const key = d.newer + "\u0000" + d.older;
        if (!byPair.has(key)) byPair.set(key, { decision: d, entities: [] });
        byPair.get(key).entities.push(chain.name);
      }
    }
    const entries = [...byPair.values()].sort((a, b) =>
      String(b.decision.decided_at || "").localeCompare(String(a.decision.decided_at || "")),
    );
    const list = $("timeline");
    list.replaceChildren();
    $("timeline-count").textContent = entries.length ? String(entries.length) : "";
    if (!entries.length) {
      list.append(page.item("No supersede decision yet.", "empty"));
      return 0;
    }
    for (const { decision, entities } of entries) list.append(entry(decision, entities));
    return entries.length;
  }

  function entry(d, entities) {
    const li = page.element("li", "decision " + d.status);
    li.dataset.newer = d.newer;
    li.dataset.older = d.older;
    li.dataset.decidedBy = d.decided_by;
    const when = page.element("time", "when", d.decided_at ? d.decided_at.slice(0, 10) : "undated");
    if (d.decided_at) when.dateTime = d.decided_at;
    const about = page.element("span", "entities", entities.join(", "));
    const what = page.element("p", "what");
    what.append(
      link(d.newer, d.newer_title),
      d.status === "active" ? " replaced " : " may replace (candidate) ",
      link(d.older, d.older_title),
    );
    const why = page.element(
      "p",
      "why",
      "decided by " + d.decided_by + " · confidence " + d.confidence.toFixed(2) +
        (d.judge ? " · " + d.judge : "") + (d.reason ? " · " + d.reason : ""),
    );
    li.append(when, about, what, why);
    return li;
  }

  function link(slug, title) {
    const button = page.element("button", "memory", title || slug);
    button.type = "button";
    button.title = slug;
    button.addEventListener("click", () => page.openMemory(slug).catch(page.showError));
    return button;
  }

  // -- start --------------------------------------------------------------------------------
  function follow() {
    const params = page.fragment();
    const days = params.get("days");
    if (days && [...$("trends-days").options].some((o) => o.value === days)) $("trends-days").value = days;
    if (params.get("trends") === "1" && $("trends").hidden) openTrends().catch(page.showError);
  }

  $("trends-open").addEventListener("click", () => openTrends().catch(page.showError));
  $("trends-close").addEventListener("click", closeTrends);
  $("trends-days").addEventListener("change", () => openTrends().catch(page.showError));
  window.addEventListener("hashchange", follow);
  document.addEventListener("memoryd:project", () => {
    if (!$("trends").hidden) openTrends().catch(page.showError);
  });
  if (typeof Chart !== "function") {
    page.showError(new Error("Chart.js did not load (/static/vendor/chart.umd.min.js)"));
    return;
  }
  follow();
})();
