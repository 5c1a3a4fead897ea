/* Markdown for memory bodies, built as DOM nodes: no HTML is ever parsed.
 *
 * Memory text comes from agents and from whatever they read, so it may hold `<script>`,
 * `<img onerror=…>` or `[x](javascript:…)`. Every piece of it goes into the page through
 * textContent; the only attributes set are an http(s)/mailto `href` and the entity links'
 * own `href="#entity=…"`. The CSP (no inline script) is the second wall.
 *
 * Blocks: ATX headings, fenced code, block quotes, - * + and 1. lists, rules, paragraphs
 * (single newlines are soft breaks). Inline: `code`, **strong**, *em* / _em_, [text](url),
 * bare http(s) URLs, and the names of the memory's entities as links to the entity view.
 *
 * `window.memorydMarkdown.render(text, entities)` returns a DocumentFragment; `entities` is a
 * list of {id, name}. `steps(text)` returns a session body's labelled parts, in order, for its
 * timeline: `**Asked:** …` paragraphs and `## Heading` sections.
 */
(function () {
  "use strict";

  const SAFE_URL = /^(https?:\/\/|mailto:)/i;
  const INLINE = /(`+)([\s\S]*?[^`])\1(?!`)|\*\*([^*]+)\*\*|__([^_]+)__|\*([^*\s][^*]*)\*|\b_([^_\s][^_]*)_\b|\[([^\]]+)\]\(([^)\s]+)\)|(https?:\/\/[^\s<>()]+[^\s<>().,;:!?'"])/;

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function escapeRegExp(text) {
    return text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
  }

  /** A matcher for the entity names in plain text (longest first, whole words only). */
  function entityMatcher(entities) {
    const named = (entities || []).filter((e) => e.name && e.name.length > 1);
    if (!named.length) return null;
    const byName = new Map(named.map((e) => [e.name.toLowerCase(), e.id]));
    const names = [...byName.keys()].sort((a, b) => b.length - a.length).map(escapeRegExp);
    return { re: new RegExp("(?<![\\p{L}\\p{N}_])(" + names.join("|") + ")(?![\\p{L}\\p{N}_])", "iu"), byName };
  }

  function appendText(parent, text, matcher) {
    if (!matcher) {
      parent.append(text);
      return;
    }
    let rest = text;
    while (rest) {
      const found = matcher.re.exec(rest);
      if (!found) break;
      if (found.index) parent.append(rest.slice(0, found.index));
      const id = matcher.byName.get(found[1].toLowerCase());
      const link = el("a", "entity-link", found[1]);
      link.href = "#" + new URLSearchParams({ entity: id });
      link.dataset.entity = id;
      parent.append(link);
      rest = rest.slice(found.index + found[1].length);
    }
    if (rest) parent.append(rest);
  }

  function inline(parent, text, matcher) {
    let rest = text;
    while (rest) {
      const m = INLINE.exec(rest);
      if (!m) break;
      if (m.index) appendText(parent, rest.slice(0, m.index), matcher);
      if (m[2] !== undefined) parent.append(el("code", "", m[2]));
      else if (m[3] !== undefined || m[4] !== undefined) {
        const strong = el("strong");
        inline(strong, m[3] !== undefined ? m[3] : m[4], matcher);
        parent.append(strong);
      } else if (m[5] !== undefined || m[6] !== undefined) {
        const em = el("em");
        inline(em, m[5] !== undefined ? m[5] : m[6], matcher);
        parent.append(em);
      } else if (m[7] !== undefined) {
        if (SAFE_URL.test(m[8])) {
          const a = el("a", "external");
          a.href = m[8];
          a.rel = "noopener noreferrer";
          a.target = "_blank";
          inline(a, m[7], null);
          parent.append(a);
        } else {
          parent.append(m[0]); // a javascript: or relative link stays text
        }
      } else if (m[9] !== undefined) {
        const a = el("a", "external", m[9]);
        a.href = m[9];
        a.rel = "noopener noreferrer";
        a.target = "_blank";
        parent.append(a);
      }
      rest = rest.slice(m.index + m[0].length);
    }
    if (rest) appendText(parent, rest, matcher);
  }

  const LIST_ITEM = /^(\s*)([-*+]|\d+[.)])\s+(.*)$/;

  function render(text, entities) {
    const matcher = entityMatcher(entities);
    const root = document.createDocumentFragment();
    const lines = String(text || "").replace(/\r\n?/g, "\n").split("\n");
    let i = 0;
    let paragraph = [];
    const flush = () => {
      if (!paragraph.length) return;
      const p = el("p");
      inline(p, paragraph.join(" "), matcher);
      root.append(p);
      paragraph = [];
    };
    while (i < lines.length) {
      const line = lines[i];
      const fence = /^\s*(```+|~~~+)\s*([\w+-]*)/.exec(line);
      if (fence) {
        flush();
        const code = [];
        i++;
        while (i < lines.length && !lines[i].trim().startsWith(fence[1])) code.push(lines[i++]);
        i++;
        const pre = el("pre");
        const inner = el("code", "", code.join("\n"));
        if (fence[2]) inner.dataset.lang = fence[2];
        pre.append(inner);
        root.append(pre);
        continue;
      }
      const heading = /^(#{1,6})\s+(.*?)\s*#*\s*$/.exec(line);
      if (heading) {
        flush();
        const h = el("h" + Math.min(6, heading[1].length + 2));
        inline(h, heading[2], matcher);
        root.append(h);
        i++;
        continue;
      }
      if (/^\s*([-*_])(\s*\1){2,}\s*$/.test(line)) {
        flush();
        root.append(el("hr"));
        i++;
        continue;
      }
      if (/^\s*>/.test(line)) {
        flush();
        const quoted = [];
        while (i < lines.length && /^\s*>/.test(lines[i])) quoted.push(lines[i++].replace(/^\s*>\s?/, ""));
        const quote = el("blockquote");
        quote.append(render(quoted.join("\n"), entities));
        root.append(quote);
        continue;
      }
      const item = LIST_ITEM.exec(line);
      if (item) {
        flush();
        const ordered = /\d/.test(item[2]);
        const list = el(ordered ? "ol" : "ul");
        while (i < lines.length) {
          const m = LIST_ITEM.exec(lines[i]);
          if (!m) {
            // a continuation line of the item before (indented), else the list ends
            if (lines[i].trim() && /^\s{2,}/.test(lines[i]) && list.lastChild) {
              list.lastChild.append(" ");
              inline(list.lastChild, lines[i].trim(), matcher);
              i++;
              continue;
            }
            break;
          }
          const li = el("li");
          inline(li, m[3], matcher);
          list.append(li);
          i++;
        }
        root.append(list);
        continue;
      }
      if (!line.trim()) {
        flush();
        i++;
        continue;
      }
      paragraph.push(line.trim());
      i++;
    }
    flush();
    return root;
  }

  /** A session body's labelled parts in order: [{label, text}] (text: the first 200 chars). */
  function steps(text) {
    const out = [];
    let current = null;
    for (const line of String(text || "").split("\n")) {
      const bold = /^\s*\*\*([^*]{1,40}?):?\*\*:?\s*(.*)$/.exec(line);
      const heading = /^#{1,6}\s+(.{1,60}?)\s*$/.exec(line);
      if (bold || heading) {
        current = { label: (bold ? bold[1] : heading[1]).replace(/:$/, ""), text: bold ? bold[2] : "" };
        out.push(current);
      } else if (current && line.trim()) {
        current.text += (current.text ? " " : "") + line.trim();
      }
    }
    for (const step of out) {
      step.text = step.text.replace(/\*\*|`/g, "");
      if (step.text.length > 200) step.text = step.text.slice(0, 199) + "…";
    }
    return out;
  }

  window.memorydMarkdown = { render, steps };
})();
