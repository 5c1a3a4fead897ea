/* The memoryd graph page: the home list (home.js), an entity's neighbourhood, a memory.
 *
 * No framework and no build step: cytoscape (vendored, see vendor/README.md) draws the graph,
 * everything else is DOM calls. Data is only ever put into the page with textContent, never
 * parsed as HTML: memory bodies are user text (md.js renders their markdown as DOM nodes).
 *
 * Auth: on TCP the daemon wants `Authorization: Bearer <token>`. `memoryd ui` opens
 * `/#token=…`; the fragment never reaches the server, and the token moves into sessionStorage
 * (this tab only) and out of the address bar and history at once. No cookie is involved, and
 * the daemon refuses writes from another origin, so another site cannot write (CSRF).
 *
 * Deep links: `#entity=ID&depth=N&cap=N`, `#memory=SLUG`, `#review=1`, `#trends=1`,
 * `#project=HASH` (also `?entity=` / `?memory=`). The entity view keeps its depth and cap in
 * the fragment, so a reload or a shared link draws the same neighbourhood; a value the
 * controls do not offer falls back to the control's default.
 *
 * The entity view draws `/v1/page/graph`: relations as solid arrows, co-mentions (two entities
 * named by one memory) as dashed lines whose width grows with the memories they share, with a
 * depth and a cap; the note under the controls says what the cap left out, entities and the
 * weaker links between those drawn (the server sends at most a few lines per entity). Past
 * LABELLED_ARROWS arrows, an arrow's predicates show when the pointer is on it or its node.
 *
 * The memory panel renders the body as markdown with the memory's entities as links, and edits
 * it through the API every client uses, as actor `page` (so the audit log says who): PATCH
 * (title, tags, triggers), DELETE (forget: archived, never erased), POST …/restore and
 * POST /v1/merge. Its history (a session's timeline) is `/v1/memories/SLUG/history`.
 *
 * Review: the pending promotions (`/v1/promotions`) with their evidence — DURA scores and who
 * scored, the source session, the sentences quoted from it — and approve / edit / reject,
 * which POST to `/v1/promotions/{id}/promote|reject` as actor `page`; on a daemon in a team,
 * a promotion whose project is shared (`team_project`) also has "Approve to the team"
 * (`{"team": true}`), its card showing the team's slug or the refusal. Below them, the
 * supersede candidates (judged 0.5–0.85): Accept or Reject POSTs
 * `/v1/supersedes/NEW/OLD/accept|reject` and reloads that list.
 * For tests, the cytoscape instance is `window.memorydGraph`, and `#graph[data-centre]` is the
 * entity drawn last. home.js and trends.js use the helpers this file shares as
 * `window.memorydPage`.
 */
