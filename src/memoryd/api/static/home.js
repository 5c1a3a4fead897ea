/* The graph page's home view: the memories of the chosen project, newest first, with
 * full-text search and filters (type, state, creation days); the project switcher; the live
 * feed of new captures; keyboard navigation; the light and dark themes.
 *
 * Data: `/v1/projects`, `/v1/page/memories` (the filters are its query parameters; with words
 * the best hits come first), and `/v1/events`, server-sent events read with fetch (an
 * EventSource cannot send the bearer token): each new or changed memory, from the audit log.
 * The stream ends now and then (and when the daemon stops); the page reconnects with the last
 * id it saw, so nothing is missed in between.
 *
 * For tests: `#home[data-loaded]` is how many rows the last load drew, `#feed-status[data-state]`
 * is `live` while the stream is open, each row and feed item has `data-slug`.
 */
(function () {
  "use strict";

  const page = window.memorydPage;
  const $ = (id) => document.getElementById(id);
  const PROJECT_KEY = "memoryd.project";
  const THEME_KEY = "memoryd.theme";
  const PAGE_SIZE = 50;
  const FEED_MAX = 30;
  const SEARCH_DELAY_MS = 250;
  const TOKEN_KEY = "memoryd.token";

  let project = ""; // a scope hash, or "" for all projects
  let projects = [];
  let offset = 0;
  let latest = 0; // drop answers that arrive out of order
  let selected = -1;
  let feedAbort = null;

  // -- the home list ------------------------------------------------------------------------
  function filters() {
    const q = $("search").value.trim();
    return {
      scope: project,
      type: $("filter-type").value,
      state: $("filter-state").value,
      since: $("filter-since").value,
      until: $("filter-until").value,
      q,
    };
  }

  async function loadHome(more) {
    const seq = ++latest;
    const wanted = filters();
    const params = new URLSearchParams({ limit: String(PAGE_SIZE), offset: String(more ? offset : 0) });
    for (const [key, value] of Object.entries(wanted)) if (value) params.set(key, value);
    const answer = await page.api("/v1/page/memories?" + params);
    if (seq !== latest) return;
    const list = $("home-list");
    if (!more) {
      list.replaceChildren();
      selected = -1;
    }
    for (const memory of answer.items) list.append(row(memory));
    offset = answer.next_offset || 0;
    $("home-more").hidden = answer.next_offset === null;
    if (!list.children.length) list.append(page.item(emptyText(wanted), "empty"));
    const shown = list.querySelectorAll("li[data-slug]").length;
    let summary = `${shown} of ${answer.total}` + (wanted.q ? " hits" : " memories");
    if (answer.window_reached) summary += " (the first hits only: add words to narrow)";
    if (answer.hidden) summary += ` · ${answer.hidden} hidden in sensitive projects`;
    $("home-summary").textContent = summary;
    $("home").dataset.loaded = String(shown);
  }

  function emptyText(wanted) {
    if (wanted.q) return "No memory matches " + JSON.stringify(wanted.q) + " with these filters.";
    if (wanted.type || wanted.state || wanted.since || wanted.until) return "No memory matches these filters.";
    return "No memory yet in this project: an agent's sessions appear here as they are captured.";
  }

  function when(iso) {
    return String(iso || "").slice(0, 16).replace("T", " ");
  }

  function row(memory, fresh) {
    const li = page.element("li", memory.decay_state + (fresh ? " fresh" : ""));
    li.dataset.slug = memory.slug;
    li.dataset.state = memory.decay_state;
    li.tabIndex = 0;
    fillRow(li, memory);
    li.addEventListener("click", () => open(li));
    return li;
  }

  function fillRow(li, memory) {
    const date = page.element("time", "when", when(memory.created_at));
    date.dateTime = memory.created_at;
    const title = page.element("span", "title", memory.title || "(a sensitive memory)");
    const head = page.element("div", "head");
    head.append(title, page.kind(memory.type));
    if (memory.decay_state !== "alive") head.append(page.element("span", "state", memory.decay_state.replace("_", "-")));
    const sub = page.element("div", "sub");
    const parts = [];
    if (!project) parts.push(projectName(memory.scope_hash));
    if (memory.tags && memory.tags.length) parts.push("#" + memory.tags.join(" #"));
    if (memory.recall_count) parts.push("recalled " + memory.recall_count + "×");
    if (memory.source) parts.push(memory.source);
    sub.textContent = parts.join(" · ");
    li.replaceChildren(date, head, sub);
    if (memory.snippet) li.append(page.element("div", "snippet", memory.snippet));
    li.className = li.className.replace(/\b(alive|dim|soft_forgotten|forgotten)\b/g, "").trim() + " " + memory.decay_state;
    li.dataset.state = memory.decay_state;
  }

  function projectName(hash) {
    const found = projects.find((p) => p.scope_hash === hash);
    return found ? found.name : hash;
  }

  function rows() {
    return [...$("home-list").querySelectorAll("li[data-slug]")];
  }

  function open(li) {
    select(rows().indexOf(li));
    page.openMemory(li.dataset.slug).catch(page.showError);
  }

  function select(index) {
    const all = rows();
    if (!all.length) return;
    selected = Math.max(0, Math.min(all.length - 1, index));
    all.forEach((li, i) => li.classList.toggle("selected", i === selected));
    all[selected].focus();
    all[selected].scrollIntoView({ block: "nearest" });
  }

  function showHome() {
    $("home").hidden = false;
    for (const key of ["entity", "depth", "cap"]) page.remember(key, null);
    page.remember("home", "1");
    if (!$("home").dataset.loaded) loadHome(false).catch(page.showError);
  }

  // -- projects -----------------------------------------------------------------------------
  async function loadProjects() {
    projects = await page.api("/v1/projects");
    const select = $("project");
    select.replaceChildren(new Option("All projects", ""));
    for (const p of projects) {
      const option = new Option(`${p.name} (${p.memories})`, p.scope_hash);
      option.title = p.path;
      select.append(option);
    }
    const known = (hash) => hash && projects.some((p) => p.scope_hash === hash);
    const asked = page.fragment().get("project");
    let stored = null;
    try {
      stored = localStorage.getItem(PROJECT_KEY);
    } catch (_) {
      stored = null;
    }
    if (asked !== null && (asked === "" || known(asked))) project = asked;
    else if (stored !== null && (stored === "" || known(stored))) project = stored;
    else project = projects.length ? projects[0].scope_hash : "";
    select.value = project;
  }

  function switchProject(hash) {
    project = hash;
    try {
      localStorage.setItem(PROJECT_KEY, hash);
    } catch (_) {
      /* private mode: the choice lasts this page */
    }
    page.remember("project", hash || null);
    loadHome(false).catch(page.showError);
    document.dispatchEvent(new CustomEvent("memoryd:project", { detail: hash }));
  }

  // -- the live feed --------------------------------------------------------------------------
  function setFeedState(state, text) {
    $("feed-status").dataset.state = state;
    $("feed-status").textContent = text;
  }

  async function feed() {
    let after = null;
    let wait = 1000;
    for (;;) {
      feedAbort = new AbortController();
      const headers = { Accept: "text/event-stream" };
      const token = sessionStorage.getItem(TOKEN_KEY);
      if (token) headers.Authorization = "Bearer " + token;
      try {
        const response = await fetch("/v1/events" + (after !== null ? "?after=" + after : ""), {
          headers,
          cache: "no-store",
          signal: feedAbort.signal,
        });
        if (response.status === 401) {
          setFeedState("off", "not live");
          return; // the page's other calls say what to do
        }
        if (!response.ok || !response.body) throw new Error("HTTP " + response.status);
        setFeedState("live", "live");
        wait = 1000;
        const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
        let buffer = "";
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buffer += value;
          let end;
          while ((end = buffer.indexOf("\n\n")) >= 0) {
            const seen = message(buffer.slice(0, end));
            if (seen !== null) after = seen;
            buffer = buffer.slice(end + 2);
          }
        }
      } catch (exc) {
        if (feedAbort.signal.aborted) return;
        wait = Math.min(wait * 2, 15000);
      }
      setFeedState("connecting", "reconnecting");
      await new Promise((resolve) => setTimeout(resolve, wait));
    }
  }

  /** One server-sent event; returns its id (the audit seq) when it has one. */
  function message(block) {
    let id = null;
    let event = "message";
    const data = [];
    for (const line of block.split("\n")) {
      if (!line || line.startsWith(":")) continue;
      const colon = line.indexOf(":");
      const field = colon < 0 ? line : line.slice(0, colon);
      const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
      if (field === "id" && /^\d+$/.test(value)) id = Number(value);
      else if (field === "event") event = value;
      else if (field === "data") data.push(value);
    }
    if (event === "memory" && data.length) onFeed(JSON.parse(data.join("\n")));
    return id;
  }

  function onFeed(event) {
    const list = $("feed");
    const empty = list.querySelector(".empty");
    if (empty) empty.remove();
    const li = page.element("li", event.kind);
    li.dataset.slug = event.slug || "";
    li.dataset.event = event.event_type;
    li.append(page.element("span", "when", when(event.ts).slice(11)));
    const what = event.memory ? event.memory.title || "(a sensitive memory)" : event.slug;
    const link = page.element("button", "", what);
    link.type = "button";
    link.title = event.slug || "";
    if (event.slug) link.addEventListener("click", () => page.openMemory(event.slug).catch(page.showError));
    li.append(link, " ", page.element("span", "kind", event.event_type));
    list.prepend(li);
    while (list.children.length > FEED_MAX) list.lastChild.remove();
    $("feed-count").textContent = String(list.children.length);
    if (!event.memory) return;
    const existing = $("home-list").querySelector(`li[data-slug="${CSS.escape(event.memory.slug)}"]`);
    if (existing) fillRow(existing, event.memory);
    else if (event.kind === "new" && matches(event.memory)) {
      const list = $("home-list");
      const none = list.querySelector(".empty");
      if (none) none.remove();
      list.prepend(row(event.memory, true));
      $("home").dataset.loaded = String(rows().length);
    }
  }

  function matches(memory) {
    const f = filters();
    const day = String(memory.created_at).slice(0, 10);
    return (
      !f.q &&
      (!f.scope || memory.scope_hash === f.scope) &&
      (!f.type || memory.type === f.type) &&
      (!f.state || memory.decay_state === f.state) &&
      (!f.since || day >= f.since) &&
      (!f.until || day <= f.until)
    );
  }

  // -- themes ---------------------------------------------------------------------------------
  function toggleTheme() {
    const next = document.documentElement.dataset.theme === "dark" ? "light" : "dark";
    document.documentElement.dataset.theme = next;
    try {
      localStorage.setItem(THEME_KEY, next);
    } catch (_) {
      /* the choice lasts this page */
    }
    page.restyle();
    document.dispatchEvent(new CustomEvent("memoryd:theme", { detail: next }));
  }

  // -- the keyboard ---------------------------------------------------------------------------
  function typing(target) {
    return target.closest && target.closest("input, textarea, select, [contenteditable]");
  }

  function visibleRows() {
    if (!$("home").hidden) return rows();
    return [...$("memories").querySelectorAll(".memory-link")];
  }

  function onKey(event) {
    if (event.ctrlKey || event.metaKey || event.altKey) return;
    if (event.key === "Escape") {
      escape();
      return;
    }
    if (typing(event.target)) return;
    const key = event.key;
    const all = visibleRows();
    const at = all.indexOf(document.activeElement);
    const actions = {
      "/": () => $("search").focus(),
      j: () => move(all, at, 1),
      ArrowDown: () => move(all, at, 1),
      k: () => move(all, at, -1),
      ArrowUp: () => move(all, at, -1),
      h: showHome,
      g: () => page.centred() && page.centre(page.centred()).catch(page.showError),
      r: () => $("review-open").click(),
      t: () => $("trends-open").click(),
      p: () => $("project").focus(),
      d: toggleTheme,
      e: () => !$("memory").hidden && page.openEdit(),
      f: () => !$("memory").hidden && page.forget().catch(page.showError),
      "?": () => ($("keys").hidden = !$("keys").hidden),
    };
    if (key === "Enter" && at >= 0) {
      event.preventDefault();
      all[at].click();
      return;
    }
    const action = actions[key];
    if (!action) return;
    event.preventDefault();
    action();
  }

  function move(all, at, step) {
    if (!all.length) return;
    const next = at < 0 ? (step > 0 ? 0 : all.length - 1) : Math.max(0, Math.min(all.length - 1, at + step));
    if (!$("home").hidden) select(next);
    else all[next].focus();
  }

  function escape() {
    if (!$("keys").hidden) $("keys").hidden = true;
    else if (!$("memory-edit").hidden) $("memory-edit").hidden = true;
    else if (!$("memory-merge").hidden) $("memory-merge").hidden = true;
    else if (document.activeElement && typing(document.activeElement)) document.activeElement.blur();
    else if (!$("memory").hidden) page.closeMemory();
    else if (!$("trends").hidden) $("trends-close").click();
    else if (!$("review").hidden) $("review-close").click();
  }

  // -- start ----------------------------------------------------------------------------------
  function start() {
    let timer = null;
    const reload = () => loadHome(false).catch(page.showError);
    $("search").addEventListener("input", () => {
      clearTimeout(timer);
      timer = setTimeout(reload, SEARCH_DELAY_MS);
    });
    $("search-form").addEventListener("submit", () => {
      clearTimeout(timer);
      if ($("home").hidden && !$("search").value.trim()) return;
      $("home").hidden = false;
      reload();
    });
    for (const id of ["filter-type", "filter-state", "filter-since", "filter-until"]) {
      $(id).addEventListener("change", reload);
    }
    $("filters-clear").addEventListener("click", () => {
      $("filters").reset();
      reload();
    });
    $("home-more").addEventListener("click", () => loadHome(true).catch(page.showError));
    $("home-open").addEventListener("click", (event) => {
      event.preventDefault();
      showHome();
    });
    $("project").addEventListener("change", () => switchProject($("project").value));
    $("theme-toggle").addEventListener("click", toggleTheme);
    $("keys-open").addEventListener("click", () => ($("keys").hidden = !$("keys").hidden));
    $("keys-close").addEventListener("click", () => ($("keys").hidden = true));
    document.addEventListener("keydown", onKey);
    document.addEventListener("memoryd:changed", (event) => {
      const memory = event.detail;
      const li = $("home-list").querySelector(`li[data-slug="${CSS.escape(memory.meta.slug)}"]`);
      if (li) fillRow(li, { ...memory.meta, snippet: "" });
    });
    window.addEventListener("pagehide", () => feedAbort && feedAbort.abort());
    if (page.fragment().get("entity") || new URLSearchParams(location.search).get("entity")) {
      $("home").hidden = true;
    }
    setFeedState("connecting", "connecting");
    loadProjects()
      .then(() => {
        reload();
        feed();
      })
      .catch(page.showError);
  }

  page.project = () => project;
  page.showHome = showHome;
  start();
})();
