"use strict";
// Canonical-text view: /v1/collections/{c}/documents/{id}/view#char=a,b
// (RFC 5147; offsets in Unicode code points). Text only via Text nodes.
(() => {
  const $ = (id) => document.getElementById(id);
  const docUrl = new URL(".", location.href).pathname.replace(/\/+$/, "");
  const textUrl = new URL("text", location.href).pathname;
  let chars = null; // the canonical text as an array of code points
  let full = "";

  function safeHref(h) {
    try { return h && new URL(h, location.href).origin === location.origin ? h : null; } catch (e) { return null; }
  }

  async function get(url, json) {
    const res = await fetch(url, {
      credentials: "same-origin",
      headers: { Accept: json ? "application/json" : "text/plain" },
    });
    if (!res.ok) {
      let msg = `Request failed (HTTP ${res.status}).`;
      try {
        const body = await res.json();
        if (body && body.error) msg = body.error;
      } catch (e) { /* not JSON */ }
      const err = new Error(msg);
      err.status = res.status;
      throw err;
    }
    return json ? res.json() : res.text();
  }

  function showError(e) {
    const a = $("alert");
    a.replaceChildren((e && e.message) || String(e));
    if (e && e.status === 401) {
      const link = document.createElement("a");
      link.href = "/";
      link.textContent = "Sign in on the main page";
      a.append(" ", link, ".");
    }
    a.hidden = false;
  }

  function notice(msg) {
    const n = $("notice");
    n.textContent = msg || "";
    n.hidden = !msg;
  }

  // Returns {start, end}, {none: true} (no char= fragment) or {bad: true, ...}.
  function parseRange(len) {
    let h = location.hash.replace(/^#/, "");
    try { h = decodeURIComponent(h); } catch (e) { /* keep raw */ }
    const m = /^char=(\d*)(,?)(\d*)(?:;.*)?$/.exec(h);
    if (!m || (!m[1] && !m[3])) return { none: true };
    const start = m[1] ? Number(m[1]) : 0;
    const end = m[2] ? (m[3] ? Number(m[3]) : len) : start;
    if (start > end || end > len) return { bad: true, start, end };
    return { start, end };
  }

  function render() {
    if (chars === null) return;
    const pre = $("text");
    const r = parseRange(chars.length);
    if (r.none || r.bad) {
      pre.replaceChildren(document.createTextNode(full));
      notice(r.none
        ? "No passage is selected (the link has no #char=start,end range); showing the whole text."
        : `The requested passage (characters ${r.start}–${r.end}) is outside this text of ${chars.length} characters; showing the whole text.`);
      return;
    }
    notice("");
    const mark = document.createElement("mark");
    mark.id = "quote";
    mark.tabIndex = -1;
    mark.textContent = chars.slice(r.start, r.end).join("");
    pre.replaceChildren(
      document.createTextNode(chars.slice(0, r.start).join("")),
      mark,
      document.createTextNode(chars.slice(r.end).join("")));
    requestAnimationFrame(() => {
      mark.scrollIntoView({ block: "center" });
      mark.focus({ preventScroll: true });
    });
  }

  function showDoc(d) {
    const name = d.name || d.title || `document ${d.id}`;
    $("doc-title").textContent = d.title || name;
    document.title = `${name} — citerag`;
    if (d.title && d.name && d.title !== d.name) $("doc-name").textContent = d.name;
    const href = safeHref(d.file_href);
    if (href) {
      $("file-link").href = href;
      $("file-link").hidden = false;
    }
  }

  async function init() {
    window.addEventListener("hashchange", render);
    const [doc, text] = await Promise.allSettled([get(docUrl, true), get(textUrl, false)]);
    if (doc.status === "fulfilled" && doc.value) showDoc(doc.value);
    else $("doc-title").textContent = "Document unavailable";
    if (text.status === "fulfilled") {
      full = text.value;
      chars = Array.from(full);
      render();
    }
    const failed = text.status === "rejected" ? text : doc.status === "rejected" ? doc : null;
    if (failed) showError(failed.reason);
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