(function () {
  "use strict";

  const TOKEN_KEY = "memoryd.token";
  const SEARCH_DELAY_MS = 250;
  const FIT_MAX_ZOOM = 1.3;
  const LABELLED_ARROWS = 40; // more arrows than this: labels on hover only (see draw)
  const TYPE_COLOURS = {
    person: "#d97706",
    library: "#2f6fde",
    tool: "#0d9488",
    project: "#7c3aed",
    concept: "#db2777",
    organization: "#475467",
    place: "#65a30d",
  };

  const $ = (id) => document.getElementById(id);
  let cy = null;
  let centred = null; // the entity id drawn now
  const latest = { search: 0, centre: 0, memory: 0 }; // drop answers that arrive out of order

  class ApiError extends Error {
    constructor(status, code, message, hint) {
      super(message);
      this.status = status;
      this.code = code;
      this.hint = hint || "";
    }
  }

  // -- the API ----------------------------------------------------------------------------
  async function api(path, payload, method) {
    const headers = { Accept: "application/json" };
    const token = sessionStorage.getItem(TOKEN_KEY);
    if (token) headers.Authorization = "Bearer " + token;
    const init = { headers, cache: "no-store" };
    if (payload !== undefined || method) {
      init.method = method || "POST";
      headers["X-Memoryd-Actor"] = "page";
    }
    if (payload !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(payload);
    }
    let response;
    try {
      response = await fetch(path, init);
    } catch (exc) {
      throw new ApiError(
        0,
        "unreachable",
        "The memoryd daemon did not answer (" + exc.message + ").",
        "Is it running? `memoryd status` tells; `memoryd serve --detach` starts it.",
      );
    }
    let body = null;
    try {
      body = await response.json();
    } catch (_) {
      body = null;
    }
    if (response.ok) return body;
    const error = body && body.error;
    if (error && typeof error.message === "string") {
      let hint = error.hint || "";
      if (response.status === 401) {
        hint += (hint ? " " : "") + "Open this page with `memoryd ui`: it puts the token in the URL.";
      }
      throw new ApiError(response.status, error.code, error.message, hint);
    }
    throw new ApiError(response.status, "http_error", "HTTP " + response.status + " for " + path, "");
  }

  const entityPath = (id, suffix) => "/v1/entities/" + encodeURIComponent(id) + suffix;

  // -- errors and status ------------------------------------------------------------------
  function showError(exc) {
    const known = exc instanceof ApiError;
    $("error-message").textContent = known ? exc.message : "The page failed: " + String(exc);
    $("error-hint").textContent = known ? exc.hint : "";
    $("error").dataset.code = known ? exc.code : "page_error";
    $("error").hidden = false;
    setStatus("");
  }

  function clearError() {
    $("error").hidden = true;
    delete $("error").dataset.code;
  }

  function setStatus(text) {
    $("status").textContent = text;
  }

  // -- the URL fragment -------------------------------------------------------------------
  function fragment() {
    return new URLSearchParams(location.hash.slice(1));
  }

  /** Move a #token=… into sessionStorage and out of the address bar and the history. */
  function takeToken() {
    const params = fragment();
    const token = params.get("token");
    if (token === null) return;
    sessionStorage.setItem(TOKEN_KEY, token);
    params.delete("token");
    writeFragment(params);
  }

  function writeFragment(params) {
    const rest = params.toString();
    history.replaceState(null, "", location.pathname + location.search + (rest ? "#" + rest : ""));
  }

  function remember(key, value) {
    const params = fragment();
    if (value === null) params.delete(key);
    else params.set(key, value);
    writeFragment(params);
  }

  // -- search -----------------------------------------------------------------------------
  async function search(text) {
    const q = text.trim();
    const seq = ++latest.search;
    if (!q) return;
    clearError();
    const page = await api("/v1/entities?" + new URLSearchParams({ q, limit: "25" }));
    if (seq !== latest.search) return;
    const list = $("results");
    list.replaceChildren();
    if (!page.items.length) {
      list.append(item("no entity matches " + JSON.stringify(q), "empty"));
      return;
    }
    for (const entity of page.items) {
      const button = document.createElement("button");
      button.type = "button";
      button.className = "result";
      button.dataset.id = entity.id;
      button.append(entity.name, kind(entity.type));
      button.addEventListener("click", () => centre(entity.id).catch(showError));
      const li = document.createElement("li");
      li.append(button);
      list.append(li);
    }
  }

  function item(text, className) {
    const li = document.createElement("li");
    li.textContent = text;
    if (className) li.className = className;
    return li;
  }

  function kind(text) {
    const span = document.createElement("span");
    span.className = "kind";
    span.textContent = text;
    return span;
  }

  // -- the graph --------------------------------------------------------------------------
  async function centre(id) {
    const seq = ++latest.centre;
    clearError();
    setStatus("loading " + id + " …");
    const params = new URLSearchParams({ entity: id, depth: $("graph-depth").value, cap: $("graph-cap").value });
    const [context, hood] = await Promise.all([
      api(entityPath(id, "/context") + "?limit=100"),
      api("/v1/page/graph?" + params),
    ]);
    if (seq !== latest.centre) return;
    centred = context.entity.id;
    showGraph();
    timed("memoryd.graph", () => draw(hood));
    timed("memoryd.list", () => listMemories(context));
    remember("entity", centred);
    remember("depth", params.get("depth"));
    remember("cap", params.get("cap"));
    setStatus("centred on " + context.entity.name);
  }

  /** `fn()`, its time as a performance measure named `name` (bench/page.py reads them). */
  function timed(name, fn) {
    const started = performance.now();
    try {
      return fn();
    } finally {
      performance.measure(name, { start: started, end: performance.now() });
    }
  }

  /** The entity view in front: the home view steps aside. */
  function showGraph() {
    $("home").hidden = true;
    remember("home", null);
    if (cy) cy.resize();
  }

  /** `entity:library:React` → ["library", "React"]; names may contain colons. */
  function splitId(id) {
    const parts = id.split(":");
    if (parts.length >= 3 && parts[0] === "entity") return [parts[1], parts.slice(2).join(":")];
    return ["", id];
  }

  /** One arrow per ordered pair of entities, its predicates as its label ("uses, prefers"):
   * a hub's neighbourhood at 10k memories held 1,824 relations between 37 entities, and
   * drawing each as its own curve took seconds (bench/RESULTS.md). */
  function mergeRelations(edges) {
    const arrows = new Map();
    const kept = [];
    for (const edge of edges) {
      if (edge.kind !== "relation") {
        kept.push(edge);
        continue;
      }
      const key = edge.source + "\u0000" + edge.target;
      const arrow = arrows.get(key);
      if (arrow) {
        arrow.labels.push(edge.label);
        arrow.count += edge.count;
        continue;
      }
      const first = { ...edge, labels: [edge.label] };
      arrows.set(key, first);
      kept.push(first);
    }
    for (const arrow of arrows.values()) arrow.label = arrow.labels.join(", ");
    return kept;
  }

  function draw(hood) {
    const graph = ensureGraph();
    const most = Math.max(1, ...hood.edges.filter((e) => e.kind === "co_mention").map((e) => e.count));
    const edges = mergeRelations(hood.edges);
    const arrows = edges.filter((e) => e.kind === "relation").length;
    // Labels on every arrow only when there are few: each is text drawn along a curve, and a
    // hub's view has hundreds. Otherwise a node or an edge under the pointer shows its own.
    graph.scratch("labelAll", arrows <= LABELLED_ARROWS);
    const at = timed("memoryd.layout", () => window.memorydLayout.place(hood.nodes, edges));
    graph.batch(() => {
      graph.elements().remove();
      graph.add([
        ...hood.nodes.map((n) => ({
          group: "nodes",
          data: { id: n.id, label: n.name, type: n.type, hop: n.hop, mentions: n.mention_count },
          position: { ...at.get(n.id) },
          classes: n.id === hood.centre.id ? "centre" : "",
        })),
        ...edges.map((e, i) => ({
          group: "edges",
          data: {
            id: "e" + i,
            source: e.source,
            target: e.target,
            label: e.kind === "relation" ? e.label : "",
            title: e.label,
            kind: e.kind,
            count: e.count,
            width: e.kind === "co_mention" ? 1 + (4 * e.count) / most : 1.8,
          },
          classes:
            e.kind === "co_mention" ? "co-mention" : "relation" + (arrows <= LABELLED_ARROWS ? " labelled" : ""),
        })),
      ]);
    });
    fitView();
    const relations = hood.edges.filter((e) => e.kind === "relation").length;
    const shared = hood.edges.length - relations;
    let note = `${hood.nodes.length} entities, ${relations} relations, ${shared} co-mention pairs`;
    if (hood.left_out) {
      note += ` · ${hood.left_out} more left out by the cap of ${hood.cap}: ${hood.left_out_names.join(", ")}` +
        (hood.left_out > hood.left_out_names.length ? ", …" : "");
    }
    if (hood.edges_left_out) note += ` · ${hood.edges_left_out} weaker links between them not drawn`;
    if (hood.truncated) note += " · more were reached than counted";
    $("graph-note").textContent = note;
    $("graph-note").classList.toggle("capped", hood.left_out > 0);
    $("graph-note").dataset.leftOut = String(hood.left_out);
    $("graph-note").dataset.edgesLeftOut = String(hood.edges_left_out || 0);
    $("graph").dataset.centre = hood.centre.id;
  }

  /** Label the arrows at a node or edge under the pointer (when not all are labelled). */
  function pointAt(target, on) {
    if (!cy || cy.scratch("labelAll")) return;
    const edges = target.isNode() ? target.connectedEdges(".relation") : target.filter(".relation");
    if (on) edges.addClass("labelled");
    else edges.removeClass("labelled");
  }

  function cssVar(name) {
    return getComputedStyle(document.documentElement).getPropertyValue(name).trim();
  }

  function graphStyle() {
    const typeStyles = Object.entries(TYPE_COLOURS).map(([type, colour]) => ({
      selector: `node[type = "${type}"]`,
      style: { "background-color": colour },
    }));
    const fg = cssVar("--fg");
    const bg = cssVar("--bg");
    return [
      {
        selector: "node",
        style: {
          label: "data(label)",
          "background-color": "#8792a2",
          width: 22,
          height: 22,
          "font-size": 12,
          "text-valign": "bottom",
          "text-margin-y": 4,
          color: fg,
          "text-background-color": bg,
          "text-background-opacity": 0.85,
        },
      },
      ...typeStyles,
      {
        selector: "node.centre",
        style: { width: 36, height: 36, "border-width": 3, "border-color": fg, "font-weight": "bold" },
      },
      {
        selector: "edge",
        style: {
          width: "data(width)",
          "curve-style": "bezier",
          "font-size": 10,
          color: cssVar("--muted"),
          "text-rotation": "autorotate",
          "text-background-color": bg,
          "text-background-opacity": 0.85,
        },
      },
      {
        selector: "edge.relation",
        style: {
          "line-color": cssVar("--relation"),
          "target-arrow-color": cssVar("--relation"),
          "target-arrow-shape": "triangle",
        },
      },
      {
        selector: "edge.labelled",
        style: { label: "data(label)" },
      },
      {
        selector: "edge.co-mention",
        style: { "line-style": "dashed", "line-color": cssVar("--co-mention"), opacity: 0.8 },
      },
    ];
  }

  /** Colours follow the theme (home.js calls it when the theme changes). */
  function restyle() {
    if (cy) cy.style(graphStyle());
  }

  function ensureGraph() {
    if (cy) return cy;
    cy = cytoscape({
      container: $("graph"),
      minZoom: 0.2,
      maxZoom: 3,
      style: graphStyle(),
    });
    // The panel and the error bar change the graph's size; cytoscape only watches the window.
    new ResizeObserver(() => {
      cy.resize();
      fitView();
    }).observe($("graph"));
    cy.on("mouseover", "node, edge", (event) => pointAt(event.target, true));
    cy.on("mouseout", "node, edge", (event) => pointAt(event.target, false));
    cy.on("tap", "node", (event) => {
      const id = event.target.id();
      if (id !== centred) centre(id).catch(showError);
    });
    window.memorydGraph = cy;
    return cy;
  }

  /** Everything in view, but a small neighbourhood is not blown up to fill the screen. */
  function fitView() {
    cy.fit(undefined, 40);
    if (cy.zoom() > FIT_MAX_ZOOM) {
      cy.zoom(FIT_MAX_ZOOM);
      cy.center();
    }
  }

  // -- memories ---------------------------------------------------------------------------
  function listMemories(context) {
    const entity = context.entity;
    $("entity-section").hidden = false;
    $("entity-title").textContent = entity.name;
    const aliases = entity.aliases.length ? " · also " + entity.aliases.join(", ") : "";
    $("entity-meta").textContent =
      entity.type + " · " + entity.mention_count + " mention" + (entity.mention_count === 1 ? "" : "s") + aliases;
    const list = $("memories");
    list.replaceChildren();
    if (!context.memories.length) {
      list.append(item("no memory mentions it", "empty"));
      return;
    }
    const superseded = new Set(context.superseded);
    for (const memory of context.memories) {
      const link = document.createElement("a");
      link.className = "memory-link" + (superseded.has(memory.slug) ? " superseded" : "");
      link.href = "#" + new URLSearchParams({ entity: entity.id, memory: memory.slug });
      link.dataset.slug = memory.slug;
      const title = document.createElement("span");
      title.className = "title";
      title.textContent = memory.title;
      const slug = document.createElement("span");
      slug.className = "slug";
      slug.textContent = memory.slug;
      link.append(title, kind(memory.type), slug);
      if (superseded.has(memory.slug)) link.title = "superseded by a newer memory";
      link.addEventListener("click", (event) => {
        event.preventDefault();
        openMemory(memory.slug).catch(showError);
      });
      const li = document.createElement("li");
      li.append(link);
      list.append(li);
    }
  }

  async function openMemory(slug) {
    const seq = ++latest.memory;
    clearError();
    const memory = await api("/v1/memories/" + encodeURIComponent(slug));
    if (seq !== latest.memory) return;
    showMemory(memory);
    remember("memory", memory.meta.slug);
    loadHistory(memory).catch(showError);
  }

  let shown = null; // the memory in the panel

  function showMemory(memory) {
    shown = memory;
    const meta = memory.meta;
    $("memory-title").textContent = meta.title;
    const rows = [
      ["type", meta.type],
      ["slug", meta.slug],
      ["created", meta.created_at],
      ["updated", meta.updated_at],
      ["source", meta.source],
      ["scope", meta.scope_hash],
      ["state", meta.decay_state],
      ["tags", meta.tags.join(", ")],
      ["triggers", meta.triggers.join(", ")],
      ["category", meta.category],
      ["recalled", meta.recall_count ? meta.recall_count + "×" : ""],
      ["supersedes", meta.supersedes],
      ["entities", meta.observations],
      ["relations", meta.relations.length ? String(meta.relations.length) : ""],
      ["sensitive", memory.sensitive ? "yes" : ""],
    ];
    const list = $("memory-meta");
    list.replaceChildren();
    for (const [name, value] of rows) {
      if (value === null || value === undefined || value === "" || (Array.isArray(value) && !value.length)) {
        continue;
      }
      const dt = document.createElement("dt");
      dt.textContent = name;
      const dd = document.createElement("dd");
      dd.dataset.field = name;
      if (name === "entities") dd.append(...links(value, (id) => centre(id), (id) => splitId(id)[1]));
      else if (name === "supersedes") dd.append(...links(value, (s) => openMemory(s), (s) => s));
      else dd.textContent = String(value);
      list.append(dt, dd);
    }
    const entities = meta.observations.map((id) => ({ id, name: splitId(id)[1] }));
    $("memory-body").replaceChildren(window.memorydMarkdown.render(memory.body, entities));
    const forgotten = meta.decay_state === "forgotten";
    $("memory-forget").hidden = forgotten;
    $("memory-restore").hidden = meta.decay_state === "alive";
    $("memory-edit").hidden = true;
    $("memory-merge").hidden = true;
    $("memory").hidden = false;
    $("memory").dataset.slug = meta.slug;
    $("memory").dataset.state = meta.decay_state;
  }

  /** The audit records about the memory; a session's labelled parts come first. */
  async function loadHistory(memory) {
    const slug = memory.meta.slug;
    const records = await api("/v1/memories/" + encodeURIComponent(slug) + "/history");
    if (!shown || shown.meta.slug !== slug) return;
    const list = $("memory-timeline");
    list.replaceChildren();
    const session = memory.meta.type === "session";
    $("memory-timeline-title").textContent = session ? "Timeline of the session" : "History";
    if (session) {
      for (const step of window.memorydMarkdown.steps(memory.body)) {
        const li = element("li", "step");
        li.append(element("span", "label", step.label), " ", step.text);
        list.append(li);
      }
    }
    for (const record of records) {
      const li = element("li", "event " + record.event_type);
      li.dataset.event = record.event_type;
      const when = element("time", "when", record.ts.slice(0, 16).replace("T", " "));
      when.dateTime = record.ts;
      li.append(when, " ", element("span", "label", describeEvent(record)), " by " + record.actor);
      list.append(li);
    }
    if (!list.children.length) list.append(item("nothing recorded yet", "empty"));
  }

  const EVENT_WORDS = {
    record: "written",
    capture: "captured",
    update: "edited",
    archive: "forgotten",
    restore: "restored",
    merge: "merged",
    merged_into: "merged into another",
    decay: "decayed",
    enrich: "enriched",
    analyze: "scored",
    propose: "proposed for promotion",
    promote: "promoted",
    reject: "promotion rejected",
    supersede: "supersede decided",
    import: "imported",
    recover: "recovered after a crash",
  };

  function describeEvent(record) {
    return EVENT_WORDS[record.event_type] || record.event_type;
  }

  // -- edits: the same API calls as every client, audited as actor `page` -------------------
  function memoryPath(slug, suffix) {
    return "/v1/memories/" + encodeURIComponent(slug) + (suffix || "");
  }

  function words(text) {
    return text.split(",").map((w) => w.trim()).filter(Boolean);
  }

  function openEdit() {
    if (!shown) return;
    $("edit-title").value = shown.meta.title;
    $("edit-tags").value = shown.meta.tags.join(", ");
    $("edit-triggers").value = shown.meta.triggers.join(", ");
    $("memory-merge").hidden = true;
    $("memory-edit").hidden = false;
    $("edit-title").focus();
  }

  async function saveEdit() {
    const slug = shown.meta.slug;
    clearError();
    const memory = await api(
      memoryPath(slug),
      { title: $("edit-title").value, tags: words($("edit-tags").value), triggers: words($("edit-triggers").value) },
      "PATCH",
    );
    afterEdit(memory, "saved " + slug);
  }

  async function forget() {
    const slug = shown.meta.slug;
    clearError();
    afterEdit(await api(memoryPath(slug), undefined, "DELETE"), "forgot " + slug + " (Restore brings it back)");
  }

  async function restore() {
    const slug = shown.meta.slug;
    clearError();
    const result = await api(memoryPath(slug, "/restore"), {});
    afterEdit(await api(memoryPath(slug)), "restored " + slug + " (was " + result.from_state + ")");
  }

  async function merge() {
    const keep = shown.meta.slug;
    const drop = words($("merge-drop").value);
    if (!drop.length) return;
    clearError();
    const result = await api("/v1/merge", { keep, drop });
    afterEdit(await api(memoryPath(keep)), "merged " + result.dropped.join(", ") + " into " + keep);
    $("merge-drop").value = "";
  }

  function afterEdit(memory, text) {
    showMemory(memory);
    loadHistory(memory).catch(showError);
    setStatus(text);
    document.dispatchEvent(new CustomEvent("memoryd:changed", { detail: memory }));
  }

  /** Buttons separated by commas, each running `go` (errors shown). */
  function links(values, go, label) {
    const out = [];
    values.forEach((value, i) => {
      if (i) out.push(", ");
      const button = document.createElement("button");
      button.type = "button";
      button.textContent = label(value);
      button.title = value;
      button.addEventListener("click", () => go(value).catch(showError));
      out.push(button);
    });
    return out;
  }

  function closeMemory() {
    latest.memory++;
    shown = null;
    $("memory").hidden = true;
    delete $("memory").dataset.slug;
    remember("memory", null);
  }

  // -- review: supersede candidates ------------------------------------------------------
  async function loadCandidates() {
    const page = await api("/v1/supersedes/candidates?limit=100");
    const list = $("candidates");
    list.replaceChildren();
    $("candidates-count").textContent = page.items.length ? String(page.items.length) : "";
    if (!page.items.length) {
      list.append(item("No supersede candidate is waiting for a decision.", "empty"));
      return;
    }
    for (const row of page.items) list.append(candidateCard(row));
  }

  function candidateCard(row) {
    const li = element("li", "candidate");
    li.dataset.newer = row.newer;
    li.dataset.older = row.older;
    const pair = element("p", "pair");
    const open = (slug) => openMemory(slug);
    pair.append(...links([row.newer], open, (s) => s), " supersedes ", ...links([row.older], open, (s) => s), "?");
    const why = element("p", "reason", row.confidence.toFixed(2) + " · " + (row.reason || row.judge || ""));
    const actions = element("div", "actions");
    for (const [label, action] of [["Accept", "accept"], ["Reject", "reject"]]) {
      const button = element("button", "decide " + action, label);
      button.type = "button";
      button.addEventListener("click", () => decideSupersede(row, action).catch(showError));
      actions.append(button);
    }
    li.append(pair, why, actions);
    return li;
  }

  async function decideSupersede(row, action) {
    clearError();
    const path =
      "/v1/supersedes/" + encodeURIComponent(row.newer) + "/" + encodeURIComponent(row.older) + "/" + action;
    const decision = await api(path, { decided_by: "user" });
    setStatus(row.newer + " → " + row.older + ": " + decision.status);
    await loadCandidates();
  }

  // -- review: pending promotions ----------------------------------------------------------
  const LONG_TERM = ["decision", "preference", "fact", "playbook", "warning"];

  function element(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  async function countPending() {
    const page = await api("/v1/promotions?status=pending&limit=1000");
    $("review-count").textContent = page.items.length ? String(page.items.length) : "";
    return page.items;
  }

  async function openReview() {
    $("review").hidden = false;
    remember("review", "1");
    const list = $("promotions");
    const items = await countPending();
    list.replaceChildren();
    if (!items.length) list.append(item("No promotion is waiting for a decision.", "empty"));
    for (const promotion of items) list.append(promotionCard(promotion));
    $("review").dataset.loaded = String(items.length);
    await loadCandidates();
  }

  function closeReview() {
    $("review").hidden = true;
    delete $("review").dataset.loaded;
    remember("review", null);
  }

  function promotionCard(p) {
    const card = element("li", "promotion");
    card.dataset.id = String(p.id);
    const title = element("h3", "title", p.proposed_title);
    title.prepend(element("span", "kind", p.proposed_type), " ");
    const d = p.dura;
    const mean = (d.D + d.U + d.R + d.A) / 4;
    const scores = element(
      "p",
      "scores",
      `DURA D ${d.D.toFixed(2)} · U ${d.U.toFixed(2)} · R ${d.R.toFixed(2)} · A ${d.A.toFixed(2)}` +
        ` = ${mean.toFixed(2)} · scored by ${d.by || "unknown"}`,
    );
    const source = element("p", "source", "from the session ");
    const link = element("a", "source-link", p.source_title || p.source_slug);
    link.href = "#memory=" + encodeURIComponent(p.source_slug);
    link.addEventListener("click", (event) => {
      event.preventDefault();
      openMemory(p.source_slug).catch(showError);
    });
    source.append(link, " (" + p.source_slug + ")");
    if (p.source_missing_at) source.append(" — deleted since");
    const evidence = element("div", "evidence");
    for (const quote of p.evidence) evidence.append(element("blockquote", "", quote));
    const body = element("pre", "body", p.proposed_body);
    const outcome = element("p", "outcome");
    outcome.hidden = true;

    const edit = element("form", "edit");
    edit.hidden = true;
    const type = element("select", "edit-type");
    for (const value of LONG_TERM) {
      const option = element("option", "", value);
      option.value = value;
      option.selected = value === p.proposed_type;
      type.append(option);
    }
    const newTitle = element("input", "edit-title");
    newTitle.value = p.proposed_title;
    newTitle.maxLength = 500;
    const newBody = element("textarea", "edit-body");
    newBody.value = p.proposed_body;
    const save = element("button", "save", "Approve as edited");
    save.type = "submit";
    edit.append(type, newTitle, newBody, save);

    const reason = element("input", "reject-reason");
    reason.placeholder = "why reject (optional)";
    reason.maxLength = 2000;
    const approve = element("button", "approve", "Approve");
    const editButton = element("button", "edit-open", "Edit");
    const reject = element("button", "reject", "Reject");
    const buttons = [approve, editButton, reject];
    // a daemon in a team names the team project a shared scope is (none: personal, no team)
    const toTeam = p.team_project ? element("button", "approve-team", "Approve to the team") : null;
    if (toTeam) {
      toTeam.title = "approve, then share it with " + p.team_project + " with its supersedes chain";
      buttons.splice(1, 0, toTeam);
    }
    for (const button of buttons) button.type = "button";
    const actions = element("div", "actions");
    actions.append(...buttons, reason);

    const decided = (answer, text) => {
      card.classList.add("decided");
      card.dataset.status = answer.status;
      actions.remove();
      edit.remove();
      outcome.textContent = text;
      outcome.hidden = false;
      countPending().catch(showError);
    };
    const decide = async (path, payload, text) => {
      clearError();
      const answer = await api(`/v1/promotions/${p.id}/${path}`, payload);
      decided(answer, text(answer));
    };
    approve.addEventListener("click", () =>
      decide("promote", {}, (a) => "approved: written as " + a.promoted_slug).catch(showError),
    );
    if (toTeam) toTeam.addEventListener("click", () => promoteToTeam().catch(showError));
    /** The team's answer in the card: its copy's slug, or the refusal (the promotion may be
     * approved all the same, the memory then personal: the card says which). */
    const promoteToTeam = async () => {
      try {
        await decide(
          "promote",
          { team: true },
          (a) =>
            `approved: written as ${a.promoted_slug}, shared with ${p.team_project} as ` +
            a.team_slug,
        );
      } catch (exc) {
        if (!(exc instanceof ApiError)) throw exc;
        const now = await api(`/v1/promotions/${p.id}`);
        const refused =
          "not shared with the team: " + exc.message + (exc.hint ? " — " + exc.hint : "");
        if (now.status === "pending") {
          outcome.textContent = refused;
          outcome.hidden = false;
        } else {
          decided(now, refused);
        }
        card.dataset.team = "refused";
        return;
      }
      card.dataset.team = "shared";
    };
    editButton.addEventListener("click", () => {
      edit.hidden = !edit.hidden;
    });
    edit.addEventListener("submit", (event) => {
      event.preventDefault();
      decide(
        "promote",
        { type: type.value, title: newTitle.value, body: newBody.value },
        (a) => "approved as edited: written as " + a.promoted_slug,
      ).catch(showError);
    });
    reject.addEventListener("click", () =>
      decide("reject", { reason: reason.value || null }, () => "rejected").catch(showError),
    );
    card.append(title, scores, source, evidence, body, actions, edit, outcome);
    return card;
  }

  // -- start ------------------------------------------------------------------------------
  /** Set a graph control from a deep link; whether it changed. A value the control does not
   * offer leaves it as it is (its default on a page load). */
  function choose(control, value) {
    const select = $(control);
    if (value === null || value === select.value) return false;
    if (![...select.options].some((option) => option.value === value)) return false;
    select.value = value;
    return true;
  }

  /** Follow a deep link: `#entity=…&depth=…&cap=…&memory=…`, or the same as query parameters. */
  function follow() {
    const params = fragment();
    const query = new URLSearchParams(location.search);
    const entity = params.get("entity") || query.get("entity");
    const memory = params.get("memory") || query.get("memory");
    const depthChanged = choose("graph-depth", params.get("depth") || query.get("depth"));
    const capChanged = choose("graph-cap", params.get("cap") || query.get("cap"));
    if (params.get("review") === "1" && $("review").hidden) openReview().catch(showError);
    if (entity && (entity !== centred || depthChanged || capChanged)) centre(entity).catch(showError);
    if (memory && memory !== $("memory").dataset.slug) openMemory(memory).catch(showError);
  }

  function start() {
    takeToken();
    let timer = null;
    $("search-form").addEventListener("submit", (event) => {
      event.preventDefault();
      clearTimeout(timer);
      search($("search").value).catch(showError);
    });
    $("search").addEventListener("input", () => {
      clearTimeout(timer);
      timer = setTimeout(() => search($("search").value).catch(showError), SEARCH_DELAY_MS);
    });
    $("error-close").addEventListener("click", clearError);
    $("memory-close").addEventListener("click", closeMemory);
    $("review-open").addEventListener("click", () => openReview().catch(showError));
    $("review-close").addEventListener("click", closeReview);
    $("memory-edit-open").addEventListener("click", openEdit);
    $("edit-cancel").addEventListener("click", () => ($("memory-edit").hidden = true));
    $("memory-edit").addEventListener("submit", (event) => {
      event.preventDefault();
      saveEdit().catch(showError);
    });
    $("memory-forget").addEventListener("click", () => forget().catch(showError));
    $("memory-restore").addEventListener("click", () => restore().catch(showError));
    $("memory-merge-open").addEventListener("click", () => {
      $("memory-edit").hidden = true;
      $("memory-merge").hidden = false;
      $("merge-drop").focus();
    });
    $("merge-cancel").addEventListener("click", () => ($("memory-merge").hidden = true));
    $("memory-merge").addEventListener("submit", (event) => {
      event.preventDefault();
      merge().catch(showError);
    });
    // An entity named in a memory's text: centre the graph on it.
    $("memory-body").addEventListener("click", (event) => {
      const link = event.target.closest("a.entity-link");
      if (!link) return;
      event.preventDefault();
      centre(link.dataset.entity).catch(showError);
    });
    for (const control of ["graph-depth", "graph-cap"]) {
      $(control).addEventListener("change", () => {
        if (centred) centre(centred).catch(showError);
      });
    }
    window.addEventListener("hashchange", () => {
      takeToken();
      follow();
    });
    if (typeof cytoscape !== "function") {
      showError(new Error("cytoscape did not load (/static/vendor/cytoscape.min.js)"));
      return;
    }
    api("/v1/health")
      .then((health) => {
        if (!centred) setStatus("memoryd " + health.version);
      })
      .catch(showError);
    countPending().catch(() => {}); // the badge only; a refused call is shown by health
    follow();
  }

  // What home.js and trends.js share with this page.
  window.memorydPage = {
    api,
    showError,
    clearError,
    setStatus,
    remember,
    fragment,
    openMemory,
    closeMemory,
    openEdit,
    forget: () => (shown && shown.meta.decay_state !== "forgotten" ? forget() : Promise.resolve()),
    centre,
    centred: () => centred,
    restyle,
    element,
    item,
    kind,
    splitId,
    search,
  };

  start();
})();
