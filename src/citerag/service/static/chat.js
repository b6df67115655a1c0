"use strict";
// The page's conversation: turns asked in a conversation (a follow-up is searched with the earlier turns), answers
// streamed as they are written, [n] opening a side pane at the quote, conversations listed and resumed (the open one
// is in the URL's #conversation=ID, so a reload resumes it). Server text only through Text nodes (ctx.el).
window.CiteragChat = (ctx) => {
  const { $, el, api, safeHref, colPath, showError, reportError, locatorText, markersOf, fmt } = ctx;
  let current = null; // the open conversation's id
  const texts = new Map(); // document id -> its canonical text as code points (for the pane)

  const hashId = () => (/^#conversation=([0-9a-f]{32})$/.exec(location.hash) || [])[1] || null;
  function setCurrent(id) {
    current = id;
    history.replaceState(null, "", id ? `#conversation=${id}` : location.pathname + location.search);
    for (const b of document.querySelectorAll("#conversations button")) {
      b.setAttribute("aria-current", b.dataset.id === id ? "true" : "false");
    }
  }

  // ---- a turn ----------------------------------------------------------------
  function sourceRow(turn, c) {
    const href = safeHref(c.href);
    const name = c.document_name || `document ${c.document_id}`;
    const q = Array.from(c.quote || "");
    const long = q.length > 300;
    const open = el("button", { type: "button", class: "link", "aria-label": `Show source ${c.index} beside the answer` },
      String(c.index));
    open.addEventListener("click", () => openPane(c));
    return el("tr", { id: `t${turn}-source-${c.index}` },
      el("th", { scope: "row", class: "num" }, open),
      el("td", {}, href ? el("a", { href, "data-testid": `source-link-${c.index}` }, name) : name),
      el("td", {}, c.section || ""),
      el("td", {}, locatorText(c)),
      el("td", { class: "quote", title: long ? c.quote : null }, long ? q.slice(0, 300).join("").trimEnd() + "…" : c.quote || ""),
      el("td", { class: "num distance" }, fmt(c.cosine_distance)));
  }

  function answerBlock(turn, a) {
    if (a.refused) {
      const r = a.refusal || {};
      const detail = typeof r.best_distance === "number"
        ? `best distance ${fmt(r.best_distance)} ≥ threshold ${fmt(r.threshold)}`
        : `nothing indexed is close (threshold ${fmt(r.threshold)})`;
      return el("div", { class: "refusal", role: "status" },
        el("h3", {}, "No answer"), el("p", {}, a.answer || ""), r.threshold !== undefined ? el("p", { class: "detail" }, detail) : null);
    }
    const cites = Array.isArray(a.citations) ? a.citations : [];
    const byIndex = new Map(cites.map((c) => [c.index, c]));
    const chars = Array.from(a.answer || "");
    const p = el("p", { class: "answer-text" });
    let pos = 0;
    for (const m of markersOf(a)) {
      if (m.start < pos || m.end <= m.start || m.end > chars.length) continue;
      p.append(chars.slice(pos, m.start).join(""));
      const label = chars.slice(m.start, m.end).join("");
      const c = byIndex.get(m.index);
      if (c) {
        const link = el("a", {
          class: "marker", href: safeHref(c.href) || `#t${turn}-source-${m.index}`, "data-testid": `marker-${m.index}`,
          "aria-label": `Source ${m.index}: ${c.document_name || ""}, ${locatorText(c)}`,
        }, label);
        // The pane first; the link still opens the original (middle click, a new tab, no script).
        link.addEventListener("click", (ev) => {
          if (ev.button !== 0 || ev.ctrlKey || ev.metaKey || ev.shiftKey) return;
          ev.preventDefault();
          openPane(c);
        });
        p.append(link);
      } else {
        p.append(label);
      }
      pos = m.end;
    }
    p.append(chars.slice(pos).join(""));
    const table = el("table", { class: "sources" },
      el("caption", {}, "Sources"),
      el("thead", {}, el("tr", {}, ...["#", "Document", "Section", "Locator", "Quote", "Distance"].map(
        (h) => el("th", { scope: "col", class: { Quote: "quote", Distance: "distance" }[h] || null }, h)))),
      el("tbody", {}, ...cites.map((c) => sourceRow(turn, c))));
    return el("div", { class: "answer" }, p,
      a.generator ? el("p", { class: "meta" }, `generator: ${a.generator}`) : null,
      cites.length ? el("div", { class: "table-wrap" }, table) : null);
  }

  function searched(query) {
    return el("details", { class: "searched" }, el("summary", {}, "Searched for"), el("p", { class: "query" }, query || ""));
  }

  // Feedback on an answer (kept with its trace): helpful or not, and optionally which source was the right one.
  function feedbackBar(n, a) {
    if (!a.trace_id) return null;
    const cites = Array.isArray(a.citations) ? a.citations : [];
    const pick = cites.length ? el("select", { "aria-label": "Which source answered it", "data-testid": `t${n}-right-source` },
      el("option", { value: "" }, "Right source: not said"),
      ...cites.map((c) => el("option", { value: String(c.index) }, `[${c.index}] ${c.document_name || ""}`)),
      el("option", { value: "none" }, "None of them")) : null;
    const status = el("span", { class: "meta", role: "status" });
    const send = async (helpful) => {
      const body = { helpful };
      if (pick && pick.value === "none") body.none_right = true;
      else if (pick && pick.value) body.source = Number(pick.value);
      try {
        await api(`${colPath()}/answers/${a.trace_id}/feedback`, { method: "POST", json: body });
      } catch (e) {
        status.textContent = e.status === 404 ? "This answer's trace is no longer kept." : e.message;
        return;
      }
      for (const b of bar.querySelectorAll("button, select")) b.disabled = true;
      status.textContent = `Thanks: kept as ${helpful ? "helpful" : "not helpful"}.`;
    };
    const yes = el("button", { type: "button", class: "small", "data-testid": `t${n}-helpful` }, "Helpful");
    const no = el("button", { type: "button", class: "small", "data-testid": `t${n}-unhelpful` }, "Not helpful");
    yes.addEventListener("click", () => send(true));
    no.addEventListener("click", () => send(false));
    const bar = el("div", { class: "feedback", role: "group", "aria-label": "Feedback on this answer" }, pick, yes, no, status);
    return bar;
  }

  function turnItem(n, question) {
    const li = el("li", { class: "turn", "data-turn": String(n) },
      el("p", { class: "question" }, el("span", { class: "visually-hidden" }, "You asked: "), question),
      el("div", { class: "reply", "aria-busy": "true" }, el("p", { class: "answer-text writing" })));
    $("thread").append(li);
    return li;
  }

  function finish(li, a, query) {
    const n = Number(li.dataset.turn);
    const reply = li.querySelector(".reply");
    reply.removeAttribute("aria-busy");
    reply.replaceChildren(answerBlock(n, a), searched(query), feedbackBar(n, a) || "");
  }

  // ---- asking: the answer's events as they come --------------------------------
  async function* events(res) {
    const reader = res.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer = (buffer + decoder.decode(value, { stream: true })).replace(/\r\n/g, "\n");
      let cut;
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        const block = buffer.slice(0, cut);
        buffer = buffer.slice(cut + 2);
        let kind = "message";
        const data = [];
        for (const line of block.split("\n")) {
          if (line.startsWith("event:")) kind = line.slice(6).trim();
          else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
        }
        if (data.length) yield [kind, JSON.parse(data.join("\n"))];
      }
    }
  }

  // The "Search only" choices, as the API's `filters` (none chosen: no filters).
  function filters() {
    const chosen = {};
    for (const [key, id] of [["type", "filter-type"], ["source", "filter-source"], ["tags", "filter-tag"]]) {
      const value = document.getElementById(id).value;
      if (value) chosen[key] = value;
    }
    return Object.keys(chosen).length ? { filters: chosen } : {};
  }

  async function ask(question) {
    const n = document.querySelectorAll("#thread .turn").length + 1;
    const url = current ? `${colPath()}/conversations/${current}` : `${colPath()}/conversations`;
    const res = await fetch(url, {
      method: "POST", credentials: "same-origin",
      headers: { "Content-Type": "application/json", Accept: "text/event-stream" },
      body: JSON.stringify({ question, stream: true, ...filters() }),
    });
    if (!res.ok) {
      let data = null;
      try { data = await res.json(); } catch (e) { /* not JSON */ }
      const err = new Error((data && data.error) || `Request failed (HTTP ${res.status}).`);
      err.status = res.status;
      if (res.status === 401) ctx.showKeyForm(err.message);
      throw err;
    }
    const li = turnItem(n, question);
    const writing = li.querySelector(".writing");
    let query = question;
    for await (const [kind, data] of events(res)) {
      if (kind === "conversation") {
        query = data.query;
        if (data.id !== current) { setCurrent(data.id); }
      } else if (kind === "delta") {
        writing.append(data.text || "");
      } else if (kind === "final") {
        finish(li, data, query);
      } else if (kind === "error") {
        finish(li, { refused: true, answer: `The answer failed: ${data.error}`, refusal: {} }, query);
        showError(data.error);
      }
    }
    loadList();
  }

  // ---- the side pane -------------------------------------------------------------
  async function openPane(c) {
    const pane = $("pane");
    pane.hidden = false;
    $("pane-where").textContent = [c.document_name, c.section, locatorText(c)].filter(Boolean).join(" · ");
    const href = safeHref(c.href);
    $("pane-original").hidden = !href;
    if (href) $("pane-original").setAttribute("href", href);
    const pre = $("pane-text");
    pre.replaceChildren("Loading…");
    try {
      if (!texts.has(c.document_id)) {
        const res = await fetch(`${colPath()}/documents/${encodeURIComponent(c.document_id)}/text`,
          { credentials: "same-origin", headers: { Accept: "text/plain" } });
        if (!res.ok) throw new Error(`The source's text could not be read (HTTP ${res.status}).`);
        texts.set(c.document_id, Array.from(await res.text()));
      }
    } catch (e) {
      pre.replaceChildren(e.message);
      return;
    }
    const chars = texts.get(c.document_id);
    const from = Math.max(0, c.start - 600);
    const to = Math.min(chars.length, c.end + 600);
    const mark = el("mark", { id: "pane-quote", tabindex: "-1" }, chars.slice(c.start, c.end).join(""));
    pre.replaceChildren((from > 0 ? "…" : "") + chars.slice(from, c.start).join(""), mark,
      chars.slice(c.end, to).join("") + (to < chars.length ? "…" : ""));
    // Scroll the pane alone (scrollIntoView would move the page too, away from the answer being read).
    pane.scrollTop = Math.max(0, mark.offsetTop - pane.offsetTop - pane.clientHeight / 3);
    $("pane-close").focus({ preventScroll: true });
  }

  // ---- conversations: listed, resumed ----------------------------------------------
  async function loadList() {
    let list;
    try { list = (await api(`${colPath()}/conversations`)).conversations || []; } catch (e) { return reportError(e); }
    $("conversations").replaceChildren(...list.map((c) => {
      const b = el("button", { type: "button", class: "conversation", "data-id": c.id,
        "aria-current": c.id === current ? "true" : "false" }, c.title, el("span", { class: "meta" }, ` · ${c.turns}`));
      b.addEventListener("click", () => resume(c.id));
      return el("li", {}, b);
    }));
    if (!list.length) $("conversations").append(el("li", { class: "empty" }, "None yet."));
  }

  async function resume(id) {
    let found;
    try { found = await api(`${colPath()}/conversations/${id}`); } catch (e) {
      if (e.status === 404) { setCurrent(null); reset(false); return; }
      return reportError(e);
    }
    $("thread").replaceChildren();
    $("pane").hidden = true;
    setCurrent(id);
    for (const t of found.turns) finish(turnItem(t.n, t.question), t, t.query);
    $("question").focus();
  }

  function reset(keepHash) {
    $("thread").replaceChildren();
    $("pane").hidden = true;
    texts.clear();
    if (!keepHash) setCurrent(null);
  }

  $("new-conversation").addEventListener("click", () => { reset(false); showError(""); $("question").focus(); });
  $("pane-close").addEventListener("click", () => { $("pane").hidden = true; });

  return {
    ask,
    // A collection was picked: its conversations, and the one in the URL if it is there.
    opened() {
      const id = hashId();
      reset(true);
      loadList();
      if (id) resume(id); else setCurrent(null);
    },
  };
};
